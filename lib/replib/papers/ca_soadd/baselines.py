"""CA-SOADD, the one-class baselines of Table 1: OC-SVM on pooled front-end features, Deep-SVDD
(Ruff et al. 2018) and OC-Softmax without negatives (Zhang et al. 2021). The two deep baselines use
the same front-end features, head size, steps, batch, learning rate and seeds as CA-SOADD."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.svm import OneClassSVM
from torch import nn

from .method import Encoder, SOADDConfig, cosine_score, embed

__all__ = ["pooled_features", "OCSVMBaseline", "train_deep_svdd", "deep_svdd_score", "train_oc_softmax", "oc_softmax_score",
           "train_supervised", "supervised_score"]


def train_deep_svdd(feats, cfg: SOADDConfig, seed: int):
    """One-class Deep-SVDD: a bias-free head (no LayerNorm), fixed centre c0 = the mean embedding
    of the training clips at initialisation, loss mean ||z - c0||^2. Returns (encoder, c0)."""
    gen = np.random.default_rng(seed)
    torch.manual_seed(seed)
    n, n_layers, _, d = feats.shape
    enc = Encoder(n_layers, d, cfg.dim, standardise=False, deep_svdd=True, pooling=cfg.pooling)
    c0 = embed(enc, feats).mean(0)
    opt = torch.optim.Adam(enc.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    for _ in range(cfg.steps):
        z = enc(torch.from_numpy(feats[gen.choice(n, cfg.batch, replace=False)]))[0]
        loss = ((z - c0) ** 2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return enc, c0


def deep_svdd_score(enc, c0, feats) -> np.ndarray:
    """Deep-SVDD score -||z - c0||^2 (high = bona fide)."""
    return -((embed(enc, feats) - c0) ** 2).sum(-1).numpy()


def train_oc_softmax(feats, cfg: SOADDConfig, seed: int, m0: float = 0.9, alpha: float = 20.0):
    """OC-Softmax with bona fide data only: L = mean log(1 + exp(alpha (m0 - cos(w, z)))) with a
    learnable direction w (m0 = 0.9, alpha = 20, the defaults of Zhang et al.); the CA-SOADD head
    without OS. Returns (encoder, w)."""
    gen = np.random.default_rng(seed)
    torch.manual_seed(seed)
    n, n_layers, _, d = feats.shape
    enc = Encoder(n_layers, d, cfg.dim, standardise=False, pooling=cfg.pooling)
    w = nn.Parameter(torch.randn(cfg.dim) / np.sqrt(cfg.dim))
    opt = torch.optim.Adam(list(enc.parameters()) + [w], lr=cfg.lr, weight_decay=cfg.weight_decay)
    for _ in range(cfg.steps):
        z = enc(torch.from_numpy(feats[gen.choice(n, cfg.batch, replace=False)]))[0]
        loss = nn.functional.softplus(alpha * (m0 - cosine_score(z, w))).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return enc, w.detach()


def oc_softmax_score(enc, w, feats) -> np.ndarray:
    """OC-Softmax score cos(w, z) (high = bona fide)."""
    return cosine_score(embed(enc, feats), w).numpy()


def train_supervised(feats, spoof_feats, cfg: SOADDConfig, seed: int):
    """Supervised reference (not one-class; a competence and headroom arm): the same head, its
    embedding mapped to one logit by a linear layer, binary cross-entropy with bona fide = 1 and the
    given spoof clips = 0, balanced batches. Returns (encoder, linear layer)."""
    gen = np.random.default_rng(seed)
    torch.manual_seed(seed)
    n, n_layers, _, d = feats.shape
    enc = Encoder(n_layers, d, cfg.dim, standardise=False, pooling=cfg.pooling)
    out = nn.Linear(cfg.dim, 1)
    opt = torch.optim.Adam(list(enc.parameters()) + list(out.parameters()), lr=cfg.lr,
                           weight_decay=cfg.weight_decay)
    half = cfg.batch // 2
    target = torch.cat([torch.ones(half), torch.zeros(half)])
    for _ in range(cfg.steps):
        x = np.concatenate([feats[gen.choice(n, half, replace=False)],
                            spoof_feats[gen.choice(len(spoof_feats), half, replace=False)]])
        loss = nn.functional.binary_cross_entropy_with_logits(out(enc(torch.from_numpy(x))[0])[:, 0], target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return enc, out


@torch.no_grad()
def supervised_score(enc, out, feats) -> np.ndarray:
    """Supervised reference score: the logit (high = bona fide)."""
    return out(embed(enc, feats))[:, 0].numpy()


def pooled_features(feats: np.ndarray) -> np.ndarray:
    """Mean and std over frames of every layer's features (clips x 2 L d)."""
    n = len(feats)
    return np.concatenate([feats.mean(2).reshape(n, -1), feats.std(2).reshape(n, -1)], 1)


class OCSVMBaseline:
    """OC-SVM (RBF kernel, gamma "scale", nu = 0.1) on standardised mean + std pooled front-end
    features of the bona fide training clips; score = the decision function (high = bona fide)."""

    def __init__(self, feats, nu: float = 0.1):
        x = pooled_features(feats)
        self.mu, self.sd = x.mean(0), x.std(0) + 1e-6
        self.svm = OneClassSVM(nu=nu, gamma="scale").fit((x - self.mu) / self.sd)

    def score(self, feats) -> np.ndarray:
        return self.svm.decision_function((pooled_features(feats) - self.mu) / self.sd)
