"""OLP-Router: bid-price (online linear programming) routing for LLM serving, at CPU scale.

Paper: Chen, Ye, Zhou, "Online Linear Programming for Multi-Objective Routing in LLM Serving"
(ICML 2026, arXiv 2607.03948). Official code: github.com/qqwetidx/Online-Linear-Programming-for-Vidur,
file ``vidur/scheduler/global_scheduler/online_lp_global_scheduler.py`` (policy ``dual_ahd``).

Contents (numpy only):

1. Workload: Poisson arrivals, log-normal prompt / decode lengths, exact or noisy predictions.
2. The LP pieces, each a small function beside its equation: :func:`action_column` (the time-indexed
   column: a batch step and a KV ramp), :func:`slo_reward` (the SLO-weighted reward r), :func:`column_cost`
   (a^T p via prefix sums), :func:`remaining_capacity` (the right-hand side d), :func:`dual_update` (K
   projected subgradient steps on the SAA dual f(p)), :class:`Reservations` (committed U^B, U^M and
   the hard feasibility check), :func:`admit_by_margin` (steps 5-6 of the per-epoch algorithm).
3. A time-stepped cluster simulator shared by every policy (:class:`ClusterSim`), the heuristics
   (Round Robin, Random, LOR, Power-of-two) that dispatch on arrival, the central-buffer ablations
   (FCFS, shortest-predicted-job-first) and the OLP bid-price router; :func:`run_policy` and
   :func:`metrics`.
4. Theory illustration: single-resource online knapsack (offline LP, bid price with the offline
   dual, one-pass projected-SGD dual, first-come greedy).
5. Chapter helpers: experiment profiles, :func:`run_experiment` (every variant on every seed),
   :func:`claim_values` (the metrics of ``chapter.yml``), exercise graders.

Conventions. Steps are 1-based, ``k = 1..T``; arrays over the horizon are 0-based, so step ``k``
lives at index ``k - 1``. A request admitted at step ``tau`` emits its first token in step ``tau``
and its ``o``-th (last) token in step ``tau + o - 1``; TTFT = first-token step - arrival step,
E2E = completion step - arrival step + 1 (both in steps).

Fidelity notes (where the digest leaves room, the reading closest to the official code is used):

* Epoch trigger: the code runs a scheduling epoch at every arrival and at every *batch end* of
  any replica while requests wait. In Vidur a batch is one model iteration, i.e. one step of this
  simulator, so the default ``trigger="batch_end"`` runs an epoch in every step in which the buffer
  is non-empty (and a worker ran or a request arrived; we also fire when every worker is idle so
  that the buffer cannot stall, which the event-driven code never needs). ``trigger="events"`` is
  the sparser reading "arrivals and request completions" (with the same idle guard).
* Reward normaliser: ``R_bar = T`` (digest's proposal; the code default 1 makes almost every reward
  cap at 1).
* Predictions: columns are scored and reserved with the predicted length ``o_hat`` (the paper);
  the code uses the true length. When ``o_hat != o`` the unused part of a reservation is released
  at completion and an overrunning request's reservation is extended step by step (digest's
  proposal, not stated in the paper or code).
* History H: like the code, a request's column is recorded the first time it is scored, on its
  best worker ``argmax_g m_jg``; when no worker is feasible numpy's argmax returns worker 0 and that
  column is recorded anyway (as in the code).
* Price halving: the code halves prices when no (request, worker) pair passes the margin threshold;
  since the best candidate is always feasible this is the same as "nothing admitted".
* Preempted requests of the central policies (possible only with noisy predictions, when
  extended reservations overflow) release their remaining reservation and go back to the head of
  the router's buffer, to be re-scored (TTFT keeps the first token). The committed U^B, U^M
  then always equal the batch slots and KV tokens actually in use, so a router-admitted request
  always starts in the step it was admitted (a test checks U^M against the KV trace).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "POLICIES",
    "Workload",
    "generate_workload",
    "horizon",
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
    "ClusterSim",
    "SimResult",
    "run_policy",
    "metrics",
    "knapsack_instance",
    "knapsack_offline",
    "knapsack_bid_price",
    "knapsack_price_step",
    "knapsack_sgd",
    "knapsack_greedy",
    "knapsack_compare",
    "N_WORKERS",
    "BATCH_CAPACITY",
    "KV_CAPACITY",
    "EXPERIMENT_PROFILES",
    "VARIANTS",
    "REPORTED_METRICS",
    "run_experiment",
    "claim_values",
    "check_kv_ramp",
    "check_price_step",
]

PRICE_WINDOW = 100  # steps over which the price traces average p (about one decode length)
N_WORKERS = 4  # G
BATCH_CAPACITY = 16  # B_g
KV_CAPACITY = 2048  # M_g, KV tokens

DISPATCH_POLICIES = ("round_robin", "random", "lor", "p2c")
CENTRAL_POLICIES = ("central_fcfs", "central_sjf", "olp")
POLICIES = DISPATCH_POLICIES + CENTRAL_POLICIES


# --------------------------------------------------------------------------------------------
# 1. Workload
# --------------------------------------------------------------------------------------------


@dataclass
class Workload:
    """Requests of one run, sorted by arrival step.

    ``arrival`` (1-based step t_j), ``s`` (prompt length), ``o`` (true decode length), ``o_hat``
    (predicted decode length used by the router); all int64 arrays of equal length.
    """

    arrival: np.ndarray
    s: np.ndarray
    o: np.ndarray
    o_hat: np.ndarray
    arrival_steps: int
    rate: float
    noise: float

    @property
    def n(self) -> int:
        """Number of requests N_tot."""
        return int(self.arrival.size)


def generate_workload(
    rng: np.random.Generator,
    rate: float = 0.55,
    arrival_steps: int = 800,
    prompt_mean: float = 80.0,
    decode_mean: float = 100.0,
    noise: float = 0.0,
    prompt_sigma: float = 0.8,
    decode_sigma: float = 0.8,
    prompt_clip: tuple[int, int] = (8, 512),
    decode_clip: tuple[int, int] = (4, 400),
) -> Workload:
    """Toy workload of the digest's "Minimal CPU replication".

    Poisson(``rate``) arrivals in each step ``1..arrival_steps``; prompt length s and decode length o
    log-normal with the given (pre-clipping) means and log-scale ``sigma``, rounded and clipped to
    [8, 512] and [4, 400]; predictions ``o_hat = max(1, round(u * o))`` with ``u ~ U(1 - noise,
    1 + noise)`` (``noise = 0.2`` is the paper's noisy setting; ``noise = 0`` gives ``o_hat = o``).
    The uniforms are drawn whatever ``noise`` is, so one seed gives the same arrivals and lengths
    with exact and with noisy predictions.
    """
    counts = rng.poisson(rate, size=int(arrival_steps))
    arrival = np.repeat(np.arange(1, int(arrival_steps) + 1, dtype=np.int64), counts)
    n = arrival.size

    def lognormal(mean: float, sigma: float, clip: tuple[int, int]) -> np.ndarray:
        """LogNormal with the given mean (mu = ln mean - sigma^2 / 2), rounded and clipped."""
        mu = np.log(mean) - 0.5 * sigma**2
        x = np.rint(rng.lognormal(mu, sigma, size=n))
        return np.clip(x, clip[0], clip[1]).astype(np.int64)

    s = lognormal(prompt_mean, prompt_sigma, prompt_clip)
    o = lognormal(decode_mean, decode_sigma, decode_clip)
    u = rng.uniform(1.0 - noise, 1.0 + noise, size=n)
    o_hat = o.copy() if noise == 0 else np.maximum(1, np.rint(u * o)).astype(np.int64)
    return Workload(arrival, s, o, o_hat, int(arrival_steps), float(rate), float(noise))


def horizon(workload: Workload, drain: int = 1500) -> int:
    """Horizon T = arrival steps + drain steps (the LP's T; it enters every reward)."""
    return int(workload.arrival_steps + drain)


# --------------------------------------------------------------------------------------------
# 2. The LP pieces
# --------------------------------------------------------------------------------------------


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
    normalised reward r~ = min(r / R_bar, 1). ``R_bar`` defaults to T (digest's proposal; the
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
    prompt ``s`` and normalised reward ``r`` (r~ at recording time).
    """

    def __init__(self, capacity: int = 64):
        self.n = 0
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

    def arrays(self, idx=None):
        """(g, i0, L, s, r) for the rows ``idx`` (all rows by default)."""
        a = self._a[:, : self.n] if idx is None else self._a[:, idx]
        return a[0].astype(np.int64), a[1].astype(np.int64), a[2].astype(np.int64), a[3], a[4]


def _column_load(G, T, g, i0, L, s, weight):
    """sum_i weight_i a_i over columns, as (count, KV) arrays of shape (G, T) via difference arrays.

    count[g,k] = sum_i w_i 1{k in K_i}; KV[g,k] = sum_i w_i (s_i + 1 - i0_i + k) 1{k in K_i}.
    """
    W = T + 1
    start = g * W + i0
    end = g * W + i0 + L
    idx = np.concatenate([start, end])
    c = weight * (s + 1 - i0)
    both = np.empty((2, G * W))
    both[0] = np.bincount(idx, np.concatenate([weight, -weight]), minlength=G * W)
    both[1] = np.bincount(idx, np.concatenate([c, -c]), minlength=G * W)
    both = np.cumsum(both.reshape(2, G, W), axis=2)[:, :, :T]
    cnt = both[0]
    return cnt, both[1] + cnt * np.arange(T, dtype=float)


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
    where a_i stacks the batch part (ones) and the scaled KV part c_M a^M. All minibatch columns are
    handled at once (prefix sums for a_i^T p, difference arrays for sum a_i). Returns new (p_B, p_M);
    with an empty history the prices are reset to zero (as in the code).
    """
    if history.n == 0:
        return np.zeros_like(p_B), np.zeros_like(p_M)
    G, T = p_B.shape
    n = history.n
    bs = min(max(1, int(batch)), n)
    scale = 1.0 / bs
    p_B = p_B.copy()
    p_M = p_M.copy()
    for _ in range(max(1, int(K))):
        idx = np.arange(n) if bs == n else rng.choice(n, size=bs, replace=False)
        g, i0, L, s, r = history.arrays(idx)
        # only the window [lo, hi) spanned by the minibatch needs prefix sums and column loads
        lo, hi = int(i0.min()), int((i0 + L).max())
        j0 = i0 - lo
        pre = price_prefix(p_B[:, lo:hi], p_M[:, lo:hi])
        act = (r - _cost_from_prefix(pre, g, j0, L, s, c_M)) > 0.0
        new_B = p_B - eta * d_B
        new_M = p_M - eta * d_M
        if act.any():
            w = np.full(int(act.sum()), scale)
            cnt, kv = _column_load(G, hi - lo, g[act], j0[act], L[act], s[act], w)
            new_B[:, lo:hi] += eta * cnt
            new_M[:, lo:hi] += (eta * c_M) * kv
        p_B = np.maximum(0.0, new_B, out=new_B)
        p_M = np.maximum(0.0, new_M, out=new_M)
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


# --------------------------------------------------------------------------------------------
# 3. Simulator and policies
# --------------------------------------------------------------------------------------------


@dataclass
class OLPConfig:
    """Hyperparameters of the OLP bid-price router (code names in brackets).

    Weights alpha, beta, gamma (throughput, E2E, TTFT), sigma (constant), w_gp / W_gp (goodput
    weight and window) [goodput_weight / goodput_window]; K [grad_steps], eta [step_size],
    batch [batch_size], mem_scale_factor, kappa [backlog_gain], varsigma [backlog_slack],
    lambda_len [length_penalty], max_waiting, R_bar [reward_normalizer; None means T].
    Objective weights not given default to 0; if none is given, beta = 1 (see __post_init__).
    Two defaults differ from the code's: varsigma = 1 (the released scripts' value; the code's
    default is 0) and max_waiting = 64 (the digest's book budget; the code scores the whole buffer).
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


@dataclass
class SimResult:
    """Outcome and traces of one simulated run.

    Per request (index = workload row): ``first_token`` and ``completion`` steps (-1 if never),
    ``worker``. Per step (rows 0..steps-1 for steps 1..steps): ``buffer_len``, ``kv`` (G columns,
    KV tokens held during the step: s + tokens generated, summed over the requests that ran in it,
    those finishing in it included), ``price_B`` / ``price_M`` (OLP only: the mean of p^B and p^M
    per worker over steps k..k + PRICE_WINDOW - 1, after the step's epoch). Events:
    ``preemptions`` (step, worker) pairs, ``epoch_steps`` and ``epoch_seconds`` (wall clock of each
    central scheduling epoch).
    """

    policy: str
    T: int
    steps: int
    arrival: np.ndarray
    o: np.ndarray
    first_token: np.ndarray
    completion: np.ndarray
    worker: np.ndarray
    tokens_emitted: int
    buffer_len: np.ndarray
    kv: np.ndarray
    preemptions: list
    epoch_steps: list = field(default_factory=list)
    epoch_seconds: list = field(default_factory=list)
    price_B: np.ndarray | None = None
    price_M: np.ndarray | None = None
    wall_seconds: float = 0.0


class ClusterSim:
    """Time-stepped simulator of G continuous-batching workers, shared by every policy.

    Per step k: (1) arrivals are dispatched to worker queues (heuristics) or join the central
    buffer W; (2) reservations of overrunning requests are extended to step k (central policies,
    noisy predictions); (3) a central scheduling epoch runs if triggered; (4) each worker, in order:
    if its running requests need more than M KV tokens this step (s + generated + 1 each) it
    preempts the most recently admitted request, discards its progress and puts it back at the
    head of its queue (vLLM recompute) and, as vLLM does, admits nobody in a step with a
    preemption (central policies: the preempted request returns to the head of the router's
    buffer); otherwise it admits FCFS from its queue while running < B and need + s + 1 <= M;
    every running request then emits one token, and a request whose o-th token this is completes.
    The loop stops once every request has completed (or at T).

    Arguments: ``G`` workers with batch caps ``B`` and KV caps ``M`` (scalars or per-worker);
    horizon T = arrival steps + ``drain``; ``olp`` the router's :class:`OLPConfig`; ``trigger``
    when central epochs fire ("batch_end": every step with a non-empty buffer, as the code's
    per-iteration batch-end events; "events": arrivals and completions only). The OLP router and
    the price-free ablations score the same number of buffered requests, ``olp.max_waiting``.
    """

    def __init__(
        self,
        workload: Workload,
        policy: str,
        rng: np.random.Generator,
        G: int = N_WORKERS,
        B=BATCH_CAPACITY,
        M=KV_CAPACITY,
        drain: int = 1500,
        olp: OLPConfig | None = None,
        trigger: str = "batch_end",
    ):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
        if trigger not in ("batch_end", "events"):
            raise ValueError(f"unknown trigger {trigger!r}; valid: batch_end, events")
        self.w = workload
        self.policy = policy
        self.rng = rng
        self.G = int(G)
        self.B = np.broadcast_to(np.asarray(B, dtype=np.int64), (self.G,)).copy()
        self.M = np.broadcast_to(np.asarray(M, dtype=np.int64), (self.G,)).copy()
        self.T = horizon(workload, drain)
        self.trigger = trigger
        self.olp = olp if olp is not None else OLPConfig()
        self.central = policy in CENTRAL_POLICIES

    # ---- central-policy epochs ---------------------------------------------------------------

    def _olp_setup(self):
        """Router state: zero prices p^B, p^M over (worker, step), c_M, N_hat, R_bar, empty H."""
        cfg = self.olp
        G, T = self.G, self.T
        self.p_B = np.zeros((G, T))
        self.p_M = np.zeros((G, T))
        self.c_M = float(cfg.mem_scale_factor) / max(1.0, float(self.M.max()))
        self.N_hat = float(self.B.sum())
        self.R_bar = float(T if cfg.R_bar is None else cfg.R_bar)
        self.hist = History(capacity=max(64, self.w.n))
        self.recorded = np.zeros(self.w.n, dtype=bool)

    def _olp_epoch(self, k: int, buffer: list) -> list:
        """One scheduling epoch of the bid-price router (steps 2-7 of the per-epoch algorithm)."""
        cfg, w, res = self.olp, self.w, self.res
        rho = len(buffer) / max(1, w.n)
        # step 2: remaining-capacity right-hand side
        d_B, d_M = remaining_capacity(
            res.U_B, res.U_M, self.B, self.M, self.c_M, self.N_hat, self.R_bar, rho, cfg.kappa
        )
        # step 3: warm-started dual update
        self.p_B, self.p_M = dual_update(
            self.p_B, self.p_M, self.hist, d_B, d_M, self.c_M, self.rng, cfg.K, cfg.eta, cfg.batch
        )
        # step 4: feasibility, margins, history
        scored = self._scored(buffer)
        i0 = k - 1
        s, o_hat = w.s[scored], w.o_hat[scored]
        L = np.minimum(o_hat, self.T - k + 1)
        reward = slo_reward(
            o_hat,
            k,
            w.arrival[scored],
            self.T,
            alpha=cfg.alpha,
            beta=cfg.beta,
            gamma=cfg.gamma,
            sigma=cfg.sigma,
            w_gp=cfg.w_gp,
            W_gp=cfg.W_gp,
            R_bar=self.R_bar,
        ).r_norm
        feasible = res.feasible(s, L, i0)
        # every scored column lies in [i0, i0 + max L): price only that window (tau = 1 in it)
        hi = i0 + int(L.max())
        workers = np.arange(self.G)[None, :]
        cost = column_cost(
            self.p_B[:, i0:hi], self.p_M[:, i0:hi], workers, s[:, None], L[:, None], 1, self.c_M
        )
        margin = reward[:, None] - cost - cfg.lambda_len * o_hat[:, None]
        margin[~feasible] = -np.inf
        new = np.nonzero(~self.recorded[scored])[0]
        if new.size:  # H records each request's best column the first time it is scored
            self.hist.add(np.argmax(margin[new], axis=1), i0, L[new], s[new], reward[new])
            self.recorded[scored[new]] = True
        # steps 5-6: candidates and greedy admission
        eps = -cfg.varsigma * rho
        admitted, n_candidates = admit_by_margin(
            margin, w.arrival[scored], eps, res, s, L, i0, ids=scored
        )
        # step 7: anti-starvation price halving
        if n_candidates == 0 and rho > 0 and cfg.varsigma > 0:
            self.p_B *= 0.5
            self.p_M *= 0.5
        return [(int(scored[j]), g, int(L[j])) for j, g in admitted]

    def _scored(self, buffer: list) -> np.ndarray:
        """The buffered requests an epoch considers: the first ``max_waiting`` (all if <= 0)."""
        limit = self.olp.max_waiting
        return np.asarray(buffer[:limit] if limit and limit > 0 else buffer, dtype=np.int64)

    def _ablation_epoch(self, k: int, buffer: list) -> list:
        """Central buffer + greedy feasible admission without prices (FCFS or shortest o_hat first).

        Same exact reservation check as OLP; each request in order starts on the feasible worker
        with the least committed KV at step k (ties: fewer committed slots, lower index).
        """
        w, res = self.w, self.res
        sel = self._scored(buffer)
        if self.policy == "central_sjf":
            sel = sel[np.lexsort((sel, w.o_hat[sel]))]
        i0 = k - 1
        L = np.minimum(w.o_hat[sel], self.T - k + 1)
        width = int(L.max())
        max_slots, max_kv = (a.copy() for a in res.prefix_max(i0, width))
        out = []
        for j, Lj in zip(sel.tolist(), L.tolist()):
            sj = int(w.s[j])
            ok = (max_slots[:, Lj - 1] + 1 <= self.B) & (max_kv[:, Lj - 1] + sj + 1 <= self.M)
            if not ok.any():
                continue
            cand = np.nonzero(ok)[0]
            key = np.lexsort((cand, res.U_B[cand, i0], res.U_M[cand, i0]))
            g = int(cand[key[0]])
            res.commit(g, sj, Lj, i0)
            nb, nm = res.prefix_max(i0, width, g)
            max_slots[g, : nb.size] = nb
            max_kv[g, : nm.size] = nm
            out.append((j, g, Lj))
        return out

    # ---- main loop ---------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Simulate steps 1..T (stopping once all requests completed) and return the traces."""
        t_wall = time.perf_counter()
        self._reset()
        k = 0
        for k in range(1, self.T + 1):
            arrivals = range(self.bounds[k - 1], self.bounds[k])
            self._arrive(arrivals)  # (1)
            if self.central and self.noisy:
                self._extend_overruns(k)  # (2)
            if self.central and self.buffer and self._epoch_fires(k, len(arrivals)):
                self._scheduling_epoch(k)  # (3)
            self.busy = self.completed = False
            for g in range(self.G):
                self._step_worker(g, k)  # (4)
            self._record(k)
            if self.done == self.w.n:
                break
        return self._result(k, time.perf_counter() - t_wall)

    def _reset(self) -> None:
        """Fresh per-run state: per-request progress, worker queues and batches, traces."""
        w, G, T, n = self.w, self.G, self.T, self.w.n
        self.s_l, self.o_l = w.s.tolist(), w.o.tolist()
        self.B_l, self.M_l = self.B.tolist(), self.M.tolist()
        self.first, self.comp, self.worker = [-1] * n, [-1] * n, [-1] * n
        self.start = [0] * n  # step of the current attempt's admission
        self.res_i0 = [-1] * n  # 0-based start of the current reservation (central), -1 none
        self.res_end = [0] * n  # exclusive end index of the current reservation
        self.queues = [deque() for _ in range(G)]
        self.running = [[] for _ in range(G)]
        self.kv_used = [0] * G  # sum over running requests of s + tokens generated
        self.bounds = np.searchsorted(w.arrival, np.arange(1, T + 2), side="left").tolist()
        self.noisy = bool(np.any(w.o_hat != w.o))
        self.res = Reservations(self.B, self.M, T) if self.central else None
        if self.policy == "olp":
            self._olp_setup()
            self.price_B, self.price_M = np.zeros((T, G)), np.zeros((T, G))
        self.buffer: list = []
        self.buf_trace = np.zeros(T, dtype=np.int64)
        self.kv_trace = np.zeros((T, G), dtype=np.int64)
        self.preemptions: list = []
        self.epoch_steps: list = []
        self.epoch_seconds: list = []
        self.rr = self.done = self.emitted = 0
        self.busy = self.completed = False

    def _arrive(self, arrivals) -> None:
        """(1) New requests join the central buffer, or are dispatched to a worker queue."""
        if self.central:
            self.buffer.extend(arrivals)
            return
        for j in arrivals:
            g = self._dispatch()
            self.queues[g].append(j)
            self.worker[j] = g

    def _dispatch(self) -> int:
        """The heuristics' choice of worker on arrival: Round Robin, Random, LOR or Power-of-two,
        where the load of a worker is its queued plus running requests."""
        G = self.G
        if self.policy == "round_robin":
            self.rr += 1
            return (self.rr - 1) % G
        if self.policy == "random":
            return int(self.rng.integers(G))
        load = [len(self.queues[h]) + len(self.running[h]) for h in range(G)]
        if self.policy == "lor":
            return load.index(min(load))
        a, b = self.rng.choice(G, size=2, replace=False).tolist()  # p2c
        return b if load[b] < load[a] else a

    def _extend_overruns(self, k: int) -> None:
        """(2) A request that outlives its predicted length keeps its slot and KV ramp reserved one
        more step (digest's proposal for noisy predictions)."""
        res = self.res
        for g in range(self.G):
            for j in self.running[g]:
                if self.res_end[j] <= k - 1 < self.T:
                    res.U_B[g, k - 1] += 1
                    res.U_M[g, k - 1] += self.s_l[j] + (k - self.start[j]) + 1
                    self.res_end[j] = k

    def _epoch_fires(self, k: int, n_arrivals: int) -> bool:
        """Epochs fire at arrivals and at batch ends ("batch_end": any worker ran last step) or
        completions ("events"), and whenever every worker is idle, so the buffer never stalls."""
        idle = not any(self.running)
        later = self.busy if self.trigger == "batch_end" else self.completed
        return n_arrivals > 0 or later or idle

    def _scheduling_epoch(self, k: int) -> None:
        """(3) One central epoch (OLP or a price-free ablation); admitted requests leave the buffer
        for their worker's queue, with their reservation recorded."""
        t0 = time.perf_counter()
        epoch = self._olp_epoch if self.policy == "olp" else self._ablation_epoch
        admitted = epoch(k, self.buffer)
        for j, g, L in admitted:
            self.queues[g].append(j)
            self.worker[j] = g
            self.res_i0[j], self.res_end[j] = k - 1, k - 1 + L
        if admitted:
            gone = {j for j, _, _ in admitted}
            self.buffer = [j for j in self.buffer if j not in gone]
        self.epoch_seconds.append(time.perf_counter() - t0)
        self.epoch_steps.append(k)

    def _step_worker(self, g: int, k: int) -> None:
        """(4) One decode iteration of worker g: preempt on KV overflow, else admit FCFS from its
        queue; every running request emits a token; finished requests leave."""
        run, queue, s_l = self.running[g], self.queues[g], self.s_l
        need = self.kv_used[g] + len(run)  # KV needed if every running request emits a token
        if need > self.M_l[g] and run:
            while need > self.M_l[g] and run:
                need -= self._preempt(g, k)
        else:
            while queue and len(run) < self.B_l[g] and need + s_l[queue[0]] + 1 <= self.M_l[g]:
                j = queue.popleft()
                run.append(j)
                self.start[j] = k
                if self.first[j] < 0:
                    self.first[j] = k
                need += s_l[j] + 1
                self.kv_used[g] += s_l[j]
        if self.central and queue:
            # cannot happen: U^B, U^M equal the slots / KV in use, so a column that passed the
            # router's check fits its worker in the step it was admitted
            raise RuntimeError(f"router-admitted request not startable at step {k}")
        if not run:
            return
        self.busy = True
        self.kv_used[g] += len(run)
        self.emitted += len(run)
        self.kv_trace[k - 1, g] = self.kv_used[g]  # in use during step k, finishing ones included
        finished = [j for j in run if k - self.start[j] + 1 >= self.o_l[j]]
        for j in finished:
            run.remove(j)
            self.comp[j] = k
            self.kv_used[g] -= s_l[j] + self.o_l[j]
            if self.central and self.res_end[j] > k:
                self.res.release(g, s_l[j], self.res_i0[j], k, self.res_end[j])
        self.done += len(finished)
        self.completed = self.completed or bool(finished)

    def _preempt(self, g: int, k: int) -> int:
        """vLLM recompute: drop the most recently admitted request of worker g, discard its
        progress and requeue it at the head (central policies: of the router's buffer, with its
        reservation released). Returns the KV tokens this frees for the step."""
        j = self.running[g].pop()
        generated = k - self.start[j]
        self.kv_used[g] -= self.s_l[j] + generated
        self.preemptions.append((k, g))
        if self.central:
            self.res.release(g, self.s_l[j], self.res_i0[j], k - 1, self.res_end[j])
            self.res_i0[j] = -1
            self.buffer.insert(0, j)
        else:
            self.queues[g].appendleft(j)
        return self.s_l[j] + generated + 1

    def _record(self, k: int) -> None:
        """Per-step traces: buffer length and (OLP) the prices a column starting now would meet,
        averaged over the next PRICE_WINDOW steps."""
        self.buf_trace[k - 1] = len(self.buffer)
        if self.policy == "olp":
            window = slice(k - 1, k - 1 + PRICE_WINDOW)
            self.price_B[k - 1] = self.p_B[:, window].mean(axis=1)
            self.price_M[k - 1] = self.p_M[:, window].mean(axis=1)

    def _result(self, steps: int, seconds: float) -> SimResult:
        olp = self.policy == "olp"
        return SimResult(
            policy=self.policy,
            T=self.T,
            steps=steps,
            arrival=self.w.arrival.copy(),
            o=self.w.o.copy(),
            first_token=np.asarray(self.first, dtype=np.int64),
            completion=np.asarray(self.comp, dtype=np.int64),
            worker=np.asarray(self.worker, dtype=np.int64),
            tokens_emitted=int(self.emitted),
            buffer_len=self.buf_trace[:steps],
            kv=self.kv_trace[:steps],
            preemptions=self.preemptions,
            epoch_steps=self.epoch_steps,
            epoch_seconds=self.epoch_seconds,
            price_B=self.price_B[:steps] if olp else None,
            price_M=self.price_M[:steps] if olp else None,
            wall_seconds=seconds,
        )


_OLP_KEYS = tuple(OLPConfig.__dataclass_fields__)


def run_policy(
    name: str,
    workload: Workload,
    seed: int = 0,
    *,
    G: int = N_WORKERS,
    B=BATCH_CAPACITY,
    M=KV_CAPACITY,
    drain: int = 1500,
    trigger: str = "batch_end",
    **olp_weights,
) -> SimResult:
    """Run one policy on a workload; the experiment notebook's entry point.

    ``name`` is one of :data:`POLICIES` ("round_robin", "random", "lor", "p2c", "central_fcfs",
    "central_sjf", "olp"). OLP keywords (alpha, beta, gamma, w_gp, ... any :class:`OLPConfig`
    field) are accepted only for "olp". ``seed`` seeds the policy's randomness (Random / P2C draws,
    OLP minibatches) through ``default_rng([seed, 1])``, a stream distinct from a workload drawn
    with ``default_rng(seed)``.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}")
    bad = [key for key in olp_weights if key not in _OLP_KEYS]
    if bad:
        raise ValueError(f"unknown OLP keyword(s) {bad}; valid: {', '.join(_OLP_KEYS)}")
    if olp_weights and name != "olp":
        raise ValueError(f"OLP keywords {sorted(olp_weights)} given to policy {name!r}")
    sim = ClusterSim(
        workload,
        name,
        np.random.default_rng([int(seed), 1]),
        G=G,
        B=B,
        M=M,
        drain=drain,
        olp=OLPConfig(**olp_weights),
        trigger=trigger,
    )
    return sim.run()


def metrics(result: SimResult, ttft_slo: int = 20) -> dict:
    """Latency / throughput summary of a run (all latencies in steps).

    E2E = completion - arrival + 1 over completed requests (mean, P95, P99); TTFT = first token -
    arrival over started requests (mean, P99); ``ttft_le_20``: share of *all* requests whose TTFT
    is <= ``ttft_slo``; completed requests; ``tokens`` delivered (sum of o over completed requests)
    and ``tokens_emitted`` (including work discarded by preemptions); preemptions; router
    milliseconds per scheduling epoch (NaN for policies without epochs).
    """
    done = result.completion >= 0
    started = result.first_token >= 0
    e2e = (result.completion - result.arrival + 1)[done].astype(float)
    ttft = (result.first_token - result.arrival)[started].astype(float)

    def q(x, p):
        """Percentile, NaN when empty."""
        return float(np.percentile(x, p)) if x.size else float("nan")

    n = result.arrival.size
    return {
        "mean_e2e": float(e2e.mean()) if e2e.size else float("nan"),
        "p95_e2e": q(e2e, 95),
        "p99_e2e": q(e2e, 99),
        "mean_ttft": float(ttft.mean()) if ttft.size else float("nan"),
        "p99_ttft": q(ttft, 99),
        "ttft_le_20": float(np.sum(ttft <= ttft_slo) / max(1, n)),
        "completed": int(done.sum()),
        "requests": int(n),
        "tokens": int(result.o[done].sum()),
        "tokens_emitted": int(result.tokens_emitted),
        "preemptions": int(len(result.preemptions)),
        "epochs": int(len(result.epoch_seconds)),
        "ms_per_epoch": (
            float(1e3 * np.mean(result.epoch_seconds)) if result.epoch_seconds else float("nan")
        ),
        "steps": int(result.steps),
        "wall_s": float(result.wall_seconds),
    }


# --------------------------------------------------------------------------------------------
# 4. Theory illustration: single-resource online knapsack
# --------------------------------------------------------------------------------------------


def knapsack_instance(rng: np.random.Generator, n: int, cap_ratio: float = 0.25):
    """n i.i.d. items, reward r ~ U(0, 1), size a ~ U(0.5, 1.5), capacity b = cap_ratio * n."""
    r = rng.uniform(0.0, 1.0, size=n)
    a = rng.uniform(0.5, 1.5, size=n)
    return r, a, cap_ratio * n


def knapsack_offline(r, a, b: float):
    """Offline (hindsight) LP max r^T x s.t. a^T x <= b, 0 <= x <= 1: greedy by r/a, last item split.

    Returns ``(value, p_star)`` with p_star the optimal dual price (the ratio r/a of the critical
    item; 0 when the capacity does not bind).
    """
    r = np.asarray(r, dtype=float)
    a = np.asarray(a, dtype=float)
    order = np.argsort(-r / a, kind="stable")
    ca = np.cumsum(a[order])
    full = int(np.searchsorted(ca, b, side="right"))
    value = float(r[order[:full]].sum())
    if full >= r.size:
        return value, 0.0
    used = ca[full - 1] if full > 0 else 0.0
    crit = order[full]
    value += float(r[crit] * (b - used) / a[crit])
    return value, float(r[crit] / a[crit])


def knapsack_bid_price(r, a, b: float, p: float) -> float:
    """Online bid-price policy with a fixed price p: accept item t iff r_t > p a_t and it fits."""
    rem = float(b)
    total = 0.0
    for rt, at in zip(np.asarray(r).tolist(), np.asarray(a).tolist()):
        if rt > p * at and at <= rem:
            rem -= at
            total += rt
    return total


def knapsack_price_step(p: float, a: float, x, d: float, eta: float) -> float:
    """One projected subgradient step of the single-resource dual: max(0, p + eta (a x - d))."""
    return max(0.0, p + eta * (a * x - d))


def knapsack_sgd(r, a, b: float, eta: float | None = None):
    """One-pass projected-SGD dual (Li, Sun & Ye): x_t = 1{r_t > p_t a_t} (if it fits),
    p_{t+1} = max(0, p_t + eta (a_t x_t - d)) with d = b / n and eta = 1 / sqrt(n) by default.

    Returns ``(value, p_traj)`` with the price before each item and after the last (n + 1 values).
    """
    r = np.asarray(r, dtype=float)
    a = np.asarray(a, dtype=float)
    n = r.size
    eta = 1.0 / np.sqrt(n) if eta is None else float(eta)
    d = b / n
    p = 0.0
    rem = float(b)
    total = 0.0
    traj = [p]
    for rt, at in zip(r.tolist(), a.tolist()):
        x = rt > p * at and at <= rem
        if x:
            rem -= at
            total += rt
        p = knapsack_price_step(p, at, x, d, eta)
        traj.append(p)
    return total, np.asarray(traj)


def knapsack_greedy(r, a, b: float) -> float:
    """First-come greedy: accept every item that still fits."""
    return knapsack_bid_price(r, a, b, p=-np.inf)


def knapsack_compare(rng: np.random.Generator, n: int, cap_ratio: float = 0.25) -> dict:
    """Total reward of offline LP, offline-dual bid price, SGD dual and greedy on one instance."""
    r, a, b = knapsack_instance(rng, n, cap_ratio)
    lp, p_star = knapsack_offline(r, a, b)
    sgd, traj = knapsack_sgd(r, a, b)
    return {
        "n": n,
        "offline_lp": lp,
        "p_star": p_star,
        "bid_price": knapsack_bid_price(r, a, b, p_star),
        "sgd_dual": sgd,
        "greedy": knapsack_greedy(r, a, b),
        "p_traj": traj,
    }


# --------------------------------------------------------------------------------------------
# 5. Chapter helpers: experiment profiles, the experiment loop, claim values, exercise graders
# --------------------------------------------------------------------------------------------

EXPERIMENT_PROFILES = {
    # G = 2 halves the capacity, so the smoke rate is halved to keep the load of the book setting
    "smoke": dict(seeds=[0], rate=0.275, arrival_steps=100, n_workers=2, noise=0.2, drain=1500),
    "book": dict(seeds=[0, 1, 2], rate=0.55, arrival_steps=800, n_workers=4, noise=0.2, drain=1500),
    "paper": dict(
        seeds=[0, 1, 2, 3, 4], rate=0.55, arrival_steps=2000, n_workers=4, noise=0.2, drain=1500
    ),
}

# (variant name, policy, noisy predictions?, OLP keywords); w_gp = "T" means the horizon T
VARIANTS = (
    ("round_robin", "round_robin", False, {}),
    ("random", "random", False, {}),
    ("lor", "lor", False, {}),
    ("p2c", "p2c", False, {}),
    ("central_fcfs", "central_fcfs", False, {}),
    ("central_sjf", "central_sjf", False, {}),
    ("olp beta", "olp", False, {"beta": 1.0}),
    ("olp alpha", "olp", False, {"alpha": 1.0}),
    ("olp gamma", "olp", False, {"gamma": 1.0}),
    ("olp beta + tail", "olp", False, {"beta": 1.0, "w_gp": "T"}),
    ("olp beta noisy", "olp", True, {"beta": 1.0}),
)

REPORTED_METRICS = [
    "mean_e2e",
    "p95_e2e",
    "p99_e2e",
    "mean_ttft",
    "p99_ttft",
    "ttft_le_20",
    "completed",
    "tokens",
    "preemptions",
    "ms_per_epoch",
]


def run_experiment(cfg, progress=None):
    """Every variant of :data:`VARIANTS` on every seed of ``cfg`` (a resolved profile namespace
    with seeds, rate, arrival_steps, n_workers, noise, drain).

    Per seed one workload is drawn with ``default_rng(seed)``, once with exact and once with noisy
    predictions (same arrivals and lengths). Returns ``(rows, traces)``: ``rows`` a list of dicts
    (seed, variant, policy and the :func:`metrics` keys; wrap it in a DataFrame to tabulate) and
    ``traces`` the :class:`SimResult` of each variant on the first seed. ``progress`` is an optional
    tqdm-like wrapper of an iterable.
    """
    jobs = [(seed, v) for seed in cfg.seeds for v in VARIANTS]
    it = progress(jobs, total=len(jobs)) if progress is not None else jobs
    rows, traces, loads = [], {}, {}
    for seed, (variant, policy, noisy, kw) in it:
        if seed not in loads:
            loads = {seed: experiment_workloads(cfg, seed)}
        w = loads[seed][1 if noisy else 0]
        T = horizon(w, cfg.drain)
        kw = {k: (float(T) if v == "T" else v) for k, v in kw.items()}
        result = run_policy(policy, w, seed, G=cfg.n_workers, drain=cfg.drain, **kw)
        rows.append(dict(seed=seed, variant=variant, policy=policy, **metrics(result)))
        if seed == cfg.seeds[0]:
            traces[variant] = result
    return rows, traces


def experiment_workloads(cfg, seed: int) -> tuple[Workload, Workload]:
    """The requests of one seed, with exact and with noisy predictions (same arrivals and lengths)."""
    args = dict(rate=cfg.rate, arrival_steps=cfg.arrival_steps)
    return (
        generate_workload(np.random.default_rng(seed), **args),
        generate_workload(np.random.default_rng(seed), noise=cfg.noise, **args),
    )


def tail_weight_sweep(cfg, fractions=(0.125, 0.25, 0.5), progress=None) -> list[dict]:
    """OLP(beta = 1) with the tail weight w_gp = fraction * T on every seed (exact predictions):
    rows of (seed, fraction, share of requests with TTFT <= 20, mean E2E). The ends 0 and 1 are
    the "olp beta" and "olp beta + tail" variants of :func:`run_experiment`."""
    jobs = [(seed, f) for seed in cfg.seeds for f in fractions]
    rows, loads = [], {}
    for seed, fraction in progress(jobs) if progress is not None else jobs:
        if seed not in loads:
            loads = {seed: experiment_workloads(cfg, seed)[0]}
        w = loads[seed]
        m = metrics(
            run_policy(
                "olp",
                w,
                seed,
                G=cfg.n_workers,
                drain=cfg.drain,
                beta=1.0,
                w_gp=fraction * horizon(w, cfg.drain),
            )
        )
        rows.append(
            dict(seed=seed, fraction=fraction, ttft_le_20=m["ttft_le_20"], mean_e2e=m["mean_e2e"])
        )
    return rows


def _ratio(a: float, b: float) -> float:
    """a / b, NaN for 0 / 0 (e.g. a P99 TTFT of zero at light load) and inf for a / 0."""
    if b == 0:
        return float("nan") if a == 0 else float("inf")
    return float(a) / float(b)


def claim_values(runs) -> dict:
    """Per-seed values of the claims declared in the chapter's ``chapter.yml``.

    ``runs``: the rows of :func:`run_experiment` (a list of dicts, or a DataFrame of them). The
    heuristics are RR, Random, LOR and P2C; "best heuristic" is the minimum over them, per seed.
    Returns ``{seed: {claim_id: value}}``; a ratio with a zero denominator is NaN (0 / 0) or inf.
    """
    if hasattr(runs, "to_dict"):
        runs = runs.to_dict("records")
    by_seed: dict = {}
    for row in runs:
        by_seed.setdefault(row["seed"], {})[row["variant"]] = row
    out = {}
    for seed, m in by_seed.items():

        def best(key, m=m):
            """Best (lowest) value of a metric over the four heuristics."""
            return min(m[h][key] for h in DISPATCH_POLICIES)

        olp = m["olp beta"]
        out[seed] = {
            "c1a_mean_e2e": _ratio(olp["mean_e2e"], best("mean_e2e")),
            "c1b_p99_e2e": _ratio(olp["p99_e2e"], best("p99_e2e")),
            "c2a_mean_ttft": _ratio(olp["mean_ttft"], best("mean_ttft")),
            "c2b_preemptions": float(olp["preemptions"]),
            "c3a_steer_e2e": _ratio(olp["mean_e2e"], m["olp alpha"]["mean_e2e"]),
            "c3b_steer_ttft": _ratio(m["olp gamma"]["p99_ttft"], olp["p99_ttft"]),
            "c4a_tail_weight": m["olp beta + tail"]["ttft_le_20"] - olp["ttft_le_20"],
            "c4b_noisy_e2e": _ratio(m["olp beta noisy"]["mean_e2e"], best("mean_e2e")),
            "c5_prices_vs_sjf": _ratio(olp["mean_e2e"], m["central_sjf"]["mean_e2e"]),
            "m1_decision_ms": olp["ms_per_epoch"],
        }
    return out


def _kv_ramp_reference(s, o_hat, tau, T):
    """The KV part a^M of :func:`action_column`."""
    return action_column(s, o_hat, tau, T)[1]


def check_kv_ramp(fn) -> None:
    """Grade an exercise answer ``fn(s, o_hat, tau, T)`` -> KV ramp a^M over K_{j tau}."""
    from replib.core.exercises import grade

    cases = [(5, 4, 3, 100), (0, 1, 1, 10), (80, 100, 950, 1000), (12, 7, 10, 10), (3, 50, 1, 20)]
    grade(fn, _kv_ramp_reference, cases, name="kv_ramp")


def check_price_step(fn) -> None:
    """Grade an exercise answer ``fn(p, a, x, d, eta)`` -> next price max(0, p + eta (a x - d))."""
    from replib.core.exercises import grade

    cases = [
        (0.0, 1.0, 1, 0.25, 0.1),
        (0.0, 1.0, 0, 0.25, 0.1),
        (0.5, 1.2, 1, 0.25, 0.05),
        (0.01, 0.7, 0, 0.25, 0.1),
        (0.3, 1.5, 0, 0.2, 0.5),
    ]
    grade(fn, knapsack_price_step, cases, name="price_step")
