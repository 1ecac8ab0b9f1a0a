"""Helpers of the RAST-MoE theory notebook: the batching effect of
holding (:func:`batch_pickup_distance`, :func:`hold_cost_curve`), the flow of the density-speed
relation (:func:`flow`), parameters against active parameters of a top-k MoE
(:func:`moe_parameter_counts`) and dual ascent on a constrained two-armed bandit
(:func:`dual_ascent_bandit`)."""

from __future__ import annotations

import numpy as np

from .task import match_released, speed_factor

__all__ = ["batch_pickup_distance", "hold_cost_curve", "flow", "moe_parameter_counts", "dual_ascent_bandit"]


def batch_pickup_distance(n_requests: int, n_vehicles: int, rng: np.random.Generator, side: float = 4.0,
                          trials: int = 200) -> float:
    """Mean pickup distance (km, Manhattan) per matched request when ``n_requests`` requests and
    ``n_vehicles`` idle vehicles, uniform on a ``side`` x ``side`` km city, are matched in one batch
    by the minimum-total-distance assignment (no radius)."""
    total, matched = 0.0, 0
    for _ in range(trials):
        req = rng.uniform(0, side, size=(n_requests, 2))
        veh = rng.uniform(0, side, size=(n_vehicles, 2))
        _, _, dist = match_released(req, veh, radius=np.inf)
        total, matched = total + dist.sum(), matched + len(dist)
    return total / max(matched, 1)


def hold_cost_curve(rate_per_epoch: float, n_vehicles: int, holds, rng, dt: float = 60.0,
                    speed_km_s: float = 0.008, trials: int = 200) -> np.ndarray:
    """Mean delay per request (s) of releasing every ``h`` epochs, for each h in ``holds``: the
    matching delay of a request held to the next release (about (h - 1) dt / 2 on average, arrivals
    spread over the h epochs) plus the pickup time of a batch of h x rate requests (at least 1)
    matched against ``n_vehicles`` idle vehicles. A one-zone caricature of the trade-off: vehicles
    do not move or get busy."""
    out = []
    for h in holds:
        batch = max(1, int(round(h * rate_per_epoch)))
        pickup = batch_pickup_distance(batch, n_vehicles, rng, trials=trials) / speed_km_s
        out.append((h - 1) * dt / 2 + pickup)
    return np.array(out)


def flow(busy_fraction: np.ndarray, regime: str = "offpeak") -> np.ndarray:
    """Flow q = rho v / V_FREE of the toy's density-speed relation (task.speed_factor), per unit of
    free-flow speed, against the busy fraction."""
    rho = np.asarray(busy_fraction, dtype=float) + (0.1 if regime != "offpeak" else 0.0)
    return rho * np.array([speed_factor(b, regime) for b in np.atleast_1d(busy_fraction)])


def moe_parameter_counts(d: int, d_ff: int, n_experts: int, k: int) -> dict:
    """Parameters of a sparse MoE feed-forward block (E experts of d -> d_ff -> d with biases, a
    router d -> E without bias, one layer norm) and the parameters active for one state (the router,
    the norm and k experts)."""
    expert = d * d_ff + d_ff + d_ff * d + d
    shared = d * n_experts + 2 * d
    return {"total": n_experts * expert + shared, "active": k * expert + shared, "dense_ffn": expert + 2 * d}


def dual_ascent_bandit(lam0: float, eta: float, iterations: int, reward=(1.0, 0.6), violation=(0.15, 0.0),
                       tolerance: float = 0.05, temperature: float = 0.1, fixed: bool = False) -> dict:
    """A constrained two-armed bandit solved through its Lagrangian: arm 0 is fast (reward 1.0,
    violation probability 0.15), arm 1 safe (0.6, 0). The policy is the softmax best response to the
    Lagrangian rewards r_i - lambda v_i at ``temperature``; after every iteration lambda <-
    max(0, lambda + eta (violation rate - tolerance)) (or stays at ``lam0`` when ``fixed``). Returns
    the per-iteration lambda, probability of the fast arm, violation rate and reward."""
    r, v = np.asarray(reward, dtype=float), np.asarray(violation, dtype=float)
    lam, rows = float(lam0), {"lam": [], "p_fast": [], "violation": [], "reward": []}
    for _ in range(iterations):
        z = (r - lam * v) / temperature
        p = np.exp(z - z.max())
        p /= p.sum()
        rows["lam"].append(lam)
        rows["p_fast"].append(p[0])
        rows["violation"].append(float(p @ v))
        rows["reward"].append(float(p @ r))
        if not fixed:
            lam = max(0.0, lam + eta * (float(p @ v) - tolerance))
    return {key: np.array(value) for key, value in rows.items()}
