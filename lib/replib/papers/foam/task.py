"""FOAM's toy world: 1,400 digits, the deep autoencoder, its full-batch loss, the minibatch order, and
random PSD factors for the matrix-level checks."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = [
    "AE_SIZES",
    "BOTTLENECK",
    "N_TRAIN",
    "load_digits_train",
    "autoencoder",
    "full_batch_loss",
    "random_psd",
]

AE_SIZES = (64, 128, 64, 16, 64, 128, 64)  # deep autoencoder; hidden layer 2 (16-d) is linear
BOTTLENECK = 2  # 0-based index of the linear hidden layer
N_TRAIN = 1400


@lru_cache(maxsize=1)
def _digits_train() -> np.ndarray:
    from sklearn.datasets import load_digits

    X = load_digits().data / 16.0
    idx = np.random.default_rng(0).permutation(X.shape[0])[:N_TRAIN]
    return np.ascontiguousarray(X[idx], dtype=np.float32)


def load_digits_train() -> np.ndarray:
    """The training set: 1,400 of scikit-learn's 1,797 digits (8 x 8 flattened to 64 pixels, scaled to
    [0, 1]), a fixed subset (``default_rng(0)`` permutation); float32, 1,400 x 64 (a fresh copy)."""
    return _digits_train().copy()


def autoencoder(seed: int = 0):
    """The deep autoencoder 64-128-64-16-64-128-64: tanh after every hidden layer except the linear
    16-d bottleneck, linear output (:class:`replib.models.mlp.MLP`, torch's default initialisation
    drawn under ``seed``); about 35k parameters, six weight matrices."""
    from replib.models.mlp import MLP

    return MLP(AE_SIZES, seed=int(seed), activation="tanh", linear_hidden=[BOTTLENECK])


def full_batch_loss(model, X) -> float:
    """Reconstruction MSE of ``model`` on all of ``X`` (mean over images and pixels)."""
    import torch
    from torch.nn import functional as F

    Xt = torch.as_tensor(X)
    with torch.no_grad():
        return float(F.mse_loss(model(Xt), Xt))


def _batch_order(n: int, steps: int, batch_size: int, seed: int) -> np.ndarray:
    """Minibatch indices (steps x batch_size): epochs of ``default_rng(seed)`` permutations, cut into
    consecutive batches (a batch never straddles two epochs; a short last batch is dropped)."""
    rng = np.random.default_rng(int(seed))
    per_epoch = n // batch_size
    epochs = -(-steps // per_epoch)
    idx = [rng.permutation(n)[: per_epoch * batch_size].reshape(per_epoch, batch_size)
           for _ in range(epochs)]
    return np.concatenate(idx)[:steps]


def random_psd(rng: np.random.Generator, m: int, rank: int | None = None, ridge: float = 0.0) -> np.ndarray:
    """A random symmetric PSD m x m matrix Z Z^T / rank (Z Gaussian m x rank; rank m by default) plus
    ``ridge`` I."""
    r = m if rank is None else int(rank)
    Z = rng.normal(size=(m, r))
    return Z @ Z.T / r + ridge * np.eye(m)
