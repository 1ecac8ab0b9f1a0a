"""The CogRouter experiment on DepthWorld: one RL iteration (steps 1-9 of the algorithm on the toy),
the premise check of claim 1, the methods and profiles, the runs, the claim values and the
exploratory regime search.

Contents: :func:`rl_iteration`, :func:`premise`, :data:`METHODS`, :data:`EXPERIMENT_PROFILES`,
:func:`train_method`, :func:`run_seed`, :func:`run_experiment`, :func:`claim_values`,
:func:`regime_sweep`. The baselines (GRPO, fixed levels, GRPO from scratch) are a few lines each
(``expand=False``, ``fixed_level``, the initial policy) and live in :func:`train_method`.
"""

from __future__ import annotations

import copy
import time

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
    LevelPolicy,
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
    "METHODS",
    "EXPERIMENT_PROFILES",
    "train_method",
    "run_seed",
    "run_experiment",
    "claim_values",
    "regime_sweep",
]


# --------------------------------------------------------------------------------------------
# One RL iteration and the premise
# --------------------------------------------------------------------------------------------


def rl_iteration(policy: LevelPolicy, reference: LevelPolicy, optimiser, tasks: dict, rng: np.random.Generator,
                 cfg, expand: bool) -> tuple[dict, dict]:
    """Steps 1-9 once: roll out the G episodes of each of the B ``tasks`` at temperature
    ``cfg.rollout_temperature``, build the batch (:func:`build_batch`, CoPO expansion iff
    ``expand``), one :func:`policy_update`. Returns (stats, batch)."""
    roll = rollout(policy, repeat_tasks(tasks, cfg.group_size), rng, cfg.rollout_temperature)
    batch = build_batch(policy, roll, cfg.group_size, expand=expand, k=cfg.k)
    stats = {"train_success": float(roll["returns"].mean()),
             "train_cost_per_step": float(LEVEL_COSTS[roll["level"]].mean()),
             "share_mixed": batch["share_mixed"], "n_expanded": batch["n_expanded"],
             "n_samples": int(len(batch["advantages"]))}
    stats.update(policy_update(policy, reference, optimiser, batch, clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef,
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

METHODS = ("cosft", "copo", "grpo", "fixed_l1", "fixed_l4", "grpo_scratch")
_METHOD_INDEX = {m: i for i, m in enumerate(METHODS)}

_COMMON = dict(variant="noisy", cosft_batch=256, cosft_lr=3e-3, label_noise=0.3, batch_tasks=16, group_size=4,
               rollout_temperature=1.0, rl_lr=1e-3, kl_coef=0.1, clip_eps=0.2, entropy_coef=0.001, grad_clip=1.0,
               k=2.0, eval_temperatures=[0.4, 1.0])
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], cosft_steps=40, iterations=10, eval_every=5, n_eval=100, n_premise_episodes=64,
                  methods=["cosft", "copo", "grpo", "fixed_l4", "grpo_scratch"], **_COMMON),  # c2a, c2b, m1 need the last two
    "book": dict(seeds=[0, 1, 2], cosft_steps=400, iterations=500, eval_every=25, n_eval=300,
                 n_premise_episodes=400, methods=list(METHODS), **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], cosft_steps=400, iterations=1500, eval_every=50, n_eval=1000,
                  n_premise_episodes=1000, methods=list(METHODS), **_COMMON),
}


def _eval_points(cfg) -> set[int]:
    return set(range(0, cfg.iterations + 1, max(1, cfg.eval_every))) | {cfg.iterations}


def _method_policy(method: str, cosft_policy: LevelPolicy, init_policy: LevelPolicy) -> LevelPolicy:
    if method == "grpo_scratch":
        return copy.deepcopy(init_policy)
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


def train_method(method: str, cosft_policy: LevelPolicy, init_policy: LevelPolicy, eval_tasks: dict, cfg, seed: int,
                 progress=None) -> dict:
    """One method of one seed from copies of the CoSFT policy (``grpo_scratch``: of the random
    initial policy); the given policies are not changed.

    ``cosft`` is evaluated once (iteration 0). The RL methods run ``cfg.iterations`` iterations of
    :func:`rl_iteration` (expansion for ``copo`` only) on the seed's task stream (B tasks per
    iteration, the same for every method), with the KL reference frozen at the start policy, and
    are evaluated at iteration 0, every ``eval_every`` and at the end, at each of
    ``eval_temperatures`` on ``eval_tasks``. Returns rows ``evals``, ``levels`` (level
    distributions), ``curves`` (per iteration), ``expansion`` (copo) and ``seconds``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    policy = _method_policy(method, cosft_policy, init_policy)
    reference = copy.deepcopy(policy).requires_grad_(False)
    m = _METHOD_INDEX[method]
    evals, levels, curves, expansion = [], [], [], []
    seconds = {"rl": 0.0, "eval": 0.0}

    def run_eval(iteration):
        start = time.perf_counter()
        for j, temperature in enumerate(cfg.eval_temperatures):
            rng = np.random.default_rng([seed, 4, m, iteration, j])
            summary, dist = evaluate(policy, eval_tasks, rng, temperature)
            key = {"seed": seed, "method": method, "iteration": iteration, "temperature": float(temperature)}
            evals.append({**key, **summary})
            levels.extend({**key, **row} for row in dist)
        seconds["eval"] += time.perf_counter() - start

    run_eval(0)
    if method != "cosft":
        task_rng = np.random.default_rng([seed, 1])
        agent_rng = np.random.default_rng([seed, 2, m])
        optimiser = torch.optim.Adam(policy.parameters(), lr=cfg.rl_lr)
        eval_at = _eval_points(cfg)
        iterations = range(1, cfg.iterations + 1)
        for it in progress(iterations) if progress else iterations:
            start = time.perf_counter()
            tasks = sample_tasks(cfg.batch_tasks, task_rng, cfg.variant)
            stats, batch = rl_iteration(policy, reference, optimiser, tasks, agent_rng, cfg, expand=method == "copo")
            if method == "copo":
                expansion += _expansion_rows(seed, method, it, batch, policy)
            seconds["rl"] += time.perf_counter() - start
            curves.append({"seed": seed, "method": method, "iteration": it, **stats})
            if it in eval_at:
                run_eval(it)
    return {"policy": policy, "evals": evals, "levels": levels, "curves": curves, "expansion": expansion,
            "seconds": seconds}


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: the random initial policy, CoSFT, the premise check and every method of
    ``cfg.methods``; plain data only (rows). Keys: ``evals``, ``levels``, ``curves``,
    ``expansion`` (see :func:`train_method`), ``premise`` (summary dict), ``confidence`` (heat-map
    rows), ``cosft_losses`` and ``seconds`` (``cosft_training``, ``premise``, each RL method's
    iterations (``cosft``: 0), ``eval``)."""
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
        eval_tasks = sample_tasks(cfg.n_eval, np.random.default_rng([seed, 3]), cfg.variant)
        out = {"evals": [], "levels": [], "curves": [], "expansion": []}
        seconds["eval"] = 0.0
        for method in cfg.methods:
            res = train_method(method, policy, init, eval_tasks, cfg, seed, progress)
            for key in out:
                out[key] += res[key]
            seconds[method] = res["seconds"]["rl"]
            seconds["eval"] += res["seconds"]["eval"]
    return {"seed": seed, **out, "premise": prem, "confidence": conf_rows,
            "cosft_losses": [{"seed": seed, "step": i + 1, "loss": float(v)} for i, v in enumerate(losses)],
            "seconds": seconds}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed; data frames ``evals`` (seed, method, iteration,
    temperature, success, cost_per_step, steps_per_episode, level_routine, level_recall,
    level_plan, level_hard), ``levels`` (level distribution per stage type), ``curves`` (training
    statistics per iteration), ``expansion`` (CoPO's level-head probabilities vs w / sum(w) at
    expanded states), ``premise`` (one row per seed), ``confidence`` (c and c_hat per stage type and
    level), ``cosft_losses`` and ``seconds`` (per phase)."""
    runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    frames = {key: pd.DataFrame([row for run in runs for row in run[key]])
              for key in ("evals", "levels", "curves", "expansion", "confidence", "cosft_losses")}
    frames["premise"] = pd.DataFrame([run["premise"] for run in runs])
    frames["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return frames


def _final_eval(evals: pd.DataFrame, seed: int, method: str, temperature: float = 0.4):
    sel = evals[(evals["seed"] == seed) & (evals["method"] == method)
                & np.isclose(evals["temperature"], temperature)] if len(evals) else evals
    if not len(sel):
        return None
    return sel.loc[sel["iteration"].idxmax()]


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``: c1a / c1b from the premise
    check; c2a = CoPO cost per step / fixed-level-4 cost per step; c2b = (CoPO - fixed level 4)
    success in points; c3 = CoPO mean level at recall + plan steps minus at routine steps; c4 =
    (CoPO - GRPO) success in points; m1 = (CoPO - GRPO from scratch) in points. All at temperature
    0.4, final evaluation; nan where a needed method (or the premise row) is missing."""
    nan = float("nan")
    evals = results["evals"]
    prem = results["premise"].set_index("seed") if len(results.get("premise", [])) else None
    values = {}
    for seed in cfg.seeds:
        final = {m: _final_eval(evals, seed, m) for m in METHODS}

        def get(method, column):
            row = final[method]
            return float(row[column]) if row is not None else nan

        def premise_value(key):
            return float(prem.loc[seed, key]) if prem is not None and seed in prem.index else nan

        cost_l4 = get("fixed_l4", "cost_per_step")
        values[seed] = {
            "c1a_premise_hard_steps": premise_value("c1a"),
            "c1b_premise_routine_steps": premise_value("c1b"),
            "c2a_cost_vs_always_think": get("copo", "cost_per_step") / cost_l4 if cost_l4 == cost_l4 else nan,
            "c2b_success_vs_always_think": 100.0 * (get("copo", "success") - get("fixed_l4", "success")),
            "c3_depth_tracks_difficulty": get("copo", "level_hard") - get("copo", "level_routine"),
            "c4_copo_vs_grpo": 100.0 * (get("copo", "success") - get("grpo", "success")),
            "m1_copo_vs_grpo_from_scratch": 100.0 * (get("copo", "success") - get("grpo_scratch", "success")),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}


_SWEEP_KEYS = {"rl_lr", "kl_coef", "temperature", "variant", "iterations"}


def regime_sweep(cfg, seed: int, settings: list[dict], progress=None, threads: int = 1) -> pd.DataFrame:
    """Exploratory search (not judged) for a regime where CoPO's direction holds: for each settings
    dict (keys among ``rl_lr``, ``kl_coef``, ``temperature`` (the evaluation temperature),
    ``variant`` ("noisy" or "strong") and ``iterations``) run CoSFT, then ``copo`` and ``grpo`` on
    one seed with ``cfg``'s other settings, and return the final evaluation rows (``setting``
    index, the settings, method, temperature, success, cost per step, mean levels) including the
    CoSFT policy's."""
    rows = []
    for i, setting in enumerate(settings):
        unknown = set(setting) - _SWEEP_KEYS
        if unknown:
            raise ValueError(f"unknown sweep keys {sorted(unknown)}; valid: {sorted(_SWEEP_KEYS)}")
        run_cfg = copy.copy(cfg)
        for key, value in setting.items():
            if key == "temperature":
                run_cfg.eval_temperatures = [float(value)]
            else:
                setattr(run_cfg, key, value)
        run_cfg.methods = ["cosft", "copo", "grpo"]
        run_cfg.seeds = [seed]
        run_cfg.n_premise_episodes = 8
        run_cfg.eval_every = run_cfg.iterations
        out = run_seed(run_cfg, seed, progress, threads)
        ev = pd.DataFrame(out["evals"])
        final = ev[ev["iteration"] == ev.groupby("method")["iteration"].transform("max")]
        label = {"setting": i, "rl_lr": run_cfg.rl_lr, "kl_coef": run_cfg.kl_coef, "variant": run_cfg.variant,
                 "iterations": run_cfg.iterations}
        rows += [{**label, **row} for row in final.to_dict("records")]
    return pd.DataFrame(rows)
