"""Exercise graders of the RAST-MoE chapter: :func:`check_topk_gates` (against
:func:`method.route`) and :func:`check_load_balancing_loss` (against
:func:`method.load_balancing_loss`)."""

from __future__ import annotations

import numpy as np
import torch

from .method import load_balancing_loss, route

__all__ = ["check_topk_gates", "check_load_balancing_loss"]


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def check_topk_gates(fn) -> None:
    """Grade an exercise answer ``fn(router_logits, k)`` that returns the gates for a (B, E) array of
    router logits: a (B, E) array, zero outside each row's k chosen experts and equal to the
    chapter's routing rule inside."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(11)
    cases = [(np.array([[0.0, 1.0, 2.0, 3.0]]), 2), (np.array([[2.0, -1.0, 0.5]]), 1),
             (rng.normal(size=(5, 8)), 2), (rng.normal(size=(3, 16)), 4), (np.zeros((1, 4)) + [[0, 0, 5, 5]], 3)]

    def reference(logits, k):
        return route(torch.as_tensor(logits, dtype=torch.float32), k)[1].numpy().astype(float)

    grade(lambda logits, k: _as_numpy(fn(logits, k)), reference, cases, name="topk_gates")


def check_load_balancing_loss(fn) -> None:
    """Grade an exercise answer ``fn(router_probs, top1)`` that returns one number for a (B, E) array
    of router probabilities and the (B,) top-1 experts: the chapter's load-balancing loss (1 under
    uniform routing, E under full collapse)."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(12)
    probs = rng.dirichlet(np.ones(6), size=10)
    cases = [(np.full((4, 4), 0.25), np.array([0, 1, 2, 3])), (np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([0, 0])),
             (probs, probs.argmax(1)), (probs, np.zeros(10, dtype=int))]

    def reference(p, top1):
        return float(load_balancing_loss(torch.as_tensor(p, dtype=torch.float32), torch.as_tensor(top1)))

    grade(lambda p, top1: float(_as_numpy(fn(p, top1))), reference, cases, name="load_balancing_loss")
