"""SGB-IB, the toy world: three non-negative views of scikit-learn's digits, and the clustering
metrics (ACC with Hungarian matching, NMI)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.datasets import load_digits
from sklearn.metrics import normalized_mutual_info_score

__all__ = ["digits_views", "corrupt_views", "projection_profiles", "orientation_histogram", "accuracy", "nmi", "majority_purity"]


def projection_profiles(images: np.ndarray) -> np.ndarray:
    """View 2: the 8 row sums and 8 column sums of each 8x8 image (16 features)."""
    return np.concatenate([images.sum(axis=2), images.sum(axis=1)], axis=1)


def orientation_histogram(images: np.ndarray, bins: int = 8) -> np.ndarray:
    """View 3: a gradient-orientation histogram, ``bins`` orientations x 4 image quadrants,
    each gradient weighted by its magnitude (32 features)."""
    gy, gx = np.gradient(images.astype(float), axis=(1, 2))
    magnitude = np.hypot(gx, gy)
    angle = np.mod(np.arctan2(gy, gx), 2 * np.pi)
    b = np.minimum((angle / (2 * np.pi) * bins).astype(int), bins - 1)
    n = len(images)
    out = np.zeros((n, 4, bins))
    for q, (rows, cols) in enumerate([(slice(0, 4), slice(0, 4)), (slice(0, 4), slice(4, 8)),
                                      (slice(4, 8), slice(0, 4)), (slice(4, 8), slice(4, 8))]):
        bq = b[:, rows, cols].reshape(n, -1)
        mq = magnitude[:, rows, cols].reshape(n, -1)
        for k in range(bins):
            out[:, q, k] = (mq * (bq == k)).sum(axis=1)
    return out.reshape(n, -1)


def digits_views(n: int | None = None, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Digits-3view: ``(views, labels)`` with views [64 pixel intensities, 16 projection
    profiles, 32 orientation-histogram bins], all non-negative. ``n`` draws a uniform random subset
    (without replacement) of that size with ``default_rng(seed)`` (None: all 1797 images)."""
    digits = load_digits()
    images, y = digits.images, digits.target
    if n is not None and n < len(y):
        idx = np.sort(np.random.default_rng(seed).choice(len(y), size=n, replace=False))
        images, y = images[idx], y[idx]
    views = [images.reshape(len(y), -1), projection_profiles(images), orientation_histogram(images)]
    return [v.astype(float) for v in views], y.astype(int)


def corrupt_views(views: list[np.ndarray], seed: int, frac: float = 0.2, mix: float = 0.5
                  ) -> tuple[list[np.ndarray], np.ndarray]:
    """The noisy-modality stress test of our plan: a share ``frac`` of the samples (drawn with
    ``default_rng(seed)``) each get one view, drawn at random, replaced by a ``mix`` : 1 - ``mix``
    blend of a uniform-noise profile and its own profile, at the row's own total, so that its
    p(y_v|x) becomes (1 - mix) p(y_v|x) + mix q with q a uniform-noise row normalised to 1.
    Returns (the corrupted views, the (n,) index of the corrupted view per sample, -1 for clean)."""
    rng = np.random.default_rng(seed)
    n = len(views[0])
    which = np.full(n, -1)
    hit = rng.choice(n, size=int(round(frac * n)), replace=False)
    which[hit] = rng.integers(0, len(views), size=len(hit))
    out = [np.array(X, dtype=float) for X in views]
    for v, X in enumerate(out):
        rows = np.flatnonzero(which == v)
        total = X[rows].sum(axis=1, keepdims=True)
        noise = rng.random((len(rows), X.shape[1]))
        X[rows] = (1 - mix) * X[rows] + mix * total * noise / noise.sum(axis=1, keepdims=True)
    return out, which


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Clustering accuracy: the share of samples whose cluster maps to their class under the best
    one-to-one matching of clusters to classes (Hungarian algorithm)."""
    classes, clusters = np.unique(y_true), np.unique(y_pred)
    counts = np.zeros((len(clusters), len(classes)))
    for i, c in enumerate(clusters):
        counts[i] = [(y_true[y_pred == c] == k).sum() for k in classes]
    rows, cols = linear_sum_assignment(-counts)
    return float(counts[rows, cols].sum() / len(y_true))


def nmi(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Normalised mutual information (arithmetic normalisation, scikit-learn's default)."""
    return float(normalized_mutual_info_score(y_true, y_pred))


def majority_purity(y_true: np.ndarray, groups: list[np.ndarray]) -> float:
    """The share of samples that carry the majority class of their group (a ball): the accuracy an
    oracle would reach by labelling every ball with its true majority class."""
    return float(sum(np.bincount(y_true[idx]).max() for idx in groups) / len(y_true))
