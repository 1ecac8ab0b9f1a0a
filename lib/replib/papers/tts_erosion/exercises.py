"""Exercise graders of the tts_erosion chapter: :func:`check_mixture_entropy_slope` (against
:func:`method.mixture_entropy_slope`), :func:`check_dgsa_weights` (against
:func:`method.dgsa_weights`), :func:`check_prosodic_entropy` (against
:func:`task.prosodic_entropy`) and :func:`check_self_critique` (against
:func:`method.self_critique`)."""

from __future__ import annotations

import numpy as np

from .method import dgsa_weights, mixture_entropy_slope, self_critique
from .task import SIL, prosodic_entropy, speech_token

__all__ = ["check_mixture_entropy_slope", "check_dgsa_weights", "check_prosodic_entropy", "check_self_critique"]


def check_mixture_entropy_slope(fn) -> None:
    """Grade the slope exercise: ``fn(p_real, p_syn, alpha)`` returns dH(p_alpha)/dalpha in bits.
    Compared with the book's reference on hand-made distributions (with and without tokens that one
    side lacks) at several alphas; the first case that differs or raises is named."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(5)
    a, b = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    gap_real, gap_syn = np.array([0.5, 0.5, 0.0]), np.array([0.2, 0.0, 0.8])
    cases = [(a, b, 0.3), (a, b, 0.9), (b, a, 0.5), (gap_real, gap_syn, 0.25), (gap_real, gap_syn, 0.75),
             (np.array([0.7, 0.3]), np.array([0.7, 0.3]), 0.4)]
    grade(lambda p, q, alpha: float(fn(p, q, alpha)), mixture_entropy_slope, cases, name="mixture_entropy_slope")


def check_dgsa_weights(fn) -> None:
    """Grade the schedule exercise: ``fn(alpha, alpha_star)`` returns (lambda_s, lambda_e).
    Compared with the book's reference below, at and above alpha_star, at the largest ratio and for a
    non-default alpha_star; the first case that differs or raises is named."""
    from replib.core.exercises import grade

    cases = [(0.2, 0.5), (0.5, 0.5), (0.8, 0.5), (1.0, 0.5), (0.65, 0.3), (0.1, 0.3)]
    grade(lambda alpha, star: tuple(float(x) for x in fn(alpha, star)), dgsa_weights, cases, name="dgsa_weights")


def check_prosodic_entropy(fn) -> None:
    """Grade the H_p exercise: ``fn(generations)``, a list of speech-token arrays (pauses
    included), returns the pooled token entropy in bits. Compared with the book's metric on
    hand-made utterances (one flat, one varied, pauses, an empty one); the first case that differs
    or raises is named."""
    from replib.core.exercises import grade

    flat = speech_token([1, 1, 2, 2], [3, 3, 3, 3])
    varied = speech_token([1, 1, 2, 5], [2, 4, 3, 6])
    paused = np.array([int(speech_token(1, 3)), SIL, int(speech_token(2, 3))])
    cases = [([flat],), ([flat, varied],), ([paused, flat],), ([varied, np.zeros(0, int)],)]
    grade(lambda g: float(fn(g)), prosodic_entropy, cases, name="prosodic_entropy")


def check_self_critique(fn) -> None:
    """Grade the judge exercise: ``fn(wer, rep, length, text_length)``, arrays over candidates,
    returns TDSC's verdicts C(y) as booleans. Compared with the book's judge at the paper's
    thresholds (two frames per text phoneme) on hand-made candidates: a clean one, one at each
    threshold's edge on either side, a loop, a too short and a too long one; the first case that
    differs or raises is named."""
    from replib.core.exercises import grade

    def reference(wer, rep, length, text_length):
        return self_critique(wer, rep, length, text_length)[0]

    def as_list(verdicts):
        return [bool(v) for v in np.asarray(verdicts)]

    cases = [(np.array([0.0]), np.array([0.0]), np.array([12]), np.array([6])),
             (np.array([0.39, 0.40, 0.41]), np.zeros(3), np.full(3, 10), np.full(3, 5)),
             (np.zeros(3), np.array([0.09, 0.10, 0.5]), np.full(3, 10), np.full(3, 5)),
             (np.zeros(4), np.zeros(4), np.array([4, 5, 20, 21]), np.full(4, 5)),
             (np.array([0.2, 0.6]), np.array([0.0, 0.0]), np.array([8, 8]), np.array([4, 7]))]
    grade(lambda *a: as_list(fn(*a)), lambda *a: as_list(reference(*a)), cases, name="self_critique")
