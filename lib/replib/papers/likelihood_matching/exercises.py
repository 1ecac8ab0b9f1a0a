"""LM, exercise graders: :func:`check_tweedie_moments`, :func:`check_sliced_w2` (against the
reference implementations of :mod:`.method` and :mod:`.task`)."""

from __future__ import annotations

import numpy as np

from .method import transition, tweedie_moments
from .task import projection_directions, sliced_w2

__all__ = [
    "check_tweedie_moments", "check_sliced_w2",
]


def _tweedie_reference(x, score, hess, a, sigma2):
    return tweedie_moments(np.asarray(x, float), np.asarray(score, float), np.asarray(hess, float), a, sigma2)


def check_tweedie_moments(fn) -> None:
    """Grade ``fn(x, score, hess, a, sigma2)``, which returns the pair (mean, covariance) of the
    reverse transition by second-order Tweedie (section 3) for one point x (d,), its score (d,) and
    Hessian (d, d): dimensions 1 to 3, small and large steps, a zero variance."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(3)
    cases = []
    for d, (t, s) in [(1, (0.3, 0.2)), (2, (0.5, 0.1)), (2, (0.9, 0.0)), (3, (0.2, 0.15))]:
        A = rng.standard_normal((d, d))
        a, sig2 = transition(t, s)
        cases.append((rng.standard_normal(d), rng.standard_normal(d), -(A @ A.T) - np.eye(d), float(a), float(sig2)))
    grade(fn, _tweedie_reference, cases, name="tweedie_moments")


def check_sliced_w2(fn) -> None:
    """Grade ``fn(X, Y, directions)``, which returns the sliced Wasserstein-2 distance (a float) of two
    equal-size point sets along the given unit directions (n_proj, d): 2 and 3 dimensions, few and
    many directions, and two identical sets."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(5)
    cases = []
    for n, d, k in [(50, 2, 8), (100, 2, 64), (30, 3, 16)]:
        X = rng.standard_normal((n, d))
        cases.append((X, X * 1.5 + 0.3, projection_directions(k, d, seed=k)))
    cases.append((cases[0][0], cases[0][0].copy(), projection_directions(4, 2, 1)))
    grade(fn, lambda X, Y, V: sliced_w2(X, Y, directions=V), cases, name="sliced_w2")
