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
# # Dataset pruning on graphs: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say which of the paper's claims about graph-based pruning hold on a small image data set with
#    injected redundancy, and by how much;
# 2. read the trade-off between informativeness ($\alpha$ large) and diversity ($\alpha$ small) across
#    pruning ratios;
# 3. account for the whole cost of pruning: the proxy, the selection and the training it saves.
#
# **Setting.** Digit images (8 x 8) drawn from a Gaussian mixture fitted to scikit-learn's 1,797
# digits, so that the test set can be large: 100,000 test images, the same for every seed. The pool
# has 1,297 originals, drawn anew for every seed, and 30% of them are copied four times with pixel
# noise, so it has $N = 2{,}853$ images, 1,556 of them near-copies. A proxy MLP (150 SGD steps on the whole pool) gives each image's predictive entropy
# and embedding. Each selector keeps $b = (1 - p) N$ images for pruning ratios
# $p \in \{0.3, 0.5, 0.7, 0.9\}$; a fresh MLP (64-128-10) is then trained on the kept images for 15
# epochs (SGD with momentum, OneCycle learning rate, the same for every selector) and tested on the
# 100,000 test images. Every selector sees the same pool, proxy and model seed for a given seed.
#
# **Selectors.** Random; intrinsic only (top-$b$ entropy); extrinsic only (greedy k-center on the
# embeddings); the paper's graph greedy (MWCP) with $\alpha \in \{0, 0.3, 1, 3\}$, $\alpha = 1$ being
# the method; and the full data.

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
ratios = None  # pruning ratios p: the share of the pool removed
alphas = None  # weights of the intrinsic score in the graph objective
epochs = None  # epochs of the target model over its kept subset
proxy_steps = None  # SGD steps of the proxy model on the whole pool
clusters_per_class = None  # k-means clusters per class: the neighbourhoods of the sparse graph
n_test = None  # images in the test set, drawn from the digit generator

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.mwcp_pruning import experiment, method, task, theory

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     ratios=ratios, alphas=alphas, epochs=epochs, proxy_steps=proxy_steps,
                     clusters_per_class=clusters_per_class, n_test=n_test)
ledger = core.Ledger("mwcp_pruning", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## Training on every kept subset

# %%
rows, extras = experiment.run_experiment(cfg, progress=core.progress)
runs = pd.DataFrame(rows)
pruned = runs[runs["ratio"] > 0]
full = runs[runs["method"] == "full"]
table = pruned.pivot_table(index="variant", columns="ratio", values="accuracy", aggfunc="mean")
table.loc["full data"] = full["accuracy"].mean()
table.round(1)

# %% [markdown]
# Test accuracy in percent, mean over seeds, per selector (rows) and pruning ratio (columns). The
# test set has 100,000 images at the book profile (10,000 at smoke), so one image is 0.001 points. The noise floor that the finite test
# set puts under a difference of two accuracies is its standard error,
# $100\sqrt{2a(1-a)/n}$ at accuracy $a$ (for models whose errors are independent; models that err on
# the same images have a smaller one):

# %%
floor = task.accuracy_noise_floor(full["accuracy"].mean(), len(extras["pool"].y_test))
print(f"noise floor of a difference of two accuracies: {floor:.3f} points")

# %%
main = ["random", "entropy", "kcenter", experiment.variant_name("mwcp", 1.0)]
fig, ax = plt.subplots(figsize=(7, 4))
sns.lineplot(pruned[pruned["variant"].isin(main)], x="ratio", y="accuracy", hue="variant",
             hue_order=main, errorbar="sd", marker="o", ax=ax)
ax.axhline(full["accuracy"].mean(), color="k", ls="--", lw=1, label="full data")
ax.set(xlabel="pruning ratio $p$", ylabel="test accuracy (%)", ylim=(max(0, pruned["accuracy"].min() - 5), 100))
ax.legend(title="")
plt.show()

# %% [markdown]
# *Figure 1. Test accuracy against pruning ratio per selector (mean over seeds, band: standard
# deviation); the dashed line is training on all data.*

# %% [markdown]
# ## Informativeness against diversity

# %%
random_acc = pruned[pruned["variant"] == "random"].groupby("ratio")["accuracy"].mean()
mwcp_rows = pruned[pruned["method"] == "mwcp"]
heat = mwcp_rows.pivot_table(index="alpha", columns="ratio", values="accuracy", aggfunc="mean")
heat.index = [f"alpha = {a:g}" for a in heat.index]
heat.loc["entropy only"] = pruned[pruned["variant"] == "entropy"].groupby("ratio")["accuracy"].mean()
fig, ax = plt.subplots(figsize=(6, 3.2))
sns.heatmap(heat - random_acc, annot=True, fmt=".1f", cmap="vlag_r", center=0, vmin=-8, vmax=8,
            cbar_kws={"label": "accuracy minus random (points)"}, ax=ax)
ax.set(xlabel="pruning ratio $p$", ylabel="")
plt.show()

# %% [markdown]
# *Figure 2. Test accuracy of the graph greedy minus that of random pruning, mean over seeds, for
# each weight alpha of the intrinsic score (rows) and pruning ratio (columns); the last row is
# intrinsic-only selection, the limit of large alpha (its 90% cell is off the colour scale).*

# %% [markdown]
# ## What each selector keeps

# %%
shown = ["entropy", "kcenter", experiment.variant_name("mwcp", 1.0)]
pca, is_copy = extras["pca"], extras["pool"].is_dup
fig, axes = plt.subplots(1, len(shown), figsize=(12, 3.8), sharex=True, sharey=True)
for ax, name in zip(axes, shown):
    kept = np.zeros(len(pca), bool)
    kept[extras["kept"][name]] = True
    ax.scatter(*pca.T, s=3, color="0.85")
    ax.scatter(*pca[kept & ~is_copy].T, s=4, color="C0", label="kept original")
    ax.scatter(*pca[kept & is_copy].T, s=4, color="C1", label="kept copy")
    ax.set(xlabel=f"pc 1 ({name}, p = {extras['kept_ratio']:g})", ylabel="pc 2")
axes[0].legend(markerscale=3, fontsize="small")
plt.show()

# %% [markdown]
# *Figure 3. The pool in the first two principal components of the proxy's embeddings (first seed),
# with the images each selector keeps at the ratio in the axis label: originals in blue, injected
# near-copies in orange; pruned images in grey.*

# %% [markdown]
# The subsets differ in what they spend their budget on: `dup_fraction` is the share of kept images
# that are injected copies, `redundant_fraction` the share whose original (or another copy of it) is
# also kept, then the neighbourhoods covered and the graph objective (Eq. 3 with $\alpha = 1$, the
# same yardstick for all). The objective is large and negative because the edge penalties dominate:
# a kept set has thousands of neighbour pairs at about $-0.4$ to $-0.5$ each, so values are comparable
# only within a ratio.

# %%
pruned.groupby(["ratio", "variant"])[["dup_fraction", "redundant_fraction", "clusters_covered",
                                       "objective"]].mean().unstack("ratio").round(2)

# %% [markdown]
# Why the redundancy term cannot tell a copy from a neighbour here: inside a neighbourhood, the
# cosine distances between the proxy's embeddings are small for copies *and* for other images.

# %%
pool0, z0, cl0 = extras["pool"], extras["embeddings"], extras["cluster"]
pairs = {"copy pairs": [], "other neighbour pairs": []}
for c in np.unique(cl0):
    members = np.flatnonzero(cl0 == c)
    D = method.cosine_distance(z0[members])
    same = pool0.origin[members][:, None] == pool0.origin[members][None, :]
    upper = np.triu(np.ones_like(D, bool), k=1)
    pairs["copy pairs"].append(D[upper & same])
    pairs["other neighbour pairs"].append(D[upper & ~same])
pd.DataFrame({name: pd.Series(np.concatenate(d)).describe(percentiles=[0.1, 0.5, 0.9])
              for name, d in pairs.items()}).T[["count", "10%", "50%", "90%"]].assign(
    **{"g at median": lambda t: method.redundancy_weight(t["50%"])}).round(3)

# %% [markdown]
# ## What pruning costs and saves
#
# Seconds per seed, measured in the same run: the proxy (training and scoring), the selection
# (k-means neighbourhoods plus the greedy) and the training on the subset kept at $p = 0.3$, against
# training on all data.

# %%
mwcp30 = pruned[(pruned["variant"] == experiment.variant_name("mwcp", 1.0)) & np.isclose(pruned["ratio"], 0.3)]
timing = pd.DataFrame({
    "proxy": runs[runs["method"] == "proxy"].set_index("seed")["train_seconds"],
    "selection": mwcp30.set_index("seed")["select_seconds"],
    "training on subset": mwcp30.set_index("seed")["train_seconds"],
    "training on all data": full.set_index("seed")["train_seconds"],
})
timing.round(3)

# %% [markdown]
# ## The greedy's guarantee and its speed
#
# Claims c4a and c4b compare the greedy with exhaustive search on 200 random instances of 12
# samples ($b = 4$), drawn anew for every seed; m2 times the greedy choosing half of 20,000
# synthetic points.

# %%
guarantee = {seed: theory.greedy_guarantee_check(np.random.default_rng(seed), instances=200)
             for seed in cfg.seeds}
selection_s = experiment.selection_seconds()
for seed, g in guarantee.items():
    print(f"seed {seed}: worst greedy/optimum (shifted) {g['min_ratio']:.3f}, mean gap (plain) "
          f"{g['mean_gap']:.4f}")
print(f"10,000 of 20,000 selected in {selection_s:.2f} s")

# %% [markdown]
# In those instances the node weights dominate. The experiment's regime is the opposite (edges
# dominate, $F < 0$), so here is the same comparison with small node weights ($\alpha = 0.1$) and
# larger subsets ($n = 14$, $b = 7$). It is reported, not judged: no claim was declared for it.

# %%
edge_dominated = theory.greedy_guarantee_check(np.random.default_rng(1), instances=50, n=14, b=7, alpha=0.1)
print(f"edge-dominated instances: mean gap {edge_dominated['mean_gap']:.4f}, worst gap "
      f"{edge_dominated['gap'].max():.4f}, greedy optimal on {np.mean(edge_dominated['gap'] < 1e-12):.0%}")

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its role and threshold before this experiment was
# run. The value is computed per seed from the runs above. A claim holds when the whole 95% interval
# of the mean over seeds clears the threshold, fails when the whole interval misses it, and is
# undecided when the interval contains it.
# Checks and measurements are shown but not judged; a claim whose precondition does not hold is
# inconclusive.

# %%
values = experiment.claim_values(runs, guarantee, selection_s, n_test=cfg.n_test)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# Here are the per-seed values behind the verdicts. Claim m2 does not depend on the seed (one run,
# repeated), hence its zero spread.

# %%
pd.DataFrame(values).round(3)

# %% [markdown]
# ## What we scaled down, and why the effect should survive it
#
# - **Data and models.** 8 x 8 digit images and a two-layer MLP instead of CIFAR and ImageNet with
#   ResNets and Swin transformers. The images are drawn from a Gaussian mixture fitted to
#   scikit-learn's 1,797 digits, not the digits themselves: a held-out split of those would be a few
#   hundred images, where one image is 0.2 points, as large as the margins the paper reports. Drawn
#   images are blurrier than real ones, but a model trained on them reads real digits almost as well
#   (about 95% in a pilot). Accuracies saturate near 97%, so the selectors differ by tenths of a point;
#   the 100,000 test images put the noise floor of a difference at about 0.07 points (m3).
# - **Redundancy is injected.** Real large data sets are redundant by nature; we copy 30% of the pool
#   four times so that the redundancy term has something to remove. Labels are clean: with label
#   noise, diversity terms tend to keep mislabeled outliers, a different effect.
# - **Static, not dynamic.** The paper's reported numbers come from per-epoch (InfoBatch-style)
#   resampling in its released code; we test the one-shot greedy the paper describes. Its
#   "Stochastic Selection" variant is not implemented.
# - **The proxy.** Entropies and embeddings come from a small proxy trained for 150 steps, about a
#   fifth of one full training run. At ImageNet scale such a proxy is cheap relative to training; here
#   it is not, which weighs on claim c5.
# - **Scale of the timing claim.** The paper's 43% saving is on 50% pruning of ImageNet over hours;
#   ours is seconds, where fixed costs (the proxy, k-means) are a large share.
#
# ## Reading the verdicts
#
# The lines below are generated from the claims table, so they always match this run.

# %%
ledger.report()

# %% [markdown]
# What the book-profile run (seeds 0, 1 and 2) shows, and why we think so. These bullets were
# written for that run; at other profiles or seeds, trust the tables above.
#
# - **Lossless where random pruning is not (h1 and h2 hold).** Random pruning loses 0.3 to 0.5 points
#   at 30% pruning and 0.7 to 1.0 at 50% (p1 and p2 hold: random is not lossless, so the headline can
#   tell the method from it). The graph greedy stays level with the full data: +0.01 to +0.05 points
#   at 30% and -0.10 to +0.03 at 50%, inside the paper's 0.2-point tolerance on every seed. Its margin
#   over random clears 0.5 points at 50% on every seed (c1b holds, +0.66 to +0.92) and misses it by
#   a hair at 30% (c1a fails, mean +0.48: +0.34, +0.58, +0.53). All of these are several times the
#   0.07-point noise floor of the test set, so they are differences between the models, not between
#   test images.
# - **Against diversity alone the edge is small (k2 holds; k1 and k3 fail).** Greedy k-center on the
#   same embeddings is nearly as good at mild ratios: the graph greedy is ahead by +0.10 to +0.12
#   points at 30% (below the paper's 0.4), +0.23 to +0.39 at 50% (above the paper's 0.2), and at 70%
#   by +0.47, +0.32 and -0.17 (mean +0.21, below 0.4). The sign matches the paper, the size mostly does
#   not: with 55% of the pool made of near-copies, removing redundancy (what k-center does) is most of
#   what pruning can gain here, and entropy adds only a little on top of it.
# - **Intrinsic-only selection fails when pruning hard, but c3 fails by its margin.** At 70% pruning
#   the top-entropy subset is 0.6 points below random and 1.8 below the graph greedy on average (3.2,
#   0.9 and 1.3 points on the three seeds, against a declared 2): the mean misses, so c3 fails. At 90%
#   top-entropy collapses to about a third of the images right, because it keeps only the most
#   ambiguous images and misses whole neighbourhoods.
# - **At 90% pruning the paper's default weight loses to random.** There the graph greedy with
#   $\alpha = 1$ is about 5 points below random and 2.5 below k-center, while with $\alpha = 0$
#   (diversity only, on the same graph) it is the best selector, 1.4 points above random (heat map).
#   The entropy term still pulls the few kept images towards hard ones. Both terms matter, as the
#   paper says, but how to weigh them depends on the ratio; 90% is not a ratio the paper reports.
# - **The redundancy term spreads picks over neighbourhoods, but does not avoid near-copies.** Inside a
#   neighbourhood the proxy's embeddings (after a ReLU) are close for copies *and* for other images
#   (distance table): $g(D) = \sigma(D) - 1$ is about $-0.5$ for both. The greedy then balances how
#   many images it takes from each neighbourhood and ranks by entropy inside it, and a copy shares its
#   original's entropy. As pruning gets harder it keeps more redundant images (`redundant_fraction`)
#   than random, while k-center keeps none at 70% and 90%. A sharper $g$ would separate copies from
#   neighbours (exercise 2); we kept the paper's.
# - **The greedy is near-optimal where node weights dominate (c4b holds; c4a is a check).** On 200
#   instances drawn anew for each seed the greedy is usually exactly optimal (mean gap 0.07% to 0.10%)
#   and its ratio on the shifted objective is far above $1 - 1/e$, as the theorem promises. In the
#   edge-dominated regime of the experiment (small $\alpha$, larger $b$) its gap to the optimum is
#   larger: a few percent on average and up to about 16% on the worst of 50 instances (reported
#   above, not a declared claim).
# - **Whether pruning pays for itself here is finer than our clock (c5's verdict changes from run to
#   run).** Training on the kept 70% should take about 70% of the full training time, and the proxy
#   and the selection (mostly k-means) add back roughly a third of a full run, so the whole pipeline
#   costs about as much as training on everything. But these are ratios of sub-second wall-clock
#   times on a machine shared with other jobs, and they move by tens of percent from run to run. In
#   our runs of this revision a seed's c5 ratio came out below 0.75 in some runs and above 1.5 in
#   others, and even m1 (training on 70% of the data against all of it, about 0.7 in principle) came
#   out below 0.5 and above 1.1. The verdict of c5 was holds, fragile or fails depending on the run;
#   the table above has this run's. At the paper's scale the proxy and the selection are small next to
#   hours of training; here they are not.
#
# **Before this revision** the test set was 500 held-out real digits (one image = 0.2 points), the
# pool's originals were the other 1,297 digits, and the guarantee's instances were the same for every
# seed. There c1a failed (+0.6, +0.6 and -0.2 points), c1b was fragile (+0.8, +1.0, +0.2), c3 was
# fragile (+0.6, +1.8, +6.0), c4b held (0.08% on every seed, one set of instances) and c5 failed
# (0.83, 1.14, 1.20). The old c2, lossless at 30% (-0.2, +0.6, +0.2 points against the full data),
# was a premise: random pruning was as lossless there, so it could not single out the method. It is
# replaced by h1 and h2, which are gated on random pruning *not* being lossless. The k-center
# baseline was run but not claimed against.
#
# ## Summary
#
# On digit images with injected redundancy and a 100,000-image test set, graph-based pruning is
# lossless at 30% and 50% pruning, where random pruning loses half a point to a point: the paper's
# headline holds on this toy. Its edge over the diversity-only k-center baseline has the paper's sign
# but mostly not its size (0.1 to 0.3 points where the paper reports 0.2 to 0.5; the 30% and 70%
# margins fail), and its margin over intrinsic-only selection at 70% falls just short of the declared
# 2 points. At 90% pruning the paper's default weight is about 5 points worse than random, while the
# diversity-only setting of the same greedy is the best selector. The greedy itself is fast (half of
# 20,000 points in a fraction of a second) and near-optimal on small instances. At this scale the
# proxy and the selection cost about what pruning saves, so whether the whole pipeline is faster than
# training on everything (c5) depends on the run's timing noise.
#
# ## Exercises
#
# 1. Set `alphas = [1.0]` and `clusters_per_class = 1` (one neighbourhood per class). Does the graph
#    greedy get better or worse at $p = 0.9$, and why?
# 2. The redundancy weights of near-copies and of merely similar images differ little here (the
#    embeddings are close together). Replace $g$ by a sharper map, e.g. $g(D) = -e^{-D/0.05}$, in
#    `method.greedy_select` (pass a dense `A`) and count the near-copies kept.
# 3. Re-run with `epochs = 30`. Does the gap between selectors at $p = 0.3$ grow or shrink when every
#    model is trained longer?
