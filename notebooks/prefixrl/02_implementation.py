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
# # RL from off-policy prefixes: implementation
#
# This notebook builds PrefixRL (reinforcement learning, RL, on problems extended by a prefix of a
# correct answer written by something other than the policy being trained: an "off-policy" prefix)
# from `replib.papers.prefixrl.task` and `replib.papers.prefixrl.method`, the shared group-relative RL
# parts in `replib.rl` and the shared tiny language model in `replib.models.causal_lm`, each piece
# next to the step it implements and checked on small inputs.
#
# **Learning goals.** After this notebook you can
#
# 1. build a task whose long problems a base model almost never solves, while every step is easy;
# 2. compute a model's exact success probability on it with one teacher-forced forward pass (the
#    correct tokens fed in as input, the model's probability of each read off);
# 3. turn a correct trace into prefixed problems and run one on-policy update (from answers the
#    trained model samples itself) on the completions only;
# 4. implement group-relative advantages and the policy-gradient loss.
#
# The loop (from the paper's abstract; the update rule and the prefix lengths are our choices, since
# the paper's could not be read):
#
# 1. collect one correct trace $y^x$ per training problem (here from the generator program, or by
#    rejection sampling the base model, section 5);
# 2. build prefixed problems $x \oplus y^x_{1:h}$;
# 3. sample $G$ completions $y' \sim \pi_\theta(\cdot \mid x, y^x_{1:h})$ per prefixed problem, score
#    $r(x, y^x_{1:h} \oplus y')$, and take a policy-gradient step on the completion tokens only;
# 4. evaluate on the unprefixed problems.

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
import torch

from replib import core, rl
from replib.core.runtime import thread_budget
from replib.models import causal_lm
from replib.papers.prefixrl import baselines, exercises, experiment, method, task

core.set_style()
profile = core.resolve_profile(profile)
torch.set_num_threads(thread_budget(2))  # one thread in the smoke run (REPLIB_MAX_THREADS)
demo_steps = {"smoke": 60, "book": 300, "paper": 300}[profile]
demo_batch = 64  # the experiment's base model trains on batches of 128

# %% [markdown]
# ## 1. A chain of easy steps
#
# A problem is three digits $x = (v_0, d_0, d_1)$; there are 1,000 of them. The answer is a chain of
# digits, each computed from the previous one, $y_t = f(y_{t-1}, d_{t \bmod 2})$, by a fixed operation
# table $f$ on the digits. There are two valid ways to solve a problem: strategy A starts the chain
# from $y_0 = v_0$, strategy B from $y_0 = d_0$. An answer of $L$ tokens opens with a mark that names
# its strategy (token 12 for A, 13 for B) and then gives $L - 1$ digits. The reward is 1 only if the
# answer is exactly one of the two correct answers, so each problem has exactly two correct answers,
# which differ from the mark on. (Our first plan was $f(a, d) = a + d \bmod 10$; our tiny model could
# not learn modular addition in the budget, see the package's notes, so $f$ is a fixed random table.)
# Because $f$ is a fixed function and the step alternates between two digits, every chain ends in a
# cycle (the second answer below settles into one): late in a chain, a step often repeats the value
# two steps back. The first digit is special too: it reads $v_0$ or $d_0$ from the prompt, every
# later step reads the previous answer digit.

# %%
problems = task.all_problems()[[123, 456]]
print("operation table f(a, d), rows a, columns d:\n", task.STEP_TABLE)
for x, a, b in zip(problems, task.correct_traces(problems, 8, 0), task.correct_traces(problems, 8, 1)):
    print(f"x = {tuple(int(v) for v in x)} -> strategy A {a.tolist()}, strategy B {b.tolist()}")
y = task.correct_traces(problems, 8)[0]
assert y[0] == task.MARKS[0] and y[1] == task.STEP_TABLE[problems[0, 0], problems[0, 2]]
assert y[2] == task.STEP_TABLE[y[1], problems[0, 1]]
assert task.correct_traces(problems, 8, 1)[0, 1] == task.STEP_TABLE[problems[0, 1], problems[0, 2]]

# %% [markdown]
# The base model is pretrained on *noisy* answers: 90% of them use strategy A and 10% strategy B (the
# share `q_other`), and each digit is replaced, with probability $\varepsilon = 0.4$, by a random
# other digit, the chain continuing from the corrupted value. A perfect model of these data writes
# the mark of A with probability 0.9 and is right at each digit with probability $1 - \varepsilon =
# 0.6$, so it solves a 20-token problem with probability about $0.6^{19} \approx 6 \times 10^{-5}$
# (either strategy; the experiment's base models measure $5.2 \times 10^{-5}$): every step is easy,
# the whole problem is hard, and the base model mostly uses strategy A.

# %%
rng = np.random.default_rng(0)
noisy = task.noisy_traces(problems[:1].repeat(4, 0), 8, 0.4, rng, strategies=[0, 0, 0, 1])
print("four noisy answers to the first problem (the last in strategy B):\n", noisy)

# %% [markdown]
# ## 2. The base model, and its exact success probability
#
# The shared tiny GPT-2 (a small decoder-only transformer language model; two layers, width 32, random
# init) is trained on the noisy answers, with the loss on the answer tokens only. The experiment
# trains 600 steps on batches of 128 at the book profile; here fewer steps on batches of 64. Its
# pretraining stream is drawn up front as a `datasets.Dataset`, generated by code (nothing is
# downloaded) and cached under `data/cache/`: one row per sequence, in training order. Its first rows:

# %%
corpus = task.pretraining_corpus(demo_steps, demo_batch, L=20, eps=0.4, seed=0, q_other=0.1)
print(f"{len(corpus):,} rows, columns {corpus.column_names}")
corpus.select(range(4)).to_pandas()

# %%
cfg = core.configure(experiment.EXPERIMENT_PROFILES, "book", base_steps=demo_steps, base_batch=demo_batch)
model, losses = task.train_base(cfg, seed=0)
print(f"loss: first 20 steps {losses[:20].mean():.3f}, last 20 steps {losses[-20:].mean():.3f} nats per step; "
      f"noise floor {task.noise_floor(0.4, 20, 0.1):.3f}")

# %% [markdown]
# Because exactly two answers are correct, the probability that a sampled answer is correct is the sum
# over the two of the product of the model's probabilities of each correct step given the correct
# history: $\text{pass@1}(x) = \sum_{s \in \{A, B\}} \prod_t \pi_\theta(y^{x,s}_t \mid x, y^{x,s}_{<t})$, two
# teacher-forced forward passes, with no sampling noise. pass@1 is the chance that one sampled answer is correct (pass@k: that at
# least one of $k$ is). A Monte Carlo check (estimating the same probability from random samples) on a
# short chain:

# %%
short = task.all_problems()[::100]
exact = task.pass_at_1(model, short, L=3)
start = torch.as_tensor(task.prompts(short)).repeat_interleave(2000, 0)
samples, _ = causal_lm.sample(model, start, 3, eos_id=task.NO_EOS, pad_id=task.SEP,
                              generator=torch.Generator().manual_seed(0))
hit = sum((samples == torch.as_tensor(task.correct_traces(short, 3, s)).repeat_interleave(2000, 0)).all(1).float()
          for s in task.STRATEGIES)
monte_carlo = hit.reshape(len(short), 2000).mean(1).numpy()
print(f"exact pass@1 (L = 3) {exact.mean():.4f}, Monte Carlo {monte_carlo.mean():.4f}")
assert np.abs(exact - monte_carlo).max() < 0.05

# %% [markdown]
# The same forward pass gives the model's accuracy at every position (the back-generalization map of
# the experiment) and its success from a correct prefix of every length:

# %%
train, heldout = task.split_problems(256, seed=0)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
axes[0].plot(np.arange(1, 21), task.step_accuracy(model, heldout, 20), marker="o")
axes[0].set(xlabel="position $t$", ylabel="p(correct step | correct history)", ylim=(0, 1))
axes[1].plot(np.arange(20), task.prefix_curve(model, heldout, 20), marker="o")
axes[1].set(xlabel="prefix length $h$", ylabel="pass@1 from the prefix", yscale="log")
plt.show()

# %% [markdown]
# *Figure 1. The briefly trained base model on the 744 held-out problems, along the strategy-A
# answer: probability of the correct token at each position given a correct history (left; position
# 1 is the mark), and the exact probability of finishing correctly from a correct prefix of length
# $h$ (right, log scale).*
#
# Position 1 is the mark (about 0.9 for A once trained); position 2, the first digit, lags behind: it
# is the one step computed from prompt tokens, a slightly different computation that the model learns
# later.
#
# ## 3. Prefixed problems and rollouts
#
# A prefixed problem is the prompt followed by the first $h$ tokens of a correct trace (its mark, so
# its strategy, included). `rollouts` samples $G$ completions of the remaining $L - h$ tokens and
# scores each (correct if the whole answer is one of the two correct ones); the mask marks the sampled
# tokens, the only ones the loss will see.

# %%
ids, mask, rewards = task.rollouts(model, train[:2], prefix_len=16, G=8, L=20, generator=torch.Generator().manual_seed(1),
                                   strategy=1)
print("one rollout:     ", ids[0].tolist())
print("completion mask: ", mask[0].int().tolist())
print("rewards per problem (rows) and completion (columns):\n", rewards)
prefix = task.prefixed_prompts(train[:1], 16, 20, strategy=1)[0]
assert torch.equal(ids[0, :21], torch.as_tensor(prefix)) and mask[0].sum() == 4 and not mask[0, :21].any()

# %% [markdown]
# ## 4. Group-relative advantages and the loss
#
# Each completion's advantage compares its reward with the other completions of the same prefixed
# problem, $A_i = (r_i - \bar r) / (\operatorname{std}(r) + 10^{-6})$ (`replib.rl.group_advantages`). The
# loss is $-\frac{1}{BG} \sum_i A_i \log \pi_\theta(y'_i \mid x, y^x_{1:h})$, where the log-probability
# sums over the completion tokens only (`causal_lm.sequence_logprob` with the mask): the prefix is
# part of the prompt, so nothing off-policy gets a gradient and no importance weight is needed.

# %%
core.show_source(rl.group_advantages)

# %%
r = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
A = rl.group_advantages(r)
print(A)
assert torch.allclose(A[0], torch.tensor([3.0, -1.0, -1.0, -1.0]) / np.sqrt(3), atol=1e-5)
assert (A[1:] == 0).all() and np.isclose(rl.nonzero_advantage_share(r), 1 / 3)

# %% [markdown]
# A group whose completions all fail (or all succeed) contributes nothing. One update with
# `rl_step`: on problems the model cannot solve from the start, the parameters do not move; from a
# long prefix, they do.

# %%
def one_update(prefix_len):
    trial = task.train_base(core.configure(experiment.EXPERIMENT_PROFILES, "book", base_steps=1), seed=0)[0]
    before = [p.detach().clone() for p in trial.parameters()]
    optimiser = torch.optim.Adam(trial.parameters(), lr=1e-3)
    stats = method.rl_step(trial, optimiser, train[:16], prefix_len, cfg, torch.Generator().manual_seed(0),
                           rollouts=task.rollouts)
    moved = sum(float((p.detach() - b).abs().sum()) for p, b in zip(trial.parameters(), before))
    return stats, moved


for h in (0, 19):
    stats, moved = one_update(h)
    print(f"h = {h:2d}: share of groups with a signal {stats['share_nonzero']:.2f}, "
          f"mean reward {stats['mean_reward']:.3f}, total parameter change {moved:.3g}")
    assert (moved == 0) == (stats["share_nonzero"] == 0)

# %% [markdown]
# (A nearly untrained model is used here so that the two cases are clear-cut: from the start it never
# solves 20 steps; with one step left, a guess is sometimes right.)
#
# ## 5. Where the traces come from, and the off-policy baseline
#
# In the paper the traces come from rejection sampling the base model (algorithm step 1), or from a
# model of another family. Our two-strategy regime takes the second route: the traces are strategy-B
# answers of another "family" (a B generator that errs at each digit with probability 0.25), so they
# use the strategy our base model rarely writes. A sample is correct with the exact probability
# $p_x$, so the number of samples until the first correct one is geometric: `task.rejection_sample`
# draws it, capped at $K$ samples per problem, and returns which problems got a trace and the samples
# spent, the compute the experiment charges.

# %%
core.show_source(task.rejection_sample)

# %%
found, draws = task.rejection_sample(np.array([0.5, 2e-3, 0.0]).repeat(20000), 256, np.random.default_rng(0))
found, draws = found.reshape(3, -1), draws.reshape(3, -1)
print("share found:", found.mean(axis=1).round(3), " mean samples spent:", draws.mean(axis=1).round(1))
assert abs(found[1].mean() - (1 - (1 - 2e-3) ** 256)) < 0.02 and not found[2].any() and (draws[2] == 256).all()

# %% [markdown]
# The baseline that uses the traces as targets instead (`baselines.iw_offpolicy_step`) puts the
# trace into each group beside $G - 1$ rollouts and weights its tokens by the importance ratio
# between the current policy and the one that produced the trace, truncated at 1 (for a strategy-B
# trace the base model's mark probability is about 0.1, so its first weight starts near 0.1):

# %%
core.show_source(baselines.truncated_importance_weights)

# %%
w = baselines.truncated_importance_weights(torch.log(torch.tensor([0.3, 0.6, 0.9])), np.array([0.6, 0.6, 0.6]), clip=1.0)
print(w)
assert torch.allclose(w, torch.tensor([0.5, 1.0, 1.0]))

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write `group_advantages(rewards)` for a `(B, G)` array of rewards: subtract each
# row's mean and divide by its standard deviation (population, not sample) plus $10^{-6}$.

# %% tags=["solution", "hide-input"]
def group_advantages(rewards):
    rewards = np.asarray(rewards, dtype=float)
    mean = rewards.mean(axis=1, keepdims=True)
    return (rewards - mean) / (rewards.std(axis=1, keepdims=True) + 1e-6)


# %%
exercises.check_group_advantages(group_advantages)

# %% [markdown]
# **Exercise 2.** Write `group_signal_probability(p, G)`: the probability that $G$ independent
# rollouts with success probability $p$ are neither all failures nor all successes.

# %% tags=["solution", "hide-input"]
def group_signal_probability(p, G):
    p = np.asarray(p, dtype=float)
    return 1 - (1 - p) ** G - p**G


# %%
exercises.check_group_signal_probability(group_signal_probability)

# %% [markdown]
# **Exercise 3 (open).** `rl_step` uses the plain policy-gradient loss. Replace it by
# `rl.clipped_surrogate` with several updates per batch. When does that differ, and what does the
# prefix change about the ratio $\pi_\theta / \pi_{\text{old}}$?
#
# ## Summary
#
# PrefixRL is a small change to group-relative RL: the prompt is extended by a prefix of a correct
# trace and the loss is masked to the completion. Everything else (sampling, rewards, advantages, the
# optimiser) is standard. Exact success probabilities, available because each problem has exactly two
# correct answers, let the experiment measure progress on hard problems without sampling noise.
