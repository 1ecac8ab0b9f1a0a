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
# # Step-level thinking depth for agents: theory
#
# **Learning goals.** After this notebook you can
#
# 1. describe the four cognitive levels and how an agent answers with a level, a thought and an action;
# 2. compute CoPO's level weights from action confidences, and their bounds (CoPO, cognition-aware
#    policy optimisation, is the paper's reinforcement-learning stage);
# 3. derive where CoPO's expected update from successful steps drives the level distribution at one
#    state, and why that target is never sharper than $e^k / (e^k + 3)$ at temperature 1;
# 4. contrast CoPO's step-level credit with GRPO's trajectory-level credit (GRPO, group relative
#    policy optimisation, gives every step of an episode the episode's return, normalised within a
#    group of episodes of the same task).
#
# **Sources.** "Think Fast and Slow: Step-Level Cognitive Depth Adaptation for LLM Agents", ICML 2026
# ([arXiv 2602.12662](https://arxiv.org/abs/2602.12662)), with official code
# ([rhyang2021/CogRouter](https://github.com/rhyang2021/CogRouter)); an LLM agent is a large language
# model that acts in an environment step by step. Only the abstract and the opening of the
# introduction could be read, so the paper's equations were not available; the algorithm follows the
# official code, which decided every step of CoPO (details at the end of this notebook).

# %%
# Colab set-up: installs the book's package, replib, from its repository, at the book's version.
# Anywhere else (a local clone, the book build, CI) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import json
    import subprocess
    import time
    from importlib.metadata import distribution

    package = "replib @ git+https://github.com/icml2026-replications/replib-book.git@main"
    print("installing replib from the book's repository at main ...", end=" ", flush=True)
    started = time.time()
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package],
                         capture_output=True, text=True)
    if pip.returncode != 0:  # show pip's own words, then stop
        print(pip.stdout, pip.stderr)
        raise RuntimeError("installing replib failed: pip's output is printed above")
    origin = json.loads(distribution("replib").read_text("direct_url.json") or "{}")
    commit = origin.get("vcs_info", {}).get("commit_id", "unknown")[:7]
    print(f"done in {time.time() - started:.0f} s: replib {distribution('replib').version}, commit {commit}")

# %% tags=["parameters"]
profile = None  # "smoke", "book" or "paper"; None reads $REPLIB_PROFILE, else "book"

# %%
import matplotlib.pyplot as plt
import numpy as np

from replib import core
from replib.papers.cogrouter import method, theory

core.set_style()
profile = core.resolve_profile(profile)  # checked only: this notebook runs the same at every profile

# %% [markdown]
# ## Levels, thoughts and actions
#
# At every step the agent writes `<level>l</level><think>z</think><action>a</action>`. The four
# levels are nested templates of growing length (from the official prompts): level 1, *instinctive
# response*, a fixed sentence and no analysis; level 2, *situational awareness* (state, available
# actions, reasoning); level 3, *experience integration* (adds the goal and a reflection on recent
# steps); level 4, *strategic planning* (adds an evaluation of every candidate action). Training has
# two stages: **CoSFT**, supervised fine-tuning (SFT, imitating labelled responses) on responses in
# this format, then **CoPO**, reinforcement learning whose credit depends on the level.
#
# ## CoPO's weights
#
# CoPO starts from GRPO's trajectory advantage $A_\tau$ (the advantage is how much better than
# expected an outcome was: here the episode's return, normalised within a group of episodes of the
# same task). For each step of a *successful* episode in a group with mixed
# outcomes it builds four variants of the step, one per level, each with that level's thought and the
# *same* action $a$, and measures how confident each level makes the action:
#
# $$c_l = \exp\Big(\frac{1}{|a|}\sum_j \log \pi_\theta(a_j \mid s, l, z_l, a_{<j})\Big), \qquad
# \hat c_l = \frac{c_l - \min_{l'} c_{l'}}{\max_{l'} c_{l'} - \min_{l'} c_{l'}}, \qquad
# w_l = \frac{e^{k \hat c_l}}{\frac14 \sum_{l'} e^{k \hat c_{l'}}},$$
#
# with $k = 2$ and $\hat c_l = 0.5$ for all $l$ when the range is below $10^{-6}$. All four variants
# enter the batch with advantage $w_l A_\tau$. Because of the min-max step, one variant always sits at
# $\hat c = 0$ and one at $\hat c = 1$, so the largest weight is exactly $e^k \approx 7.4$ times the
# smallest, *however small the confidence differences are*:

# %%
low, high = theory.weight_bounds(2.0)
print(f"weights lie in [{low:.3f}, {high:.3f}] for k = 2")
for c in ([0.90, 0.91, 0.92, 0.93], [0.10, 0.20, 0.30, 0.95], [0.5, 0.5, 0.5, 0.5]):
    w = method.copo_weights(c)
    print(f"confidences {c} -> weights {np.round(w, 2)}, max/min {w.max() / w.min():.2f}")

# %%
gaps = np.logspace(-7, 0, 60)
w_top = [method.copo_weights([0.5, 0.5, 0.5, 0.5 + g])[3] for g in gaps]
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(gaps, w_top)
ax.axhline(high, color="k", ls="--", lw=0.8)
ax.set(xscale="log", xlabel="confidence gap of the best level", ylabel="its weight $w$")
plt.show()

# %% [markdown]
# *Figure 1. The weight of the most confident level when the other three levels tie, against its
# confidence gap (log scale); the dashed line is the upper bound $4e^2/(3 + e^2) \approx 2.85$. Below
# a gap of $10^{-6}$ the fallback sets every $\hat c$ to 0.5, so all weights are 1.*
#
# A gap of $10^{-5}$ gets the same full weight as a gap of 0.5. At steps where every level makes the
# action almost equally likely (routine steps), the weights are then decided by noise: a pitfall of
# the min-max normalisation.
#
# ## Where the expected update drives the level choice
#
# Take one state and a positive advantage $A$. With a softmax level head $\pi = \mathrm{softmax}(\theta)$,
# the four variants' contribution to the gradient of $\sum_l w_l A \log \pi(l \mid s)$ is
#
# $$A \sum_l w_l (e_l - \pi) = A\,\big(w - (\textstyle\sum_l w_l)\,\pi\big),$$
#
# whichever level was sampled. It vanishes at $\pi = w / \sum_l w_l$: from successful steps, CoPO
# pulls the level distribution towards the normalised weights, not towards the most confident level.
# With $k = 2$ that target gives the most confident level at most $e^2 / (e^2 + 3) \approx 0.71$ at
# temperature 1; decoding at temperature 0.4, as the paper evaluates, sharpens it. (Failed episodes
# are not expanded: their GRPO term pushes away from the levels that failed, so at states where
# failures happen, such as hard steps, the level choice can end up sharper than the target.) Iterating
# the expected update for two confidence profiles, a plan-like step (level 4 clearly best) and a
# routine-like step (all levels nearly equal, with noise):

# %%
profiles = {"plan-like": ([0.25, 0.25, 0.30, 0.95], 0.0), "routine-like": ([0.95, 0.93, 0.93, 0.92], 0.03)}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), sharey=True)
for ax, (name, (c, noise)) in zip(axes, profiles.items()):
    for temperature, style in [(1.0, "-"), (0.4, "--")]:
        pi = theory.iterate_level_update(c, k=2.0, lr=0.1, iters=300, temperature=temperature, noise_sd=noise)
        for level in range(4):
            ax.plot(pi[:, level], style, color=f"C{level}", label=f"level {level + 1}, T = {temperature}")
    ax.set(title=name, xlabel="iteration", ylabel="p(level)")
axes[1].legend(fontsize="x-small", ncol=1, loc="upper left", bbox_to_anchor=(1.02, 1.0))
plt.show()
print("fixed point for the plan-like profile:", np.round(theory.level_fixed_point(method.copo_weights(profiles["plan-like"][0])), 3))

# %% [markdown]
# *Figure 2. The level distribution at one state under CoPO's expected update with a positive
# advantage, for a plan-like confidence profile (left) and a noisy routine-like profile (right);
# solid: temperature 1, dashed: the same logits decoded at temperature 0.4.*
#
# At the plan-like step the level-4 probability settles near 0.70, not 1 (0.98 when decoded at
# temperature 0.4). At the routine-like step, where noise often decides which level looks most
# confident, the weights keep changing order: level 1 is only mildly preferred (about 0.4 at
# temperature 1) and the distribution fluctuates, so the expensive levels keep a large share at steps
# that do not need them.
#
# ## GRPO's credit against CoPO's
#
# GRPO gives every step of an episode the same advantage. Take a 12-step episode that succeeds
# exactly when level 4 is chosen at its one hard step (the level at the 11 routine steps does not
# matter), a uniform level distribution at both kinds of step, and action confidences
# $c = (0.25, 0.25, 0.3, 0.95)$ at the hard step and $(0.95, 0.9, 0.9, 0.88)$ at routine steps. With
# many episodes per group (the large-group limit) the success rate is $p = \pi(4)$ at the hard step,
# and a success and a failure get the advantages $A_+ = (1 - p)/\sigma$ and $A_- = -p/\sigma$ with
# $\sigma = \sqrt{p(1 - p)}$. The expected gradient on the level logits at each kind of step:

# %%
uniform = (0.25, 0.25, 0.25, 0.25)
credit = theory.grpo_vs_copo_credit_example(pi_hard=uniform, pi_routine=uniform, c_hard=(0.25, 0.25, 0.3, 0.95),
                                        c_routine=(0.95, 0.9, 0.9, 0.88), k=2.0, n_steps=12)
credit.pivot_table(index=["method", "step"], columns="level", values="grad").round(3)

# %% [markdown]
# At the hard step GRPO's expected gradient is the true gradient of the success rate, and it favours
# level 4. At routine steps it is zero in expectation (their level does not change the outcome, so
# only sampling noise moves them). CoPO changes both: at the hard step its push towards level 4 is
# even larger here, because a successful step enters the batch as four weighted copies, but its
# target is $w / \sum w$ (0.70 on level 4), not certainty; at routine steps it adds a systematic pull
# towards $w / \sum w$, which here favours level 1. Whether that pull lowers the cost
# or raises it depends on whether level 1 really is the most confident level at routine steps: that
# is the premise the experiment checks first.
#
# ## What to expect in the experiment
#
# - If the premise holds (deep levels most confident at hard steps, level 1 at routine steps), CoPO
#   should route depth to the hard steps and spend far fewer tokens than an agent that always plans.
# - Against GRPO from the same start, CoPO's softer level targets may cost success: its fixed point
#   cannot make level 4 certain at hard steps.
# - A second, plainer effect of the expansion: a successful step enters the batch four times, with
#   weights of mean 1, while a failed step enters once. In a loss averaged over samples the failed
#   episodes' negative advantages then weigh less against the successes than in GRPO. The experiment
#   tests this and the soft target separately, with two controls that each change one factor: the
#   four variants weighted $w_l / 4$ (one sample's worth, the same target), and the level head trained
#   on the sampled level only (no soft target, the weighted action variants kept).
# - Both the routing and the efficiency could come from CoSFT alone, whose level labels already
#   route depth; the experiment takes the CoSFT policy as the null of every headline (the RL stage
#   must add something to it), and measures the room above it with an oracle router that picks the
#   minimal sufficient level at every stage.
# - The toy's "thoughts" are noisy feature modules, not written reasoning: it tests the credit rule,
#   not an LLM's ability to think at a level.
#
# ## Summary
#
# CoPO replaces GRPO's single trajectory advantage by four level variants of every successful step,
# weighted by how confident each level makes the action. The min-max normalisation fixes the spread
# of the weights at $e^k$ whatever the confidence differences, and the expected update from successful
# steps drives each state's level distribution to the normalised weights, at most about 0.71 on the
# best level at temperature 1. Credit becomes step-level, at the price of soft targets and of noise at
# steps where all levels are equally good.
#
# ## Exercises
#
# 1. Show that $\min_l w_l \ge 4 / (1 + 3e^k)$ and $\max_l w_l \le 4e^k / (3 + e^k)$, and when each bound
#    is reached.
# 2. For which $k$ does the fixed point put at least 0.9 on the best level when the other three tie at
#    $\hat c = 0$?
# 3. In the credit example, what happens to CoPO's update at a routine step if the advantage is
#    negative? Why does CoPO expand only successful episodes?
#
# ## Sources in detail
#
# Only the abstract and the opening of the introduction of the paper could be read; its equations
# were not available. The algorithm (CoPO's steps 1-9, numbered by us after what the official code
# does: rollouts, the trajectory advantage, the choice of steps to expand, the level variants, the
# action confidences, the min-max normalisation, the weights, the reweighted batch and the clipped
# update) follows the official code. How the paper built its CoSFT data is not stated in what we
# could read, and its data file is not in the public code. The analysis in this notebook (weight
# bounds, the fixed point of the level update, the comparison with GRPO's credit) is ours.
