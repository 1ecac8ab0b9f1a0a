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
# # Step-level thinking depth for agents: implementation
#
# This notebook builds the toy agent and CoPO (cognition-aware policy optimisation, the paper's
# reinforcement-learning stage) from `replib.papers.cogrouter` (DepthWorld and the agent in its `task`
# module, CoPO in its `method` module), which uses the shared MLP (multilayer perceptron, a small
# fully connected network) of `replib.models.mlp` and the shared clipped surrogate and KL estimator of
# `replib.rl` (both defined in section 4). Each piece sits next to the step of the algorithm it
# implements (steps 1-9 as the official code does them) and is checked on small inputs.
#
# **Learning goals.** After this notebook you can
#
# 1. describe DepthWorld, a task whose steps need different amounts of "thinking";
# 2. build an agent that picks a level and then an action, and score its responses;
# 3. implement CoSFT (supervised fine-tuning on level-labelled responses) and every step of a CoPO
#    iteration: rollouts, the pooled trajectory advantage, the expansion of successful steps, action
#    confidences, weights and the update.
#
# **The toy's limit.** An LLM (large language model) writes its thoughts; here a "thought" at level
# $l$ is a fixed set of noisy feature modules. The toy therefore tests CoPO's credit-assignment rule,
# not whether a model can learn to reason at a chosen depth.

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
import numpy as np
import torch

from replib import core
from replib.papers.cogrouter import exercises, experiment, method, task

core.set_style()
profile = core.resolve_profile(profile)
torch.set_num_threads(1)
demo_steps = {"smoke": 60, "book": 400, "paper": 400}[profile]

# %% [markdown]
# ## 1. DepthWorld
#
# An episode has 10 stages and at most 14 steps; each step picks one of 4 actions. Stages are
# *routine* (60%: the observation shows the right action as an "arrow", and a new cue to remember),
# *recall* (20%: the right action is the most recent cue) or *plan* (20%: the right action is only
# revealed by a lookahead). A wrong routine action wastes a step; a wrong recall or plan action ends
# the episode. The reward is 1 if all 10 stages are passed in time: an outcome-only reward, with steps
# of very different difficulty inside one episode, as in the paper's household tasks.

# %%
rng = np.random.default_rng(0)
tasks = task.sample_tasks(2, rng)
print("stage types (0 routine, 1 recall, 2 plan):\n", tasks["types"])
print("correct actions:\n", tasks["correct"])
state = task.new_state(2)
ok = task.env_step(tasks, state, np.array([0, 1]), (tasks["correct"][:, 0] + 1) % 4)  # both wrong at a routine stage
assert not ok.any() and (state["stage"] == 0).all() and state["alive"].all()  # the stage repeats
recall_rows = tasks["types"] == task.RECALL
assert np.array_equal(tasks["correct"][recall_rows], tasks["memory"][recall_rows])  # recall = the last cue

# %% [markdown]
# ## 2. Levels, thoughts and the agent
#
# Level $l$ costs $C_l = (8, 40, 80, 130)$ tokens per step (roughly the lengths of the paper's four
# templates). Its thought $z_l$ is what the action head sees: level 1 the clean observation; level 2
# a noisy re-description of it (the paper's premise that needless reasoning can only blur an easy
# decision); level 3 adds a noisy read-out of the memory cue; level 4 adds a noisy read-out of the
# lookahead answer. Each level is the least that suffices for one stage type: routine 1, recall 3,
# plan 4.

# %%
obs = task.observe(tasks, np.array([0]), np.array([0]))
views = task.thought_views(obs, task.memory_readout(tasks, [0], [0]), task.lookahead_readout(tasks, [0], [0]), rng)
print("observation:", obs[0].round(2))
for level in range(4):
    print(f"level {level + 1} view:", views[0, level].round(2))
assert np.array_equal(views[0, 0, : obs.shape[1]], obs[0]) and np.abs(views[0, 1:, :8] - obs[0, :8]).sum() > 0

# %% [markdown]
# The agent has a level head $\pi(l \mid s)$ on the observation and an action head
# $\pi(a \mid s, z_l, l)$ on the level and its thought (two small MLPs). A response's log-probability
# is $\log \pi(l \mid s) + \log \pi(a \mid s, z_l, l)$.
#
# ## 3. CoSFT
#
# Supervised training on single stages: the level label is the sufficient level, replaced by a random
# level 30% of the time (noisy labels, as a real annotator's would be), and the action label is the
# correct action, predicted from the thought of the labelled level.

# %%
policy = task.make_policy(seed=0)
losses = task.cosft(policy, steps=demo_steps, seed=0)
print(f"CoSFT loss: first 20 steps {np.mean(losses[:20]):.3f}, last 20 steps {np.mean(losses[-20:]):.3f}")
metrics, _ = task.evaluate(policy, task.sample_tasks(200, np.random.default_rng(1)), np.random.default_rng(2), temperature=0.4)
print({key: round(float(value), 3) for key, value in metrics.items() if np.isscalar(value)})

# %% [markdown]
# ## 4. One CoPO iteration, step by step
#
# **Step 1, rollouts.** $G = 4$ episodes for each of $B = 16$ tasks at temperature 1.

# %%
cfg = core.configure(experiment.EXPERIMENT_PROFILES, "book")
roll = task.rollout(policy, task.repeat_tasks(task.sample_tasks(cfg.batch_tasks, rng), cfg.group_size), rng)
print(f"{len(roll['episode'])} step-samples from {len(roll['returns'])} episodes; success {roll['returns'].mean():.2f}")

# %% [markdown]
# **Step 2, the trajectory advantage.** The advantage says how much better than expected an outcome
# was. As in the official code and in GRPO (group relative policy optimisation), every step of episode
# $\tau$ carries the episode's return, and the mean and (unbiased) standard deviation are taken over
# all the step-samples of the group, so long episodes weigh more:
# $A_\tau = (R_\tau - \mu_g)/(\sigma_g + 10^{-6})$, and $A = 0$ if the group's returns are all equal.

# %%
core.show_source(method.pooled_group_advantages)

# %%
A = method.pooled_group_advantages(np.array([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]), np.array([[10, 2, 4, 2], [10, 10, 10, 10]]))
pooled = np.repeat([1.0, 0.0, 0.0, 0.0], [10, 2, 4, 2])
assert np.allclose(A[0], ([1.0, 0.0, 0.0, 0.0] - pooled.mean()) / (pooled.std(ddof=1) + 1e-6)) and (A[1] == 0).all()
print(A.round(3))

# %% [markdown]
# **Step 3, which steps are expanded.** Only steps of successful episodes in groups with mixed
# outcomes. (Expanding a failed step, whose advantage is negative, would penalise the most confident
# level hardest.)

# %%
mask = method.expansion_mask(np.array([1.0, 0.0, 1.0, 1.0]), step_episode=np.array([0, 0, 1, 2, 3]), G=2)
assert mask.tolist() == [True, True, False, False, False]  # group 1 (episodes 2, 3) is all successes
print(mask)

# %% [markdown]
# **Steps 4-7, confidences and weights.** For an expanded step, the four variants keep the state and
# the action and take each level's thought: the original thought for the level that was chosen, and
# fresh thoughts for the other three (drawn during the rollout but never used for acting). Here lies a
# real difference from the paper, where the policy writes the other levels' thoughts *conditioned on
# the chosen action*, a rationalisation; our feature modules cannot see the action.
# $c_l = \pi(a \mid s, z_l, l)$ (the geometric mean over the action's tokens, here a single token),
# min-max normalised within the four, and $w_l = e^{k \hat c_l} / \frac14 \sum_{l'} e^{k \hat c_{l'}}$
# with $k = 2$.

# %%
core.show_source(method.copo_weights)

# %%
idx = np.flatnonzero(method.expansion_mask(roll["returns"], roll["episode"], cfg.group_size))[:5]
if idx.size:
    conf = method.action_confidences(policy, roll["views"][idx], roll["action"][idx])
    weights = method.copo_weights(conf)
    for t, c, w in zip(roll["type"][idx], conf, weights):
        print(f"{task.STAGE_TYPES[t]:8s} confidences {np.round(c, 2)} -> weights {np.round(w, 2)}")
    assert np.allclose(weights.mean(1), 1.0)

# %% [markdown]
# **Steps 8-9, the batch and the update.** Each expanded step becomes four samples with advantages
# $w_l A_\tau$; the others keep $A_\tau$. One update minimises the clipped surrogate
# (`replib.rl.clipped_surrogate`: the policy-gradient objective of PPO, proximal policy optimisation,
# whose probability ratio to the sampling policy is clipped to $[0.8, 1.2]$; the ratio is 1 on fresh
# samples) plus $\beta = 0.1$ times the k3 estimate (a low-variance sample estimate) of the KL
# divergence, the Kullback-Leibler divergence that measures how far the policy has moved from the
# frozen CoSFT policy (`replib.rl.kl_k3`), minus a small entropy bonus that keeps the policy from
# becoming too sure.

# %%
batch = method.build_batch(policy, roll, cfg.group_size, expand=True)
plain = method.build_batch(policy, roll, cfg.group_size, expand=False)
assert len(batch["advantages"]) == len(plain["advantages"]) + 3 * batch["n_expanded"]
reference = task.make_policy(seed=0)
reference.load_state_dict(policy.state_dict())
optimiser = torch.optim.Adam(policy.parameters(), lr=cfg.copo_lr)
parts = method.policy_update(policy, reference, optimiser, batch, kl_coef=cfg.copo_kl)
assert abs(parts["kl"]) < 1e-6  # the policy equals its reference before the update
print(f"expanded steps {batch['n_expanded']}, batch size {len(batch['advantages'])}; loss parts",
      {key: round(value, 4) for key, value in parts.items()})

# %% [markdown]
# GRPO, the baseline that isolates the reweighting, is the same iteration with `expand=False`.
#
# **Two controls of ours, one factor each.** The experiment asks why CoPO loses to GRPO with two
# variants of the batch. With `variant_scale=0.25` the four variants of an expanded step carry
# $w_l A_\tau / 4$, one sample's worth of advantage together ($\sum_l w_l / 4 = 1$): the step is no
# longer counted four times against the failed episodes' samples in the mean loss, while the level
# target $w / \sum w$ stays. With `expand_levels=False` the four variants train the action head only
# (their level token is masked out of the response), and one extra sample trains the level head on the
# level that was sampled, with $A_\tau$, as GRPO does: the soft level target is gone, the weighted
# action variants stay.

# %%
quarter = method.build_batch(policy, roll, cfg.group_size, expand=True, variant_scale=0.25)
sampled = method.build_batch(policy, roll, cfg.group_size, expand=True, expand_levels=False)
n = batch["n_expanded"]
assert len(sampled["advantages"]) == len(quarter["advantages"]) + n
assert int(sampled["level_mask"].sum()) == len(plain["advantages"])  # the level head sees GRPO's samples
print(f"expanded steps {n}: the paper's batch {len(quarter['advantages'])} samples; "
      f"sampled-level control {len(sampled['advantages'])} samples, {int(sampled['level_mask'].sum())} with a level token")

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write CoPO's weights: `copo_weights(c)` takes an `(n, 4)` array of action
# confidences, clips them to $[10^{-6}, 1]$, min-max normalises each row (all 0.5 when its range is at
# most $10^{-6}$) and returns $e^{2 \hat c} / \text{mean}(e^{2 \hat c})$ per row.

# %% tags=["solution", "hide-input"]
def copo_weights(c, k=2.0):
    c = np.clip(np.asarray(c, dtype=float), 1e-6, 1.0)
    lo, hi = c.min(axis=-1, keepdims=True), c.max(axis=-1, keepdims=True)
    flat = hi - lo <= 1e-6
    c_hat = np.where(flat, 0.5, (c - lo) / np.where(flat, 1.0, hi - lo))
    e = np.exp(k * c_hat)
    return e / e.mean(axis=-1, keepdims=True)


# %%
exercises.check_copo_weights(copo_weights)

# %% [markdown]
# **Exercise 2.** Write `level_fixed_point(w)`: the level distribution at which the expected CoPO
# update $A\,(w - (\sum_l w_l)\,\pi)$ vanishes. The grader passes NumPy arrays: one vector of four
# positive weights, or an `(n, 4)` array of them (one distribution per row).

# %% tags=["solution", "hide-input"]
def level_fixed_point(w):
    w = np.asarray(w, dtype=float)
    return w / w.sum(axis=-1, keepdims=True)


# %%
exercises.check_level_fixed_point(level_fixed_point)

# %% [markdown]
# **Exercise 3 (open).** Build the batch for a group in which every episode failed. Which samples
# does CoPO expand, and what would go wrong if it expanded them?
#
# ## Summary
#
# A CoPO iteration is a GRPO iteration with one extra stage: each successful step of a mixed group is
# replaced by four level variants, weighted by how confident each level makes the action that was
# taken. Everything else (rollouts, the pooled trajectory advantage, the clipped surrogate, the KL to
# the CoSFT policy) is shared with GRPO, so the experiment can compare the two from the same start.
