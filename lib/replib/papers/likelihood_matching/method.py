"""LM, the method: the forward process, second-order Tweedie, the Rao-Blackwellised
quasi-likelihood and its Sherman-Morrison-Woodbury form, the network with its covariance heads,
the losses and the reverse steps and samplers (see the package docstring for the notes)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from replib.models.mlp import MLP

__all__ = [
    "BETA_MIN", "BETA_MAX", "METHODS",
    "alpha_bar", "transition", "time_grid", "posterior_variance",
    "tweedie_moments", "quasi_likelihood_rb", "smw_terms", "covariance_factors",
    "LMNet", "hessian_from_model", "rb_score_weight", "training_loss", "CLIP_NORM", "clip_trunks",
    "model_reverse_fn", "exact_reverse_fn", "sample",
]

BETA_MIN, BETA_MAX = 0.1, 20.0
METHODS = ["LM", "B1", "B2", "B3", "B4", "S1", "S2", "LMjoint"]
#: which trained network each method uses: LM trains with decoupled gradients (the recipe declared in
#: chapter.yml); its score trunk receives exactly the identity-weighted gradient of B3's loss, so B3
#: (C = I) and S1 / S2 (the DDPM variances beta / beta-tilde) use LM's own network, and B4 is a
#: second, diagonal covariance trunk on the same score trunk, trained in the same loop (issue 41);
#: LMjoint is the earlier, jointly coupled training of the same loss
OBJECTIVE_OF = {"LM": "lm_sg", "B1": "dsm", "B2": "dsm", "B3": "lm_sg", "B4": "lm_diag_sg", "S1": "lm_sg",
                "S2": "lm_sg", "LMjoint": "lm"}
OBJECTIVES = ("dsm", "lm", "lm_diag", "lm_mean", "lm_sg", "lm_diag_sg")
JITTER = 1e-5
#: gradient clipping, per trunk, for every arm (issue 41; ours)
CLIP_NORM = 1.0


def _t(x) -> torch.Tensor:
    """x as a float64 tensor; a read-only numpy array (a broadcast view, say) is copied first, since
    torch cannot share memory it may not write."""
    if isinstance(x, torch.Tensor):
        return x.to(torch.float64)
    x = np.asarray(x)
    return torch.as_tensor(x if x.flags.writeable else x.copy(), dtype=torch.float64)


# --------------------------------------------------------------------------------------------
# 1. Forward process (section 1)
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
    """The sampler's grid 0 = t_0 < ... < t_N = 1, uniform in t (ours; the paper's readable text states no grid)."""
    return np.linspace(0.0, 1.0, int(n_steps) + 1)


def posterior_variance(t, s):
    """beta-tilde = sigma^2_{t|s} (1 - alpha_bar_s) / (1 - alpha_bar_t), the variance of the DDPM
    posterior q(x_s | x_t, x_0) (section 4)."""
    _, sig2 = transition(t, s)
    return sig2 * (1 - alpha_bar(s)) / (1 - alpha_bar(t))


# --------------------------------------------------------------------------------------------
# 2. Second-order Tweedie and the quasi-likelihood
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
# 3. The network and the losses
# --------------------------------------------------------------------------------------------


class LMNet(nn.Module):
    """Two trunks (proposed; issue 41) on (x_t, sinusoidal embedding of t): the score trunk
    ``MLP([d + 16, 64, 64, 64, d], silu)`` gives eps (d; score s = -eps / sqrt(1 - alpha_bar_t)),
    the covariance trunk ``MLP([d + 16, 64, 64, 64, d + d r], silu)`` the log-diagonal lambda (d)
    and the low-rank factor L (d x r) of Sigma_theta ~ Cov[X_0 | x_t], scaled by the forward
    variance (package notes). Separate trunks keep the covariance terms' gradients out of the score
    (before issue 41 one trunk fed both heads, and seed 2's score error came from them). The same
    network for every method; DSM leaves the covariance trunk untrained. ``share_score_with``
    reuses another network's score trunk (the module itself: B4 trained in LM's loop)."""

    def __init__(self, d: int = 2, rank: int = 1, hidden: int = 64, depth: int = 3, emb: int = 16, seed: int = 0,
                 activation: str = "silu", share_score_with: "LMNet | None" = None):
        super().__init__()
        self.d, self.rank = int(d), int(rank)
        self.register_buffer("freqs", torch.as_tensor(np.geomspace(1.0, 200.0, emb // 2), dtype=torch.float32))
        self.trunk = (share_score_with.trunk if share_score_with is not None
                      else MLP([d + emb] + [hidden] * depth + [d], seed=seed, activation=activation))
        self.cov_trunk = MLP([d + emb] + [hidden] * depth + [d + d * rank], seed=seed + 7919 + rank,
                             activation=activation)

    def forward(self, x, t):
        """Returns dict(eps (n,d), score (n,d), lam (n,d), L (n,d,r)); ``t`` (n,) or a float."""
        x = torch.as_tensor(x, dtype=torch.float32)
        t = torch.as_tensor(t, dtype=torch.float32)
        if t.ndim == 0:
            t = t.expand(x.shape[0])
        ang = t[:, None] * self.freqs[None]
        inp = torch.cat([x, torch.sin(ang), torch.cos(ang)], 1)
        eps = self.trunk(inp)
        cov = self.cov_trunk(inp)
        d, r = self.d, self.rank
        var = 1 - alpha_bar(t.double())
        lam = cov[:, :d].double().clamp(-10.0, 5.0) + torch.log(var)[:, None]
        L = cov[:, d:].double().reshape(x.shape[0], d, r) * torch.sqrt(var)[:, None, None]
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


def rb_score_weight(t, n_steps_grid) -> torch.Tensor:
    """The score term's weight sigma^2_{t|s} / (1 - alpha_bar_t) of L^RB (section 4) averaged over
    the training step Delta = 1/N, N uniform over ``n_steps_grid``, s = max(t - Delta, 0): its
    Rao-Blackwellisation over Delta (ours, issue 41; Delta is drawn independently of (x0, eps), so the
    expected objective is unchanged). (n,) float64."""
    t = torch.as_tensor(t, dtype=torch.float64)
    w = torch.zeros_like(t)
    for n in n_steps_grid:
        _, sig2 = transition(t, (t - 1.0 / float(n)).clamp_min(0.0))
        w = w + sig2
    return w / len(n_steps_grid) / (1 - alpha_bar(t))


def clip_trunks(net: nn.Module, max_norm: float = CLIP_NORM) -> None:
    """Clip the gradient of each trunk of ``net`` (and of any submodule named ``*trunk``) to norm
    ``max_norm`` separately (ours, issue 41): per trunk, so that clipping couples no two trunks."""
    for name, mod in net.named_modules():
        if name.endswith("trunk"):
            torch.nn.utils.clip_grad_norm_(mod.parameters(), max_norm)


def training_loss(net: LMNet, x0, t, s, eps, objective: str, identity_cov: bool = False,
                  score_weight=None, parts: bool = False):
    """Batch-mean loss of one objective on (x0, t, s, eps), x_t = sqrt(alpha_bar_t) x0 + sqrt(1 -
    alpha_bar_t) eps:

    * ``dsm``: ||eps_theta - eps||^2 (B1/B2; standard epsilon-loss, uniform in t).
    * ``lm``: L^RB of section 4 (proposed) with C = D + W W^T (section 5), via SMW.
    * ``lm_diag``: the same with W = 0 (r = 0).
    * ``lm_mean``: L^RB with C = I, i.e. 1/2 sigma^2 / (1 - alpha_bar_t) ||eps_theta - eps||^2 (B3).
    * ``lm_sg`` (the training recipe of LM in this chapter, ours, not the paper's): the same value as
      ``lm``, but the score's gradient is that of the identity-weighted term 1/2 sigma^2 / (1 -
      alpha_bar_t) ||eps_theta - eps||^2 (B3's), and the covariance heads see the residual held
      fixed: the analogue of beta-NLL (Seitzer et al., 2022) for the mean-variance coupling of
      Gaussian likelihoods, where a poor score inflates C and C^{-1} then down-weights the score's
      own error. Both minimisers (the true score, C*) are unchanged.
    * ``lm_diag_sg``: ``lm_diag`` with the same decoupled gradients (B4).
    ``identity_cov=True`` forces C = I (the warm start of LM/B4). In terms of eps, sigma^2 (s_theta -
    s_0) = -sigma^2 / sqrt(1 - alpha_bar_t) (eps_theta - eps), s_0 = -eps / sqrt(1 - alpha_bar_t).
    ``score_weight`` (n,): the weight of the identity-weighted score term in place of the per-sample
    sigma^2 / (1 - alpha_bar_t) (``lm_mean``, the warm start, and the score gradient of the ``_sg``
    objectives; :func:`rb_score_weight` in training). ``parts=True`` returns dict(loss, score,
    covariance) with loss = score + covariance: for ``_sg`` objectives the covariance part is L^RB
    with the residual held fixed and the score part has value 0 and the score's gradient; for the
    others the score part is the whole loss."""
    ab = alpha_bar(t.double()).float()
    xt = torch.sqrt(ab)[:, None] * x0 + torch.sqrt(1 - ab)[:, None] * eps
    out = net(xt, t)
    zero = torch.zeros((), dtype=torch.float32)

    def _ret(score_part, cov_part):
        loss = score_part + cov_part
        return dict(loss=loss, score=score_part, covariance=cov_part) if parts else loss

    if objective == "dsm":
        return _ret(((out["eps"] - eps) ** 2).sum(-1).mean(), zero)
    td, sd = t.double(), s.double()
    _, sig2 = transition(td, sd)
    abd = alpha_bar(td)
    w = sig2 / (1 - abd) if score_weight is None else torch.as_tensor(score_weight, dtype=torch.float64)
    v = (out["eps"].double() - eps.double())
    if objective == "lm_mean" or identity_cov:
        return _ret((0.5 * w * (v * v).sum(-1)).mean().float(), zero)
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
    L = out["L"][..., :0] if objective.startswith("lm_diag") else out["L"]
    D, W, kappa = covariance_factors(out["lam"], L, td, sd)
    decoupled = objective.endswith("_sg")
    vd = v.detach() if decoupled else v
    logdet, quad, tr = smw_terms(D, W, vd)
    # sigma^2 (s - s0)^T C^-1 (s - s0) = sigma^2 / (1 - ab) v^T C^-1 v
    loss = 0.5 * logdet + 0.5 * sig2 / (1 - abd) * quad + 0.5 * kappa * tr
    if decoupled:  # value 0; the score's gradient is the identity-weighted one (weight w)
        score_part = (0.5 * w * ((v * v).sum(-1) - (vd * vd).sum(-1))).mean().float()
        return _ret(score_part, loss.mean().float())
    return _ret(loss.mean().float(), zero)


# --------------------------------------------------------------------------------------------
# 4. Reverse steps and samplers (section 6; baselines B1-B4)
# --------------------------------------------------------------------------------------------
# A reverse function maps (x (n,d) float64, t, s, for_nll) to (mean, g, D, W) with the reverse
# Gaussian N(mean, g (diag(D) + W W^T)); g is a float, D (n,d) >= 0, W (n,d,r).


ISOTROPIC = {"B1": "beta", "B2": "beta_tilde", "B3": "identity", "S1": "beta", "S2": "beta_tilde"}  # baselines' reverse variances


def isotropic_reverse(mean, t, s, variance: str, for_nll: bool = False):
    """The reverse Gaussian N(mean, g I) of the isotropic samplers, as (mean, g, D = 1, W = empty):
    "beta": g = sigma^2 (B1, beta_k); "beta_tilde": g = beta-tilde (B2; beta_1 = sigma_1^2 in the NLL
    decoder, where beta-tilde_1 = 0, package notes); "identity": g = sigma^2 / a^2 (B3, C = I)."""
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
    s_theta)/a for every method): LM (and LMjoint): g = sigma^2/a^2, C = D + W W^T (sections 5-6); B4:
    the same with W = 0; B1, B2, B3, S1, S2: :func:`isotropic_reverse`."""
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
        L = out["L"] if method in ("LM", "LMjoint") else out["L"][..., :0]
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
    is the stochastic sampler of section 6). Noise is added at every step (package notes). (n, d) numpy."""
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
