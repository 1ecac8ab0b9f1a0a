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
# # Granular-ball information bottleneck: theory
#
# **Learning goals.** After this notebook you can
#
# 1. write multi-view data (several feature sets, or views, of the same samples) as conditional
#    distributions $p(y_v \mid x)$ and say what the mutual information $I(T; Y_v)$ measures;
# 2. compute the mutual-information purity of a granular ball (a group of nearby samples treated as
#    one item, with a centre and a radius) and see why it lies in $[0, 1]$;
# 3. verify the identity behind draw-and-merge (the optimiser that draws each item out of its cluster
#    and merges it back where the objective loses least): merging an item into a cluster lowers
#    $I(T;Y)$ by exactly $(p_b + p_t)\,\mathrm{JS}_\pi$, with $\mathrm{JS}_\pi$ the weighted
#    Jensen-Shannon divergence between the two distributions;
# 4. say what clustering balls instead of points should buy (less noise, less compute) and what it
#    can cost;
# 5. show that, without the structure term, the IB objective of a ball partition is the point-level
#    objective of the partition it induces, and use that to tell an optimiser failure from an
#    objective failure.
#
# **Sources.** "SGB-IB: Structure-aware Granular-Ball based Information Bottleneck for Multi-modal
# Clustering", ICML 2026 poster (https://icml.cc/virtual/2026/poster/63122). Only the abstract could
# be read; no arXiv version and no official code were found. The abstract fixes five points, which
# we follow; everything else, the algorithm's details, every hyperparameter and the data, is our
# proposal, so the chapter tests the stated idea, not the authors' exact algorithm (see "Sources in
# detail" at the end).

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

from replib import core
from replib.papers.sgb_ib import method

core.set_style()
profile = core.resolve_profile(profile)
n_trials = {"smoke": 20, "book": 200, "paper": 1000}[profile]

# %% [markdown]
# ## 1. Multi-view data as distributions
#
# Each of $n$ samples $x$ is seen through $V$ non-negative feature sets (views). The information
# bottleneck (IB: a clustering that compresses the samples while keeping as much information as it can
# about their features) reads view $v$ as a conditional distribution
# $p(y_v \mid x) = X^{(v)}_{x,y} / \sum_{y'} X^{(v)}_{x,y'}$ with $p(x) = 1/n$. A hard clustering $T$
# is good when it keeps the information the samples carry about their features,
# $I(T; Y_v) = \sum_t p(t)\,\mathrm{KL}(p(y_v \mid t)\,\|\,p(y_v))$ (KL: the Kullback-Leibler
# divergence, how far one distribution is from another), while compressing the samples
# ($I(T; X) = H(T)$, the entropy of the cluster sizes, for a hard clustering). The structure-aware
# objective we use over balls $b$ (proposed; abstract point 4) is
#
# $$F(T) = \frac1V \sum_v I(T; Y_v) - \beta^{-1} H(T) + \lambda\, \Omega(T),\qquad
# \Omega(T) = \frac{\sum_{b \ne b'} A_{bb'}\,[t_b = t_{b'}]}{\sum_{b \ne b'} A_{bb'}},$$
#
# where $A$ links neighbouring or overlapping balls: $\Omega$ rewards keeping neighbours together
# (local structure), $-\beta^{-1} H(T)$ suppresses information about individual balls (global redundancy).
#
# ## 2. The identity behind draw-and-merge
#
# Merging an item $b$ (weight $p_b$, distribution $p$) into a cluster $t$ (weight $p_t$, distribution
# $q$) lowers $I(T;Y)$ by exactly $(p_b + p_t)\,\mathrm{JS}_\pi(p, q)$ with $\pi = (p_b, p_t)/(p_b + p_t)$.
# We check it on a random 6 x 5 joint distribution: every item starts alone, then item 5 joins each of the others.

# %%
rng = np.random.default_rng(0)
weight = rng.dirichlet(np.ones(6))
dists = [rng.dirichlet(np.ones(5), size=6)]
alone = method.ib_objective(weight, dists, np.arange(6), 6, beta_inv=0.0)
for t in range(5):
    merged = np.arange(6)
    merged[5] = t
    drop = alone - method.ib_objective(weight, dists, merged, 6, beta_inv=0.0)
    St = [weight[:5, None] * dists[0][:5]]
    cost = method.merge_costs(weight[5], [dists[0][5]], weight[:5], St, beta_inv=0.0)[t]
    print(f"merge item 5 into {t}: drop of I(T;Y) = {drop:.6f}, (p_b + p_t) JS = {cost:.6f}")
    assert abs(drop - cost) < 1e-10

# %% [markdown]
# ## 3. The mutual-information purity of a ball
#
# Inside a ball $b$, with pseudo-labels $\hat y$ from K-means (the standard clustering into $K$ groups
# around their means) on each view, two mutual informations compare feature distributions:
# $I_b(\hat Y_v; Y_v) = \sum_k p_b(k)\,\mathrm{KL}(p(y_v \mid b, k)\,\|\,p(y_v \mid b))$ (how much the
# label groups differ) and
# $I_b(X; Y_v) = \frac1{|S_b|}\sum_{x \in S_b}\mathrm{KL}(p(y_v \mid x)\,\|\,p(y_v \mid b))$ (how much
# the members differ at all). The labels are a function of $x$, so the data-processing inequality
# gives $0 \le I_b(\hat Y_v; Y_v) \le I_b(X; Y_v)$, and the impurity
# $\iota(b) = \frac1V\sum_v I_b(\hat Y_v;Y_v) / I_b(X;Y_v)$ lies in $[0, 1]$; the purity is
# $1 - \iota(b)$. A ball is split until its purity reaches $\theta$. We check the inequality on random
# balls.

# %%
ratios = []
for _ in range(n_trials):
    size = int(rng.integers(4, 30))
    P = rng.dirichlet(np.ones(6) * rng.uniform(0.3, 3), size=size)
    i_hat, i_x = method.ball_mi_terms(P, rng.integers(0, 3, size=size))
    assert -1e-12 <= i_hat <= i_x + 1e-12
    ratios.append(i_hat / i_x)
print(f"{n_trials} random balls: impurity ratio between {min(ratios):.3f} and {max(ratios):.3f}")

# %% [markdown]
# ## 4. Why balls should denoise, and what they can cost
#
# A ball's distribution $p(y \mid b)$ averages $|S_b|$ noisy members, so its noise variance shrinks about
# as $1/|S_b|$: two classes that overlap at the level of single samples separate at the level of balls.
# Below, samples of two classes are noisy draws around two close profiles; we measure the
# Jensen-Shannon divergence between two items of the *same* class and of *different* classes,
# for single samples and for balls of 10.

# %%
profiles = np.array([[0.30, 0.30, 0.20, 0.20], [0.20, 0.20, 0.30, 0.30]])


def js(p, q):
    m = (p + q) / 2
    return 0.5 * method.kl_rows(p[None], m)[0] + 0.5 * method.kl_rows(q[None], m)[0]


def item(c, size):
    return rng.dirichlet(profiles[c] * 20, size=size).mean(axis=0)


rows = {}
for size in (1, 10):
    same = [js(item(0, size), item(0, size)) for _ in range(n_trials)]
    diff = [js(item(0, size), item(1, size)) for _ in range(n_trials)]
    rows[size] = (same, diff)
    print(f"items of {size:>2} samples: mean JS same class {np.mean(same):.4f}, different classes {np.mean(diff):.4f}")

fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharey=True)
for ax, size in zip(axes, rows):
    ax.hist(rows[size][0], bins=20, alpha=0.6, label="same class")
    ax.hist(rows[size][1], bins=20, alpha=0.6, label="different classes")
    ax.set_xlabel(f"js divergence, items of {size} sample{'s' if size > 1 else ''}")
axes[0].set_ylabel("pairs")
axes[0].legend()
plt.show()

# %% [markdown]
# *Figure 1. Jensen-Shannon divergence between two items of the same class and of different
# classes; single samples (left) overlap, balls of 10 samples (right) separate.*
#
# The cost is the other side of the same coin: a ball takes one cluster for all its members, so a
# ball that mixes two classes caps the accuracy. The purity threshold $\theta$ decides how much
# mixing is allowed, and the pseudo-labels, not the true classes, decide what "mixed" means.
#
# ## 5. Balls restrict the search; the objective decides
#
# Without the structure term ($\lambda = 0$), $F$ depends on a partition only through $p(t)$ and
# $p(y_v \mid t)$, and a cluster of balls has the same $p(t)$ and $p(y_v \mid t)$ as the cluster of
# their members. So the IB objective of a ball partition *is* the point-level objective of the
# partition it induces on the samples: clustering balls searches a subset of the point partitions,
# with the same objective. Its best value can only be lower than the best point partition's, and it
# gains accuracy over point-level sIB only if, among the partitions the balls allow, the objective
# prefers accurate ones. We check the identity on random data.

# %%
X = rng.dirichlet(np.ones(5), size=30)
members = np.array_split(rng.permutation(30), 8)  # 8 balls
stats = method.ball_statistics([X], members)
T_balls = rng.integers(0, 3, size=8)
F_balls = method.ib_objective(stats.weight, stats.dists, T_balls, 3, beta_inv=0.05)
F_points = method.ib_objective(np.full(30, 1 / 30), [X], T_balls[stats.of_sample], 3, beta_inv=0.05)
assert np.isclose(F_balls, F_points)
print(f"F of a ball partition {F_balls:.6f} = F of the sample partition it induces {F_points:.6f}")

# %% [markdown]
# This gives the experiment a way to tell an optimiser failure from an objective failure: score the
# partition draw-and-merge finds and the best partition the balls allow (each ball labelled with its
# true majority digit, an oracle) with the same $F$. If the oracle scores higher, the optimiser
# missed it; if it scores lower, the objective itself prefers the less accurate partition.
#
# ## 6. What to expect in the experiment
#
# On Digits-3view (pixels, projection profiles and orientation histograms of scikit-learn's 1797
# digits) the draw-and-merge sweep costs $O(m K \sum_v d_v)$ on $m$ balls against $O(n K \sum_v d_v)$
# on $n$ points, so clustering balls should be many times faster. Whether it is also more accurate
# depends on whether the balls are pure enough (the oracle's ceiling) and on whether the objective
# rewards the accurate ball partitions (section 5). The experiment runs on the clean digits and on a
# copy where a fifth of the samples have one view half replaced by noise, the setting in which
# averaging members (section 4) should help most.
#
# ## Summary
#
# - Views become distributions $p(y_v \mid x)$; the IB keeps $\sum_v I(T;Y_v)$ while compressing.
# - Draw-and-merge uses the exact drop $(p_b + p_t)\,\mathrm{JS}_\pi$ of each merge.
# - The MI purity is a ratio in $[0,1]$ by the data-processing inequality.
# - Averaging members denoises balls, but a mixed ball caps the accuracy.
# - At $\lambda = 0$ a ball partition's $F$ is the point-level $F$ of the partition it induces: balls
#   restrict the search, the objective decides which allowed partition wins.
#
# ## Exercises
#
# 1. Show that the impurity of a ball whose members all share one pseudo-label is 0, and that of a
#    ball whose label groups each hold identical rows is 1.
# 2. In section 4, how large must a ball be for the same-class and different-class histograms to stop
#    overlapping? Change the sizes and look.
#
# ## Sources in detail
#
# Only the abstract of the ICML 2026 poster could be read. It fixes five points: (1) start from the
# whole data set as one granular ball; (2) split balls recursively by a purity; (3) the purity
# averages, over modalities, the mutual information between sample features and K-means
# pseudo-labels; (4) a structure-aware objective balances local structure and global redundancy;
# (5) the clustering is an information bottleneck. Everything else is our proposal, not the paper's:
# the purity as a ratio of two mutual informations, the split rule, the form of the objective, the
# sequential draw-and-merge optimiser (sIB, the sequential information bottleneck of Slonim, Friedman
# and Tishby, SIGIR 2002), every hyperparameter ($\theta = 0.9$ from a related withdrawn submission,
# $n_{\min} = 8$, $\beta^{-1} = 0.01$, $\lambda = 0.05$) and the Digits-3view data. The paper's data
# sets, baselines and numbers are not stated in what we could read.
