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
# # GUI agents, evaluation protocols and SFT vs RFT scaling: implementation
#
# **Learning goals.** After this notebook you can
#
# 1. read each piece of `replib.papers.hypertrack.method` beside the rule or equation it
#    implements: the kit's step match, the episode metrics, the history operator of SOEval (the
#    paper's semi-online evaluation), the reward, dynamic sampling, the DAPO loss and SFT's loss;
# 2. check each piece on inputs small enough to verify by hand;
# 3. look at MiniGUI's recorded steps, run the three protocols on an agent of your own, and make
#    one SFT and one RFT update.
#
# The metric rules follow the official evaluation kit (GUIEvalKit); the RFT pieces follow the
# paper's description (the training code is not released). SFT is supervised fine-tuning (imitate
# the recorded action); RFT is reinforcement fine-tuning (sample actions, reward the right ones),
# here with DAPO, a variant of the group-based policy gradient GRPO (Group Relative Policy
# Optimization) that clips the update asymmetrically, averages over tokens and drops groups whose
# rewards are all equal. The theory notebook derives each piece.

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
from replib.papers.hypertrack import exercises, experiment, method, task

core.set_style()
torch.set_num_threads(1)  # a small model: one thread is fastest (and what the experiment uses)
profile = core.resolve_profile(profile)
n_tasks = {"smoke": 8, "book": 40, "paper": 200}[profile]

# %% [markdown]
# ## 1. MiniGUI: the recorded track
#
# A world holds 90 apps in three pools (30 for pretraining, 40 for fine-tuning, 20 unseen). A task
# is (app, button, row, word); the scripted expert opens the app, clicks the button, scrolls until
# the row is visible, clicks it, types the word and stops. The form's field is masked, so the form
# looks the same before and after typing. Here are the first recorded steps, as a `datasets.Dataset`:

# %%
steps_ds = task.steps_dataset(seed=0, n_tasks=n_tasks)
steps_ds.to_pandas().head(8)

# %% [markdown]
# ## 2. The step match (GUIEvalKit's rules)
#
# TM (type match): types equal (a predicted "type" counts as the reference's click or type). EM
# (exact match, the step's success): the type matches and, besides, a click in the box enlarged
# 1.2 times (within 0.14 of the point when there is no box), the same scroll direction, texts that
# contain one another, or just the type for STOP.

# %%
core.show_source(method.step_match)

# %%
gt = {"type": np.array(["click", "click", "scroll", "type", "open", "stop", "click"], dtype=object),
      "box": np.array([[0.5, 0.5, 0.2, 0.1]] * 2 + [[0, 0, 0, 0]] * 4 + [[0.3, 0.3, 0.0, 0.0]]),
      "direction": np.array(["", "", "down", "", "", "", ""], dtype=object),
      "text": np.array(["", "", "", "party", "ab", "", ""], dtype=object)}
pred = {"type": np.array(["click", "click", "scroll", "type", "open", "stop", "click"], dtype=object),
        "point": np.array([[0.61, 0.5], [0.63, 0.5], [np.nan] * 2, [np.nan] * 2, [np.nan] * 2, [np.nan] * 2,
                           [0.4, 0.35]]),
        "direction": np.array(["", "", "up", "", "", "", ""], dtype=object),
        "text": np.array(["", "", "", "Party!", "AB", "", ""], dtype=object)}
tm, em = method.step_match(pred, gt)
print("TM", tm.astype(int), "EM", em.astype(int))
assert tm.all()
assert em.tolist() == [True, False, False, True, True, True, True]
assert method.step_match({**pred, "type": np.array(["type"] * 7, dtype=object)}, gt)[0][[0, 1, 3, 6]].all()

# %% [markdown]
# Step by step: 0.61 is outside the element (its half-width is 0.1) but inside the enlarged box
# (0.12), 0.63 is outside both; the scroll has the wrong direction; "Party!" lower-cases to
# "party!", which contains "party"; "AB" matches "ab"; STOP needs only its type; the last click has
# no box (width 0) and lies 0.11 from the reference point, within 0.14. The last line checks the
# relabelling: a predicted "type" counts as a type match where the reference is a click or a type.

# %% [markdown]
# ## 3. Episode metrics
#
# Success $= \prod_t \mathrm{EM}_t$; goal progress $= k / T$, $k$ the consecutive EM steps from the
# start until the first error.

# %%
core.show_source(method.episode_metrics)

# %%
out = method.episode_metrics([True, True, False, True, True, True, True, True], [0, 0, 0, 0, 1, 1, 2, 2])
print(out)
assert out["success"].tolist() == [0.0, 1.0, 1.0]
assert np.allclose(out["goal_progress"], [0.5, 1.0, 1.0])

# %% [markdown]
# ## 4. SOEval's history operator $\psi$
#
# $\phi(o_t, a)$ writes action $a$ into the history after observation $o_t$; offline evaluation
# always writes the reference action $a_t$. SOEval writes
# $\psi(o_t, a_t, \hat a_t) = \phi(o_t, \hat a_t)$ if $\hat a_t = a_t$ (EM), else $\phi(o_t, a_t)$:
# the model's own action $\hat a_t$ enters the history only where it was right.

# %%
core.show_source(method.soeval_history)

# %%
reference = np.array([[1, 9, 9], [2, 1, -1]])
own = np.array([[1, 10, 9], [3, 4, -1]])
kept = method.soeval_history(reference, own, own_correct=[True, False])
print(kept)
assert kept.tolist() == [[1, 10, 9], [2, 1, -1]]

# %% [markdown]
# ## 5. The reward $R = R_{\text{type}} + R_{\text{param}}$
#
# Stricter than EM: the click must be inside the plain box, the text exactly equal.

# %%
core.show_source(method.action_reward)

# %%
reward = method.action_reward(pred, gt)
print(reward)
assert reward.tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 1.0]  # 0.61 is outside the plain box; "AB" != "ab"

# %% [markdown]
# ## 6. Dynamic sampling and the DAPO loss
#
# Groups whose rewards are all equal are dropped. The loss is $-\mathcal J(\theta)$ with the
# asymmetric clip and the token-level average $1/\sum_i |o_i|$.

# %%
core.show_source(method.dynamic_sampling)
core.show_source(method.dapo_loss)

# %%
keep = method.dynamic_sampling(np.array([[2, 2, 2, 2], [0, 2, 1, 2], [0, 0, 0, 0]]))
assert keep.tolist() == [False, True, False]
old = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
# ratios 1.5 and 0.6: a positive advantage is clipped at 1.3, a negative one at 0.8
new = torch.log(torch.tensor([[0.75, 0.75], [0.3, 0.5]]))
loss = method.dapo_loss(new, old, advantages=torch.tensor([1.0, -1.0]), token_mask=mask)
expected = -(1.3 + 1.3 + (-0.8)) / 3  # min(1.5, 1.3) twice; for A = -1: min(-0.6, -0.8) = -0.8
print(float(loss), expected)
assert abs(float(loss) - expected) < 1e-6
# with a symmetric clip of 0.2 the positive terms would stop at 1.2
assert abs(float(method.dapo_loss(new, old, torch.tensor([1.0, -1.0]), mask, 0.2, 0.2)) + (1.2 + 1.2 - 0.8) / 3) < 1e-6

# %% [markdown]
# ## 7. SFT's loss, and one update of each kind
#
# SFT: $-\frac{1}{\#\text{tokens}}\sum \log p(\text{token})$ over the reference action's tokens (its
# type and arguments). The policy `task.GUIPolicy` gives token log-probabilities; a click's point is
# one token over 20 x 20 bins, drawn from an attention pointer over the screen's elements.

# %%
core.show_source(method.sft_loss)
core.show_source(method.rft_update)

# %%
world = task.make_world(0)
tasks = task.sample_tasks(world, world.apps("train"), n_tasks, np.random.default_rng(0))
rows = task.record_episodes(world, tasks, "phone")
obs = task.observe(rows)
policy = task.GUIPolicy(seed=0)
logp, tok_mask = policy.token_logprobs(obs, rows["action"])
n_tokens = {task.OPEN: 3, task.CLICK: 2, task.SCROLL: 2, task.TYPE: 2, task.STOP: 1}  # type + arguments
print("tokens per action, first episode:", tok_mask[:int(rows["length"][0])].sum(1).tolist())
assert tok_mask.sum(1).tolist() == [n_tokens[k] for k in rows["action"][:, 0]]
assert torch.all(logp <= 0) and torch.all(logp[tok_mask == 0] == 0)
optimiser = torch.optim.Adam(policy.parameters(), lr=3e-3)
with torch.no_grad():
    before = float(method.sft_loss(*policy.token_logprobs(obs, rows["action"])))
for _ in range(20):
    method.sft_update(policy, optimiser, obs, rows["action"])
with torch.no_grad():
    after = float(method.sft_loss(*policy.token_logprobs(obs, rows["action"])))
print(f"SFT loss {before:.3f} -> {after:.3f}")
assert after < before
gt_rows = task.gt_kit(rows)


def reward_fn(state, actions):
    return method.action_reward(task.to_kit(actions), {k: v[state] for k, v in gt_rows.items()})


draw_generator = torch.Generator().manual_seed(1)


def draw_states():  # 32 candidate states at a time, G = 8 samples each
    idx = torch.randint(len(rows["step"]), (32,), generator=draw_generator)
    return {k: v[idx] for k, v in obs.items()}, idx.numpy()


stats = method.rft_update(policy, optimiser, draw_states, reward_fn, group_size=8, batch_groups=16,
                          generator=torch.Generator().manual_seed(0))
print(stats)
assert 0 <= stats["mean_reward"] <= 2 and stats["groups"] <= 16

# %% [markdown]
# Two shortcuts make RFT about twice as fast, and neither changes what is computed. The reward is
# scored on the integer actions (`experiment.fast_reward`) instead of the kit's string form; it
# equals `method.action_reward` on every action. And a sampled click is drawn as the mixture it
# is: first an element $k$ with probability $a_k$, then $x \sim q_k(x)$ and $y \sim q_k(y)$, which has
# exactly the distribution $p(x, y) = \sum_k a_k q_k(x) q_k(y)$ without building the 400-bin table
# (greedy decoding still takes the table's mode). The tests check both against the slow forms.

# %%
sampled = policy.sample(obs, torch.Generator().manual_seed(2))
slow = method.action_reward(task.to_kit(sampled), gt_rows)
fast = experiment.fast_reward(sampled, rows["action"], rows["box"])
print("rewards equal on", len(sampled), "sampled actions:", bool(np.array_equal(slow, fast)))
assert np.array_equal(slow, fast)

# %% [markdown]
# ## 8. The unseen apps' visual family
#
# An app's glyphs look like the shared prototypes distorted by the app's own style matrix. The 20
# unseen apps are, in addition, distorted by one shared matrix, a "visual family" that no
# pretraining or training app has (`task.make_world(seed, unseen_shift=1.5)`); the other apps are
# the same with or without it. The distance from a glyph's look to its prototype shows the shift.

# %%
shifted = task.make_world(0, unseen_shift=1.5)
for pool in ("pretrain", "train", "unseen"):
    apps = shifted.apps(pool)
    looks = np.einsum("gd,aed->age", shifted.prototypes, shifted.style[apps])
    distance = np.linalg.norm(looks - shifted.prototypes[None], axis=2).mean()
    print(f"{pool:9s} apps: mean distance of a glyph's look from its prototype {distance:.2f}")

# %% [markdown]
# ## 9. The protocols, on an agent of your own
#
# Any function `act(obs) -> actions (n, 3)` can be evaluated. Here: the trained policy's greedy
# decoding, and an "agent" that always stops.

# %%
greedy = lambda o: policy.sample(o, greedy=True)  # noqa: E731
always_stop = lambda o: np.tile([task.STOP, -1, -1], (len(o["mask"]), 1))  # noqa: E731
for name, act in (("policy after 20 SFT steps", greedy), ("always stop", always_stop)):
    summary = task.evaluate(act, world, tasks, "phone")
    print(f"{name:26s}", {k: round(v, 3) for k, v in summary.items()})
stop = task.evaluate(always_stop, world, tasks, "phone")
assert abs(stop["em"] - 1 / rows["length"][rows["step"] == 0].mean()) < 0.05 and stop["online_success"] == 0

# %% [markdown]
# The always-stop agent gets exactly one step right per episode (the last), so its offline EM is
# one over the mean episode length, and it never succeeds online.
#
# ## Exercises
#
# **Exercise 1.** Write `click_match(point, box)`: for arrays of click points (n, 2) and boxes
# (n, 4: centre x, centre y, width, height), return 1.0 where the kit counts the click as an exact
# match, 0.0 elsewhere.

# %% tags=["solution", "hide-input"]
def click_match(point, box):
    point, box = np.asarray(point, float), np.asarray(box, float)
    half_w, half_h = 1.2 * box[:, 2] / 2, 1.2 * box[:, 3] / 2
    inside = (np.abs(point[:, 0] - box[:, 0]) <= half_w + 1e-12) & (np.abs(point[:, 1] - box[:, 1]) <= half_h + 1e-12)
    return inside.astype(float)


# %%
exercises.check_click_match(click_match)

# %% [markdown]
# **Exercise 2.** Write `goal_progress(em)` for one episode's per-step exact matches (a list of
# booleans in step order). The grader passes plain Python lists of booleans, not arrays.

# %% tags=["solution", "hide-input"]
def goal_progress(em):
    run = 0
    for ok in em:
        if not ok:
            break
        run += 1
    return run / len(em)


# %%
exercises.check_goal_progress(goal_progress)

# %% [markdown]
# **Exercise 3.** Write `zero_signal_share(p, group_size)`: the probability that a group of binary
# rewards, each 1 with probability `p`, carries no learning signal. The grader passes plain Python
# numbers (a float and an int).

# %% tags=["solution", "hide-input"]
def zero_signal_share(p, group_size):
    return p ** group_size + (1 - p) ** group_size


# %%
exercises.check_zero_signal_share(zero_signal_share)

# %% [markdown]
# ## Summary
#
# - `method.step_match` and `method.episode_metrics` are the kit's rules; they take predictions in
#   a readable form, so they can score any agent.
# - `method.soeval_history` is $\psi$; `task.semi_online` applies it step by step.
# - `method.action_reward` is stricter than EM, as the paper's training reward is.
# - `method.rft_update` is one step-level GRPO iteration with DAPO's changes; `method.sft_update`
#   one SFT step.
