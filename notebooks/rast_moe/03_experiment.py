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
# # Regime-aware MoE for delayed matching: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say which of the paper's claims hold in a small grid city: total reward and delays against the
#    strongest baseline, transfer to an unseen regime, expert specialisation, and the adaptive
#    penalty against a fixed weighting;
# 2. check that the base models learn the toy before the method is judged;
# 3. re-run the experiment with more training, more experts or other seeds from the `parameters`
#    cell.
#
# **Setting (book profile).** The $4 \times 4$ city of the implementation notebook (40 vehicles, days
# of 48 one-minute epochs: off-peak, central peak, off-peak, corner peak). Per seed, PPO trains four
# agents with the same budget (12 iterations of 6 simulated days, Adam $10^{-3}$, the same PPO
# hyperparameters and the same training days):
#
# - **MLP**: the prior work's shallow encoder (two layers of 128), adaptive reward;
# - **Transformer**: the dense Transformer encoder (two blocks, $d = 32$), adaptive reward;
# - **MoE**: the paper's method, the same Transformer with a sparse MoE (8 experts, top 2, routed
#   from the pooled state) in its last block, adaptive reward;
# - **MoE, fixed 1:8**: the same MoE trained on the fixed matching:pickup weighting 1:8 without a
#   penalty (one of the paper's fixed ratios).
#
# The heuristics need no training: release every $h \in \{1, 2, 3, 4, 6\}$ epochs, and a threshold
# rule. Every policy is evaluated greedily (release where $\sigma(\ell_z) > 0.5$) on the same 10
# held-out days per seed, and on 10 days of an **unseen regime**: demand $\times 1.3$ and both peaks
# on the bottom edge of the city, where no training day had its hotspot. The claims and their
# thresholds were declared in `chapter.yml` before this experiment ran.

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
iterations = None  # PPO iterations per agent
n_envs = None  # simulated days per PPO iteration
eval_days = None  # held-out days per seed and condition
n_experts = None  # experts of the MoE block
top_k = None  # experts chosen per state
n_vehicles = None  # fleet size
day_epochs = None  # decision epochs (minutes) per day
lr = None  # Adam learning rate
eta = None  # step of the multiplier update, Eq. (6)
lam0 = None  # starting multiplier
tolerance = None  # violation tolerance of the adaptive penalty

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.rast_moe import experiment

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     iterations=iterations, n_envs=n_envs, eval_days=eval_days, n_experts=n_experts, top_k=top_k,
                     n_vehicles=n_vehicles, day_epochs=day_epochs, lr=lr, eta=eta, lam0=lam0, tolerance=tolerance)
ledger = core.Ledger("rast_moe", cfg.profile, cfg.seeds, parameters=vars(cfg))
labels = {"mlp": "PPO, MLP", "transformer": "PPO, Transformer", "moe": "PPO, MoE (RAST-MoE)",
          "moe_fixed_1_8": "PPO, MoE, fixed 1:8"}
cfg

# %% [markdown]
# ## Running every agent and heuristic

# %%
results = experiment.run_experiment(cfg, progress=core.progress)
evals = results["evals"]
columns = ["reward", "match_delay", "pickup_delay", "abandon_rate", "matched"]
evals.groupby(["condition", "policy"])[columns].mean().round(3)

# %% [markdown]
# Means over seeds: `reward` is the total evaluation reward of a day (minus matching delay plus
# pickup delay plus 600 s per abandoned request, in units of 600 s), delays in seconds over the
# matched requests, `abandon_rate` the share of requests that waited 10 minutes and left.
#
# ## First, the premise and the base models
#
# The best fixed release interval per regime (heuristics on the held-out days, reward summed per
# regime and averaged per day):

# %%
regimes = results["regimes"]
fixed = regimes[regimes["policy"].str.startswith("interval_")].assign(
    interval=lambda d: d["policy"].str.removeprefix("interval_").astype(int))
fig, ax = plt.subplots(figsize=(6.5, 3.4))
sns.lineplot(fixed, x="interval", y="reward", hue="regime", marker="o", errorbar="sd", ax=ax)
ax.set(xlabel="release interval h (epochs)", ylabel="reward per day in the regime")
plt.show()

# %% [markdown]
# *Figure 1. Total reward earned in each regime against the fixed release interval (means over the
# seeds' held-out days, bands one standard deviation over seeds).*

# %%
history = results["history"]
fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
for name, group in history.groupby("agent", sort=False):
    curve = group.groupby("iteration")
    axes[0].plot(curve["train_return"].mean(), label=labels[name])
    axes[1].plot(curve["lam"].mean(), label=labels[name])
    axes[2].plot(curve["violation"].mean(), label=labels[name])
axes[0].set(xlabel="ppo iteration", ylabel="training return per day (per zone)")
axes[1].set(xlabel="ppo iteration", ylabel="lambda")
axes[2].axhline(0.05, color="grey", ls=":", lw=1)
axes[2].set(xlabel="ppo iteration", ylabel="abandonment rate (training)")
axes[0].legend(fontsize="small")
fig.tight_layout()
plt.show()

# %% [markdown]
# *Figure 2. Training, means over seeds: the training return per day (each agent on its own
# reward, so the fixed 1:8 agent's is not comparable), the multiplier $\lambda$ (the fixed agent has
# none) and the abandonment rate of the training days against the 5% tolerance.*
#
# ## Delays and rewards per policy

# %%
view = evals[evals["policy"].isin(["interval_1", "interval_2", "interval_3", "threshold", *labels])]
melted = view.melt(id_vars=["seed", "policy", "condition"], value_vars=["reward", "match_delay", "pickup_delay",
                                                                         "abandon_rate"])
grid = sns.catplot(melted, kind="bar", y="policy", x="value", hue="condition", col="variable", sharex=False,
                   errorbar="sd", height=3.6, aspect=0.8, orient="h")
grid.set_titles("{col_name}")
grid.set_axis_labels("", "")
plt.show()

# %% [markdown]
# *Figure 3. Total reward, mean matching delay (s), mean pickup delay (s) and abandonment rate per
# policy on the held-out days of the training regimes ("seen") and of the unseen regime; bars are
# means over seeds, error bars one standard deviation.*
#
# ## Inside the router

# %%
routing = results["routing"]
first = routing[routing["seed"] == cfg.seeds[0]]
usage = pd.crosstab(first["regime"], first["top1"], normalize="index")
fig, ax = plt.subplots(figsize=(6.5, 2.6))
sns.heatmap(usage, annot=True, fmt=".2f", cmap="viridis", vmin=0, vmax=1, ax=ax, cbar_kws={"label": "share"})
ax.set(xlabel="top-1 expert", ylabel="")
plt.show()

# %% [markdown]
# *Figure 4. Share of the states of each regime routed to each top-1 expert, MoE policy, held-out
# days of the first seed (expert numbers are not comparable across seeds).*
#
# The masking ablation switches off, at evaluation, the expert most often chosen and the one least
# often chosen (among the top 2) on the held-out days:

# %%
results["masks"][["seed", "masked", "expert", "usage", "reward", "abandon_rate"]].round(3)

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its role and threshold before this experiment ran.
# The values are computed per seed; a claim holds when the whole 95% interval of the mean over seeds
# clears the threshold, fails when the whole interval misses it, and is undecided when the interval
# contains it. Claims that require the
# precondition `p1_ppo_learns` are inconclusive if it does not hold.

# %%
values = experiment.claim_values(results, cfg)
ledger.record_all(values)
ledger.save()
ledger.table()

# %%
pd.DataFrame(values).round(4)

# %% [markdown]
# ## What we scaled down, and why the effect should survive it
#
# - **City and data.** A synthetic $4 \times 4$ km grid with 40 vehicles and four regimes in a
#   48-minute day, instead of San Francisco's 2019 TNC traces, its road network and hourly
#   origin-destination table. Only directions are comparable, not minutes or percentages.
# - **Congestion.** Instantaneous fleet density in a Greenshields-style relation instead of an
#   hourly MFD-consistent table; it keeps the feedback of long pickups on speed.
# - **Model.** About 47 thousand parameters (8 experts, top 2) instead of 12 million (16 experts,
#   top 4); the `paper` profile uses 16 experts and top 4 and trains longer. A MoE advantage may need
#   more capacity, more regimes or more training than the toy has; the claims test whether any of it
#   shows at this scale.
# - **Training.** 12 PPO iterations of 6 days per agent (about 3,500 decisions per zone), with the
#   digest's PPO hyperparameters; the paper trains for millions of rollouts.
# - **Credit.** Each zone's decision is credited with its own requests' costs (per-zone rewards,
#   values and advantages, summed to the city's reward), our choice: with one city-wide reward the
#   pilots of the base models did not learn within the budget.
# - **Reward and penalty.** The evaluation reward, the per-request penalty $\lambda n^{abandoned}$,
#   the multiplier step $\eta = 10$ and its start $\lambda_0 = 1$ are ours or the digest's; the paper's
#   are not stated.
#
# ## Reading the verdicts
#
# The sentences below are generated from the claims table, so they always match this run.

# %%
ledger.report()

# %% [markdown]
# ## What we learned
#
# What the book-profile run (seeds 0, 1 and 2) shows, and why we think so. These bullets were written
# for that run; at other profiles or seeds, trust the tables above.
#
# - **The base models learn the toy (p1 holds), and so does the MoE, to the same policy.** On the
#   held-out days PPO with the MLP, with the dense Transformer and with the MoE all end at exactly
#   the total reward of the best fixed interval, $-86.41$ per day on average (every seed: gain 0.000
#   against the best fixed interval). Their greedy policies release every zone with waiting requests
#   at every epoch: on every evaluation day they make the same decisions as the "match every epoch"
#   rule, down to the same matching delay (54.3 s), pickup delay (204.5 s) and abandonment rate
#   (3.9%).
# - **So the headline fails: no gain over the strongest baseline (h1: 0.000 on every seed, against
#   the paper's more than 13%), and no lower matching (h2: ratio 1.000, paper $-10\%$) or pickup
#   delay (h3: 1.000, paper $-15\%$).** The strongest baseline is the MLP agent (or the tied
#   every-epoch rule), and the MoE agent does exactly what it does.
# - **The regime-dependent optimum is there, but the agents do not exploit it (pr1 shown, c1 fails).**
#   Matching every epoch is best off-peak, while in the corner peak the best fixed interval is longer
#   by 3, 3 and 2 epochs on the three seeds (Figure 1). A policy that held only in the corner peak
#   could gain a few percent over the best fixed rule, far less than 13%. Within 12 iterations of 6
#   days, PPO found the myopic policy and stayed there: with our per-zone credit, holding costs the
#   zone 60 s per waiting request at once, while the shorter pickup it may buy comes later and only
#   sometimes. The sampled training policies still hold now and then (Figure 2), but their mode is
#   "release".
# - **No transfer gain on the unseen regime (c2 fails: 0.000).** On the days with 1.3 times the demand
#   and both peaks on the bottom edge, all three agents again match every epoch and tie
#   ($-164.17$ per day, 17.5% abandonment, the fixed intervals between $-164.2$ and $-176.7$).
# - **The router does track the regime (c3a holds: NMI 0.30, 0.39, 0.25).** The pooled state carries
#   the time of day and the demand pattern, and the top-1 expert differs by regime (Figure 4). But
#   specialisation does not buy anything here: masking the most-used expert (chosen for 42% to 50% of
#   the states) or the least-used one (0% to 8%) changes no decision, so the total reward is
#   unchanged (c3b, c3c fail: 0.000 on every seed). The release decision is so clear-cut at this
#   budget ("release whenever a request waits") that any expert gives it: a specialisation that
#   the policy does not need, as a reviewer suspected for rarely used experts.
# - **The adaptive penalty keeps abandonment near the tolerance (c4a fragile: 0.0217, 0.0042, 0.0150
#   from 5%).** The MoE agent abandons 3.9% of requests on average (seed 0: 2.8%, just outside the
#   declared $\pm 2$ points). During training the sampled policies abandon 5% to 7% of requests, so
#   $\lambda$ climbs from 1 to about 1.2 (Transformer) and 1.6 (MLP, MoE) and the training
#   abandonment settles near the 5% line (Figure 2); the greedy policy, which never holds, abandons
#   less.
# - **The fixed pickup-heavy weighting is hacked (c4b holds: 0.56, 0.66, 0.15).** Trained on
#   matching:pickup = 1:8 without a penalty, the MoE agent learns to hold: requests that are never
#   matched cost it only their waiting time, and 53% of them abandon (on the unseen days 59%); the
#   few it matches have short pickups (92 s against 204 s). This is the failure mode the paper's
#   adaptive penalty is designed to remove, and it appears on every seed.
#
# ## Summary
#
# In a $4 \times 4$ grid city with demand regimes, PPO learns delayed matching as well as the best
# fixed release rule, whatever its encoder, but not better: the MLP, the dense Transformer and the
# regime-routed MoE all converge to matching every epoch, so the paper's headline gains (13% reward,
# $-10\%$ matching delay, $-15\%$ pickup delay) and its transfer claim are not reproduced at this
# scale. The MoE router does separate the regimes, yet masking its experts changes nothing, because
# the learned policy does not depend on them. The adaptive multiplier keeps abandonments near 5%,
# while a fixed 1:8 weighting lets half the requests abandon: the anti-hacking mechanism works as
# described. Re-run with more training or a paper-sized MoE, for example
# `replib run rast_moe --profile paper` or `-p iterations=60 -p n_experts=16 -p top_k=4`.
#
# ## Exercises
#
# 1. Train longer (`iterations = 60`). Does any encoder learn to hold in the corner peak, and does
#    the MoE then gain over the dense encoders?
# 2. Make holding pay more: fewer vehicles (`n_vehicles = 30`). How do the best fixed intervals per
#    regime (Figure 1) and the claims change?
# 3. Evaluate the trained agents with sampled instead of greedy actions (`greedy=False` in
#    `experiment.evaluate_policy`). Is the stochastic policy better or worse than its mode, and why?
# 4. Use 16 experts and top 4 (the paper's setting). Does the routing become more or less
#    regime-specific (claim c3a)?
