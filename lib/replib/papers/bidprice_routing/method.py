"""OLP-Router, the method: the LP pieces of the per-epoch bid-price algorithm and the router's
hyperparameters (numpy only; see the package docstring for conventions and fidelity notes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "action_column",
    "SLOReward",
    "slo_reward",
    "price_prefix",
    "column_cost",
    "remaining_capacity",
    "History",
    "dual_update",
    "Reservations",
    "admit_by_margin",
    "OLPConfig",
    "knapsack_price_step",
]


def action_column(s: int, o_hat: int, tau: int, T: int):
    """Column of action (j, g, tau): a^B_k = 1 and a^M_k = s + (k - tau) + 1 on K_{j tau}.

    ``K_{j tau} = {tau, ..., min(T, tau + o_hat - 1)}`` (truncated at the horizon). Returns
    ``(a_B, a_M, steps)``: a batch step (all ones) and a KV ramp (prompt + tokens generated so far),
    and the 1-based steps they occupy. Empty arrays when ``tau > T``.
    """
    last = min(int(T), int(tau) + int(o_hat) - 1)
    steps = np.arange(int(tau), last + 1, dtype=np.int64)
    a_B = np.ones(steps.size, dtype=np.int64)
    a_M = int(s) + (steps - int(tau)) + 1
    return a_B, a_M, steps


@dataclass
class SLOReward:
    """Components of the reward r_{j tau} (code ``reward_components``) and the normalised reward."""

    thr: np.ndarray  # (min(o_hat, T - tau + 1))^+ : tokens produced within the horizon
    comp: np.ndarray  # (T - (tau + o_hat - 1))^+ : steps saved before the horizon at completion
    ft: np.ndarray  # (T - tau + 1)^+ : steps saved at the first token
    gp: np.ndarray  # 1{tau - t_j < W_gp} : goodput (TTFT-window) indicator
    r: np.ndarray  # sigma + alpha thr + beta comp + gamma ft + w_gp gp
    r_norm: np.ndarray  # min(r / R_bar, 1)


def slo_reward(
    o_hat,
    tau,
    t_arr,
    T: int,
    alpha: float = 0.0,
    beta: float = 1.0,
    gamma: float = 0.0,
    sigma: float = 0.0,
    w_gp: float = 0.0,
    W_gp: int = 20,
    R_bar: float | None = None,
) -> SLOReward:
    """SLO-weighted reward of starting a request at step tau (vectorised over requests).

    r = sigma + alpha thr + beta comp + gamma ft + w_gp 1{tau - t_j < W_gp}, with
    thr = (min(o_hat, T - tau + 1))^+, comp = (T - (tau + o_hat - 1))^+, ft = (T - tau + 1)^+, and the
    normalised reward r~ = min(r / R_bar, 1). ``R_bar`` defaults to T (our choice; the
    code's ``reward_normalizer`` is clamped to >= 1 as here).
    """
    o_hat = np.asarray(o_hat, dtype=float)
    tau = np.asarray(tau, dtype=float)
    t_arr = np.asarray(t_arr, dtype=float)
    thr = np.maximum(0.0, np.minimum(o_hat, T - tau + 1))
    comp = np.maximum(0.0, T - (tau + o_hat - 1))
    shape = np.broadcast_shapes(o_hat.shape, tau.shape, t_arr.shape)
    ft = np.broadcast_to(np.maximum(0.0, T - tau + 1), shape)
    gp = np.broadcast_to(((tau - t_arr) < W_gp).astype(float), shape)
    r = sigma + alpha * thr + beta * comp + gamma * ft + w_gp * gp
    rb = max(1.0, float(T if R_bar is None else R_bar))
    return SLOReward(thr, comp, ft, gp, r, np.minimum(r / rb, 1.0))


def price_prefix(p_B: np.ndarray, p_M: np.ndarray):
    """Prefix sums that make a column's cost O(1): cumsum p^B, cumsum p^M, cumsum (i p^M).

    Each is (G, T + 1) with a leading zero column, indexed by 0-based step index i = k - 1.
    """
    G, T = p_B.shape
    out = np.zeros((3, G, T + 1))
    out[0, :, 1:] = p_B
    out[1, :, 1:] = p_M
    np.multiply(p_M, np.arange(T, dtype=float), out=out[2, :, 1:])
    np.cumsum(out, axis=2, out=out)
    return out[0], out[1], out[2]


def _cost_from_prefix(prefix, g, i0, L, s, c_M):
    """a^T p for columns (worker g, start index i0, length L, prompt s), broadcast over arrays.

    sum_{i=i0}^{i0+L-1} [p^B_{g,i} + c_M p^M_{g,i} (s + i - i0 + 1)]
    = dPB + c_M [(s + 1 - i0) dPM + dPK].
    """
    PB, PM, PK = prefix
    i1 = i0 + L
    dB = PB[g, i1] - PB[g, i0]
    dM = PM[g, i1] - PM[g, i0]
    dK = PK[g, i1] - PK[g, i0]
    return dB + c_M * ((s + 1 - i0) * dM + dK)


def column_cost(p_B, p_M, g, s, o_hat, tau, c_M: float, prefix=None):
    """Column cost c_{jg tau}(p) = sum_{k in K_{j tau}} (p^B_{g,k} + c_M p^M_{g,k} a^M_k).

    ``p_B``, ``p_M``: (G, T) time-indexed shadow prices; ``g``, ``s``, ``o_hat``, ``tau``
    broadcastable int arrays (tau is a 1-based step <= T). Uses :func:`price_prefix`, so each
    column costs O(1) after an O(G T) pass; pass ``prefix`` to reuse one.
    """
    T = p_B.shape[1]
    if prefix is None:
        prefix = price_prefix(p_B, p_M)
    tau = np.asarray(tau, dtype=np.int64)
    L = np.minimum(np.asarray(o_hat, dtype=np.int64), T - tau + 1)
    return _cost_from_prefix(prefix, np.asarray(g), tau - 1, L, np.asarray(s, dtype=float), c_M)


def remaining_capacity(U_B, U_M, B, M, c_M, N_hat, R_bar, rho_b, kappa: float = 1.0):
    """Right-hand side d of the SAA dual (step 2 of the per-epoch algorithm).

    d^B_{g,k} = (B_g - U^B_{g,k})^+ / N_hat, d^M_{g,k} = c_M (M_g - U^M_{g,k})^+ / N_hat, both then
    divided by R_bar and multiplied by (1 + kappa rho_b) (backlog gain; rho_b = |W| / N_tot).
    ``N_hat = sum_g B_g`` in the code. Returns ``(d_B, d_M)``, each (G, T).
    """
    B = np.asarray(B, dtype=float)[:, None]
    M = np.asarray(M, dtype=float)[:, None]
    scale = (1.0 + kappa * rho_b) / (max(1.0, float(N_hat)) * max(1.0, float(R_bar)))
    d_B = np.clip(B - U_B, 0.0, None) * scale
    d_M = np.clip(M - U_M, 0.0, None) * (c_M * scale)
    return d_B, d_M


class History:
    """History H of recorded columns (one per request: its best (g*, tau) when first scored).

    Stored as growing arrays: worker ``g``, 0-based start index ``i0 = tau - 1``, length ``L``,
    prompt ``s`` and normalised reward ``r`` (r~ at recording time). ``end`` is the largest
    exclusive end ``i0 + L`` of a recorded column: no column touches a step index at or beyond it.
    """

    def __init__(self, capacity: int = 64):
        self.n = 0
        self.end = 0
        self._a = np.zeros((5, max(1, capacity)))

    def add(self, g, i0, L, s, r) -> None:
        """Append columns (scalars or equal-length arrays)."""
        cols = np.broadcast_arrays(*(np.atleast_1d(x) for x in (g, i0, L, s, r)))
        rows = np.vstack(cols).astype(float)
        m = rows.shape[1]
        if self.n + m > self._a.shape[1]:
            grow = np.zeros((5, max(self.n + m, 2 * self._a.shape[1])))
            grow[:, : self.n] = self._a[:, : self.n]
            self._a = grow
        self._a[:, self.n : self.n + m] = rows
        self.n += m
        self.end = max(self.end, int((rows[1] + rows[2]).max()))

    def arrays(self, idx=None):
        """(g, i0, L, s, r) for the rows ``idx`` (all rows by default)."""
        a = self._a[:, : self.n] if idx is None else self._a[:, idx]
        return a[0].astype(np.int64), a[1].astype(np.int64), a[2].astype(np.int64), a[3], a[4]


def _column_entries(width: int, g, i0, L, s):
    """The entries of columns (worker g, start index i0, length L, prompt s) on a (G, width) grid:
    flat grid indices ``g * width + i0 + theta``, their KV coefficients a^M = s + theta + 1, and the
    column each entry belongs to, for theta = 0..L-1 (all columns concatenated)."""
    total = int(L.sum())
    col = np.repeat(np.arange(L.size), L)
    first = np.cumsum(L) - L
    theta = np.arange(total) - first[col]
    flat = (g * width + i0)[col] + theta
    return flat, s[col] + theta + 1.0, col


def dual_update(
    p_B,
    p_M,
    history: History,
    d_B,
    d_M,
    c_M: float,
    rng: np.random.Generator,
    K: int = 5,
    eta: float = 0.01,
    batch: int = 64,
):
    """K warm-started projected stochastic subgradient steps on the SAA dual (step 3).

    f(p) = d^T p + (1/|H|) sum_{i in H} (r~_i - a_i^T p)^+, p >= 0. Each step draws a minibatch S of
    min(batch, |H|) columns without replacement and sets
    p <- [p - eta (d - (1/|S|) sum_{i in S} 1{r~_i - a_i^T p > 0} a_i)]_+,
    where a_i stacks the batch part (ones) and the scaled KV part c_M a^M. The minibatch's column
    entries are gathered once per step (a_i^T p is a sum over the gathered prices, sum_i a_i a
    weighted count of the entries), so a step costs O(sum of the columns' lengths) plus one pass over
    the prices. Returns new (p_B, p_M); with an empty history the prices are reset to zero (as in
    the code).
    """
    if history.n == 0:
        return np.zeros_like(p_B), np.zeros_like(p_M)
    G, T = p_B.shape
    n = history.n
    bs = min(max(1, int(batch)), n)
    scale = 1.0 / bs
    p_B = np.array(p_B, dtype=float, order="C")  # a fresh copy, updated in place below
    p_M = np.array(p_M, dtype=float, order="C")
    flat_B, flat_M = p_B.reshape(-1), p_M.reshape(-1)  # views
    step_B, step_M = eta * np.asarray(d_B, dtype=float), eta * np.asarray(d_M, dtype=float)
    for _ in range(max(1, int(K))):
        idx = np.arange(n) if bs == n else rng.choice(n, size=bs, replace=False)
        g, i0, L, s, r = history.arrays(idx)
        flat, a_M, col = _column_entries(T, g, i0, L, s)
        # a_i^T p = sum over the column's steps of p^B + c_M p^M a^M
        cost = np.bincount(col, flat_B[flat] + c_M * flat_M[flat] * a_M, minlength=bs)
        act = (r - cost) > 0.0
        # p <- [p - eta d + eta (1/|S|) sum_{active i} a_i]_+
        p_B -= step_B
        p_M -= step_M
        if act.any():
            on = act[col]
            np.add.at(flat_B, flat[on], eta * scale)
            np.add.at(flat_M, flat[on], (eta * scale * c_M) * a_M[on])
        np.maximum(p_B, 0.0, out=p_B)
        np.maximum(p_M, 0.0, out=p_M)
    return p_B, p_M


class Reservations:
    """Committed reservations U^B_{g,k}, U^M_{g,k} and the hard feasibility check (step 4).

    A column (g, tau, s, L) is feasible iff U^B_{g,k} + 1 <= B_g and U^M_{g,k} + a^M_k <= M_g for all
    k in K_{j tau}. Because every column scored in an epoch starts at the same step, the check is a
    prefix maximum from that step: max_{theta < L} U^B_{g,i0+theta} <= B_g - 1 and
    max_{theta < L} (U^M_{g,i0+theta} + theta) <= M_g - s - 1.
    """

    def __init__(self, B, M, T: int):
        self.B = np.asarray(B, dtype=np.int64)
        self.M = np.asarray(M, dtype=np.int64)
        self.T = int(T)
        G = self.B.size
        self.U_B = np.zeros((G, self.T), dtype=np.int64)
        self.U_M = np.zeros((G, self.T), dtype=np.int64)

    def prefix_max(self, i0: int, width: int, g=None):
        """Running maxima of U^B and U^M + theta over the window [i0, i0 + width) (rows g or all)."""
        rows = slice(None) if g is None else g
        ub = self.U_B[rows, i0 : i0 + width]
        um = self.U_M[rows, i0 : i0 + width] + np.arange(ub.shape[-1])
        return np.maximum.accumulate(ub, axis=-1), np.maximum.accumulate(um, axis=-1)

    def feasible(self, s, L, i0: int, cm=None) -> np.ndarray:
        """Hard feasibility of starting requests (prompts s, column lengths L) at index i0.

        Returns a (n, G) bool mask. ``cm`` may pass precomputed :meth:`prefix_max` arrays.
        """
        s = np.atleast_1d(np.asarray(s, dtype=np.int64))
        L = np.atleast_1d(np.asarray(L, dtype=np.int64))
        if cm is None:
            cm = self.prefix_max(i0, int(L.max()))
        max_slots, max_kv = cm
        last = L - 1
        ok_b = max_slots[:, last].T + 1 <= self.B[None, :]
        ok_m = max_kv[:, last].T + s[:, None] + 1 <= self.M[None, :]
        return ok_b & ok_m

    def commit(self, g: int, s: int, L: int, i0: int) -> None:
        """Add the column (one batch slot, KV ramp s+1, s+2, ...) of a started request."""
        self.U_B[g, i0 : i0 + L] += 1
        self.U_M[g, i0 : i0 + L] += s + 1 + np.arange(L)

    def release(self, g: int, s: int, i_start: int, a: int, b: int) -> None:
        """Remove entries [a, b) of the column that started at index ``i_start`` on worker g."""
        a = max(a, i_start)
        b = min(b, self.T)
        if b <= a:
            return
        self.U_B[g, a:b] -= 1
        self.U_M[g, a:b] -= s + 1 + np.arange(a - i_start, b - i_start)


def admit_by_margin(margins, t_arr, eps: float, res: Reservations, s, L, i0: int, ids=None):
    """Steps 5-6 of the per-epoch algorithm: candidates, sort by margin, greedy admission.

    Candidates are the pairs (j, g) with m_jg > eps (eps = -varsigma rho_b; infeasible pairs carry
    -inf). They are sorted by margin (descending; ties by earlier arrival, then request id ``ids``
    (default: the row), then worker, as in the code) and each request is started at most once, on the candidate's worker, if its column
    is still feasible given what this epoch has already committed; admitted columns are committed
    to ``res``. Returns ``(admitted, n_candidates)`` with ``admitted`` a list of (row, g).
    """
    margins = np.asarray(margins, dtype=float)
    s = np.asarray(s, dtype=np.int64)
    L = np.asarray(L, dtype=np.int64)
    rows, gs = np.nonzero(margins > eps)
    if rows.size == 0:
        return [], 0
    t = np.asarray(t_arr)[rows]
    rid = rows if ids is None else np.asarray(ids)[rows]
    order = np.lexsort((gs, rid, t, -margins[rows, gs]))
    width = int(L.max())
    max_slots, max_kv = (a.copy() for a in res.prefix_max(i0, width))
    started = set()
    admitted = []
    for c in order:
        j = int(rows[c])
        g = int(gs[c])
        if j in started:
            continue
        last = L[j] - 1
        if max_slots[g, last] + 1 > res.B[g] or max_kv[g, last] + s[j] + 1 > res.M[g]:
            continue
        res.commit(g, int(s[j]), int(L[j]), i0)
        nb, nm = res.prefix_max(i0, width, g)
        max_slots[g, : nb.size] = nb
        max_kv[g, : nm.size] = nm
        started.add(j)
        admitted.append((j, g))
    return admitted, int(rows.size)


@dataclass
class OLPConfig:
    """Hyperparameters of the OLP bid-price router (code names in brackets).

    Weights alpha, beta, gamma (throughput, E2E, TTFT), sigma (constant), w_gp / W_gp (goodput
    weight and window) [goodput_weight / goodput_window]; K [grad_steps], eta [step_size],
    batch [batch_size], mem_scale_factor, kappa [backlog_gain], varsigma [backlog_slack],
    lambda_len [length_penalty], max_waiting, R_bar [reward_normalizer; None means T].
    Objective weights not given default to 0; if none is given, beta = 1 (see __post_init__).
    Two defaults differ from the code's: varsigma = 1 (the released scripts' value; the code's
    default is 0) and max_waiting = 64 (our choice, for the book's budget; the code scores the whole buffer).
    """

    alpha: float | None = None
    beta: float | None = None
    gamma: float | None = None
    sigma: float = 0.0
    w_gp: float = 0.0
    W_gp: int = 20
    K: int = 5
    eta: float = 0.01
    batch: int = 64
    mem_scale_factor: float = 1.0
    kappa: float = 1.0
    varsigma: float = 1.0
    lambda_len: float = 0.0
    max_waiting: int = 64
    R_bar: float | None = None

    def __post_init__(self):
        """Resolve the objective weights: none given -> (alpha, beta, gamma) = (0, 1, 0) (the
        released sweep script); otherwise any weight not given is 0, so ``alpha=1`` means the pure
        throughput objective (1, 0, 0), not (1, 1, 0)."""
        w = (self.alpha, self.beta, self.gamma)
        if all(x is None for x in w):
            self.alpha, self.beta, self.gamma = 0.0, 1.0, 0.0
        else:
            self.alpha, self.beta, self.gamma = (0.0 if x is None else float(x) for x in w)


def knapsack_price_step(p: float, a: float, x, d: float, eta: float) -> float:
    """One projected subgradient step of the single-resource dual: max(0, p + eta (a x - d))."""
    return max(0.0, p + eta * (a * x - d))
