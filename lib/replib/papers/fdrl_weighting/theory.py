"""Helpers of the theory notebook: the offline bandit that shows why a high Q-value is not to be
trusted where the policy leaves its data (:func:`bandit_data`, :func:`fit_critic`,
:func:`greedy_sweep`), and the closed form of the proximity-regularised local optimum
(:func:`proximal_optimum`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["true_reward", "bandit_data", "fit_critic", "greedy_sweep", "proximal_optimum"]


def true_reward(a):
    """The bandit's true expected reward r(a) = 1 - (a - 0.5)^2 on actions a in [-2, 2]."""
    return 1.0 - (np.asarray(a) - 0.5) ** 2


def bandit_data(n: int, behaviour_mean: float, behaviour_std: float, noise: float, seed: int):
    """An offline data set of a one-step task: actions from N(behaviour_mean, behaviour_std^2)
    (clipped to [-2, 2]) and noisy rewards r(a) + N(0, noise^2)."""
    rng = np.random.default_rng(seed)
    a = np.clip(rng.normal(behaviour_mean, behaviour_std, n), -2, 2)
    return a, true_reward(a) + noise * rng.standard_normal(n)


def fit_critic(actions, rewards, degree: int = 5):
    """A least-squares polynomial critic Q^(a) of the given degree (a stand-in for a neural critic:
    accurate where data are, unconstrained elsewhere)."""
    return np.polynomial.Polynomial.fit(actions, rewards, degree)


def greedy_sweep(critic, actions, lambdas) -> pd.DataFrame:
    """For each lambda the action maximising lambda Q^(a) - (a - mean data action)^2 on a grid of
    [-2, 2] (TD3+BC's trade-off in one dimension), with its critic value Q^, true value r, the
    over-estimate Q^ - r and its inconsistency PI = mean over the data of (a* - a_i)^2."""
    grid = np.linspace(-2, 2, 2001)
    centre = float(np.mean(actions))
    rows = []
    for lam in lambdas:
        best = grid[np.argmax(lam * critic(grid) - (grid - centre) ** 2)]
        rows.append({"lambda": lam, "action": best, "q_hat": float(critic(best)), "true": float(true_reward(best)),
                     "overestimate": float(critic(best) - true_reward(best)),
                     "inconsistency": float(np.mean((best - actions) ** 2))})
    return pd.DataFrame(rows)


def proximal_optimum(local, global_, alpha0):
    """Minimiser of (x - local)^2 + alpha0 (x - global)^2: (local + alpha0 global) / (1 + alpha0)."""
    return (np.asarray(local) + alpha0 * np.asarray(global_)) / (1.0 + alpha0)
