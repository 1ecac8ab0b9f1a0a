"""RAST-MoE, the experiment: profiles, the agents and heuristics of one seed, their evaluation on
held-out days (seen and unseen regimes), the expert-masking ablation and the claim values of
``chapter.yml``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import normalized_mutual_info_score

from replib.core.runtime import compute_threads, seed_everything

from . import method, task
from .baselines import MLPEncoder

__all__ = [
    "EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "AGENTS", "INTERVALS", "HEURISTICS", "reward_of", "violation_rate",
    "make_agent", "train_agent", "evaluate_policy", "evaluate_heuristic", "run_seed", "run_experiment",
    "claim_values",
]

_COMMON = dict(n_vehicles=40, lr=1e-3, eta=10.0, lam0=1.0, tolerance=0.05)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], iterations=2, n_envs=2, eval_days=2, n_experts=8, top_k=2, day_epochs=24, **_COMMON),
    "book": dict(seeds=[0, 1, 2], iterations=12, n_envs=6, eval_days=10, n_experts=8, top_k=2, day_epochs=48,
                 **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], iterations=150, n_envs=8, eval_days=30, n_experts=16, top_k=4,
                  day_epochs=48, **_COMMON),
}
EXPERIMENT_BOUNDS = {
    "iterations": (1, None), "n_envs": (1, None), "eval_days": (1, None), "n_experts": (2, None), "top_k": (1, None),
    "n_vehicles": (1, None), "day_epochs": (4, None), "lr": (1e-6, 1.0), "eta": (0.0, None), "lam0": (0.0, None),
    "tolerance": (0.0, 1.0),
}

# agent name -> (encoder, reward); reward "adaptive" is Eq. (5) with w_m = w_p = 1 and lambda by Eq. (6),
# "fixed_1_8" the matching:pickup ratio 1:8 without penalty
AGENTS = {
    "mlp": ("mlp", "adaptive"),
    "transformer": ("transformer", "adaptive"),
    "moe": ("moe", "adaptive"),
    "moe_fixed_1_8": ("moe", "fixed_1_8"),
}
INTERVALS = (1, 2, 3, 4, 6)
HEURISTICS = {**{f"interval_{h}": task.fixed_interval_policy(h) for h in INTERVALS},
              "threshold": task.threshold_policy()}


def reward_of(info: task.StepInfo, w_match: float, w_pickup: float, lam: float) -> np.ndarray:
    """The per-zone training reward of one epoch, Eq. (5) (:func:`method.shaped_reward`) on the
    zones' held requests, pickup seconds and abandonments."""
    return method.shaped_reward(info.held_z * task.DT, info.pickup_z, info.abandoned_z, w_match, w_pickup, lam,
                                task.C0)


def violation_rate(episodes) -> float:
    """Share of the requests of a list of episodes (lists of StepInfo) that abandoned."""
    arrived = sum(i.arrived for ep in episodes for i in ep)
    return sum(i.abandoned for ep in episodes for i in ep) / max(arrived, 1)


def _reward_spec(kind: str, cfg) -> dict:
    if kind == "adaptive":
        return dict(w_match=1.0, w_pickup=1.0, lam=cfg.lam0, adaptive=True, eta=cfg.eta, tolerance=cfg.tolerance,
                    reward_of=reward_of)
    # matching:pickup = 1:8, weights normalised to sum 2 like the 1:1 weights
    return dict(w_match=2 / 9, w_pickup=16 / 9, lam=0.0, adaptive=False, eta=0.0, tolerance=cfg.tolerance,
                reward_of=reward_of)


def make_agent(encoder: str, cfg, seed: int, zones: int):
    """The policy network: the MLP baseline, the dense Transformer baseline or the sparse-MoE
    Transformer (``cfg.n_experts`` experts, top ``cfg.top_k``), initial weights from ``seed``."""
    if encoder == "mlp":
        return MLPEncoder(zones, task.N_ZONE_FEATURES, task.N_GLOBAL_FEATURES, seed=seed)
    experts = cfg.n_experts if encoder == "moe" else 0
    return method.RastEncoder(task.N_ZONE_FEATURES, task.N_GLOBAL_FEATURES, n_experts=experts, k=cfg.top_k,
                              seed=seed)


def train_agent(name: str, cfg, seed: int, city: task.CityConfig):
    """Train one agent of :data:`AGENTS` with PPO (same iterations, environments, hyperparameters and
    training days for every agent of the seed). Returns (policy, history rows)."""
    encoder, kind = AGENTS[name]
    policy = make_agent(encoder, cfg, seed, city.zones)
    envs = [task.RideHailingEnv(city) for _ in range(cfg.n_envs)]
    history = method.train_ppo(policy, envs, cfg.iterations, seed=seed, reward=_reward_spec(kind, cfg),
                               violation_fn=violation_rate, ppo=method.PPOConfig(lr=cfg.lr))
    return policy, [dict(seed=seed, agent=name, **row) for row in history]


def _eval_rngs(seed: int, days: int, unseen: bool):
    base = 1_000_000 + 1000 * seed + (500 if unseen else 0)
    return [np.random.default_rng(base + d) for d in range(days)]


def _summary(episodes) -> dict:
    """Mean total reward and matched requests per day; delays pooled over every matched request of
    the days and the abandonment rate over every request (so a day without a match is no NaN)."""
    pooled = task.episode_metrics([info for ep in episodes for info in ep])
    days = len(episodes)
    return {"reward": pooled["reward"] / days, "match_delay": pooled["match_delay"],
            "pickup_delay": pooled["pickup_delay"], "abandon_rate": pooled["abandon_rate"],
            "matched": pooled["matched"] / days}


@torch.no_grad()
def evaluate_policy(policy, city: task.CityConfig, seed: int, days: int, unseen: bool = False):
    """Greedy evaluation (release where sigma(l_z) > 0.5) of ``policy`` on the seed's held-out days.
    Returns (mean metrics of :func:`task.episode_metrics`, the rollout data)."""
    policy.eval()
    envs = [task.RideHailingEnv(city) for _ in range(days)]
    data = method.collect_rollouts(policy, envs, _eval_rngs(seed, days, unseen), lambda info: 0.0, greedy=True)
    policy.train()
    return _summary(data["infos"]), data


def evaluate_heuristic(name: str, city: task.CityConfig, seed: int, days: int, unseen: bool = False):
    """A heuristic of :data:`HEURISTICS` on the same held-out days: (mean metrics, per-regime total
    evaluation reward per day)."""
    env = task.RideHailingEnv(city)
    episodes = [task.run_episode(env, HEURISTICS[name], rng) for rng in _eval_rngs(seed, days, unseen)]
    per_regime = {}
    for ep in episodes:
        for info in ep:
            per_regime[info.regime] = per_regime.get(info.regime, 0.0) + task.evaluation_reward(info) / days
    return _summary(episodes), per_regime


def _routing(data) -> tuple[pd.DataFrame, np.ndarray]:
    """Regime label, top-1 expert per evaluated state, and each expert's usage (share of the states
    where it is among the chosen experts)."""
    regimes = np.array([[info.regime for info in ep] for ep in data["infos"]]).T  # (T, N)
    frame = pd.DataFrame({"regime": regimes.ravel(), "top1": data["top1"].ravel()})
    usage = (data["gates"] > 0).mean(axis=(0, 1))
    return frame, usage


def run_seed(cfg, seed: int) -> dict:
    """Everything of one seed, on one thread: the heuristics, the four PPO agents, their evaluation
    on the in-distribution and unseen days, and the MoE's expert-masking ablation."""
    city = task.CityConfig(n_vehicles=cfg.n_vehicles, epochs=cfg.day_epochs)
    unseen_city = task.CityConfig(n_vehicles=cfg.n_vehicles, epochs=cfg.day_epochs, demand_scale=1.3, unseen=True)
    rows, history, regime_rows = [], [], []
    with compute_threads(1):
        seed_everything(seed)
        for name in HEURISTICS:
            for unseen, where in ((False, city), (True, unseen_city)):
                summary, per_regime = evaluate_heuristic(name, where, seed, cfg.eval_days, unseen)
                rows.append(dict(seed=seed, policy=name, condition="unseen" if unseen else "seen", **summary))
                if not unseen:
                    regime_rows += [dict(seed=seed, policy=name, regime=r, reward=v) for r, v in per_regime.items()]
        routing, masks = None, []
        for name in AGENTS:
            policy, hist = train_agent(name, cfg, seed, city)
            history += hist
            for unseen, where in ((False, city), (True, unseen_city)):
                summary, data = evaluate_policy(policy, where, seed, cfg.eval_days, unseen)
                rows.append(dict(seed=seed, policy=name, condition="unseen" if unseen else "seen", **summary))
                if name == "moe" and not unseen:
                    routing, usage = _routing(data)
                    routing["seed"] = seed
            if name == "moe":
                for which, expert in (("most", int(np.argmax(usage))), ("least", int(np.argmin(usage)))):
                    mask = torch.ones(cfg.n_experts, dtype=torch.bool)
                    mask[expert] = False
                    policy.moe.expert_mask = mask
                    summary, _ = evaluate_policy(policy, city, seed, cfg.eval_days)
                    policy.moe.expert_mask = None
                    masks.append(dict(seed=seed, masked=which, expert=expert, usage=float(usage[expert]), **summary))
    return {"evals": pd.DataFrame(rows), "history": pd.DataFrame(history), "regimes": pd.DataFrame(regime_rows),
            "routing": routing, "masks": pd.DataFrame(masks)}


def run_experiment(cfg, progress=None) -> dict:
    """:func:`run_seed` for every seed of ``cfg``; the per-seed tables concatenated."""
    seeds = progress(cfg.seeds) if progress is not None else cfg.seeds
    parts = [run_seed(cfg, seed) for seed in seeds]
    return {key: pd.concat([p[key] for p in parts], ignore_index=True) for key in parts[0]}


def _best_interval(regimes: pd.DataFrame, regime: str) -> int:
    rows = regimes[(regimes["regime"] == regime) & regimes["policy"].str.startswith("interval_")]
    return int(rows.loc[rows["reward"].idxmax(), "policy"].removeprefix("interval_"))


def _gain(a: float, b: float) -> float:
    """Relative gain of reward a over reward b: (a - b) / |b|."""
    return (a - b) / abs(b)


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``, from the tables of
    :func:`run_experiment` (evaluation rows on "seen" and "unseen" days, per-regime heuristic
    rewards, routing of the MoE, masking ablation). The strongest baseline is, per seed, the one of
    highest total reward on the seen days among PPO-MLP, PPO-Transformer and every heuristic."""
    evals, values = results["evals"], {}
    for seed in cfg.seeds:
        here = evals[evals["seed"] == seed]
        seen = here[here["condition"] == "seen"].set_index("policy")
        unseen = here[here["condition"] == "unseen"].set_index("policy")
        intervals = [f"interval_{h}" for h in INTERVALS]
        best_fixed = seen.loc[intervals, "reward"].max()
        baselines = ["mlp", "transformer", *HEURISTICS]
        strongest = seen.loc[baselines, "reward"].idxmax()
        moe, fixed = seen.loc["moe"], seen.loc["moe_fixed_1_8"]
        regimes = results["regimes"][results["regimes"]["seed"] == seed]
        routing = results["routing"][results["routing"]["seed"] == seed]
        masks = results["masks"][results["masks"]["seed"] == seed].set_index("masked")

        def total_delay(row):
            return row["match_delay"] + row["pickup_delay"]

        values[seed] = {
            "pr1_regime_dependent_optimum": _best_interval(regimes, "peak_corner") - _best_interval(regimes, "offpeak"),
            "p1_ppo_learns": _gain(seen.loc["mlp", "reward"], best_fixed),
            "h1_reward_vs_strongest": _gain(moe["reward"], seen.loc[strongest, "reward"]),
            "h2_match_delay": moe["match_delay"] / seen.loc[strongest, "match_delay"],
            "h3_pickup_delay": moe["pickup_delay"] / seen.loc[strongest, "pickup_delay"],
            "c1_learned_holding": _gain(seen.loc["mlp", "reward"], best_fixed),
            "c2_unseen_regime": min(_gain(unseen.loc["moe", "reward"], unseen.loc[b, "reward"])
                                    for b in ("transformer", "mlp")),
            "c3a_expert_specialisation": normalized_mutual_info_score(routing["regime"], routing["top1"]),
            "c3b_mask_most_used": (moe["reward"] - masks.loc["most", "reward"]) / abs(moe["reward"]),
            "c3c_mask_least_used": (moe["reward"] - masks.loc["least", "reward"]) / abs(moe["reward"]),
            "c4a_adaptive_violation": abs(moe["abandon_rate"] - 0.05),
            "c4b_fixed_ratio_hacks": max(fixed["abandon_rate"] - 0.07, total_delay(fixed) / total_delay(moe) - 1.05),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
