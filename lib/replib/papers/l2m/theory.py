"""Helpers of the L2M theory notebook (numpy): conditional mutual information for jointly
Gaussian features and label, the greedy CMI order, the Covert identity on a discrete joint, and
the Bayesian linear-regression predictive whose variance shrinks with the context.

Contents: :func:`conditional_variance`, :func:`gaussian_cmi`, :func:`greedy_cmi_order`,
:func:`discrete_cmi_and_nll`, :func:`blr_predictive`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["conditional_variance", "gaussian_cmi", "greedy_cmi_order", "discrete_cmi_and_nll", "blr_predictive"]


def conditional_variance(cov: np.ndarray, target: int, given) -> float:
    """$\\mathrm{Var}(Z_{target} \\mid Z_{given})$ for a Gaussian vector with covariance ``cov``
    (the Schur complement)."""
    given = list(given)
    if not given:
        return float(cov[target, target])
    c_tg = cov[target, given]
    return float(cov[target, target] - c_tg @ np.linalg.solve(cov[np.ix_(given, given)], c_tg))


def gaussian_cmi(cov: np.ndarray, j: int, given) -> float:
    """$I(Y; X_j \\mid X_S) = \\frac12 \\log \\frac{\\mathrm{Var}(Y \\mid x_S)}{\\mathrm{Var}(Y \\mid x_S, X_j)}$,
    the label being the last coordinate of ``cov``."""
    y = cov.shape[0] - 1
    return 0.5 * np.log(conditional_variance(cov, y, given) / conditional_variance(cov, y, [*given, j]))


def greedy_cmi_order(cov: np.ndarray) -> list:
    """The greedy policy $A_{t+1} = \\arg\\max_j I(Y; X_j \\mid X_{A_1..A_t})$ run to the end
    (for Gaussians the CMI does not depend on the observed values)."""
    order, left = [], list(range(cov.shape[0] - 1))
    while left:
        best = max(left, key=lambda j: gaussian_cmi(cov, j, order))
        order.append(best)
        left.remove(best)
    return order


def discrete_cmi_and_nll(p: np.ndarray) -> dict:
    """For a joint $p(x_1, x_2, y)$ (array indexed [x1, x2, y]) with nothing yet observed: for each
    feature $j$, $I(Y; X_j)$, $H(Y)$ and the expected NLL of the Bayes predictor after observing it,
    $\\mathbb E[-\\log p(Y \\mid X_j)]$ (the Covert identity says NLL $= H(Y) - I$)."""
    p_y = p.sum(axis=(0, 1))
    h_y = float(-(p_y * np.log(p_y)).sum())
    out = {"H(Y)": h_y}
    for j, other in [(0, 1), (1, 0)]:
        p_xy = p.sum(axis=other)  # [x_j, y]
        p_x = p_xy.sum(axis=1, keepdims=True)
        out[f"I(Y;X{j + 1})"] = float((p_xy * np.log(p_xy / (p_x * p_y))).sum())
        out[f"NLL after X{j + 1}"] = float(-(p_xy * np.log(p_xy / p_x)).sum())
    return out


def blr_predictive(x_context: np.ndarray, y_context: np.ndarray, x_query: np.ndarray, prior_var: float = 1.0,
                   noise_var: float = 0.01):
    """Posterior predictive of Bayesian linear regression $y = w^\\top x + \\epsilon$,
    $w \\sim N(0, \\text{prior\\_var}\\, I)$, $\\epsilon \\sim N(0, \\text{noise\\_var})$: mean and variance at
    ``x_query``. The variance is the noise plus an epistemic part that shrinks with the context."""
    d = x_query.shape[-1]
    precision = np.eye(d) / prior_var + x_context.T @ x_context / noise_var
    cov = np.linalg.inv(precision)
    mean_w = cov @ x_context.T @ y_context / noise_var
    return x_query @ mean_w, noise_var + np.einsum("...i,ij,...j->...", x_query, cov, x_query)
