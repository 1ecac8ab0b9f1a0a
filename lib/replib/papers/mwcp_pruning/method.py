"""The method: the intrinsic score (Eq. 2), the graph of Eq. 3 (distance D, edge weight g,
class-wise k-means sparsification), its marginal gain (Eq. 7) and removal loss (Eq. 6), and the
greedy of Eq. 8 / Algorithm 1 (vectorised), with the selector that applies it to a pool."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

__all__ = [
    "predictive_entropy",
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
    "select_mwcp",
]


# --------------------------------------------------------------------------------------------
# 1. Intrinsic score (Eq. 2)
# --------------------------------------------------------------------------------------------


def predictive_entropy(probs) -> np.ndarray:
    """Intrinsic score of the paper's instantiation (Eq. 2): I_in(x_i) = H(p_i) = -sum_c p_i^c log p_i^c
    (natural log, 0 log 0 = 0), one value per row of ``probs``."""
    p = np.asarray(probs, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    return -terms.sum(axis=-1)


# --------------------------------------------------------------------------------------------
# 2. The graph: distance, edge weight, neighbourhoods, objective, marginal gain
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


def neighbourhoods(z, y, clusters_per_class: int = 5, rng=0, max_iter: int = 25,
                   cost: dict | None = None) -> np.ndarray:
    """Structured graph sparsification: N(x_i) = samples with the same label and the same k-means
    cluster inside that class (the edge set of step 2 of Algorithm 1).

    k-means (scikit-learn, k-means++ init, ``n_init=1``, ``max_iter`` = 25) on the L2-normalised
    embeddings of each class, ``min(clusters_per_class, class size)`` clusters. ``rng`` is a
    Generator (one draw gives the ``random_state``) or an int ``random_state``. Returns the global
    cluster id of every sample, ``label * clusters_per_class + cluster``; two samples are neighbours iff
    their ids are equal (and they differ).

    ``cost`` (optional dict): its ``"flops"`` entry is increased by the k-means work, counted from the
    iterations each class's fit ran: k-means++ seeding, (2 + ln k) candidate centres per centre, each
    scored against every point (2 n_c d FLOPs), then per iteration every point against every centre
    (2 n_c k d) plus the centre update (n_c d).
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
        if cost is not None:
            n_c, d = idx.size, zn.shape[1]
            seeding = k * (2 + np.log(k)) * 2.0 * n_c * d
            cost["flops"] = cost.get("flops", 0.0) + seeding + km.n_iter_ * (2.0 * n_c * k * d + n_c * d)
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
# 3. The greedy of Eq. 8 / Algorithm 1 (vectorised)
# --------------------------------------------------------------------------------------------


@dataclass
class GreedyResult:
    """``order``: the b picks in greedy order; ``gains``: each pick's marginal gain Delta(x* | S_t) at
    the time of its pick; ``final_gain``: Delta(x | S_b) for every x not selected (-inf for the
    selected); ``seconds``: wall-clock time of the greedy loop; ``flops``: its arithmetic, counted per
    pick: the masked arg-max over the n gains (n) and the update of the picked sample's neighbours
    (2 d + 4 per neighbour on the sparsified graph: a dot product, then 1 - cos, the sigmoid and the
    add; n adds with a dense ``A``)."""

    order: np.ndarray
    gains: np.ndarray
    final_gain: np.ndarray
    seconds: float
    flops: float = float("nan")


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
        flops = 2.0 * b * n
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
        touched = float(np.sum(last[order] - first[order]))
        flops = float(b) * n + touched * (2.0 * zs.shape[1] + 4.0)
    return GreedyResult(order, gains, gain, time.perf_counter() - start, flops)


def select_mwcp(I_in, z, cluster, b: int, alpha: float = 1.0) -> GreedyResult:
    """The method: greedy MWCP (Algorithm 1) with w = alpha I_in on the cluster-sparsified graph."""
    return greedy_select(alpha * np.asarray(I_in, dtype=float), b, z=z, cluster=cluster)
