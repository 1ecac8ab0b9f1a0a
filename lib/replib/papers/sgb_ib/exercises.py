"""SGB-IB, exercise graders."""

from __future__ import annotations

import numpy as np

from .method import ball_mi_terms, merge_costs

__all__ = ["check_view_impurity", "check_relevance_cost"]


def _view_impurity_reference(P, labels):
    i_hat, i_x = ball_mi_terms(np.asarray(P, float), np.asarray(labels))
    return i_hat / i_x if i_x > 0 else 0.0


def _relevance_cost_reference(pb, p, pt, q):
    p, q = np.asarray(p, float), np.asarray(q, float)
    return float(merge_costs(pb, [p], np.array([pt]), [pt * q[None]], beta_inv=0.0)[0])


def check_view_impurity(fn) -> None:
    """Grade the impurity exercise: ``fn(P, labels)`` gets the rows p(y|x) of one ball's members in
    one view and their pseudo-labels, and returns that view's impurity; it is compared with the
    book's reference on hand-made balls, and the first case that differs or raises is named."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(3)
    random_ball = rng.dirichlet(np.ones(4), size=6)
    cases = [
        (np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]]), np.array([0, 1])),
        (np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]]), np.array([0, 0])),
        (np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.2, 0.8]]), np.array([0, 0, 1, 1])),
        (np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.9], [0.2, 0.8]]), np.array([0, 1, 0, 1])),
        (random_ball, np.array([0, 0, 1, 1, 2, 2])),
    ]
    grade(fn, _view_impurity_reference, cases, name="view_impurity")


def check_relevance_cost(fn) -> None:
    """Grade the merge-cost exercise: ``fn(pb, p, pt, q)`` returns the relevance lost in one view
    when an item of weight ``pb`` and distribution ``p`` is merged into a cluster of weight ``pt``
    and distribution ``q``; compared with the book's reference on hand-made cases."""
    from replib.core.exercises import grade

    cases = [
        (0.1, [0.5, 0.5], 0.3, [0.5, 0.5]),
        (0.1, [1.0, 0.0], 0.1, [0.0, 1.0]),
        (0.2, [0.7, 0.2, 0.1], 0.5, [0.1, 0.3, 0.6]),
        (0.05, [0.25, 0.25, 0.25, 0.25], 0.6, [0.4, 0.3, 0.2, 0.1]),
    ]
    grade(fn, _relevance_cost_reference, cases, name="relevance_cost")
