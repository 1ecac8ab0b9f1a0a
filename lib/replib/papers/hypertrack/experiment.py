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
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
import torch
from scipy import stats

from replib.core.runtime import compute_threads, thread_budget

from .method import rft_update, sft_update
from .task import (
    CLICK,
    OPEN,
    STOP,
    GUIPolicy,
    bin_centre,
    evaluate,
    make_world,
    observe,
    offline,
    record_episodes,
    sample_tasks,
)

__all__ = ["EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "METHODS", "make_data", "pretrain", "fine_tune_sft",
           "fine_tune_rft", "run_seed", "run_experiment", "line_fit", "claim_values"]

METHODS = ("sft", "rft")
CLAIM_N = 128  # the fine-tuning size of the point claims (h1, h2, m1, m2) and of the tuning
LR_GRID = (3e-4, 1e-3, 3e-3, 1e-2)  # the learning-rate grid, the same for SFT and RFT (chapter.yml, tuning)

_COMMON = dict(hidden=64, base_tasks=1000, base_lr=1e-2, base_batch=64, sft_lr=1e-3, rft_lr=1e-3, batch_states=16,
               candidate_states=32, max_rounds=8, group_size=8, rft_epochs=2, eps_low=0.2, eps_high=0.3,
               unseen_shift=1.5, pretrain_tablet=True, n_val=50, workers=2)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], sizes=[8, 128], base_steps=60, ft_epochs=1, n_test=30, **_COMMON),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], sizes=[8, 32, 128, 1024], base_steps=150, ft_epochs=8,
                 n_test=100, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], sizes=[8, 16, 32, 64, 128, 256, 512, 1024, 2048], base_steps=150,
                  ft_epochs=16, n_test=400, **_COMMON),
}
EXPERIMENT_BOUNDS = {"sizes": (1, 4096), "base_steps": (1, None), "ft_epochs": (1, 64), "n_test": (5, 2000),
                     "hidden": (4, 512), "base_tasks": (10, 20000), "base_lr": (1e-6, 1.0), "base_batch": (1, 4096),
                     "sft_lr": (1e-6, 1.0), "rft_lr": (1e-6, 1.0), "batch_states": (1, 1024),
                     "candidate_states": (1, 4096), "max_rounds": (1, 100), "group_size": (2, 256),
                     "rft_epochs": (1, 16), "eps_low": (0.0, 1.0), "eps_high": (0.0, 1.0), "unseen_shift": (0.0, 10.0),
                     "n_val": (5, 2000), "workers": (1, 16)}


def _merge(parts: list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def make_data(cfg, seed: int) -> dict:
    """The seed's world and data: pretraining rows (pretraining apps; half phone, half tablet unless
    ``pretrain_tablet`` is off), held-out pretraining tasks, the fine-tuning pool (training apps,
    phone; the first N tasks are the N-episode subset, so the subsets are nested), ``n_val``
    in-domain validation tasks (the tuning and the convergence check read them, never the tests)
    and the four test splits. The unseen apps belong to a visual family absent from pretraining
    and training (``unseen_shift``, :func:`task.make_world`)."""
    world = make_world(seed, unseen_shift=cfg.unseen_shift)
    rng = np.random.default_rng([seed, 1])
    pre = sample_tasks(world, world.apps("pretrain"), cfg.base_tasks + cfg.n_test, rng)
    half = cfg.base_tasks // 2
    top = max(cfg.sizes)
    pool = sample_tasks(world, world.apps("train"), top + cfg.n_test + cfg.n_val, rng)
    unseen = sample_tasks(world, world.apps("unseen"), cfg.n_test, rng)
    test = pool[top:top + cfg.n_test]
    return {"world": world,
            "pretrain_rows": (_merge([record_episodes(world, pre[:half], "phone"),
                                      record_episodes(world, pre[half:cfg.base_tasks], "tablet")])
                              if cfg.pretrain_tablet else record_episodes(world, pre[:cfg.base_tasks], "phone")),
            "pretrain_test": pre[cfg.base_tasks:], "pool": pool[:top],
            "val_rows": record_episodes(world, pool[top + cfg.n_test:], "phone"),
            "splits": {"in_domain": (test, "phone"), "unseen_app": (unseen, "phone"),
                       "unseen_device": (test, "tablet"), "unseen_app_device": (unseen, "tablet")}}


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


def ft_steps(n_rows: int, cfg) -> int:
    """Optimiser steps of a fine-tuning run on ``n_rows`` reference steps: ``ft_epochs`` passes of
    minibatches of ``batch_states`` states, ceil(ft_epochs * n_rows / batch_states), rounded up to
    an even number (RFT takes ``rft_epochs`` = 2 steps per batch of samples). The same for SFT
    and RFT, so both see each state ``ft_epochs`` times on average at every N."""
    steps = int(np.ceil(cfg.ft_epochs * n_rows / cfg.batch_states))
    return max(cfg.rft_epochs, cfg.rft_epochs * int(np.ceil(steps / cfg.rft_epochs)))


def _val_em(policy, val_rows) -> float:
    return float(offline(_greedy(policy), val_rows)["em"].mean()) if val_rows is not None else float("nan")


def _checkpoints(total: int, cfg) -> set:
    """The optimiser steps after which the validation EM is logged: the end of every epoch."""
    per_epoch = total / cfg.ft_epochs
    return {int(round(per_epoch * e)) for e in range(1, cfg.ft_epochs + 1)}


def fine_tune_sft(base: GUIPolicy, rows: dict, cfg, seed: int, val_rows: dict | None = None,
                  lr: float | None = None) -> tuple[GUIPolicy, dict]:
    """SFT from the base: :func:`ft_steps` Adam steps (learning rate ``sft_lr``) of token
    cross-entropy on minibatches of ``batch_states`` reference steps of the N episodes. Logs the
    offline EM on ``val_rows`` at the end of every epoch (``val_curve``)."""
    policy = copy.deepcopy(base)
    optimiser = torch.optim.Adam(policy.parameters(), lr=cfg.sft_lr if lr is None else lr)
    obs = observe(rows)
    generator = torch.Generator().manual_seed(seed + 101)
    total = ft_steps(len(rows["step"]), cfg)
    marks = _checkpoints(total, cfg)
    losses, curve = [], []
    for step in range(1, total + 1):
        idx = torch.randint(len(rows["step"]), (cfg.batch_states,), generator=generator)
        losses.append(sft_update(policy, optimiser, {k: v[idx] for k, v in obs.items()}, rows["action"][idx.numpy()]))
        if step in marks and val_rows is not None:
            curve.append(_val_em(policy, val_rows))
    return policy, {"steps": total, "final_loss": float(np.mean(losses[-10:])), "val_curve": curve}


def fast_reward(actions: np.ndarray, reference: np.ndarray, box: np.ndarray) -> np.ndarray:
    """:func:`method.action_reward` (R_type + R_param, strict rules) computed on MiniGUI's integer
    actions (n, 3) without the kit's string form: the type must equal the reference's; a click's bin
    centre must lie in the GT box (not enlarged); a scroll needs the same direction; TYPE and OPEN
    need the same word or the same two letters (MiniGUI's words are distinct, so exact text equality
    is argument equality). Equal to ``action_reward(to_kit(actions), gt_kit(...))``, tested."""
    actions, reference = np.asarray(actions), np.asarray(reference)
    r_type = actions[:, 0] == reference[:, 0]
    kind = reference[:, 0]
    x, y = bin_centre(actions[:, 1]), bin_centre(actions[:, 2])
    inside = (np.abs(x - box[:, 0]) <= box[:, 2] / 2 + 1e-12) & (np.abs(y - box[:, 1]) <= box[:, 3] / 2 + 1e-12)
    same_args = np.where(kind == OPEN, (actions[:, 1] == reference[:, 1]) & (actions[:, 2] == reference[:, 2]),
                         actions[:, 1] == reference[:, 1])
    r_param = r_type & np.where(kind == CLICK, inside, np.where(kind == STOP, True, same_args))
    return r_type.astype(float) + r_param.astype(float)


def fine_tune_rft(base: GUIPolicy, rows: dict, cfg, seed: int, val_rows: dict | None = None,
                  lr: float | None = None) -> tuple[GUIPolicy, dict]:
    """Step-level RFT from the base (:func:`method.rft_update`): :func:`ft_steps` / ``rft_epochs``
    iterations, each drawing ``candidate_states`` reference steps of the N episodes at a time
    (reference history), G = ``group_size`` samples per state, reward R_type + R_param, dynamic
    sampling refilling the batch up to ``batch_states`` groups (at most ``max_rounds`` draws),
    ``rft_epochs`` Adam steps (learning rate ``rft_lr``) on the DAPO loss. The same number of
    optimiser steps and of states per step as SFT (when the refill succeeds). Logs the offline EM
    on ``val_rows`` at the end of every epoch (``val_curve``)."""
    policy = copy.deepcopy(base)
    optimiser = torch.optim.Adam(policy.parameters(), lr=cfg.rft_lr if lr is None else lr)
    obs = observe(rows)
    generator = torch.Generator().manual_seed(seed + 202)
    total = ft_steps(len(rows["step"]), cfg)
    marks = _checkpoints(total, cfg)
    log, curve = [], []

    def draw_states():
        idx = torch.randint(len(rows["step"]), (cfg.candidate_states,), generator=generator)
        return {k: v[idx] for k, v in obs.items()}, idx.numpy()

    def reward(states, actions):
        return fast_reward(actions, rows["action"][states], rows["box"][states])

    for it in range(1, total // cfg.rft_epochs + 1):
        log.append(rft_update(policy, optimiser, draw_states, reward, cfg.group_size, cfg.batch_states, generator,
                              max_rounds=cfg.max_rounds, epochs=cfg.rft_epochs, eps_low=cfg.eps_low,
                              eps_high=cfg.eps_high))
        if val_rows is not None and any((it - 1) * cfg.rft_epochs < m <= it * cfg.rft_epochs for m in marks):
            curve.append(_val_em(policy, val_rows))
    return policy, {"steps": total, "mean_reward": float(np.mean([s["mean_reward"] for s in log])),
                    "share_kept": float(np.mean([s["share_kept"] for s in log])),
                    "groups": float(np.mean([s["groups"] for s in log])),
                    "draws": float(np.mean([s["draws"] for s in log])),
                    "final_reward": float(np.mean([s["mean_reward"] for s in log[-5:]])), "val_curve": curve}


def _evaluate_all(policy, data: dict, labels: dict) -> list[dict]:
    rows = []
    for split, (tasks, device) in data["splits"].items():
        rows.append({**labels, "split": split, **evaluate(_greedy(policy), data["world"], tasks, device)})
    return rows


def run_seed(cfg, seed: int, progress=None) -> dict:
    """One seed: data, base and history-free base, SFT and RFT at every N (each with its own
    learning rate, ``sft_lr`` and ``rft_lr``), the kit's evaluation of every policy on every split.
    Returns rows of ``evals``, ``pretrain`` (the bases on held-out pretraining tasks), ``training``
    (fine-tuning logs, with the validation EM at the end of every epoch) and ``seconds``."""
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
        base_val = _val_em(base, data["val_rows"])
        training = []
        jobs = [(n, m) for n in cfg.sizes for m in METHODS]
        for n, method in (progress(jobs, desc=f"seed {seed}", leave=False) if progress else jobs):
            rows = record_episodes(data["world"], data["pool"][:n], "phone")
            tune = fine_tune_sft if method == "sft" else fine_tune_rft
            policy, log = tune(base, rows, cfg, seed, val_rows=data["val_rows"])
            training.append({"seed": seed, "method": method, "n": n, "n_steps": len(rows["step"]),
                             "base_val_em": base_val, **log})
            evals += _evaluate_all(policy, data, {"seed": seed, "method": method, "n": n})
    return {"evals": evals, "pretrain": pre_rows, "training": training,
            "seconds": {"seed": seed, "seconds": time.perf_counter() - start}}


def run_experiment(cfg, progress=None) -> dict:
    """Every seed of ``cfg``, in ``workers`` processes (capped by $REPLIB_MAX_THREADS; a seed's
    numbers do not depend on the process it runs in); DataFrames ``evals``, ``pretrain``,
    ``training``, ``seconds``."""
    workers = min(thread_budget(cfg.workers), len(cfg.seeds))
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = list(pool.map(run_seed, [cfg] * len(cfg.seeds), cfg.seeds))
    else:
        runs = [run_seed(cfg, seed, progress) for seed in cfg.seeds]
    out = {key: pd.DataFrame([row for run in runs for row in run[key]]) for key in ("evals", "pretrain", "training")}
    out["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return out


def tune_seed(cfg, seed: int, grid=LR_GRID, n: int = CLAIM_N) -> list[dict]:
    """The declared tuning protocol on one (pilot) seed: SFT and RFT at N = ``n`` from the same
    base, at every learning rate of the same ``grid``, scored by the final in-domain validation EM
    (never the test splits). Rows (seed, method, lr, val_em, val_curve)."""
    out = []
    with compute_threads(1):
        data = make_data(cfg, seed)
        base = pretrain(data["pretrain_rows"], cfg, seed)
        rows = record_episodes(data["world"], data["pool"][:n], "phone")
        for method in METHODS:
            tune = fine_tune_sft if method == "sft" else fine_tune_rft
            for lr in grid:
                _, log = tune(base, rows, cfg, seed, val_rows=data["val_rows"], lr=lr)
                out.append({"seed": seed, "method": method, "lr": lr, "val_em": log["val_curve"][-1],
                            "val_curve": log["val_curve"]})
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
    on the unseen device at N = 128; p3 = base in-domain minus unseen-app EM; p4a / p4b = the
    validation EM gain over the last quarter of training (the last ``ft_epochs / 4`` epochs; epoch
    6 to 8 in the book profile), SFT / RFT at N = 128; m3 = RFT - SFT final validation EM at
    N = 128. nan where a needed run is missing."""
    nan = float("nan")
    evals, pre = results["evals"], results["pretrain"]
    training = results.get("training", pd.DataFrame())
    values = {}
    for seed in cfg.seeds:
        ev = evals[evals["seed"] == seed]

        def val_curve(method, seed=seed):
            if not len(training):
                return []
            sel = training[(training["seed"] == seed) & (training["method"] == method) & (training["n"] == CLAIM_N)]
            return list(sel["val_curve"].iloc[0]) if len(sel) else []

        def last_quarter_gain(method):
            curve = val_curve(method)
            back = max(1, len(curve) // 4)
            return 100.0 * (curve[-1] - curve[-1 - back]) if len(curve) > back else nan

        def final_val(method):
            curve = val_curve(method)
            return curve[-1] if curve else nan

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
            "p3_unseen_app_shift": 100.0 * (get("base", 0, "in_domain") - get("base", 0, "unseen_app")),
            "p4a_sft_converged": last_quarter_gain("sft"),
            "p4b_rft_converged": last_quarter_gain("rft"),
            "m3_val_em_sft_rft": 100.0 * (final_val("rft") - final_val("sft")),
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
