"""The CogRouter experiment on DepthWorld: one RL iteration (steps 1-9 of the algorithm on the toy),
the premise check of claim 1, the methods and profiles, the runs, the claim values and the
exploratory regime search.

Contents: :func:`rl_iteration`, :func:`premise`, :func:`plateaued` (the convergence rule),
:data:`METHODS`, :data:`EXPERIMENT_PROFILES`, :func:`train_method`, :func:`start_seed`,
:func:`run_method`, :func:`run_seed`, :func:`run_experiment`, :func:`claim_values`, :func:`regime_sweep`. The baselines (GRPO, fixed levels, GRPO from scratch) are a few lines each
(``expand=False``, ``fixed_level``, the initial policy) and live in :func:`train_method`.
"""

from __future__ import annotations

import copy
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, seed_everything

from .method import N_LEVELS, _minmax, action_confidences, build_batch, policy_update
from .task import (
    LEVEL_COSTS,
    PLAN,
    RECALL,
    ROUTINE,
    STAGE_TYPES,
    VARIANTS,
    LevelPolicy,
    OracleRouter,
    cosft,
    evaluate,
    make_policy,
    repeat_tasks,
    rollout,
    sample_tasks,
)

__all__ = [
    "rl_iteration",
    "premise",
    "plateaued",
    "METHODS",
    "EXPERIMENT_PROFILES",
    "train_method",
    "start_seed",
    "run_method",
    "run_seed",
    "run_experiment",
    "claim_values",
    "method_settings",
    "tuning_grid",
    "select_cells",
    "TUNING_GRID",
    "TUNING_SEEDS",
    "TUNING_RESULTS",
    "TUNED",
]


# --------------------------------------------------------------------------------------------
# One RL iteration and the premise
# --------------------------------------------------------------------------------------------


def rl_iteration(policy: LevelPolicy, reference: LevelPolicy, optimiser, tasks: dict, rng: np.random.Generator,
                 cfg, expand: bool, kl_coef: float | None = None, expand_levels: bool = True,
                 variant_scale: float = 1.0) -> tuple[dict, dict]:
    """Steps 1-9 once: roll out the G episodes of each of the B ``tasks`` at temperature
    ``cfg.rollout_temperature``, build the batch (:func:`build_batch`, CoPO expansion iff
    ``expand``, with the controls ``expand_levels`` and ``variant_scale``), one
    :func:`policy_update` with KL weight ``kl_coef`` (None: ``cfg.kl_coef``). Returns (stats, batch)."""
    roll = rollout(policy, repeat_tasks(tasks, cfg.group_size), rng, cfg.rollout_temperature)
    batch = build_batch(policy, roll, cfg.group_size, expand=expand, k=cfg.k, expand_levels=expand_levels,
                        variant_scale=variant_scale)
    stats = {"train_success": float(roll["returns"].mean()),
             "train_cost_per_step": float(LEVEL_COSTS[roll["level"]].mean()),
             "share_mixed": batch["share_mixed"], "n_expanded": batch["n_expanded"],
             "n_samples": int(len(batch["advantages"]))}
    kl_coef = cfg.kl_coef if kl_coef is None else kl_coef  # cfg.kl_coef: a plain cfg without per-method settings
    stats.update(policy_update(policy, reference, optimiser, batch, clip_eps=cfg.clip_eps, kl_coef=kl_coef,
                               entropy_coef=cfg.entropy_coef, grad_clip=cfg.grad_clip))
    return stats, batch


def premise(policy: LevelPolicy, n_episodes: int, seed: int) -> tuple[dict, list]:
    """Claim 1's premise check: ``n_episodes`` episodes of ``policy`` (the CoSFT policy) at
    temperature 1; at every step of a successful episode c_l for the four levels as in step 5
    (z_{l_orig} the original thought, fresh thoughts for the others) and the level of highest c_l.

    Returns the summary (``c1a`` = share of successful recall and plan steps, pooled, whose argmax
    level is sufficient (3 or 4 at recall, 4 at plan); ``c1b`` = share of successful routine steps
    whose argmax is level 1; counts; per type shares) and heat-map rows per (stage_type, level):
    mean c_l, mean c_hat_l (min-max normalised as in step 6) and the share of argmax."""
    rng = np.random.default_rng([seed, 5])
    tasks = sample_tasks(n_episodes, rng, policy.variant)
    roll = rollout(policy, tasks, rng, 1.0)
    sel = roll["returns"][roll["episode"]] > 0
    conf = action_confidences(policy, roll["views"][sel], roll["action"][sel])
    types = roll["type"][sel]
    best = conf.argmax(axis=1)
    c_hat = _minmax(np.clip(conf, 1e-6, 1.0))
    ok_recall = best[types == RECALL] >= 2
    ok_plan = best[types == PLAN] == 3
    hard_ok = np.concatenate([ok_recall, ok_plan])
    routine_best = best[types == ROUTINE]
    nan = float("nan")
    summary = {"seed": seed, "c1a": float(hard_ok.mean()) if hard_ok.size else nan,
               "c1b": float((routine_best == 0).mean()) if routine_best.size else nan,
               "recall_sufficient": float(ok_recall.mean()) if ok_recall.size else nan,
               "plan_sufficient": float(ok_plan.mean()) if ok_plan.size else nan,
               "n_routine": int(routine_best.size), "n_recall": int(ok_recall.size), "n_plan": int(ok_plan.size),
               "success": float(roll["returns"].mean())}
    rows = []
    for t, name in enumerate(STAGE_TYPES):
        here = types == t
        for level in range(N_LEVELS):
            rows.append({"seed": seed, "stage_type": name, "level": level + 1, "n_steps": int(here.sum()),
                         "mean_c": float(conf[here, level].mean()) if here.any() else nan,
                         "mean_c_hat": float(c_hat[here, level].mean()) if here.any() else nan,
                         "share_argmax": float((best[here] == level).mean()) if here.any() else nan})
    return summary, rows


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------

def plateaued(history: list[float], window: int, delta: float) -> bool:
    """The convergence rule every RL agent is trained to: True when the mean of the last ``window``
    validation successes is less than ``delta`` above the mean of the ``window`` before them (so at
    least ``2 * window`` validation points are needed)."""
    if window < 1 or len(history) < 2 * window:
        return False
    return float(np.mean(history[-window:]) - np.mean(history[-2 * window:-window])) < delta


METHODS = ("cosft", "copo", "grpo", "fixed_l1", "fixed_l4", "grpo_scratch", "oracle", "copo_sampled_level",
           "copo_quarter")
_METHOD_INDEX = {m: i for i, m in enumerate(METHODS)}
EVAL_ONLY = ("cosft", "oracle")  # evaluated, never trained
# CoPO's family (the method and its two one-factor controls) runs at CoPO's tuned learning rate and
# KL weight; every other RL method (GRPO and its relatives) at GRPO's.
COPO_FAMILY = ("copo", "copo_sampled_level", "copo_quarter")
# build_batch options per CoPO-family method: (expand_levels, variant_scale); c5 and c6's controls.
_COPO_OPTIONS = {"copo": (True, 1.0), "copo_sampled_level": (False, 1.0), "copo_quarter": (True, 0.25)}


def method_settings(cfg, method: str) -> tuple[float, float]:
    """(learning rate, KL weight) of ``method``: ``cfg.copo_lr`` / ``cfg.copo_kl`` for the CoPO
    family, ``cfg.grpo_lr`` / ``cfg.grpo_kl`` for the others (the cells the tuning protocol of
    ``chapter.yml`` chose on the pilot seeds)."""
    if method in COPO_FAMILY:
        return float(cfg.copo_lr), float(cfg.copo_kl)
    return float(cfg.grpo_lr), float(cfg.grpo_kl)


CLAIM_TEMPERATURE = 0.4  # the claims' (and the convergence rule's) decoding temperature, as in the paper

_COMMON = dict(variant="noisy", cosft_batch=256, cosft_lr=3e-3, label_noise=0.3, batch_tasks=16, group_size=4,
               rollout_temperature=1.0, clip_eps=0.2, entropy_coef=0.001, grad_clip=1.0,
               k=2.0, eval_temperatures=[0.4, 1.0])
# ``iterations`` is the cap; every RL agent stops earlier when :func:`plateaued` says so, judged on
# ``n_val`` validation episodes every ``eval_every`` iterations. ``copo_lr``, ``copo_kl``, ``grpo_lr``
# and ``grpo_kl`` at the book and paper profiles are the cells the tuning protocol chose (TUNED).
# The pilot grid of the tuning protocol (``chapter.yml``), rerun by the paper profile (``run_tuning``).
TUNING_GRID = {"rl_lr": [1e-4, 3e-4, 1e-3, 3e-3], "kl_coef": [0.1, 0.5]}
TUNING_SEEDS = [10, 11, 12]
# The tuning grid's runs on the pilot seeds (method, rl_lr, kl_coef, seed, iterations where the rule
# stopped it, plateaued, validation success and cost per step there, temperature 0.4), recorded by
# :func:`tuning_grid` on 2026-12-03 before the confirmatory run; :func:`select_cells` of these rows
# gives TUNED.
_TUNING_COLUMNS = ["method", "rl_lr", "kl_coef", "seed", "iterations", "plateaued", "val_success", "val_cost"]
TUNING_RESULTS = pd.DataFrame([
    ('copo', 0.0001, 0.1, 10, 550, True, 0.8633, 51.031),
    ('copo', 0.0001, 0.1, 11, 400, True, 0.7967, 46.445),
    ('copo', 0.0001, 0.1, 12, 425, True, 0.85, 49.366),
    ('grpo', 0.0001, 0.1, 10, 500, True, 0.8567, 42.443),
    ('grpo', 0.0001, 0.1, 11, 450, True, 0.8367, 42.912),
    ('grpo', 0.0001, 0.1, 12, 450, True, 0.8667, 44.185),
    ('copo', 0.0001, 0.5, 10, 550, True, 0.8167, 45.186),
    ('copo', 0.0001, 0.5, 11, 375, True, 0.82, 44.502),
    ('copo', 0.0001, 0.5, 12, 400, True, 0.8233, 46.056),
    ('grpo', 0.0001, 0.5, 10, 600, True, 0.8467, 41.978),
    ('grpo', 0.0001, 0.5, 11, 450, True, 0.85, 42.591),
    ('grpo', 0.0001, 0.5, 12, 650, True, 0.8633, 44.1),
    ('copo', 0.0003, 0.1, 10, 375, True, 0.8233, 53.986),
    ('copo', 0.0003, 0.1, 11, 375, True, 0.8333, 54.206),
    ('copo', 0.0003, 0.1, 12, 400, True, 0.7767, 56.948),
    ('grpo', 0.0003, 0.1, 10, 625, True, 0.8667, 41.872),
    ('grpo', 0.0003, 0.1, 11, 425, True, 0.8967, 43.115),
    ('grpo', 0.0003, 0.1, 12, 400, True, 0.84, 44.059),
    ('copo', 0.0003, 0.5, 10, 375, True, 0.8533, 45.694),
    ('copo', 0.0003, 0.5, 11, 375, True, 0.8433, 45.071),
    ('copo', 0.0003, 0.5, 12, 425, True, 0.7733, 47.508),
    ('grpo', 0.0003, 0.5, 10, 575, True, 0.8433, 41.827),
    ('grpo', 0.0003, 0.5, 11, 500, True, 0.85, 42.36),
    ('grpo', 0.0003, 0.5, 12, 400, True, 0.8467, 44.214),
    ('copo', 0.001, 0.1, 10, 375, True, 0.8067, 56.866),
    ('copo', 0.001, 0.1, 11, 375, True, 0.8433, 56.187),
    ('copo', 0.001, 0.1, 12, 375, True, 0.8, 59.22),
    ('grpo', 0.001, 0.1, 10, 625, True, 0.87, 42.051),
    ('grpo', 0.001, 0.1, 11, 525, True, 0.8867, 42.507),
    ('grpo', 0.001, 0.1, 12, 425, True, 0.8833, 44.258),
    ('copo', 0.001, 0.5, 10, 375, True, 0.8267, 45.878),
    ('copo', 0.001, 0.5, 11, 500, True, 0.8533, 47.06),
    ('copo', 0.001, 0.5, 12, 375, True, 0.8133, 48.396),
    ('grpo', 0.001, 0.5, 10, 500, True, 0.8867, 42.147),
    ('grpo', 0.001, 0.5, 11, 500, True, 0.87, 42.114),
    ('grpo', 0.001, 0.5, 12, 500, True, 0.8833, 43.874),
    ('copo', 0.003, 0.1, 10, 450, True, 0.8567, 58.125),
    ('copo', 0.003, 0.1, 11, 625, True, 0.8267, 58.481),
    ('copo', 0.003, 0.1, 12, 625, True, 0.8167, 60.089),
    ('grpo', 0.003, 0.1, 10, 650, True, 0.8967, 42.013),
    ('grpo', 0.003, 0.1, 11, 575, True, 0.88, 42.715),
    ('grpo', 0.003, 0.1, 12, 400, True, 0.8667, 44.304),
    ('copo', 0.003, 0.5, 10, 675, True, 0.8367, 47.328),
    ('copo', 0.003, 0.5, 11, 375, True, 0.8133, 46.518),
    ('copo', 0.003, 0.5, 12, 550, True, 0.8333, 48.306),
    ('grpo', 0.003, 0.5, 10, 575, True, 0.8767, 41.611),
    ('grpo', 0.003, 0.5, 11, 500, True, 0.8667, 42.414),
    ('grpo', 0.003, 0.5, 12, 425, True, 0.86, 43.946),
], columns=_TUNING_COLUMNS)
TUNED = dict(copo_lr=1e-4, copo_kl=0.1, grpo_lr=1e-3, grpo_kl=0.1)  # select_cells(TUNING_RESULTS)
_ALL_ARMS = ["cosft", "oracle", "copo", "copo_sampled_level", "copo_quarter", "grpo", "fixed_l4", "grpo_scratch"]
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], cosft_steps=40, iterations=10, eval_every=5, plateau_window=1, plateau_delta=0.005,
                  n_val=100, n_eval=100, n_premise_episodes=64, workers=1, run_tuning=False,
                  methods=list(_ALL_ARMS), **{**_COMMON, **TUNED}),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], cosft_steps=400, iterations=1500, eval_every=25,
                 plateau_window=8, plateau_delta=0.005, n_val=300, n_eval=300, n_premise_episodes=400, workers=2,
                 run_tuning=False, methods=list(_ALL_ARMS), **{**_COMMON, **TUNED}),
    "paper": dict(seeds=list(range(1000, 1010)), cosft_steps=400, iterations=4000, eval_every=25, plateau_window=8,
                  plateau_delta=0.005, n_val=1000, n_eval=1000, n_premise_episodes=1000, workers=2, run_tuning=True,
                  methods=list(METHODS), **{**_COMMON, **TUNED}),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
EXPERIMENT_BOUNDS = dict(cosft_steps=(0, None), iterations=(1, None), eval_every=(1, None), plateau_window=(1, None),
                         plateau_delta=(0.0, None), n_val=(1, None), n_eval=(1, None), n_premise_episodes=(1, None),
                         workers=(1, None), methods=set(METHODS), variant=set(VARIANTS), cosft_batch=(1, None),
                         cosft_lr=(1e-8, None), label_noise=(0.0, 1.0), batch_tasks=(1, None), group_size=(2, None),
                         rollout_temperature=(1e-3, None), copo_lr=(1e-8, None), copo_kl=(0.0, None),
                         grpo_lr=(1e-8, None), grpo_kl=(0.0, None),
                         clip_eps=(0.0, None), entropy_coef=(0.0, None), grad_clip=(1e-8, None), k=(0.0, None),
                         eval_temperatures=(1e-3, None))


def _method_policy(method: str, cosft_policy: LevelPolicy, init_policy: LevelPolicy):
    if method == "grpo_scratch":
        return copy.deepcopy(init_policy)
    if method == "oracle":
        return OracleRouter()
    policy = copy.deepcopy(cosft_policy)
    policy.fixed_level = {"fixed_l1": 0, "fixed_l4": 3}.get(method)
    return policy


def _expansion_rows(seed, method, iteration, batch, policy) -> list:
    """Per stage type: mean level-head probabilities at the expanded states (after that iteration's
    update) and the mean predicted fixed point w / sum(w)."""
    if batch["n_expanded"] == 0:
        return []
    with torch.no_grad():
        pi = policy.level_logprobs(torch.from_numpy(batch["exp_obs"])).exp().double().numpy()
    target = batch["exp_weights"] / batch["exp_weights"].sum(axis=1, keepdims=True)
    rows = []
    for t, name in enumerate(STAGE_TYPES):
        here = batch["exp_type"] == t
        if here.any():
            row = {"seed": seed, "method": method, "iteration": iteration, "stage_type": name, "n": int(here.sum())}
            row.update({f"pi_l{j + 1}": float(pi[here, j].mean()) for j in range(N_LEVELS)})
            row.update({f"target_l{j + 1}": float(target[here, j].mean()) for j in range(N_LEVELS)})
            rows.append(row)
    return rows


def train_method(method: str, cosft_policy: LevelPolicy, init_policy: LevelPolicy, eval_tasks: dict,
                 val_tasks: dict, cfg, seed: int, progress=None) -> dict:
    """One method of one seed from copies of the CoSFT policy (``grpo_scratch``: of the random
    initial policy); the given policies are not changed.

    ``cosft`` and ``oracle`` (the headroom arm, :class:`OracleRouter`) are evaluated once
    (iteration 0). The RL methods run :func:`rl_iteration` (expansion for the CoPO family, with
    its control's options) at their :func:`method_settings` on the seed's task stream (B tasks per iteration, the same for every method),
    with the KL reference frozen at the start policy, until the convergence rule :func:`plateaued`
    holds on the validation successes (``val_tasks`` at temperature 0.4, every ``eval_every``
    iterations, iteration 0 included) or ``cfg.iterations`` is reached. They are evaluated on
    ``eval_tasks`` at each of ``eval_temperatures`` at iteration 0 and where they stop. Returns rows
    ``evals``, ``levels`` (level distributions), ``validation`` (the learning curves), ``curves``
    (training statistics per iteration), ``expansion`` (copo), ``stops`` (iterations run, and
    whether the rule stopped it before the cap) and ``seconds``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    policy = _method_policy(method, cosft_policy, init_policy)
    reference = copy.deepcopy(policy).requires_grad_(False)
    m = _METHOD_INDEX[method]
    out = {key: [] for key in ("evals", "levels", "validation", "curves", "expansion", "stops")}
    seconds = {"rl": 0.0, "eval": 0.0}

    def run_eval(iteration):
        start = time.perf_counter()
        for j, temperature in enumerate(cfg.eval_temperatures):
            rng = np.random.default_rng([seed, 4, m, iteration, j])
            summary, dist = evaluate(policy, eval_tasks, rng, temperature)
            key = {"seed": seed, "method": method, "iteration": iteration, "temperature": float(temperature)}
            out["evals"].append({**key, **summary})
            out["levels"].extend({**key, **row} for row in dist)
        seconds["eval"] += time.perf_counter() - start

    def validate(iteration) -> float:
        start = time.perf_counter()
        summary, _ = evaluate(policy, val_tasks, np.random.default_rng([seed, 7, m, iteration]), CLAIM_TEMPERATURE)
        out["validation"].append({"seed": seed, "method": method, "iteration": iteration, **summary})
        seconds["eval"] += time.perf_counter() - start
        return summary["success"]

    run_eval(0)
    history = [validate(0)]
    if method not in EVAL_ONLY:
        task_rng = np.random.default_rng([seed, 1])
        agent_rng = np.random.default_rng([seed, 2, m])
        lr, kl_coef = method_settings(cfg, method)
        expand = method in COPO_FAMILY
        expand_levels, variant_scale = _COPO_OPTIONS.get(method, (True, 1.0))
        optimiser = torch.optim.Adam(policy.parameters(), lr=lr)
        it, stopped = 0, False
        iterations = range(1, cfg.iterations + 1)
        for it in progress(iterations) if progress else iterations:
            start = time.perf_counter()
            tasks = sample_tasks(cfg.batch_tasks, task_rng, cfg.variant)
            stats, batch = rl_iteration(policy, reference, optimiser, tasks, agent_rng, cfg, expand=expand,
                                        kl_coef=kl_coef, expand_levels=expand_levels, variant_scale=variant_scale)
            if method == "copo":
                out["expansion"] += _expansion_rows(seed, method, it, batch, policy)
            seconds["rl"] += time.perf_counter() - start
            out["curves"].append({"seed": seed, "method": method, "iteration": it, **stats})
            if it % cfg.eval_every == 0:
                history.append(validate(it))
                stopped = plateaued(history, cfg.plateau_window, cfg.plateau_delta)
                if stopped:
                    break
        out["stops"].append({"seed": seed, "method": method, "iterations": it, "plateaued": bool(stopped)})
        run_eval(it)
    return {"policy": policy, **out, "seconds": seconds}


_ROW_KEYS = ("evals", "levels", "validation", "curves", "expansion", "stops")


def _task_sets(cfg, seed: int) -> tuple[dict, dict]:
    """The seed's evaluation and validation episodes (fixed, the same for every method)."""
    return (sample_tasks(cfg.n_eval, np.random.default_rng([seed, 3]), cfg.variant),
            sample_tasks(cfg.n_val, np.random.default_rng([seed, 6]), cfg.variant))


def start_seed(cfg, seed: int, threads: int = 1) -> dict:
    """Stage 1 of one seed: the random initial policy (``init``), CoSFT (``cosft``, the common
    start), the premise check (``premise``, ``confidence``), ``cosft_losses`` and ``seconds``."""
    with compute_threads(threads):
        seed_everything(seed)
        init = make_policy(cfg.variant, seed=100 * seed)
        policy = copy.deepcopy(init)
        start = time.perf_counter()
        losses = cosft(policy, cfg.cosft_steps, seed, cfg.cosft_batch, cfg.cosft_lr, cfg.label_noise)
        seconds = {"seed": seed, "cosft_training": time.perf_counter() - start}
        start = time.perf_counter()
        prem, conf_rows = premise(policy, cfg.n_premise_episodes, seed)
        seconds["premise"] = time.perf_counter() - start
    return {"init": init, "cosft": policy, "premise": prem, "confidence": conf_rows, "seconds": seconds,
            "cosft_losses": [{"seed": seed, "step": i + 1, "loss": float(v)} for i, v in enumerate(losses)]}


def run_method(cfg, seed: int, method: str, cosft_policy: LevelPolicy, init_policy: LevelPolicy, progress=None,
               threads: int = 1) -> dict:
    """:func:`train_method` on the seed's fixed episodes, without the trained policy (plain rows,
    so that a worker process can return it)."""
    with compute_threads(threads):
        seed_everything(seed)
        res = train_method(method, cosft_policy, init_policy, *_task_sets(cfg, seed), cfg, seed, progress)
    res.pop("policy")
    return res


def _seed_rows(cfg, seed: int, stage1: dict, results: list[dict]) -> dict:
    out = {key: [row for res in results for row in res[key]] for key in _ROW_KEYS}
    seconds = {**stage1["seconds"], "eval": sum(res["seconds"]["eval"] for res in results)}
    seconds.update({method: res["seconds"]["rl"] for method, res in zip(cfg.methods, results)})
    return {"seed": seed, **out, "premise": stage1["premise"], "confidence": stage1["confidence"],
            "cosft_losses": stage1["cosft_losses"], "seconds": seconds}


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed in this process: :func:`start_seed`, then :func:`run_method` for every method of
    ``cfg.methods``; plain data only (rows). Keys: ``evals``, ``levels``, ``validation``,
    ``curves``, ``expansion``, ``stops`` (see :func:`train_method`), ``premise`` (summary dict),
    ``confidence`` (heat-map rows), ``cosft_losses`` and ``seconds`` (``cosft_training``,
    ``premise``, each method's RL iterations (``cosft``: 0), ``eval``)."""
    stage1 = start_seed(cfg, seed, threads)
    results = [run_method(cfg, seed, method, stage1["cosft"], stage1["init"], progress, threads)
               for method in cfg.methods]
    return _seed_rows(cfg, seed, stage1, results)


def _run_parallel(cfg, threads: int, workers: int) -> list[dict]:
    """The runs of :func:`run_seed`, each (seed, method) a task on ``workers`` processes; stage 1
    runs here, seed by seed, while the workers train. Rows are merged in seed and method order, so
    the numbers are the same as in one process."""
    stage1, futures = {}, {}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for seed in cfg.seeds:
            stage1[seed] = start_seed(cfg, seed, threads)
            for method in cfg.methods:
                futures[seed, method] = pool.submit(run_method, cfg, seed, method, stage1[seed]["cosft"],
                                                    stage1[seed]["init"], None, threads)
        return [_seed_rows(cfg, seed, stage1[seed], [futures[seed, m].result() for m in cfg.methods])
                for seed in cfg.seeds]


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed (on ``cfg.workers`` processes when it is above 1; ``progress``
    is shown only in one process); data frames ``evals`` (seed, method, iteration, temperature,
    success, cost_per_step, steps_per_episode, level_routine, level_recall, level_plan, level_hard;
    at iteration 0 and where each method stopped), ``levels`` (level distribution per stage type),
    ``validation`` (the same summary on the validation episodes, temperature 0.4, every
    ``eval_every`` iterations: the learning curves), ``stops`` (seed, method, iterations,
    plateaued), ``curves`` (training statistics per iteration), ``expansion`` (CoPO's level-head
    probabilities vs w / sum(w) at expanded states), ``premise`` (one row per seed),
    ``confidence`` (c and c_hat per stage type and level), ``cosft_losses`` and ``seconds`` (per
    phase)."""
    workers = getattr(cfg, "workers", 1)
    if workers > 1:
        runs = _run_parallel(cfg, threads, workers)
    else:
        runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    frames = {key: pd.DataFrame([row for run in runs for row in run[key]])
              for key in (*_ROW_KEYS, "confidence", "cosft_losses")}
    frames["premise"] = pd.DataFrame([run["premise"] for run in runs])
    frames["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return frames


def _final_eval(evals: pd.DataFrame, seed: int, method: str, temperature: float = CLAIM_TEMPERATURE):
    sel = evals[(evals["seed"] == seed) & (evals["method"] == method)
                & np.isclose(evals["temperature"], temperature)] if len(evals) else evals
    if not len(sel):
        return None
    return sel.loc[sel["iteration"].idxmax()]


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``, all at temperature 0.4 on the
    final evaluation; CoSFT alone is the null of the headlines. p1 = share of the seed's RL agents
    that the convergence rule stopped before the cap; p2 = the lower success of CoSFT alone and
    GRPO; p3 / p4 / p5 = the oracle router minus CoSFT alone in c2a's cost ratio, in success points
    and in depth gap; c1a / c1b from the premise check; c2a = (CoPO - CoSFT) cost per step / fixed
    level 4's; c2b = m1 = (CoPO - CoSFT) success in points; c3 = CoPO's depth gap minus CoSFT's;
    c4 = (CoPO - GRPO) points; c5 = (CoPO with the level head on the sampled level only - CoPO)
    points; c6 = (CoPO with variants weighted w / 4 - CoPO) points; m2 / m3 = CoSFT's cost ratio
    and depth gap; m4 = CoPO's cost ratio; m5 = (CoPO - fixed level 4) points; m6 = (CoPO - GRPO
    from scratch) points; m7 = CoPO's depth gap. nan where a needed method (or the premise or stop
    rows) is missing."""
    nan = float("nan")
    evals = results["evals"]
    prem = results["premise"].set_index("seed") if len(results.get("premise", [])) else None
    stops = results.get("stops")
    values = {}
    for seed in cfg.seeds:
        final = {m: _final_eval(evals, seed, m) for m in METHODS}

        def get(method, column):
            row = final[method]
            return float(row[column]) if row is not None else nan

        def premise_value(key):
            return float(prem.loc[seed, key]) if prem is not None and seed in prem.index else nan

        def points(method, baseline):
            return 100.0 * (get(method, "success") - get(baseline, "success"))

        def cost_ratio(method):
            return get(method, "cost_per_step") / get("fixed_l4", "cost_per_step")

        def depth_gap(method):
            return get(method, "level_hard") - get(method, "level_routine")

        here = stops[stops["seed"] == seed] if stops is not None and len(stops) else []
        gain = points("copo", "cosft")
        values[seed] = {
            "p1_agents_converged": float(here["plateaued"].mean()) if len(here) else nan,
            "p2_models_competent": min(get("cosft", "success"), get("grpo", "success")),
            "p3_room_cost": cost_ratio("oracle") - cost_ratio("cosft"),
            "p4_room_success": points("oracle", "cosft"),
            "p5_room_depth": depth_gap("oracle") - depth_gap("cosft"),
            "c1a_premise_hard_steps": premise_value("c1a"),
            "c1b_premise_routine_steps": premise_value("c1b"),
            "c2a_cost_vs_cosft": cost_ratio("copo") - cost_ratio("cosft"),
            "c2b_success_vs_cosft": gain,
            "m1_copo_vs_cosft": gain,
            "c3_depth_vs_cosft": depth_gap("copo") - depth_gap("cosft"),
            "c4_copo_vs_grpo": points("copo", "grpo"),
            "c5_soft_level_target": points("copo_sampled_level", "copo"),
            "c6_repetition": points("copo_quarter", "copo"),
            "m2_cosft_cost_vs_always_think": cost_ratio("cosft"),
            "m3_cosft_depth_gap": depth_gap("cosft"),
            "m4_copo_cost_vs_always_think": cost_ratio("copo"),
            "m5_copo_vs_fixed_l4": points("copo", "fixed_l4"),
            "m6_copo_vs_grpo_from_scratch": points("copo", "grpo_scratch"),
            "m7_copo_depth_gap": depth_gap("copo"),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}


def tuning_grid(cfg, seeds, grid: dict, methods=("copo", "grpo"), progress=None, threads: int = 1) -> pd.DataFrame:
    """The tuning protocol of ``chapter.yml``: for every cell of ``grid`` (``{"rl_lr": [...],
    "kl_coef": [...]}``, the same for every method), every method of ``methods`` and every seed of
    ``seeds`` (pilot seeds, below 1000), CoSFT then the method at that learning rate and KL weight
    to the convergence rule. Returns one row per run: rl_lr, kl_coef, method, seed, iterations,
    plateaued, and the validation success and cost per step (temperature 0.4) where it stopped.
    The evaluation episodes are not used."""
    if any(seed >= 1000 for seed in seeds):
        raise ValueError("tuning runs on pilot seeds only (below 1000)")
    run_cfg = copy.copy(cfg)
    rows = []
    for seed in seeds:
        stage1 = start_seed(run_cfg, seed, threads)
        for lr in grid["rl_lr"]:
            for kl in grid["kl_coef"]:
                run_cfg.copo_lr = run_cfg.grpo_lr = lr
                run_cfg.copo_kl = run_cfg.grpo_kl = kl
                for method in methods:
                    res = run_method(run_cfg, seed, method, stage1["cosft"], stage1["init"], progress, threads)
                    last = res["validation"][-1]
                    rows.append({"rl_lr": lr, "kl_coef": kl, "method": method, "seed": seed,
                                 "iterations": res["stops"][0]["iterations"],
                                 "plateaued": res["stops"][0]["plateaued"],
                                 "val_success": last["success"], "val_cost": last["cost_per_step"]})
    return pd.DataFrame(rows)


def select_cells(table: pd.DataFrame, tie: float = 0.005) -> pd.DataFrame:
    """The selection rule of ``chapter.yml``: per method, the cell with the highest mean validation
    success over the seeds; cells within ``tie`` (half a point) of the best go to the smaller
    learning rate (then the smaller KL weight). Returns one row per method with its cell and mean."""
    means = table.groupby(["method", "rl_lr", "kl_coef"], as_index=False)["val_success"].mean()
    chosen = []
    for _, group in means.groupby("method", sort=False):
        near = group[group["val_success"] >= group["val_success"].max() - tie]
        chosen.append(near.sort_values(["rl_lr", "kl_coef"]).iloc[0])
    return pd.DataFrame(chosen).reset_index(drop=True)
