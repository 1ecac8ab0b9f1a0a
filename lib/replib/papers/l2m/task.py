"""The toy world of the L2M chapter: a prior over small tabular regression tasks whose informative
features change from task to task, with retrospective (MCAR) missingness, and the Gaussian NLL.

Contents: :data:`N_FEATURES`, :func:`sample_tasks`, :func:`marginal_nll` (and, re-exported from
:mod:`.method`, :func:`gaussian_nll`).

The prior is our CPU-scale version (our choice; the paper does not state it) of the official code's
semi-synthetic label generator: $x \\sim U(-2, 2)^6$, an informative subset $S$ of 1 to 3 features,
$y = f(x_S) + \\epsilon$ with $f$ a random one-hidden-layer tanh network of width 8 that only reads
$x_S$, labels scaled to unit variance per task, noise sd 0.1, and MCAR missingness with a per-feature
rate $U(0, p_{max})$.
"""

from __future__ import annotations

import numpy as np

from .method import gaussian_nll

__all__ = ["N_FEATURES", "NOISE_SD", "sample_tasks", "gaussian_nll", "marginal_nll"]

N_FEATURES = 6
NOISE_SD = 0.1
HIDDEN = 8


def _label_function(rng: np.random.Generator, informative: np.ndarray, kind: str = "tanh"):
    """A random tanh network of width 8 that reads only the informative features (its first-layer
    weights on the others are zero), each informative feature with its own scale $U(0.5, 1.5)$
    (``kind="linear"``: $x \\cdot w$, $w_j \\sim N(0, 1)$ on the informative features). Returns the
    function and each feature's importance: $|w_j|$ (linear) or the norm of its first-layer weights
    times the output weights (tanh), zero off the informative set."""
    d = informative.size
    if kind == "linear":
        w = rng.normal(size=d) * informative
        return (lambda x: x @ w), np.abs(w)
    w1 = rng.normal(size=(d, HIDDEN)) * rng.uniform(0.5, 1.5, size=(d, 1)) * informative[:, None]
    b1 = rng.normal(size=HIDDEN)
    w2 = rng.normal(size=HIDDEN)
    return (lambda x: np.tanh(x @ w1 + b1) @ w2), np.linalg.norm(w1 * w2, axis=1)


def sample_tasks(rng: np.random.Generator, n_tasks: int, n_rows: int, p_max: float = 0.5,
                 d: int = N_FEATURES, kind: str = "tanh") -> dict:
    """Draw ``n_tasks`` tasks of ``n_rows`` rows each from the prior.

    Returns a dict of arrays: ``x`` (tasks, rows, d), ``y`` (tasks, rows), ``r`` (tasks, rows, d),
    the measured indicators (1 = measured; each task and feature has its own MCAR rate
    $U(0, p_{max})$), ``informative`` (tasks, d), the task's set $S$, and ``importance`` (tasks, d),
    each feature's weight in the label after the unit-variance scaling (the oracle's acquisition
    order reads it; no model does). The label function is scaled
    so that $f(x)$ has unit variance over 512 reference draws of the task, then noise sd 0.1 is added.
    """
    x = rng.uniform(-2.0, 2.0, size=(n_tasks, n_rows, d))
    y = np.empty((n_tasks, n_rows))
    informative = np.zeros((n_tasks, d), dtype=bool)
    importance = np.zeros((n_tasks, d))
    for t in range(n_tasks):
        informative[t, rng.choice(d, size=rng.integers(1, 4), replace=False)] = True
        f, weight = _label_function(rng, informative[t], kind)
        reference = f(rng.uniform(-2.0, 2.0, size=(512, d)))
        scale = max(reference.std(), 1e-6)
        importance[t] = weight / scale
        y[t] = (f(x[t]) - reference.mean()) / scale + NOISE_SD * rng.normal(size=n_rows)
    rates = rng.uniform(0.0, p_max, size=(n_tasks, 1, d))
    r = (rng.uniform(size=x.shape) >= rates).astype(float)
    return {"x": x, "y": y, "r": r, "informative": informative, "importance": importance}


def marginal_nll(y_context: np.ndarray, y_target: np.ndarray) -> np.ndarray:
    """The label-marginal reference: NLL of each target under a Gaussian fitted to its task's
    context labels (mean and sd, the sd floored at 0.05). Shapes (tasks, n_c) and (tasks, n_t)."""
    mean = y_context.mean(axis=1, keepdims=True)
    std = np.maximum(y_context.std(axis=1, keepdims=True), 0.05)
    return gaussian_nll(mean, std, y_target)
