"""Exercise graders of the FDRL-weighting chapter: :func:`check_policy_inconsistency` (against
:func:`method.policy_inconsistency`) and :func:`check_combined_weights` (against
:func:`method.combined_weights`)."""

from __future__ import annotations

import numpy as np
import torch

from replib.core.exercises import grade

from .method import combined_weights, policy_inconsistency

__all__ = ["check_policy_inconsistency", "check_combined_weights"]


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def _reference_inconsistency(pi, action):
    pi, action = torch.as_tensor(pi, dtype=torch.float64), torch.as_tensor(action, dtype=torch.float64)
    return _as_numpy(policy_inconsistency(pi, action, torch.ones(action.shape[:-1], dtype=torch.float64)))


def check_policy_inconsistency(fn) -> None:
    """Grade ``fn(pi, action)``, which returns a client's policy inconsistency, given arrays of the
    policy's actions and the data's actions of shape (N, |A|) (one client, one number) or (K, N,
    |A|) (K clients, one number each); the action dimension is 1 or 2 in the cases."""
    rng = np.random.default_rng(11)
    cases = [(np.array([[1.0], [0.0]]), np.array([[0.0], [2.0]])),
             (np.zeros((3, 1)), np.zeros((3, 1))),
             (rng.normal(size=(5, 2)), rng.normal(size=(5, 2))),
             (rng.normal(size=(3, 4, 1)), rng.normal(size=(3, 4, 1)))]
    grade(lambda p, a: _as_numpy(fn(p, a)), _reference_inconsistency, cases, name="policy_inconsistency")


def _reference_weights(j, pi_inc):
    return _as_numpy(combined_weights(torch.as_tensor(j, dtype=torch.float64),
                                      torch.as_tensor(pi_inc, dtype=torch.float64)))


def check_combined_weights(fn) -> None:
    """Grade ``fn(j, pi_inc)``, which returns the server weights of K clients (they sum to 1) given
    their Q-value scores and policy inconsistencies (1-D arrays of length K), at temperature 1."""
    rng = np.random.default_rng(5)
    cases = [(np.array([-10.0, -20.0, -30.0]), np.array([0.1, 0.2, 0.6])),
             (np.array([-5.0, -6.0]), np.array([1.5, 0.1])),
             (np.array([-50.0, -1.0, -20.0, -8.0]), np.array([0.3, 0.9, 0.2, 0.5])),
             (-rng.uniform(1, 40, 6), rng.uniform(0.05, 1.5, 6))]
    grade(lambda j, p: _as_numpy(fn(j, p)), _reference_weights, cases, name="combined_weights")
