"""The toy world: scikit-learn's digits with injected redundancy, the proxy run on them (Algorithm 1
step 1 with the chapter's MLP), the target model whose test accuracy scores a kept subset, the
subset diagnostics, and the synthetic instances (tiny complete graphs for the guarantee, a
20,000-point graph for timing)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from .method import edge_matrix, graph_objective, normalise, predictive_entropy

__all__ = [
    "N_TEST",
    "HIDDEN",
    "N_CLASSES",
    "DigitsPool",
    "load_digits_with_redundancy",
    "ProxyScores",
    "train_proxy",
    "train_target",
    "subset_stats",
    "synthetic_graph",
    "random_instance",
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
# 3. The target model and subset statistics
# --------------------------------------------------------------------------------------------


def train_target(X, y, X_test, y_test, epochs: int = 15, seed: int = 0) -> dict:
    """The target model: MLP 64-128-10 from scratch on (X, y), SGD momentum 0.9, wd 5e-4, OneCycle
    peak lr 0.05, batch 64, ``epochs`` passes over the subset (cost proportional to its size).
    Returns ``{"accuracy" (percent on the test split), "train_seconds"}``; model seed ``seed``."""
    from replib.models.mlp import MLP, accuracy, train_classifier

    model = MLP([np.shape(X)[1], HIDDEN, N_CLASSES], seed=int(seed))
    info = train_classifier(model, X, y, epochs=epochs, batch_size=64, lr=0.05, seed=int(seed))
    return {"accuracy": 100.0 * accuracy(model, X_test, y_test), "train_seconds": info["seconds"]}


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


# --------------------------------------------------------------------------------------------
# 4. Synthetic graphs: timing instance and tiny guarantee instances
# --------------------------------------------------------------------------------------------


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


def random_instance(rng: np.random.Generator, n: int = 12, alpha: float = 1.0):
    """A tiny complete-graph instance: D_ij ~ U(0, 2) i.i.d. (symmetric, zero diagonal), a = g(D) <= 0,
    w = alpha I_in with I_in ~ U(0, ln 10). Returns ``(w, A)``."""
    D = np.triu(rng.uniform(0.0, 2.0, size=(n, n)), k=1)
    D = D + D.T
    I_in = rng.uniform(0.0, math.log(N_CLASSES), size=n)
    return alpha * I_in, edge_matrix(D=D)
