"""The toy world of the ReAugment chapter: three short real series that ship with statsmodels,
few-shot forecasting windows cut from them, the forecaster (a bank of small MLPs trained at once)
and the task's metrics.

Contents:

1. The series: :data:`DATASETS`, :data:`WEIGHT_DECAY`, :data:`SEASONAL_PERIOD`, :func:`load_series` (statsmodels' ``elnino``, ``sunspots`` and
   ``co2``, their values stored below, see :data:`_ELNINO`).
2. Windows: :func:`make_windows` (standardise with the training period's statistics, cut
   look-back + horizon windows, keep the earliest ``n_shot`` training windows, the next ``n_shot``
   as the headroom arm's real data and the last training windows as a validation slice), :func:`split_window`,
   :func:`windows_dataset` (the few-shot windows as a ``datasets.Dataset``).
3. The forecaster f_theta: :class:`ForecasterBank` (M independent MLPs L-h-H, each initialised as
   :class:`replib.models.mlp.MLP` with its own seed, evaluated as one batched product),
   :func:`fit_forecasters` (full-batch Adam, each member on its own weighted set of windows).
4. The metric: :func:`forecast_mse`.
"""

from __future__ import annotations

import numpy as np
import torch

from replib.models.mlp import MLP

__all__ = [
    "DATASETS",
    "WEIGHT_DECAY",
    "SEASONAL_PERIOD",
    "load_series",
    "make_windows",
    "split_window",
    "windows_dataset",
    "ForecasterBank",
    "fit_forecasters",
    "forecast_mse",
]

DATASETS = ("elnino", "sunspots", "co2")
# The forecaster's weight decay per data set: the regime the base model is run in, set on a pilot of
# the forecaster alone (no augmentation, seeds 0-2, 300 epochs) by a declared rule: the smallest of
# 0, 0.01, 0.03, 0.1 at which the few-shot MLP's test MSE is at most 0.7 times that of the look-back
# mean on every pilot seed. It is the most over-fitting regime in which the forecaster still learns
# (ReAugment's premise is a forecaster that over-fits). Every forecaster of a data set (zoo members,
# retrained models) uses it.
WEIGHT_DECAY = {"elnino": 0.03, "sunspots": 0.03, "co2": 0.0}
# The seasonal period of each series in steps (months, years, months), for the seasonal naive forecast.
SEASONAL_PERIOD = {"elnino": 12, "sunspots": 11, "co2": 12}


# --------------------------------------------------------------------------------------------
# 1. The series
# --------------------------------------------------------------------------------------------


def load_series(name: str) -> np.ndarray:
    """One of :data:`DATASETS` as a float64 array, in time order.

    ``elnino``: monthly sea-surface temperature off South America, 1950-2010, the year x month table
    of ``statsmodels.datasets.elnino`` read row by row (732 values, degrees C). ``sunspots``: yearly
    sunspot activity 1700-2008, ``statsmodels.datasets.sunspots`` (309 values). ``co2``: Mauna Loa
    CO2, the monthly means of ``statsmodels.datasets.co2``'s weekly values (March 1958 to December
    2001, the 5 empty months linearly interpolated, rounded to 0.01 ppm), first-differenced (525
    values: the monthly change, whose seasonal cycle is the signal). The values are stored in this
    module (statsmodels 0.15.0's copies, public domain) because statsmodels is not a dependency of
    the book."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; valid: {', '.join(DATASETS)}")
    text = {"elnino": _ELNINO, "sunspots": _SUNSPOTS, "co2": _CO2_MONTHLY}[name]
    values = np.array(text.split(), dtype=np.float64)
    return np.diff(values) if name == "co2" else values


# --------------------------------------------------------------------------------------------
# 2. Windows
# --------------------------------------------------------------------------------------------


def make_windows(series: np.ndarray, lookback: int = 36, horizon: int = 12, train_frac: float = 0.7,
                 n_shot: int = 60, n_val: int = 60) -> dict:
    """Few-shot forecasting windows w = [x; y] (x the ``lookback`` past values, y the next
    ``horizon``), in standardised units.

    The first ``train_frac`` of the series is the training period: its mean and standard deviation
    standardise the whole series, and the training windows (stride 1) lie inside it; only the
    earliest ``n_shot`` of them are kept (the few-shot set D). Test windows (stride 1) lie entirely
    in the remaining period, so no test value is ever seen in training. Two more sets come from the
    training period, never from the test period: ``extra``, the ``n_shot`` windows that follow D (the
    headroom arm: real data a generator would imitate), and ``val``, the last ``n_val`` training
    windows that share no value with D (for tuning the augmenters; never trained on). Returns
    ``train`` (n_shot, L + H), ``extra``, ``val``, ``test`` (n_test, L + H), ``mean``, ``std``,
    ``lookback``, ``horizon``, ``n_train_total`` (training windows before the few-shot cut)."""
    series = np.asarray(series, dtype=np.float64)
    cut = int(round(train_frac * len(series)))
    mean, std = float(series[:cut].mean()), float(series[:cut].std())
    z = (series - mean) / std
    width = lookback + horizon
    train = np.lib.stride_tricks.sliding_window_view(z[:cut], width)
    test = np.lib.stride_tricks.sliding_window_view(z[cut:], width)
    if len(train) < n_shot:
        raise ValueError(f"the training period holds {len(train)} windows, fewer than n_shot={n_shot}")
    first_val = max(n_shot + width - 1, len(train) - n_val)  # no value shared with D
    return {"train": train[:n_shot].copy(), "extra": train[n_shot:2 * n_shot].copy(),
            "val": train[first_val:].copy(), "test": test.copy(), "mean": mean, "std": std,
            "lookback": lookback, "horizon": horizon, "n_train_total": len(train)}


def split_window(w, lookback: int):
    """(x, y): the look-back and the target of windows ``w`` (..., L + H)."""
    return w[..., :lookback], w[..., lookback:]


def windows_dataset(name: str, lookback: int = 36, horizon: int = 12, train_frac: float = 0.7, n_shot: int = 60):
    """The few-shot training and test windows of one data set as a ``datasets.Dataset`` (columns
    ``dataset``, ``split``, ``index``, ``x``, ``y``), through the shared cache, for a reader to
    look at (``ds.to_pandas()``)."""
    from replib.core import cached_dataset

    params = {"name": name, "lookback": lookback, "horizon": horizon, "train_frac": train_frac, "n_shot": n_shot}

    def build():
        win = make_windows(load_series(name), lookback, horizon, train_frac, n_shot)
        rows = []
        for split in ("train", "test"):
            for i, w in enumerate(win[split]):
                x, y = split_window(w, lookback)
                rows.append({"dataset": name, "split": split, "index": i, "x": x.tolist(), "y": y.tolist()})
        return rows

    return cached_dataset(f"reaugment_{name}", params, build)


# --------------------------------------------------------------------------------------------
# 3. The forecaster
# --------------------------------------------------------------------------------------------


class ForecasterBank(torch.nn.Module):
    """M independent forecasters f_theta_m: R^L -> R^H, each an MLP L-h-H with ReLU, stored as
    stacked weights so that all M run as one batched product.

    Member m starts from the weights of ``replib.models.mlp.MLP([L, h, H], seed=seeds[m])`` (the
    shared MLP's initialisation), and ``bank(x)`` equals that MLP's output for every member. ``x``
    is (N, L) (the same inputs for every member) or (M, N, L); the output is (M, N, H)."""

    def __init__(self, seeds, lookback: int = 36, horizon: int = 12, hidden: int = 64):
        super().__init__()
        nets = [MLP([lookback, hidden, horizon], seed=int(s)) for s in seeds]
        self.w1 = torch.nn.Parameter(torch.stack([n.layers[0].weight.T for n in nets]).detach().clone())
        self.b1 = torch.nn.Parameter(torch.stack([n.layers[0].bias[None] for n in nets]).detach().clone())
        self.w2 = torch.nn.Parameter(torch.stack([n.layers[1].weight.T for n in nets]).detach().clone())
        self.b2 = torch.nn.Parameter(torch.stack([n.layers[1].bias[None] for n in nets]).detach().clone())

    @property
    def size(self) -> int:
        return int(self.w1.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.expand(self.size, *x.shape)
        return torch.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2


def fit_forecasters(bank: ForecasterBank, windows, weights=None, epochs: int = 300, lr: float = 3e-3,
                    weight_decay: float = 0.0) -> list[float]:
    """Train every member of ``bank`` in place by full-batch Adam on its own weighted windows.

    ``windows`` is (N, L + H) (shared) or (M, N, L + H) (one set per member, padded); ``weights``
    (M, N) >= 0 say which windows member m trains on (None: all). Member m minimises
    sum_n w_mn ||f_m(x_n) - y_n||^2 / (H sum_n w_mn); the members' losses are summed, and since Adam
    is elementwise and the members share no weight, each trains exactly as it would alone. Returns
    the mean loss over members per epoch."""
    lookback = bank.w1.shape[1]
    w = torch.as_tensor(np.asarray(windows), dtype=torch.float32)
    x, y = split_window(w, lookback)
    if w.dim() == 2:
        y = y.expand(bank.size, *y.shape)
    m_weights = torch.ones(y.shape[:2]) if weights is None else torch.as_tensor(np.asarray(weights), dtype=torch.float32)
    m_weights = m_weights / m_weights.sum(dim=1, keepdim=True)
    optimiser = torch.optim.Adam(bank.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(epochs):
        per_window = ((bank(x) - y) ** 2).mean(dim=-1)
        loss = (m_weights * per_window).sum(dim=1)
        optimiser.zero_grad(set_to_none=True)
        loss.sum().backward()
        optimiser.step()
        losses.append(float(loss.detach().mean()))
    return losses


# --------------------------------------------------------------------------------------------
# 4. Metrics
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def forecast_mse(bank: ForecasterBank, windows) -> np.ndarray:
    """Each member's mean squared error over the windows and the horizon (standardised units),
    shape (M,)."""
    w = torch.as_tensor(np.asarray(windows), dtype=torch.float32)
    x, y = split_window(w, bank.w1.shape[1])
    return ((bank(x) - y) ** 2).mean(dim=(1, 2)).double().numpy()


# --------------------------------------------------------------------------------------------
# The series' values (statsmodels 0.15.0, public domain; see load_series)
# --------------------------------------------------------------------------------------------

_ELNINO = """
23.11 24.2 25.37 23.86 23.03 21.57 20.63 20.15 19.67 20.03 20.02 21.8 24.19 25.28 25.6 25.37 24.79 24.69 23.86
22.32 21.44 21.77 22.33 22.89 24.52 26.21 26.37 24.73 23.71 22.34 20.89 20.02 19.63 20.4 20.77 22.39 24.15
26.34 27.36 27.03 25.47 23.49 22.2 21.45 21.25 20.95 21.6 22.44 23.02 25 25.33 22.97 21.73 20.77 19.52 19.33
18.95 19.11 20.27 21.3 23.75 24.82 25.14 24.22 22.16 21.2 20.46 19.63 19.24 19.16 19.84 21.19 23.24 24.71 25.9
24.66 23.14 22.04 21.47 20.55 19.89 19.69 20.57 21.58 23.13 26.3 27.63 27.15 26.72 25.04 23.83 22.34 21.8 21.8
22.39 23.69 24.89 26.55 27.09 26.37 24.71 23.23 22.31 20.72 20.62 21.05 21.52 22.5 23.97 25.9 26.94 25.84
24.23 22.57 21.5 20.15 20.23 20.86 21.88 22.55 24.4 25.59 26.01 24.66 23.53 21.83 20.73 20.1 20.56 20.27 20.93
22.74 24.58 26.66 25.95 25.17 23.6 22.36 20.52 19.97 19.7 20.07 21.09 22.11 24.02 25.35 24.47 23.43 23.03
21.81 20.6 20.17 20.02 20.14 20.99 21.82 23.81 25.36 26.02 24.67 23.97 22.41 21.8 21.31 21 21.13 21.64 22.55
24.15 25.08 25.3 24.61 21.93 21.44 20.25 19.48 19.67 19.79 20.88 21.83 24.22 26.17 26.71 27.01 26.09 24.6
23.26 22.54 21.26 21.57 22.29 23.35 25.15 25.88 25.35 24.26 22.92 21.8 20.85 20.17 20.04 20.51 21.03 22.25
23.66 25.54 25.55 24.98 23.77 22.04 21.1 19.84 19.08 19.47 20.2 21.28 23.19 24.88 25.11 23.97 22.44 21.7 21.25
20.97 21.23 21.12 21.68 23.2 24.67 25.56 27.09 26.66 26.07 24.39 22.47 21.06 20.88 21.74 22.47 23.6 25.02
25.76 25.53 24.76 22.94 21.27 19.69 19.27 19.5 20.16 20.61 21.77 23.33 24.58 25.24 24.95 23.29 21.6 21.01
19.97 19.74 19.88 20.94 21.99 24.51 26.66 27.09 26.25 25.47 25.01 24.11 23.42 22.12 22.58 23.32 24.89 26.03
26.48 26.27 24.87 23.44 21.76 20.84 19.47 19.49 19.8 20.71 21.74 23.29 24.87 25.69 25.28 24.35 22.48 21.58
20.73 20.15 19.88 20.68 21.41 23.55 24.95 26.06 25.53 23.71 21.84 21.05 19.97 19.14 19.17 19.44 21.05 23.51
25.36 25.88 25.72 25.11 24.46 23.3 21.91 21.56 21.69 22.14 23.29 24.93 25.79 26.13 25.29 23.88 22.7 21.63
20.25 19.82 20.61 21.29 22.47 24.32 25.77 25.39 24.73 23.15 21.89 21.01 19.66 19.98 20.22 21.62 22.94 24.71
25.6 25.93 25.58 24.52 23.28 21.79 21.05 21.15 21.43 21.95 22.97 24.35 25.73 26.46 25.71 24.46 22.88 21.26
20.57 20.45 20.43 21.23 22.34 22.98 24.9 25.94 24.89 23.9 22.57 21.1 20.03 20.09 20.58 21.26 22.6 24.36 25.42
25.4 24.96 24.21 23.35 22.5 21.89 22.04 22.88 24.57 25.89 27.25 28.23 28.85 28.82 28.37 27.43 25.73 23.88
22.26 22.22 22.21 23.19 24.32 25.12 25.75 25.4 23.58 22.3 21.53 20.64 20.73 20.62 21.7 22.47 23.84 24.83 25.6
24.28 22.67 21.84 20.75 19.9 19.86 20.26 20.97 22.49 24.31 25.9 25.78 24.86 23.35 22.03 21.64 21.07 21.13
21.46 22.17 23.53 25.6 27.02 27.89 26.95 25.96 24.04 23 21.92 22 22.54 22.84 23.51 24.76 25.74 25.71 24.68
23.18 21.66 20.59 19.63 19.44 19.83 20.96 22.25 24.36 26.02 26.21 25.54 23.36 22.14 21.27 20.86 20.17 20.52
21.44 22.61 24.22 26.17 26.15 25.15 24.14 22.76 21.36 20.7 20.28 20.4 21.19 22.29 23.99 25.59 26.31 25.15
24.44 23.28 22.39 21.39 21.22 21.73 22.4 23.75 25.02 26.62 27.72 27.58 26.44 23.86 21.84 20.87 20.85 21.15
21.84 22.79 24.68 26.46 27.07 26.84 25.6 24.11 22.61 21.65 21.11 21.71 22.07 22.86 24.56 25.89 25.75 24.49
23.52 22.31 21.17 20.22 20.65 22.04 22.27 23.75 25.48 26.25 26.09 24.32 23.37 22.43 21.42 20.46 20.5 20.62
21.49 22.03 23.81 25.52 26.28 24 23.11 21.66 20.72 20.23 20.43 20.52 20.77 21.68 23.7 26.08 27.17 26.74 26.77
26.15 25.59 24.95 24.69 24.64 25.85 27.08 28.12 28.82 29.24 28.45 27.36 25.19 23.61 22.27 21.31 21.37 21.6
22.81 24.23 25.73 26.47 24.53 23.64 22.09 21.36 20.67 20.08 20.46 20.62 22.42 24.01 25.38 25.67 25.53 24.27
22.93 21.47 20.07 20.64 20.9 20.67 22.08 24.24 26.11 26.89 25.99 23.98 22.71 21.48 20.24 19.73 20.14 20.68
21.73 24.09 26.23 27.39 26.44 25.29 23.28 21.64 21.32 21.42 21.85 22.85 24.05 25.01 26.27 26.91 25.41 23.24
22.15 21.5 21.25 20.75 21.7 22.33 23.6 25.09 26.47 26.12 25.27 23.44 22.54 21.26 20.79 20.83 21.56 22.88 23.39
24.61 25.09 25.23 25.21 24.31 22.6 21.61 20.47 20 19.89 20.61 22.2 24.76 26.52 26.22 24.29 23.84 22.82 22.2
21.89 21.93 22.46 22.61 24.15 25.82 26.81 26.41 24.96 23.05 21.61 21.05 19.95 19.85 19.31 19.82 21.15 24.24
26.39 26.91 25.68 24.43 23.19 23.02 22.14 21.6 21.39 21.54 22.73 24.39 25.53 25.48 25.84 24.95 24.09 23.09
22.03 21.48 21.64 21.99 23.21 24.7 26.16 26.54 26.04 24.75 23.26 21.11 19.49 19.28 19.73 20.44 22.07
"""
_SUNSPOTS = """
5 11 16 23 36 58 29 20 10 8 3 0 0 2 11 27 47 63 60 39 28 26 22 11 21 40 78 122 103 73 47 35 11 5 16 34 70 81
111 101 73 40 20 16 5 11 22 40 60 80.9 83.4 47.7 47.8 30.7 12.2 9.6 10.2 32.4 47.6 54 62.9 85.9 61.2 45.1 36.4
20.9 11.4 37.8 69.8 106.1 100.8 81.6 66.5 34.8 30.6 7 19.8 92.5 154.4 125.9 84.8 68.1 38.5 22.8 10.2 24.1 82.9
132 130.9 118.1 89.9 66.6 60 46.9 41 21.3 16 6.4 4.1 6.8 14.5 34 45 43.1 47.5 42.2 28.1 10.1 8.1 2.5 0 1.4 5
12.2 13.9 35.4 45.8 41.1 30.1 23.9 15.6 6.6 4 1.8 8.5 16.6 36.3 49.6 64.2 67 70.9 47.8 27.5 8.5 13.2 56.9
121.5 138.3 103.2 85.7 64.6 36.7 24.2 10.7 15 40.1 61.5 98.5 124.7 96.3 66.6 64.5 54.1 39 20.6 6.7 4.3 22.7
54.8 93.8 95.8 77.2 59.1 44 47 30.5 16.3 7.3 37.6 74 139 111.2 101.6 66.2 44.7 17 11.3 12.4 3.4 6 32.3 54.3
59.7 63.7 63.5 52.2 25.4 13.1 6.8 6.3 7.1 35.6 73 85.1 78 64 41.8 26.2 26.7 12.1 9.5 2.7 5 24.4 42 63.5 53.8
62 48.5 43.9 18.6 5.7 3.6 1.4 9.6 47.4 57.1 103.9 80.6 63.6 37.6 26.1 14.2 5.8 16.7 44.3 63.9 69 77.8 64.9
35.7 21.2 11.1 5.7 8.7 36.1 79.7 114.4 109.6 88.8 67.8 47.5 30.6 16.3 9.6 33.2 92.6 151.6 136.3 134.7 83.9
69.4 31.5 13.9 4.4 38 141.7 190.2 184.8 159 112.3 53.9 37.6 27.9 10.2 15.1 47 93.8 105.9 105.5 104.5 66.6 68.9
38 34.5 15.5 12.6 27.5 92.5 155.4 154.6 140.4 115.9 66.6 45.9 17.9 13.4 29.4 100.2 157.6 142.6 145.7 94.3 54.6
29.9 17.5 8.6 21.5 64.3 93.3 119.6 111 104 63.7 40.4 29.8 15.2 7.5 2.9
"""
_CO2_MONTHLY = """
316.1 317.2 317.43 316.53 315.62 314.95 313.5 313.46 313.42 314.7 315.5 316.7 316.73 317.68 318.32 318.02
316.52 314.9 313.82 313.4 314.88 315.52 316.38 316.98 317.58 319.12 319.92 319.45 318.06 315.77 314.18 313.84
315.02 316.2 316.92 317.65 318.52 319.42 320.48 319.75 318.32 316.77 315.04 315.35 316.05 316.98 317.92 318.62
319.68 320.55 320.9 320.5 319.42 317.73 316.07 315.48 316.55 317.53 318.73 318.97 319.86 321.27 322.1 321.46
319.6 317.6 316.15 316.05 317 318.35 319.4 320.05 320.7 321.35 322 321.75 320.3 318.5 316.6 316.96 317.73
318.67 319.4 320.45 320.92 322 322.06 321.77 321.04 318.73 317.82 317.34 318.88 319.32 320.54 321.58 322.38
323.66 324.02 323.7 322.85 320.2 318.7 318.18 319.9 321.06 322.4 322.42 323 324.28 324.95 324.08 322.48 320.85
319.3 319.45 320.68 321.92 322.55 323.05 323.92 324.98 325.48 325.26 324.02 321.94 320.25 320.27 321.32 322.92
323.92 324.27 325.6 326.58 327.28 326.55 325.8 323.54 322.4 321.8 322.82 324.12 325.08 326.02 327 328.08
327.92 327.55 326.3 324.66 323.15 323.14 324.05 325.1 326.14 326.65 327.2 327.68 328.82 328.48 327.22 325.25
323.4 323.54 324.82 325.92 326.72 327.62 327.72 329.64 330 329.08 328.04 326.25 324.86 325.3 326.42 327.54
328.55 329.48 330.38 331.58 332.4 331.94 330.65 329.32 327.5 327.23 328.05 328.64 329.32 330.62 331.5 332.62
332.98 332.16 331.08 329.22 327.38 327.38 328.4 329.68 330.25 331.3 332 333.28 333.86 333.4 331.8 329.98
328.52 328.32 329.44 330.78 331.74 332.55 333.45 334.45 334.76 334.4 332.86 330.72 329.35 329.1 330.35 331.62
332.88 333.42 334.7 336.04 336.68 336.2 334.8 332.88 331.58 331.2 332.35 333.86 335.02 335.35 336.6 337.64
337.95 337.92 336.5 334.65 332.74 332.65 333.82 334.96 336.22 336.7 338 338.88 339.38 339.24 337.52 336.02
333.98 333.95 335.15 336.66 337.92 338.22 340.06 340.75 341.34 340.95 339.38 337.6 335.88 336.02 337.06 338.2
339.22 340.45 341.4 342.45 342.82 342.12 340.42 338.4 336.7 336.94 338.42 339.6 340.7 341.55 342.68 343.48
343.96 343.3 341.92 339.62 338.02 337.9 339.28 340.42 341.34 342.5 343.15 344.9 345.65 345.28 343.82 342.15
339.88 340.02 341.15 342.98 343.68 344.42 345.18 347.4 347.35 346.66 345.2 343.3 341.12 341.48 342.85 344.14
344.92 345.88 347.44 348.32 348.83 348.18 346.45 344.3 343 342.8 344.22 345.58 346.25 346.82 347.74 349.52
350.08 349.38 347.82 345.82 344.8 344.1 345.62 346.88 348 348.5 349.48 350.85 351.74 351.15 349.45 348.08
346.4 346.44 347.92 348.92 350.4 351.78 352.12 353.58 354.18 353.75 352.22 350.3 348.75 348.96 350 351.36
352.78 353 353.6 355.36 355.6 355.12 353.86 351.58 349.86 350.05 351.2 352.48 353.65 354.65 355.48 356.18
357.08 356.08 354.68 352.9 350.94 351.22 352.7 354.14 354.68 355.65 357.2 358.6 359.25 358.18 356.05 353.86
352.12 352.25 353.74 355.02 355.9 356.68 357.9 359.08 359.54 359.12 357 354.86 353.02 353.42 354.2 355.35
356.68 357.18 358.42 359.32 360.18 359.5 357.42 355.32 353.78 354.06 355.35 356.78 358.32 358.9 359.92 361.22
361.65 360.9 359.46 357.38 355.92 356.02 357.58 359.06 359.98 360.92 361.58 363.36 363.7 363.25 361.8 359.38
358 357.85 359.48 360.7 362.02 363.18 364.06 364.7 365.32 364.88 363.48 361.32 359.4 359.62 360.74 362.38
363.12 363.88 364.56 366.32 366.68 365.48 364.38 362.46 360.15 360.75 362.38 364.25 365.34 366.2 367.38 368.52
369.14 368.75 367.6 365.72 363.92 364.32 365.55 366.92 368.12 368.85 369.6 370.98 370.84 370.25 369 366.7
364.68 365.14 366.65 367.9 369.02 369.38 370.4 371.54 371.65 371.62 369.94 367.95 366.54 366.72 368.12 369.44
370.18 371.32 372.06 372.78 373.8 373.06 371.3 369.42 367.88 368.05 369.38 371.02
"""
