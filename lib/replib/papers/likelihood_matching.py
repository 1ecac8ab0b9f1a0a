"""LM (likelihood matching): training a diffusion model by the Gaussian quasi-likelihood of its reverse
transitions, learning the score and the Hessian of log p_t, at CPU scale.

Paper: Qian, Su, Huang, Chen, "Likelihood Matching for Diffusion Models" (ICML 2026, arXiv
2508.03636). Official code: none found. Only the abstract, summaries and reviews could be read, so
the method is the digest's reconstruction (``/work/shared/papers/likelihood_matching.md``, "Method",
sections 1-6); every item says whether the digest marks it (derived) or (proposed).

Contents (torch for the network, float64 torch/numpy for the Gaussian algebra):

1. Toy data: the 2-D anisotropic Gaussian mixture (:func:`ring_mixture`, :func:`sample_mixture`) and
   its analytic marginals under the forward process (:func:`mixture_at`, :func:`log_pt`,
   :func:`score_pt`, :func:`hessian_pt`).
2. Forward process (section 1): :func:`alpha_bar`, :func:`transition`, :func:`time_grid`,
   :func:`posterior_variance`.
3. Second-order Tweedie (section 3): :func:`tweedie_moments`; the quasi-likelihood in its
   Rao-Blackwellised form (section 4): :func:`quasi_likelihood_rb` (dense C), :func:`smw_terms`
   (section 5, Sherman-Morrison-Woodbury), :func:`covariance_factors`.
4. The network (section 5, "Models"): :class:`LMNet` (shared trunk, heads eps/score, log-diagonal,
   low-rank factor) and :func:`hessian_from_model`; the losses :func:`training_loss` (LM, B3, B4,
   DSM) and :func:`train_model`.
5. Reverse steps and samplers (section 6, baselines B1-B4): :func:`model_reverse_fn`,
   :func:`exact_reverse_fn`, :func:`sample`.
6. Metrics: :func:`projection_directions`, :func:`sliced_w2`,
   :func:`nll_bound` (section 2, DDPM-style KL sum), :func:`hessian_error`.
7. Theory helpers: :func:`path_identity_check`, :func:`tweedie_quadrature_1d`,
   :func:`gaussian_output_covariance`, :func:`reverse_kl_1d`, :func:`smw_check`.
8. Chapter helpers: :data:`EXPERIMENT_PROFILES`, :func:`run_experiment`, :func:`claim_values`, the
   graders :func:`check_tweedie_moments` and :func:`check_sliced_w2`.

Methods (one row label each): ``LM`` (L^RB objective, sampler of section 6 with score and Hessian),
``B1`` (DSM epsilon-loss + DDPM ancestral sampler, reverse variance beta_k := sigma_k^2), ``B2`` (the
same DSM network, posterior variance beta-tilde_k), ``B3`` (LM mean only: C = I in loss and sampler),
``B4`` (LM with diagonal covariance, r = 0). B1 and B2 share one DSM-trained network per seed.

Fidelity notes and resolved ambiguities (ours unless marked):

* Schedule (proposed, section 1): VP with linear beta(t) from 0.1 to 20 on t in [0, 1],
  alpha_bar(t) = exp(-0.1 t - 9.95 t^2); alpha_bar(1) ~ 4.3e-5. The sampler's grid is uniform in t,
  t_k = k / N, k = 0..N.
* Training times: t ~ U(0, 1], Delta = 1/N with N drawn uniformly from the profile's
  ``n_steps_grid`` (the grid spacings used at test), s = max(t - Delta, 0) (proposed). All methods
  see the same stream of (x0, t, Delta, eps) for a given seed.
* Network: ``MLP([2 + 16, 64, 64, 64, 2 + 2 + 2 r], activation="silu")`` from
  :mod:`replib.models.mlp`, the digest's 3 x 64 SiLU trunk, input x_t concatenated with a 16-d
  sinusoidal embedding of t (8 geometric frequencies 1..200 rad). (A first version used tanh, which
  saturates: eps_theta stayed bounded for far-out x and the sampler's 1/a expansion, up to
  1/sqrt(alpha_bar_1) ~ 150x, produced rare samples at |x| ~ 40 that dominated SW2. SiLU, like ReLU,
  grows linearly for large inputs.) The
  output layer's three slices are the heads. Rank r = 1: in 2-D every positive-definite 2 x 2 matrix
  is diag(positive) + a rank-1 term, so r = 1 loses nothing.
* Score head: epsilon parameterisation, s_theta = -eps_theta / sqrt(1 - alpha_bar_t), the same for
  DSM and LM (so the DSM loss is the usual ||eps_theta - eps||^2 and the LM score-matching term is
  sigma^2 / (1 - alpha_bar_t) (eps_theta - eps)^T C^{-1} (eps_theta - eps)).
* Covariance heads (section 5, proposed form Sigma_theta = diag(e^lambda) + L L^T for Cov[X0 | x_t]):
  we scale by the forward variance so the heads output O(1) numbers at every t:
  lambda = clamp(raw, -10, 5) + log(1 - alpha_bar_t), L = raw_L sqrt(1 - alpha_bar_t) (ours; the
  digest's clamp is applied to the raw head). D gets + 1e-5 (digest's jitter).
* LM objective: the Rao-Blackwellised L^RB of section 4 (proposed), averaged over the batch with no
  time weighting; C = I for the first 10 % of steps (the digest's proposed warm start), for LM and B4.
* Optimiser: Adam, constant learning rate with cosine decay to 0 over the run (ours), no clipping;
  fresh mixture samples every step (infinite data).
* Samplers: every method draws from its own reverse Gaussian at every step, the last (s = 0)
  included; for B2 beta-tilde_1 = 0, so its last step is the deterministic mean (standard DDPM).
  B3's reverse variance is sigma_k^2 / a_k^2 I (section 3 with C = I), B1's sigma_k^2 I.
* NLL bound (section 2): KL(q(x_N|x_0) || N(0, I)) + sum_{k >= 2} KL(q(x_{k-1}|x_k, x_0) ||
  p_theta(x_{k-1}|x_k)) - log p_theta(x_0 | x_1), one forward draw of x_k per test point and k,
  divided by d (nats/dim, continuous data, no dequantisation, so it can be negative). Identical code
  for every method; only the reverse Gaussian differs. B2's decoder (k = 1) would have zero variance,
  so in the bound it uses beta_1 = sigma_1^2 (the DDPM decoder convention).
* Hessian error: H_theta = -I/(1 - alpha_bar) + alpha_bar/(1 - alpha_bar)^2 Sigma_theta at fresh x_t ~
  p_t; relative Frobenius error per point, averaged over points. B1/B3 have no trained Hessian (NaN).
* Outliers: SW2 is sensitive to a handful of far-out samples; a method whose network extrapolates
  badly shows it as a large SW2 (the metric is kept as declared; look at the scatter plots).
* B3's reverse variance sigma^2/a^2 is large for coarse steps (about 36 on the first step at N = 5),
  which is what C = I implies in section 3; its NLL and SW2 at small N reflect that.
* SW2: 64 unit directions from ``numpy.random.default_rng(12345)``; with equal sizes the 1-D W2 is the
  mean squared difference of sorted projections; SW2 = sqrt(mean over directions).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch import nn

from replib.core.runtime import compute_threads
from replib.models.mlp import MLP

__all__ = [
    "BETA_MIN", "BETA_MAX", "METHODS", "METHOD_LABELS",
    "ring_mixture", "sample_mixture", "mixture_at", "log_pt", "score_pt", "hessian_pt",
    "alpha_bar", "transition", "time_grid", "posterior_variance",
    "tweedie_moments", "quasi_likelihood_rb", "smw_terms", "covariance_factors",
    "LMNet", "hessian_from_model", "training_loss", "train_model",
    "model_reverse_fn", "exact_reverse_fn", "sample",
    "projection_directions", "sliced_w2", "nll_bound", "hessian_error",
    "path_identity_check", "tweedie_quadrature_1d", "gaussian_output_covariance", "reverse_kl_1d",
    "smw_check",
    "EXPERIMENT_PROFILES", "run_experiment", "claim_values", "check_tweedie_moments", "check_sliced_w2",
]

BETA_MIN, BETA_MAX = 0.1, 20.0
METHODS = ["LM", "B1", "B2", "B3", "B4", "LMsg"]
METHOD_LABELS = {
    "LM": "LM (score + Hessian)",
    "B1": "DSM + DDPM, beta_k",
    "B2": "DSM + DDPM, beta-tilde_k",
    "B3": "LM mean only (C = I)",
    "B4": "LM diagonal (r = 0)",
    "LMsg": "LM, decoupled gradients (ours)",
}
#: which trained network each method uses
OBJECTIVE_OF = {"LM": "lm", "B1": "dsm", "B2": "dsm", "B3": "lm_mean", "B4": "lm_diag", "LMsg": "lm_sg"}
JITTER = 1e-5
SW2_SEED = 12345


def _t(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x, dtype=torch.float64)


def _out(y: torch.Tensor, like):
    return y if isinstance(like, torch.Tensor) else y.numpy()


# --------------------------------------------------------------------------------------------
# 1. Toy data: the anisotropic ring mixture and its analytic p_t
# --------------------------------------------------------------------------------------------


def ring_mixture(k: int = 6, radius: float = 2.0, var_tangent: float = 0.3, var_radial: float = 0.01) -> dict:
    """The digest's toy ("Minimal CPU replication", data (a)): ``k`` equal-weight Gaussians with means
    on a circle of ``radius`` and covariances elongated tangentially (eigenvalues ``var_tangent``
    along the circle, ``var_radial`` across it). Radius 2 is ours. Returns dict(weights (k,),
    means (k, 2), covs (k, 2, 2)) of float64 arrays."""
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
    """The forward marginal p_t of a Gaussian mixture (digest, data (a)): again a mixture, with means
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
# 2. Forward process (digest section 1)
# --------------------------------------------------------------------------------------------


def alpha_bar(t):
    """alpha_bar(t) = exp(-beta_min t - (beta_max - beta_min) t^2 / 2), beta 0.1 -> 20 (section 1,
    proposed). Works on floats, numpy arrays and torch tensors."""
    lib = torch if isinstance(t, torch.Tensor) else np
    return lib.exp(-BETA_MIN * t - 0.5 * (BETA_MAX - BETA_MIN) * t * t)


def transition(t, s):
    """(a, sigma^2) of X_t | X_s ~ N(a X_s, sigma^2 I): a = sqrt(alpha_bar_t / alpha_bar_s),
    sigma^2 = 1 - alpha_bar_t / alpha_bar_s (section 1)."""
    r = alpha_bar(t) / alpha_bar(s)
    lib = torch if isinstance(r, torch.Tensor) else np
    return lib.sqrt(r), 1 - r


def time_grid(n_steps: int) -> np.ndarray:
    """The sampler's grid 0 = t_0 < ... < t_N = 1, uniform in t (ours; the digest leaves the grid open)."""
    return np.linspace(0.0, 1.0, int(n_steps) + 1)


def posterior_variance(t, s):
    """beta-tilde = sigma^2_{t|s} (1 - alpha_bar_s) / (1 - alpha_bar_t), the variance of the DDPM
    posterior q(x_s | x_t, x_0) (section 4)."""
    _, sig2 = transition(t, s)
    return sig2 * (1 - alpha_bar(s)) / (1 - alpha_bar(t))


# --------------------------------------------------------------------------------------------
# 3. Second-order Tweedie and the quasi-likelihood
# --------------------------------------------------------------------------------------------


def tweedie_moments(x, score, hess, a, sigma2):
    """Second-order Tweedie (section 3, derived, exact): E[X_s | x_t] = (x + sigma^2 score) / a and
    Cov[X_s | x_t] = sigma^2 / a^2 (I + sigma^2 H). ``x``, ``score``: (..., d); ``hess``: (..., d, d).
    Numpy or torch; returns (mean, cov)."""
    lib = torch if isinstance(x, torch.Tensor) else np
    d = x.shape[-1]
    eye = lib.eye(d, dtype=hess.dtype) if lib is torch else np.eye(d)
    mean = (x + sigma2 * score) / a
    cov = sigma2 / a**2 * (eye + sigma2 * hess)
    return mean, cov


def quasi_likelihood_rb(score, C, s0, sigma2, kappa):
    """Rao-Blackwellised LM loss per sample (section 4, proposed; dense C):
    L^RB = 1/2 log det C + 1/2 sigma^2 (s - s0)^T C^{-1} (s - s0) + 1/2 kappa tr(C^{-1}).
    ``score``, ``s0``: (n, d); ``C``: (n, d, d) SPD; ``sigma2``, ``kappa``: scalars or (n,). Torch
    (float64 recommended); returns (n,)."""
    score, C, s0 = (_t(v) for v in (score, C, s0))
    r = score - s0
    Ci = torch.linalg.inv(C)
    quad = torch.einsum("ni,nij,nj->n", r, Ci, r)
    return 0.5 * torch.logdet(C) + 0.5 * _t(sigma2) * quad + 0.5 * _t(kappa) * Ci.diagonal(dim1=-2, dim2=-1).sum(-1)


def smw_terms(D, W, v):
    """For C = diag(D) + W W^T (section 5, proposed; Sherman-Morrison-Woodbury and the determinant
    lemma, O(d r^2)): returns (log det C, v^T C^{-1} v, tr C^{-1}). D (n, d) > 0, W (n, d, r) with r >= 0,
    v (n, d)."""
    Dinv = 1.0 / D
    logdet = torch.log(D).sum(-1)
    quad = (v * v * Dinv).sum(-1)
    tr = Dinv.sum(-1)
    r = W.shape[-1]
    if r > 0:
        DiW = Dinv[..., None] * W  # D^{-1} W
        K = torch.eye(r, dtype=W.dtype) + torch.einsum("ndr,nds->nrs", W, DiW)
        Lk = torch.linalg.cholesky(K)
        logdet = logdet + 2 * torch.log(torch.diagonal(Lk, dim1=-2, dim2=-1)).sum(-1)
        u = torch.einsum("ndr,nd->nr", DiW, v)  # W^T D^{-1} v
        Ku = torch.cholesky_solve(u[..., None], Lk)[..., 0]
        quad = quad - (u * Ku).sum(-1)
        KiB = torch.cholesky_solve(torch.einsum("ndr,nds->nrs", DiW, DiW), Lk)  # K^{-1} W^T D^{-2} W
        tr = tr - torch.diagonal(KiB, dim1=-2, dim2=-1).sum(-1)
    return logdet, quad, tr


def covariance_factors(lam, L, t, s):
    """C_theta = D + W W^T from Sigma_theta = diag(e^lambda) + L L^T (section 5, proposed):
    D = kappa + c e^lambda + jitter, W = sqrt(c) L, c = sigma^2 alpha_bar_t / (1 - alpha_bar_t)^2,
    kappa = 1 - sigma^2 / (1 - alpha_bar_t). ``t``, ``s``: (n,) tensors. Returns (D, W, kappa)."""
    ab = alpha_bar(t)
    _, sig2 = transition(t, s)
    kappa = (1 - sig2 / (1 - ab)).clamp_min(0.0)
    c = sig2 * ab / (1 - ab) ** 2
    D = kappa[:, None] + c[:, None] * torch.exp(lam) + JITTER
    W = torch.sqrt(c)[:, None, None] * L
    return D, W, kappa


# --------------------------------------------------------------------------------------------
# 4. The network, the losses and training
# --------------------------------------------------------------------------------------------


class LMNet(nn.Module):
    """Shared trunk + heads (digest "Models"; section 5): ``MLP([d + 16, 64, 64, 64, 2 d + d r],
    silu)`` on (x_t, sinusoidal embedding of t). Heads (slices of the last layer): eps (d; score
    s = -eps / sqrt(1 - alpha_bar_t)), log-diagonal lambda (d) and low-rank factor L (d x r) of
    Sigma_theta ~ Cov[X_0 | x_t], scaled by the forward variance (module notes). The same network
    for every method; DSM and B3 leave the covariance heads untrained."""

    def __init__(self, d: int = 2, rank: int = 1, hidden: int = 64, depth: int = 3, emb: int = 16, seed: int = 0,
                 activation: str = "silu"):
        super().__init__()
        self.d, self.rank = int(d), int(rank)
        self.register_buffer("freqs", torch.as_tensor(np.geomspace(1.0, 200.0, emb // 2), dtype=torch.float32))
        self.trunk = MLP([d + emb] + [hidden] * depth + [2 * d + d * rank], seed=seed, activation=activation)

    def forward(self, x, t):
        """Returns dict(eps (n,d), score (n,d), lam (n,d), L (n,d,r)); ``t`` (n,) or a float."""
        x = torch.as_tensor(x, dtype=torch.float32)
        t = torch.as_tensor(t, dtype=torch.float32)
        if t.ndim == 0:
            t = t.expand(x.shape[0])
        ang = t[:, None] * self.freqs[None]
        out = self.trunk(torch.cat([x, torch.sin(ang), torch.cos(ang)], 1))
        d, r = self.d, self.rank
        var = 1 - alpha_bar(t.double())
        eps = out[:, :d]
        lam = out[:, d:2 * d].double().clamp(-10.0, 5.0) + torch.log(var)[:, None]
        L = out[:, 2 * d:].double().reshape(-1, d, r) * torch.sqrt(var)[:, None, None]
        return dict(eps=eps, score=-eps.double() / torch.sqrt(var)[:, None], lam=lam, L=L)


def hessian_from_model(out: dict, t, rank: int | None = None) -> torch.Tensor:
    """H_theta = -I / (1 - alpha_bar_t) + alpha_bar_t / (1 - alpha_bar_t)^2 Sigma_theta (section 5,
    proposed), Sigma_theta = diag(e^lambda) + L L^T (``rank=0`` drops L: B4). (n, d, d) float64."""
    lam, L = out["lam"], out["L"]
    if rank == 0:
        L = L[..., :0]
    n, d = lam.shape
    t = torch.as_tensor(t, dtype=torch.float64).expand(n)
    ab = alpha_bar(t)
    Sig = torch.diag_embed(torch.exp(lam)) + L @ L.transpose(-1, -2)
    return -torch.eye(d, dtype=torch.float64) / (1 - ab)[:, None, None] + (ab / (1 - ab) ** 2)[:, None, None] * Sig


def training_loss(net: LMNet, x0, t, s, eps, objective: str, identity_cov: bool = False) -> torch.Tensor:
    """Batch-mean loss of one objective on (x0, t, s, eps), x_t = sqrt(alpha_bar_t) x0 + sqrt(1 -
    alpha_bar_t) eps:

    * ``dsm``: ||eps_theta - eps||^2 (B1/B2; standard epsilon-loss, uniform in t).
    * ``lm``: L^RB of section 4 (proposed) with C = D + W W^T (section 5), via SMW.
    * ``lm_diag``: the same with W = 0 (B4, r = 0).
    * ``lm_mean``: L^RB with C = I, i.e. 1/2 sigma^2 / (1 - alpha_bar_t) ||eps_theta - eps||^2 (B3).
    * ``lm_sg`` (ours, exploratory, not the paper's): the same value as ``lm``, but the score's
      gradient is that of the identity-weighted term 1/2 sigma^2 / (1 - alpha_bar_t) ||eps_theta -
      eps||^2 (B3's), and the covariance heads see the residual held fixed: the analogue of beta-NLL
      (Seitzer et al., 2022) for the mean-variance coupling of Gaussian likelihoods, where a poor
      score inflates C and C^{-1} then down-weights the score's own error. Both minimisers (the true
      score, C*) are unchanged.
    ``identity_cov=True`` forces C = I (the warm start of LM/B4). In terms of eps, sigma^2 (s_theta -
    s_0) = -sigma^2 / sqrt(1 - alpha_bar_t) (eps_theta - eps), s_0 = -eps / sqrt(1 - alpha_bar_t)."""
    ab = alpha_bar(t.double()).float()
    xt = torch.sqrt(ab)[:, None] * x0 + torch.sqrt(1 - ab)[:, None] * eps
    out = net(xt, t)
    if objective == "dsm":
        return ((out["eps"] - eps) ** 2).sum(-1).mean()
    td, sd = t.double(), s.double()
    _, sig2 = transition(td, sd)
    abd = alpha_bar(td)
    v = (out["eps"].double() - eps.double())
    if objective == "lm_mean" or identity_cov:
        return (0.5 * sig2 / (1 - abd) * (v * v).sum(-1)).mean().float()
    if objective not in ("lm", "lm_diag", "lm_sg"):
        raise ValueError(f"unknown objective {objective!r}")
    L = out["L"][..., :0] if objective == "lm_diag" else out["L"]
    D, W, kappa = covariance_factors(out["lam"], L, td, sd)
    logdet, quad, tr = smw_terms(D, W, v)
    if objective == "lm_sg":  # same value; the score's gradient is the identity-weighted one
        vd = v.detach()
        quad = smw_terms(D, W, vd)[1] + (v * v).sum(-1) - (vd * vd).sum(-1)
    # sigma^2 (s - s0)^T C^-1 (s - s0) = sigma^2 / (1 - ab) v^T C^-1 v
    loss = 0.5 * logdet + 0.5 * sig2 / (1 - abd) * quad + 0.5 * kappa * tr
    return loss.mean().float()


def train_model(objective: str, seed: int = 0, steps: int = 1500, batch_size: int = 256, lr: float = 2e-3,
                n_steps_grid=(5, 10, 20, 50, 200), rank: int = 1, warmup_frac: float = 0.1,
                mix: dict | None = None) -> tuple[LMNet, dict]:
    """Train one :class:`LMNet` with ``objective`` (``dsm``, ``lm``, ``lm_mean``, ``lm_diag``): Adam,
    cosine-decayed lr, fresh mixture samples each step; t ~ U(0, 1], Delta = 1/N with N uniform over
    ``n_steps_grid``, s = max(t - Delta, 0) (proposed). The data stream depends on ``seed`` only, so
    every objective sees the same (x0, t, Delta, eps). C = I for the first ``warmup_frac`` of the
    steps for ``lm``/``lm_diag`` (the digest's proposed warm start). Returns (net, info) with info
    dict(seconds, final_loss)."""
    mix = ring_mixture() if mix is None else mix
    net = LMNet(d=mix["means"].shape[1], rank=rank, seed=seed)
    gen = torch.Generator().manual_seed(10_000 + int(seed))
    grid = torch.as_tensor([1.0 / n for n in n_steps_grid], dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(int(steps), 1))
    warm = int(round(warmup_frac * steps)) if objective in ("lm", "lm_diag", "lm_sg") else 0
    start = time.perf_counter()
    losses = []
    for k in range(int(steps)):
        x0 = sample_mixture(mix, batch_size, generator=gen)
        t = 1.0 - torch.rand(batch_size, generator=gen)  # U(0, 1]
        delta = grid[torch.randint(len(grid), (batch_size,), generator=gen)]
        s = (t - delta).clamp_min(0.0)
        eps = torch.randn(batch_size, x0.shape[1], generator=gen)
        loss = training_loss(net, x0, t, s, eps, objective, identity_cov=k < warm)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    net.eval()
    tail = losses[-max(1, len(losses) // 10):]
    return net, dict(seconds=time.perf_counter() - start, final_loss=float(np.mean(tail)) if tail else float("nan"))


# --------------------------------------------------------------------------------------------
# 5. Reverse steps and samplers (section 6; baselines B1-B4)
# --------------------------------------------------------------------------------------------
# A reverse function maps (x (n,d) float64, t, s, for_nll) to (mean, g, D, W) with the reverse
# Gaussian N(mean, g (diag(D) + W W^T)); g is a float, D (n,d) >= 0, W (n,d,r).


ISOTROPIC = {"B1": "beta", "B2": "beta_tilde", "B3": "identity"}  # baselines' reverse variances


def isotropic_reverse(mean, t, s, variance: str, for_nll: bool = False):
    """The reverse Gaussian N(mean, g I) of the isotropic samplers, as (mean, g, D = 1, W = empty):
    "beta": g = sigma^2 (B1, beta_k); "beta_tilde": g = beta-tilde (B2; beta_1 = sigma_1^2 in the NLL
    decoder, where beta-tilde_1 = 0, module notes); "identity": g = sigma^2 / a^2 (B3, C = I)."""
    n, d = mean.shape
    a, sig2 = transition(float(t), float(s))
    g = {"beta": sig2, "identity": sig2 / a**2}.get(variance)
    if variance == "beta_tilde":
        bt = float(posterior_variance(float(t), float(s)))
        g = sig2 if (for_nll and bt <= 0) else bt
    if g is None:
        raise ValueError(f"unknown variance {variance!r}; valid: beta, beta_tilde, identity")
    return mean, g, torch.ones(n, d, dtype=torch.float64), torch.zeros(n, d, 0, dtype=torch.float64)


def model_reverse_fn(net: LMNet, method: str):
    """The reverse Gaussian of ``method`` with network ``net`` (section 3 mean m = (x + sigma^2
    s_theta)/a for every method): LM (and LMsg): g = sigma^2/a^2, C = D + W W^T (sections 5-6); B4:
    the same with W = 0; B1, B2, B3: :func:`isotropic_reverse`."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}")

    @torch.no_grad()
    def fn(x, t, s, for_nll=False):
        n, d = x.shape
        a, sig2 = transition(float(t), float(s))
        out = net(x.float(), float(t))
        mean = (x + sig2 * out["score"]) / a
        if method in ISOTROPIC:
            return isotropic_reverse(mean, t, s, ISOTROPIC[method], for_nll)
        L = out["L"] if method in ("LM", "LMsg") else out["L"][..., :0]
        tt = torch.full((n,), float(t), dtype=torch.float64)
        D, W, _ = covariance_factors(out["lam"], L, tt, torch.full_like(tt, float(s)))
        return mean, sig2 / a**2, D, W

    return fn


def exact_reverse_fn(score_fn, hess_fn, variance: str = "LM"):
    """Reverse Gaussian from exact (or any) score and Hessian functions f(x, t): ``variance`` "LM"
    gives the matched moments of section 3 (W = Cholesky factor of C, D = 0); "beta", "beta_tilde",
    "identity" give the B1/B2/B3 isotropic variances with the same mean."""

    def fn(x, t, s, for_nll=False):
        n, d = x.shape
        a, sig2 = transition(float(t), float(s))
        mean = (x + sig2 * _t(score_fn(x, t))) / a
        if variance != "LM":
            return isotropic_reverse(mean, t, s, variance, for_nll)
        C = torch.eye(d, dtype=torch.float64) + sig2 * _t(hess_fn(x, t))
        evals, evecs = torch.linalg.eigh(C)
        W = evecs * torch.sqrt(evals.clamp_min(0.0))[:, None, :]
        return mean, sig2 / a**2, torch.zeros(n, d, dtype=torch.float64), W

    return fn


def sample(reverse_fn, n: int, n_steps: int, d: int = 2, seed: int = 0) -> np.ndarray:
    """Ancestral sampling on the uniform grid (section 6): x_N ~ N(0, I); for k = N..1,
    x_{k-1} = mean + sqrt(g) (D^{1/2} z_1 + W z_2) (exact draw from the reverse Gaussian; for LM this
    is the digest's stochastic sampler). Noise is added at every step (module notes). (n, d) numpy."""
    gen = torch.Generator().manual_seed(20_000 + int(seed))
    grid = time_grid(n_steps)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    for k in range(n_steps, 0, -1):
        mean, g, D, W = reverse_fn(x, grid[k], grid[k - 1])
        z1 = torch.randn(n, d, generator=gen, dtype=torch.float64)
        z2 = torch.randn(n, W.shape[-1], generator=gen, dtype=torch.float64)
        noise = torch.sqrt(D) * z1 + torch.einsum("ndr,nr->nd", W, z2)
        x = mean + math.sqrt(max(float(g), 0.0)) * noise
    return x.numpy()


# --------------------------------------------------------------------------------------------
# 6. Metrics
# --------------------------------------------------------------------------------------------


def projection_directions(n_projections: int = 64, d: int = 2, seed: int = SW2_SEED) -> np.ndarray:
    """Fixed unit directions for sliced W2 (Gaussian draws normalised; ``default_rng(seed)``)."""
    v = np.random.default_rng(seed).standard_normal((n_projections, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def sliced_w2(X, Y, n_projections: int = 64, seed: int = SW2_SEED, directions=None) -> float:
    """Sliced Wasserstein-2 (digest "Metrics"): sqrt of the mean over directions theta of W2^2 between
    the 1-D projections; with equal sizes W2^2 = mean (sorted X theta - sorted Y theta)^2, otherwise
    both quantile functions are compared at the midpoints (i + 1/2)/m, m = max(sizes)."""
    X, Y = np.asarray(X, float), np.asarray(Y, float)
    V = projection_directions(n_projections, X.shape[1], seed) if directions is None else np.asarray(directions, float)
    px, py = np.sort(X @ V.T, axis=0), np.sort(Y @ V.T, axis=0)
    if px.shape[0] != py.shape[0]:
        m = max(px.shape[0], py.shape[0])
        q = (np.arange(m) + 0.5) / m
        px, py = np.quantile(px, q, axis=0), np.quantile(py, q, axis=0)
    return float(np.sqrt(np.mean((px - py) ** 2)))


def _gauss_terms(g, D, W):
    """Dense V = g (diag D + W W^T) (n, d, d) float64."""
    return g * (torch.diag_embed(D) + W @ W.transpose(-1, -2))


@torch.no_grad()
def nll_bound(reverse_fn, x0, n_steps: int, seed: int = 0) -> float:
    """DDPM-style NLL bound in nats/dim (section 2; digest "Metrics"): the mean over test points of
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


@torch.no_grad()
def hessian_error(net: LMNet, mix: dict, t: float, n: int = 1000, seed: int = 0, rank: int | None = None) -> dict:
    """At n fresh points x_t ~ p_t: mean relative Frobenius error ||H_theta - H||_F / ||H||_F (digest
    "Metrics"; H analytic, :func:`hessian_pt`) and the score MSE (mean squared error summed over
    coordinates). ``rank=0`` evaluates the diagonal-only Hessian (B4). Returns dict(rel_error, score_mse)."""
    rng = np.random.default_rng(40_000 + int(seed))
    ab = float(alpha_bar(float(t)))
    x0 = sample_mixture(mix, n, rng)
    xt = math.sqrt(ab) * x0 + math.sqrt(1 - ab) * rng.standard_normal(x0.shape)
    out = net(torch.as_tensor(xt, dtype=torch.float32), float(t))
    H = _t(hessian_pt(mix, xt, t))
    Hm = hessian_from_model(out, t, rank=rank)
    rel = torch.linalg.matrix_norm(Hm - H) / torch.linalg.matrix_norm(H)
    smse = ((out["score"] - _t(score_pt(mix, xt, t))) ** 2).sum(-1).mean()
    return dict(rel_error=float(rel.mean()), score_mse=float(smse))


# --------------------------------------------------------------------------------------------
# 7. Theory helpers (theory notebook outline)
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# 8. Chapter helpers: profiles, the experiment, claim values, exercise graders
# --------------------------------------------------------------------------------------------

EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], train_steps=150, batch_size=256, lr=2e-3, n_samples=500, n_nll=200,
                  n_steps_grid=[5, 10], methods=["LM", "B1", "B2", "B3"], rank=1,
                  hess_ts=[0.1, 0.3, 0.6], n_hess=200, ellipse_t=0.3),
    "book": dict(seeds=[0, 1, 2], train_steps=1500, batch_size=256, lr=2e-3, n_samples=4000, n_nll=2000,
                 n_steps_grid=[5, 10, 20, 50, 200], methods=["LM", "B1", "B2", "B3", "B4", "LMsg"], rank=1,
                 hess_ts=[0.1, 0.3, 0.6], n_hess=1000, ellipse_t=0.3),
    "paper": dict(seeds=[0, 1, 2, 3, 4], train_steps=3000, batch_size=256, lr=2e-3, n_samples=4000, n_nll=2000,
                  n_steps_grid=[5, 10, 20, 50, 200], methods=["LM", "B1", "B2", "B3", "B4", "LMsg"], rank=1,
                  hess_ts=[0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8], n_hess=1000, ellipse_t=0.3),
}


def _ellipses(net: LMNet, mix: dict, t: float, n_steps: int = 10, n_points: int = 6, seed: int = 0) -> list[dict]:
    """For a few x_t points (one draw near each mixture mean, pushed to time t) the true
    reverse-transition covariance (section 3 with the analytic Hessian), LM's, and B1's/B2's isotropic
    ones, for the step s = t - 1/n_steps."""
    s = max(t - 1.0 / n_steps, 0.0)
    ab = float(alpha_bar(t))
    rng = np.random.default_rng(50_000 + seed)
    x0 = sample_mixture(mix, n_points, rng)
    xt = math.sqrt(ab) * x0 + math.sqrt(1 - ab) * rng.standard_normal(x0.shape)
    a, sig2 = transition(t, s)
    H = hessian_pt(mix, xt, t)
    mean_true, V_true = tweedie_moments(xt, score_pt(mix, xt, t), H, a, sig2)
    m, g, D, W = model_reverse_fn(net, "LM")(_t(xt), t, s)
    V_lm = _gauss_terms(g, D, W).numpy()
    out = []
    for i in range(n_points):
        out.append(dict(xt=xt[i], t=t, s=s, mean_true=mean_true[i], cov_true=V_true[i], mean_lm=m[i].numpy(),
                        cov_lm=V_lm[i], cov_b1=sig2 * np.eye(2), cov_b2=float(posterior_variance(t, s)) * np.eye(2)))
    return out


def run_experiment(cfg, progress=None, threads: int = 1):
    """Every method of ``cfg.methods`` on every seed (``cfg``: a profile namespace with seeds,
    train_steps, batch_size, lr, n_samples, n_nll, n_steps_grid, methods, rank, hess_ts, n_hess,
    ellipse_t). Per seed: one network per objective needed (DSM shared by B1/B2), trained by
    :func:`train_model`; then for every method and N in ``n_steps_grid``: ``n_samples`` samples
    (:func:`sample`) against ``n_samples`` fresh target draws (SW2, 64 fixed projections) and the NLL
    bound on ``n_nll`` held-out points; then Hessian error and score MSE at ``hess_ts`` for each
    method's network. Runs inside :func:`compute_threads` (``threads``).

    Returns ``(rows, extras)``. rows: dicts with ``kind`` "sampling" (seed, method, n_steps, sw2, nll,
    sample_seconds) or "hessian" (seed, method, t, rel_error, score_mse; rel_error NaN for B1-B3,
    whose covariance heads are untrained). extras: ``mixture``, ``target`` (first seed's target
    draws), ``samples`` ({(method, N): array}, first seed), ``ellipses`` (first seed, LM network),
    ``train`` (list of dicts seed, objective, seconds, final_loss)."""
    methods = list(cfg.methods)
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}")
    mix = ring_mixture()
    rows: list[dict] = []
    extras: dict = dict(mixture=mix, samples={}, target=None, ellipses=[], train=[])
    grid = [int(n) for n in cfg.n_steps_grid]
    with compute_threads(threads):
        jobs = list(cfg.seeds)
        it = progress(jobs, total=len(jobs)) if progress is not None else jobs
        for seed in it:
            nets = {}
            for obj in dict.fromkeys(OBJECTIVE_OF[m] for m in methods):
                net, info = train_model(obj, seed, cfg.train_steps, cfg.batch_size, cfg.lr, grid, cfg.rank, mix=mix)
                nets[obj] = net
                extras["train"].append(dict(seed=seed, objective=obj, **info))
            target = sample_mixture(mix, cfg.n_samples, np.random.default_rng(60_000 + seed))
            test = sample_mixture(mix, cfg.n_nll, np.random.default_rng(70_000 + seed))
            if seed == cfg.seeds[0]:
                extras["target"] = target
                if "lm" in nets:
                    extras["ellipses"] = _ellipses(nets["lm"], mix, cfg.ellipse_t, seed=seed)
            for m in methods:
                fn = model_reverse_fn(nets[OBJECTIVE_OF[m]], m)
                for N in grid:
                    t0 = time.perf_counter()
                    X = sample(fn, cfg.n_samples, N, seed=seed)
                    sec = time.perf_counter() - t0
                    rows.append(dict(kind="sampling", seed=seed, method=m, n_steps=N, sw2=sliced_w2(X, target),
                                     nll=nll_bound(fn, test, N, seed=seed), sample_seconds=sec))
                    if seed == cfg.seeds[0]:
                        extras["samples"][(m, N)] = X
                rank = {"LM": None, "LMsg": None, "B4": 0}.get(m)
                for t in cfg.hess_ts:
                    he = hessian_error(nets[OBJECTIVE_OF[m]], mix, t, cfg.n_hess, seed, rank=rank)
                    if m not in ("LM", "LMsg", "B4"):
                        he["rel_error"] = float("nan")
                    rows.append(dict(kind="hessian", seed=seed, method=m, t=float(t), **he))
    return rows, extras


def _records(obj) -> list[dict]:
    """A list of dicts from a list of dicts or a DataFrame."""
    return obj.to_dict("records") if hasattr(obj, "to_dict") else list(obj)


def claim_values(rows, method: str = "LM") -> dict:
    """Per-seed values of the claims of ``chapter.yml`` from :func:`run_experiment`'s rows (list of
    dicts or DataFrame); NaN where a needed method / N / t is absent. Returns {seed: {claim_id: value}}:
    c1_few_steps_sw2 = SW2(LM, 10) / min(SW2(B1, 10), SW2(B2, 10));
    c2_nll_bound = min(NLL(B1, 20), NLL(B3, 20)) - NLL(LM, 20);
    c3_convergence = |SW2(LM, 200) - SW2(B2, 200)| / SW2(B2, 200);
    c4_hessian_learned = LM's mean relative Frobenius error at t = 0.3.
    ``method`` replaces LM by another method in every formula (e.g. the exploratory "LMsg")."""
    nan = float("nan")
    samp: dict = {}
    hess: dict = {}
    seeds = []
    for r in _records(rows):
        if r["seed"] not in seeds:
            seeds.append(r["seed"])
        if r.get("kind", "sampling") == "hessian":
            hess[(r["seed"], r["method"], round(float(r["t"]), 6))] = float(r["rel_error"])
        else:
            samp[(r["seed"], r["method"], int(r["n_steps"]))] = r
    out = {}
    for seed in seeds:

        def g(m, n, key, seed=seed):
            r = samp.get((seed, m, n))
            return float(r[key]) if r is not None else nan

        b = min(g("B1", 10, "sw2"), g("B2", 10, "sw2")) if not (math.isnan(g("B1", 10, "sw2")) or math.isnan(g("B2", 10, "sw2"))) else nan
        c1 = g(method, 10, "sw2") / b if b == b and b != 0 else nan
        c2 = min(g("B1", 20, "nll"), g("B3", 20, "nll")) - g(method, 20, "nll")
        if math.isnan(g("B1", 20, "nll")) or math.isnan(g("B3", 20, "nll")):
            c2 = nan
        b2 = g("B2", 200, "sw2")
        c3 = abs(g(method, 200, "sw2") - b2) / b2 if b2 == b2 and b2 != 0 else nan
        out[seed] = {
            "c1_few_steps_sw2": float(c1),
            "c2_nll_bound": float(c2),
            "c3_convergence": float(c3),
            "c4_hessian_learned": hess.get((seed, method, 0.3), nan),
        }
    return out


def _tweedie_reference(x, score, hess, a, sigma2):
    return tweedie_moments(np.asarray(x, float), np.asarray(score, float), np.asarray(hess, float), a, sigma2)


def check_tweedie_moments(fn) -> None:
    """Grade ``fn(x, score, hess, a, sigma2) -> (mean, cov)``, the second-order Tweedie moments of
    section 3 for one point x (d,), score (d,), Hessian (d, d)."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(3)
    cases = []
    for d, (t, s) in [(1, (0.3, 0.2)), (2, (0.5, 0.1)), (2, (0.9, 0.0)), (3, (0.2, 0.15))]:
        A = rng.standard_normal((d, d))
        a, sig2 = transition(t, s)
        cases.append((rng.standard_normal(d), rng.standard_normal(d), -(A @ A.T) - np.eye(d), float(a), float(sig2)))
    grade(fn, _tweedie_reference, cases, name="tweedie_moments")


def check_sliced_w2(fn) -> None:
    """Grade ``fn(X, Y, directions) -> float``, the sliced W2 of two equal-size point sets along the
    given unit directions (n_proj, d)."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(5)
    cases = []
    for n, d, k in [(50, 2, 8), (100, 2, 64), (30, 3, 16)]:
        X = rng.standard_normal((n, d))
        cases.append((X, X * 1.5 + 0.3, projection_directions(k, d, seed=k)))
    cases.append((cases[0][0], cases[0][0].copy(), projection_directions(4, 2, 1)))
    grade(fn, lambda X, Y, V: sliced_w2(X, Y, directions=V), cases, name="sliced_w2")
