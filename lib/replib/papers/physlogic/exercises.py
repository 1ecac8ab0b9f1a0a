"""Exercise graders of the PhysLogic chapter: :func:`check_causal_connection` (against
:func:`method.causal_connection`) and :func:`check_inferential_progress` (against
:func:`method.inferential_progress`)."""

from __future__ import annotations

import numpy as np

from .method import causal_connection, inferential_progress

__all__ = ["check_causal_connection", "check_inferential_progress"]


def check_causal_connection(fn) -> None:
    """Grade an exercise answer ``fn(pbar, weights)``, which returns the causal connection O of the
    positional centroids of K nexuses and their weights: the cases include ties, a single nexus,
    unequal weights and a reversed order."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(11)
    cases = [
        (np.array([1.0, 2.0, 3.0]), np.ones(3)),
        (np.array([3.0, 2.0, 1.0]), np.ones(3)),
        (np.array([1.0, 3.0, 2.0]), np.array([1.0, 1.0, 2.0])),
        (np.array([2.0, 2.0]), np.array([1.0, 2.0])),
        (np.array([1.5]), np.array([2.0])),
        (rng.random(5) * 4, 1.0 + rng.integers(0, 3, 5).astype(float)),
    ]
    grade(lambda p, w: float(fn(p, w)), causal_connection, cases, name="causal_connection")


def check_inferential_progress(fn) -> None:
    """Grade an exercise answer ``fn(M)``, which returns the inferential progress P of a similarity
    matrix M (nexuses by sentences): the cases include a single sentence, a repeated sentence, a
    sentence that matches nothing and negative similarities."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(12)
    cases = [
        (np.eye(3),),
        (np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),),
        (np.array([[0.9], [0.1]]),),
        (np.array([[1.0, 0.0, 0.2], [0.0, 0.0, 0.9]]),),
        (np.array([[0.5, -0.5], [0.5, 0.5]]),),
        (rng.random((3, 5)),),
    ]
    grade(lambda M: float(fn(M)), inferential_progress, cases, name="inferential_progress")
