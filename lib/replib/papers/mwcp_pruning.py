"""MWCP pruning (UGIES): dataset pruning as a fixed-size maximum-weight clique problem, at CPU scale.

Paper: Wu, Guo, Li, Liu, Chen, Sang, Gao, "Selecting Samples on Graphs: A Unified Dataset Pruning
Framework for Lossless Training Acceleration" (ICML 2026, arXiv 2606.12913). Official code:
github.com/dywu98/Data-Selection-on-Graphs ("UGIES").

Contents (numpy, scikit-learn's k-means and the shared torch MLP of :mod:`replib.models.mlp`):

1. Data: scikit-learn's bundled digits with injected redundancy (:func:`load_digits_with_redundancy`).
2. Proxy scores: a short proxy run gives the intrinsic score ``I_in`` = predictive entropy (Eq. 2,
   :func:`predictive_entropy`) and 128-d embeddings (:func:`train_proxy`).
3. The graph: :func:`cosine_distance` (D), :func:`redundancy_weight` (g(D) = sigmoid(D) - 1),
   :func:`neighbourhoods` (class-wise k-means, the structured sparsification), :func:`edge_matrix`
   (dense a_ij), :func:`objective` (F of Eq. 3), :func:`graph_objective` (Eq. 3 on the sparsified
   graph), :func:`marginal_gain` (Eq. 7), :func:`removal_loss` (Eq. 6).
4. The greedy of Eq. 8 / Algorithm 1, vectorised (:func:`greedy_select`), and its timing at
   n = 20,000 (:func:`selection_seconds`).
5. The guarantee (Lemma 3.4): :func:`monotone_shift` and :func:`shifted_objective` (Eq. 27, in the
   modular form the standard theorem needs), :func:`exhaustive_optimum`,
   :func:`greedy_guarantee_check`.
6. Baselines: :func:`select_random`, :func:`select_top_entropy` (intrinsic only),
   :func:`select_kcenter` (extrinsic only), :func:`select_mwcp` (the method, any alpha);
   :func:`subset_stats` (duplicates kept, clusters covered, objective).
7. Chapter helpers: :data:`EXPERIMENT_PROFILES`, :func:`run_experiment`, :func:`claim_values`, the
   exercise graders :func:`check_redundancy_weight` and :func:`check_marginal_gain`.

Conventions. A subset is an integer index array into the pool. Node weights are w_i = alpha I_in(x_i);
edge weights a_ij = g(D(z_i, z_j)) <= 0 for j in N(i), and 0 for a missing edge; every unordered pair
is counted once (Eq. 3). Accuracies in the experiment rows are in percent; a pruning ratio p keeps
b = round((1 - p) N) samples.

Fidelity notes (where the digest leaves room):

* Eq. 3 vs Eqs. 4-5: the literal sample-wise form counts each pair twice; we implement Eq. 3, and the
  greedy's score is its exact marginal (Eq. 7).
* Static, not dynamic: the paper's reported numbers come from per-epoch (InfoBatch-style) sampling in
  the official code, which also does not run the greedy; we implement the paper's one-shot greedy of
  Eq. 8 and compare it with static baselines. The "Stochastic Selection" variant is not implemented.
* Embeddings are the proxy's last hidden layer (after its ReLU); D = 1 - cos on them, so D is in
  [0, 1] here (non-negative activations) and g in [-0.5, -0.27]. k-means runs on the L2-normalised
  embeddings of each class (scikit-learn, k-means++ init, one init, 25 iterations, a seeded
  ``random_state``), so the clusters follow the same cosine geometry as the edges.
* The test split (500 images) is fixed for every seed (``split_seed = 0``); the seed changes which pool
  images are duplicated, the jitter, the proxy and the target models' initialisation and batch order.
  Injected copies are appended after the original pool; ``origin`` gives each item's original.
* The monotone shift: the paper (Eq. 27) raises the intrinsic value by eta per already selected element
  (eta >= max|g| / alpha). Read as a set function this adds alpha eta |S|(|S| - 1) / 2, whose increments
  grow with |S|, i.e. a supermodular term; an audit flagged this step. We use the standard *modular*
  shift F_c(S) = F(S) + c |S| with the smallest c that makes every marginal non-negative on the whole
  ground set, c = max(0, max_x (sum_j |a_xj| - w_x)): F_c is normalised, monotone and still
  submodular (g <= 0), and at |S| = b both shifts add a constant, so greedy choices and the optimum
  are unchanged. The greedy's 1 - 1/e ratio is reported on F_c; since any shift pushes that ratio
  towards 1, the unshifted relative gap (F* - F_greedy) / |F*| is reported as well.
* Tiny guarantee instances: a complete graph on n = 12 nodes, D_ij ~ U(0, 2) i.i.d. (the range of a
  cosine distance), g = sigmoid(D) - 1 <= 0, I_in ~ U(0, ln 10) (the range of a 10-class entropy),
  alpha = 1.
* Extrinsic-only baseline: greedy k-center (farthest-first traversal) with the cosine distance on the
  embeddings (equivalently the Euclidean distance of the normalised embeddings), first centre drawn
  at random.
* Timing: each row's ``select_seconds`` is everything needed to choose that subset once the proxy has
  run: for MWCP the class-wise k-means plus the greedy, for the baselines their own selection. The
  proxy row's ``train_seconds`` is the proxy's training plus its scoring pass.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from replib.core.runtime import compute_threads

__all__ = [
    "DigitsPool",
    "load_digits_with_redundancy",
    "predictive_entropy",
    "ProxyScores",
    "train_proxy",
    "normalise",
    "cosine_distance",
    "redundancy_weight",
    "neighbourhoods",
    "edge_matrix",
    "objective",
    "graph_objective",
    "marginal_gain",
    "removal_loss",
    "GreedyResult",
    "greedy_select",
    "synthetic_graph",
    "selection_seconds",
    "monotone_shift",
    "shifted_objective",
    "exhaustive_optimum",
    "random_instance",
    "greedy_guarantee_check",
    "select_random",
    "select_top_entropy",
    "select_kcenter",
    "select_mwcp",
    "subset_stats",
    "train_target",
    "EXPERIMENT_PROFILES",
    "variant_name",
    "run_experiment",
    "claim_values",
    "check_redundancy_weight",
    "check_marginal_gain",
]

N_TEST = 500  # held-out digits images
HIDDEN = 128  # proxy / target hidden width (64-128-10)
N_CLASSES = 10


# --------------------------------------------------------------------------------------------
# 1. Data: digits with injected redundancy
# --------------------------------------------------------------------------------------------


@dataclass
class DigitsPool:
    """The training pool (with injected copies) and the fixed test split.

    ``X`` (N x 64, float32 in [0, 1]), ``y`` (N,), ``X_test``, ``y_test``; ``is_dup[i]`` is True for an
    injected copy; ``origin[i]`` is the pool index of the original image of item i (i itself for an
    original); ``n_original`` originals come first, copies after them.
    """

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    is_dup: np.ndarray
    origin: np.ndarray
    n_original: int

    @property
    def n(self) -> int:
        """Pool size N."""
        return int(self.y.size)


def load_digits_with_redundancy(
    rng: np.random.Generator,
    n_test: int = N_TEST,
    dup_fraction: float = 0.3,
    copies: int = 4,
    jitter: float = 0.03,
    split_seed: int = 0,
) -> DigitsPool:
    """scikit-learn's 1,797 digits (8 x 8, pixels scaled to [0, 1]) with redundancy injected.

    A fixed permutation (``default_rng(split_seed)``) holds out ``n_test`` = 500 test images; the other
    1,297 form the pool. Then ``round(dup_fraction * 1297)`` = 389 pool images, drawn with ``rng``,
    are each copied ``copies`` = 4 times with N(0, jitter^2) pixel noise (jitter = 0.03), clipped to
    [0, 1]: N = 1,297 + 4 x 389 = 2,853. Labels stay clean.
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    X_all = (digits.data / 16.0).astype(np.float32)
    y_all = digits.target.astype(np.int64)
    perm = np.random.default_rng(split_seed).permutation(y_all.size)
    test, pool = perm[:n_test], perm[n_test:]
    X0, y0 = X_all[pool], y_all[pool]
    n0 = y0.size
    src = np.sort(rng.choice(n0, size=int(round(dup_fraction * n0)), replace=False))
    rep = np.repeat(src, int(copies))
    noise = rng.normal(0.0, jitter, size=(rep.size, X0.shape[1]))
    X_copy = np.clip(X0[rep] + noise, 0.0, 1.0).astype(np.float32)
    return DigitsPool(
        X=np.concatenate([X0, X_copy]),
        y=np.concatenate([y0, y0[rep]]),
        X_test=X_all[test],
        y_test=y_all[test],
        is_dup=np.concatenate([np.zeros(n0, bool), np.ones(rep.size, bool)]),
        origin=np.concatenate([np.arange(n0), rep]),
        n_original=int(n0),
    )


# --------------------------------------------------------------------------------------------
# 2. Proxy scores: intrinsic value (Eq. 2) and embeddings
# --------------------------------------------------------------------------------------------


def predictive_entropy(probs) -> np.ndarray:
    """Intrinsic score of the paper's instantiation (Eq. 2): I_in(x_i) = H(p_i) = -sum_c p_i^c log p_i^c
    (natural log, 0 log 0 = 0), one value per row of ``probs``."""
    p = np.asarray(probs, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    return -terms.sum(axis=-1)


@dataclass
class ProxyScores:
    """Output of the proxy run: ``entropy`` (I_in, N), ``embeddings`` (N x 128), ``probs`` (N x 10),
    ``seconds`` (training + scoring pass), ``test_accuracy`` (percent, NaN without a test set)."""

    entropy: np.ndarray
    embeddings: np.ndarray
    probs: np.ndarray
    seconds: float
    test_accuracy: float


def train_proxy(
    X,
    y,
    steps: int = 150,
    seed: int = 0,
    hidden: int = HIDDEN,
    batch_size: int = 64,
    lr: float = 0.05,
    X_test=None,
    y_test=None,
) -> ProxyScores:
    """Step 1 of Algorithm 1: a proxy MLP 64-128-10 trained ``steps`` = 150 SGD steps (batch 64,
    momentum 0.9, wd 5e-4, OneCycle peak lr 0.05) on the whole pool; returns each sample's predictive
    entropy (Eq. 2) and last-hidden-layer embedding. Model seed ``10_000 + seed``."""
    from replib.models.mlp import MLP, accuracy, embed, predict_proba, train_classifier

    start = time.perf_counter()
    model = MLP([np.shape(X)[1], hidden, N_CLASSES], seed=10_000 + int(seed))
    train_classifier(model, X, y, steps=steps, batch_size=batch_size, lr=lr, seed=10_000 + int(seed))
    probs = predict_proba(model, X)
    z = embed(model, X)
    seconds = time.perf_counter() - start
    acc = 100.0 * accuracy(model, X_test, y_test) if X_test is not None else float("nan")
    return ProxyScores(predictive_entropy(probs), z, probs, seconds, acc)


# --------------------------------------------------------------------------------------------
# 3. The graph: distance, edge weight, neighbourhoods, objective, marginal gain
# --------------------------------------------------------------------------------------------


def normalise(z) -> np.ndarray:
    """Rows scaled to unit L2 norm (float64; an all-zero row stays zero)."""
    z = np.asarray(z, dtype=float)
    norm = np.linalg.norm(z, axis=-1, keepdims=True)
    return z / np.maximum(norm, 1e-12)


def cosine_distance(a, b=None) -> np.ndarray:
    """Pairwise distance D(x_i, x_j) = 1 - cos(z_i, z_j) in [0, 2] between the rows of ``a`` and of
    ``b`` (default ``a``); clipped to [0, 2] against rounding."""
    na = normalise(a)
    nb = na if b is None else normalise(b)
    return np.clip(1.0 - na @ nb.T, 0.0, 2.0)


def redundancy_weight(D) -> np.ndarray:
    """Edge weight of the paper's instantiation: a_ij = g(D) = sigmoid(D) - 1 = -1 / (1 + e^D).

    For D >= 0, g is in [-1/2, 0): the closer two samples, the larger the penalty (g(0) = -0.5,
    g(2) = -0.12)."""
    return -1.0 / (1.0 + np.exp(np.asarray(D, dtype=float)))


def neighbourhoods(z, y, clusters_per_class: int = 5, rng=0, max_iter: int = 25) -> np.ndarray:
    """Structured graph sparsification: N(x_i) = samples with the same label and the same k-means
    cluster inside that class (the edge set of step 2 of Algorithm 1).

    k-means (scikit-learn, k-means++ init, ``n_init=1``, ``max_iter`` = 25) on the L2-normalised
    embeddings of each class, ``min(clusters_per_class, class size)`` clusters. ``rng`` is a
    Generator (one draw gives the ``random_state``) or an int ``random_state``. Returns the global
    cluster id of every sample, ``label * clusters_per_class + cluster``; two samples are neighbours iff
    their ids are equal (and they differ).
    """
    from sklearn.cluster import KMeans

    state = int(rng.integers(2**31 - 1)) if isinstance(rng, np.random.Generator) else int(rng)
    zn = normalise(z)
    y = np.asarray(y)
    out = np.empty(y.size, dtype=np.int64)
    K = int(clusters_per_class)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        k = min(K, idx.size)
        if k <= 1:
            out[idx] = c * K
            continue
        km = KMeans(n_clusters=k, n_init=1, max_iter=max_iter, random_state=state).fit(zn[idx])
        out[idx] = c * K + km.labels_
    return out


def edge_matrix(z=None, cluster=None, D=None) -> np.ndarray:
    """Dense edge weights a_ij = g(D_ij) for j in N(i), 0 otherwise and on the diagonal.

    ``D`` is a given distance matrix (else the cosine distance of the embeddings ``z``); ``cluster``
    (optional) restricts the edges to equal cluster ids (a complete graph without it)."""
    if D is None:
        D = cosine_distance(z)
    A = redundancy_weight(D)
    if cluster is not None:
        cluster = np.asarray(cluster)
        A = np.where(cluster[:, None] == cluster[None, :], A, 0.0)
    np.fill_diagonal(A, 0.0)
    return A


def objective(S, w, A) -> float:
    """Eq. 3: F(S) = sum_{i in S} w_i + sum_{{i, j} subset of S} a_ij, each unordered pair once
    (missing edges are zeros of ``A``; the diagonal is ignored)."""
    S = np.asarray(S, dtype=np.int64)
    w = np.asarray(w, dtype=float)
    if S.size == 0:
        return 0.0
    sub = np.asarray(A, dtype=float)[np.ix_(S, S)]
    return float(w[S].sum() + np.triu(sub, k=1).sum())


def graph_objective(S, w, z, cluster=None) -> float:
    """Eq. 3 on the sparsified graph of embeddings ``z`` and cluster ids ``cluster`` (a complete graph
    when None), computed block by block over the kept samples only (no N x N matrix)."""
    S = np.asarray(S, dtype=np.int64)
    w = np.asarray(w, dtype=float)
    if S.size == 0:
        return 0.0
    zn = normalise(np.asarray(z)[S])
    groups = [np.arange(S.size)] if cluster is None else _groups(np.asarray(cluster)[S])
    total = float(w[S].sum())
    for g in groups:
        if g.size > 1:
            A = redundancy_weight(np.clip(1.0 - zn[g] @ zn[g].T, 0.0, 2.0))
            total += float(np.triu(A, k=1).sum())
    return total


def marginal_gain(x: int, S, w, A) -> float:
    """Eq. 7: Delta(x | S) = w_x + sum_{j in S, j != x} a_xj = F(S + {x}) - F(S) for x not in S."""
    S = np.asarray(S, dtype=np.int64)
    S = S[S != x]
    return float(np.asarray(w, dtype=float)[x] + np.asarray(A, dtype=float)[x, S].sum())


def removal_loss(C, w, A) -> np.ndarray:
    """Eq. 6: the drop of F when v_i leaves the clique C, Delta^-(v_i) = w_i + sum_{j in C - i} a_ij,
    for every i in C (in the order of ``C``). Deleting the smallest solves b = |C| - 1 exactly."""
    C = np.asarray(C, dtype=np.int64)
    sub = np.asarray(A, dtype=float)[np.ix_(C, C)].copy()
    np.fill_diagonal(sub, 0.0)
    return np.asarray(w, dtype=float)[C] + sub.sum(axis=1)


def _groups(ids: np.ndarray) -> list[np.ndarray]:
    """Positions of each distinct id (sorted ids; positions in increasing order)."""
    order = np.argsort(ids, kind="stable")
    cuts = np.flatnonzero(np.diff(ids[order])) + 1
    return np.split(order, cuts)


# --------------------------------------------------------------------------------------------
# 4. The greedy of Eq. 8 / Algorithm 1 (vectorised)
# --------------------------------------------------------------------------------------------


@dataclass
class GreedyResult:
    """``order``: the b picks in greedy order; ``gains``: each pick's marginal gain Delta(x* | S_t) at
    the time of its pick; ``final_gain``: Delta(x | S_b) for every x not selected (-inf for the
    selected); ``seconds``: wall-clock time of the greedy loop."""

    order: np.ndarray
    gains: np.ndarray
    final_gain: np.ndarray
    seconds: float


def greedy_select(w, b: int, z=None, cluster=None, A=None) -> GreedyResult:
    """Algorithm 1, steps 3-4 (Eq. 8): gain_i = w_i; b times take x* = arg max gain over the unselected
    samples, add it, and add g(D(y, x*)) to gain_y for every y in N(x*).

    Either ``A`` (dense edge weights, e.g. :func:`edge_matrix`: each step adds row x*), or embeddings
    ``z`` with cluster ids ``cluster`` (the sparsified graph: each step touches only x*'s cluster, a
    contiguous block of the cluster-sorted embeddings, so the work is O(b |N|) plus a masked arg-max
    over n; ``cluster=None`` means the complete graph). Ties go to the lowest index.
    """
    gain = np.array(w, dtype=float)
    n = gain.size
    b = int(b)
    if not 0 <= b <= n:
        raise ValueError(f"b = {b} must be between 0 and n = {n}")
    order = np.empty(b, dtype=np.int64)
    gains = np.empty(b)
    start = time.perf_counter()
    if A is not None:
        A = np.asarray(A, dtype=float)
        for t in range(b):
            i = int(np.argmax(gain))
            order[t], gains[t] = i, gain[i]
            gain += A[i]
            gain[i] = -np.inf
    else:
        zn = normalise(z)
        ids = np.zeros(n, np.int64) if cluster is None else np.asarray(cluster, dtype=np.int64)
        perm = np.argsort(ids, kind="stable")  # cluster-sorted positions
        zs = np.ascontiguousarray(zn[perm])
        sorted_ids = ids[perm]
        first = np.searchsorted(sorted_ids, ids, side="left")  # block of each sample's cluster
        last = np.searchsorted(sorted_ids, ids, side="right")
        for t in range(b):
            i = int(np.argmax(gain))
            order[t], gains[t] = i, gain[i]
            lo, hi = first[i], last[i]
            block = perm[lo:hi]
            d = 1.0 - zs[lo:hi] @ zn[i]
            gain[block] -= 1.0 / (1.0 + np.exp(np.clip(d, 0.0, 2.0)))  # += g(D(y, x*))
            gain[i] = -np.inf
    return GreedyResult(order, gains, gain, time.perf_counter() - start)


def synthetic_graph(
    rng: np.random.Generator, n: int = 20000, classes: int = 20, clusters: int = 10, dim: int = 128
):
    """Synthetic pruning instance for timing: ``classes x clusters`` cluster centres drawn as random
    unit vectors in R^dim, each of the n points a centre plus N(0, 1/dim) noise (so about as far from
    its centre as the centres are from each other) in a cluster chosen uniformly, and intrinsic scores
    I_in ~ U(0, ln 10). Returns ``(I_in, z, cluster)``."""
    centres = normalise(rng.normal(size=(classes * clusters, dim)))
    cluster = rng.integers(classes * clusters, size=n)
    z = centres[cluster] + rng.normal(scale=1.0 / math.sqrt(dim), size=(n, dim))
    return rng.uniform(0.0, math.log(N_CLASSES), size=n), normalise(z), cluster


def selection_seconds(
    n: int = 20000, b: int = 10000, rng: np.random.Generator | None = None, alpha: float = 1.0
) -> float:
    """Wall-clock seconds of :func:`greedy_select` choosing b = 10,000 of n = 20,000 synthetic points
    (20 classes x 10 clusters, :func:`synthetic_graph`), alpha = 1; the greedy loop only (the clusters
    are given, as k-means is a separate, one-off step)."""
    rng = np.random.default_rng(0) if rng is None else rng
    I_in, z, cluster = synthetic_graph(rng, n)
    return greedy_select(alpha * I_in, b, z=z, cluster=cluster).seconds


# --------------------------------------------------------------------------------------------
# 5. The guarantee: monotone shift (Eq. 27), exhaustive optimum, greedy vs optimum
# --------------------------------------------------------------------------------------------


def monotone_shift(w, A) -> float:
    """Smallest per-element (modular) shift c >= 0 making every marginal non-negative:
    c = max(0, max_x (sum_{j != x} |min(a_xj, 0)| - w_x)).

    Then Delta_c(x | S) = Delta(x | S) + c >= w_x - sum_j |a_xj| + c >= 0 for every S, so
    F_c(S) = F(S) + c |S| is normalised and monotone, and submodular when a <= 0 (Lemma 3.4 with the
    shift of Eq. 27 in modular form; see the module notes)."""
    A = np.array(A, dtype=float)
    np.fill_diagonal(A, 0.0)
    penalty = -np.minimum(A, 0.0).sum(axis=1)
    return float(max(0.0, np.max(penalty - np.asarray(w, dtype=float))))


def shifted_objective(S, w, A, shift: float) -> float:
    """F_c(S) = F(S) + c |S| (Eq. 3 plus the modular shift of :func:`monotone_shift`); F_c(empty) = 0.
    At a fixed size |S| = b it differs from F by the constant c b."""
    return objective(S, w, A) + float(shift) * len(np.atleast_1d(np.asarray(S)))


def exhaustive_optimum(w, A, b: int):
    """max_{|S| = b} F(S) (Eq. 3) by enumerating all C(n, b) subsets (vectorised; tiny n only).
    Returns ``(S_star, F_star)`` with the first maximiser in lexicographic order."""
    w = np.asarray(w, dtype=float)
    A = np.asarray(A, dtype=float)
    combos = np.array(list(itertools.combinations(range(w.size), int(b))), dtype=np.int64)
    if combos.size == 0:
        return np.empty(0, np.int64), 0.0
    F = w[combos].sum(axis=1)
    for p, q in itertools.combinations(range(int(b)), 2):
        F += A[combos[:, p], combos[:, q]]
    k = int(np.argmax(F))
    return combos[k], float(F[k])


def random_instance(rng: np.random.Generator, n: int = 12, alpha: float = 1.0):
    """A tiny complete-graph instance: D_ij ~ U(0, 2) i.i.d. (symmetric, zero diagonal), a = g(D) <= 0,
    w = alpha I_in with I_in ~ U(0, ln 10). Returns ``(w, A)``."""
    D = np.triu(rng.uniform(0.0, 2.0, size=(n, n)), k=1)
    D = D + D.T
    I_in = rng.uniform(0.0, math.log(N_CLASSES), size=n)
    return alpha * I_in, edge_matrix(D=D)


def greedy_guarantee_check(
    rng: np.random.Generator, instances: int = 200, n: int = 12, b: int = 4, alpha: float = 1.0
) -> dict:
    """Greedy (Eq. 8) vs exhaustive optimum on ``instances`` random tiny instances
    (:func:`random_instance`).

    Per instance: ``ratio`` = F_c(S_greedy) / F_c(S*) on the shifted, normalised objective
    (:func:`monotone_shift`; Lemma 3.4 promises >= 1 - 1/e) and ``gap`` = (F* - F_greedy) / |F*| on the
    unshifted Eq. 3; also ``f_greedy``, ``f_opt``, ``shift``. Scalars ``min_ratio`` (claim c4a) and
    ``mean_gap`` (claim c4b)."""
    out = {k: np.empty(instances) for k in ("ratio", "gap", "f_greedy", "f_opt", "shift")}
    for k in range(instances):
        w, A = random_instance(rng, n, alpha)
        S_g = greedy_select(w, b, A=A).order
        S_star, f_opt = exhaustive_optimum(w, A, b)
        f_g = objective(S_g, w, A)
        c = monotone_shift(w, A)
        out["ratio"][k] = shifted_objective(S_g, w, A, c) / shifted_objective(S_star, w, A, c)
        out["gap"][k] = (f_opt - f_g) / abs(f_opt) if f_opt != 0 else 0.0
        out["f_greedy"][k], out["f_opt"][k], out["shift"][k] = f_g, f_opt, c
    out["min_ratio"] = float(out["ratio"].min())
    out["mean_gap"] = float(out["gap"].mean())
    return out


# --------------------------------------------------------------------------------------------
# 6. Baselines and subset statistics
# --------------------------------------------------------------------------------------------


def select_random(rng: np.random.Generator, n: int, b: int) -> np.ndarray:
    """Random pruning: b of n indices without replacement."""
    return rng.choice(n, size=int(b), replace=False)


def select_top_entropy(I_in, b: int) -> np.ndarray:
    """Intrinsic-only pruning: the b samples of largest I_in (alpha -> infinity; ties to the lowest
    index)."""
    return np.argsort(-np.asarray(I_in, dtype=float), kind="stable")[: int(b)]


def select_kcenter(z, b: int, rng: np.random.Generator) -> np.ndarray:
    """Extrinsic-only pruning: greedy k-center (farthest-first traversal). First centre at random, then
    repeatedly the sample whose cosine distance to its nearest chosen centre is largest."""
    zn = normalise(z)
    n = zn.shape[0]
    b = int(b)
    order = np.empty(b, dtype=np.int64)
    if b == 0:
        return order
    i = int(rng.integers(n))
    nearest = np.full(n, np.inf)
    for t in range(b):
        order[t] = i
        np.minimum(nearest, 1.0 - zn @ zn[i], out=nearest)
        nearest[i] = -np.inf  # chosen centres stay at -inf (min with -inf)
        i = int(np.argmax(nearest))
    return order


def select_mwcp(I_in, z, cluster, b: int, alpha: float = 1.0) -> GreedyResult:
    """The method: greedy MWCP (Algorithm 1) with w = alpha I_in on the cluster-sparsified graph."""
    return greedy_select(alpha * np.asarray(I_in, dtype=float), b, z=z, cluster=cluster)


def subset_stats(S, pool: DigitsPool, cluster, I_in, z) -> dict:
    """Diagnostics of a kept set S: ``dup_fraction`` (share of S that are injected copies),
    ``redundant_fraction`` (1 - distinct originals / |S|: items whose original, or another copy of it,
    is also kept), ``clusters_covered`` (distinct neighbourhoods with a kept sample) and ``objective``
    (Eq. 3 with alpha = 1 on the sparsified graph, the same yardstick for every method)."""
    S = np.asarray(S, dtype=np.int64)
    k = max(1, S.size)
    return {
        "dup_fraction": float(pool.is_dup[S].sum() / k),
        "redundant_fraction": float(1.0 - np.unique(pool.origin[S]).size / k) if S.size else 0.0,
        "clusters_covered": int(np.unique(np.asarray(cluster)[S]).size),
        "objective": graph_objective(S, I_in, z, cluster),
    }


def train_target(X, y, X_test, y_test, epochs: int = 15, seed: int = 0) -> dict:
    """The target model: MLP 64-128-10 from scratch on (X, y), SGD momentum 0.9, wd 5e-4, OneCycle
    peak lr 0.05, batch 64, ``epochs`` passes over the subset (cost proportional to its size).
    Returns ``{"accuracy" (percent on the test split), "train_seconds"}``; model seed ``seed``."""
    from replib.models.mlp import MLP, accuracy, train_classifier

    model = MLP([np.shape(X)[1], HIDDEN, N_CLASSES], seed=int(seed))
    info = train_classifier(model, X, y, epochs=epochs, batch_size=64, lr=0.05, seed=int(seed))
    return {"accuracy": 100.0 * accuracy(model, X_test, y_test), "train_seconds": info["seconds"]}


# --------------------------------------------------------------------------------------------
# 7. Chapter helpers: profiles, the experiment loop, claim values, exercise graders
# --------------------------------------------------------------------------------------------

EXPERIMENT_PROFILES = {
    "smoke": dict(
        seeds=[0], ratios=[0.3, 0.5, 0.7], alphas=[1.0], epochs=5, proxy_steps=150,
        clusters_per_class=5,
    ),
    "book": dict(
        seeds=[0, 1, 2], ratios=[0.3, 0.5, 0.7, 0.9], alphas=[0.0, 0.3, 1.0, 3.0], epochs=15,
        proxy_steps=150, clusters_per_class=5,
    ),
    "paper": dict(
        seeds=[0, 1, 2, 3, 4], ratios=[0.3, 0.5, 0.7, 0.9], alphas=[0.0, 0.3, 1.0, 3.0], epochs=30,
        proxy_steps=150, clusters_per_class=5,
    ),
}

FIGURE_RATIO = 0.7  # ratio whose kept sets go to the extras (PCA figure)


def variant_name(method: str, alpha: float | None = None) -> str:
    """Row label: "random", "entropy", "kcenter", "full", "proxy" or "mwcp(alpha=1)"."""
    return f"mwcp(alpha={alpha:g})" if method == "mwcp" else method


def _pca2(z) -> np.ndarray:
    """First two principal components of the rows of z."""
    zc = np.asarray(z, dtype=float) - np.mean(z, axis=0)
    _, _, vt = np.linalg.svd(zc, full_matrices=False)
    return zc @ vt[:2].T


def run_experiment(cfg, progress=None, threads: int = 1):
    """Every method at every pruning ratio on every seed of ``cfg`` (a resolved profile namespace with
    seeds, ratios, alphas, epochs, proxy_steps, clusters_per_class).

    Per seed: the pool (:func:`load_digits_with_redundancy` with ``default_rng(seed)``), the proxy
    (:func:`train_proxy`), the class-wise k-means neighbourhoods, the full-data model, and for each
    ratio p (b = round((1 - p) N)) the subsets of random, top-b entropy, k-center and MWCP at each
    alpha, each trained from scratch for ``epochs`` epochs with model seed = the seed (common random
    numbers across methods; the random and k-center draws use ``default_rng([seed, round(1000 p)])``,
    k-means ``random_state = seed``). Torch runs with ``threads`` thread(s) and deterministic algorithms;
    one-off import and first-step costs are paid before any timing starts.

    Returns ``(rows, extras)``. ``rows``: dicts with seed, method, variant, alpha (NaN for the
    baselines), ratio (0 for the full data and the proxy), size, accuracy (percent), train_seconds,
    select_seconds, dup_fraction, redundant_fraction, clusters_covered, objective; one "proxy" row per
    seed (its accuracy and training + scoring seconds; select_seconds = the k-means time). ``extras``
    (first seed): pool, entropy, embeddings, pca (N x 2), cluster, and ``kept`` = {variant: indices}
    at the ratio closest to 0.7 (``kept_ratio``). ``progress`` is an optional tqdm-like wrapper.
    """
    jobs = [(seed, p) for seed in cfg.seeds for p in [0.0, *cfg.ratios]]
    it = progress(jobs, total=len(jobs)) if progress is not None else jobs
    rows: list[dict] = []
    extras: dict = {}
    state: dict = {}
    ratios = list(cfg.ratios)
    kept_ratio = min(ratios, key=lambda r: abs(r - FIGURE_RATIO)) if ratios else None
    with compute_threads(threads):
        _warm_up()
        for seed, p in it:
            if state.get("seed") != seed:
                state = _prepare_seed(cfg, seed, rows)
                if seed == cfg.seeds[0]:
                    extras = dict(
                        pool=state["pool"],
                        entropy=state["H"],
                        embeddings=state["z"],
                        pca=_pca2(state["z"]),
                        cluster=state["cluster"],
                        kept={},
                        kept_ratio=kept_ratio,
                    )
            if p == 0.0:
                continue
            for variant, method, alpha, S, sel_s in _selections(cfg, state, seed, p):
                rows.append(_evaluate(cfg, state, seed, method, variant, alpha, p, S, sel_s))
                if seed == cfg.seeds[0] and p == kept_ratio:
                    extras["kept"][variant] = np.asarray(S)
    return rows, extras


def _warm_up() -> None:
    """Pay one-off costs (scikit-learn's k-means import and first fit, torch's first steps) before
    anything is timed, so that no method's seconds include them."""
    from replib.models.mlp import MLP, train_classifier

    neighbourhoods(np.random.default_rng(0).random((20, 4)), np.zeros(20, np.int64), 2, rng=0)
    x = np.zeros((8, 64), np.float32)
    train_classifier(MLP([64, HIDDEN, N_CLASSES], seed=0), x, np.arange(8) % N_CLASSES, steps=4,
                     batch_size=4)


def _prepare_seed(cfg, seed: int, rows: list) -> dict:
    """Pool, proxy scores, neighbourhoods and the full-data row of one seed (appends two rows)."""
    rng = np.random.default_rng(seed)
    pool = load_digits_with_redundancy(rng)
    proxy = train_proxy(
        pool.X, pool.y, steps=cfg.proxy_steps, seed=seed, X_test=pool.X_test, y_test=pool.y_test
    )
    t0 = time.perf_counter()
    cluster = neighbourhoods(proxy.embeddings, pool.y, cfg.clusters_per_class, rng=seed)
    graph_s = time.perf_counter() - t0
    state = dict(seed=seed, rng=rng, pool=pool, H=proxy.entropy, z=proxy.embeddings,
                 cluster=cluster, graph_seconds=graph_s)
    nan = float("nan")
    rows.append(dict(seed=seed, method="proxy", variant="proxy", alpha=nan, ratio=0.0, size=pool.n,
                     accuracy=proxy.test_accuracy, train_seconds=proxy.seconds,
                     select_seconds=graph_s, dup_fraction=nan, redundant_fraction=nan,
                     clusters_covered=nan, objective=nan))
    rows.append(_evaluate(cfg, state, seed, "full", "full", nan, 0.0, np.arange(pool.n), 0.0))
    return state


def _selections(cfg, state: dict, seed: int, p: float):
    """(variant, method, alpha, kept indices, selection seconds) of every method at ratio p."""
    pool, H, z, cluster = state["pool"], state["H"], state["z"], state["cluster"]
    b = int(round((1.0 - p) * pool.n))
    nan = float("nan")
    rng = np.random.default_rng([seed, int(round(1000 * p))])
    t0 = time.perf_counter()
    S = select_random(rng, pool.n, b)
    yield "random", "random", nan, S, time.perf_counter() - t0
    t0 = time.perf_counter()
    S = select_top_entropy(H, b)
    yield "entropy", "entropy", nan, S, time.perf_counter() - t0
    t0 = time.perf_counter()
    S = select_kcenter(z, b, rng)
    yield "kcenter", "kcenter", nan, S, time.perf_counter() - t0
    for alpha in cfg.alphas:
        res = select_mwcp(H, z, cluster, b, alpha)
        yield variant_name("mwcp", alpha), "mwcp", float(alpha), res.order, (
            state["graph_seconds"] + res.seconds
        )


def _evaluate(cfg, state, seed, method, variant, alpha, p, S, select_s) -> dict:
    """Train the target on subset S and collect the row."""
    pool = state["pool"]
    S = np.asarray(S, dtype=np.int64)
    res = train_target(pool.X[S], pool.y[S], pool.X_test, pool.y_test, cfg.epochs, seed)
    return dict(seed=seed, method=method, variant=variant, alpha=alpha, ratio=float(p), size=int(S.size),
                accuracy=res["accuracy"], train_seconds=res["train_seconds"],
                select_seconds=float(select_s),
                **subset_stats(S, pool, state["cluster"], state["H"], state["z"]))


def _per_seed(value, seed):
    """``value[seed]`` for a mapping, else ``value``."""
    return value[seed] if isinstance(value, dict) and seed in value else value


def claim_values(rows, guarantee, selection_seconds) -> dict:
    """Per-seed values of the claims declared in the chapter's ``chapter.yml``.

    ``rows``: the rows of :func:`run_experiment` (list of dicts or a DataFrame). ``guarantee``: the
    dict of :func:`greedy_guarantee_check` (or ``{seed: dict}``); ``selection_seconds``: the seconds of
    :func:`selection_seconds` (or ``{seed: seconds}``). c4a, c4b and m2 do not depend on the
    experiment's seed: a single value given is repeated for every seed. Values that need a ratio the
    profile did not run are NaN. Returns ``{seed: {claim_id: value}}``.
    """
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    by_seed: dict = {}
    for row in rows:
        key = (row["variant"], round(float(row["ratio"]), 6))
        by_seed.setdefault(row["seed"], {})[key] = row
    nan = float("nan")
    out = {}
    for seed, m in by_seed.items():

        def get(variant, p, field="accuracy", m=m):
            """One field of one row, NaN when absent."""
            row = m.get((variant, round(p, 6)))
            return float(row[field]) if row is not None else nan

        mw = variant_name("mwcp", 1.0)
        full_t = get("full", 0.0, "train_seconds")
        pipeline = (get("proxy", 0.0, "train_seconds") + get(mw, 0.3, "select_seconds")
                    + get(mw, 0.3, "train_seconds"))
        g = _per_seed(guarantee, seed)
        out[seed] = {
            "c1a_beats_random_30": get(mw, 0.3) - get("random", 0.3),
            "c1b_beats_random_50": get(mw, 0.5) - get("random", 0.5),
            "c2_lossless_30": get(mw, 0.3) - get("full", 0.0),
            "c3_unified_vs_intrinsic_70": get(mw, 0.7) - get("entropy", 0.7),
            "c4a_greedy_ratio": float(g["min_ratio"]),
            "c4b_greedy_gap": float(g["mean_gap"]),
            "c5_time_end_to_end": pipeline / full_t,
            "m1_training_time_ratio": get(mw, 0.3, "train_seconds") / full_t,
            "m2_selection_seconds_20k": float(_per_seed(selection_seconds, seed)),
        }
    return out


def check_redundancy_weight(fn) -> None:
    """Grade an exercise answer ``fn(D)`` -> g(D) = sigmoid(D) - 1 (elementwise on arrays)."""
    from replib.core.exercises import grade

    cases = [
        (np.array(0.0),),
        (np.array([0.0, 0.5, 1.0, 2.0]),),
        (np.linspace(0.0, 2.0, 9).reshape(3, 3),),
        (np.array([10.0]),),
    ]
    grade(fn, redundancy_weight, cases, name="redundancy_weight")


def check_marginal_gain(fn) -> None:
    """Grade an exercise answer ``fn(x, S, w, A)`` -> Delta(x | S) = w_x + sum_{j in S} a_xj (Eq. 7)."""
    from replib.core.exercises import grade

    w, A = random_instance(np.random.default_rng(7), n=6)
    cases = [
        (0, [], w, A),
        (2, [0], w, A),
        (5, [1, 3, 4], w, A),
        (1, [0, 2, 3, 4, 5], w, A),
    ]
    grade(fn, marginal_gain, cases, name="marginal_gain")
