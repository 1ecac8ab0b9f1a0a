"""Exercise graders of the ReAugment chapter: :func:`check_fold_gap` (against
:func:`method.fold_gap`) and :func:`check_gaussian_kl` (against :func:`method.gaussian_kl`)."""

from __future__ import annotations

import numpy as np
import torch

from replib.core.exercises import grade

from .method import fold_gap, gaussian_kl

__all__ = ["check_fold_gap", "check_gaussian_kl"]


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def check_fold_gap(fn) -> None:
    """Grade an exercise answer ``fn(errors, folds)``, which returns the pair (out-of-fold errors,
    in-fold errors), one value per window, for a (K, N) array of zoo errors and the fold id of each
    window; checked on small hand-made zoos and random ones, numpy arrays or tensors accepted."""
    rng = np.random.default_rng(11)
    cases = [
        (np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([0, 1])),
        (np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0], [5.0, 5.0, 5.0]]), np.array([2, 2, 0])),
        (rng.random((5, 12)), rng.permutation(np.arange(12) % 5)),
        (rng.random((3, 7)) ** 3, np.array([1, 0, 2, 1, 0, 2, 1])),
    ]
    grade(lambda e, f: tuple(_as_numpy(a) for a in fn(e, f)), fold_gap, cases, name="fold_gap")


def check_gaussian_kl(fn) -> None:
    """Grade an exercise answer ``fn(mu_q, logvar_q, mu_p, logvar_p)``, the KL divergence from q to
    p for diagonal Gaussians given by means and log-variances (torch tensors, the last axis the
    latent dimensions, one value per row); checked on equal, shifted, rescaled and random pairs."""
    g = torch.Generator().manual_seed(5)
    cases = [
        (torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2)),
        (torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[0.0]]), torch.tensor([[0.0]])),
        (torch.tensor([[0.0, 0.5]]), torch.tensor([[-1.0, 0.3]]), torch.tensor([[0.2, 0.0]]), torch.tensor([[1.0, -2.0]])),
        tuple(torch.randn(4, 8, generator=g) for _ in range(4)),
    ]
    grade(lambda *a: _as_numpy(fn(*a)), lambda *a: _as_numpy(gaussian_kl(*a)), cases, name="gaussian_kl")
