"""Exercise graders of the implementation notebook."""

from __future__ import annotations

import numpy as np

from .method import marginal_gain, redundancy_weight
from .task import random_instance

__all__ = [
    "check_redundancy_weight",
    "check_marginal_gain",
]


def check_redundancy_weight(fn) -> None:
    """Grade the redundancy-weight exercise: ``fn(D)`` (scalars and arrays, elementwise) is
    compared with the book's reference on hand-made cases; the first case that differs or raises is
    named."""
    from replib.core.exercises import grade

    cases = [
        (np.array(0.0),),
        (np.array([0.0, 0.5, 1.0, 2.0]),),
        (np.linspace(0.0, 2.0, 9).reshape(3, 3),),
        (np.array([10.0]),),
    ]
    grade(fn, redundancy_weight, cases, name="redundancy_weight")


def check_marginal_gain(fn) -> None:
    """Grade the marginal-gain exercise (Eq. 7): ``fn(x, S, w, A)`` is compared with the book's
    reference on hand-made cases; the first case that differs or raises is named."""
    from replib.core.exercises import grade

    w, A = random_instance(np.random.default_rng(7), n=6)
    cases = [
        (0, [], w, A),
        (2, [0], w, A),
        (5, [1, 3, 4], w, A),
        (1, [0, 2, 3, 4, 5], w, A),
    ]
    grade(fn, marginal_gain, cases, name="marginal_gain")
