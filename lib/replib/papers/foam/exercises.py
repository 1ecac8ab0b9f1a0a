"""Graders of FOAM's exercises (implementation notebook)."""

from __future__ import annotations

import numpy as np

from .method import controller_step, damped_inverse_root
from .task import random_psd

__all__ = [
    "check_damped_inverse_root",
    "check_controller_step",
]


def check_damped_inverse_root(fn) -> None:
    """Grade the damped-inverse-root exercise: ``fn(A, eps, p)`` for a symmetric positive
    semi-definite ``A`` is compared with the book's reference on hand-made matrices (diagonal, random,
    low-rank; p of 2 and of 4); the first case that differs or raises is named."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(11)
    cases = [
        (np.diag([4.0, 1.0, 0.0]), 1e-2, 2),
        (random_psd(rng, 5), 1e-3, 2),
        (random_psd(rng, 6, rank=2), 1e-4, 2),
        (random_psd(rng, 4), 1e-2, 4),
        (np.eye(3), 0.0, 2),
    ]
    grade(fn, damped_inverse_root, cases, name="damped_inverse_root")


def check_controller_step(fn) -> None:
    """Grade the damping-controller exercise: ``fn(eps, h, eps0, eps_max, tau)`` returns
    ``(next eps, refresh?)``; it is compared with the book's reference on hand-made cases (at the floor,
    below and above the threshold, at the cap), and the first case that differs or raises is named."""
    from replib.core.exercises import grade

    # the rule is scale-free; damping values of order 1 keep the comparison (np.allclose, absolute
    # tolerance 1e-8) meaningful
    cases = [
        (0.01, 0.3, 0.01, 3.0, 0.75),  # h < tau at the floor: stays at eps0
        (1.0, 0.375, 0.01, 3.0, 0.75),  # h < tau: halves
        (0.1, 0.05, 0.01, 3.0, 0.75),  # would fall below the floor: eps0
        (0.01, 7.5, 0.01, 3.0, 0.75),  # grows 10x, under the cap
        (1.0, 7.5, 0.01, 3.0, 0.75),  # would exceed the cap: refresh, eps0
        (1.0, 2.0, 0.01, 3.0, 0.75),  # grows to 2.67, just under the cap
        (2.0, 0.5, 1.0, 300.0, 0.4),
    ]
    grade(fn, controller_step, cases, name="controller_step")
