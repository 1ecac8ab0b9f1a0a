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
# # Logicality-guided reasoning data: implementation
#
# This notebook builds the pieces of `replib.papers.physlogic`: the PhysChain problems (synthetic
# physics word problems) and the teacher that writes candidate solutions (its `task` module), the
# logicality assessment (logical fidelity $F$, causal connection $O$, inferential progress $P$) and
# the trace selection (its `method` module), and the fine-tuning of the shared tiny GPT (a small
# decoder-only transformer language model, trained from scratch) of `replib.models.causal_lm`, every
# seed and arm at once as one batched model (its `experiment` module). Each metric sits next to the step of the official code it implements and is
# checked on small inputs.
#
# **Learning goals.** After this notebook you can
#
# 1. generate PhysChain problems, their nexuses (the key derivation steps a solution should cover),
#    and candidate solutions with controlled defects;
# 2. implement every step of the logicality assessment and test it on matrices you can check by hand;
# 3. select one training trace per problem by logicality or by correctness, and fine-tune and
#    evaluate several copies of the tiny language model at once on the results.

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
from types import SimpleNamespace

import numpy as np
import torch

from replib import core
from replib.papers.physlogic import exercises, experiment, method, task

core.set_style()
profile = core.resolve_profile(profile)
torch.set_num_threads(1)
demo = {"smoke": dict(n_train=60, steps=20), "book": dict(n_train=150, steps=60),
        "paper": dict(n_train=580, steps=250)}[profile]

# %% [markdown]
# ## 1. PhysChain problems
#
# Eleven laws, each a product of two quantities (velocity $v = a t$, Newton's second law $F = m a$,
# momentum $p = m v$, work $W = F d$, Ohm's law $U = I R$, ...). A problem gives base quantities
# (integers 2 to 5) and asks for a target; its nexuses are the steps of the derivation, each
# quantity derived before it is used. Every value stays within 255, so each number is one token.
# There are 780 problems with two or three nexuses:

# %%
problems = task.all_problems((2, 3))
rng = np.random.default_rng(0)
problem = problems[int(rng.integers(len(problems)))]
print(len(problems), "problems; one of them:", problem)
print(task.trace_text(problem["steps"], problem["target"], problem["answer"]))
print("nexus weights (ours: 2 for the asked quantity's step):", task.nexus_weights(problem))

# %% [markdown]
# ## 2. The teacher and its defects
#
# `defective_trace` injects one defect; `teacher_candidate` applies each defect with its own
# probability. All but `slip` keep the answer right.

# %%
core.show_source(task.defective_trace)

# %%
for defect in task.DEFECTS:
    steps, answer = task.defective_trace(problem, defect, rng)
    print(f"{defect:10s} {task.trace_text(steps, problem['target'], answer)}")
    if defect != "slip":
        assert task.is_correct(answer, problem)
assert task.defective_trace(problem, "shortcut", rng)[0] == []

# %% [markdown]
# The model reads and writes tokens: seven per step (`out in1 in2 v1 v2 result .`), then
# `= answer <eos>`. `parse_completion` turns generated tokens back into the sentences the metrics
# read (a malformed step is written out word by word):

# %%
tokens = task.trace_tokens(problem["steps"], problem["answer"])
print(" ".join(task.VOCAB[t] for t in task.prompt_tokens(problem)), "|", " ".join(task.VOCAB[t] for t in tokens))
text, answer = task.parse_completion(tokens, problem)
assert text == task.trace_text(problem["steps"], problem["target"], problem["answer"]) and answer == problem["answer"]

# %% [markdown]
# ## 3. The logicality assessment, step by step
#
# **Step 1: sentences.** Split at `[.!?]+` followed by whitespace: a decimal point or a formula with
# no space after its full stop stays in one sentence.

# %%
core.show_source(method.split_sentences)
assert method.split_sentences("F = 2.5 N. So W = 3! Done") == ["F = 2.5 N", "So W = 3", "Done"]

# %% [markdown]
# **Step 2: the similarity matrix** $M_{ij} = \cos(e(n_i), e(s_j))$, with a TF-IDF encoder (term
# frequency times inverse document frequency: counts of words and word pairs, each scaled down the
# more sentences share it) in place of the paper's neural one (single letters count as words; the
# phrases every step shares are stop words, left out). Every number is first read as the word `num`:
# a step then matches its nexus when it applies the same law to the same quantities, whether or not
# its arithmetic is right, so that a wrong value cannot lower the logicality scores by itself (with
# the numbers kept as words, an arithmetic slip in the last step lowered F from 0.83 to 0.79 in our
# pilot, which made logicality partly a second measure of correctness).

# %%
core.show_source(method.mask_numbers)
core.show_source(method.TfidfEncoder)
assert method.mask_numbers("F = m * a = 2 * 3 = 6.") == "F = m * a = num * num = num."
encoder = experiment.encoder_for(problems)
nexuses = [task.step_sentence(s) for s in problem["steps"]]
M = method.similarity_matrix(encoder(nexuses), encoder(method.split_sentences(text)))
print(M.round(2))
assert np.allclose(np.diag(M[:, : len(nexuses)]), 1.0)  # each canonical step matches its nexus exactly
assert np.allclose(method.similarity_matrix(np.array([[1.0, 0.0]]), np.array([[3.0, 4.0], [0.0, 0.0]])),
                   [[0.6, 0.0]])

# %% [markdown]
# **Step 3: greedy matching** at $\tau = 0.3$: the largest remaining entry, its row and column removed,
# until nothing reaches $\tau$.

# %%
core.show_source(method.greedy_match)
crafted = np.array([[0.9, 0.8, 0.0], [0.85, 0.1, 0.0], [0.0, 0.0, 0.5]])
assert method.greedy_match(crafted) == [(0, 0), (2, 2)]  # the optimal assignment would pair (0,1), (1,0)

# %% [markdown]
# **Step 4: logical fidelity**, the weighted recall $\text{Rec} = \sum_{\mathcal P} w_i M_{ij} / \sum_i
# w_i$ (how much of the nexuses' weight is covered), the precision $\text{Prec} = |\mathcal P| / m$
# (the share of sentences matched to a nexus), and $F$ their harmonic mean.

# %%
core.show_source(method.fidelity)
rec, prec, f = method.fidelity(crafted, [(0, 0), (2, 2)], np.array([1.0, 1.0, 2.0]))
assert np.isclose(rec, (0.9 + 2 * 0.5) / 4) and np.isclose(prec, 2 / 3)
assert np.isclose(f, 2 * rec * prec / (rec + prec))

# %% [markdown]
# **Step 5: causal connection.** Centroids $\bar p_i = \sum_j j M_{ij} / \sum_j M_{ij}$ (raw
# similarities, $j$ from 1), then $O = \sum_{i<k} (w_i + w_k) \mathbb 1[\bar p_i < \bar p_k] /
# \sum_{i<k} (w_i + w_k)$.

# %%
core.show_source(method.centroids)
core.show_source(method.causal_connection)
assert np.allclose(method.centroids(np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]])), [2.0, 3.0, 0.0])
assert np.isclose(method.causal_connection(np.array([1.0, 3.0, 2.0]), np.array([1.0, 1.0, 2.0])), 5 / 8)
assert method.causal_connection(np.array([2.0]), np.array([1.0])) == 0.5

# %% [markdown]
# **Step 6: inferential progress**, the mean novelty $1 - \max(0, \max_{k<j} \cos(M_{:,j},
# M_{:,k}))$ of each sentence's focus after the first.

# %%
core.show_source(method.inferential_progress)
assert method.inferential_progress(np.eye(3)) == 1.0
assert np.isclose(method.inferential_progress(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])), 0.5)

# %% [markdown]
# **Step 7: everything for one trace**, and `assess` for many traces with one encoder call (each
# distinct sentence encoded once).

# %%
core.show_source(method.logicality)
scores = method.assess(encoder, [nexuses] * 2, [task.nexus_weights(problem)] * 2,
                       [text, task.trace_text(problem["steps"][::-1], problem["target"], problem["answer"])])
print(scores)
assert scores[0]["Rec"] == 1.0 and scores[0]["O"] == 1.0 and scores[1]["O"] == 0.0

# %% [markdown]
# ## 4. Selecting the training traces
#
# The candidate corpus of a seed is a `datasets.Dataset` (built once, cached under `data/cache/`):
# one row per candidate with its text, tokens, defects, correctness and scores.

# %%
cfg = SimpleNamespace(**{**experiment.EXPERIMENT_PROFILES["smoke"], **demo})
train, test = experiment.split_problems(cfg, 0)
corpus = experiment.candidate_corpus(cfg, 0, train, experiment.encoder_for(train))
corpus.to_pandas()[["problem", "candidate", "defects", "correct", "F", "O", "P", "S", "text"]].head(8)

# %% [markdown]
# The selection rule, with $S = (F + O + P)/3$ (ours): the best correct candidate, a random correct
# one, or a random one.

# %%
core.show_source(method.select_traces)
frame = corpus.to_pandas()
correct = frame["correct"].to_numpy().reshape(len(train), cfg.n_candidates)
score = frame["S"].to_numpy().reshape(len(train), cfg.n_candidates)
for condition in method.CONDITIONS:
    pick = method.select_traces(correct, score, condition, np.random.default_rng(1))
    rows = np.arange(len(train)) * cfg.n_candidates + pick
    print(f"{condition:12s} correct {frame.correct[rows].mean():.2f}, F {frame.F[rows].mean():.3f}, "
          f"defect-free {(frame.defects[rows] == '').mean():.2f}")
best = method.select_traces(correct, score, "logicality", np.random.default_rng(1))
assert all(score[k, best[k]] == score[k][correct[k]].max() for k in range(len(train)) if best[k] >= 0)

# %% [markdown]
# ## 5. Fine-tuning and evaluating the models, all at once
#
# Every model of the experiment (each seed and data condition) is the shared tiny GPT of
# `replib.models.causal_lm.tiny_gpt` (GPT-2 blocks: layer norm before attention and before the
# two-layer perceptron, causal attention, a tanh-approximated GELU, output layer tied to the token
# embedding), initialised from its seed. The models are small enough that one at a time leaves the
# processor idle between tiny matrix products, so we stack their weights along a new first axis and
# run them as one batched model: `batched_forward` is GPT-2's computation with a batched matrix
# product per layer, checked here against the `transformers` model it copies.

# %%
core.show_source(experiment.batched_forward)
twins = experiment.initial_models(cfg, [0, 1])
stacked = experiment.stack_gpts(twins)
ids = torch.randint(0, len(task.VOCAB), (2, 3, 12))
with torch.no_grad():
    batched = experiment.batched_forward(stacked, ids, cfg.n_head)
    for g in range(2):
        assert torch.allclose(batched[g], twins[g](ids[g]).logits, atol=1e-5)

# %% [markdown]
# The objective of each model is the mean cross-entropy of its trace tokens (not the question);
# training minimises the sum over models, so each model receives the gradient of its own mean, and
# AdamW is elementwise, so one optimiser over the stacked weights is one AdamW per model (with one
# learning rate per model). The learning rate warms up over 50 steps and then stays constant: the
# model after half of the steps is then exactly the model a half budget would give, which is how the
# experiment checks that both arms have converged.

# %%
core.show_source(experiment.trace_loss)
core.show_source(experiment.train_models)

# %% [markdown]
# A short demonstration: the logicality-guided and the correctness-only traces of the same problems,
# one model each, trained together; then both solve 20 held-out problems greedily (decoding is
# batched too, with a key-value cache) and at temperature 1, where both models of a seed share the
# same random draws (the Gumbel-max trick: the token with the largest log-probability plus Gumbel
# noise is a draw from the model's distribution, and the noise is common to the two arms).

# %%
cfg.steps = demo["steps"]
keep = np.flatnonzero((best >= 0) & correct.any(axis=1))
picks = {"logicality": best[keep],
         "correctness": method.select_traces(correct, score, "correctness", np.random.default_rng(1))[keep]}
prompts = [task.prompt_tokens(train[k]) for k in keep]
data = [experiment.sequences(prompts, [corpus[int(k * cfg.n_candidates + c)]["tokens"] for k, c in zip(keep, pick)])
        for pick in picks.values()]
params, losses = experiment.train_models(cfg, data, [0, 0], [cfg.lr, cfg.lr_baseline])
preps = {0: {"test": test[:20], "encoder": experiment.encoder_for(train)}}
result = experiment.evaluate_models(cfg, params, [(0, c) for c in picks], preps)
print(f"loss {losses[0].round(2)} -> {losses[-1].round(2)}")
print(result.groupby(["decoding", "condition"])[["correct", "F", "O", "P"]].mean().round(2))
print(result.text.iloc[0])
assert (losses[-1] < losses[0]).all()

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write the causal connection `causal_connection(pbar, weights)`: the weighted share
# of nexus pairs $i < k$ whose centroids are in order, each pair weighted by $w_i + w_k$, strictly
# ordered, and 0.5 when there is only one nexus.

# %% tags=["solution", "hide-input"]
def causal_connection(pbar, weights):
    pbar, weights = np.asarray(pbar, dtype=float), np.asarray(weights, dtype=float)
    if len(pbar) < 2:
        return 0.5
    num = den = 0.0
    for i in range(len(pbar)):
        for k in range(i + 1, len(pbar)):
            den += weights[i] + weights[k]
            num += (weights[i] + weights[k]) * (pbar[i] < pbar[k])
    return num / den


# %%
exercises.check_causal_connection(causal_connection)

# %% [markdown]
# **Exercise 2.** Write the inferential progress `inferential_progress(M)`: for each sentence after
# the first, one minus its focus column's largest cosine similarity with an earlier column (clipped
# below at 0, skipping zero columns); the mean of those; 1 for a single sentence.

# %% tags=["solution", "hide-input"]
def inferential_progress(M):
    M = np.asarray(M, dtype=float)
    if M.shape[1] <= 1:
        return 1.0
    novelty = []
    for j in range(1, M.shape[1]):
        best = None
        for k in range(j):
            a, b = np.linalg.norm(M[:, j]), np.linalg.norm(M[:, k])
            if a > 0 and b > 0:
                cos = M[:, j] @ M[:, k] / (a * b)
                best = cos if best is None else max(best, cos)
        novelty.append(1.0 if best is None else 1.0 - max(0.0, best))
    return float(np.mean(novelty))


# %%
exercises.check_inferential_progress(inferential_progress)

# %% [markdown]
# **Exercise 3 (open).** Replace the greedy matching of step 3 by the optimal one-to-one assignment
# (`scipy.optimize.linear_sum_assignment`). On PhysChain traces, does any score change? Build a trace
# for which it does.
#
# ## Summary
#
# The assessment is seven short functions over one similarity matrix; the method, as the book reads
# the paper, is a selection rule on top of it. The experiment fine-tunes the same tiny GPT on the
# traces each rule selects and scores the model's own solutions with the same functions.
