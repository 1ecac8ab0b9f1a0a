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
    """Grade the CoPO-weights exercise: ``fn(confidences)``, an (n, 4) array of action
    confidences, returns the (n, 4) level weights. Compared with the book's reference on hand-made
    rows, ties and zeros included; the first case that differs or raises is named."""
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
    """Grade the fixed-point exercise: ``fn(w)``, a weight vector or an (n, 4) array of them
    (any positive weights), returns the level distribution where CoPO's expected update vanishes.
    Compared with the book's reference on hand-made weights; the first case that differs or raises
    is named."""
    from replib.core.exercises import grade

    cases = [(np.ones(4),), (np.array([1.0, 2.0, 3.0, 4.0]),), (copo_weights(np.array([0.2, 0.3, 0.4, 0.9])),),
             (0.5 + np.random.default_rng(3).random((5, 4)),)]
    grade(lambda w: _as_numpy(fn(w)), level_fixed_point, cases, name="level_fixed_point")
