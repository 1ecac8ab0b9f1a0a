"""FOAM's experiment: the training loop, the profiles, the learning-rate search, the runs and the
claim values."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

import numpy as np

from replib.core.runtime import compute_threads

from .method import AdamOptimizer, ShampooOptimizer, config_label, policy
from .task import _batch_order, autoencoder, full_batch_loss, load_digits_train

__all__ = [
    "RunResult",
    "train_autoencoder",
    "EXPERIMENT_PROFILES",
    "CONTROLLER_FACTOR",
    "MATCHED_ABLATION",
    "C1A_TOLERANCE",
    "tune_lr",
    "run_experiment",
    "time_to_loss",
    "times_to_common_target",
    "claim_values",
]


# --------------------------------------------------------------------------------------------
# The training loop
# --------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """One training run. ``curve``: dict of arrays ``step`` (0 = before training), ``loss`` (full-batch
    MSE), ``optimizer_seconds`` and ``evds`` (cumulative at that step). ``evds_by_factor``: {factor:
    EVDs}. ``checks_by_factor``: {factor: (FOAM checks, checks that ended in an EVD)}.
    ``controller``: the FOAM check log (empty unless requested and a FOAM-family policy)."""

    config: str
    seed: int
    lr: float
    steps: int
    final_loss: float
    evds: int
    checks: int
    optimizer_seconds: float
    eigh_seconds: float
    model_seconds: float
    eval_seconds: float
    curve: dict
    evds_by_factor: dict
    checks_by_factor: dict = field(default_factory=dict)
    controller: list = field(default_factory=list)

    def evd_rate(self, side: str) -> float:
        """FOAM's EVD operation rate on the ``side`` ("L" or "R") factors: checks that ended in an
        EVD / checks (each factor's first EVD is not a check); NaN without checks."""
        pairs = [v for k, v in self.checks_by_factor.items() if k.endswith("." + side)]
        checks = sum(c for c, _ in pairs)
        return sum(r for _, r in pairs) / checks if checks else float("nan")

    def row(self) -> dict:
        """The scalar fields as a flat dict (EVDs split into L and R factors, with FOAM's EVD rate
        per check of each side)."""
        evds_L = sum(v for k, v in self.evds_by_factor.items() if k.endswith(".L"))
        return dict(
            seed=self.seed, config=self.config, label=config_label(self.config), lr=self.lr,
            steps=self.steps, final_loss=self.final_loss, evds=self.evds, evds_L=evds_L,
            evds_R=self.evds - evds_L, checks=self.checks, evd_rate_L=self.evd_rate("L"),
            evd_rate_R=self.evd_rate("R"), optimizer_seconds=self.optimizer_seconds,
            eigh_seconds=self.eigh_seconds, model_seconds=self.model_seconds,
            eval_seconds=self.eval_seconds,
        )


def train_autoencoder(config: str, seed: int = 0, steps: int = 1000, lr: float = 3e-3,
                      batch_size: int = 4, eval_every: int = 10, X=None,
                      log_controller: bool = False) -> RunResult:
    """Train the autoencoder with one configuration (see :func:`policy`) for ``steps`` minibatch steps.

    Model seed and minibatch order come from ``seed`` (identical across configurations). The full-batch
    MSE is evaluated before training, every ``eval_every`` steps and at the last step; a non-finite
    loss stops the run (final loss inf). Thread counts are the caller's (see :func:`run_experiment`).
    """
    import torch
    from torch.nn import functional as F

    X = load_digits_train() if X is None else np.asarray(X, dtype=np.float32)
    Xt = torch.from_numpy(np.ascontiguousarray(X))
    batches = Xt[torch.from_numpy(_batch_order(X.shape[0], steps, batch_size, seed))]
    model = autoencoder(seed)
    params = list(model.parameters())
    pol = policy(config)
    if pol.kind == "adam":
        opt = AdamOptimizer(params, lr)
    else:
        opt = ShampooOptimizer(model, pol, lr, log_controller=log_controller)
    perf = time.perf_counter
    opt_s = model_s = 0.0
    t0 = perf()
    curve = {"step": [0], "loss": [full_batch_loss(model, Xt)], "optimizer_seconds": [0.0],
             "evds": [0]}
    eval_s = perf() - t0
    final = curve["loss"][0]
    for t in range(1, steps + 1):
        t0 = perf()
        for prm in params:
            prm.grad = None
        xb = batches[t - 1]
        F.mse_loss(model(xb), xb).backward()
        t1 = perf()
        opt.step()
        t2 = perf()
        model_s += t1 - t0
        opt_s += t2 - t1
        if t % eval_every == 0 or t == steps:
            final = full_batch_loss(model, Xt)
            curve["step"].append(t)
            curve["loss"].append(final)
            curve["optimizer_seconds"].append(opt_s)
            curve["evds"].append(opt.evds)
            eval_s += perf() - t2
            if not math.isfinite(final):
                final = float("inf")
                break
    by_factor = {f.name: f.evds for f in opt.factors}
    checks_by_factor = {f.name: (f.checks, f.check_refreshes) for f in opt.factors}
    return RunResult(
        config=config, seed=int(seed), lr=float(lr), steps=int(steps), final_loss=float(final),
        evds=opt.evds, checks=getattr(opt, "checks", 0), optimizer_seconds=opt_s,
        eigh_seconds=opt.eigh_seconds, model_seconds=model_s, eval_seconds=eval_s,
        curve={k: np.asarray(v) for k, v in curve.items()}, evds_by_factor=by_factor,
        checks_by_factor=checks_by_factor, controller=list(opt.log),
    )


# --------------------------------------------------------------------------------------------
# Profiles, lr tuning, the experiment loop, claim values
# --------------------------------------------------------------------------------------------

# Ablation (a) at FOAM's eigendecomposition count (claims p1, c6): eps fixed at eps0, refresh iff h > 4.
# tau = 4 was set before the claims were measured, on the tuning seed (100) alone and from EVD counts
# only: the largest tau of {0.75, 3, 3.5, 4, 4.5, 5, 6, 7.5, 10, 30, 100, 300, 1000} whose 1,000-step
# run (lr 3e-3) used at least FOAM's count there (186 against FOAM's 183).
MATCHED_ABLATION = "foam_no_adaptive_eps_tau4"
C1A_TOLERANCE = 1.07  # c1a's threshold; claim c5's common target is this times stale f = 10's final loss

BOOK_CONFIGS = ["stale_f10", "stale_f50", "foam", "foam_no_refresh", MATCHED_ABLATION, "adam"]

EXPERIMENT_PROFILES = {
    "smoke": dict(
        seeds=[0], steps=60, batch_size=4, lr=3e-3, lr_grid=[1e-3, 3e-3, 1e-2], tune_steps=20,
        tune_seed=100, eval_every=10, configs=list(BOOK_CONFIGS),  # every claim's configs
        side_configs=[], side_steps=0,
    ),
    # stale f = 1 (an EVD per factor per step, ~9 s per 1,000-step run) only as a 200-step side run;
    # stale f = 30 and f = 100 and the tau = 0.75 ablation only at the paper profile (book budget)
    "book": dict(
        seeds=[0, 1, 2], steps=1000, batch_size=4, lr=3e-3, lr_grid=[1e-3, 3e-3, 1e-2],
        tune_steps=500, tune_seed=100, eval_every=10, configs=list(BOOK_CONFIGS),
        side_configs=["stale_f1"], side_steps=200,
    ),
    "paper": dict(
        seeds=[0, 1, 2, 3, 4], steps=1000, batch_size=4, lr=3e-3,
        lr_grid=[1e-3, 2e-3, 3e-3, 5e-3, 1e-2], tune_steps=1000, tune_seed=100, eval_every=10,
        configs=["stale_f1", "stale_f10", "stale_f30", "stale_f50", "stale_f100", "foam",
                 "foam_no_refresh", "foam_no_adaptive_eps", MATCHED_ABLATION, "adam"],
        side_configs=[], side_steps=0,
    ),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts); the
# configuration names are those :func:`.method.policy` parses
CONFIG_NAMES = re.compile(r"stale_f[1-9]\d*|foam(_f[1-9]\d*)?|foam_no_refresh|foam_no_adaptive_eps(_tau\d+(\.\d+)?)?|adam")
EXPERIMENT_BOUNDS = dict(steps=(1, None), batch_size=(1, None), lr=(1e-8, None), lr_grid=(1e-8, None),
                         tune_steps=(1, None), tune_seed=(0, None), eval_every=(1, None),
                         configs=CONFIG_NAMES, side_configs=CONFIG_NAMES, side_steps=(0, None))

CONTROLLER_FACTOR = "W1.L"  # the factor whose eps_t / h_t trace the experiment notebook plots


def _warm_up(X) -> None:
    """Pay one-off costs (LAPACK's eigh, torch's first backward passes) before anything is timed."""
    train_autoencoder("stale_f1", seed=0, steps=3, X=X[:16], eval_every=3)
    train_autoencoder("adam", seed=0, steps=3, X=X[:16], eval_every=3)


def tune_lr(configs, lr_grid, steps: int, seed: int, batch_size: int = 4, X=None,
            progress=None) -> tuple[dict, list[dict]]:
    """The same learning-rate search for every configuration: each lr of ``lr_grid`` is run for
    ``steps`` steps on the tuning ``seed`` (distinct from the evaluation seeds) and the lr of lowest
    final full-batch MSE is kept (ties: the first in the grid; a diverged run counts as inf).
    Returns ``({config: lr}, rows)`` with rows (config, lr, final_loss, evds, optimizer_seconds)."""
    X = load_digits_train() if X is None else X
    jobs = [(c, float(lr)) for c in configs for lr in lr_grid]
    it = progress(jobs, total=len(jobs)) if progress is not None else jobs
    rows = []
    for c, lr in it:
        res = train_autoencoder(c, seed, steps, lr, batch_size, eval_every=steps, X=X)
        rows.append(dict(config=c, lr=lr, final_loss=res.final_loss, evds=res.evds,
                         optimizer_seconds=res.optimizer_seconds))
    chosen = {}
    for c in configs:
        mine = [r for r in rows if r["config"] == c]
        best = min(mine, key=lambda r: r["final_loss"] if math.isfinite(r["final_loss"]) else math.inf)
        chosen[c] = best["lr"]
    return chosen, rows


def run_experiment(cfg, progress=None, threads: int = 1):
    """Every configuration of ``cfg.configs`` on every seed of ``cfg`` (a resolved profile namespace
    with seeds, steps, batch_size, lr, lr_grid, tune_steps, tune_seed, eval_every, configs,
    side_configs, side_steps).

    First the learning rate: with more than one value in ``lr_grid`` and ``tune_steps`` > 0, each
    configuration gets the same search (:func:`tune_lr` on ``tune_seed``); otherwise every
    configuration uses ``lr`` (or the single grid value). Then one :func:`train_autoencoder` run per
    (seed, configuration), with ``threads`` torch and BLAS thread(s) and deterministic algorithms;
    one-off costs are paid before any timing starts. Finally the side runs: each of
    ``side_configs`` (book: stale f = 1, too slow for the full budget) for ``side_steps`` steps on
    every seed, *not* tuned: it uses the lr chosen for stale f = 10 (``cfg.lr`` when that did not
    run). Since the learning rate is constant and the minibatch order is shared, a main run's curve
    at step ``side_steps`` is exactly what a ``side_steps``-long run would give, so side runs compare
    with the main curves at that step.

    Returns ``(rows, traces)``. ``rows``: dicts (seed, config, label, lr, steps, final_loss, evds,
    evds_L, evds_R, checks, optimizer_seconds, eigh_seconds, model_seconds, eval_seconds). ``traces``:
    ``curves`` (long-format dicts: seed, config, step, loss, optimizer_seconds, evds),
    ``controller`` (first seed, FOAM-family configurations: one dict per factor check with config,
    step, factor, h, rc, alpha, eps_prev, eps, refreshed, d_median, d_max, eps_rel),
    ``controller_factor`` (:data:`CONTROLLER_FACTOR`), ``lr`` ({config: lr}), ``tuning`` (the rows of
    :func:`tune_lr`, empty without tuning) and ``evds_by_factor`` ({(seed, config): {factor: EVDs}}).
    ``side_rows`` and ``side_curves`` hold the side runs in the same formats (``side_rows`` also in
    ``lr``). ``progress`` is an optional tqdm-like wrapper.
    """
    configs = list(cfg.configs)
    side = list(getattr(cfg, "side_configs", [])) if getattr(cfg, "side_steps", 0) > 0 else []
    for c in configs + side:
        policy(c)  # fail early on a bad name
    X = load_digits_train()
    rows: list[dict] = []
    traces: dict = dict(curves=[], controller=[], controller_factor=CONTROLLER_FACTOR, lr={},
                        tuning=[], evds_by_factor={}, side_rows=[], side_curves=[])
    with compute_threads(threads):
        _warm_up(X)
        if len(cfg.lr_grid) > 1 and cfg.tune_steps > 0:
            traces["lr"], traces["tuning"] = tune_lr(
                configs, cfg.lr_grid, cfg.tune_steps, cfg.tune_seed, cfg.batch_size, X, progress
            )
        else:
            grid = list(cfg.lr_grid)
            traces["lr"] = {c: float(grid[0] if len(grid) == 1 else cfg.lr) for c in configs}
        side_lr = traces["lr"].get("stale_f10", float(cfg.lr))
        for c in side:
            traces["lr"].setdefault(c, side_lr)
        jobs = [(seed, c, False) for seed in cfg.seeds for c in configs]
        jobs += [(seed, c, True) for seed in cfg.seeds for c in side]
        it = progress(jobs, total=len(jobs)) if progress is not None else jobs
        for seed, c, is_side in it:
            first = seed == cfg.seeds[0] and not is_side
            res = train_autoencoder(c, seed, cfg.side_steps if is_side else cfg.steps,
                                    traces["lr"][c], cfg.batch_size, cfg.eval_every, X,
                                    log_controller=first)
            (traces["side_rows"] if is_side else rows).append(res.row())
            curves = traces["side_curves"] if is_side else traces["curves"]
            cv = res.curve
            for i in range(cv["step"].size):
                curves.append(dict(
                    seed=seed, config=c, step=int(cv["step"][i]), loss=float(cv["loss"][i]),
                    optimizer_seconds=float(cv["optimizer_seconds"][i]), evds=int(cv["evds"][i]),
                ))
            if not is_side:
                traces["evds_by_factor"][(seed, c)] = res.evds_by_factor
            if first:
                traces["controller"].extend(dict(config=c, **e) for e in res.controller)
    return rows, traces


def _records(obj) -> list[dict]:
    """A list of dicts from a list of dicts or a DataFrame."""
    return obj.to_dict("records") if hasattr(obj, "to_dict") else list(obj)


def _ratio(a: float, b: float) -> float:
    """a / b; NaN for 0 / 0 or a missing value, inf for a / 0."""
    if math.isnan(a) or math.isnan(b):
        return float("nan")
    if b == 0:
        return float("nan") if a == 0 else float("inf")
    return float(a) / float(b)


def time_to_loss(curve: list[dict], target: float, key: str = "optimizer_seconds") -> float:
    """Cumulative optimizer seconds (or another field ``key`` of the curve, e.g. "step") at the first
    evaluated step whose full-batch loss is <= target (inf if never); ``curve`` is a list of dicts
    with step, loss, optimizer_seconds."""
    for r in sorted(curve, key=lambda r: r["step"]):
        if r["loss"] <= target:
            return float(r[key])
    return float("inf")


def _by_seed(rows, traces) -> tuple[dict, dict]:
    """``({seed: {config: row}}, {(seed, config): curve rows})`` from the experiment's outputs."""
    by_seed: dict = {}
    for r in _records(rows):
        by_seed.setdefault(r["seed"], {})[r["config"]] = r
    curves: dict = {}
    for r in _records(traces["curves"]):
        curves.setdefault((r["seed"], r["config"]), []).append(r)
    return by_seed, curves


def times_to_common_target(rows, traces, configs=("stale_f10", "foam"),
                           key: str = "optimizer_seconds") -> dict:
    """Claim c5's times: per seed, the common target C1A_TOLERANCE x stale f = 10's final loss, and
    the optimizer seconds (or, with ``key="step"``, the step) at which each of ``configs`` first
    reaches it (:func:`time_to_loss`; NaN when the configuration or stale f = 10 did not run).
    Returns ``{seed: {"target": loss, config: seconds}}``."""
    by_seed, curves = _by_seed(rows, traces)
    nan = float("nan")
    out = {}
    for seed, m in by_seed.items():
        target = C1A_TOLERANCE * float(m["stale_f10"]["final_loss"]) if "stale_f10" in m else nan
        out[seed] = {"target": target}
        for c in configs:
            curve = curves.get((seed, c))
            out[seed][c] = nan if curve is None or math.isnan(target) else time_to_loss(curve, target, key)
    return out


def claim_values(rows, traces) -> dict:
    """Per-seed values of the claims declared in the chapter's ``chapter.yml``.

    ``rows``: the rows of :func:`run_experiment` (list of dicts or DataFrame); ``traces``: its traces
    (only ``traces["curves"]`` is used, a list of dicts or a DataFrame). A claim whose configurations
    did not run is NaN. c5 is FOAM's optimizer seconds to the common target over stale f = 10's
    (:func:`times_to_common_target`; inf if FOAM never reaches it); p1 and c6 compare FOAM with
    :data:`MATCHED_ABLATION`; m1 and m2 are FOAM's EVD rates per check of the L and R factors.
    Returns ``{seed: {claim_id: value}}``.
    """
    by_seed, _ = _by_seed(rows, traces)
    times = times_to_common_target(rows, traces)
    nan = float("nan")
    out = {}
    for seed, m in by_seed.items():

        def get(config, key="final_loss", m=m):
            """One field of one configuration's row, NaN when absent."""
            return float(m[config][key]) if config in m else nan

        out[seed] = {
            "c1a_foam_vs_f10_loss": _ratio(get("foam"), get("stale_f10")),
            "c1b_evds_90pct_fewer": _ratio(get("foam", "evds"), get("stale_f10", "evds")),
            "c2_adaptive_vs_f50": _ratio(get("foam"), get("stale_f50")),
            "c3_refresh_needed": _ratio(get("foam_no_refresh"), get("foam")),
            "c4_staleness_hurts": _ratio(get("stale_f50"), get("stale_f10")),
            "c5_time_to_common_target": _ratio(times[seed]["foam"], times[seed]["stale_f10"]),
            "p1_matched_evds": _ratio(get(MATCHED_ABLATION, "evds"), get("foam", "evds")),
            "c6_damping_at_matched_evds": _ratio(get("foam"), get(MATCHED_ABLATION)),
            "m1_evd_rate_L": get("foam", "evd_rate_L"),
            "m2_evd_rate_R": get("foam", "evd_rate_R"),
        }
    return out
