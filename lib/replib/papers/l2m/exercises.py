"""L2M, exercise graders."""

from __future__ import annotations

import numpy as np

from .method import attention_mask
from .theory import gaussian_cmi

__all__ = ["check_attention_mask", "check_gaussian_cmi"]


def _allowed_reference(n_context, n_target, autoregressive):
    return (attention_mask(n_context, n_target, autoregressive) == 0).numpy()


def check_attention_mask(fn) -> None:
    """Grade the attention-mask exercise: ``fn(n_context, n_target, autoregressive)`` returns a
    boolean matrix (rows attend to columns) that is compared with the book's mask on hand-made
    sizes; the first case that differs or raises is named."""
    from replib.core.exercises import grade

    cases = [(2, 3, True), (2, 3, False), (1, 1, True), (0, 2, True), (4, 2, False), (3, 4, True)]
    grade(lambda *a: np.asarray(fn(*a), dtype=bool), _allowed_reference, cases, name="allowed")


def check_gaussian_cmi(fn) -> None:
    """Grade the Gaussian CMI exercise: ``fn(cov, j, given)`` (label last in ``cov``) is compared
    with the book's reference on hand-made covariances; the first case that differs or raises is
    named."""
    from replib.core.exercises import grade

    w = np.array([1.0, 0.0, 0.5])
    a = np.array([[1.0, 0.3, 0.0], [0.3, 1.0, 0.2], [0.0, 0.2, 1.0]])
    cov = np.block([[a, (a @ w)[:, None]], [(a @ w)[None, :], np.array([[w @ a @ w + 0.1]])]])
    cases = [(cov, 0, []), (cov, 1, []), (cov, 2, [0]), (cov, 1, [0, 2]), (np.diag([1.0, 1.0, 2.0]), 0, [1])]
    grade(fn, gaussian_cmi, cases, name="gaussian_cmi")
