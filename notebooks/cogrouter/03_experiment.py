# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Step-level thinking depth for agents: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. check the premise CoPO rests on (the most confident level is the one a step needs) before
#    testing CoPO itself;
# 2. say which of the paper's claims hold on DepthWorld: efficiency against always planning, depth
#    that tracks difficulty, and CoPO against GRPO;
# 3. read an efficiency frontier of success against thinking cost.
#
# **Setting (book profile).** DepthWorld and the agent of the implementation notebook. Per seed, one
# CoSFT policy (400 supervised steps on noisy level labels) is the common start of three RL methods,
# each trained on the same task stream of 16 tasks times 4 episodes per iteration, Adam with
# learning rate $10^{-3}$, KL coefficient 0.1 to the CoSFT policy:
#
# - **CoPO**: the paper's method, steps 1-9 (the CogRouter agent);
# - **GRPO**: the same update without the level expansion, isolating the reweighting;
# - **fixed level 4**: the level forced, GRPO on the action head (fixed level 1, in no claim, runs
#   at the paper profile);
#
# and a fourth, **GRPO from scratch**, adaptive levels trained by GRPO from the random initial
# policy, no CoSFT (the paper's GRPO start is not known). **CoSFT alone**, the policy every RL method
# starts from, is the control of the two-stage claim. Every RL agent is trained to the same
# convergence rule: every 25 iterations its success on 300 validation episodes (temperature 0.4) is
# recorded, and it stops when the mean of the last 8 records (200 iterations) is less than half a
# point above the mean of the 8 before, or at the cap of 1500 iterations. Success and thinking cost
# per step are then measured on 300 other fixed evaluation episodes per seed, decoded at temperature
# 0.4 as in the paper (and at 1.0), over five seeds. The claims and thresholds are declared in
# `chapter.yml` before this experiment ran. The toy's limit: thoughts are noisy feature modules, not
# written reasoning, so this tests the credit-assignment rule, not an LLM's ability to think in
# levels.

# %%
# Colab set-up: installs the book's package, replib, from its repository (branch main).
# Anywhere else (a local clone, the book build, CI) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import subprocess

    package = "replib @ git+https://github.com/icml2026-replications/replib-book.git@main"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package],
                         capture_output=True, text=True)
    if pip.returncode != 0:  # show pip's own words, then stop
        print(pip.stdout, pip.stderr)
        raise RuntimeError("installing replib failed: pip's output is printed above")

# %% tags=["parameters"]
profile = None  # "smoke", "book" or "paper"; None reads $REPLIB_PROFILE, else "book"
seeds = None  # list of ints; None takes the profile's seeds
iterations = None  # cap on the RL iterations per method (the convergence rule usually stops earlier)
rl_lr = None  # Adam learning rate of the RL stage
kl_coef = None  # weight of the KL term to the CoSFT policy
methods = None  # subset of cosft, copo, grpo, fixed_l1, fixed_l4, grpo_scratch
workers = None  # processes for the (seed, method) runs; None takes the profile's (2 at book)
run_sweep = None  # also run the exploratory regime search at the end (the profile's default: paper only)

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from replib import core
from replib.papers.cogrouter import experiment, task

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     iterations=iterations, rl_lr=rl_lr, kl_coef=kl_coef, methods=methods, workers=workers,
                     run_sweep=run_sweep)
ledger = core.Ledger("cogrouter", cfg.profile, cfg.seeds, parameters=vars(cfg))
labels = {"cosft": "CoSFT only", "copo": "CoPO (CogRouter)", "grpo": "GRPO", "fixed_l1": "fixed level 1",
          "fixed_l4": "fixed level 4", "grpo_scratch": "GRPO from scratch"}
colors = {"cosft": "0.45", "copo": "C0", "grpo": "C1", "fixed_l1": "C2", "fixed_l4": "C3", "grpo_scratch": "C4"}
cfg

# %% [markdown]
# ## First, the premise

# %%
results = experiment.run_experiment(cfg, progress=core.progress)
results["premise"].set_index("seed").round(3)

# %% [markdown]
# For the CoSFT policy, at every step of a successful episode (temperature 1), we compute the action's
# confidence under each of the four levels, as CoPO does. The table gives the share of recall and plan
# steps whose most confident level is sufficient (c1a: level 3 or 4 at recall, level 4 at plan) and the
# share of routine steps whose most confident level is level 1 (c1b). The mean normalised confidence
# per stage type and level:

# %%
confidence = results["confidence"].groupby(["stage_type", "level"])["mean_c_hat"].mean().unstack()
confidence = confidence.reindex(list(task.STAGE_TYPES))
fig, ax = plt.subplots(figsize=(5, 2.8))
image = ax.imshow(confidence.to_numpy(), cmap="viridis", vmin=0, vmax=1)
ax.set_xticks(range(4), [f"level {level}" for level in confidence.columns])
ax.set_yticks(range(len(confidence)), confidence.index)
ax.grid(False)
for (i, j), value in np.ndenumerate(confidence.to_numpy()):
    ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="w" if value < 0.6 else "k")
fig.colorbar(image, ax=ax, label="normalised confidence")
plt.show()

# %% [markdown]
# *Figure 1. Mean min-max-normalised action confidence of each level (columns) at each stage type
# (rows), CoSFT policy, steps of successful episodes, all seeds. CoPO's weights grow with this
# quantity.*

# %% [markdown]
# ## Every agent trained to the same convergence rule
#
# How many iterations each RL agent ran before the rule stopped it (mean, lowest and highest over
# seeds), and on how many seeds it stopped before the cap (precondition p1):

# %%
stops = results["stops"]
stops.groupby("method").agg(mean_iterations=("iterations", "mean"), lowest=("iterations", "min"),
                            highest=("iterations", "max"), seeds_plateaued=("plateaued", "sum")).rename(index=labels)

# %%
validation = results["validation"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
for method, group in validation[validation.method != "cosft"].groupby("method", sort=False):
    for ax, column in zip(axes, ["success", "cost_per_step"]):
        curve = group.groupby("iteration")[column].agg(["mean", "min", "max"])
        ax.plot(curve.index, curve["mean"], color=colors[method], label=labels[method])
        ax.fill_between(curve.index, curve["min"], curve["max"], color=colors[method], alpha=0.15)
        ends = group[group.iteration == group.groupby("seed")["iteration"].transform("max")]
        ax.scatter(ends.iteration, ends[column], color=colors[method], marker="x", s=25)
for ax, column in zip(axes, ["success", "cost_per_step"]):
    ax.axhline(validation[validation.method == "cosft"][column].mean(), color=colors["cosft"], lw=1,
               label=labels["cosft"])
axes[0].set(xlabel="rl iteration", ylabel="success rate")
axes[1].set(xlabel="rl iteration", ylabel="thinking tokens per step")
axes[0].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. Learning curves: success rate on the validation episodes (left) and thinking tokens per
# step (right) at temperature 0.4 against the RL iteration, per method; lines: mean over the seeds
# still training, bands: the lowest and highest seed, crosses: where each seed stopped. The grey
# line is the CoSFT policy every method but GRPO from scratch starts from.*

# %% [markdown]
# ## Success and thinking cost
#
# On the evaluation episodes, where each agent stopped (CoSFT alone: before any RL):

# %%
evals = results["evals"]
last = evals[evals.iteration == evals.groupby(["seed", "method"])["iteration"].transform("max")]
columns = ["success", "cost_per_step", "steps_per_episode", "level_routine", "level_hard"]
summary = last.groupby(["temperature", "method"])[columns].agg(["mean", "std"])
summary.rename(index=labels).round(3)

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
cold = last[last.temperature == 0.4]
for method, group in cold.groupby("method", sort=False):
    ax.scatter(group.cost_per_step, group.success, color=colors[method], alpha=0.4, s=20)
    ax.scatter(group.cost_per_step.mean(), group.success.mean(), color=colors[method], s=90, label=labels[method],
               edgecolor="k")
ax.set(xlabel="thinking tokens per step", ylabel="success rate")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 3. The efficiency frontier at decoding temperature 0.4: success rate against thinking
# tokens per step after training, one point per seed, and the mean (large marker). Up and to the
# left is better.*

# %% [markdown]
# ## Where the depth goes

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.6))
for method in [m for m in ["copo", "grpo"] if m in cfg.methods]:
    group = validation[validation.method == method].groupby("iteration")
    ax.plot(group["level_routine"].mean(), color=colors[method], label=f"{labels[method]}, routine")
    ax.plot(group["level_hard"].mean(), "--", color=colors[method], label=f"{labels[method]}, recall and plan")
ax.set(xlabel="rl iteration", ylabel="mean level", ylim=(0.9, 4.1))
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 4. Mean chosen level at routine (solid) and at recall and plan stages (dashed) on the
# validation episodes against the RL iteration, temperature 0.4, for CoPO and GRPO from the same
# CoSFT start; mean over the seeds still training.*

# %% [markdown]
# The level distribution per stage type after training (temperature 0.4, all seeds):

# %%
levels = results["levels"]
levels = levels[(levels.temperature == 0.4)
                & (levels.iteration == levels.groupby(["seed", "method"])["iteration"].transform("max"))]
levels.pivot_table(index=["method", "stage_type"], columns="level", values="share").rename(index=labels).round(2)

# %% [markdown]
# At CoPO's expanded steps, the level head's probabilities next to the fixed point $w / \sum w$ its
# expected update aims at (theory notebook), averaged over the expanded steps of the last logged
# iteration, per stage type:

# %%
expansion = results["expansion"]
if len(expansion):
    final_expansion = expansion[expansion.iteration == expansion.groupby("seed")["iteration"].transform("max")]
    columns = [f"pi_l{i}" for i in range(1, 5)] + [f"target_l{i}" for i in range(1, 5)]
    display(final_expansion.groupby("stage_type")[columns].mean().round(2))

# %% [markdown]
# ## The claims

# %%
values = experiment.claim_values(results, cfg)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# ## Looking for the paper's direction (exploratory, not judged)
#
# The digest's pilot found CoPO losing to GRPO in this small-policy regime. The issue that commissioned
# this chapter asks us to look honestly for a regime where CoPO wins: a smaller learning rate, a
# stronger KL term, and the digest's "strong" task variant (plan answers learnable from the
# observation, and mistakes that lower the final success probability instead of ending the episode).
# One seed each, the same convergence rule; success at temperature 0.4. Setting 0 repeats the main
# run's settings on its first seed, as a reproduction check. To keep the book profile within its
# budget this search runs at the paper profile only (or with `-p run_sweep=True`); its result at the
# book profile before this revision is quoted below.

# %%
if cfg.run_sweep:
    settings = [{}, {"rl_lr": 3e-4}, {"kl_coef": 0.5}, {"variant": "strong"}]
    if cfg.profile == "smoke":
        settings = [{"iterations": 3}]
    sweep = experiment.regime_sweep(cfg, cfg.seeds[0], settings)
    sweep = sweep[sweep.temperature == 0.4]
    display(sweep.pivot_table(index=["setting", "rl_lr", "kl_coef", "variant"], columns="method",
                              values=["success", "cost_per_step"]).round(3))

# %% [markdown]
# ## What we learned
#
# *Written for the book-profile run (five seeds, every RL agent trained to the convergence rule);
# the numbers above come from whatever run produced this page.*
#
# - **Every agent was trained to its plateau (p1 holds on all five seeds).** The rule stopped CoPO
#   after 375 to 525 iterations, GRPO after 400 to 650 and the fixed level-4 agent after 875 to 1275,
#   all before the 1500 cap. GRPO from scratch stopped at the earliest point the rule allows (375
#   iterations): its validation success was zero throughout. Before this revision every agent ran a
#   fixed 500 iterations, where the fixed level-4 agent was still climbing.
# - **The premise is in place (c1a 0.997, c1b 0.78), so the toy can test CoPO.** Both are premises,
#   shown and not counted as evidence. Under the CoSFT policy (temperature 1) the most confident
#   level was a sufficient one at almost every recall and plan step, and level 1 at 71% to 81% of
#   routine steps. This holds by construction: the noisy re-descriptions of levels 2-4 were built to
#   make needless thinking blur an easy decision; c1 checks that CoSFT learned it.
# - **Efficiency against always planning (c2a holds, 0.44; c2b holds, +8.3 ± 3.5 points).** CoPO
#   spent 57 tokens per step against 130 for the agent fixed at level 4, and succeeded more often
#   (0.83 against 0.75). Trained to its plateau, the fixed level-4 agent rose from 0.52 to 0.75, so
#   the success margin shrank from +12.7 points (before this revision, 500 iterations, three seeds)
#   to +8.3, between +4.7 and +12.7 per seed; it still clears the declared -3 on every seed.
# - **But the efficiency and the depth come from CoSFT, and CoPO adds no success to it (c5 fails,
#   -0.4 ± 1.4 points, no seed clears +3).** CoSFT alone, the policy CoPO starts from, succeeded as
#   often (0.835 against 0.831) for fewer tokens: its cost ratio against fixed level 4 is 0.33 (m2)
#   against CoPO's 0.44, and its depth gap is 2.47 levels (m3: 3.49 at recall and plan stages, 1.02
#   at routine ones) against CoPO's 2.07 (c3 holds: 3.65 against 1.57). The RL stage as CoPO runs it
#   moved 29% of routine steps off level 1 and raised the cost by about 15 tokens per step. The same RL
#   budget spent by GRPO from the same start did add success (0.90, +6.6 points over CoSFT alone) at
#   CoSFT's cost (43 tokens): the paper's two-stage claim holds in this toy only with GRPO as the
#   second stage.
# - **The reweighting hurts (c4 fails, -6.9 ± 1.6 points, no seed clears -3).** From the same CoSFT
#   start, GRPO reached 0.90 at temperature 0.4 and 0.77 at temperature 1.0; CoPO 0.83 and 0.39.
#   Before this revision (three seeds, 500 iterations each) the verdict was fragile, -2.8 ± 1.3;
#   trained to the same convergence rule over five seeds, every seed falls short, by 4.7 to 8.7
#   points. At 0.4 both methods pick a sufficient level at nearly every hard step, so the gap comes
#   from the routine steps CoPO moved to noisy levels, where wrong actions waste steps (9.9 steps per
#   episode against GRPO's 9.6), and from the action head, which GRPO improved. At temperature 1 the
#   soft level targets matter directly. This is the theory notebook's fixed point at work: at
#   expanded routine steps the level head sits close to $w / \sum w$ (0.42 on level 1 against a
#   target of 0.37, at the last logged iteration, after its update), not at the most confident
#   level.
# - **No regime we tried reverses it (exploratory; before this revision).** With a learning rate of
#   $3 \times 10^{-4}$, a KL coefficient of 0.5, or the "strong" task variant, CoPO stayed 6 to 8
#   points behind GRPO on one seed (0.79 to 0.90 against 0.87 to 0.96, 500 iterations each). That
#   search now runs at the paper profile only, to keep this notebook within its budget. Untried: the
#   paper's regime itself, a 7B model with a learning rate of $5 \times 10^{-7}$ whose thoughts are
#   written, where the level variants could teach the model something our fixed feature modules
#   cannot.
# - **The paper's +14 points over GRPO hold, but they measure CoSFT (m1 holds, +83 points).** This
#   headline claim is judged as the paper states it, against GRPO without CoSFT. GRPO from a random
#   start did not solve a single evaluation episode: ten stages with recall and plan steps are out of
#   reach of a random policy, so the outcome-only reward gives it no signal. Whatever the paper's +14
#   points contain, in this toy a comparison that does not share the CoSFT start measures CoSFT; the
#   same-start controls c4 and c5 are the ones that isolate CoPO, and both fail.
#
# ## What we scaled down, and why the effect should survive it
#
# - **The agent.** Two small MLPs instead of a 7B LLM, and fixed noisy feature modules instead of
#   thoughts the model writes. CoPO's credit rule only sees action confidences per level, which the
#   toy produces too, but differently: the paper's policy writes the other levels' thoughts for the
#   action it already chose (a rationalisation), ours are fixed noisy read-outs that never see it. What
#   the toy cannot show is an LLM learning to write better thoughts.
# - **The task.** DepthWorld's three stage types stand in for household and science tasks; depth
#   matters at about a third of the stages (36%, since the first stage is always routine).
# - **The training.** A learning rate of $10^{-3}$ (the paper uses $5 \times 10^{-7}$ on a 7B model),
#   one update per iteration, 16 tasks times 4 episodes, each agent until its validation success
#   stops rising (at most 1500 iterations). The rule's window and threshold were set on the
#   baselines alone; a slower drift than half a point per 200 iterations (the fixed level-4 agent
#   still gains a little) is below what 300 validation episodes can resolve. The paper's CoSFT data
#   and its GRPO baseline's start are unknown. Fixed level 1, which no claim uses, runs at the paper
#   profile only (it scored about 0.04 before this revision).
#
# ## Reading the verdicts

# %%
ledger.report()

# %% [markdown]
# ## Summary
#
# On DepthWorld the headline claims hold (fewer tokens, no loss of success against an agent that
# always plans, trained to its plateau, and far more success than GRPO without CoSFT), and the
# premise of CogRouter is in place: the level that makes the right action most likely is the level
# the step needs (by construction). But the controls that isolate the second stage fail. The CoSFT
# policy alone was as successful as CogRouter and cheaper, with a larger depth gap, so the efficiency
# and the depth that tracks difficulty come from CoSFT's level labels; and from the same CoSFT start,
# plain GRPO beat CoPO by about 7 points at the paper's decoding temperature on every one of five
# seeds (and by about 38 at temperature 1), because CoPO's expected update from successful steps
# drives each state's level distribution towards the normalised weights rather than to the best
# level. The toy cannot test whether written thoughts in a large model would change that.
#
# ## Exercises
#
# 1. Run with `-p kl_coef=1.0`. Does a stronger pull towards the CoSFT policy help CoPO, GRPO, or
#    neither, and why would it matter more for CoPO's soft level targets?
# 2. CoPO's weights use $k = 2$. Using the fixed point of the theory notebook, predict the level-4
#    probability at plan steps for $k = 4$, then try it by calling `method.build_batch(..., k=4.0)` in
#    the implementation notebook's CoPO iteration.
# 3. The claims use temperature 0.4. Compare CoPO and GRPO at temperature 1.0 in the success table.
#    Which method gains more from the low temperature, and what does the fixed point predict?
