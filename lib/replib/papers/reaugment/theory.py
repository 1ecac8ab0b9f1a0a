"""Helpers of the ReAugment theory notebook: a K-fold polynomial zoo
on a one-dimensional regression toy, the score-function (REINFORCE) and reparameterised gradient
estimators for a Gaussian policy, and the reward-shaping toy in two dimensions.

Contents: :func:`polynomial_zoo`, :func:`gradient_estimates`, :func:`toy_zoo_variance`,
:func:`shaped_reward`, :func:`reinforce_gaussian`.
"""

from __future__ import annotations

import numpy as np

from .method import fold_gap, kfold_assignment

__all__ = ["polynomial_zoo", "gradient_estimates", "toy_zoo_variance", "shaped_reward", "reinforce_gaussian"]


def polynomial_zoo(x, y, k: int, degree: int, ridge: float, rng: np.random.Generator) -> dict:
    """A K-fold zoo of ridge-regularised polynomial fits: member k is fitted on every point outside
    fold k. Returns ``errors`` (K, N) squared errors of every member on every point, ``folds``,
    ``variance`` (the zoo variance per point, population variance over members), ``out_of_fold``
    and ``in_fold`` (:func:`method.fold_gap`) and ``coefs`` (K, degree + 1)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    folds = kfold_assignment(len(x), k, rng)
    design = np.vander(x, degree + 1, increasing=True)
    coefs = []
    for member in range(k):
        keep = folds != member
        a = design[keep]
        coefs.append(np.linalg.solve(a.T @ a + ridge * np.eye(degree + 1), a.T @ y[keep]))
    coefs = np.array(coefs)
    errors = (design @ coefs.T - y[:, None]).T ** 2
    out_of_fold, in_fold = fold_gap(errors, folds)
    return {"errors": errors, "folds": folds, "variance": errors.var(axis=0), "out_of_fold": out_of_fold,
            "in_fold": in_fold, "coefs": coefs}


def gradient_estimates(mu: float, sigma: float, reward, n: int, batches: int, rng: np.random.Generator,
                       reward_grad=None) -> dict:
    """Monte-Carlo estimates of d/dmu E_{z ~ N(mu, sigma^2)}[r(z)] from ``batches`` batches of ``n``
    samples each: ``score`` = mean r(z) (z - mu) / sigma^2 (REINFORCE), ``baseline`` = the same with
    r replaced by r - mean_batch r, and (when ``reward_grad`` is given) ``reparam`` = mean r'(mu +
    sigma eps). Each value is an array of the batch estimates."""
    z = mu + sigma * rng.standard_normal((batches, n))
    r = reward(z)
    score = (z - mu) / sigma**2
    out = {"score": (r * score).mean(axis=1),
           "baseline": ((r - r.mean(axis=1, keepdims=True)) * score).mean(axis=1)}
    if reward_grad is not None:
        out["reparam"] = reward_grad(z).mean(axis=1)
    return out


def toy_zoo_variance(w) -> np.ndarray:
    """The 2-D toy's stand-in for the zoo-error variance at a generated point w (..., 2): it grows
    like |w|^4 away from the data at the origin, as the zoo's errors do on windows far from every
    training window, with a floor of 0.01."""
    w = np.asarray(w, dtype=np.float64)
    return 0.01 + 0.5 * (w**2).sum(axis=-1) ** 2


def shaped_reward(w, anchor, kind: str, lam: float, d0: float = 1.0, eps: float = 1e-4) -> np.ndarray:
    """The two reward forms on the 2-D toy: ``"unbounded"`` = Var(w) - lam ||w - anchor||^2 and
    ``"log"`` = log(Var(w) + eps) - lam ||w - anchor||^2 / d0 (the bounded form of the chapter),
    with Var = :func:`toy_zoo_variance`."""
    w = np.asarray(w, dtype=np.float64)
    distance = ((w - np.asarray(anchor, dtype=np.float64)) ** 2).sum(axis=-1)
    variance = toy_zoo_variance(w)
    if kind == "unbounded":
        return variance - lam * distance
    if kind == "log":
        return np.log(variance + eps) - lam * distance / d0
    raise ValueError(f"unknown reward kind {kind!r}; valid: unbounded, log")


def reinforce_gaussian(reward, mu0, sigma: float, steps: int, n: int, lr: float, rng: np.random.Generator) -> np.ndarray:
    """REINFORCE on the mean of a Gaussian policy N(mu, sigma^2 I) in 2-D: per step, n samples, the
    advantages (r - mean r) / std r (as in stage B), and mu += lr mean(A (z - mu) / sigma^2). Stops
    early when mu leaves the disc of radius 1e3 (the run-away). Returns the path of mu (<= steps + 1,
    2)."""
    mu = np.asarray(mu0, dtype=np.float64).copy()
    path = [mu.copy()]
    for _ in range(steps):
        z = mu + sigma * rng.standard_normal((n, mu.size))
        r = reward(z)
        a = (r - r.mean()) / (r.std() + 1e-8)
        mu = mu + lr * (a[:, None] * (z - mu) / sigma**2).mean(axis=0)
        path.append(mu.copy())
        if np.linalg.norm(mu) > 1e3:
            break
    return np.array(path)
