"""The HyperTrack experiment on MiniGUI: pretrain a base policy, fine-tune it by SFT and by RFT at
growing numbers of episodes N, evaluate every policy with the kit's three protocols on four splits,
and turn the results into the claims of ``chapter.yml``.

Contents: :data:`EXPERIMENT_PROFILES`, :data:`EXPERIMENT_BOUNDS`, :func:`make_data` (the seed's
world, pools and splits), :func:`pretrain` (the base policy), :func:`fine_tune_sft`,
:func:`fine_tune_rft`, :func:`run_seed`, :func:`run_experiment`, :func:`line_fit` and
:func:`claim_values`.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
import torch
from scipy import stats

from replib.core.runtime import compute_threads

from .method import action_reward, rft_update, sft_update
from .task import (
    GUIPolicy,
    evaluate,
    gt_kit,
    make_world,
    observe,
    record_episodes,
    sample_tasks,
    to_kit,
)

__all__ = ["EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "METHODS", "make_data", "pretrain", "fine_tune_sft",
           "fine_tune_rft", "run_seed", "run_experiment", "line_fit", "claim_values"]

METHODS = ("sft", "rft")
CLAIM_N = 128  # the fine-tuning size of the point claims (h1, h2, m1, m2)

_COMMON = dict(hidden=64, base_tasks=1000, base_lr=1e-2, base_batch=64, ft_lr=3e-3, batch_states=16,
               candidate_states=32, max_rounds=8, group_size=8, rft_epochs=2, eps_low=0.2, eps_high=0.3)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], sizes=[8, 128], base_steps=60, ft_steps=16, n_test=30, **_COMMON),
    "book": dict(seeds=[0, 1, 2], sizes=[8, 32, 128, 1024], base_steps=150, ft_steps=120, n_test=100, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], sizes=[8, 16, 32, 64, 128, 256, 512, 1024, 2048], base_steps=150,
                  ft_steps=400, n_test=400, **_COMMON),
}
EXPERIMENT_BOUNDS = {"sizes": (1, 4096), "base_steps": (1, None), "ft_steps": (2, None), "n_test": (5, 2000),
                     "hidden": (4, 512), "base_tasks": (10, 20000), "base_lr": (1e-6, 1.0), "base_batch": (1, 4096),
                     "ft_lr": (1e-6, 1.0), "batch_states": (1, 1024), "candidate_states": (1, 4096), "max_rounds": (1, 100),
                     "group_size": (2, 256), "rft_epochs": (1, 16), "eps_low": (0.0, 1.0), "eps_high": (0.0, 1.0)}


def _merge(parts: list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def make_data(cfg, seed: int) -> dict:
    """The seed's world and data: pretraining rows (pretraining apps, half phone, half tablet),
    held-out pretraining tasks, the fine-tuning pool (training apps, phone; the first N tasks are
    the N-episode subset, so the subsets are nested) and the four test splits."""
    world = make_world(seed)
    rng = np.random.default_rng([seed, 1])
    pre = sample_tasks(world, world.apps("pretrain"), cfg.base_tasks + cfg.n_test, rng)
    half = cfg.base_tasks // 2
    pool = sample_tasks(world, world.apps("train"), max(cfg.sizes) + cfg.n_test, rng)
    unseen = sample_tasks(world, world.apps("unseen"), cfg.n_test, rng)
    return {"world": world,
            "pretrain_rows": _merge([record_episodes(world, pre[:half], "phone"),
                                     record_episodes(world, pre[half:cfg.base_tasks], "tablet")]),
            "pretrain_test": pre[cfg.base_tasks:], "pool": pool[:max(cfg.sizes)],
            "splits": {"in_domain": (pool[max(cfg.sizes):], "phone"), "unseen_app": (unseen, "phone"),
                       "unseen_device": (pool[max(cfg.sizes):], "tablet"),
                       "unseen_app_device": (unseen, "tablet")}}


def _greedy(policy):
    return lambda obs: policy.sample(obs, greedy=True)


def pretrain(rows: dict, cfg, seed: int, use_history: bool = True) -> GUIPolicy:
    """The base policy (the stand-in for a pretrained GUI model): SFT (:func:`method.sft_update`)
    for ``base_steps`` minibatches of ``base_batch`` steps of the pretraining rows, Adam."""
    policy = GUIPolicy(hidden=cfg.hidden, seed=seed, use_history=use_history)
    optimiser = torch.optim.Adam(policy.parameters(), lr=cfg.base_lr)
    obs = observe(rows)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(cfg.base_steps):
        idx = torch.randint(len(rows["step"]), (cfg.base_batch,), generator=generator)
        sft_update(policy, optimiser, {k: v[idx] for k, v in obs.items()}, rows["action"][idx.numpy()])
    return policy


def fine_tune_sft(base: GUIPolicy, rows: dict, cfg, seed: int) -> tuple[GUIPolicy, dict]:
    """SFT from the base: ``ft_steps`` Adam steps of token cross-entropy on minibatches of
    ``batch_states`` reference steps of the N episodes."""
    policy = copy.deepcopy(base)
    optimiser = torch.optim.Adam(policy.parameters(), lr=cfg.ft_lr)
    obs = observe(rows)
    generator = torch.Generator().manual_seed(seed + 101)
    losses = []
    for _ in range(cfg.ft_steps):
        idx = torch.randint(len(rows["step"]), (cfg.batch_states,), generator=generator)
        losses.append(sft_update(policy, optimiser, {k: v[idx] for k, v in obs.items()}, rows["action"][idx.numpy()]))
    return policy, {"final_loss": float(np.mean(losses[-10:]))}


def fine_tune_rft(base: GUIPolicy, rows: dict, cfg, seed: int) -> tuple[GUIPolicy, dict]:
    """Step-level RFT from the base (:func:`method.rft_update`): ``ft_steps / rft_epochs``
    iterations, each drawing ``candidate_states`` reference steps of the N episodes at a time
    (reference history), G = ``group_size`` samples per state, reward R_type + R_param, dynamic
    sampling refilling the batch up to ``batch_states`` groups (at most ``max_rounds`` draws),
    ``rft_epochs`` Adam steps on the DAPO loss. The same number of optimiser steps and of states per
    step as SFT (when the refill succeeds)."""
    policy = copy.deepcopy(base)
    optimiser = torch.optim.Adam(policy.parameters(), lr=cfg.ft_lr)
    obs = observe(rows)
    gt = gt_kit(rows)
    generator = torch.Generator().manual_seed(seed + 202)
    log = []

    def draw_states():
        idx = torch.randint(len(rows["step"]), (cfg.candidate_states,), generator=generator)
        return {k: v[idx] for k, v in obs.items()}, idx.numpy()

    def reward(states, actions):
        return action_reward(to_kit(actions), {k: v[states] for k, v in gt.items()})

    for _ in range(max(1, cfg.ft_steps // cfg.rft_epochs)):
        log.append(rft_update(policy, optimiser, draw_states, reward, cfg.group_size, cfg.batch_states, generator,
                              max_rounds=cfg.max_rounds, epochs=cfg.rft_epochs, eps_low=cfg.eps_low,
                              eps_high=cfg.eps_high))
    return policy, {"mean_reward": float(np.mean([s["mean_reward"] for s in log])),
                    "share_kept": float(np.mean([s["share_kept"] for s in log])),
                    "groups": float(np.mean([s["groups"] for s in log])),
                    "draws": float(np.mean([s["draws"] for s in log])),
                    "final_reward": float(np.mean([s["mean_reward"] for s in log[-5:]]))}


def _evaluate_all(policy, data: dict, labels: dict) -> list[dict]:
    rows = []
    for split, (tasks, device) in data["splits"].items():
        rows.append({**labels, "split": split, **evaluate(_greedy(policy), data["world"], tasks, device)})
    return rows


def run_seed(cfg, seed: int, progress=None) -> dict:
    """One seed: data, base and history-free base, SFT and RFT at every N, the kit's evaluation of
    every policy on every split. Returns rows of ``evals``, ``pretrain`` (the bases on held-out
    pretraining tasks), ``training`` (fine-tuning logs) and ``seconds``."""
    start = time.perf_counter()
    with compute_threads(1):
        torch.manual_seed(seed)
        data = make_data(cfg, seed)
        base = pretrain(data["pretrain_rows"], cfg, seed)
        no_history = pretrain(data["pretrain_rows"], cfg, seed, use_history=False)
        pre_rows = []
        for name, policy in (("base", base), ("base_no_history", no_history)):
            for device in ("phone", "tablet"):
                result = evaluate(_greedy(policy), data["world"], data["pretrain_test"], device)
                pre_rows.append({"seed": seed, "policy": name, "device": device, **result})
        evals = _evaluate_all(base, data, {"seed": seed, "method": "base", "n": 0})
        evals += _evaluate_all(no_history, data, {"seed": seed, "method": "base_no_history", "n": 0})
        training = []
        jobs = [(n, m) for n in cfg.sizes for m in METHODS]
        for n, method in (progress(jobs, desc=f"seed {seed}", leave=False) if progress else jobs):
            rows = record_episodes(data["world"], data["pool"][:n], "phone")
            tune = fine_tune_sft if method == "sft" else fine_tune_rft
            policy, log = tune(base, rows, cfg, seed)
            training.append({"seed": seed, "method": method, "n": n, "n_steps": len(rows["step"]), **log})
            evals += _evaluate_all(policy, data, {"seed": seed, "method": method, "n": n})
    return {"evals": evals, "pretrain": pre_rows, "training": training,
            "seconds": {"seed": seed, "seconds": time.perf_counter() - start}}


def run_experiment(cfg, progress=None) -> dict:
    """Every seed of ``cfg``; returns DataFrames ``evals``, ``pretrain``, ``training``, ``seconds``."""
    runs = [run_seed(cfg, seed, progress) for seed in cfg.seeds]
    out = {key: pd.DataFrame([row for run in runs for row in run[key]]) for key in ("evals", "pretrain", "training")}
    out["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return out


def line_fit(x, y) -> tuple[float, float]:
    """Least-squares line of ``y`` on ``x``: (slope, R^2); R^2 is 1 when y is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    total = float(((y - y.mean()) ** 2).sum())
    residual = float(((y - (slope * x + intercept)) ** 2).sum())
    return float(slope), 1.0 if total == 0 else 1.0 - residual / total


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``. EM values are offline unless
    named; differences in percentage points. p1 = base EM on held-out pretraining tasks (phone and
    tablet averaged); p2 = base in-domain EM; h1 = RFT - SFT on unseen apps at N = 128; h2 = h1
    minus the same difference in-domain; h3 = slope on log2 N of unseen-app EM (points), RFT minus
    SFT; c1a / c1b = R^2 of in-domain EM on log2 N (SFT / RFT); c2a = Spearman(SOEval EM, online
    success) - Spearman(offline EM, online success) over the base and fine-tuned policies x splits;
    c2b = mean SOEval EM - offline EM over the same; c3 = base minus history-free base EM at form
    steps, in-domain; m1 = SFT's type-mismatch share of errors, unseen apps, N = 128; m2 = RFT - SFT
    on the unseen device at N = 128. nan where a needed run is missing."""
    nan = float("nan")
    evals, pre = results["evals"], results["pretrain"]
    values = {}
    for seed in cfg.seeds:
        ev = evals[evals["seed"] == seed]

        def get(method, n, split, column="em", ev=ev):
            sel = ev[(ev["method"] == method) & (ev["n"] == n) & (ev["split"] == split)]
            return float(sel[column].iloc[0]) if len(sel) else nan

        def gap(split, n=CLAIM_N):
            return 100.0 * (get("rft", n, split) - get("sft", n, split))

        def curve(method, split):
            sizes = [n for n in cfg.sizes if not np.isnan(get(method, n, split))]
            if len(sizes) < 2:
                return nan, nan
            return line_fit(np.log2(sizes), [100.0 * get(method, n, split) for n in sizes])

        p = pre[(pre["seed"] == seed) & (pre["policy"] == "base")]
        policies = ev[ev["method"] != "base_no_history"]
        if len(policies) >= 3:
            spearman_semi = stats.spearmanr(policies["soeval_em"], policies["online_success"]).statistic
            spearman_off = stats.spearmanr(policies["em"], policies["online_success"]).statistic
            c2a = float(spearman_semi - spearman_off)
            c2b = float(100.0 * (policies["soeval_em"] - policies["em"]).mean())
        else:
            c2a = c2b = nan
        values[seed] = {
            "p1_base_learns": float(p["em"].mean()) if len(p) else nan,
            "p2_base_leaves_room": get("base", 0, "in_domain"),
            "h1_rft_beats_sft_unseen_app": gap("unseen_app"),
            "h2_gap_larger_unseen_than_in_domain": gap("unseen_app") - gap("in_domain"),
            "h3_rft_slope_at_least_sft_unseen_app": curve("rft", "unseen_app")[0] - curve("sft", "unseen_app")[0],
            "c1a_sft_log_linear": curve("sft", "in_domain")[1],
            "c1b_rft_log_linear": curve("rft", "in_domain")[1],
            "c2a_soeval_ranks_like_online": c2a,
            "c2b_soeval_not_below_offline": c2b,
            "c3_history_matters": 100.0 * (get("base", 0, "in_domain", "em_ambiguous")
                                           - get("base_no_history", 0, "in_domain", "em_ambiguous")),
            "m1_type_error_share": get("sft", CLAIM_N, "unseen_app", "type_error_share"),
            "m2_rft_minus_sft_unseen_device": gap("unseen_device"),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
