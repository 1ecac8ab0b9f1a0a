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
# # Visual chain of thought for shape assembly: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say whether the interleaved SoT trace beats direct generation and a text-only plan on counts
#    and on attachments in a small table world, and with what seed spread;
# 2. read a generated SoT trace and see where a count goes wrong;
# 3. re-run the experiment at another scale, decoding setting or seed set from the `parameters` cell.
#
# **Setting.** Tables of a top and $k \in \{2, 3\}$ legs on an 8x8 canvas, 16 patch tokens per image.
# Three models of the same size (2 layers, width 32 at the book profile) are trained for the same
# number of steps on the same 2000 tables: direct generation (prompt, `ASSEMBLY`, image), a
# text-only plan (prompt, the rationale tokens, `ASSEMBLY`, image) and SoT (prompt, then rationale
# and rendered state per step, `ASSEMBLY`, final image). Test prompts are split evenly over $k$;
# text is sampled at temperature 0.3 (the release's), images in 8 parallel unmasking rounds at
# temperature 1.

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
steps = None  # optimiser steps per model (all three variants)
n_train = None  # training tables per seed (shared by the variants)
n_test = None  # test prompts per seed, split evenly over k
img_rounds = None  # parallel unmasking rounds per image
img_temperature = None  # sampling temperature of image tokens
d_model = None  # model width
lr = None  # peak learning rate (AdamW, warm-up then cosine)
batch_size = None  # records per step

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from replib import core
from replib.papers.shape_of_thought import experiment, task

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     steps=steps, n_train=n_train, n_test=n_test, img_rounds=img_rounds,
                     img_temperature=img_temperature, d_model=d_model, lr=lr, batch_size=batch_size)
ledger = core.Ledger("shape_of_thought", cfg.profile, cfg.seeds, parameters=vars(cfg))

# %% [markdown]
# ## Training and sampling the three variants

# %%
rows, samples, losses = experiment.run_experiment(cfg, progress=core.progress)
runs = pd.DataFrame(rows)
runs.groupby("variant", sort=False)[["numeracy", "connectivity", "stability", "plan_length_ok"]].agg(
    ["mean", "std"]).round(3)

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 3))
for variant, curve in losses.items():
    axes[0].plot(np.convolve(curve, np.ones(10) / 10, mode="valid"), label=variant)
axes[0].set(xlabel="step", ylabel="training loss (first seed)")
axes[0].legend(fontsize="small")
means = runs.groupby("variant", sort=False)[["numeracy", "connectivity"]]
x = np.arange(2)
for i, variant in enumerate(task.VARIANTS):
    sub = runs[runs.variant == variant][["numeracy", "connectivity"]]
    axes[1].bar(x + 0.27 * (i - 1), sub.mean(), 0.27, yerr=sub.std(ddof=0), capsize=3, label=variant)
    axes[1].plot(np.repeat(x + 0.27 * (i - 1), len(sub)), sub.to_numpy().T.ravel(), "k.", ms=3)
axes[1].set(xticks=x, xticklabels=["numeracy", "connectivity"], ylabel="share of test images", ylim=(0, 1))
plt.show()

# %% [markdown]
# *Figure 1. Left: training loss of each variant on the first seed (10-step running mean; the
# variants' losses average different token sets, so compare shapes, not levels). Right: numeracy and
# connectivity of the sampled final images, mean over seeds with the spread (bars, one standard
# deviation) and each seed (dots).*

# %%
ks = samples["ks"]
picks = [i for i in range(len(ks)) if ks[i] == 3][:2] + [i for i in range(len(ks)) if ks[i] == 2][:1]
fig, axes = plt.subplots(len(picks), 8, figsize=(12, 1.7 * len(picks)), squeeze=False)
for row, i in enumerate(picks):
    o = samples["sot"][i]
    panels = [(task.VOCAB[r].lower(), s) for r, s in zip(o["rationales"], o["states"])][:5]
    panels += [("sot final", o["final"]), ("text cot", samples["text_cot"][i]["final"]),
               ("direct", samples["direct"][i]["final"])]
    for ax in axes[row]:
        ax.axis("off")
    for ax, (title, tokens) in zip(axes[row][-len(panels):] if len(panels) < 8 else axes[row], panels):
        ax.imshow(task.tokens_to_image(tokens), cmap="Greys", vmin=0, vmax=1)
        ax.set_title(title, fontsize=8)
    axes[row][0].text(-0.4, 0.5, f"k = {ks[i]}", transform=axes[row][0].transAxes, ha="right")
plt.show()

# %% [markdown]
# *Figure 2. Sampled outputs for three test prompts (first seed): the SoT trace (rationale over each
# drawn state), its final image, and the final images of the text-only plan and of direct generation
# for the same prompt.*

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its role and threshold before this experiment was
# run. The README's point gains depend on the base rate, so each headline claim is the share of the
# baseline's failures that SoT removes, at the share the README's own numbers give. A claim holds
# when the whole 95% interval of the mean over seeds clears the threshold, fails when the whole
# interval misses it, and is undecided when the interval contains it.

# %%
values = experiment.claim_values(runs)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# The per-seed values behind the verdicts:

# %%
pd.DataFrame(values).round(3)

# %% [markdown]
# ## Reading the verdicts
#
# The sentences below are generated from the claims table, so they always match this run.

# %%
ledger.report()

# %% [markdown]
# ## What we learned
#
# What the book-profile run (seeds 0, 1 and 2; 300 steps per model) shows. These bullets were
# written for that run; at other profiles or seeds, trust the tables above.
#
# - **The base model learns the toy (p1 holds).** Direct generation draws the requested number of
#   legs in 0.75 of the test images on average (seeds 0.77, 0.63, 0.86), above the 0.5 of a
#   count-blind generator, and one connected object in 0.78 (0.80, 0.70, 0.83).
# - **The headline fails on every comparison.** SoT's final images have the right count in 0.62 of
#   cases (seeds 0.47, 0.63, 0.76), below direct generation (0.75) and the text-only plan (0.75,
#   seeds 0.69, 0.86, 0.69): it removes $-0.65$ of direct generation's count failures (h1; seeds
#   $-1.26$, $0.02$, $-0.71$, that is, it adds failures) and $-0.71$ of the text-only plan's (h2;
#   $-0.72$, $-1.62$, $0.22$), against the README's 0.68 and 0.52. On attachments SoT (0.67
#   connected; 0.71, 0.68, 0.63) is below direct generation (h3: $-0.58$; $-0.47$, $-0.07$,
#   $-1.20$) but above the text-only plan on every seed (0.59; 0.66, 0.65, 0.47): it removes 0.18 of
#   the plan's connectivity failures (h4; 0.14, 0.09, 0.31), short of the README's 0.47. The seed
#   spread is large: the per-seed numeracy of a variant moves by up to 0.29 between seeds.
# - **Why: SoT's model has not learned to build step by step (m1 fails).** Only 0.28 of its traces
#   keep every earlier state and add to it (seeds 0.27, 0.35, 0.23; the README reports 91.3). Its
#   plans are always right (every SoT and text-only trace has $k + 1$ steps, column `plan_length_ok`),
#   so the text half works; the images do not copy the previous state, and a state that drops a leg
#   or a piece of the top is then copied into later steps and the final image. The paper's mechanism
#   (each image a low-entropy local edit) only helps once the model has learned the edit; at 300 steps
#   with a 2-layer, width-32 model it has not. SoT trains one of 4 or 5 image blocks per record per
#   step, so each kind of image is seen less often than direct generation's one image, and its
#   sequences are three to five times longer: at equal optimiser steps the comparison favours the
#   shorter formats. The digest's single-seed pilot (1500 steps, width 64) saw SoT ahead of direct
#   generation on connectivity; the `paper` profile (1500 steps, width 64, 5 seeds) tests that
#   regime, which did not fit the book budget.
# - **The text-only plan adds nothing to counts.** Its rationale tokens follow from $k$ alone (a top,
#   two end legs, $k - 2$ interior legs), so it carries no information the prompt lacks. Its
#   connectivity is also lower than direct generation's (0.59 against 0.78), which this run does not
#   explain (the variants differ only in their sequences).
#
# ## What we scaled down, and why the effect should survive it
#
# - **Model and images.** BAGEL (7B active parameters, VAE latents, rectified flow with 50 steps and
#   classifier-free guidance) becomes a 2-layer decoder of width 32 over 16 discrete patch tokens per
#   image, decoded in 8 confidence-ordered unmasking rounds. What SoT changes, the image factor from a
#   whole object to one added part, is present at any scale; whether a model exploits it depends on
#   it learning to copy the context image, which a pretrained BAGEL can do and our small model, at
#   this budget, cannot yet.
# - **Training.** 300 AdamW steps of 32 records on 2000 tables (the release: 5000 steps of about 60k
#   tokens on 8 GPUs from a pretrained checkpoint); one noisy image block per record instead of every
#   block; no EMA, no conditioning dropout.
# - **Task and scores.** Tables with 2 or 3 legs instead of 24 PartNet categories; deterministic
#   parsers for numeracy, connectivity and trace stability instead of T2S-CompBench, whose scoring is
#   not stated in what we could read. Connectivity stands in for "structural topology".
# - **Headline form.** The README's point gains are read as the share of the baseline's failures SoT
#   removes (declared before measuring), since the toy's base rates differ from the benchmark's.
# - **Budget.** The experiment took 97 to 155 s in our runs on the shared machine (the brief asked for 45 s),
#   within the book's 180-s ceiling; fewer steps would have left the models even less trained.
#
# ## Summary
#
# In a small table-assembly world, one tiny decoder trained three ways, the interleaved visual trace
# does not beat direct generation on counts or attachments, and beats the text-only plan only on
# attachments and by less than the README: every headline claim fails, with a large seed spread. The
# cause is visible in the traces: the SoT model plans correctly but does not yet keep its earlier
# states (trace stability 0.28), so the step-by-step construction the paper relies on never forms.
# Re-run longer with `replib run shape_of_thought --profile book -p steps=1500` or at the paper
# profile.
#
# ## Exercises
#
# 1. Train longer (`steps = 1500`). Does SoT's trace stability rise, and do counts follow it?
# 2. Lower the image temperature (`img_temperature = 0.3`). Which variant gains most, and why does
#    near-greedy decoding make counting easier for direct generation?
# 3. Let SoT train every image block of a record at once (see the implementation notebook's exercise
#    3) and compare at equal steps.
