"""OLP-Router, theory illustration: single-resource online knapsack (offline LP, bid price with
the offline dual, one-pass projected-SGD dual, first-come greedy)."""

from __future__ import annotations

import numpy as np

from .method import knapsack_price_step

__all__ = [
    "knapsack_instance",
    "knapsack_offline",
    "knapsack_bid_price",
    "knapsack_sgd",
    "knapsack_greedy",
    "knapsack_compare",
]


def knapsack_instance(rng: np.random.Generator, n: int, cap_ratio: float = 0.25):
    """n i.i.d. items, reward r ~ U(0, 1), size a ~ U(0.5, 1.5), capacity b = cap_ratio * n."""
    r = rng.uniform(0.0, 1.0, size=n)
    a = rng.uniform(0.5, 1.5, size=n)
    return r, a, cap_ratio * n


def knapsack_offline(r, a, b: float):
    """Offline (hindsight) LP max r^T x s.t. a^T x <= b, 0 <= x <= 1: greedy by r/a, last item split.

    Returns ``(value, p_star)`` with p_star the optimal dual price (the ratio r/a of the critical
    item; 0 when the capacity does not bind).
    """
    r = np.asarray(r, dtype=float)
    a = np.asarray(a, dtype=float)
    order = np.argsort(-r / a, kind="stable")
    ca = np.cumsum(a[order])
    full = int(np.searchsorted(ca, b, side="right"))
    value = float(r[order[:full]].sum())
    if full >= r.size:
        return value, 0.0
    used = ca[full - 1] if full > 0 else 0.0
    crit = order[full]
    value += float(r[crit] * (b - used) / a[crit])
    return value, float(r[crit] / a[crit])


def knapsack_bid_price(r, a, b: float, p: float) -> float:
    """Online bid-price policy with a fixed price p: accept item t iff r_t > p a_t and it fits."""
    rem = float(b)
    total = 0.0
    for rt, at in zip(np.asarray(r).tolist(), np.asarray(a).tolist()):
        if rt > p * at and at <= rem:
            rem -= at
            total += rt
    return total


def knapsack_sgd(r, a, b: float, eta: float | None = None):
    """One-pass projected-SGD dual (Li, Sun & Ye): x_t = 1{r_t > p_t a_t} (if it fits),
    p_{t+1} = max(0, p_t + eta (a_t x_t - d)) with d = b / n and eta = 1 / sqrt(n) by default.

    Returns ``(value, p_traj)`` with the price before each item and after the last (n + 1 values).
    """
    r = np.asarray(r, dtype=float)
    a = np.asarray(a, dtype=float)
    n = r.size
    eta = 1.0 / np.sqrt(n) if eta is None else float(eta)
    d = b / n
    p = 0.0
    rem = float(b)
    total = 0.0
    traj = [p]
    for rt, at in zip(r.tolist(), a.tolist()):
        x = rt > p * at and at <= rem
        if x:
            rem -= at
            total += rt
        p = knapsack_price_step(p, at, x, d, eta)
        traj.append(p)
    return total, np.asarray(traj)


def knapsack_greedy(r, a, b: float) -> float:
    """First-come greedy: accept every item that still fits."""
    return knapsack_bid_price(r, a, b, p=-np.inf)


def knapsack_compare(rng: np.random.Generator, n: int, cap_ratio: float = 0.25) -> dict:
    """Total reward of offline LP, offline-dual bid price, SGD dual and greedy on one instance."""
    r, a, b = knapsack_instance(rng, n, cap_ratio)
    lp, p_star = knapsack_offline(r, a, b)
    sgd, traj = knapsack_sgd(r, a, b)
    return {
        "n": n,
        "offline_lp": lp,
        "p_star": p_star,
        "bid_price": knapsack_bid_price(r, a, b, p_star),
        "sgd_dual": sgd,
        "greedy": knapsack_greedy(r, a, b),
        "p_traj": traj,
    }
