"""Exercise graders of the HieRD chapter: :func:`check_group_weights` (against
:func:`method.group_weights`) and :func:`check_cross_pi` (against :func:`method.cross_pi`)."""

from __future__ import annotations

import numpy as np
import torch

from .method import cross_pi, group_weights

__all__ = ["check_group_weights", "check_cross_pi"]


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def _reference_weights(h: np.ndarray, members: np.ndarray) -> np.ndarray:
    omega, _, _ = group_weights(torch.as_tensor(h, dtype=torch.float64)[None],
                                torch.as_tensor(members)[None], int(members.max()) + 1)
    return omega[0].numpy()


def check_group_weights(fn) -> None:
    """Grade ``fn(h, members)``, which returns the within-group token weights of one sample: h an
    (N, d) array of token states, members an (N,) integer array of group labels (-1: in no group);
    it returns an (N,) array, 0 for tokens in no group. Cases: one group, a singleton, tokens outside
    every group, several groups of different sizes."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(11)
    cases = [
        (rng.normal(size=(3, 4)), np.array([0, 0, 0])),
        (rng.normal(size=(4, 4)), np.array([0, 0, 1, -1])),
        (rng.normal(size=(6, 8)), np.array([0, 1, 1, 2, 2, 2])),
        (np.array([[1.0, 0.0, 1.0], [1.0, 0.1, 0.9], [-1.0, 2.0, 0.0]]), np.array([0, 0, 0])),
        (rng.normal(size=(5, 3)), np.array([-1, 0, -1, 0, 0])),
    ]
    grade(lambda h, m: _as_numpy(fn(h, m)), _reference_weights, cases, name="group_weights")


def _reference_pi(attention: np.ndarray, text_groups: np.ndarray, clusters: np.ndarray) -> np.ndarray:
    b = (text_groups[:, None] == np.arange(text_groups.max() + 1)).astype(float)
    c = (clusters[:, None] == np.arange(clusters.max() + 1)).astype(float)
    return cross_pi(torch.as_tensor(attention)[None], torch.as_tensor(b)[None], torch.as_tensor(c)[None])[0].numpy()


def check_cross_pi(fn) -> None:
    """Grade ``fn(attention, text_groups, clusters)``, which returns the phrase x cluster weights Pi
    of one sample: attention an (M, N) array (text rows, vision columns), text_groups (M,) and
    clusters (N,) integer labels (-1: in no group); it returns a (G, K) array, one row per text
    group and one column per cluster (labels 0 to their largest)."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(5)
    cases = [
        (np.full((2, 3), 0.25), np.array([0, 1]), np.array([0, 0, 1])),
        (rng.random((4, 6)), np.array([0, -1, 1, 1]), np.array([0, 1, -1, 1, 2, 2])),
        (rng.random((3, 5)), np.array([0, 0, 0]), np.array([-1, 0, 0, 1, 1])),
    ]
    grade(lambda a, t, c: _as_numpy(fn(a, t, c)), _reference_pi, cases, name="cross_pi")
