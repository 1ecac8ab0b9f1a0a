"""Helpers of the theory notebook: the entropy of a quantised Gaussian pitch, the mixture-entropy
curve and its peak, DPO on a categorical policy over a few outcomes, and TDSC's temperatures.

Contents: :func:`quantised_gaussian_entropy`, :func:`gaussian_entropy_approx`,
:func:`mixture_curve`, :func:`peak_alpha`, :func:`finite_difference`, :func:`categorical_dpo`,
:func:`tempered`, :func:`pass_probability`.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom

from .method import entropy, mixture_entropy, mixture_entropy_slope

__all__ = ["quantised_gaussian_entropy", "gaussian_entropy_approx", "mixture_curve", "peak_alpha",
           "finite_difference", "categorical_dpo", "tempered", "pass_probability"]


def quantised_gaussian_entropy(sigma: float, delta: float, n: int, seed: int = 0) -> float:
    """The plug-in entropy (bits) of ``n`` draws of N(0, sigma^2) rounded to a grid of step ``delta``."""
    draws = np.random.default_rng(seed).normal(0.0, sigma, size=n)
    _, counts = np.unique(np.round(draws / delta), return_counts=True)
    return entropy(counts / n)


def gaussian_entropy_approx(sigma: float, delta: float) -> float:
    """H(b) ~ log2(sigma / delta) + 0.5 log2(2 pi e): the differential entropy of the Gaussian minus
    log2 of the bin width (good once sigma is a few bins wide)."""
    return float(np.log2(sigma / delta) + 0.5 * np.log2(2 * np.pi * np.e))


def mixture_curve(p_real, p_syn, alphas) -> np.ndarray:
    """H(p_alpha) at every alpha of ``alphas``."""
    return np.array([mixture_entropy(p_real, p_syn, a) for a in alphas])


def peak_alpha(p_real, p_syn) -> float:
    """alpha* = argmax H(p_alpha): the root of the corrected slope in (0, 1) when H'(0) > 0 > H'(1),
    else the end where H is larger (concavity makes the curve monotone then)."""
    eps = 1e-9
    left, right = mixture_entropy_slope(p_real, p_syn, eps), mixture_entropy_slope(p_real, p_syn, 1 - eps)
    if left > 0 > right:
        return float(brentq(lambda a: mixture_entropy_slope(p_real, p_syn, a), eps, 1 - eps, xtol=1e-10))
    return 0.0 if left <= 0 else 1.0


def finite_difference(p_real, p_syn, alpha: float, h: float = 1e-5) -> float:
    """(H(p_{alpha+h}) - H(p_{alpha-h})) / 2h, the check of the analytic slope."""
    return (mixture_entropy(p_real, p_syn, alpha + h) - mixture_entropy(p_real, p_syn, alpha - h)) / (2 * h)


def categorical_dpo(pi_ref: np.ndarray, pair_sets: dict[str, tuple[int, int]], weights: dict[str, float],
                    beta: float, steps: int, lr: float) -> np.ndarray:
    """Gradient descent on sum_k lambda_k L_DPO(T_k) for a softmax policy over a few outcomes, one
    (winner, loser) pair per set, starting at pi_ref. For a categorical policy log pi(w) - log pi(l)
    = theta_w - theta_l, so the gradient of -log sigma(beta Delta) is -beta sigma(-beta Delta) (e_w -
    e_l). Returns the policy after every step, shape (steps + 1, outcomes)."""
    theta = np.log(np.asarray(pi_ref, float))
    ref = theta.copy()
    history = [np.exp(theta) / np.exp(theta).sum()]
    for _ in range(steps):
        grad = np.zeros_like(theta)
        for name, (win, lose) in pair_sets.items():
            delta = (theta[win] - ref[win]) - (theta[lose] - ref[lose])
            g = -beta / (1 + np.exp(beta * delta))
            grad[win] += weights.get(name, 0.0) * g
            grad[lose] -= weights.get(name, 0.0) * g
        theta = theta - lr * grad
        history.append(np.exp(theta - theta.max()) / np.exp(theta - theta.max()).sum())
    return np.array(history)


def tempered(p: np.ndarray, temperature: float) -> np.ndarray:
    """pi^(T) proportional to pi^(1/T) (TDSC's step 1), renormalised."""
    logp = np.log(np.asarray(p, float)) / temperature
    q = np.exp(logp - logp.max())
    return q / q.sum()


def pass_probability(error_rate: float, n: int, tau: float = 0.4) -> float:
    """P(errors / n < tau) for errors ~ Binomial(n, error_rate): the chance that a candidate of n
    phonemes, each wrong independently with probability ``error_rate``, passes the judge's WER test."""
    return float(binom.cdf(np.ceil(tau * n) - 1, n, error_rate))
