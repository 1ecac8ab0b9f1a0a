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
# **Setting.** scikit-learn's digits: 500 test images; the other 1,297 form the pool, and 30% of them
# are copied four times with pixel noise, so the pool has $N = 2{,}853$ images, 1,556 of them
# near-copies. A proxy MLP (150 SGD steps on the whole pool) gives each image's predictive entropy
# and embedding. Each selector keeps $b = (1 - p) N$ images for pruning ratios
# $p \in \{0.3, 0.5, 0.7, 0.9\}$; a fresh MLP (64-128-10) is then trained on the kept images for 15
# epochs (SGD with momentum, OneCycle learning rate, the same for every selector) and tested on the
# 500 held-out images. Every selector sees the same pool, proxy and model seed for a given seed.
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
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)

# %% tags=["parameters"]
profile = None  # "smoke", "book" or "paper"; None reads $REPLIB_PROFILE, else "book"
seeds = None  # list of ints; None takes the profile's seeds
ratios = None  # pruning ratios p: the share of the pool removed
alphas = None  # weights of the intrinsic score in the graph objective
epochs = None  # epochs of the target model over its kept subset
proxy_steps = None  # SGD steps of the proxy model on the whole pool
clusters_per_class = None  # k-means clusters per class: the neighbourhoods of the sparse graph

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.mwcp_pruning import experiment, method, theory

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, seeds=seeds, ratios=ratios, alphas=alphas,
                     epochs=epochs, proxy_steps=proxy_steps, clusters_per_class=clusters_per_class)
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
# test set has 500 images, so one image is 0.2 points.

# %% mystnb={"figure": {"caption": "Test accuracy against pruning ratio per selector (mean over seeds, band: standard deviation); the dashed line is training on all data.", "name": "mwcp-accuracy"}}
main = ["random", "entropy", "kcenter", experiment.variant_name("mwcp", 1.0)]
fig, ax = plt.subplots(figsize=(7, 4))
sns.lineplot(pruned[pruned["variant"].isin(main)], x="ratio", y="accuracy", hue="variant",
             hue_order=main, errorbar="sd", marker="o", ax=ax)
ax.axhline(full["accuracy"].mean(), color="k", ls="--", lw=1, label="full data")
ax.set(xlabel="pruning ratio $p$", ylabel="test accuracy (%)", ylim=(max(0, pruned["accuracy"].min() - 5), 100))
ax.legend(title="")
plt.show()

# %% [markdown]
# ## Informativeness against diversity

# %% mystnb={"figure": {"caption": "Test accuracy of the graph greedy minus that of random pruning, mean over seeds, for each weight alpha of the intrinsic score (rows) and pruning ratio (columns); the last row is intrinsic-only selection, the limit of large alpha (its 90% cell is off the colour scale).", "name": "mwcp-alpha"}}
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
# ## What each selector keeps

# %% mystnb={"figure": {"caption": "The pool in the first two principal components of the proxy's embeddings (first seed), with the images each selector keeps at the ratio in the axis label: originals in blue, injected near-copies in orange; pruned images in grey.", "name": "mwcp-pca"}}
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
# samples ($b = 4$); m2 times the greedy choosing half of 20,000 synthetic points.

# %%
guarantee = theory.greedy_guarantee_check(np.random.default_rng(0), instances=200)
selection_s = experiment.selection_seconds()
print(f"worst greedy/optimum (shifted): {guarantee['min_ratio']:.3f}, mean gap (plain): "
      f"{guarantee['mean_gap']:.4f}; 10,000 of 20,000 selected in {selection_s:.2f} s")

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
# run. The value is computed per seed from the runs above. A claim holds when the mean over seeds and
# every seed clear the threshold, and is fragile when the mean clears it but some seed does not.
# Premises, checks and measurements are shown but not judged.

# %%
values = experiment.claim_values(runs, guarantee, selection_s)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# Here are the per-seed values behind the verdicts. Claims c4a, c4b and
# m2 do not depend on the seed (one run each, repeated), hence their zero spread.

# %%
pd.DataFrame(values).round(3)

# %% [markdown]
# ## What we scaled down, and why the effect should survive it
#
# - **Data and models.** 8 x 8 digits and a two-layer MLP instead of CIFAR and ImageNet with ResNets
#   and Swin transformers. Digits are nearly separable, so accuracies saturate near 96%: differences
#   of a few tenths of a point are one or two test images.
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
# - **Mild pruning is lossless for every selector (c2, a premise; c1a fails; c1b is fragile).** At 30%
#   and 50% pruning every selector, random included, stays within a few tenths of a point of the full
#   data: with 30% of the pool made of near-copies, keeping 70% of it loses almost no information. So
#   c2 is a premise of the toy, not evidence: it does not single out the method. The graph greedy's
#   edge over random is +3, +3 and -1 test images on the three seeds at 30% (c1a fails) and +4, +5 and
#   +1 images at 50% (c1b is fragile: the mean clears 0.5 points, the third seed does not). Digits saturate near 96%, which leaves little room for any selector to differ.
# - **Intrinsic-only selection fails when pruning hard (c3 is fragile).** At 70% pruning the
#   top-entropy subset is below random and below the graph greedy; at 90% it collapses to about a third
#   of the images right, because it keeps only the most ambiguous images and misses whole
#   neighbourhoods. The margin of claim c3 at 70% clears its 2 points on only one of the three seeds
#   (0.6, 1.8 and 6.0 points): the mean clears, so the verdict is fragile, not holds.
# - **At 90% pruning the paper's default weight loses to random.** The graph greedy with $\alpha = 1$
#   is about 6 points below random and 3 below k-center there, and level with k-center at 70%; with
#   $\alpha = 0$ (diversity only, on the same graph) it is the best selector at 90% (heat map). The
#   entropy term still pulls the few kept images towards hard ones. Both terms matter, as the paper
#   says, but how to weigh them depends on the ratio.
# - **The redundancy term spreads picks over neighbourhoods, but does not avoid near-copies.** Inside a
#   neighbourhood the proxy's embeddings (after a ReLU) are close for copies *and* for other images
#   (distance table): $g(D) = \sigma(D) - 1$ is about $-0.5$ for both. The greedy then balances how
#   many images it takes from each neighbourhood and ranks by entropy inside it, and a copy shares its
#   original's entropy. As pruning gets harder it keeps more redundant images (`redundant_fraction`)
#   than random, while k-center keeps none at 70% and 90%. A sharper $g$ would separate copies from neighbours
#   (exercise 2); we kept the paper's.
# - **The greedy is near-optimal where node weights dominate (c4b holds; c4a is a check).** On the
#   declared instances the greedy is usually exactly optimal and its ratio on the shifted objective is
#   far above $1 - 1/e$, as the theorem promises. In the edge-dominated regime of the experiment (small
#   $\alpha$, larger $b$) its gap to the optimum is larger: a few percent on average and up to about
#   15% on the worst of 50 instances (reported above, not a declared claim).
# - **Pruning does not pay for itself at this scale (c5 fails).** Training on the kept
#   70% takes about 70% of the full training time, as expected, but the proxy adds about a quarter of
#   a full run and the selection (mostly k-means) another 15% or so, so the whole pipeline costs a
#   little more than training on everything. The per-seed values are wall-clock ratios measured on a
#   shared machine and move from run to run (the table above), so the verdict is close to its
#   threshold and sensitive to timing noise. At the paper's scale the proxy
#   and the selection are small next to hours of training; here they are not.
#
# ## Summary
#
# On digits with injected redundancy, graph-based pruning is lossless at mild ratios, as random
# pruning is, and on the mean it avoids the collapse of intrinsic-only selection when pruning hard
# (on one seed of three by the declared margin). Its advantage
# over random pruning is within the noise of a 500-image test set at 30%, and at 90% pruning the
# paper's default weight is about 6 points worse than random, while the diversity-only setting of the
# same greedy is the best selector. The greedy itself is fast (half of 20,000 points in a fraction of
# a second) and near-optimal on small instances. At this scale the proxy and the selection cost about
# what pruning saves.
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
