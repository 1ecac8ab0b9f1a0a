"""The method: the Bayes-optimal response in latent space and its Bayesian risk (algorithm steps 3
and 4), under the task distance d_T of each of the three latent spaces the book uses: sets of
N_ITEMS items (Hamming), ratings 0..MAX_RATING (absolute loss), N_CLASSES labels (0-1 loss).
Steps 1 and 2 (sampling, parsing with phi) need the model and the toy's token format; they are
:func:`replib.models.causal_lm.sample` and :func:`.task.parsed_latents`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "N_ITEMS",
    "N_CLASSES",
    "MAX_RATING",
    "TASKS",
    "distance",
    "expected_distance",
    "bayes_response",
    "bayes_by_search",
    "latent_space",
]

# --------------------------------------------------------------------------------------------
# The three latent spaces (named by task), and task distances and decision rules
# --------------------------------------------------------------------------------------------

N_ITEMS = 10
N_CLASSES = 4
MAX_RATING = 10
TASKS = ("sets", "ratings", "labels")


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")


def distance(task: str, a, b) -> float:
    """d_T: Hamming |A xor B| (sets), |a - b| (ratings), 0-1 (labels)."""
    _check_task(task)
    if task == "sets":
        return float(np.sum(np.asarray(a, dtype=bool) != np.asarray(b, dtype=bool)))
    if task == "ratings":
        return float(abs(int(a) - int(b)))
    return float(int(a) != int(b))


def _total_distance(task: str, answer, latents) -> int:
    """sum_i d_T(answer, l_i) as an exact integer."""
    if task == "sets":
        return int(np.sum(np.asarray(latents, dtype=bool) != np.asarray(answer, dtype=bool)[None, :]))
    lat = np.asarray(latents, dtype=np.int64)
    if task == "ratings":
        return int(np.abs(lat - int(answer)).sum())
    return int(np.sum(lat != int(answer)))


def expected_distance(task: str, answer, latents) -> float:
    """The expected loss under the empirical belief, the objective of step 3: (1/N) sum_i
    d_T(answer, l_i) (nan if N = 0)."""
    _check_task(task)
    n = len(latents)
    return float(_total_distance(task, answer, latents) / n) if n else float("nan")


def bayes_response(task: str, latents):
    """Algorithm steps 3 and 4: the Bayes-optimal response l_Bayes = argmin_l (1/N) sum_i
    d_T(l, l_i) over the whole latent space, in closed form (textbook decision theory; the paper's
    accessible text does not give the formulas), and the Bayesian risk U = the minimal value.

    * sets / Hamming: element-wise majority {e: q_e > 1/2}, q_e = share of samples containing e;
      U = sum_e min(q_e, 1 - q_e). (q_e = 1/2: e excluded; including it is equally optimal.)
    * ratings / absolute loss: the lower median; U = mean |l_i - median|. (Even N: every integer
      between the two middle values is optimal.)
    * labels / 0-1: the mode (ties -> smallest class id); U = 1 - max_c p_hat(c).
    Returns ``(answer, risk)``; ``(None, nan)`` when no sample was parsable."""
    _check_task(task)
    n = len(latents)
    if n == 0:
        return None, float("nan")
    if task == "sets":
        lat = np.asarray(latents, dtype=bool)
        counts = lat.sum(axis=0)
        answer = 2 * counts > n
        q = counts / n
        return answer, float(np.minimum(q, 1.0 - q).sum())
    lat = np.asarray(latents, dtype=np.int64)
    if task == "ratings":
        med = int(np.sort(lat)[(n - 1) // 2])
        return med, float(np.abs(lat - med).mean())
    counts = np.bincount(lat, minlength=N_CLASSES)
    mode = int(np.argmax(counts))
    return mode, float(1.0 - counts[mode] / n)


def latent_space(task: str, n_items: int = N_ITEMS):
    """All latents of a task, the space L that the argmin of step 3 runs over: the 2^n_items sets
    as a bool matrix (row r = the bits of r, item i = bit i), ratings 0..10, classes 0..3."""
    _check_task(task)
    if task == "sets":
        r = np.arange(2**n_items)
        return ((r[:, None] >> np.arange(n_items)[None, :]) & 1).astype(bool)
    return np.arange(MAX_RATING + 1) if task == "ratings" else np.arange(N_CLASSES)


def bayes_by_search(task: str, latents):
    """l_Bayes by brute force over the whole latent space (all 2^K sets, ratings 0..10, 4 classes),
    with exact integer sums of distances. Ties: the set with the fewest items (unique: the tied items
    left out), the smallest rating, the smallest class id - the conventions of :func:`bayes_response`.
    Returns ``(answer, risk)`` (``(None, nan)`` without samples)."""
    _check_task(task)
    n = len(latents)
    if n == 0:
        return None, float("nan")
    if task == "sets":
        lat = np.asarray(latents, dtype=bool)
        space = latent_space("sets", lat.shape[1])
        # total Hamming distance of every candidate: sum_e (x_e ? N - c_e : c_e)
        counts = lat.sum(axis=0)
        totals = np.where(space, n - counts[None, :], counts[None, :]).sum(axis=1)
        best = np.flatnonzero(totals == totals.min())
        pick = best[np.argmin(space[best].sum(axis=1))]
        return space[pick].copy(), float(totals[pick] / n)
    space = latent_space(task)
    totals = np.array([_total_distance(task, v, latents) for v in space])
    pick = int(np.argmin(totals))
    return int(space[pick]), float(totals[pick] / n)

