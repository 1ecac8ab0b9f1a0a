"""Exercise graders of the SoT chapter: :func:`check_unmask_schedule` (against
:func:`method.unmask_schedule`) and :func:`check_count_legs` (against :func:`task.count_legs`)."""

from __future__ import annotations

import numpy as np

from .method import unmask_schedule
from .task import count_legs, render_states, sample_table

__all__ = ["check_unmask_schedule", "check_count_legs"]


def check_unmask_schedule(fn) -> None:
    """Grade the unmasking-schedule exercise: ``fn(n_tokens, rounds)`` returns the list of how many
    tokens each round reveals. Compared with the book's reference on small and uneven cases; the
    first case that differs or raises is named."""
    from replib.core.exercises import grade

    cases = [(16, 8), (16, 1), (16, 3), (9, 4), (5, 5), (7, 2)]
    grade(lambda n, r: list(fn(n, r)), unmask_schedule, cases, name="unmask_schedule")


def check_count_legs(fn) -> None:
    """Grade the leg-counting exercise: ``fn(img)`` returns the number of legs of an (8, 8) boolean
    image. Compared with the book's parser on generated tables, broken ones and an empty canvas; the
    first case that differs or raises is named."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(11)
    tables = [render_states(sample_table(rng, k))[-1] for k in (2, 3, 3)]
    broken = tables[1].copy()
    broken[5, :] = True  # a crossbar joins the legs
    detached = tables[0].copy()
    detached[:, :] = False
    detached[4:, 3] = True  # a floating leg and no top
    cases = [(t,) for t in tables] + [(broken,), (detached,), (np.zeros((8, 8), bool),)]
    grade(lambda img: int(fn(img)), count_legs, cases, name="count_legs")
