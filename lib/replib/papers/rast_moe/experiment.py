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

_COMMON = dict(n_vehicles=40, lr=3e-4, eta=10.0, lam0=1.0, tolerance=0.05)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], iterations=2, n_envs=2, eval_days=2, n_experts=8, top_k=2, day_epochs=24, **_COMMON),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], iterations=24, n_envs=4, eval_days=8, n_experts=8, top_k=2,
                 day_epochs=96, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], iterations=300, n_envs=8, eval_days=30, n_experts=16, top_k=4,
                  day_epochs=96, **_COMMON),
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
INTERVALS = (1, 2, 3, 4, 6, 8)
# the regime-switching oracle: every (off-peak interval, peak interval) pair; the best pair on the
# evaluation days (the pairs with equal intervals are the fixed intervals)
ORACLE_PAIRS = tuple((o, p) for o in (1, 2, 3) for p in INTERVALS if o != p)
HEURISTICS = {**{f"interval_{h}": task.fixed_interval_policy(h) for h in INTERVALS},
              "threshold": task.threshold_policy()}


def reward_of(info: task.StepInfo, w_match: float, w_pickup: float, lam: float) -> np.ndarray:
    """The city-wide training reward of one epoch, Eq. (5) (:func:`method.shaped_reward`) on the
    whole city's held requests, pickup seconds and abandonments, given to every zone (Z,): each
    zone's decision is credited with the city's reward, so a zone that takes vehicles from its
    neighbours pays for their longer pickups and abandonments (the externality a per-zone split
    leaves uncharged)."""
    city = method.shaped_reward(info.held * task.DT, float(info.pickup.sum()), info.abandoned, w_match, w_pickup,
                                lam, task.C0)
    return np.full(len(info.held_z), city)


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
def evaluate_policy(policy, city: task.CityConfig, seed: int, days: int, unseen: bool = False, greedy: bool = False):
    """Evaluation of ``policy`` on the seed's held-out days, its zone-wise actions sampled from Eq. (1)
    as in training (a torch generator seeded from the seed and the condition, so every policy of a
    seed meets the same random stream); ``greedy`` releases where sigma(l_z) > 0.5 instead, which
    turns every release probability below one half into holding for ever. Returns (mean metrics of
    :func:`task.episode_metrics`, the rollout data)."""
    policy.eval()
    envs = [task.RideHailingEnv(city) for _ in range(days)]
    gen = torch.Generator().manual_seed(2_000_000 + 1000 * seed + (500 if unseen else 0))
    data = method.collect_rollouts(policy, envs, _eval_rngs(seed, days, unseen), lambda info: 0.0, greedy=greedy,
                                   torch_gen=gen)
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


def evaluate_oracle(city: task.CityConfig, seed: int, days: int, fixed: dict) -> tuple[str, dict]:
    """The regime-switching oracle: every pair of :data:`ORACLE_PAIRS` (release every o epochs
    off-peak, every p in the peaks; it reads the regime label) on the seed's evaluation days, plus
    the fixed intervals already evaluated in ``fixed`` (name -> metrics) as the pairs (h, h); returns
    the best pair's name ``oracle_o_p`` and its metrics."""
    env = task.RideHailingEnv(city)
    arms = {f"oracle_{h}_{h}": fixed[f"interval_{h}"] for h in INTERVALS}
    for o, p in ORACLE_PAIRS:
        episodes = [task.run_episode(env, task.regime_switching_policy(o, p), rng)
                    for rng in _eval_rngs(seed, days, False)]
        arms[f"oracle_{o}_{p}"] = _summary(episodes)
    best = max(arms, key=lambda name: arms[name]["reward"])
    return best, arms[best]


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
        fixed = {r["policy"]: {k: r[k] for k in ("reward", "match_delay", "pickup_delay", "abandon_rate", "matched")}
                 for r in rows if r["condition"] == "seen" and r["policy"].startswith("interval_")}
        best_pair, oracle = evaluate_oracle(city, seed, cfg.eval_days, fixed)
        rows.append(dict(seed=seed, policy="oracle", condition="seen", pair=best_pair, **oracle))
        routing, masks = None, []
        for name in AGENTS:
            if name == "moe":
                initial = make_agent("moe", cfg, seed, city.zones)
            policy, hist = train_agent(name, cfg, seed, city)
            history += hist
            for unseen, where in ((False, city), (True, unseen_city)):
                summary, data = evaluate_policy(policy, where, seed, cfg.eval_days, unseen)
                rows.append(dict(seed=seed, policy=name, condition="unseen" if unseen else "seen", **summary))
                if name == "moe" and not unseen:
                    routing, usage = _routing(data)
                    routing["seed"] = seed
                    with torch.no_grad():  # the control of c3a: the untrained router on the same states
                        flat = lambda x: torch.as_tensor(x.reshape(-1, *x.shape[2:]))  # noqa: E731
                        routing["top1_initial"] = initial(flat(data["zone"]), flat(data["glob"]))[2]["top1"].numpy()
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


def run_experiment(cfg, progress=None, workers: int = 2) -> dict:
    """:func:`run_seed` for every seed of ``cfg`` (in ``workers`` processes of one thread each when
    there are several seeds); the per-seed tables concatenated in seed order."""
    seeds = list(cfg.seeds)
    if workers > 1 and len(seeds) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(min(workers, len(seeds)), mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(run_seed, cfg, seed) for seed in seeds]
            parts = [f.result() for f in (progress(futures) if progress is not None else futures)]
    else:
        parts = [run_seed(cfg, seed) for seed in (progress(seeds) if progress is not None else seeds)]
    return {key: pd.concat([p[key] for p in parts], ignore_index=True) for key in parts[0]}


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
        baselines = ["mlp", "transformer", *HEURISTICS]  # the oracle reads the regime label: no baseline
        strongest = seen.loc[baselines, "reward"].idxmax()
        moe, fixed = seen.loc["moe"], seen.loc["moe_fixed_1_8"]
        routing = results["routing"][results["routing"]["seed"] == seed]
        masks = results["masks"][results["masks"]["seed"] == seed].set_index("masked")

        def total_delay(row):
            return row["match_delay"] + row["pickup_delay"]

        oracle = seen.loc["oracle"]
        off_h, peak_h = (int(x) for x in oracle["pair"].removeprefix("oracle_").split("_"))
        values[seed] = {
            "pr1_regime_dependent_optimum": peak_h - off_h,
            "p0_headroom_holding": _gain(oracle["reward"], seen.loc["interval_1", "reward"]),
            "p1_some_agent_beats_fixed": max(_gain(seen.loc[a, "reward"], best_fixed) for a in ("mlp", "transformer")),
            "p2_every_agent_learns": min(_gain(seen.loc[a, "reward"], best_fixed) for a in ("mlp", "transformer", "moe")),
            "m1_oracle_over_best_fixed": _gain(oracle["reward"], best_fixed),
            "m2_untrained_router_nmi": normalized_mutual_info_score(routing["regime"], routing["top1_initial"]),
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
