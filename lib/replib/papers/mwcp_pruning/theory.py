"""The guarantee (Lemma 3.4): the monotone shift (Eq. 27, in the modular form the standard theorem
needs), the exhaustive optimum of tiny instances and the greedy-vs-optimum check."""

from __future__ import annotations

import itertools

import numpy as np

from .method import greedy_select, objective
from .task import random_instance

__all__ = [
    "monotone_shift",
    "shifted_objective",
    "exhaustive_optimum",
    "greedy_guarantee_check",
]


def monotone_shift(w, A) -> float:
    """Smallest per-element (modular) shift c >= 0 making every marginal non-negative:
    c = max(0, max_x (sum_{j != x} |min(a_xj, 0)| - w_x)).

    Then Delta_c(x | S) = Delta(x | S) + c >= w_x - sum_j |a_xj| + c >= 0 for every S, so
    F_c(S) = F(S) + c |S| is normalised and monotone, and submodular when a <= 0 (Lemma 3.4 with the
    shift of Eq. 27 in modular form; see the package notes)."""
    A = np.array(A, dtype=float)
    np.fill_diagonal(A, 0.0)
    penalty = -np.minimum(A, 0.0).sum(axis=1)
    return float(max(0.0, np.max(penalty - np.asarray(w, dtype=float))))


def shifted_objective(S, w, A, shift: float) -> float:
    """F_c(S) = F(S) + c |S| (Eq. 3 plus the modular shift of :func:`monotone_shift`); F_c(empty) = 0.
    At a fixed size |S| = b it differs from F by the constant c b."""
    return objective(S, w, A) + float(shift) * len(np.atleast_1d(np.asarray(S)))


def exhaustive_optimum(w, A, b: int):
    """max_{|S| = b} F(S) (Eq. 3) by enumerating all C(n, b) subsets (vectorised; tiny n only).
    Returns ``(S_star, F_star)`` with the first maximiser in lexicographic order."""
    w = np.asarray(w, dtype=float)
    A = np.asarray(A, dtype=float)
    combos = np.array(list(itertools.combinations(range(w.size), int(b))), dtype=np.int64)
    if combos.size == 0:
        return np.empty(0, np.int64), 0.0
    F = w[combos].sum(axis=1)
    for p, q in itertools.combinations(range(int(b)), 2):
        F += A[combos[:, p], combos[:, q]]
    k = int(np.argmax(F))
    return combos[k], float(F[k])


def greedy_guarantee_check(
    rng: np.random.Generator, instances: int = 200, n: int = 12, b: int = 4, alpha: float = 1.0
) -> dict:
    """Greedy (Eq. 8) vs exhaustive optimum on ``instances`` random tiny instances
    (:func:`random_instance`).

    Per instance: ``ratio`` = F_c(S_greedy) / F_c(S*) on the shifted, normalised objective
    (:func:`monotone_shift`; Lemma 3.4 promises >= 1 - 1/e) and ``gap`` = (F* - F_greedy) / |F*| on the
    unshifted Eq. 3; also ``f_greedy``, ``f_opt``, ``shift``. Scalars ``min_ratio`` (claim c4a) and
    ``mean_gap`` (claim c4b)."""
    out = {k: np.empty(instances) for k in ("ratio", "gap", "f_greedy", "f_opt", "shift")}
    for k in range(instances):
        w, A = random_instance(rng, n, alpha)
        S_g = greedy_select(w, b, A=A).order
        S_star, f_opt = exhaustive_optimum(w, A, b)
        f_g = objective(S_g, w, A)
        c = monotone_shift(w, A)
        out["ratio"][k] = shifted_objective(S_g, w, A, c) / shifted_objective(S_star, w, A, c)
        out["gap"][k] = (f_opt - f_g) / abs(f_opt) if f_opt != 0 else 0.0
        out["f_greedy"][k], out["f_opt"][k], out["shift"][k] = f_g, f_opt, c
    out["min_ratio"] = float(out["ratio"].min())
    out["mean_gap"] = float(out["gap"].mean())
    return out
