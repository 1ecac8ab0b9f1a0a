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
# # RL from off-policy prefixes: theory
#
# **Learning goals.** After this notebook you can
#
# 1. explain why group-relative reinforcement learning (RL) gets no gradient on problems the policy
#    almost never solves, and how much a prefix of a correct trace changes that;
# 2. state the prefixed objective and argue why its optimum is the optimum of the original one;
# 3. see on a combination lock why starting from states along a correct trace turns an exponential
#    number of policy-gradient iterations into a polynomial one;
# 4. explain why improvement on prefixed problems can carry back to the unprefixed ones only when
#    parameters are shared across states.
#
# **Sources.** Setlur, Wang, Cohen, Rashidinejad and Xie, "Reuse your FLOPs: Scaling RL on Hard
# Problems by Conditioning on Very Off-Policy Prefixes", ICML 2026
# ([arXiv 2601.18795](https://arxiv.org/abs/2601.18795)); FLOPs are floating-point operations, that is
# compute, and an off-policy prefix is the start of a correct answer written by something other than
# the policy being trained. Only the abstract, the first lines of the introduction and third-party
# summaries could be read, and no official code was found. The loop follows the abstract; the paper's
# theorems were not available, so the arguments and every number below are ours (see "Sources in
# detail" at the end).

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
from replib.papers.prefixrl import theory

core.set_style()
profile = core.resolve_profile(profile)

# %% [markdown]
# ## Hard problems starve group-relative RL
#
# RL with a verifier (a program that checks an answer): a policy $\pi_\theta$ answers a problem $x$
# with $y = (y_1, \dots, y_T)$ and gets reward $r(x, y) \in \{0, 1\}$. Group-relative methods (GRPO,
# group relative policy optimization, and its relatives) draw $G$ answers per problem and weight each
# answer's log-likelihood gradient by its advantage
#
# $$A_i = \frac{r_i - \bar r}{\operatorname{std}(r_1, \dots, r_G) + \epsilon}.$$
#
# If all $G$ rewards are equal the advantages are all zero, and so is the update from that problem. With
# success probability $p$ per answer, a group carries signal with probability
#
# $$P(\text{signal}) = 1 - (1 - p)^G - p^G.$$
#
# Take a combination lock: $H$ steps, each right with probability $q$ under the policy, success only if
# all are right, so $p = q^H$. If the policy starts after a correct prefix of $h$ steps, only
# $H - h$ steps remain and $p = q^{H - h}$:

# %%
H, q, G = 20, 0.6, 8
h = np.arange(H)
signal = theory.group_signal_probability(theory.lock_success(q, H, h), G)
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(h, signal, marker="o")
ax.set(xlabel="prefix length $h$", ylabel="p(group has a signal)", yscale="log")
plt.show()
print(f"no prefix: p = {q ** H:.1e}, a group of {G} has a signal with probability {signal[0]:.1e}; "
      f"expected samples to the first success {1 / q ** H:,.0f}")

# %% [markdown]
# *Figure 1. Probability that a group of $G = 8$ answers has at least one success and one failure,
# against the prefix length, on a lock with $H = 20$ steps and per-step accuracy $q = 0.6$ (the
# experiment's starved regime).*
#
# Without a prefix the problem is practically invisible to RL: about one group in three thousand has a
# signal. With $h$ between 10 and 18 (the experiment's range) the chance rises from about 5% to about
# 97%, about 40% on average; a model that improves along the way pushes it higher. Finding one correct
# trace costs $1/p$ samples once; RL without a prefix would pay that for every useful update.
#
# ## The prefixed objective keeps the optimum
#
# Given a correct trace $y^x$ for problem $x$, PrefixRL optimises
#
# $$J_{\text{pre}}(\pi) = \mathbb E_x\, \mathbb E_{h \sim \rho}\, \mathbb E_{y' \sim \pi(\cdot \mid x, y^x_{1:h})}
# \big[r(x, y^x_{1:h} \oplus y')\big]$$
#
# instead of $J(\pi) = \mathbb E_x\, \mathbb E_{y \sim \pi(\cdot \mid x)} [r(x, y)]$. The gradient flows
# only through the completion $y'$: the prefix is part of the prompt, so no importance weight is needed.
# Why the optimum does not move (our reading of the abstract's consistency claim): treat $(x, y_{1:h})$
# as a state. An optimal policy maximises the success probability from *every* state at once, and
# because $y^x$ is correct, every state on it can still reach reward 1. So an optimal policy of $J$
# also maximises $J_{\text{pre}}$, for any $\rho$; and if $\rho(0) > 0$, a maximiser of $J_{\text{pre}}$
# is optimal from the start state too. A check by exhaustive search over all deterministic policies
# on 20 random decision trees (four binary decisions, random successful leaves; the correct trace
# leads to one successful leaf), for four distributions $\rho$ over the prefix length:

# %%
consistency = theory.consistency_check()
consistency["trees"][["rho", "rho0", "min_max_j_pre", "all_pi_star", "min_share_optimal_for_j"]]

# %% [markdown]
# Columns: the smallest (over trees) optimal value of $J_{\text{pre}}$ (1: from every prefix state of
# a correct trace, success is certain under the best policy), whether the policy that is optimal from
# every state maximises $J_{\text{pre}}$ in every tree, and the smallest share of $J_{\text{pre}}$
# maximisers that are also optimal for $J$. With $\rho(0) > 0$ every maximiser is optimal; with
# $\rho(0) = 0$ the start state's decision is unconstrained and many maximisers are not.

# %% [markdown]
# ## Resets along a correct trace: exponential against polynomial
#
# On the lock with $n$ actions per state and a tabular softmax policy (one free logit per state and
# action) started uniform, exact policy gradient from the start state alone sees a gradient of order
# $n^{-H}$; starting each episode from a state drawn uniformly along the correct trace (a prefix
# "reset") gives the deep states a large gradient first, and their success then makes the shallower
# ones learnable. Iterations of exact gradient ascent until the start state's success reaches 0.9:

# %%
horizons = [2, 3, 4, 5, 6, 7]
iterations = {start: [theory.softmax_pg_lock(H, n_actions=4, start=start) for H in horizons]
              for start in ["start", "resets"]}
fig, ax = plt.subplots(figsize=(6, 3.4))
for start, label in [("start", "start state only"), ("resets", "uniform over prefix states")]:
    ax.plot(horizons, iterations[start], marker="o", label=label)
ax.set(xlabel="horizon $H$", ylabel="iterations to success 0.9", yscale="log")
ax.legend(fontsize="small")
plt.show()
print(iterations)

# %% [markdown]
# *Figure 2. Iterations of exact softmax policy gradient (step size 1) until the start state succeeds
# with probability 0.9, on a lock with four actions per state, against the horizon (log scale).*
#
# For very short locks, resets are slightly slower: they spread the weight $1/H$ over all states, so
# the start state gets less of it. From $H = 4$ on, the start-only count grows by a factor of about
# three per extra step, the reset count by a small additive amount.
#
# ## Back-generalization needs shared parameters
#
# PrefixRL in the experiment never trains on the first half of the positions: prefixes are at least
# half the trace long. With a tabular policy, states that are never trained never change: the
# unprefixed success can improve only through the later states and stays capped by the untrained
# first step. A neural policy shares its parameters across positions: what it learns about "the next
# step of the chain" at position 15 can apply at position 3, as long as the computation there is the
# same. On a lock of six
# steps with four actions, exact policy gradient trained only from the prefix states 1 to 5
# ($\rho(0) = 0$), once with a tabular policy and once with one extra logit for "the correct action"
# shared by all states:

# %%
sharing = theory.back_generalization_check(H=6, n_actions=4)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
for policy, style in [("tabular", "--"), ("shared", "-")]:
    rows = sharing[sharing.policy == policy]
    axes[0].plot(rows.iteration, rows.v_prefix, style, label=policy)
    axes[1].plot(rows.iteration, rows.v_start, style, label=policy)
axes[0].set(xlabel="iteration", ylabel="success from prefix states", ylim=(0, 1.02))
axes[1].set(xlabel="iteration", ylabel="success from the start state", ylim=(0, 1.02))
axes[1].legend(fontsize="small")
plt.show()
final = sharing.groupby("policy").last()
print(final[["p_start", "v_start", "v_prefix"]].round(3))
assert final.loc["tabular", "p_start"] == 0.25  # never trained, still uniform over 4 actions

# %% [markdown]
# *Figure 3. Policy gradient on prefixed starts only: success from the prefix states (left) and from
# the start state, which is never trained on (right), for a tabular policy and for a policy with one
# shared parameter.*
#
# Both policies learn the prefixed problems. Only the shared one improves the start state's own step:
# the tabular start state stays at 1 in 4, which caps its no-prefix success at 0.25. The shared
# parameter here is a logit for the correct action itself, the most favourable case for sharing; in
# a network, how far sharing carries depends on how similar the positions' computations are.

# %% [markdown]
# ## What to expect in the experiment
#
# - Without prefixes, group-relative RL on the starved problems (per-step accuracy about 0.6 over 20
#   steps) should see almost no group with a signal and stay near the base model's pass rate.
# - With prefixes of 10 to 18 steps many groups carry a signal, and the no-prefix success should rise
#   through shared parameters, including at the positions that were never completions.
# - SFT (supervised fine-tuning: training the model to imitate the traces token by token) on the same
#   correct traces may be a strong baseline: the paper's advantage over SFT-then-RL comes from traces
#   that are *very* off-policy, which imitation handles badly. The experiment therefore gives every
#   problem two valid strategies and takes the traces from another "model family" that uses the
#   strategy our base model rarely writes (about one answer in ten), so the traces are off-policy in
#   their strategy, not only in their rarity. Every arm is charged for its compute the same way
#   (sampled tokens, and three times the tokens of every update, SFT epochs included, with the
#   rejection sampling that found the traces), and the room each headline has is computed before
#   it is judged: a ratio of 3 in success needs SFT-then-RL below a third, a ratio of 2 in compute
#   needs SFT-then-RL to spend at least twice what PrefixRL spends at its first evaluation.
#
# ## Summary
#
# Sparse verifiable rewards give group-relative RL nothing to learn from when success is rare. A
# prefix of a correct trace moves the start state along the trace, where success is likely; the
# objective keeps its optimum because a correct trace passes only through states that can still
# succeed. Starting from such states turns an exponential search into a polynomial one, and with
# shared parameters the skill learned late in the trace carries back to its start.
#
# ## Exercises
#
# 1. For $G = 8$, which per-answer success probability $p$ maximises the chance of a signal? What does
#    that say about choosing the prefix length?
# 2. Show that with $\rho(0) = 0$ the prefixed objective can have optimal policies that are not
#    optimal for $J$ (hint: a tabular policy at the start state).
# 3. Compute the expected number of sampled tokens to find one correct 20-step trace by rejection
#    sampling a policy with per-step accuracy 0.6, and compare it with the tokens of 100 RL steps
#    of 16 problems times 8 answers.
#
# ## Sources in detail
#
# The loop (prefixes of correct traces, on-policy RL on the completion only, that is RL on answers the
# trained policy samples itself, and evaluation without prefixes) follows the abstract. The prefixes
# may come from another model, a program, or earlier rejection sampling (drawing answers until one is
# correct). The paper's theorems (consistency, sample efficiency) were not available: this notebook
# illustrates them with standard arguments on a combination lock, which is the book's choice, as are
# the group-relative update, the distribution of prefix lengths and every number above.
