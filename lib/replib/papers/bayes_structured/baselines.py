"""Baselines: the sample-restricted MBR decoder (the medoid), the string-level majority vote, and
the sample-based uncertainty scores (predictive entropy, semantic entropy, distinct answers)."""

from __future__ import annotations

import numpy as np

from .method import TASKS, _check_task, _total_distance
from .task import EOS, answer_tokens, parse

__all__ = [
    "mbr_medoid",
    "string_majority",
    "predictive_entropy",
    "semantic_entropy",
    "n_distinct",
]

# --------------------------------------------------------------------------------------------
# Baseline decoders: the medoid and the string-level vote
# --------------------------------------------------------------------------------------------


def mbr_medoid(task: str, latents):
    """Sample-based MBR (the medoid): argmin over the *samples* l_j of (1/N) sum_i d_T(l_j, l_i)
    (ties -> first sample). Returns ``(answer, its mean distance)``; ``(None, nan)`` without samples."""
    _check_task(task)
    n = len(latents)
    if n == 0:
        return None, float("nan")
    totals = [_total_distance(task, latents[j], latents) for j in range(n)]
    j = int(np.argmin(totals))
    ans = np.asarray(latents[j], dtype=bool).copy() if task == "sets" else int(latents[j])
    return ans, float(totals[j] / n)


def string_majority(answers, task: str | None = None, phi=None) -> list[int] | None:
    """String-level majority vote: the most frequent exact token sequence (up to and incl. the first
    ``<eos>``) among the parsable samples (ties -> first occurring); the caller parses it.

    Parsable means ``phi(answer)`` is not None if ``phi`` is given, else :func:`parse` succeeds for
    ``task``; with ``task=None`` for at least one task. Returns None if no sample is parsable."""
    tasks = TASKS if task is None else (task,)
    counts: dict[tuple, int] = {}
    for a in answers:
        toks = answer_tokens(a)
        if toks is None or (phi(a) is None if phi else all(parse(t, a) is None for t in tasks)):
            continue
        key = tuple(toks) + (EOS,)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return list(next(k for k, c in counts.items() if c == best))  # dicts keep first occurrence



# --------------------------------------------------------------------------------------------
# Sample-based uncertainty baselines
# --------------------------------------------------------------------------------------------


def predictive_entropy(sample_logprobs) -> np.ndarray | float:
    """Monte-Carlo predictive entropy over strings: -(1/N) sum_i log p(s_i) of N sampled sequences
    (last axis)."""
    lp = np.asarray(sample_logprobs, dtype=float)
    out = -lp.mean(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def _latent_counts(task: str, latents) -> np.ndarray:
    _check_task(task)
    if len(latents) == 0:
        return np.zeros(0, dtype=np.int64)
    lat = np.asarray(latents, dtype=bool if task == "sets" else np.int64)
    return np.unique(lat, axis=0, return_counts=True)[1]


def semantic_entropy(task: str, latents) -> float:
    """Discrete semantic entropy: -sum_l p_hat(l) log p_hat(l) over the distinct parsed latents
    (nan without samples)."""
    c = _latent_counts(task, latents)
    if c.size == 0:
        return float("nan")
    p = c / c.sum()
    return float(-(p * np.log(p)).sum())


def n_distinct(task: str, latents) -> int:
    """Number of distinct parsed latents."""
    return int(_latent_counts(task, latents).size)
