"""Exercise graders of the HyperTrack chapter: :func:`check_click_match` (against the kit's click
rule in :func:`method.step_match`), :func:`check_goal_progress` (against
:func:`method.episode_metrics`) and :func:`check_zero_signal_share` (against
:func:`theory.zero_signal_share`)."""

from __future__ import annotations

import numpy as np

from .method import enlarge_box, episode_metrics, inside_box
from .theory import zero_signal_share

__all__ = ["check_click_match", "check_goal_progress", "check_zero_signal_share"]


def _click_reference(point, box):
    return inside_box(point, enlarge_box(box)).astype(float)


def check_click_match(fn) -> None:
    """Grade ``fn(point, box)``, which returns the exact match (1.0 or 0.0) of each click for arrays
    of points (n, 2) and boxes (n, 4: cx, cy, w, h), under the evaluation kit's rule for clicks
    with a box.
    The cases include points just inside and just outside the enlarged box, and on its edge."""
    from replib.core.exercises import grade

    box = np.array([[0.5, 0.5, 0.2, 0.1]])
    cases = [
        (np.array([[0.5, 0.5]]), box),
        (np.array([[0.61, 0.5]]), box),  # outside the box, inside the enlarged box
        (np.array([[0.63, 0.5]]), box),
        (np.array([[0.5, 0.559]]), box),
        (np.array([[0.5, 0.561]]), box),
        (np.array([[0.2, 0.3], [0.9, 0.9]]), np.array([[0.25, 0.3, 0.1, 0.05], [0.5, 0.5, 0.2, 0.2]])),
    ]
    grade(lambda p, b: np.asarray(fn(p, b), dtype=float), _click_reference, cases, name="click_match")


def _progress_reference(em):
    return float(episode_metrics(np.asarray(em, dtype=bool), np.zeros(len(em)))["goal_progress"][0])


def check_goal_progress(fn) -> None:
    """Grade ``fn(em)``, which returns the goal progress of one episode, for a list of per-step exact
    matches in step order."""
    from replib.core.exercises import grade

    cases = [([True, True, True],), ([False, True, True],), ([True, False, True, True],),
             ([True, True, True, True, False],), ([True] * 6 + [False],), ([False],)]
    grade(lambda em: float(fn(list(em))), _progress_reference, cases, name="goal_progress")


def check_zero_signal_share(fn) -> None:
    """Grade ``fn(p, group_size)``, which returns the probability that a group of binary rewards
    gives no learning signal, for success probability ``p`` per sample."""
    from replib.core.exercises import grade

    cases = [(0.5, 2), (0.9, 16), (0.1, 16), (0.0, 4), (1.0, 8), (0.3, 1)]
    grade(lambda p, g: float(fn(p, g)), lambda p, g: float(zero_signal_share(p, g)), cases,
          name="zero_signal_share")
