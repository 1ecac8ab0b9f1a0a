"""CA-SOADD, exercise graders."""

from __future__ import annotations

import numpy as np
import torch

from .method import boundary_hinge_loss, calibrate_threshold

__all__ = ["check_boundary_hinge", "check_threshold"]


def _hinge_reference(z, z_probe, c, m):
    return float(boundary_hinge_loss(torch.as_tensor(z), torch.as_tensor(z_probe), torch.as_tensor(c), m))


def check_boundary_hinge(fn) -> None:
    """Grade the boundary-shaping exercise: ``fn(z, z_probe, c, m)`` (numpy arrays: batch x D,
    batch x D, D; a float margin) returns a float; it is compared with the book's reference on
    hand-made cases, and the first case that differs or raises is named."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(0)
    c = np.array([1.0, 0.0])
    cases = [
        (np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]]), c, 1.0),
        (np.array([[1.0, 0.0]]), np.array([[-1.0, 0.0]]), c, 1.0),
        (np.array([[2.0, 0.0], [0.0, 3.0]]), np.array([[1.0, 1.0], [1.0, 0.0]]), c, 0.5),
        (rng.standard_normal((5, 3)), rng.standard_normal((5, 3)), rng.standard_normal(3), 1.0),
        (rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), np.array([0.0, 0.0, 2.0]), 1.9),
    ]
    grade(fn, _hinge_reference, cases, name="boundary_hinge")


def check_threshold(fn) -> None:
    """Grade the calibration exercise: ``fn(dev_scores, alpha)`` returns the deployment threshold
    from bona fide dev scores; compared with the book's reference on hand-made cases."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(1)
    cases = [(np.arange(101.0), 0.05), (np.arange(101.0), 0.5), (rng.standard_normal(200), 0.01),
             (np.array([0.3, 0.9, 0.1, 0.7]), 0.25), (rng.random(50), 0.1)]
    grade(fn, calibrate_threshold, cases, name="threshold")
