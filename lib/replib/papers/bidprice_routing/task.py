"""OLP-Router, the toy world: workload, the time-stepped cluster simulator shared by every
policy (heuristics, central-buffer ablations and the OLP router's epoch), runs and metrics."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .method import (
    History,
    OLPConfig,
    Reservations,
    admit_by_margin,
    column_cost,
    dual_update,
    remaining_capacity,
    slo_reward,
)

__all__ = [
    "POLICIES",
    "Workload",
    "generate_workload",
    "horizon",
    "ClusterSim",
    "SimResult",
    "run_policy",
    "metrics",
    "N_WORKERS",
    "BATCH_CAPACITY",
    "KV_CAPACITY",
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
    rate_shift: float = 1.0

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
    rate_shift: float = 1.0,
) -> Workload:
    """Toy workload of the book's CPU replication (our choice; the paper simulates serving in Vidur).

    Poisson(``rate``) arrivals in each step ``1..arrival_steps``, or, with ``rate_shift != 1``, an
    arrival-rate shift: ``rate`` in the first half of the arrival steps and ``rate_shift * rate``
    in the second (the paper's shift is 0.4 -> 0.6, i.e. 1.5x; where it happens is not stated, we
    take the midpoint); prompt length s and decode length o
    log-normal with the given (pre-clipping) means and log-scale ``sigma``, rounded and clipped to
    [8, 512] and [4, 400]; predictions ``o_hat = max(1, round(u * o))`` with ``u ~ U(1 - noise,
    1 + noise)`` (``noise = 0.2`` is the paper's noisy setting; ``noise = 0`` gives ``o_hat = o``).
    The uniforms are drawn whatever ``noise`` is, so one seed gives the same arrivals and lengths
    with exact and with noisy predictions.
    """
    rates = np.full(int(arrival_steps), float(rate))
    rates[int(arrival_steps) // 2 :] *= float(rate_shift)
    counts = rng.poisson(rates)
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
    return Workload(
        arrival, s, o, o_hat, int(arrival_steps), float(rate), float(noise), float(rate_shift)
    )


def horizon(workload: Workload, drain: int = 1500) -> int:
    """Horizon T = arrival steps + drain steps (the LP's T; it enters every reward)."""
    return int(workload.arrival_steps + drain)


# --------------------------------------------------------------------------------------------
# 2. Simulator and policies
# --------------------------------------------------------------------------------------------


@dataclass
class SimResult:
    """Outcome and traces of one simulated run.

    Per request (index = workload row): ``first_token`` and ``completion`` steps (-1 if never),
    ``worker``. Per step (rows 0..steps-1 for steps 1..steps): ``buffer_len``, ``kv`` (G columns,
    KV tokens held during the step: s + tokens generated, summed over the requests that ran in it,
    those finishing in it included), ``price_B`` / ``price_M`` (OLP only: the mean of p^B and p^M
    per worker over steps k..k + PRICE_WINDOW - 1, after the step's epoch). Events:
    ``preemptions`` (step, worker) pairs, ``epoch_steps`` and ``epoch_seconds`` (wall clock of each
    central scheduling epoch). ``s`` (prompt lengths) and ``arrival_steps`` give the throughput
    window of :func:`metrics`; ``ttft_term_spread`` (OLP only) is the largest spread, over the
    epochs, of the TTFT reward term gamma ft / R_bar across the requests one epoch scores.
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
    s: np.ndarray | None = None
    arrival_steps: int = 0
    ttft_term_spread: float = float("nan")


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
        self.ttft_term_spread = 0.0

    def _olp_epoch(self, k: int, buffer: list) -> list:
        """One scheduling epoch of the bid-price router (steps 2-7 of the per-epoch algorithm)."""
        cfg, w, res = self.olp, self.w, self.res
        rho = len(buffer) / max(1, w.n)
        # Steps 2-3 on the steps [0, span) only: no recorded column reaches past span = hist.end, so
        # prices there are zero and stay zero (p - eta d <= p and nothing raises them); updating
        # only the first span steps gives the same prices as updating the whole horizon (a test
        # checks it) at a fraction of the cost. An empty history resets the prices (step 3).
        span = self.hist.end if self.hist.n else self.T
        # step 2: remaining-capacity right-hand side
        d_B, d_M = remaining_capacity(
            res.U_B[:, :span], res.U_M[:, :span], self.B, self.M, self.c_M, self.N_hat, self.R_bar,
            rho, cfg.kappa,
        )
        # step 3: warm-started dual update
        self.p_B[:, :span], self.p_M[:, :span] = dual_update(
            self.p_B[:, :span], self.p_M[:, :span], self.hist, d_B, d_M, self.c_M, self.rng, cfg.K,
            cfg.eta, cfg.batch,
        )
        # step 4: feasibility, margins, history
        scored = self._scored(buffer)
        i0 = k - 1
        s, o_hat = w.s[scored], w.o_hat[scored]
        L = np.minimum(o_hat, self.T - k + 1)
        slo = slo_reward(
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
        )
        reward = slo.r_norm
        # every scored request starts at tau = k, so the TTFT term gamma (T - k + 1) is shared
        spread = cfg.gamma * float(np.ptp(slo.ft)) / self.R_bar
        self.ttft_term_spread = max(self.ttft_term_spread, spread)
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
        more step (our choice for noisy predictions; the paper and the code do not state it)."""
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
            s=self.w.s.copy(),
            arrival_steps=self.w.arrival_steps,
            ttft_term_spread=self.ttft_term_spread if olp else float("nan"),
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
    and ``tokens_emitted`` (including work discarded by preemptions); ``throughput``: prompt plus
    decode tokens of the requests completed within the arrival window (steps 1..arrival_steps),
    per step of that window, as the official code's window experiments count it (tokens of
    requests completed by the time limit / time limit; NaN without ``s`` and ``arrival_steps``);
    preemptions; router milliseconds per scheduling epoch (NaN for policies without epochs); the
    TTFT term's spread within an epoch (OLP).
    """
    done = result.completion >= 0
    started = result.first_token >= 0
    e2e = (result.completion - result.arrival + 1)[done].astype(float)
    ttft = (result.first_token - result.arrival)[started].astype(float)

    def q(x, p):
        """Percentile, NaN when empty."""
        return float(np.percentile(x, p)) if x.size else float("nan")

    n = result.arrival.size
    window = int(result.arrival_steps)
    if result.s is not None and window > 0:
        in_window = done & (result.completion <= window)
        throughput = float((result.s + result.o)[in_window].sum() / window)
    else:
        throughput = float("nan")
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
        "throughput": throughput,
        "preemptions": int(len(result.preemptions)),
        "epochs": int(len(result.epoch_seconds)),
        "ms_per_epoch": (
            float(1e3 * np.mean(result.epoch_seconds)) if result.epoch_seconds else float("nan")
        ),
        "ttft_term_spread": float(result.ttft_term_spread),
        "steps": int(result.steps),
        "wall_s": float(result.wall_seconds),
    }
