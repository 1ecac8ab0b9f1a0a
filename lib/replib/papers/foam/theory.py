"""Helpers of FOAM's theory notebook: small linear algebra on the Kronecker identity, the damped
root's sensitivity, the proxy against the true error and the controller's saw-tooth."""

from __future__ import annotations

import math

import numpy as np

from .method import (
    BETA2,
    EPS0,
    EPS_MAX,
    P_ROOT,
    TAU,
    bias_corrected,
    controller_step,
    damped_inverse_root,
    eigendecompose,
    ema_factor,
    foam_proxy,
    inverse_root_from_eig,
)
from .task import random_psd

__all__ = [
    "kronecker_identity_check",
    "root_sensitivity",
    "root_sensitivity_bound",
    "sensitivity_pair",
    "true_root_error",
    "proxy_vs_true_error",
    "controller_trace",
    "refresh_interval",
]


def kronecker_identity_check(rng: np.random.Generator, m: int = 4, n: int = 3, p: int = P_ROOT) -> dict:
    """Theory notebook 1: on random positive definite L (m x m), R (n x n) and G (m x n), the largest
    absolute errors of (L kron R)^{-1/p} = L^{-1/p} kron R^{-1/p} (``kron_root``) and of
    vec(L^{-1/p} G R^{-1/p}) = (L^{-1/p} kron R^{-1/p}) vec(G) (``vec``, row-major vec; R^{-1/p} is
    symmetric). Both are round-off (~1e-14)."""
    L = random_psd(rng, m, ridge=0.1)
    R = random_psd(rng, n, ridge=0.1)
    G = rng.normal(size=(m, n))
    Lr, Rr = damped_inverse_root(L, 0.0, p), damped_inverse_root(R, 0.0, p)
    K = damped_inverse_root(np.kron(L, R), 0.0, p)
    kron_err = float(np.abs(K - np.kron(Lr, Rr)).max())
    vec_err = float(np.abs((Lr @ G @ Rr).ravel() - np.kron(Lr, Rr) @ G.ravel()).max())
    return {"kron_root": kron_err, "vec": vec_err}


def root_sensitivity(A, B, eps: float, p: int = P_ROOT) -> float:
    """Theory notebook 2: ||(A + eps I)^{-1/p} - (B + eps I)^{-1/p}||_2 / ||A - B||_2 (spectral norms)."""
    num = np.linalg.norm(damped_inverse_root(A, eps, p) - damped_inverse_root(B, eps, p), 2)
    return float(num / np.linalg.norm(np.asarray(A) - np.asarray(B), 2))


def root_sensitivity_bound(eps, p: int = P_ROOT):
    """Theory (i): the Lipschitz constant (1/p) eps^{-(p+1)/p} of A -> (A + eps I)^{-1/p} on PSD
    matrices (the derivative of x -> (x + eps)^{-1/p} at x = 0)."""
    out = np.asarray(eps, dtype=float) ** (-(p + 1.0) / p) / p
    return float(out) if out.ndim == 0 else out


def sensitivity_pair(rng: np.random.Generator, m: int = 8, delta: float = 1e-6,
                     shared_null: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Theory notebook 2: a PSD pair (A, B) with ||A - B||_2 = delta. ``shared_null=True``: A has a
    zero eigenvalue (eigenvector q) and B = A + delta q q^T, the case where the bound is tight as
    delta -> 0; else A has eigenvalues in [1, 2] and B = A + delta (unit-norm symmetric noise)."""
    Q, _ = np.linalg.qr(rng.normal(size=(m, m)))
    lam = rng.uniform(1.0, 2.0, size=m)
    if shared_null:
        lam[0] = 0.0
    A = (Q * lam) @ Q.T
    if shared_null:
        E = np.outer(Q[:, 0], Q[:, 0])
    else:
        S = rng.normal(size=(m, m))
        E = (S + S.T) / 2
        E /= np.linalg.norm(E, 2)
    return A, A + delta * E


def true_root_error(F_now, Q, d, eps: float, p: int = P_ROOT) -> float:
    """Theory notebook 3: the true relative error of the stale root,
    ||(F_now + eps I)^{-1/p} - Q (diag(d) + eps I)^{-1/p} Q^T||_F / ||Q (diag(d) + eps I)^{-1/p} Q^T||_F."""
    stale = inverse_root_from_eig(Q, d, eps, p)
    fresh = damped_inverse_root(F_now, eps, p)
    return float(np.linalg.norm(fresh - stale) / np.linalg.norm(stale))


def proxy_vs_true_error(rng: np.random.Generator, m: int = 32, batch: int = 4, beta2: float = BETA2,
                        eps: float = 1e-3, p: int = P_ROOT, warmup: int = 300, horizon: int = 60,
                        decay: float = 0.9) -> dict:
    """Theory notebook 3: EMA drift of a factor fed random low-rank gradients, the proxy against the
    true error.

    Gradients G_t = C^{1/2} Z_t (Z_t Gaussian m x ``batch``, C with eigenvalues ``decay``^i in a random
    basis); L_t = beta2 L_{t-1} + (1 - beta2) G_t G_t^T / batch, bias-corrected. At t0 = ``warmup`` the
    factor is eigendecomposed; for k = 1..``horizon`` the stale (Q, d) is compared with L_bar_{t0+k}:
    ``true`` (:func:`true_root_error`) and ``h`` (:func:`foam_proxy`, damping ``eps``). Returns arrays
    ``k``, ``true``, ``h`` and ``drift`` = 1 - beta2^k.
    """
    U, _ = np.linalg.qr(rng.normal(size=(m, m)))
    C_half = U * np.sqrt(decay ** np.arange(m))
    L = np.zeros((m, m))
    t = 0

    def advance():
        nonlocal L, t
        G = C_half @ rng.normal(size=(m, batch))
        L = ema_factor(L, G / math.sqrt(batch), beta2, "L")
        t += 1

    for _ in range(warmup):
        advance()
    Q, d = eigendecompose(bias_corrected(L, beta2, t))
    true, h = np.empty(horizon), np.empty(horizon)
    for k in range(horizon):
        advance()
        F_bar = bias_corrected(L, beta2, t)
        true[k] = true_root_error(F_bar, Q, d, eps, p)
        h[k] = foam_proxy(Q, d, F_bar, eps, p)[0]
    ks = np.arange(1, horizon + 1)
    return {"k": ks, "true": true, "h": h, "drift": 1.0 - beta2**ks}


def controller_trace(h_seq, eps0: float = EPS0, eps_max: float = EPS_MAX, tau: float = TAU) -> dict:
    """Theory notebook 4: the controller (:func:`controller_step`) driven by a given sequence of proxy
    values, one per check, starting from a fresh EVD (eps = eps0). Returns arrays ``eps`` (after each
    check) and ``refresh`` (bool) and the number of refreshes ``refreshes``."""
    eps = eps0
    out_eps, out_ref = [], []
    for h in np.asarray(h_seq, dtype=float):
        eps, ref = controller_step(eps, float(h), eps0, eps_max, tau)
        out_eps.append(eps)
        out_ref.append(ref)
    ref = np.asarray(out_ref, dtype=bool)
    return {"eps": np.asarray(out_eps), "refresh": ref, "refreshes": int(ref.sum())}


def refresh_interval(h: float, tau: float = TAU, eps0: float = EPS0, eps_max: float = EPS_MAX) -> float:
    """Checks from one refresh to the next under a constant proxy h: eps grows as eps0 (h / tau)^k and
    the cap is crossed at k = floor(log(eps_max / eps0) / log(h / tau)) + 1; inf when h <= tau."""
    if h <= tau:
        return float("inf")
    return float(math.floor(math.log(eps_max / eps0) / math.log(h / tau)) + 1)
