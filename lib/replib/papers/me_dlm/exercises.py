"""Exercise graders of the ME-DLM chapter: :func:`check_levenshtein`, :func:`check_step_schedule`,
:func:`check_apply_edits` (against the reference implementations of :mod:`.method`)."""

from __future__ import annotations

import numpy as np

from .method import DEL, EOS, apply_edits, levenshtein, step_schedule

__all__ = [
    "check_levenshtein",
    "check_step_schedule",
    "check_apply_edits",
]


def check_levenshtein(fn) -> None:
    """Grade ``fn(a, b)``, the edit distance between two sequences when replacing, deleting and
    inserting a token each cost one: empty, equal-length and different-length cases, small
    alphabets with many repeats."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(5)
    cases = [("", ""), ("abc", ""), ("", "ab"), ("kitten", "sitting"), ("2+2=5", "2+2=4"), ("abcd", "abd"),
             ("ab", "axyb"), ("flaw", "lawn")]
    cases += [(list(rng.integers(0, 3, size=rng.integers(0, 8))), list(rng.integers(0, 3, size=rng.integers(0, 8))))
              for _ in range(6)]
    grade(lambda a, b: int(fn(a, b)), levenshtein, cases, name="levenshtein")


def check_step_schedule(fn) -> None:
    """Grade ``fn(L, S)``, phase A's list of how many tokens each of the S passes commits over a canvas
    of L positions: divisible and non-divisible canvases, one pass, one token per pass, more passes
    than positions."""
    from replib.core.exercises import grade

    cases = [(11, 1), (11, 2), (11, 3), (11, 4), (11, 11), (512, 48), (12, 4), (5, 7)]
    grade(lambda L, S: list(fn(L, S)), step_schedule, cases, name="step_schedule")


def check_apply_edits(fn) -> None:
    """Grade ``fn(seq, r, g)``, the response after one edit pass given the token proposals ``r`` and
    the gap proposals ``g``: a replacement, a deletion, an insertion, a mix of the three, and an
    insertion before the final token."""
    from replib.core.exercises import grade

    cases = [([1, 2, 3, EOS], [1, 2, 4, EOS], [1, 2, 4, EOS]),
             ([1, 2, 3, EOS], [1, DEL, 3, EOS], [1, 2, 3, EOS]),
             ([1, 2, 3, EOS], [1, 2, 3, EOS], [1, 7, 3, EOS]),
             ([5, 5, EOS], [DEL, 6, EOS], [4, 5, 9]),
             ([EOS], [EOS], [3])]
    grade(lambda s, r, g: list(fn(s, r, g)), apply_edits, cases, name="apply_edits")
