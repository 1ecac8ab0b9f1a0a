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
# # Logicality-guided reasoning data: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. check that the logicality metrics, with an offline encoder, see each defect they are meant to
#    see (the chapter's first precondition);
# 2. compare a tiny language model fine-tuned on logicality-selected traces with the same model
#    fine-tuned on correctness-only traces, on the logicality and the accuracy of its own solutions;
# 3. say which of the paper's two findings hold on the toy, and where greedy decoding hides the
#    difference.
#
# **Setting (book profile).** Per seed, the 780 PhysChain problems with two or three nexuses are
# shuffled: 200 are held out for testing and 580 are for training. A teacher writes 8 candidate
# solutions per training problem, each with independent defects (skip a step 0.3, swap two dependent
# steps 0.3, repeat a step 0.25, insert an irrelevant true step 0.25, answer without a derivation
# 0.1, an arithmetic slip in the last step 0.2); three quarters of the correct candidates carry a
# defect. Every candidate is scored with F, O, P (TF-IDF encoder, $\tau = 0.3$). Two training sets
# of one trace per problem are drawn from the same candidates:
#
# - **logicality-guided** (the method, as the book reads the paper): the correct candidate with the
#   highest $S = (F + O + P)/3$;
# - **correctness-only** (rejection sampling, the baseline): a random correct candidate.
#
# The shared tiny GPT (two layers, width 64, word-level vocabulary of 277 tokens, the same initial
# weights for both) is fine-tuned on each for 250 AdamW steps of 32 traces (learning rate
# $5 \times 10^{-3}$, loss on the solution tokens). Each model then solves the 200 held-out problems
# greedily, and once more at temperature 1; its solutions are scored for accuracy (exact answer) and
# for F, O, P against the ground-truth nexuses. The claims and thresholds were declared in
# `chapter.yml` before any logicality-guided model was trained.

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
steps = None  # fine-tuning steps per model
n_train = None  # training problems (at most 770 - n_test)
n_test = None  # held-out problems
n_candidates = None  # teacher candidates per training problem
conditions = None  # data conditions: subset of logicality, correctness, unfiltered
lr = None  # fine-tuning learning rate
n_embd = None  # width of the tiny GPT

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from replib import core
from replib.papers.physlogic import experiment

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds, steps=steps,
                     n_train=n_train, n_test=n_test, n_candidates=n_candidates, conditions=conditions, lr=lr,
                     n_embd=n_embd)
ledger = core.Ledger("physlogic", cfg.profile, cfg.seeds, parameters=vars(cfg))
labels = {"logicality": "logicality-guided", "correctness": "correctness-only", "unfiltered": "unfiltered"}
colors = {"logicality": "C0", "correctness": "C1", "unfiltered": "C2"}
cfg

# %%
results = experiment.run_experiment(cfg, progress=core.progress, threads=1)  # one thread: the same numbers anywhere
evals = results["evals"].assign(label=lambda d: d["condition"].map(labels))

# %% [markdown]
# ## 1. The metric sees the defects (claim 4 of the digest)
#
# Before any training: fresh problems, each written once without a defect and once with each single
# defect; the mean of every metric per defect (all seeds together). Each defect should lower the
# metric in its column of the claims (skip: Rec, swap: O, loop: P, irrelevant: Prec).

# %%
results["defects"].groupby("defect", sort=False)[["F", "O", "P", "Rec", "Prec"]].mean().round(3)

# %% [markdown]
# ## 2. The two training sets
#
# One row per seed and condition: the mean logicality of the selected traces, the share free of
# defects, and the share of all correct teacher candidates that carry a defect (the paper's premise
# that a right answer does not imply logical reasoning).

# %%
results["selected"].set_index(["condition", "seed"])[["n", "F", "O", "P", "S", "defect_free",
                                                       "correct_with_defect"]].round(3)

# %%
losses = results["losses"]
fig, ax = plt.subplots(figsize=(6, 3.2))
for condition, group in losses.groupby("condition", sort=False):
    curve = group.groupby("step")["loss"].mean().rolling(10, min_periods=1).mean()
    ax.plot(curve.index, curve, color=colors[condition], label=labels[condition])
ax.set(xlabel="fine-tuning step", ylabel="loss (nats per solution token)", yscale="log")
ax.legend()
plt.show()

# %% [markdown]
# *Figure 1. Fine-tuning loss per condition, mean over seeds, smoothed over 10 steps (log scale).*
#
# ## 3. The models' own solutions

# %%
summary = evals.groupby(["decoding", "label", "seed"])[["correct", "F", "O", "P", "Rec", "Prec"]].mean()
summary.groupby(["decoding", "label"]).agg(["mean", "std"]).round(3)

# %%
metrics = ["correct", "F", "O", "P"]
per_seed = evals.groupby(["decoding", "condition", "seed"])[metrics].mean().reset_index()
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), sharey=True)
width = 0.8 / len(cfg.conditions)
for ax, decoding in zip(axes, ["greedy", "sampled"]):
    for k, condition in enumerate(cfg.conditions):
        rows = per_seed[(per_seed.decoding == decoding) & (per_seed.condition == condition)]
        x = np.arange(len(metrics)) + (k - (len(cfg.conditions) - 1) / 2) * width
        ax.bar(x, rows[metrics].mean(), width, yerr=rows[metrics].std() if len(rows) > 1 else None,
               color=colors[condition], label=labels[condition], capsize=3)
        for j, m in enumerate(metrics):
            ax.plot(np.full(len(rows), x[j]), rows[m], "k.", ms=4)
    ax.set(xticks=range(len(metrics)), xticklabels=["accuracy", "F", "O", "P"], title=f"{decoding} decoding",
           ylim=(0, 1.05))
axes[0].set(ylabel="mean over held-out problems")
axes[0].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. Accuracy and logicality (F, O, P) of the models' held-out solutions, greedy (left) and
# one sample at temperature 1 (right); bars: mean over seeds, error bars: sd over seeds, dots: the
# seeds.*

# %%
greedy = evals[(evals.decoding == "greedy") & evals.condition.isin(["logicality", "correctness"])]
bins = pd.cut(greedy["F"], [-0.01, 0.2, 0.4, 0.6, 0.7, 0.8, 1.0])
binned = greedy.groupby([bins, "condition"], observed=True)["correct"].agg(["mean", "size"]).reset_index()
fig, ax = plt.subplots(figsize=(6, 3.4))
for condition, group in binned.groupby("condition", sort=False):
    centres = [interval.mid for interval in group["F"]]
    ax.scatter(centres, group["mean"], s=8 + group["size"] / 3, color=colors[condition], label=labels[condition],
               alpha=0.8)
ax.set(xlabel="logical fidelity f of the solution", ylabel="share correct", ylim=(-0.03, 1.03))
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 3. Share of correct greedy solutions per bin of their F (all seeds; marker area grows with
# the number of solutions in the bin). Claim c1 is the rank correlation behind this picture.*
#
# What a solution looks like: the first held-out problem of the first seed, for both models.

# %%
first = evals[(evals.seed == cfg.seeds[0]) & (evals.problem == 0)]
for _, row in first.iterrows():
    print(f"{row.label}, {row.decoding} (correct {bool(row.correct)}, F {row.F:.2f}, O {row.O:.2f}, "
          f"P {row.P:.2f}):\n  {row.text}\n")

# %% [markdown]
# Where the time went, seconds per seed (data: problems, candidates, scoring, the defect check):

# %%
results["seconds"].set_index("seed").round(1)

# %% [markdown]
# ## 4. The claims

# %%
values = experiment.claim_values(results, cfg)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# ## What we learned
#
# *Written for the book-profile run (three seeds); the numbers above come from whatever run produced
# this page.*
#
# - **The rebuild works (p1 to p5 hold).** Fine-tuned on correctness-only traces, the tiny GPT
#   answers 0.52 to 0.71 of the held-out problems right (greedy), so it has learnt the products; and
#   the metrics with the TF-IDF encoder see every defect: a skipped step lowers Rec by 0.29 to 0.30,
#   a swap lowers O by 0.69 to 0.73, a repeated step lowers P by 0.12 to 0.13 and an irrelevant step lowers
#   Prec by 0.13 to 0.14.
# - **The premises.** Of the teacher's correct candidates, 73% to 75% carry a defect (r1), and
#   selection by S raises the training set's mean F by 0.13 (r2: 0.78 to 0.79 against 0.65 to 0.66;
#   76% to 80% of the selected traces are defect-free, against 25% to 27%).
# - **Finding 1, logicality, greedy (h1 fails: +0.077 against +0.10; seeds +0.063, +0.056, +0.113).**
#   The logicality-guided model's greedy solutions have F 0.79 to 0.81, the correctness-only model's
#   0.70 to 0.75. The gap is real on every seed but smaller than declared, for a reason the toy makes
#   plain: greedy decoding keeps each model's most likely solution, and under correctness-only data
#   the most likely next step is still the defect-free one (each defect is in at most a third of the
#   traces), so the baseline's greedy solutions are already mostly logical. The ceiling is low too: a
#   defect-free solution scores F of about 0.83 (its answer sentence matches no nexus), so the
#   declared +0.10 needed the baseline below 0.73. Order moved most where a model could err: O rose by
#   0.04 to 0.12 (m1) to 1.00 on every seed, and P by 0.04 to 0.08 (m2).
# - **Not only the mode (c2 holds, +0.19; c3 holds, +0.15).** Drawing one solution at temperature 1,
#   the model's own distribution shows what it learnt: F 0.68 to 0.70 against 0.43 to 0.56, and
#   accuracy 0.43 to 0.47 against 0.20 to 0.38. The correctness-only model has learnt to skip, swap
#   and loop at about the rates of its data.
# - **Finding 2, accuracy (h2 fragile: +0.19 mean; seeds +0.165, +0.040, +0.365).** The
#   logicality-guided model is right on 0.75 to 0.88 of the held-out problems, the baseline on 0.52
#   to 0.71. Two seeds clear the declared 5 points by far; on seed 1 the baseline reached 0.71 and the
#   gap is 4 points. Why logicality helps here: after a skipped or swapped step the trace quotes a
#   value it never derived, so a model trained on such traces must sometimes compute two products in
#   one token, which it learns less well in 250 steps.
# - **Logicality goes with correctness (c1 fragile: rho 0.38 mean; seeds 0.43, 0.27, 0.44).** Over
#   both models' greedy solutions, higher F comes with more correct answers (Figure 3); on seed 1,
#   where the two models differ least, the correlation is below the declared 0.3.
#
# ## What we scaled down, and why the effect should survive it
#
# - **Problems.** Synthetic word problems with two or three multiplicative laws and canonical
#   phrasing, instead of problems extracted from arXiv physics papers. The nexuses and their order
#   are known exactly, which is what the metrics need; real problems have paraphrased steps, where
#   the neural encoder matters.
# - **Encoder.** TF-IDF over words and word pairs instead of all-MiniLM-L6-v2. With canonical
#   sentences a matching step has similarity 1, so the threshold and the encoder barely matter here;
#   with free text they would.
# - **Teacher and selection.** A programmed teacher with known defect rates and best-of-8 selection
#   by $S = (F + O + P)/3$ among correct candidates are the book's proposal; the paper's sampling
#   method, its teacher and its way of combining F, O and P were not available.
# - **Model and training.** A 0.1M-parameter GPT trained from scratch for 250 steps, not three
#   pretrained LLM backbones; supervised fine-tuning only (the paper's training recipe was not
#   available). The mechanism that makes logicality help, that an underived value forces the model
#   to do in one step what a full derivation spreads over two, is one a large model meets too, on
#   problems long enough to strain it.
# - **Left out.** The out-of-distribution test with one law more (with every value capped at 255 only
#   20 four-step problems exist), the unfiltered condition (available as `conditions`, run at the
#   paper profile), the per-type reporting of the benchmark, and any real PhysLogic item.
#
# ## Reading the verdicts

# %%
ledger.report()

# %% [markdown]
# ## Summary
#
# With the same problems, teacher candidates, budget and seeds, a tiny language model fine-tuned on
# logicality-selected traces writes more logical solutions and gets more of them right than one
# fine-tuned on randomly chosen correct traces. The accuracy gain is large on two seeds of three and
# small on the third; the logicality gain of the greedy solutions is smaller than the declared 0.10,
# because greedy decoding keeps the baseline's most logical habit, while at temperature 1 the gap is
# clear on every seed. On this toy, the paper's two findings hold in direction, and the second holds
# at the digest's margin on most seeds.
#
# ## Exercises
#
# 1. Add the unfiltered condition (`conditions = ["logicality", "correctness", "unfiltered"]`).
#    Predict its accuracy before running: how much does the correctness filter alone buy?
# 2. Lower the teacher's skip and swap rates to 0.1 (`experiment.TEACHER_RATES`) and run again. Which
#    gap shrinks more, accuracy or F, and why?
# 3. Train longer (`steps = 600`). Does the accuracy gap close as the baseline learns two products in
#    one token? What does that say about when logicality-rich data matters?
