"""Exercise graders of the CogRouter chapter: :func:`check_copo_weights` (against
:func:`method.copo_weights`) and :func:`check_level_fixed_point` (against
:func:`theory.level_fixed_point`)."""

from __future__ import annotations

import numpy as np
import torch

from .method import copo_weights
from .theory import level_fixed_point

__all__ = [
    "check_copo_weights",
    "check_level_fixed_point",
]


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def check_copo_weights(fn) -> None:
    """Grade an exercise answer ``fn(confidences)`` -> weights, for an (n, 4) array of action
    confidences: clip to [1e-6, 1], min-max normalise each row (all 0.5 when the row's range is
    <= 1e-6), w = exp(2 c_hat) / row mean of exp(2 c_hat)."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(7)
    cases = [
        (np.array([[0.9, 0.5, 0.5, 0.1]]),),
        (np.array([[0.25, 0.25, 0.25, 0.25], [0.3, 0.3, 0.3, 0.3 + 1e-8]]),),
        (np.array([[0.0, 0.0, 0.2, 0.4], [1.5, 0.2, 0.1, 0.3]]),),
        (rng.random((6, 4)),),
        (np.array([[0.97, 0.96, 0.95, 0.955]]),),
    ]
    grade(lambda c: _as_numpy(fn(c)), copo_weights, cases, name="copo_weights")


def check_level_fixed_point(fn) -> None:
    """Grade an exercise answer ``fn(w)`` -> the level distribution where the expected CoPO update
    A (w - sum(w) pi) vanishes, for a weight vector or an (n, 4) array of them (any positive
    weights, not only mean-1 ones): w / sum(w) over the last axis."""
    from replib.core.exercises import grade

    cases = [(np.ones(4),), (np.array([1.0, 2.0, 3.0, 4.0]),), (copo_weights(np.array([0.2, 0.3, 0.4, 0.9])),),
             (0.5 + np.random.default_rng(3).random((5, 4)),)]
    grade(lambda w: _as_numpy(fn(w)), level_fixed_point, cases, name="level_fixed_point")
