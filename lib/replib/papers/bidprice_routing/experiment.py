"""OLP-Router, the experiment: profiles, variants, the experiment loop, the tail-weight sweep
and the claim values of ``chapter.yml``."""

from __future__ import annotations

import numpy as np

from .task import DISPATCH_POLICIES, Workload, generate_workload, horizon, metrics, run_policy

__all__ = [
    "EXPERIMENT_PROFILES",
    "VARIANTS",
    "REPORTED_METRICS",
    "run_experiment",
    "claim_values",
]

# rate_shift: the arrival rate of the second half of the arrival steps, as a multiple of the first
# half's (the paper's shift 0.4 -> 0.6); shifted runs use the noisy predictions
_COMMON = dict(noise=0.2, drain=1500, rate_shift=1.5)
EXPERIMENT_PROFILES = {
    # G = 2 halves the capacity, so the smoke rate is halved to keep the load of the book setting
    "smoke": dict(seeds=[0], rate=0.275, arrival_steps=100, n_workers=2, **_COMMON),
    "book": dict(seeds=[0, 1, 2], rate=0.55, arrival_steps=800, n_workers=4, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], rate=0.55, arrival_steps=2000, n_workers=4, **_COMMON),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
EXPERIMENT_BOUNDS = dict(rate=(0.01, None), arrival_steps=(1, None), n_workers=(1, None), noise=(0.0, None),
                         drain=(0, None), rate_shift=(0.0, None))

# (variant name, policy, workload, OLP keywords); w_gp = "T" means the horizon T. Workloads:
# "exact" and "noisy" predictions at a constant rate, "shift" the rate shift (noisy predictions).
VARIANTS = (
    ("round_robin", "round_robin", "exact", {}),
    ("random", "random", "exact", {}),
    ("lor", "lor", "exact", {}),
    ("p2c", "p2c", "exact", {}),
    ("central_fcfs", "central_fcfs", "exact", {}),
    ("central_sjf", "central_sjf", "exact", {}),
    ("olp beta", "olp", "exact", {"beta": 1.0}),
    ("olp alpha", "olp", "exact", {"alpha": 1.0}),
    ("olp gamma", "olp", "exact", {"gamma": 1.0}),
    ("olp beta + tail", "olp", "exact", {"beta": 1.0, "w_gp": "T"}),
    ("olp beta noisy", "olp", "noisy", {"beta": 1.0}),
    ("round_robin shift", "round_robin", "shift", {}),
    ("random shift", "random", "shift", {}),
    ("lor shift", "lor", "shift", {}),
    ("p2c shift", "p2c", "shift", {}),
    ("olp beta shift", "olp", "shift", {"beta": 1.0}),
)

REPORTED_METRICS = [
    "mean_e2e",
    "p95_e2e",
    "p99_e2e",
    "mean_ttft",
    "p99_ttft",
    "ttft_le_20",
    "completed",
    "throughput",
    "preemptions",
    "ms_per_epoch",
]


def run_experiment(cfg, progress=None):
    """Every variant of :data:`VARIANTS` on every seed of ``cfg`` (a resolved profile namespace
    with seeds, rate, arrival_steps, n_workers, noise, drain, rate_shift).

    Per seed the workloads of :func:`experiment_workloads` are drawn with ``default_rng(seed)``.
    Returns ``(rows, traces)``: ``rows`` a list of dicts (seed, variant, policy and the
    :func:`metrics` keys; wrap it in a DataFrame to tabulate) and
    ``traces`` the :class:`SimResult` of each variant on the first seed. ``progress`` is an optional
    tqdm-like wrapper of an iterable.
    """
    jobs = [(seed, v) for seed in cfg.seeds for v in VARIANTS]
    it = progress(jobs, total=len(jobs)) if progress is not None else jobs
    rows, traces, loads = [], {}, {}
    for seed, (variant, policy, workload, kw) in it:
        if seed not in loads:
            loads = {seed: experiment_workloads(cfg, seed)}
        w = loads[seed][workload]
        T = horizon(w, cfg.drain)
        kw = {k: (float(T) if v == "T" else v) for k, v in kw.items()}
        result = run_policy(policy, w, seed, G=cfg.n_workers, drain=cfg.drain, **kw)
        rows.append(dict(seed=seed, variant=variant, policy=policy, **metrics(result)))
        if seed == cfg.seeds[0]:
            traces[variant] = result
    return rows, traces


def experiment_workloads(cfg, seed: int) -> dict[str, Workload]:
    """The requests of one seed: "exact" and "noisy" predictions (same arrivals and lengths) at
    the constant rate, and "shift", the rate shift ``rate -> rate_shift * rate`` at mid-window with
    noisy predictions (its own arrivals, from the same seed)."""
    args = dict(rate=cfg.rate, arrival_steps=cfg.arrival_steps)
    return {
        "exact": generate_workload(np.random.default_rng(seed), **args),
        "noisy": generate_workload(np.random.default_rng(seed), noise=cfg.noise, **args),
        "shift": generate_workload(
            np.random.default_rng(seed), noise=cfg.noise, rate_shift=cfg.rate_shift, **args
        ),
    }


def tail_weight_sweep(cfg, fractions=(0.125, 0.25, 0.5), progress=None) -> list[dict]:
    """OLP(beta = 1) with the tail weight w_gp = fraction * T on every seed (exact predictions):
    rows of (seed, fraction, share of requests with TTFT <= 20, mean E2E). The ends 0 and 1 are
    the "olp beta" and "olp beta + tail" variants of :func:`run_experiment`."""
    jobs = [(seed, f) for seed in cfg.seeds for f in fractions]
    rows, loads = [], {}
    for seed, fraction in progress(jobs) if progress is not None else jobs:
        if seed not in loads:
            loads = {seed: experiment_workloads(cfg, seed)["exact"]}
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
    The throughput and rate-shift claims compare with Round Robin, as the paper's Tables do.
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
            "c3b_ttft_term_shared": m["olp gamma"]["ttft_term_spread"],
            "m3b_gamma_p99_ttft": _ratio(m["olp gamma"]["p99_ttft"], olp["p99_ttft"]),
            "c4a_tail_weight": m["olp beta + tail"]["ttft_le_20"] - olp["ttft_le_20"],
            "c4b_noisy_e2e": _ratio(m["olp beta noisy"]["mean_e2e"], best("mean_e2e")),
            "c5_prices_vs_sjf": _ratio(olp["mean_e2e"], m["central_sjf"]["mean_e2e"]),
            "c6_throughput": _ratio(
                m["olp beta noisy"]["throughput"], m["round_robin"]["throughput"]
            ),
            "c7a_shift_mean_e2e": _ratio(
                m["olp beta shift"]["mean_e2e"], m["round_robin shift"]["mean_e2e"]
            ),
            "c7b_shift_throughput": _ratio(
                m["olp beta shift"]["throughput"], m["round_robin shift"]["throughput"]
            ),
            "m1_decision_ms": olp["ms_per_epoch"],
        }
    return out
