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
# # Edit refinement for masked diffusion LMs: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. measure how much validity a masked diffusion LM loses when it decodes many tokens per pass;
# 2. say how much ME-DLM's edit passes repair, and whether spending passes on edits beats spending
#    them on slower unmasking, the paper's headline comparison;
# 3. read an edit trace with replacements, deletions and insertions.
#
# **Setting (book profile).** The toy of the implementation notebook: 2-3 digit prompts, three valid
# answers (reverse, sorted, doubled), a 7-slot response canvas. Per seed, one two-head bidirectional
# transformer (three layers, width 64) is trained in mask mode for 1,000 steps (phase 1). From that
# checkpoint ME-DLM trains 600 more steps with half the batches in on-policy edit mode (phase 2),
# while the MDLM baseline trains the same phase-1 network for the same 600 steps in mask mode only, on
# the same rows, so both get the same data and the same number of optimiser steps. Each phase starts a
# fresh AdamW optimiser, learning rate $2 \times 10^{-3}$ with warmup and cosine decay, as the
# release's stages do. Batches hold 32 rows of the seed's generated corpus, with one mask rate per
# row, stratified over the batch, and LLaDA's loss weighting. Edit-mode labels are built against the
# valid answer nearest to the draft. Each model is
# evaluated on 300 fresh prompts: the MDLM decoded in 1, 2, 3, 4, 5 and 7 passes, and ME-DLM's 1- and
# 3-pass drafts before and after 1, 2 and 4 edit passes. A response is valid if it equals one of the
# three answers. Two preconditions are judged first: the MDLM must learn the toy (p1), and ME-DLM's
# edit passes must leave valid answers alone (p2). The claims and thresholds are declared in
# `chapter.yml` before this experiment ran.

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
steps1 = None  # phase-1 (mask mode) optimiser steps
steps2 = None  # phase-2 optimiser steps (edit training for ME-DLM, mask mode for the MDLM)
n_test = None  # held-out prompts per seed

# %%
import matplotlib.pyplot as plt
import numpy as np

from replib import core
from replib.papers.me_dlm import experiment, task

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     steps1=steps1, steps2=steps2, n_test=n_test)
ledger = core.Ledger("me_dlm", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## The training corpus
#
# Each seed trains on its own generated corpus: prompts with one of their three valid answers drawn
# uniformly, one row per training example, read in order, 32 rows per step. Phase 1 reads the first
# `steps1` batches; both phase-2 branches (ME-DLM and the MDLM baseline) read the same next `steps2`
# batches. The corpus is a `datasets.Dataset`, built once and cached under `data/cache/`. The first
# rows of the first seed's:

# %%
corpus = task.training_corpus(cfg.seeds[0], (cfg.steps1 + cfg.steps2) * cfg.batch)
print(f"{corpus.num_rows:,} rows")
corpus.to_pandas().head()

# %% [markdown]
# ## Training

# %%
# Each seed trains on one thread (the same numbers on any machine); two seeds run at once, in two
# processes, when two cores are free (one process under `make test`). The numbers are the same either way.
results = experiment.run_experiment(cfg, progress=core.progress, threads=1, workers=2)
validity = results["validity"]
table = validity.groupby(["model", "draft_passes", "edit_passes", "mode", "forward_passes"])[["validity", "distance"]]
table.agg(["mean", "std"]).round(2)

# %% [markdown]
# ## The preconditions: does the base model learn the toy?
#
# The learning curve of phase 1: the validity of the network decoded one token per pass (7 passes),
# every 200 steps, on 100 prompts of their own.

# %%
curve = results["curve"]
fig, ax = plt.subplots(figsize=(7, 3.4))
for seed, group in curve.groupby("seed"):
    ax.plot(group.step, group.validity, marker="o", label=f"seed {seed}")
ax.axhline(85, ls="--", color="0.5")
ax.set(xlabel="phase-1 step", ylabel="valid answers (%)", ylim=(0, 100))
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 1. Phase-1 learning curve: validity of the mask-mode network decoded one token per pass (7
# passes) on 100 prompts, every 200 steps, one line per seed; the dashed line is precondition p1's
# 85%, which is judged on the final MDLM (after phase 2's extra mask-mode steps) on the 300 test
# prompts.*

# %% [markdown]
# Validity per answer mode: each response is assigned to the valid answer it is nearest to (edit
# distance); `share` is how often the decoder heads for that mode, `validity` how often it gets there.
# A mode the network has not learned shows as a low validity in its row.

# %%
modes = results["modes"]
modes.groupby(["model", "draft_passes", "edit_passes", "answer_mode"], sort=False)[["share", "validity"]].mean().round(1)

# %% [markdown]
# Precondition p2 gives ME-DLM's edit passes answers that are already valid (one of the three per
# prompt) and counts how many come back unchanged, and how many are still valid.

# %%
results["copy"].groupby("edit_passes")[["unchanged", "valid"]].agg(["mean", "min"]).round(3)

# %%
train = results["train"]
first = train[train.seed == cfg.seeds[0]]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), sharey=True)
for (phase, mode), group in first.groupby(["phase", "mode"], sort=False):
    for ax, column in zip(axes, ["ce_cur", "ce_nxt"]):
        ax.plot(group.step, group[column].rolling(20, min_periods=1).mean(), label=f"{phase}, {mode}")
axes[0].set(xlabel="step", ylabel="token-head cross-entropy")
axes[1].set(xlabel="step", ylabel="insertion-head cross-entropy")
axes[1].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. Training cross-entropy of the token head (left) and the insertion head (right) per
# step, by mode (ME-DLM's phase 2 mixes mask-mode and edit-mode batches); first seed, smoothed over
# 20 steps.*

# %% [markdown]
# ## Validity against forward passes

# %%
curves = validity.groupby(["model", "draft_passes", "edit_passes", "mode"]).validity.agg(["mean", "std"]).reset_index()
mdlm = curves[curves.model == "mdlm"]
fig, ax = plt.subplots(figsize=(7, 4))
ax.errorbar(mdlm.draft_passes, mdlm["mean"], yerr=mdlm["std"], marker="o", capsize=3, color="0.3",
            label="MDLM, S passes")
for S, color in [(1, "C0"), (3, "C1")]:
    for mode, face in [("full", color), ("substitution", "none")]:
        group = curves[(curves.model == "me_dlm") & (curves.draft_passes == S) & (curves["mode"].isin(["none", mode]))]
        if mode == "substitution" and not (group["mode"] == "substitution").any():
            continue
        ax.errorbar(S + group.edit_passes, group["mean"], yerr=group["std"], marker="s", ls="--", capsize=3,
                    color=color, mfc=face, label=f"ME-DLM, {S}-pass draft + edits ({mode})")
ax.set(xlabel="forward passes per answer", ylabel="valid answers (%)", xscale="log")
ax.set_xticks([1, 2, 3, 4, 5, 7], [1, 2, 3, 4, 5, 7])
ax.minorticks_off()
ax.legend(fontsize="x-small")
plt.show()

# %% [markdown]
# *Figure 3. Share of valid answers against forward passes per answer: the MDLM decoded with fewer
# or more passes (line), and ME-DLM's 1-pass and 3-pass drafts followed by 1, 2 and 4 edit passes
# (markers; hollow: substitution-only editing of the 1-pass draft). Mean over seeds; error bars:
# standard deviation.*

# %% [markdown]
# ## What the edits do

# %%
samples = results["samples"]
one_pass = samples[samples.draft_passes == 1]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
bins = np.arange(0, one_pass[["distance_0", "distance_2"]].max().max() + 2) - 0.5
axes[0].hist([one_pass.distance_0, one_pass.distance_2], bins=bins, label=["draft", "after 2 edit passes"])
axes[0].set(xlabel="distance to the nearest valid answer", ylabel="prompts")
axes[0].legend(fontsize="small")
steps_count = one_pass.real_steps.value_counts().sort_index()
axes[1].bar(steps_count.index.astype(int), steps_count.values, color="C2")
axes[1].set(xlabel="real edit steps", ylabel="prompts")
plt.show()

# %% [markdown]
# *Figure 4. Distance (edit distance to the nearest valid answer) of ME-DLM's 1-pass drafts before
# and after 2 edit passes (left), and the number of edit passes until nothing changes, out of 4
# (right); all seeds.*

# %%
traces = [t for t in results["traces"] if t["seed"] == cfg.seeds[0] and t["draft_passes"] == 1][:3]
rows = []
for trace in traces:
    rows.append((trace["prompt"], "draft", [(tok, "k") for tok in trace["draft"]], trace["draft"]))
    for p in trace["passes"][:2]:
        cells = []
        for i, tok in enumerate(p["before"]):
            if i in p["deleted"]:
                cells.append((tok, "tab:red"))
                continue
            if i in p["inserted"]:
                cells.append((p["g"][i], "tab:green"))
            cells.append((p["r"][i], "tab:orange" if i in p["replaced"] else "k"))
        rows.append((trace["prompt"], f"pass {p['pass']}", cells, p["after"]))
right = 2.6 + 0.75 * max(len(cells) for _, _, cells, _ in rows) + 0.4  # where the verdict column starts
fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 0.4))
for y, (prompt, label, cells, result) in enumerate(rows):
    ax.text(0, -y, "".join(map(str, prompt)) if label == "draft" else "", family="monospace", va="center")
    ax.text(1.2, -y, label, va="center", fontsize=9)
    for x, (tok, color) in enumerate(cells):
        ax.text(2.6 + 0.75 * x, -y, task.detok([tok])[0], color=color, family="monospace", va="center", fontsize=9)
    ok = task.is_valid(prompt, task.response_answer(result))
    ax.text(right, -y, "valid" if ok else "invalid", va="center", fontsize=9, color="C2" if ok else "C3")
ax.set(xlim=(-0.2, right + 1.2), ylim=(-len(rows) + 0.5, 0.7))
ax.axis("off")
plt.show()

# %% [markdown]
# *Figure 5. Edit traces of the first seed's first prompts (1-pass drafts): each row is a pass;
# orange tokens were replaced, green tokens inserted, red tokens deleted; the last column says
# whether the result is valid.*

# %% [markdown]
# ## The claims

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
# **The rebuild now works, and the method's claims can be judged.** Both preconditions hold on
# every seed. Decoded one token per pass, the MDLM is valid on 88% of the test prompts (86.7%, 86.7%
# and 91.3%; p1 asks for 85%). Per answer mode it is valid 83% of the time when it heads for the
# reverse, 94% for the sorted and 92% for the doubled answer: reverse and sort, which share their
# length and digits, are still the pair it confuses, but no mode is left unlearned. Given answers
# that are already valid, ME-DLM's two edit passes leave 99% of them unchanged (0.98, 0.99, 1.00; p2
# asks for 0.95).
#
# - c1, the phenomenon, **holds**: decoding in one pass loses 60 points of validity against one token
#   per pass (28% against 88%; −62.0, −61.3 and −57.7 per seed; threshold −40).
# - c2, the repair, is **fragile**: two edit passes raise ME-DLM's one-pass drafts from 27% to 48%,
#   +21 points on average, but the seeds spread widely (+12.7, +33.0, +17.0; threshold +15), and
#   seed 0 misses. Four passes reach 53%.
# - c3a, the headline at 3 forward passes, is **fragile**: the 1-pass draft plus 2 edit passes is
#   valid 48% of the time against 42% for the MDLM decoded in 3 passes, +6.2 points on average
#   (+3.3, +19.3, −4.0; threshold +5). Only seed 1 clears the threshold, so the mean is carried by
#   one seed.
# - c3b, the headline at 5 forward passes, **fails**: the 3-pass draft plus 2 edit passes is valid
#   62% of the time against 70% for the MDLM in 5 passes, −8.1 points (−10.3, +6.7, −20.7). At this
#   budget, spending passes on slower unmasking beats spending them on edits, as the digest's pilot
#   had found. Unmasking gains fast here: the MDLM goes from 42% at 3 passes to 70% at 4.
# - c4, minimal editing, **holds**: 1.2% of the valid drafts are broken by two edit passes (1.6%,
#   1.4%, 0.6%; threshold 5%).
# - c5 (exploratory, not judged): full editing is 2 points better than substitution-only editing on
#   the mean (−7.3, +16.7, −3.3), with a spread that says nothing either way.
#
# So on this toy ME-DLM's edits do what the paper says they do: they repair parallel drafts without
# breaking valid ones. The paper's headline, an advantage at an equal number of forward passes, is
# weak at 3 passes (fragile, one seed of three) and reversed at 5 passes. The 7-slot canvas is part
# of the reason: one extra unmasking pass commits a seventh of the answer, so the MDLM catches up
# quickly. On 512-token outputs the paper's drafts use 48 passes, and an edit pass is compared with
# passes that each commit about 11 tokens.
#
# ### Before this revision
#
# Issue 17 asked for the rebuild to work before the method was judged. Its first pass (LLaDA's loss
# weighting, vectorised labels, a fresh optimiser per phase, a later curriculum and the shorter 2-3
# digit toy, two layers, 1,500 + 400 steps) left p1 fragile (79.3, 89.3, 90.7) and p2 failing (0.827,
# 0.827, 0.953), so every claim was inconclusive (c1 −56.4, c2 +4.2, c3a −17.2, c3b −28.3, c4 0.107,
# c5 −5.8). Two causes were found in pilots of the MDLM and of the copy check. First, the edit-mode
# labels were built against the *drawn* answer even when the model's fill had produced another valid
# answer or one near it, so the edit heads learned to rewrite valid answers; they are now built
# against the nearest valid answer (the implementation notebook). Second, seed 0's two-layer MDLM
# stayed under 85% (83% in a pilot with the first fix); three layers learn the toy, and the budget
# moved from 1,500 + 400 to 1,000 + 600 steps to stay near the time limit with more on-policy edit
# batches. Before issue 17 the chapter used the 3-5 digit toy and the release's loss weighting; the
# MDLM was valid 33% of the time at one token per pass, p1 (then at 80%) failed and every claim was
# inconclusive (c1 −26.6, c2 −5.2, c3a −9.0, c3b −12.6, c4 0.94, c5 −6.1).
#
# ## At a larger scale
#
# Before issue 17 the same chapter, on the 3-5 digit toy with the old code, was run once at the
# `paper` profile on a bigger machine (five seeds, three layers of width 96, 3,000 mask-mode steps,
# then 1,500 steps of each branch). There the MDLM at one token per pass was valid 90% of the time.
# The phenomenon (c1, −65 points), the repair (c2, +17 points) and minimal editing (c4, 1% of valid
# drafts broken) held on the mean. The equal-budget headline failed (c3a +0.3, c3b −8.0 points), and
# full editing was worse than substitution only (c5, −14 points). Those numbers come from the old
# toy and code; this revision has not been run at the paper profile.
#
# ## What we scaled down, and why the effect should survive it
#
# - **The model and data.** A 0.15M-parameter bidirectional transformer trained from scratch on one
#   synthetic task, instead of LLaDA-8B continued-pretrained and fine-tuned in three stages. Answers
#   have 2-6 tokens on a 7-slot canvas instead of 512. We shortened the toy from the digest's 3-5 digit
#   prompts to 2-3 digits because the smaller network did not learn the longer one in the budget. The
#   failure the paper targets, parallel decoding mixing the modes of the answer distribution, is
#   present and strong (c1).
# - **The budget.** 1,000 + 600 optimiser steps of 32 prompts, about 50 s per seed on one
#   core (the seeds run two at a time); it is at the edge of what p1 needs (86.7% on two seeds against 85%): pilots of
#   the MDLM alone with 1,000 + 400 or 700 + 600 steps left it under 85% on two seeds. The
#   curriculum of pre-applied edit passes runs from 0 to 3 instead of 0 to 31.
# - **The labels' reference.** The valid answer nearest to each draft, not the drawn one: the release
#   has one reference per prompt, our toy three. With one valid answer the two rules agree.
# - **The loss weighting.** LLaDA's (the sum over masked tokens divided by $t L$), not the release's
#   (the mean over masked tokens divided by $t$): on average both weight every token by $1/t$. The
#   release's version gives rows with few masks most of the weight, which a small batch cannot
#   afford.
# - **Not tested.** The paper's benchmarks, long outputs where most draft errors are local, the
#   optional top-K confident edits, and the digest's second toy with more local errors.
#
# ## Reading the verdicts

# %%
ledger.report()

# %% [markdown]
# ## Summary
#
# - ME-DLM adds an edit model to a masked diffusion LM: a token head that keeps, replaces or deletes
#   each token, an insertion head for the gap before it, trained on canonical minimal edit scripts of
#   the model's own drafts.
# - On a shortened toy (2-3 digit prompts), with LLaDA's loss weighting, a fresh schedule per phase,
#   three layers and edit labels against the nearest valid answer, the rebuild works: the base MDLM
#   learns the task (88% valid at one token per pass, p1 holds) and the edit model copies valid
#   answers (99% unchanged, p2 holds).
# - The phenomenon is strong (one-pass decoding loses 60 points, c1 holds) and editing is minimal
#   (1.2% of valid drafts broken, c4 holds). Two edit passes repair 21 points of the one-pass drafts
#   on average, but one seed of three misses 15 (c2 fragile).
# - The paper's headline at equal forward passes is weak at 3 passes (+6 points, fragile, one seed
#   clears) and fails at 5 passes (−8 points): on a 7-slot canvas, extra unmasking passes are worth
#   more than edit passes.
#
# ## Exercises
#
# 1. Run with `-p steps2=1200` (twice the phase-2 training; several minutes on two cores). Which
#    claim values move most: the repair (c2) or the comparison at equal forward passes (c3)?
# 2. The equal-budget comparison charges an edit pass the same as an unmasking pass. On 512-token
#    outputs, why might an edit pass be worth more than on our 2-6 token answers?
# 3. Count, among the 1-pass drafts that stay invalid after 4 edit passes, how many are at distance 1.
#    What stops the edits there?
