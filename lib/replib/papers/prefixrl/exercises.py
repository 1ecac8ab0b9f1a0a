"""Graders of PrefixRL's exercises (implementation notebook)."""

from __future__ import annotations

import numpy as np
import torch

from replib.rl import group_advantages

from .theory import group_signal_probability

__all__ = [
    "check_group_advantages",
    "check_group_signal_probability",
]


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def _advantages_reference(rewards):
    return group_advantages(torch.as_tensor(rewards, dtype=torch.float32)).numpy().astype(float)


def check_group_advantages(fn) -> None:
    """Grade the group-advantage exercise: ``fn(rewards)``, rewards a float array (B, G) with
    one group per row, returns advantages of the same shape (numpy or torch). Compared with the book's
    reference on hand-made groups, constant ones included; the first case that differs or raises is
    named."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(21)
    cases = [
        (np.array([[0.0, 1.0, 0.0, 0.0]]),),
        (np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]),),
        ((rng.random((6, 8)) < 0.3).astype(float),),
        (np.array([[0.0, 0.5, 1.0], [2.0, -1.0, 0.5]]),),
        (rng.normal(size=(4, 5)),),
    ]
    grade(lambda r: _as_numpy(fn(r)), _advantages_reference, cases, name="group_advantages")


def check_group_signal_probability(fn) -> None:
    """Grade the learning-signal exercise: ``fn(p, G)`` (p a float or an array) returns the
    probability that a group of G rollouts gives a non-zero advantage. Compared with the book's
    reference on hand-made cases; the first case that differs or raises is named."""
    from replib.core.exercises import grade

    cases = [(0.5, 2), (0.1, 8), (0.0, 8), (1.0, 4), (1e-4, 16), (np.array([0.01, 0.2, 0.6, 0.95]), 8)]
    grade(lambda p, G: _as_numpy(fn(p, G)), lambda p, G: _as_numpy(group_signal_probability(p, G)), cases,
          name="group_signal_probability")
