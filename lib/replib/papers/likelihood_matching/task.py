"""LM, the toy world: the 2-D anisotropic ring mixture with its analytic p_t, score and Hessian,
and the task metrics (sliced W2, the NLL bound, the Hessian error)."""

from __future__ import annotations

import math

import numpy as np
import torch

from .method import LMNet, _t, alpha_bar, hessian_from_model, time_grid, transition

__all__ = [
    "ring_mixture", "sample_mixture", "mixture_at", "log_pt", "score_pt", "hessian_pt",
    "projection_directions", "sliced_w2", "sampling_floor", "corrected_sw2", "nll_bound",
    "score_jacobian_hessian", "hessian_error", "SCORE_TS", "score_errors",
]

SW2_SEED = 12345


def _out(y: torch.Tensor, like):
    return y if isinstance(like, torch.Tensor) else y.numpy()


# --------------------------------------------------------------------------------------------
# 1. Toy data: the anisotropic ring mixture and its analytic p_t
# --------------------------------------------------------------------------------------------


def ring_mixture(k: int = 6, radius: float = 2.0, var_tangent: float = 0.3, var_radial: float = 0.01) -> dict:
    """Our toy (proposed; the settings of the paper's Gaussian-mixture simulations are not available):
    ``k`` equal-weight Gaussians with means on a circle of ``radius`` and covariances elongated
    tangentially (eigenvalues ``var_tangent`` along the circle, ``var_radial`` across it). Radius 2 is
    ours. Returns dict(weights (k,), means (k, 2), covs (k, 2, 2)) of float64 arrays."""
    ang = 2 * np.pi * np.arange(k) / k
    u = np.stack([np.cos(ang), np.sin(ang)], 1)  # radial unit vectors
    v = np.stack([-np.sin(ang), np.cos(ang)], 1)  # tangential
    covs = var_tangent * v[:, :, None] * v[:, None, :] + var_radial * u[:, :, None] * u[:, None, :]
    return dict(weights=np.full(k, 1.0 / k), means=radius * u, covs=covs)


def sample_mixture(mix: dict, n: int, rng=None, generator: torch.Generator | None = None):
    """n draws from the mixture: numpy (float64) with a numpy ``rng`` (int or Generator), or torch
    float32 with a torch ``generator``."""
    W, M, S = (np.asarray(mix[k], dtype=float) for k in ("weights", "means", "covs"))
    Lc = np.linalg.cholesky(S)
    if generator is not None:
        comp = torch.multinomial(torch.as_tensor(W), n, replacement=True, generator=generator)
        z = torch.randn(n, M.shape[1], generator=generator, dtype=torch.float64)
        x = torch.as_tensor(M)[comp] + torch.einsum("nij,nj->ni", torch.as_tensor(Lc)[comp], z)
        return x.float()
    rng = np.random.default_rng(rng)
    comp = rng.choice(len(W), size=n, p=W)
    z = rng.standard_normal((n, M.shape[1]))
    return M[comp] + np.einsum("nij,nj->ni", Lc[comp], z)


def mixture_at(mix: dict, t) -> dict:
    """The forward marginal p_t of a Gaussian mixture (the toy's data): again a mixture, with means
    sqrt(alpha_bar_t) mu_i and covariances alpha_bar_t Sigma_i + (1 - alpha_bar_t) I (derived)."""
    ab = float(alpha_bar(float(t)))
    S = np.asarray(mix["covs"], float)
    d = S.shape[-1]
    return dict(weights=np.asarray(mix["weights"], float), means=math.sqrt(ab) * np.asarray(mix["means"], float),
                covs=ab * S + (1 - ab) * np.eye(d))


def _mixture_terms(mix, x, t):
    """Responsibilities w (n,k), precisions P (k,d,d), g_i = -P_i (x - m_i) (n,k,d), log p (n,)."""
    m = mixture_at(mix, t)
    x = _t(x)
    M, S, W = _t(m["means"]), _t(m["covs"]), _t(m["weights"])
    P = torch.linalg.inv(S)
    diff = x[:, None, :] - M[None]
    g = -torch.einsum("kij,nkj->nki", P, diff)
    d = x.shape[1]
    logn = (-0.5 * (diff * (-g)).sum(-1) - 0.5 * torch.logdet(S)[None] - 0.5 * d * math.log(2 * math.pi)
            + torch.log(W)[None])
    logp = torch.logsumexp(logn, 1)
    return torch.softmax(logn, 1), P, g, logp


def log_pt(mix: dict, x, t):
    """log p_t(x) of the mixture at time t (analytic; data (a))."""
    return _out(_mixture_terms(mix, x, t)[3], x)


def score_pt(mix: dict, x, t):
    """grad log p_t(x) = sum_i w_i(x) g_i, g_i = -P_i (x - m_i) (analytic, derived)."""
    w, _, g, _ = _mixture_terms(mix, x, t)
    return _out((w[..., None] * g).sum(1), x)


def hessian_pt(mix: dict, x, t):
    """Hessian of log p_t: sum_i w_i (-P_i + g_i g_i^T) - s s^T (analytic, derived). (n, d, d)."""
    w, P, g, _ = _mixture_terms(mix, x, t)
    s = (w[..., None] * g).sum(1)
    H = torch.einsum("nk,kij->nij", w, -P) + torch.einsum("nk,nki,nkj->nij", w, g, g) - s[:, :, None] * s[:, None, :]
    return _out(H, x)


# --------------------------------------------------------------------------------------------
# 2. Metrics
# --------------------------------------------------------------------------------------------


def projection_directions(n_projections: int = 64, d: int = 2, seed: int = SW2_SEED) -> np.ndarray:
    """Fixed unit directions for sliced W2 (Gaussian draws normalised; ``default_rng(seed)``)."""
    v = np.random.default_rng(seed).standard_normal((n_projections, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def sliced_w2(X, Y, n_projections: int = 64, seed: int = SW2_SEED, directions=None) -> float:
    """Sliced Wasserstein-2 (our metric; the paper reports FID and NLL): sqrt of the mean over
    directions theta of W2^2 between the 1-D projections; with equal sizes W2^2 = mean (sorted X
    theta - sorted Y theta)^2, otherwise both quantile functions are compared at the midpoints
    (i + 1/2)/m, m = max(sizes)."""
    X, Y = np.asarray(X, float), np.asarray(Y, float)
    V = projection_directions(n_projections, X.shape[1], seed) if directions is None else np.asarray(directions, float)
    px, py = np.sort(X @ V.T, axis=0), np.sort(Y @ V.T, axis=0)
    if px.shape[0] != py.shape[0]:
        m = max(px.shape[0], py.shape[0])
        q = (np.arange(m) + 0.5) / m
        px, py = np.quantile(px, q, axis=0), np.quantile(py, q, axis=0)
    return float(np.sqrt(np.mean((px - py) ** 2)))


def sampling_floor(mix: dict, target, n_draws: int = 4, seed: int = 0) -> float:
    """The sampling floor of sliced W2 against ``target``: the mean over ``n_draws`` fresh target
    samples of ``target``'s size of SW2^2(fresh, target) (ours). It is what an exact sampler's SW2^2
    against this target is in expectation, at this sample size, so ``SW2^2 - floor`` estimates the
    squared distance of the sampler's own distribution, free of the finite-sample term."""
    rng = np.random.default_rng(80_000 + int(seed))
    n = len(target)
    return float(np.mean([sliced_w2(sample_mixture(mix, n, rng), target) ** 2 for _ in range(int(n_draws))]))


def corrected_sw2(sw2: float, floor2: float) -> float:
    """The floor-corrected sliced W2, sqrt(max(SW2^2 - floor, 0)) (ours; see :func:`sampling_floor`)."""
    return math.sqrt(max(float(sw2) ** 2 - float(floor2), 0.0))


def _gauss_terms(g, D, W):
    """Dense V = g (diag D + W W^T) (n, d, d) float64."""
    return g * (torch.diag_embed(D) + W @ W.transpose(-1, -2))


@torch.no_grad()
def nll_bound(reverse_fn, x0, n_steps: int, seed: int = 0) -> float:
    """DDPM-style NLL bound in nats/dim (section 2; our form of the paper's NLL metric): the mean over test points of
    KL(q(x_N | x_0) || N(0, I)) + sum_{k=2}^N KL(N(mu~_k, beta~_k I) || N(m_theta, V_theta))
    - log N(x_0; m_theta(x_1), V_theta(x_1)), divided by d. One forward draw x_k ~ q(x_k | x_0) per
    point and k. The same code for every method; only ``reverse_fn`` differs."""
    x0 = _t(x0)
    n, d = x0.shape
    gen = torch.Generator().manual_seed(30_000 + int(seed))
    grid = time_grid(n_steps)
    ab1 = float(alpha_bar(1.0))
    mq = math.sqrt(ab1) * x0
    total = 0.5 * ((1 - ab1) * d + (mq * mq).sum(-1) - d - d * math.log(1 - ab1))  # prior KL
    for k in range(1, n_steps + 1):
        t, s = grid[k], grid[k - 1]
        abt, abs_ = float(alpha_bar(t)), float(alpha_bar(s))
        xt = math.sqrt(abt) * x0 + math.sqrt(1 - abt) * torch.randn(n, d, generator=gen, dtype=torch.float64)
        mean, g, D, W = reverse_fn(xt, t, s, for_nll=True)
        V = _gauss_terms(g, D, W)
        Lv = torch.linalg.cholesky(V)
        logdetV = 2 * torch.log(torch.diagonal(Lv, dim1=-2, dim2=-1)).sum(-1)
        if k == 1:  # decoder: -log N(x0; mean, V)
            r = (x0 - mean)[..., None]
            quad = (torch.linalg.solve_triangular(Lv, r, upper=False) ** 2).sum((-1, -2))
            total = total + 0.5 * (d * math.log(2 * math.pi) + logdetV + quad)
        else:
            a, sig2 = transition(t, s)
            bt = sig2 * (1 - abs_) / (1 - abt)
            mu = (math.sqrt(abs_) * (1 - a * a) / (1 - abt)) * x0 + (a * (1 - abs_) / (1 - abt)) * xt
            Vinv = torch.cholesky_inverse(Lv)
            r = mu - mean
            quad = torch.einsum("ni,nij,nj->n", r, Vinv, r)
            trace = bt * Vinv.diagonal(dim1=-2, dim2=-1).sum(-1)
            total = total + 0.5 * (trace + quad - d + logdetV - d * math.log(bt))
    return float(total.mean()) / d


def score_jacobian_hessian(net: LMNet, x, t: float) -> torch.Tensor:
    """The Hessian a score model already holds: the symmetrised Jacobian (J + J^T) / 2 of the
    network's score s_theta(x, t) in x, by automatic differentiation (ours; the reference of claim
    c4b). (n, d, d) float64."""
    x = torch.as_tensor(np.asarray(x), dtype=torch.float32).requires_grad_(True)
    score = net(x, float(t))["score"]
    rows = [torch.autograd.grad(score[:, i].sum(), x, retain_graph=True)[0] for i in range(score.shape[1])]
    J = torch.stack(rows, 1).double()
    return 0.5 * (J + J.transpose(-1, -2))


def hessian_error(net: LMNet, mix: dict, t: float, n: int = 1000, seed: int = 0, rank: int | None = None) -> dict:
    """At n fresh points x_t ~ p_t: mean relative Frobenius error ||H_theta - H||_F / ||H||_F (our
    metric; H analytic, :func:`hessian_pt`) of the covariance heads' Hessian (``rel_error``) and
    of the score's Jacobian (``jac_rel_error``, :func:`score_jacobian_hessian`), and the score MSE
    (mean squared error summed over coordinates). ``rank=0`` evaluates the diagonal-only Hessian
    (B4). Returns dict(rel_error, jac_rel_error, score_mse)."""
    rng = np.random.default_rng(40_000 + int(seed))
    ab = float(alpha_bar(float(t)))
    x0 = sample_mixture(mix, n, rng)
    xt = math.sqrt(ab) * x0 + math.sqrt(1 - ab) * rng.standard_normal(x0.shape)
    H = _t(hessian_pt(mix, xt, t))
    norm = torch.linalg.matrix_norm(H)
    jac = torch.linalg.matrix_norm(score_jacobian_hessian(net, xt, t).detach() - H) / norm
    with torch.no_grad():
        out = net(torch.as_tensor(xt, dtype=torch.float32), float(t))
        rel = torch.linalg.matrix_norm(hessian_from_model(out, t, rank=rank) - H) / norm
        smse = ((out["score"] - _t(score_pt(mix, xt, t))) ** 2).sum(-1).mean()
    return dict(rel_error=float(rel.mean()), jac_rel_error=float(jac.mean()), score_mse=float(smse))


#: the t grid of the score errors (issue 41): 20 midpoints (j - 1/2) / 20
SCORE_TS = tuple((j - 0.5) / 20 for j in range(1, 21))


@torch.no_grad()
def score_errors(net: LMNet, mix: dict, ts=SCORE_TS, n: int = 1000, seed: int = 0) -> np.ndarray:
    """e(t) = mean ||eps_theta(x_t, t) - eps*(x_t, t)||^2 at each t of ``ts`` on ``n`` fresh points
    x_t ~ p_t, eps* = -sqrt(1 - alpha_bar_t) grad log p_t (the analytic score): the score error in
    the epsilon parameterisation the losses use (ours, issue 41). The same points for every network
    of a seed. (len(ts),) numpy."""
    rng = np.random.default_rng(45_000 + int(seed))
    out = []
    for t in ts:
        ab = float(alpha_bar(float(t)))
        x0 = sample_mixture(mix, n, rng)
        xt = math.sqrt(ab) * x0 + math.sqrt(1 - ab) * rng.standard_normal(x0.shape)
        eps_true = -math.sqrt(1 - ab) * _t(score_pt(mix, xt, t))
        eps = net(torch.as_tensor(xt, dtype=torch.float32), float(t))["eps"].double()
        out.append(float(((eps - eps_true) ** 2).sum(-1).mean()))
    return np.asarray(out)
