"""CA-SOADD, the method: the encoder head (layer mix, attentive pooling, projection, online
standardisation), the cumulative centroid, the three centroid-anchored objectives, the total loss
and the strict one-class training loop, plus the score, EER and bona fide-only calibration.

The labels M1..M6 are ours (the paper's own equation numbering was not available; the method is
rebuilt from the official code and a third-party summary): M1 encoder, M2 centroid, M3 objectives,
M6 inference and calibration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.metrics import roc_curve
from torch import nn

__all__ = [
    "layer_mix",
    "entropy_regulariser",
    "OnlineStandardiser",
    "CumulativeCentroid",
    "cosine_score",
    "compactness_loss",
    "benign_invariance_loss",
    "boundary_hinge_loss",
    "probe_bce_loss",
    "total_loss",
    "Encoder",
    "SOADDConfig",
    "train_soadd",
    "embed",
    "eer",
    "calibrate_threshold",
]


def layer_mix(h: torch.Tensor, logits: torch.Tensor, tau: float = 1.0):
    """M1 layer mix: F = sum_l a_l H^(l) with a = softmax(s / tau). ``h``: batch x L x T x d.
    Returns (F, a)."""
    a = torch.softmax(logits / tau, dim=0)
    return torch.einsum("l,bltd->btd", a, h), a


def entropy_regulariser(a: torch.Tensor) -> torch.Tensor:
    """M1 L_ent = sum_l a_l log a_l (= -H(a)); minimising it spreads weight over the layers."""
    return torch.sum(a * torch.log(a + 1e-12))


class OnlineStandardiser(nn.Module):
    """M1 online standardisation (OS): z <- (z - mu) / sqrt(sigma^2 + 1e-5), with mu and sigma^2
    cumulative (Welford) over the bona fide training embeddings only, frozen at inference."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("n", torch.zeros(()))
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("m2", torch.zeros(dim))

    @torch.no_grad()
    def update(self, z: torch.Tensor) -> None:
        """Welford's batch update with the (detached) bona fide embeddings ``z`` (batch x dim)."""
        b = z.shape[0]
        batch_mean = z.mean(0)
        delta = batch_mean - self.mean
        total = self.n + b
        self.mean += delta * b / total
        self.m2 += ((z - batch_mean) ** 2).sum(0) + delta**2 * self.n * b / total
        self.n = total

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        var = self.m2 / self.n.clamp(min=1.0)
        return (z - self.mean) / torch.sqrt(var + 1e-5)


class CumulativeCentroid:
    """M2 centroid: c <- (n c + b e_bar) / (n + b), n <- n + b, with e_bar the mean of the
    L2-normalised bona fide embeddings of the batch; no gradient flows into c."""

    def __init__(self, dim: int):
        self.c = torch.zeros(dim)
        self.n = 0

    @torch.no_grad()
    def update(self, z: torch.Tensor) -> torch.Tensor:
        b = z.shape[0]
        e_bar = nn.functional.normalize(z, dim=-1).mean(0)
        self.c = (self.n * self.c + b * e_bar) / (self.n + b)
        self.n += b
        return self.c


def cosine_score(z: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """M6 score s(z, c) = z^T c / (||z|| ||c||) (high = bona fide)."""
    return nn.functional.cosine_similarity(z, c.expand_as(z), dim=-1, eps=1e-8)


def compactness_loss(z: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """M3 L_cpt = 1 - (1/B) sum_i s(z_i, c)."""
    return 1.0 - cosine_score(z, c).mean()


def benign_invariance_loss(z: torch.Tensor, z_view: torch.Tensor) -> torch.Tensor:
    """M3 L_binv = 1 - (1/B) sum_i cos(z_i, sg(z~_i)): the gradient flows through the clean view only."""
    return 1.0 - nn.functional.cosine_similarity(z, z_view.detach(), dim=-1).mean()


def boundary_hinge_loss(z: torch.Tensor, z_probe: torch.Tensor, c: torch.Tensor, m: float = 1.0):
    """M3 L_cabs ([S] form) = (1/B) sum_i max(0, m - s(z_i, c) + s(z_i^-, c)), m = 1.0."""
    return torch.relu(m - cosine_score(z, c) + cosine_score(z_probe, c)).mean()


def probe_bce_loss(z, z_probe, c, bias: torch.Tensor, temperature: float = 0.1):
    """Table 3 ablation "L_cabs replaced by BCE": logit (s(z, c) - b) / 0.1 with a learnable b,
    bona fide = 1, probe = 0 (our choice; the paper's exact BCE form was not available)."""
    logits = torch.cat([cosine_score(z, c), cosine_score(z_probe, c)]) - bias
    target = torch.cat([torch.ones(len(z)), torch.zeros(len(z_probe))])
    return nn.functional.binary_cross_entropy_with_logits(logits / temperature, target)


def total_loss(l_cpt, l_binv, l_cabs, l_ent, lambdas=(5.0, 1.0, 1.0, 1e-2)):
    """M3 total: L = l1 L_cpt + l2 L_binv + l3 L_cabs + l4 L_ent, lambda = (5, 1, 1, 1e-2).

    The official code splits this sum over lines without parentheses, so as written only
    l1 L_cpt (+ L_ent) reaches the optimiser; the chapter implements the sum as the paper states it."""
    l1, l2, l3, l4 = lambdas
    return l1 * l_cpt + l2 * l_binv + l3 * l_cabs + l4 * l_ent


class Encoder(nn.Module):
    """M1 trainable head on the frozen front-end's L layers: layer mix (tau = 1), attentive
    pooling beta = softmax_t(W2 tanh(W1 F_t)) with bottleneck d_b, head Linear(d, d) -> LayerNorm
    -> ReLU -> Linear(d, D), then optionally OS. ``deep_svdd=True`` drops every bias and the
    LayerNorm (Deep-SVDD's bias-free network, which prevents a trivial constant map)."""

    def __init__(self, n_layers, d, dim, bottleneck=16, tau=1.0, standardise=True, deep_svdd=False,
                 pooling="mean"):
        super().__init__()
        bias = not deep_svdd
        self.tau, self.pooling = tau, pooling
        self.layer_logits = nn.Parameter(torch.zeros(n_layers))
        self.att = nn.Sequential(nn.Linear(d, bottleneck, bias=bias), nn.Tanh(), nn.Linear(bottleneck, 1, bias=bias))
        norm = nn.Identity() if deep_svdd else nn.LayerNorm(d)
        d_in = 2 * d if pooling == "stats" else d
        self.head = nn.Sequential(nn.Linear(d_in, d, bias=bias), norm, nn.ReLU(), nn.Linear(d, dim, bias=bias))
        self.os = OnlineStandardiser(dim) if standardise else None

    def forward(self, h: torch.Tensor, update_os: bool = False):
        """Embeddings z of a batch of layer features (batch x L x T x d) and the layer weights a.
        ``update_os`` folds this (bona fide) batch into the OS statistics first."""
        f, a = layer_mix(h, self.layer_logits, self.tau)
        beta = torch.softmax(self.att(f), dim=1)
        r = (beta * f).sum(1)
        if self.pooling == "stats":  # attentive statistics pooling: the weighted std beside the mean
            r = torch.cat([r, torch.sqrt(((beta * f * f).sum(1) - r * r).clamp(min=1e-6))], -1)
        z = self.head(r)
        if self.os is not None:
            if update_os:
                self.os.update(z.detach())
            z = self.os(z)
        return z, a


@dataclass
class SOADDConfig:
    """Training settings. ``boundary``: "hinge" (CA-SOADD), "bce" (the BCE ablation) or "none"
    (without L_cabs); ``invariance`` switches L_binv. Steps, batch, lr and warm-up are our
    choice for a CPU budget (the paper's lr 1e-6 is for a pretrained encoder)."""

    steps: int = 300
    batch: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup: int = 75
    margin: float = 1.0
    boundary: str = "hinge"
    invariance: bool = True
    standardise: bool = True
    dim: int = 32
    pooling: str = "mean"
    lambdas: tuple = (5.0, 1.0, 1.0, 1e-2)


def train_soadd(feats, views, probes, cfg: SOADDConfig, seed: int):
    """Strict one-class training (M3). ``feats``: bona fide training features (N x L x T x d);
    ``views``: their benign views (same shape); ``probes``: {operator: probe features of the same
    clips}. Each step draws a batch of clips and ONE probe operator for the whole batch ([C] "batch"
    mode); the first ``warmup`` steps use L_cpt (+ L_ent) only. No spoof is ever seen.
    Returns (encoder, centroid)."""
    gen = np.random.default_rng(seed)
    torch.manual_seed(seed)
    n, n_layers, _, d = feats.shape
    enc = Encoder(n_layers, d, cfg.dim, standardise=cfg.standardise, pooling=cfg.pooling)
    bias = nn.Parameter(torch.zeros(()))
    opt = torch.optim.Adam(list(enc.parameters()) + [bias], lr=cfg.lr, weight_decay=cfg.weight_decay)
    centroid = CumulativeCentroid(cfg.dim)
    names = sorted(probes)
    for step in range(cfg.steps):
        idx = gen.choice(n, cfg.batch, replace=False)
        z, a = enc(torch.from_numpy(feats[idx]), update_os=True)
        c = centroid.update(z)
        l_cpt, l_ent = compactness_loss(z, c), entropy_regulariser(a)
        l_binv = l_cabs = torch.zeros(())
        if step >= cfg.warmup:
            if cfg.invariance:
                l_binv = benign_invariance_loss(z, enc(torch.from_numpy(views[idx]))[0])
            if cfg.boundary != "none":
                z_probe = enc(torch.from_numpy(probes[names[gen.integers(len(names))]][idx]))[0]
                if cfg.boundary == "hinge":
                    l_cabs = boundary_hinge_loss(z, z_probe, c, cfg.margin)
                else:
                    l_cabs = probe_bce_loss(z, z_probe, c, bias)
        loss = total_loss(l_cpt, l_binv, l_cabs, l_ent, cfg.lambdas)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return enc, centroid.c


@torch.no_grad()
def embed(enc: nn.Module, feats: np.ndarray) -> torch.Tensor:
    """Embeddings of features with the statistics frozen (inference mode)."""
    return enc(torch.from_numpy(feats))[0]


def eer(bona_scores, spoof_scores) -> float:
    """M6 equal error rate (high score = bona fide): the point of the ROC where the false rejection
    rate of bona fide audio equals the false acceptance rate of spoofs (linear interpolation)."""
    y = np.r_[np.ones(len(bona_scores)), np.zeros(len(spoof_scores))]
    fpr, tpr, _ = roc_curve(y, np.r_[bona_scores, spoof_scores])
    fnr = 1 - tpr
    i = int(np.nonzero(fnr <= fpr)[0][0])
    if i == 0:
        return float(fpr[0])
    # crossing between i-1 (fnr > fpr) and i (fnr <= fpr)
    d0, d1 = fnr[i - 1] - fpr[i - 1], fnr[i] - fpr[i]
    w = d0 / (d0 - d1)
    return float(fpr[i - 1] + w * (fpr[i] - fpr[i - 1]))


def calibrate_threshold(dev_bona_scores, alpha: float = 0.05) -> float:
    """M6 deployment threshold tau_alpha: the alpha-quantile of bona fide dev scores only."""
    return float(np.quantile(np.asarray(dev_bona_scores), alpha))
