"""Baselines: random pruning, intrinsic-only (top-b entropy) and extrinsic-only (greedy k-center)
selection."""

from __future__ import annotations

import numpy as np

from .method import normalise

__all__ = [
    "select_random",
    "select_top_entropy",
    "select_kcenter",
]


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
