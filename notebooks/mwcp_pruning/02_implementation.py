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
# # Dataset pruning on graphs: implementation
#
# **Learning goals.** After this notebook you can
#
# 1. read each piece of the method in `replib.papers.mwcp_pruning` (its modules `task`, `method`,
#    `theory` and `baselines`) beside the equation or step of Algorithm 1 it implements: the data
#    with injected redundancy, the proxy's intrinsic scores and embeddings, the redundancy weight, the
#    neighbourhoods, the objective, the marginal gain and the vectorised greedy;
# 2. check each piece on an input small enough to verify by hand;
# 3. run the selectors that the experiment compares, and time the greedy at $n = 20{,}000$.
#
# The method (MWCP, for maximum-weight clique problem) keeps a fixed number $b$ of training samples
# chosen greedily on a graph: each sample's node weight says how informative it is, each edge's
# non-positive weight how redundant two samples are. Algorithm 1 is the paper's pipeline: score the
# samples with a proxy, build the graph, then select greedily.

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

from replib import core
from replib.core.runtime import compute_threads
from replib.papers.mwcp_pruning import baselines, exercises, method, task, theory

core.set_style()
profile = core.resolve_profile(profile)

# %% [markdown]
# ## 1. Data with injected redundancy
#
# scikit-learn ships 1,797 handwritten digits (8 x 8 pixels). Held out, a few hundred of them would
# make one test image worth 0.2 points of accuracy, as much as the margins the paper reports. So we
# fit one Gaussian mixture per class to all of them and draw digit-like images from it: as many test
# images as we need (the experiment draws 50,000; here 10,000 are enough) and a pool of 1,297
# originals.

# %%
core.show_source(task.fit_digit_generator)

# %% [markdown]
# Large real data sets are redundant; this one is not, so 30% of the pool images are copied four
# times with a little pixel noise ($\sigma = 0.03$). Labels stay clean. The experiment also runs
# every selector on a clean pool of the same size, 2,853 distinct images and no copies
# (`dup_fraction = 0`), so that a result cannot come from removing the copies alone.

# %%
core.show_source(task.load_digits_with_redundancy)

# %%
with compute_threads(1):  # one thread: small problems, and faster on a shared machine
    generator = task.fit_digit_generator()
pool = task.load_digits_with_redundancy(core.seed_everything(0), generator, n_test=10_000)
assert pool.n == 1297 + 4 * 389 and pool.X_test.shape == (10_000, 64)
assert np.all(np.bincount(pool.y_test) > 900)  # every class well represented
assert pool.is_dup.sum() == 4 * 389 and np.all(pool.origin[: pool.n_original] == np.arange(1297))
copy = np.flatnonzero(pool.is_dup)[0]
assert pool.y[copy] == pool.y[pool.origin[copy]]  # a copy keeps its original's label
assert np.abs(pool.X[copy] - pool.X[pool.origin[copy]]).max() < 0.2  # and looks like it
print(f"pool of {pool.n} images, {pool.is_dup.sum()} of them near-copies")

# %% [markdown]
# ## 2. Intrinsic value and embeddings from a proxy (step 1 of Algorithm 1)
#
# A proxy network (a small model trained only to score the data; here an MLP, a fully connected
# network of layers 64-128-10, the shared `replib.models.mlp.MLP`) trained briefly on the whole pool
# gives each sample's predictive entropy, the paper's choice of the intrinsic score $I_{in}$ in the
# node weights of Eq. 2, $I_{in}(x_i) = H(\mathbf p_i) = -\sum_c p_i^c \log p_i^c$, and its
# 128-dimensional hidden embedding.

# %%
core.show_source(method.predictive_entropy)

# %%
H = method.predictive_entropy(np.array([[1.0, 0.0], [0.5, 0.5], [0.25, 0.75]]))
assert np.allclose(H, [0.0, np.log(2), -(0.25 * np.log(0.25) + 0.75 * np.log(0.75))])
with compute_threads(1):
    proxy = task.train_proxy(pool.X, pool.y, steps=150, seed=0, X_test=pool.X_test, y_test=pool.y_test)
assert proxy.embeddings.shape == (pool.n, 128) and np.all(proxy.entropy >= 0)
print(f"proxy test accuracy {proxy.test_accuracy:.1f}% after 150 steps ({proxy.seconds:.2f} s)")

# %% [markdown]
# ## 3. The redundancy weight and the neighbourhoods (step 2)
#
# The edge weight is $a_{ij} = g(D(z_i, z_j))$ with the cosine distance $D = 1 - \cos(z_i, z_j)$ of
# two embeddings and $g(D) = \sigma(D) - 1$, $\sigma$ the logistic sigmoid. Edges exist only inside a
# neighbourhood: the same class and the same k-means cluster within that class (k-means splits the
# class's embeddings into 5 groups around 5 centres), the paper's structured sparsification. A
# missing edge weighs 0.

# %%
core.show_source(method.redundancy_weight)

# %%
assert np.isclose(method.redundancy_weight(0.0), -0.5)  # identical samples pay the most
assert np.all(np.diff(method.redundancy_weight(np.linspace(0, 2, 5))) > 0)  # farther apart, smaller penalty
assert np.all(method.redundancy_weight(np.linspace(0, 2, 5)) < 0)  # never a reward: submodularity
z_toy = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
assert np.allclose(method.cosine_distance(z_toy), [[0, 0, 1], [0, 0, 1], [1, 1, 0]])

# %%
cluster = method.neighbourhoods(proxy.embeddings, pool.y, clusters_per_class=5, rng=0)
assert np.all(cluster // 5 == pool.y)  # a neighbourhood never mixes classes
print(f"{np.unique(cluster).size} neighbourhoods, sizes {np.bincount(cluster).min()} to {np.bincount(cluster).max()}")

# %% [markdown]
# ## 4. The objective (Eq. 3) and the marginal gain (Eq. 7)
#
# $F(S) = \sum_{i \in S} w_i + \sum_{\{i, j\} \subseteq S} a_{ij}$, each pair once, and
# $\Delta(x \mid S) = w_x + \sum_{j \in S} a_{xj} = F(S \cup \{x\}) - F(S)$.

# %%
core.show_source(method.objective)

# %%
w = np.array([1.0, 2.0, 3.0])
A = np.array([[0.0, -0.5, -0.2], [-0.5, 0.0, -0.1], [-0.2, -0.1, 0.0]])
assert np.isclose(method.objective([0, 1, 2], w, A), 6.0 - 0.8)  # three pairs, each counted once
assert np.isclose(method.marginal_gain(2, [0, 1], w, A), 3.0 - 0.3)
assert np.isclose(method.marginal_gain(2, [0, 1], w, A), method.objective([0, 1, 2], w, A) - method.objective([0, 1], w, A))

# %% [markdown]
# ## 5. The greedy, vectorised (Eq. 8, steps 3 and 4 of Algorithm 1)
#
# Every sample keeps a running gain, initialised to $\alpha I_{in}$. Each step takes the arg-max over
# the unselected samples, then adds $g(D(\cdot, x^\star))$ to the gains of $x^\star$'s neighbourhood
# only, one vectorised operation on a contiguous block of cluster-sorted embeddings. Selecting $b$ of
# $n$ costs $O(n b)$ array work for the arg-maxes plus $O(b\,|\mathcal N|)$ for the updates, with no
# Python loop over pairs.

# %%
core.show_source(method.greedy_select)

# %%
rng = np.random.default_rng(3)
w, A = task.random_instance(rng, n=10)
result = method.greedy_select(w, 5, A=A)
S = []
for x, gain in zip(result.order, result.gains):  # each recorded gain is the true marginal of Eq. 7
    assert np.isclose(gain, method.marginal_gain(x, S, w, A))
    S.append(x)
no_edges = method.greedy_select(w, 5, A=np.zeros_like(A)).order
assert set(no_edges) == set(np.argsort(-w)[:5])  # without redundancy the greedy is top-b

# %% [markdown]
# The experiment uses the sparse path (embeddings and neighbourhood ids, one block per pick). On the
# digits pool it must pick exactly what the dense path picks with the full matrix of edge weights:

# %%
sparse = method.greedy_select(proxy.entropy, 300, z=proxy.embeddings, cluster=cluster).order
dense = method.greedy_select(proxy.entropy, 300, A=method.edge_matrix(proxy.embeddings, cluster)).order
assert np.array_equal(sparse, dense)

# %% [markdown]
# ## 6. The monotone shift behind the guarantee (Eq. 27, modular form)
#
# Marginal gains can be negative, so $F$ is not monotone. Adding $c$ per kept element with
# $c = \max_x (\sum_j |a_{xj}| - w_x)$ makes every marginal non-negative without changing any greedy
# decision at a fixed size $b$.

# %%
core.show_source(theory.monotone_shift)

# %%
c = theory.monotone_shift(w, A)
everyone = np.arange(w.size)
plain = [method.marginal_gain(x, np.delete(everyone, x), w, A) for x in everyone]  # the worst case: S = all others
assert min(plain) < 0 <= min(g + c for g in plain)  # some gains are negative; shifted, none is

# %% [markdown]
# At scale: half of 20,000 synthetic points in 200 neighbourhoods. The time is the greedy alone; the
# k-means that builds the neighbourhoods is a separate, one-off step (on the digits pool it is most
# of the selection time reported in the experiment).

# %%
I_syn, z_syn, cluster_syn = task.synthetic_graph(np.random.default_rng(0), n=20000)
seconds = method.greedy_select(I_syn, 10000, z=z_syn, cluster=cluster_syn).seconds
print(f"greedy selection of 10,000 of 20,000 points: {seconds:.2f} s")

# %% [markdown]
# ## 7. The baselines
#
# Random pruning; intrinsic only (the $b$ largest entropies, $\alpha \to \infty$); extrinsic only
# (greedy k-center: repeatedly the sample farthest from everything kept). The method is the greedy
# with $\alpha = 1$ on the sparsified graph. Every kept set then trains the same target model from
# scratch for the same number of epochs, so training cost scales with the subset.

# %%
core.show_source(baselines.select_kcenter)

# %%
directions = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0]])  # two near-copies and an outlier
for start in range(3):
    kept = set(baselines.select_kcenter(directions, 2, np.random.default_rng(start)))
    assert 2 in kept and not {0, 1} <= kept  # k-center never keeps both near-copies
b = 1000
subsets = {
    "random": baselines.select_random(np.random.default_rng(0), pool.n, b),
    "entropy": baselines.select_top_entropy(proxy.entropy, b),
    "kcenter": baselines.select_kcenter(proxy.embeddings, b, np.random.default_rng(0)),
    "mwcp(alpha=1)": method.select_mwcp(proxy.entropy, proxy.embeddings, cluster, b, alpha=1.0).order,
}
for name, S in subsets.items():
    stats = task.subset_stats(S, pool, cluster, proxy.entropy, proxy.embeddings)
    print(f"{name:<14} copies kept {stats['dup_fraction']:.2f}, neighbourhoods covered "
          f"{stats['clusters_covered']}, F = {stats['objective']:.1f}")

# %% [markdown]
# ## 8. Training every kept subset, several initialisations at once, and counting the cost
#
# The experiment trains each kept subset from scratch with four initialisations, the same four for
# every selector, so that a difference between two selectors is not one lucky initialisation. All
# subsets of one pruning ratio have the same size $b$, so their models can train as one batched
# network: the weights get a leading model axis, each model draws its own minibatches of its own
# subset, and the loss is the sum over models of each model's mean cross-entropy, so each model
# receives exactly the gradient of its own loss. Momentum, weight decay and the OneCycle learning
# rate act element by element, so the batched run is the same computation as training the models one
# after the other, only faster. Below, two subsets of 200 images and two initialisations train for
# two short epochs, batched and one by one: the accuracies are low, and what matters is that the two
# tables agree.

# %%
core.show_source(task.train_targets)

# %%
rng = np.random.default_rng(3)
two = [rng.choice(pool.n, 200, replace=False) for _ in range(2)]
with compute_threads(1):
    batched = task.train_targets(pool.X, pool.y, two, pool.X_test[:2000], pool.y_test[:2000], epochs=2,
                                 seeds=[5, 6])["accuracy"]
    alone = [[task.train_target(pool.X[S], pool.y[S], pool.X_test[:2000], pool.y_test[:2000], epochs=2,
                                seed=k)["accuracy"] for k in (5, 6)] for S in two]
print(np.round(batched, 2), np.round(alone, 2), sep="\n")
assert np.allclose(batched, alone, atol=0.06)  # the same models, up to float rounding (0.05 = one image)

# %% [markdown]
# Costs are counted in floating-point operations (FLOPs), which do not depend on the machine or its
# load: one image through the 64-128-10 network costs $2(64 \cdot 128 + 128 \cdot 10)$ FLOPs
# forward and three times that in training (forward and backward). The proxy costs its training steps
# plus one scoring pass over the pool; k-means and the greedy count their own arithmetic as they run
# (`GreedyResult.flops`).

# %%
n, epochs = pool.n, 15
full_cost = task.training_flops(epochs * n)
half_cost = task.training_flops(epochs * round(0.5 * n))
proxy_cost = task.proxy_flops(150, 64, n)
greedy = method.select_mwcp(proxy.entropy, proxy.embeddings, cluster, round(0.5 * n), alpha=1.0)
print(f"full data {full_cost / 1e9:.2f} GFLOPs, half {half_cost / 1e9:.2f}, proxy {proxy_cost / 1e9:.2f}, "
      f"greedy {greedy.flops / 1e9:.3f}")
assert abs(half_cost / full_cost - 0.5) < 1e-3
assert proxy_cost > task.training_flops(150 * 64 - 64)  # 150 steps of at most 64 images, plus scoring

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write the redundancy weight $g(D) = \sigma(D) - 1$ for an array of distances.

# %% tags=["solution", "hide-input"]
def redundancy_weight(D):
    return 1.0 / (1.0 + np.exp(-np.asarray(D, dtype=float))) - 1.0


# %%
exercises.check_redundancy_weight(redundancy_weight)

# %% [markdown]
# **Exercise 2.** Write the marginal gain of Eq. 7: `marginal_gain(x, S, w, A)` for a sample `x`, a
# list `S` of kept samples, node weights `w` and a dense matrix of edge weights `A`. The grader
# passes `x` as an int, `S` as a plain Python list of indices (possibly empty) and `w`, `A` as NumPy
# arrays.

# %% tags=["solution", "hide-input"]
def marginal_gain(x, S, w, A):
    return w[x] + sum(A[x, j] for j in S if j != x)


# %%
exercises.check_marginal_gain(marginal_gain)

# %% [markdown]
# **Exercise 3 (open).** The k-center baseline ignores informativeness and the entropy baseline
# ignores redundancy. Using `task.subset_stats`, compare the share of near-copies that each selector
# keeps at $b = 300$. Which selector wastes the most budget on copies, and why?
#
# ## Summary
#
# The method is a handful of small pieces: a proxy's entropy as node weight, a sigmoid of the cosine
# distance as (negative) edge weight, neighbourhoods from class-wise k-means, and a greedy by
# marginal gain that keeps one running gain per sample and updates one neighbourhood per pick. It
# selects half of 20,000 points in a fraction of a second. The experiment trains four
# initialisations on each kept set, all kept sets of a ratio as one batched network, compares them
# with the baselines and with the full data, and counts what everything costs in FLOPs.
