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
# # Logicality-guided reasoning data: theory
#
# **Learning goals.** After this notebook you can
#
# 1. say what the paper means by the logicality of a reasoning trace, and why a correct answer does
#    not imply it;
# 2. compute the three metrics, logical fidelity $F$, causal connection $O$ and inferential progress
#    $P$, from a similarity matrix between a problem's key steps and the sentences of a trace;
# 3. predict which defect of a trace each metric sees, and where the metrics have blind spots;
# 4. explain why selecting training traces by logicality can change what a model learns even when
#    every selected trace has the right answer.
#
# **Sources.** "PhysLogic: Scientific Logicality Enriched Methodology for LLM Reasoning: A Practice
# in Physics", ICML 2026 ([arXiv 2605.17104](https://arxiv.org/abs/2605.17104)), with official
# evaluation code ([ScienceOne-AI/PhysLogic](https://github.com/ScienceOne-AI/PhysLogic)). Only the
# abstract and the first lines of the paper could be read. The official code decided the three
# logicality metrics, which we follow exactly; how the paper selects and trains on its data could
# not be read, so the book's version of that part is our own proposal (see "Sources in detail" at the
# end).

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
import pandas as pd
from scipy.optimize import linear_sum_assignment

from replib import core
from replib.papers.physlogic import method, task

core.set_style()
profile = core.resolve_profile(profile)
n_simulated = {"smoke": 2_000, "book": 20_000, "paper": 100_000}[profile]

# %% [markdown]
# ## 1. The problem
#
# Scientific question answering is usually trained for final-answer accuracy. But a right answer can
# come from a reasoning path that skips a step, uses a result before deriving it, or goes round in
# circles. The paper calls the quality it wants **logicality**: a trace should cover the key
# derivation steps of the problem (the **logical nexuses** $n_1, \dots, n_K$, with importance
# weights $w_i$), in an order that respects their dependencies, each sentence moving the derivation
# forward. It asks three questions: how to measure logicality, how to build training data rich in it,
# and whether logicality drives accuracy.
#
# Our toy, PhysChain, has problems such as this one; its nexuses are the steps of the derivation:

# %%
problem = {"target": "W", "given": {"m": 2, "a": 3, "t": 2, "v": 4},
           "steps": [("F", "m", "a", 2, 3, 6), ("d", "v", "t", 4, 2, 8), ("W", "F", "d", 6, 8, 48)], "answer": 48}
nexuses = [task.step_sentence(s) for s in problem["steps"]]
weights = task.nexus_weights(problem)
for w, n in zip(weights, nexuses):
    print(f"w = {w:.0f}  {n}")

# %% [markdown]
# ## 2. The metrics in equations
#
# The reasoning $R$ is split into sentences $s_1, \dots, s_m$ at the regular expression
# `[.!?]+\s+`. An encoder $e$ maps every nexus and sentence to a vector and
# $M_{ij} = \cos(e(n_i), e(s_j))$ is a $K \times m$ matrix.
#
# **Logical fidelity** (coverage). A greedy one-to-one matching $\mathcal P$ takes the largest
# remaining $M_{ij} \ge \tau$ ($\tau = 0.3$), removes its row and column, and repeats. Then the
# recall Rec (how much of the nexuses' weight the matches cover), the precision Prec (the share of
# sentences matched to a nexus) and their harmonic mean $F$ are
# $$\text{Rec} = \frac{\sum_{(i,j) \in \mathcal P} w_i M_{ij}}{\sum_i w_i}, \qquad
#   \text{Prec} = \frac{|\mathcal P|}{m}, \qquad F = \frac{2\,\text{Prec}\,\text{Rec}}{\text{Prec} + \text{Rec}}.$$
# Recall is weighted and similarity valued; precision is a plain count of matched sentences.
#
# **Causal connection** (order). Each nexus gets a positional centroid over the sentences,
# $\bar p_i = \sum_j j\,M_{ij} / \sum_j M_{ij}$, and
# $$O = \frac{\sum_{i<k} (w_i + w_k)\,\mathbb 1[\bar p_i < \bar p_k]}{\sum_{i<k} (w_i + w_k)},$$
# a weighted share of nexus pairs that appear in the right order (0.5 for a single nexus).
#
# **Inferential progress** (no circling). Column $M_{:,j}$ is the "focus" of sentence $j$; its
# novelty is $\nu_j = 1 - \max(0, \max_{k<j} \cos(M_{:,j}, M_{:,k}))$ and $P = \frac{1}{m-1}
# \sum_{j=2}^m \nu_j$ ($P = 1$ for one sentence). An empty trace scores $F = O = P = 0$.
#
# ## 3. Four traces of one problem
#
# A defect-free trace, one that skips the first step (the later step still quotes its value), one
# that swaps two dependent steps and one that repeats a step. The encoder is TF-IDF (term frequency
# times inverse document frequency: a sentence becomes a vector of counts of its words and word
# pairs, each count scaled down the more sentences share that word), fitted on the nexus sentences of
# every PhysChain problem, with every number read as the word "num" (so that the scores read which
# law a step applies to which quantities, not whether its arithmetic is right).

# %%
encoder = method.TfidfEncoder(task.reference_sentences(task.all_problems((2, 3))))
steps = problem["steps"]
traces = {
    "defect-free": steps,
    "skip": steps[1:],
    "swap": [steps[0], steps[2], steps[1]],
    "loop": [steps[0], steps[1], steps[0], steps[2]],
}
rows, matrices = [], {}
for name, trace in traces.items():
    sentences = method.split_sentences(task.trace_text(trace, problem["target"], problem["answer"]))
    M = method.similarity_matrix(encoder(nexuses), encoder(sentences))
    matrices[name] = M
    rows.append({"trace": name, "sentences": len(sentences),
                 **method.logicality(encoder(nexuses), weights, encoder(sentences))})
pd.DataFrame(rows).set_index("trace").round(3)

# %% [markdown]
# The skipped step lowers recall (one nexus has no matching sentence; its centroid, computed from
# small raw similarities, lands out of place and costs some $O$ too), the swap lowers $O$ to the
# weighted share of pairs still in order, and the repeated step lowers both precision (a fifth
# sentence that cannot be matched one-to-one) and $P$ (its focus is the same as an earlier
# sentence's). Every trace
# has the right answer. Even the defect-free trace has $\text{Prec} = 3/4$ and $F < 1$: the closing
# answer sentence matches no nexus. Its $P$ is well below 1 too, because canonical sentences share
# quantity names and the masked numbers, so consecutive foci overlap; $P$ is meaningful only
# comparatively.

# %%
fig, axes = plt.subplots(1, 4, figsize=(13, 2.9), sharey=True)
for ax, (name, M) in zip(axes, matrices.items()):
    ax.imshow(M, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for i, j in method.greedy_match(M):
        ax.plot(j, i, "w+", ms=10, mew=2)
    for i, p in enumerate(method.centroids(M)):
        ax.plot(p - 1, i, "r|", ms=14, mew=2)
    ax.set(title=name, xlabel="sentence $j$", xticks=range(M.shape[1]))
axes[0].set(ylabel="nexus $i$", yticks=range(3))
plt.show()

# %% [markdown]
# *Figure 1. The similarity matrix $M$ (nexuses by sentences, TF-IDF cosine) of four traces of the
# same problem; white crosses: the greedy matches at $\tau = 0.3$; red bars: each nexus's positional
# centroid $\bar p_i$. The last column of every trace is the answer sentence.*
#
# ## 4. Properties and blind spots
#
# **Greedy is not optimal.** The official code matches greedily. On a crafted matrix the greedy
# matching covers less than the best one-to-one assignment (Hungarian algorithm):

# %%
crafted = np.array([[0.9, 0.8, 0.0], [0.85, 0.1, 0.0], [0.0, 0.0, 0.5]])
greedy = method.greedy_match(crafted, 0.3)
rows_opt, cols_opt = linear_sum_assignment(-np.where(crafted >= 0.3, crafted, 0.0))
optimal = [(int(i), int(j)) for i, j in zip(rows_opt, cols_opt) if crafted[i, j] >= 0.3]
for name, pairs in [("greedy", greedy), ("optimal", optimal)]:
    rec, prec, f = method.fidelity(crafted, pairs, np.ones(3))
    print(f"{name:8s} matches {pairs}: Rec {rec:.3f}, Prec {prec:.3f}, F {f:.3f}")

# %% [markdown]
# **The threshold.** With canonical sentences, a step that is written matches its nexus with
# similarity 1, so $\tau$ only decides the borderline cases. The clearest one is a shortcut answer,
# the answer sentence alone: it shares the target's symbol (and the masked value) with the last nexus, and
# whether that counts as covering the nexus depends on $\tau$ (200 problems):

# %%
rng = np.random.default_rng(0)
sample = task.sample_problems(200, (2, 3), rng)
nexus_texts = [[task.step_sentence(s) for s in p["steps"]] for p in sample]
texts = [task.trace_text(*task.defective_trace(p, "shortcut", rng), p["target"]) for p in sample]
sweep = []
for tau in (0.1, 0.2, 0.3, 0.4, 0.5, 0.8):
    scores = pd.DataFrame(method.assess(encoder, nexus_texts, [task.nexus_weights(p) for p in sample], texts, tau))
    sweep.append({"tau": tau, **scores[["Rec", "Prec", "F"]].mean().round(3).to_dict()})
pd.DataFrame(sweep).set_index("tau")

# %% [markdown]
# Below the similarity of the answer sentence to the last nexus, the one-sentence answer counts as a
# perfectly precise trace that covers the final step; above it, its F is 0. At the official
# $\tau = 0.3$ it sits on that edge for some problems, so shortcut answers get a small F rather than
# none. The precondition claims of the experiment check the defects that matter for training (skip,
# swap, loop, irrelevant step) at the official threshold.
#
# **Quirks worth knowing.** A sentence that shares no word with any nexus has a zero focus column;
# the code skips zero columns, so its novelty is 1 and irrelevant chatter *raises* $P$. A one-sentence
# answer has $P = 1$ and an $O$ decided by ties (the comparison is strict), so shortcut answers are
# caught by $F$ only. And the metrics read text, not arithmetic: with the numbers masked, a trace
# with a wrong number in a step scores exactly what the right trace scores. With the numbers kept as
# words (as an earlier set-up of this chapter did), a wrong value lowered the step's similarity to its
# nexus, and $F$ became in part a second measure of correctness.
#
# ## 5. Why selecting traces by logicality can matter
#
# Suppose a teacher writes $K$ candidate solutions per problem and a candidate is logical with
# probability $q$, correct with probability $c_1$ if logical and $c_0$ if not. Correctness-only
# selection (rejection sampling) keeps a random correct candidate, which is logical with probability
# $q c_1 / (q c_1 + (1-q) c_0)$; logicality-guided selection keeps a logical correct candidate
# whenever one exists, with probability $1 - (1 - q c_1)^K$. A simulation with our teacher's rates
# (about one candidate in four free of defects, most defects keeping the answer right):

# %%
def selection_effect(q, c1, c0, K, n, rng):
    logical = rng.random((n, K)) < q
    correct = rng.random((n, K)) < np.where(logical, c1, c0)
    score = logical + 0.01 * rng.random((n, K))  # logical candidates score higher
    out = {}
    for condition in ("logicality", "correctness"):
        pick = method.select_traces(correct, score, condition, rng)
        ok = pick >= 0
        out[condition] = logical[np.flatnonzero(ok), pick[ok]].mean()
    return out


K_values = [1, 2, 4, 8, 16]
effect = pd.DataFrame([{"K": K, **selection_effect(0.25, 0.8, 0.8, K, n_simulated // 16, rng)} for K in K_values])
fig, ax = plt.subplots(figsize=(5.5, 3.2))
ax.plot(effect.K, effect.logicality, marker="o", label="logicality-guided")
ax.plot(effect.K, effect.correctness, marker="s", label="correctness-only")
ax.set(xscale="log", xticks=K_values, xticklabels=K_values, xlabel="candidates per problem $k$",
       ylabel="share of logical traces kept", ylim=(0, 1.02))
ax.legend()
plt.show()

# %% [markdown]
# *Figure 2. Share of the selected training traces that are free of defects, as the number of
# candidates per problem grows (simulation: a candidate is defect-free with probability 0.25 and
# correct with probability 0.8 either way). Correctness-only selection cannot tell the two kinds of
# correct trace apart, so its share stays at 0.25.*
#
# Whether a model trained on the more logical set *reasons* more logically, and whether that makes
# it more *accurate*, is not settled by this arithmetic: that is what the experiment measures. In
# PhysChain a defect that keeps the answer right still changes what the model must learn: after a
# skipped or swapped step, a value appears that was never derived on the page, so the model must
# compute two products in one token.
#
# ## What to expect in the experiment
#
# The same tiny GPT (a small decoder-only transformer language model of the GPT-2 kind, trained here
# from scratch) is fine-tuned on one trace per training problem, chosen either by logicality
# (the highest $S$ among correct candidates) or by correctness only (a random correct candidate),
# with the same problems, budget and seeds, both trained until more steps no longer change them. If
# the paper's findings carry over, the first model's held-out solutions score higher on $F$ (finding
# 1; judged on solutions drawn from the model's own distribution, since the baseline's single most
# likely solution is already close to the ceiling of $F$) and are right more often (finding 2).
#
# ## Summary
#
# The paper measures logicality with three numbers computed from one similarity matrix between a
# problem's key steps and a trace's sentences: $F$ for coverage (weighted recall against a count
# precision), $O$ for order (weighted pairwise concordance of positional centroids) and $P$ for
# progress (novelty of each sentence's focus). Each sees a different defect, none checks the
# arithmetic, and the greedy matching and zero-column rule give them blind spots worth knowing. Used
# to select training data, they keep many more defect-free traces than correctness alone.
#
# ## Exercises
#
# 1. Write a trace that has $F = 1$ exactly on the example problem. (Hint: what must you do with the
#    answer sentence?) What are its $O$ and $P$?
# 2. Construct a trace of the example problem with the right answer and $O = 1$ but recall below
#    0.5. Which defect did you use?
# 3. In the selection simulation, let logical candidates be correct more often than the others
#    ($c_1 = 0.9$, $c_0 = 0.6$). How much of the logicality-guided advantage does correctness-only
#    selection recover, and why?
#
# ## Sources in detail
#
# The three logicality metrics ($F$, $O$, $P$: sentence splitting, greedy matching at $\tau = 0.3$,
# weighted recall, positional centroids, novelty of each sentence's focus) follow the official metric
# code exactly, quirks included. The one change is the sentence encoder: TF-IDF instead of the neural
# all-MiniLM-L6-v2, so that nothing is downloaded, with every number read as "num" (our choice, so
# that the scores do not check arithmetic through the back door). How the paper samples its logicality-rich training
# data, how it trains, its three backbones and all its numbers are not in the part of the paper that
# could be read: the abstract states only the two qualitative findings the experiment tests. The
# book's version of the rest is ours: the synthetic PhysChain problems, the nexus weights (2 for the
# step that derives the asked quantity, 1 for the others; the paper's weights come with its data), the
# teacher with controlled defects, and best-of-$K$ selection by $S = (F + O + P)/3$ among correct
# candidates.
