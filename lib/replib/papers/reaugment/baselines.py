"""The baselines of the ReAugment chapter that are more than a line of the experiment: Gaussian
jitter (the generic augmenter the first version of the paper compared with) and two reference
forecasters that need no training.

Contents: :func:`jitter`, :func:`lookback_mean_forecast`, :func:`seasonal_naive_forecast`.
The other baselines are the method's own pieces: no augmentation (the training windows alone), the
VMAE without RL (:func:`method.generate` before stage B) and random anchors (stage B and generation
from a random half of the windows), assembled in :mod:`.experiment`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["jitter", "lookback_mean_forecast", "seasonal_naive_forecast"]


def jitter(windows, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Gaussian jitter: one copy of every window with i.i.d. N(0, sigma^2) noise added to each of its
    T steps (look-back and target alike), in standardised units."""
    w = np.asarray(windows, dtype=np.float64)
    return w + sigma * rng.standard_normal(w.shape)


def lookback_mean_forecast(x, horizon: int) -> np.ndarray:
    """The trivial forecast: the mean of the look-back, repeated over the horizon ((N, L) -> (N, H))."""
    x = np.asarray(x, dtype=np.float64)
    return np.repeat(x.mean(axis=-1, keepdims=True), horizon, axis=-1)


def seasonal_naive_forecast(x, horizon: int, period: int) -> np.ndarray:
    """The seasonal naive forecast: the value one ``period`` before each target step, repeating the
    last ``period`` look-back values ((N, L) -> (N, H); needs period <= L)."""
    x = np.asarray(x, dtype=np.float64)
    last = x[:, -period:]
    return np.tile(last, (1, int(np.ceil(horizon / period))))[:, :horizon]
