"""Exercise graders of the implementation notebook."""

from __future__ import annotations

import numpy as np

from .method import bayes_response

__all__ = [
    "check_elementwise_majority",
    "check_median_bayes",
]

# --------------------------------------------------------------------------------------------
# Exercise graders
# --------------------------------------------------------------------------------------------


def _majority_reference(latents):
    return bayes_response("sets", latents)


def check_elementwise_majority(fn) -> None:
    """Grade the Hamming-loss Bayes-decision exercise: ``fn(latents)``, latents a bool array
    (N, K) of N sampled sets, returns ``(answer, risk)``, answer a bool array (K,). Compared with the
    book's reference on hand-made samples; where two answers are equally good, either is accepted, and
    the risk must match. The first case that differs or raises is named."""
    from replib.core.exercises import grade

    def canonical(f):
        def wrapped(latents):
            ans, risk = f(latents)
            if np.shape(ans) == (latents.shape[1],):
                ans = np.array(ans, dtype=bool)
                ans[2 * latents.sum(axis=0) == latents.shape[0]] = False  # tied: either is optimal
            return ans, float(risk)

        return wrapped

    rng = np.random.default_rng(11)
    cases = [(rng.random((n, k)) < p,) for n, k, p in [(5, 3, 0.5), (20, 10, 0.6), (7, 6, 0.3),
                                                       (1, 4, 0.5)]]
    tie = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1], [0, 1, 1, 0]], dtype=bool)  # q_B = q_C = 1/2
    cases += [(tie,), (np.ones((4, 5), dtype=bool),)]
    grade(canonical(fn), canonical(_majority_reference), cases, name="elementwise_majority")


def _median_reference(values):
    return bayes_response("ratings", np.asarray(values, dtype=np.int64))


def check_median_bayes(fn) -> None:
    """Grade the absolute-loss Bayes-decision exercise: ``fn(values)``, an int array of sampled
    ratings, returns ``(answer, risk)`` with an integer answer. Compared with the book's reference on
    hand-made samples; every equally good integer answer is accepted, and the risk must match. The
    first case that differs or raises is named."""
    from replib.core.exercises import grade

    def canonical(f):
        def wrapped(values):
            ans, risk = f(values)
            v = np.asarray(values, dtype=float)
            lower, best = _median_reference(values)
            try:
                a = float(ans)
                if a == round(a) and abs(np.abs(v - a).mean() - best) < 1e-9:
                    ans = lower  # every integer minimiser is equally Bayes-optimal
            except (TypeError, ValueError):
                pass
            return ans, float(risk)

        return wrapped

    rng = np.random.default_rng(12)
    cases = [
        (np.array([7]),),
        (np.array([5, 7, 7, 8, 10]),),
        (np.array([2, 9]),),  # even: any of 2..9
        (np.array([0, 0, 0, 10, 10]),),  # mean 4 is not optimal
        (np.array([4, 4, 5, 5, 6, 6]),),
        (rng.integers(0, 11, size=20),),
        (rng.integers(0, 11, size=9),),
    ]
    grade(canonical(fn), canonical(_median_reference), cases, name="median_bayes")
