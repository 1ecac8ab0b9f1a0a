"""OLP-Router, exercise graders."""

from __future__ import annotations

from .method import action_column, knapsack_price_step

__all__ = [
    "check_kv_ramp",
    "check_price_step",
]


def _kv_ramp_reference(s, o_hat, tau, T):
    """The KV part a^M of :func:`action_column`."""
    return action_column(s, o_hat, tau, T)[1]


def check_kv_ramp(fn) -> None:
    """Grade the KV-ramp exercise: ``fn(s, o_hat, tau, T)`` is called on hand-made cases and
    compared with the book's reference; the first case that differs or raises is named."""
    from replib.core.exercises import grade

    cases = [(5, 4, 3, 100), (0, 1, 1, 10), (80, 100, 950, 1000), (12, 7, 10, 10), (3, 50, 1, 20)]
    grade(fn, _kv_ramp_reference, cases, name="kv_ramp")


def check_price_step(fn) -> None:
    """Grade the price-update exercise: ``fn(p, a, x, d, eta)`` returns the next dual prices; it
    is compared with the book's reference on hand-made cases, and the first case that differs or raises
    is named."""
    from replib.core.exercises import grade

    cases = [
        (0.0, 1.0, 1, 0.25, 0.1),
        (0.0, 1.0, 0, 0.25, 0.1),
        (0.5, 1.2, 1, 0.25, 0.05),
        (0.01, 0.7, 0, 0.25, 0.1),
        (0.3, 1.5, 0, 0.2, 0.5),
    ]
    grade(fn, knapsack_price_step, cases, name="price_step")
