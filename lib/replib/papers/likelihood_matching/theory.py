"""LM, theory helpers (for the theory notebook): the path identity, Tweedie by quadrature, exact
Gaussian-data propagation, the reverse KL of Gaussian approximations and the SMW check."""

from __future__ import annotations

import math

import numpy as np
import torch

from .method import alpha_bar, posterior_variance, smw_terms, time_grid, transition, tweedie_moments
from .task import hessian_pt, mixture_at, score_pt

__all__ = [
    "path_identity_check", "tweedie_quadrature_1d", "gaussian_output_covariance", "reverse_kl_1d",
    "smw_check",
]


def _gauss_logpdf_1d(x, m, v):
    return -0.5 * (np.log(2 * np.pi * v) + (x - m) ** 2 / v)


def path_identity_check(x0: float, S: float = 1.0, n_steps: int = 10, n_paths: int = 200, seed: int = 0) -> dict:
    """Path identity (section 2, derived) for 1-D data N(0, S): simulate forward paths from x0 on the
    uniform grid and evaluate log p_{t_N}(x_N) + sum log p(x_{k-1} | x_k) - sum log q(x_k | x_{k-1})
    with the exact (Gaussian, Tweedie) reverse transitions. Returns dict(rhs_mean, rhs_se, log_p0)."""
    rng = np.random.default_rng(seed)
    grid = time_grid(n_steps)
    x = np.full(n_paths, float(x0))
    vals = np.zeros(n_paths)
    path = [x]
    for k in range(1, n_steps + 1):
        a, sig2 = transition(grid[k], grid[k - 1])
        xn = a * x + np.sqrt(sig2) * rng.standard_normal(n_paths)
        vals -= _gauss_logpdf_1d(xn, a * x, sig2)
        x = xn
        path.append(x)
    vt = lambda t: alpha_bar(t) * S + 1 - alpha_bar(t)  # noqa: E731
    vals += _gauss_logpdf_1d(path[-1], 0.0, vt(1.0))
    for k in range(1, n_steps + 1):
        a, sig2 = transition(grid[k], grid[k - 1])
        xk = path[k]
        m, v = tweedie_moments(xk[:, None], (-xk / vt(grid[k]))[:, None], np.full((n_paths, 1, 1), -1 / vt(grid[k])), a, sig2)
        vals += _gauss_logpdf_1d(path[k - 1], m[:, 0], v[:, 0, 0])
    return dict(rhs_mean=float(vals.mean()), rhs_se=float(vals.std(ddof=1) / np.sqrt(n_paths)),
                log_p0=float(_gauss_logpdf_1d(x0, 0.0, S)))


def _mix_pdf_1d(mix, x, t):
    m = mixture_at(mix, t)
    return sum(w * np.exp(_gauss_logpdf_1d(x, mu[0], c[0, 0])) for w, mu, c in zip(m["weights"], m["means"], m["covs"]))


def tweedie_quadrature_1d(mix: dict, xt, t: float, s: float, n_grid: int = 4001) -> dict:
    """E[X_s | x_t] and Var[X_s | x_t] of a 1-D mixture by quadrature of p_s(x_s) q(x_t | x_s) on a
    grid, next to the second-order Tweedie formulas of section 3 (derived). Returns dict of arrays
    mean_quad, var_quad, mean_tweedie, var_tweedie."""
    xt = np.atleast_1d(np.asarray(xt, float))
    a, sig2 = transition(t, s)
    ms = mixture_at(mix, s)
    sd = np.sqrt(ms["covs"][:, 0, 0].max())
    lo, hi = ms["means"].min() - 10 * sd - 10, ms["means"].max() + 10 * sd + 10
    g = np.linspace(lo, hi, n_grid)
    w = _mix_pdf_1d(mix, g, s)[None] * np.exp(_gauss_logpdf_1d(xt[:, None], a * g[None], sig2))
    w /= w.sum(1, keepdims=True)
    mq = (w * g).sum(1)
    vq = (w * g * g).sum(1) - mq**2
    mt, vtw = tweedie_moments(xt[:, None], score_pt(mix, xt[:, None], t), hessian_pt(mix, xt[:, None], t), a, sig2)
    return dict(mean_quad=mq, var_quad=vq, mean_tweedie=mt[:, 0], var_tweedie=vtw[:, 0, 0])


def gaussian_output_covariance(S, n_steps: int, variance: str = "LM") -> np.ndarray:
    """Theory outline "Gaussian data is solved exactly": for p_0 = N(0, S) the exact score is
    -P_t x, P_t = (alpha_bar_t S + (1 - alpha_bar_t) I)^{-1}, and each reverse step is linear,
    x_{k-1} = A x_k + noise, A = (I - sigma^2 P_t)/a. Propagates Cov from N(0, I) at t = 1 through
    ``n_steps`` steps with the reverse variance of ``variance`` ("LM": sigma^2/a^2 (I - sigma^2 P_t);
    "beta"; "beta_tilde"; "identity": sigma^2/a^2 I). Returns the output covariance."""
    S = np.atleast_2d(np.asarray(S, float))
    d = S.shape[0]
    eye = np.eye(d)
    grid = time_grid(n_steps)
    cov = eye.copy()
    for k in range(n_steps, 0, -1):
        t, s = grid[k], grid[k - 1]
        ab = alpha_bar(t)
        a, sig2 = transition(t, s)
        P = np.linalg.inv(ab * S + (1 - ab) * eye)
        A = (eye - sig2 * P) / a
        V = {"LM": sig2 / a**2 * (eye - sig2 * P), "beta": sig2 * eye,
             "beta_tilde": posterior_variance(t, s) * eye, "identity": sig2 / a**2 * eye}[variance]
        cov = A @ cov @ A.T + V
    return cov


def reverse_kl_1d(mix: dict, xt: float, t: float, s: float, n_grid: int = 4001) -> dict:
    """Theory outline "Why covariance matters": the exact reverse density p(x_s | x_t) of a 1-D
    mixture on a grid and KL(exact || Gaussian) for LM's matched Gaussian and the DDPM ones (same
    Tweedie mean, variance beta = sigma^2 or beta-tilde). Returns dict(grid, density, kl_lm, kl_beta,
    kl_beta_tilde, mean, var_lm)."""
    a, sig2 = transition(t, s)
    q = tweedie_quadrature_1d(mix, [xt], t, s)
    m, v = float(q["mean_tweedie"][0]), float(q["var_tweedie"][0])
    sd = math.sqrt(max(v, sig2))
    g = np.linspace(m - 12 * sd - 1, m + 12 * sd + 1, n_grid)
    p = _mix_pdf_1d(mix, g, s) * np.exp(_gauss_logpdf_1d(xt, a * g, sig2))
    dx = g[1] - g[0]
    p /= p.sum() * dx

    def kl(var):
        mask = p > 1e-300
        return float((p[mask] * (np.log(p[mask]) - _gauss_logpdf_1d(g[mask], m, var))).sum() * dx)

    return dict(grid=g, density=p, mean=m, var_lm=v, kl_lm=kl(v), kl_beta=kl(sig2),
                kl_beta_tilde=kl(float(posterior_variance(t, s))) if s > 0 else float("inf"))


def smw_check(rng, d: int = 5, r: int = 2) -> dict:
    """:func:`smw_terms` against dense linear algebra for random D > 0, W (theory outline, last item).
    Returns the absolute differences of log det, quadratic form and trace."""
    rng = np.random.default_rng(rng)
    D = torch.as_tensor(rng.uniform(0.1, 2.0, (1, d)))
    W = torch.as_tensor(rng.standard_normal((1, d, r)))
    v = torch.as_tensor(rng.standard_normal((1, d)))
    C = torch.diag_embed(D) + W @ W.transpose(-1, -2)
    ld, qd, tr = smw_terms(D, W, v)
    Ci = torch.linalg.inv(C)
    return dict(logdet=float((ld - torch.logdet(C)).abs()), quad=float((qd - v @ Ci[0] @ v[0]).abs().max()),
                trace=float((tr - Ci[0].trace()).abs()))
