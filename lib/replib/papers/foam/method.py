"""FOAM's method: Shampoo's building blocks, FOAM's proxy and damping controller, the refresh
policies and the optimizers (numpy, float64). Knows nothing of the toy task."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace

import numpy as np

__all__ = [
    "P_ROOT",
    "EPS0",
    "EPS_MAX",
    "TAU",
    "CHECK_EVERY",
    "BETA1",
    "BETA2",
    "ADAM_EPS",
    "ema_factor",
    "bias_corrected",
    "eigendecompose",
    "inverse_root_from_eig",
    "damped_inverse_root",
    "shampoo_direction",
    "adam_direction",
    "graft",
    "foam_proxy",
    "controller_step",
    "Policy",
    "policy",
    "config_label",
    "stale_evd_count",
    "KroneckerFactor",
    "ShampooOptimizer",
    "AdamOptimizer",
    "EVD_FLOPS_PER_CUBE",
    "BatchedOptimizer",
]

P_ROOT = 2  # inverse root order per factor (L^{-1/2} M R^{-1/2})
EPS0 = 1e-12  # damping floor (absolute)
EPS_MAX = 300 * EPS0  # damping cap: the ViT ratio eps_max / eps0 = 300
TAU = 0.75  # target of the proxy h_t
CHECK_EVERY = 10  # FOAM's check cadence f
BETA1, BETA2 = 0.9, 0.99
ADAM_EPS = 1e-8  # Adam's (and the grafting's) epsilon
START = 20  # preconditioning starts at this step (the paper's runs); Adam grafting alone before it
EVD_FLOPS_PER_CUBE = 9  # a symmetric eigendecomposition with eigenvectors: about 9 m^3 flops (Golub, Van Loan)


# --------------------------------------------------------------------------------------------
# Shampoo building blocks
# --------------------------------------------------------------------------------------------


def ema_factor(F_prev, G, beta2: float = BETA2, side: str = "L") -> np.ndarray:
    """Shampoo base, step 1: L_t = beta2 L_{t-1} + (1 - beta2) G G^T (``side="L"``) or
    R_t = beta2 R_{t-1} + (1 - beta2) G^T G (``side="R"``). Returns a new array."""
    G = np.asarray(G, dtype=float)
    GG = G @ G.T if side == "L" else G.T @ G
    return beta2 * np.asarray(F_prev, dtype=float) + (1.0 - beta2) * GG


def bias_corrected(F_t, beta2: float, t: int) -> np.ndarray:
    """Shampoo base, step 1: the bias-corrected factor L_bar_t = L_t / (1 - beta2^t) (t >= 1). With
    L_0 = 0 and a constant G G^T = S, L_bar_t = S for every t."""
    return np.asarray(F_t, dtype=float) / (1.0 - beta2 ** int(t))


def eigendecompose(F_bar) -> tuple[np.ndarray, np.ndarray]:
    """The refresh: L_bar = Q diag(d) Q^T by ``np.linalg.eigh`` (float64) on the *undamped* factor.
    Returns ``(Q, d)`` with the raw eigenvalues d (round-off negatives clipped to 0, no eps added)."""
    d, Q = np.linalg.eigh(np.asarray(F_bar, dtype=float))
    return Q, np.maximum(d, 0.0)


def inverse_root_from_eig(Q, d, eps: float, p: int = P_ROOT) -> np.ndarray:
    """The cached damped inverse root L_hat^{-1/p} = Q (diag(d) + eps I)^{-1/p} Q^T (Shampoo base,
    step 3; also FOAM's reuse-branch rebuild with the stale Q and d)."""
    w = (np.asarray(d, dtype=float) + eps) ** (-1.0 / p)
    return (Q * w) @ Q.T


def damped_inverse_root(A, eps: float, p: int = P_ROOT) -> np.ndarray:
    """(A + eps I)^{-1/p} of a symmetric PSD matrix A by eigendecomposition (float64); the map whose
    Lipschitz constant is (1/p) eps^{-(p+1)/p} (theory (i))."""
    Q, d = eigendecompose(A)
    return inverse_root_from_eig(Q, d, eps, p)


def shampoo_direction(L_root, M, R_root) -> np.ndarray:
    """Shampoo base, step 3: P = L_hat^{-1/p} M R_hat^{-1/p}."""
    return L_root @ M @ R_root


def adam_direction(m_hat, v_hat, eps: float = ADAM_EPS) -> np.ndarray:
    """The Adam direction A = m_hat / (sqrt(v_hat) + eps) (bias-corrected moments)."""
    return m_hat / (np.sqrt(v_hat) + eps)


def graft(P, A) -> np.ndarray:
    """Shampoo base, step 4 (Adam grafting): P * ||A||_F / ||P||_F, i.e. the Shampoo direction with
    the Adam step's Frobenius norm (per block). A zero P stays zero."""
    nP = math.sqrt(float(np.vdot(P, P)))
    if nP == 0.0:
        return np.zeros_like(P)
    return P * (math.sqrt(float(np.vdot(A, A))) / nP)


# --------------------------------------------------------------------------------------------
# FOAM: proxy, controller, policies, optimizers
# --------------------------------------------------------------------------------------------


def foam_proxy(Q, d, F_bar, eps: float, p: int = P_ROOT) -> tuple[float, float, float]:
    """FOAM update rule, step 2: the proxy of the stale inverse root's relative error.

    With the stale eigenbasis Q, the stale raw eigenvalues d and the current damping eps (= eps_{t-1}):
    whitened drift E = Q^T L_bar_t Q - diag(d), RC = ||E_ij / sqrt((d_i + eps)(d_j + eps))||_F,
    alpha = max_i (d_i + eps)^{-1/p} / (sum_i (d_i + eps)^{-2/p})^{1/2}, and h = alpha RC / p.
    Returns ``(h, RC, alpha)``. Cost: two GEMMs and elementwise work, no EVD.
    """
    d = np.asarray(d, dtype=float)
    E = Q.T @ np.asarray(F_bar, dtype=float) @ Q
    E.flat[:: E.shape[0] + 1] -= d  # the diagonal
    de = d + eps
    s = de ** -0.5
    E *= np.outer(s, s)
    rc = float(np.linalg.norm(E))
    r = de ** (-1.0 / p)
    alpha = float(r.max() / math.sqrt(float(np.sum(r * r))))
    return alpha * rc / p, rc, alpha


def controller_step(eps: float, h: float, eps0: float = EPS0, eps_max: float = EPS_MAX,
                    tau: float = TAU) -> tuple[float, bool]:
    """FOAM update rule, steps 3-4: eps_tilde = max(eps0, eps h / tau); if eps_tilde > eps_max the
    factor is refreshed (fresh EVD) and the damping resets to eps0, else it becomes eps_tilde.
    Returns ``(next eps, refresh?)``."""
    eps_tilde = max(eps0, eps * h / tau)
    if eps_tilde > eps_max:
        return eps0, True
    return eps_tilde, False


KINDS = ("stale", "foam", "foam_no_refresh", "foam_no_adaptive_eps", "adam")


@dataclass(frozen=True)
class Policy:
    """How a configuration maintains its inverse roots. ``kind`` is one of "stale" (EVD every f
    steps, eps = eps0, no proxy), "foam" (check every f steps: proxy, controller, cap-triggered
    refresh), "foam_no_refresh" (ablation (b)), "foam_no_adaptive_eps" (ablation (a)) or "adam" (no
    Shampoo at all); ``f`` the EVD (stale) or check (FOAM) cadence; ``p`` the root order; ``start``
    the step of the first eigendecomposition (before it the weights take the grafted Adam step alone,
    as Meta's ``start_preconditioning_step``; 1 = precondition from the first step); ``freeze``
    (ablation (b) only): FOAM's refreshes stay on up to this step, none after it (0 = never refresh
    after the first eigendecomposition, the official code's ablation; a later step starts the
    ablation from a warmed-up eigenbasis)."""

    kind: str
    f: int = CHECK_EVERY
    tau: float = TAU
    eps0: float = EPS0
    eps_max: float = EPS_MAX
    p: int = P_ROOT
    start: int = 1
    freeze: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown policy kind {self.kind!r}; valid: {', '.join(KINDS)}")
        if self.f < 1:
            raise ValueError(f"the cadence f must be >= 1, got {self.f}")
        if self.start < 1:
            raise ValueError(f"the preconditioning start must be a step >= 1, got {self.start}")


def policy(name: str, **settings) -> Policy:
    """The :class:`Policy` of a configuration name: ``stale_f<f>``, ``foam``, ``foam_f<f>`` (other
    check cadence), ``foam_no_refresh``, ``foam_no_adaptive_eps``, ``foam_no_adaptive_eps_tau<tau>``
    (ablation (a) with its own refresh threshold, e.g. ``foam_no_adaptive_eps_tau4``) or ``adam``.
    ``settings`` (start, eps0, eps_max, freeze) override the policy's defaults; ``freeze`` applies to
    ``foam_no_refresh`` only and is ignored elsewhere."""
    pol = _policy(name)
    if pol.kind != "foam_no_refresh":
        settings.pop("freeze", None)
    return replace(pol, **settings) if settings else pol


def _policy(name: str) -> Policy:
    m = re.fullmatch(r"stale_f(\d+)", name)
    if m:
        return Policy("stale", f=int(m.group(1)))
    m = re.fullmatch(r"foam_f(\d+)", name)
    if m:
        return Policy("foam", f=int(m.group(1)))
    m = re.fullmatch(r"foam_no_adaptive_eps_tau(\d+(?:\.\d+)?)", name)
    if m:
        return Policy("foam_no_adaptive_eps", tau=float(m.group(1)))
    if name in ("foam", "foam_no_refresh", "foam_no_adaptive_eps", "adam"):
        return Policy(name)
    raise ValueError(
        f"unknown configuration {name!r}; valid: stale_f<f>, foam, foam_f<f>, foam_no_refresh, "
        "foam_no_adaptive_eps, foam_no_adaptive_eps_tau<tau>, adam"
    )


def config_label(name: str) -> str:
    """A display label: "stale f=10", "FOAM", "FOAM w/o refresh", "FOAM w/o adaptive eps" (with
    ", tau=4" when its tau is not :data:`TAU`), "Adam"."""
    pol = policy(name)
    return {
        "stale": f"stale f={pol.f}",
        "foam": "FOAM" if pol.f == CHECK_EVERY else f"FOAM f={pol.f}",
        "foam_no_refresh": "FOAM w/o refresh",
        "foam_no_adaptive_eps": "FOAM w/o adaptive eps" + ("" if pol.tau == TAU else f", tau={pol.tau:g}"),
        "adam": "Adam",
    }[pol.kind]


def stale_evd_count(steps: int, f: int, start: int = 1) -> int:
    """EVDs per factor of stale(f) over ``steps`` steps: the first at step ``start`` and every later
    t <= steps with t % f == 0, i.e. 1 + floor(steps / f) - floor(start / f) (with start = 1: 1 +
    floor(steps / f) for f >= 2 and ``steps`` for f = 1); 0 when the run ends before ``start``."""
    steps, f, start = int(steps), int(f), int(start)
    if steps < start:
        return 0
    return 1 + steps // f - start // f


class KroneckerFactor:
    """One Kronecker factor (L or R) of one block: the EMA statistic (unnormalised, ``stat``), the
    cached eigenbasis ``Q`` and raw eigenvalues ``d`` of the last refresh, the damping ``eps`` in use
    and the cached root ``root`` = Q (diag(d) + eps I)^{-1/p} Q^T; counts ``evds``, ``eigh_seconds``,
    FOAM ``checks`` and ``check_refreshes`` (the checks that ended in an EVD).
    """

    def __init__(self, name: str, dim: int, p: int = P_ROOT):
        self.name = name
        self.p = int(p)
        self.stat = np.zeros((dim, dim))
        self.Q: np.ndarray | None = None
        self.d: np.ndarray | None = None
        self.eps = float("nan")
        self.root: np.ndarray | None = None
        self.evds = 0
        self.eigh_seconds = 0.0
        self.checks = 0
        self.check_refreshes = 0

    def refresh(self, F_bar, eps: float) -> None:
        """Fresh EVD of the bias-corrected factor (timed), damping ``eps``, rebuilt root."""
        t0 = time.perf_counter()
        self.Q, self.d = eigendecompose(F_bar)
        self.eigh_seconds += time.perf_counter() - t0
        self.evds += 1
        self.eps = float(eps)
        self.root = inverse_root_from_eig(self.Q, self.d, self.eps, self.p)

    def rebuild(self, eps: float) -> None:
        """FOAM's reuse branch: only the damping changes; the root is rebuilt with the stale Q and d."""
        if eps != self.eps:
            self.eps = float(eps)
            self.root = inverse_root_from_eig(self.Q, self.d, self.eps, self.p)


class _AdamState:
    """Adam moments of one parameter (float64) and its numpy view."""

    __slots__ = ("param", "view", "m", "v")

    def __init__(self, param):
        self.param = param
        self.view = param.detach().numpy()
        self.m = np.zeros(self.view.shape)
        self.v = np.zeros(self.view.shape)


class AdamOptimizer:
    """Plain Adam on every parameter (float64 moments, bias correction, no weight decay); the baseline,
    and the update of the biases inside :class:`ShampooOptimizer`. ``step()`` reads ``.grad``."""

    def __init__(self, params, lr: float, beta1: float = BETA1, beta2: float = BETA2,
                 eps: float = ADAM_EPS):
        self.states = [_AdamState(p) for p in params]
        self.lr, self.beta1, self.beta2, self.eps = float(lr), beta1, beta2, eps
        self.t = 0
        self.factors: list[KroneckerFactor] = []
        self.log: list[dict] = []

    @property
    def evds(self) -> int:
        """Eigendecompositions so far (none for Adam)."""
        return 0

    @property
    def eigh_seconds(self) -> float:
        """Seconds inside ``eigh`` (none for Adam)."""
        return 0.0

    def step(self) -> None:
        """One Adam step: m, v EMAs, bias correction, x -= lr m_hat / (sqrt(v_hat) + eps)."""
        self.t += 1
        self._adam(self.states, self.t)

    def _adam(self, states, t: int) -> None:
        b1, b2 = self.beta1, self.beta2
        c1, c2 = 1.0 - b1**t, 1.0 - b2**t
        for s in states:
            g = s.param.grad.numpy().astype(np.float64)
            s.m *= b1
            s.m += (1.0 - b1) * g
            s.v *= b2
            s.v += (1.0 - b2) * (g * g)
            s.view -= self.lr * adam_direction(s.m / c1, s.v / c2, self.eps)


class _Block:
    """Shampoo state of one 2-D weight: its Adam moments (m also Shampoo's first moment) and the
    factors L (m x m) and R (n x n)."""

    __slots__ = ("adam", "L", "R")

    def __init__(self, param, name: str, p: int):
        self.adam = _AdamState(param)
        m, n = self.adam.view.shape
        self.L = KroneckerFactor(f"{name}.L", m, p)
        self.R = KroneckerFactor(f"{name}.R", n, p)


class ShampooOptimizer(AdamOptimizer):
    """Shampoo on every 2-D weight (one block per matrix) with Adam grafting, plain Adam on the biases;
    the refresh policy (stale, FOAM or an ablation) is a :class:`Policy`.

    ``step()``: t += 1; per block the factor EMAs, the policy's maintenance of each factor (the first
    EVD at t = 1; then at t % f == 0 a stale refresh or a FOAM check), the bias-corrected first
    moment M_hat, P = L_hat^{-1/p} M_hat R_hat^{-1/p}, grafting to the Adam direction's norm and
    W -= lr P. ``log`` collects one dict per FOAM check when ``log_controller`` is True.
    """

    def __init__(self, model, pol: Policy, lr: float, beta1: float = BETA1, beta2: float = BETA2,
                 eps: float = ADAM_EPS, log_controller: bool = False):
        if pol.kind == "adam":
            raise ValueError("use AdamOptimizer for the adam configuration")
        weights, biases = [], []
        k = 0
        for _, prm in model.named_parameters():
            if prm.ndim == 2:
                k += 1
                weights.append(_Block(prm, f"W{k}", pol.p))
            else:
                biases.append(prm)
        super().__init__(biases, lr, beta1, beta2, eps)
        self.blocks = weights
        self.factors = [f for b in weights for f in (b.L, b.R)]
        self.policy = pol
        self.log_controller = bool(log_controller)
        self.checks = 0

    @property
    def evds(self) -> int:
        """Eigendecompositions so far, all factors."""
        return sum(f.evds for f in self.factors)

    @property
    def eigh_seconds(self) -> float:
        """Seconds inside ``eigh`` so far, all factors."""
        return sum(f.eigh_seconds for f in self.factors)

    def step(self) -> None:
        """One optimizer step (see the class docstring)."""
        self.t += 1
        t = self.t
        b1, b2 = self.beta1, self.beta2
        c1, c2 = 1.0 - b1**t, 1.0 - b2**t
        start = self.policy.start
        due = t % self.policy.f == 0 and t > start
        for blk in self.blocks:
            s = blk.adam
            G = s.param.grad.numpy().astype(np.float64)
            L, R = blk.L, blk.R
            L.stat = ema_factor(L.stat, G, b2, "L")
            R.stat = ema_factor(R.stat, G, b2, "R")
            s.m *= b1
            s.m += (1.0 - b1) * G
            s.v *= b2
            s.v += (1.0 - b2) * (G * G)
            m_hat = s.m / c1
            A = adam_direction(m_hat, s.v / c2, self.eps)
            if t < start:  # before preconditioning starts: the grafted method (Adam) alone
                s.view -= self.lr * A
                continue
            if L.Q is None or due:
                self._maintain(L, t)
            if R.Q is None or due:
                self._maintain(R, t)
            P = shampoo_direction(L.root, m_hat, R.root)
            s.view -= self.lr * graft(P, A)
        self._adam(self.states, t)

    def _maintain(self, fac: KroneckerFactor, t: int) -> None:
        """The policy's work on one factor at step t: first EVD, stale refresh or FOAM check."""
        pol = self.policy
        F_bar = bias_corrected(fac.stat, self.beta2, t)
        if fac.Q is None or pol.kind == "stale":
            fac.refresh(F_bar, pol.eps0)
            return
        self.checks += 1
        fac.checks += 1
        eps_prev = fac.eps
        h, rc, alpha = foam_proxy(fac.Q, fac.d, F_bar, eps_prev, pol.p)
        if pol.kind == "foam":
            eps_next, refresh = controller_step(eps_prev, h, pol.eps0, pol.eps_max, pol.tau)
        elif pol.kind == "foam_no_refresh" and t <= pol.freeze:  # warm-up: FOAM's own rule
            eps_next, refresh = controller_step(eps_prev, h, pol.eps0, pol.eps_max, pol.tau)
        elif pol.kind == "foam_no_refresh":
            eps_next, refresh = min(pol.eps_max, max(pol.eps0, eps_prev * h / pol.tau)), False
        else:  # foam_no_adaptive_eps
            eps_next, refresh = pol.eps0, h > pol.tau
        if refresh:
            fac.check_refreshes += 1
            fac.refresh(F_bar, pol.eps0)
        else:
            fac.rebuild(eps_next)
        if self.log_controller:  # d_median, d_max, eps_rel: of the (Q, d, eps) in use after the check
            med = float(np.median(fac.d))
            self.log.append(dict(
                step=t, factor=fac.name, h=h, rc=rc, alpha=alpha, eps_prev=eps_prev, eps=fac.eps,
                refreshed=bool(refresh), d_median=med, d_max=float(fac.d[-1]),
                eps_rel=fac.eps / med if med > 0 else float("inf"),
            ))


# --------------------------------------------------------------------------------------------
# The same optimizers for K independent members at once (the experiment's fast path)
# --------------------------------------------------------------------------------------------


class _BatchedFactor:
    """One Kronecker factor of one weight for K members: EMA statistics (K, m, m), stale bases Q
    (K, m, m), raw eigenvalues d (K, m), damping eps (K,), cached roots (K, m, m) and per-member counts
    (EVDs, checks, checks that ended in an EVD)."""

    def __init__(self, name: str, K: int, m: int):
        self.name, self.m = name, int(m)
        self.stat = np.zeros((K, m, m))
        self.Q = np.zeros((K, m, m))
        self.d = np.zeros((K, m))
        self.eps = np.full(K, np.nan)
        self.root = np.zeros((K, m, m))
        self.evds = np.zeros(K, dtype=np.int64)
        self.checks = np.zeros(K, dtype=np.int64)
        self.check_refreshes = np.zeros(K, dtype=np.int64)


def _batched_roots(Q, d, eps, p: int) -> np.ndarray:
    """:func:`inverse_root_from_eig` for a stack: Q (k, m, m), d (k, m), eps (k,)."""
    w = (d + eps[:, None]) ** (-1.0 / p)
    return (Q * w[:, None, :]) @ np.swapaxes(Q, 1, 2)


def _batched_proxy(Q, d, F_bar, eps, p: int):
    """:func:`foam_proxy` for a stack; returns arrays (h, RC, alpha), each (k,)."""
    E = np.swapaxes(Q, 1, 2) @ F_bar @ Q
    idx = np.arange(d.shape[1])
    E[:, idx, idx] -= d
    de = d + eps[:, None]
    s = de ** -0.5
    E *= s[:, :, None] * s[:, None, :]
    rc = np.sqrt(np.einsum("kij,kij->k", E, E))
    r = de ** (-1.0 / p)
    alpha = r.max(axis=1) / np.sqrt(np.sum(r * r, axis=1))
    return alpha * rc / p, rc, alpha


class BatchedOptimizer:
    """:class:`ShampooOptimizer` (or, for ``pol.kind == "adam"``, :class:`AdamOptimizer`) for K
    independent members stacked along a first axis: each member has its own weights, gradients,
    moments, factors, damping, refreshes and learning rate ``lrs[k]``; the arithmetic is the reference
    optimizers' (the tests compare them step by step), with numpy's stacked ``matmul`` and ``eigh``
    doing the K members' work in one call. ``weights``: torch tensors (K, m, n) (2-D blocks, Shampoo);
    ``biases``: torch tensors (K, n) (Adam). Besides the counts, ``flops`` (K,) accumulates each
    member's optimizer floating-point operations by the rule of :meth:`step`."""

    def __init__(self, weights, biases, pol: Policy, lrs, beta1: float = BETA1, beta2: float = BETA2,
                 eps: float = ADAM_EPS, log_member: int | None = None):
        self.policy = pol
        self.lrs = np.asarray(lrs, dtype=float)
        K = self.lrs.size
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.t = 0
        self.weights = [(w, w.detach().numpy()) for w in weights]
        self.biases = [(b, b.detach().numpy()) for b in biases]
        self.wm = [np.zeros(v.shape) for _, v in self.weights]
        self.wv = [np.zeros(v.shape) for _, v in self.weights]
        self.bm = [np.zeros(v.shape) for _, v in self.biases]
        self.bv = [np.zeros(v.shape) for _, v in self.biases]
        self.factors: list[_BatchedFactor] = []
        self.pairs: list[tuple[_BatchedFactor, _BatchedFactor]] = []
        if pol.kind != "adam":
            for k, (_, v) in enumerate(self.weights, 1):
                L = _BatchedFactor(f"W{k}.L", K, v.shape[1])
                R = _BatchedFactor(f"W{k}.R", K, v.shape[2])
                self.pairs.append((L, R))
                self.factors += [L, R]
        self.flops = np.zeros(K)
        self.log_member = log_member
        self.log: list[dict] = []

    @property
    def evds(self) -> np.ndarray:
        """Eigendecompositions so far per member, all factors."""
        return sum((f.evds for f in self.factors), np.zeros(self.lrs.size, dtype=np.int64))

    def step(self) -> None:
        """One step of every member. Flops counted per member (multiply-adds as 2): factor EMAs
        2 m^2 n + 2 m n^2; the direction L^{-1/p} M R^{-1/p} 2 m^2 n + 2 m n^2; a FOAM check 4 m^3 (the
        rotation Q^T L Q); a root rebuild 2 m^3; an eigendecomposition 9 m^3; Adam's and the
        grafting's elementwise work 10 flops per entry. Before ``policy.start`` the weights take the
        Adam step alone."""
        self.t += 1
        t, pol = self.t, self.policy
        b1, b2 = self.beta1, self.beta2
        c1, c2 = 1.0 - b1**t, 1.0 - b2**t
        lr3 = self.lrs[:, None, None]
        shampoo = pol.kind != "adam" and t >= pol.start
        due = t % pol.f == 0 and t > pol.start
        for i, (w, view) in enumerate(self.weights):
            G = w.grad.numpy().astype(np.float64)
            m, n = G.shape[1:]
            mom, sec = self.wm[i], self.wv[i]
            mom *= b1
            mom += (1.0 - b1) * G
            sec *= b2
            sec += (1.0 - b2) * (G * G)
            m_hat = mom / c1
            A = m_hat / (np.sqrt(sec / c2) + self.eps)
            self.flops += 10 * m * n
            if pol.kind == "adam":
                view -= lr3 * A
                continue
            L, R = self.pairs[i]
            L.stat *= b2
            L.stat += (1.0 - b2) * (G @ np.swapaxes(G, 1, 2))
            R.stat *= b2
            R.stat += (1.0 - b2) * (np.swapaxes(G, 1, 2) @ G)
            self.flops += 2 * m * m * n + 2 * m * n * n
            if not shampoo:
                view -= lr3 * A
                continue
            for fac in (L, R):
                if t == pol.start:
                    self._refresh(fac, np.arange(self.lrs.size), fac.stat / c2)
                elif due:
                    self._maintain(fac, t, fac.stat / c2)
            P = L.root @ m_hat @ R.root
            self.flops += 2 * m * m * n + 2 * m * n * n
            nP = np.sqrt(np.einsum("kij,kij->k", P, P))
            nA = np.sqrt(np.einsum("kij,kij->k", A, A))
            scale = np.divide(nA, nP, out=np.zeros_like(nP), where=nP > 0)
            view -= lr3 * (P * scale[:, None, None])
        for i, (b, view) in enumerate(self.biases):
            g = b.grad.numpy().astype(np.float64)
            mom, sec = self.bm[i], self.bv[i]
            mom *= b1
            mom += (1.0 - b1) * g
            sec *= b2
            sec += (1.0 - b2) * (g * g)
            view -= self.lrs[:, None] * ((mom / c1) / (np.sqrt(sec / c2) + self.eps))
            self.flops += 10 * g.shape[1]

    def _refresh(self, fac: _BatchedFactor, idx, F_bar) -> None:
        """Fresh eigendecompositions of the members ``idx`` (damping eps0, rebuilt roots)."""
        if len(idx) == 0:
            return
        d, Q = np.linalg.eigh(F_bar[idx])
        fac.Q[idx], fac.d[idx] = Q, np.maximum(d, 0.0)
        fac.eps[idx] = self.policy.eps0
        fac.root[idx] = _batched_roots(fac.Q[idx], fac.d[idx], fac.eps[idx], self.policy.p)
        fac.evds[idx] += 1
        self.flops[idx] += (EVD_FLOPS_PER_CUBE + 2) * fac.m**3

    def _maintain(self, fac: _BatchedFactor, t: int, F_bar) -> None:
        """The policy's check of one factor for every member (see :meth:`ShampooOptimizer._maintain`)."""
        pol = self.policy
        K = self.lrs.size
        every = np.arange(K)
        if pol.kind == "stale":
            self._refresh(fac, every, F_bar)
            return
        fac.checks += 1
        eps_prev = fac.eps.copy()
        h, rc, alpha = _batched_proxy(fac.Q, fac.d, F_bar, eps_prev, pol.p)
        self.flops += 4 * fac.m**3
        grown = eps_prev * h / pol.tau
        if pol.kind == "foam" or (pol.kind == "foam_no_refresh" and t <= pol.freeze):
            eps_tilde = np.maximum(pol.eps0, grown)
            refresh = eps_tilde > pol.eps_max
        elif pol.kind == "foam_no_refresh":
            eps_tilde, refresh = np.minimum(pol.eps_max, np.maximum(pol.eps0, grown)), np.zeros(K, bool)
        else:  # foam_no_adaptive_eps
            eps_tilde, refresh = np.full(K, pol.eps0), h > pol.tau
        keep = ~refresh & (eps_tilde != eps_prev)
        if keep.any():
            fac.eps[keep] = eps_tilde[keep]
            fac.root[keep] = _batched_roots(fac.Q[keep], fac.d[keep], fac.eps[keep], pol.p)
            self.flops[keep] += 2 * fac.m**3
        fac.check_refreshes += refresh
        self._refresh(fac, np.flatnonzero(refresh), F_bar)
        k = self.log_member
        if k is not None:
            med = float(np.median(fac.d[k]))
            self.log.append(dict(
                step=t, factor=fac.name, h=float(h[k]), rc=float(rc[k]), alpha=float(alpha[k]),
                eps_prev=float(eps_prev[k]), eps=float(fac.eps[k]), refreshed=bool(refresh[k]),
                d_median=med, d_max=float(fac.d[k, -1]),
                eps_rel=float(fac.eps[k]) / med if med > 0 else float("inf"),
            ))
