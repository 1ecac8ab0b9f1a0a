"""Helpers of PrefixRL's theory notebook: the group signal, the combination lock with exact softmax
policy gradient, and the consistency of J_pre with J on random trees."""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "group_signal_probability",
    "lock_success",
    "softmax_pg_lock",
    "tree_consistency",
    "prefix_only_pg",
    "back_generalization_check",
    "consistency_check",
]


def group_signal_probability(p, G: int):
    """Probability that a group of G independent rollouts with success probability p has a
    non-zero group-relative advantage (neither all failures nor all successes):
    1 - (1 - p)^G - p^G."""
    p = np.asarray(p, dtype=float)
    return 1.0 - (1.0 - p) ** G - p**G


def lock_success(q, H: int, h):
    """Success probability on a combination lock of horizon H with per-step success q, starting
    from the correct prefix state of depth h: q^(H - h)."""
    return np.asarray(q, dtype=float) ** (H - np.asarray(h))


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def _lock_start_distribution(H: int, start: str) -> np.ndarray:
    mu = np.zeros(H)
    if start == "start":
        mu[0] = 1.0
    elif start == "resets":
        mu[:] = 1.0 / H
    elif start == "prefix_only":  # rho(0) = 0: resets to the prefix states 1..H-1 only
        mu[1:] = 1.0 / (H - 1)
    else:
        raise ValueError(f"start must be 'start', 'resets' or 'prefix_only', got {start!r}")
    return mu


def _lock_gradient(theta: np.ndarray, mu: np.ndarray):
    """Exact gradient of J = sum_i mu_i V(i), V(i) = prod_{j >= i} pi_j(correct), for tabular
    softmax logits theta (H, n) with action 0 correct: dJ/dtheta_s = (sum_{i <= s} mu_i V(i))
    (e_0 - pi_s). Returns the gradient, pi and V."""
    pi = _softmax(theta)
    values = np.cumprod(pi[::-1, 0])[::-1]
    weight = np.cumsum(mu * values)
    e0 = np.zeros(theta.shape[1])
    e0[0] = 1.0
    return weight[:, None] * (e0 - pi), pi, values


def softmax_pg_lock(H: int, n_actions: int = 4, start: str = "start", lr: float = 1.0,
                    max_iters: int = 100_000, target: float = 0.9) -> int:
    """Iterations of exact softmax policy gradient on the combination lock until the start state's
    value V(0) reaches ``target`` (``max_iters`` if never).

    States 0..H-1 along the lock, one correct action each (action 0); a wrong action ends the
    episode with reward 0, H correct actions give reward 1. Tabular softmax logits, zero at init
    (per-step success 1/n_actions). The objective is J = E_{s ~ mu} V(s) with mu = the start state
    only (``"start"``, standard RL) or uniform over the states 0..H-1 of the correct trace
    (``"resets"``, prefixes of every length incl. 0); plain gradient ascent with step ``lr``."""
    mu = _lock_start_distribution(H, start)
    theta = np.zeros((H, n_actions))
    for it in range(max_iters + 1):
        grad, _, values = _lock_gradient(theta, mu)
        if values[0] >= target:
            return it
        theta += lr * grad
    return max_iters


def _tree_children(node: int, n_actions: int) -> np.ndarray:
    return n_actions * node + 1 + np.arange(n_actions)


def tree_consistency(depth: int = 4, n_actions: int = 2, p_success: float = 0.25, n_trees: int = 20,
                     rhos: dict | None = None, seed: int = 0) -> pd.DataFrame:
    """Consistency of J_pre with J on random trees, by exhaustive search over deterministic policies.

    Each tree: complete ``n_actions``-ary tree of ``depth`` moves, leaf rewards Bernoulli(p_success)
    (at least one success). The correct trace y* is a path to a uniformly chosen successful leaf;
    s_h is its node at depth h. J(pi) = V^pi(root); J_pre(pi) = sum_h rho(h) V^pi(s_h). Per tree and
    rho: ``max_j_pre`` (1: every prefix state of a correct trace has optimal value 1), ``pi_star``
    (the policy that is optimal from every state maximises J_pre), ``share_optimal_for_j`` (share
    of the J_pre maximisers that are optimal for J: 1 whenever rho(0) > 0)."""
    rng = np.random.default_rng(seed)
    n_internal = (n_actions**depth - 1) // (n_actions - 1)
    n_nodes = (n_actions ** (depth + 1) - 1) // (n_actions - 1)
    if rhos is None:
        rhos = {"J (rho(0) = 1)": np.eye(depth)[0], "uniform": np.full(depth, 1.0 / depth),
                "deep, rho(0) = 0.1": np.r_[0.1, np.zeros(depth - 2), 0.9],
                "rho(0) = 0": np.r_[0.0, np.full(depth - 1, 1.0 / (depth - 1))]}
    policies = np.stack(np.meshgrid(*[np.arange(n_actions)] * n_internal, indexing="ij"), -1).reshape(-1, n_internal)
    rows = []
    for tree in range(n_trees):
        leaf_reward = (rng.random(n_nodes - n_internal) < p_success).astype(float)
        if not leaf_reward.any():
            leaf_reward[rng.integers(len(leaf_reward))] = 1.0
        values = np.zeros((len(policies), n_nodes))  # V^pi(node) for every policy
        values[:, n_internal:] = leaf_reward
        best = np.zeros(n_nodes)  # V*(node)
        best[n_internal:] = leaf_reward
        for node in range(n_internal - 1, -1, -1):
            kids = _tree_children(node, n_actions)
            values[:, node] = values[np.arange(len(policies)), kids[policies[:, node]]]
            best[node] = best[kids].max()
        star_actions = np.array([int(np.argmax(best[_tree_children(k, n_actions)])) for k in range(n_internal)])
        star = int(np.flatnonzero((policies == star_actions).all(axis=1))[0])
        leaf = n_internal + int(rng.choice(np.flatnonzero(leaf_reward)))
        path = [leaf]
        while path[-1] > 0:
            path.append((path[-1] - 1) // n_actions)
        prefix_states = path[::-1][:depth]  # s_0 = root .. s_{depth-1}
        j_optimal = values[:, 0] >= best[0] - 1e-12
        for name, rho in rhos.items():
            j_pre = values[:, prefix_states] @ np.asarray(rho, dtype=float)
            maximisers = j_pre >= j_pre.max() - 1e-12
            rows.append({"tree": tree, "rho": name, "rho0": float(rho[0]), "max_j_pre": float(j_pre.max()),
                         "pi_star": bool(maximisers[star]),
                         "share_optimal_for_j": float(j_optimal[maximisers].mean())})
    return pd.DataFrame(rows)


def prefix_only_pg(H: int = 6, n_actions: int = 4, shared: bool = False, lr: float = 1.0,
                   iters: int = 300) -> dict:
    """Exact policy gradient on the combination lock with rho(0) = 0 (training only from the prefix
    states 1..H-1 of the correct trace), tracking the *start* state.

    Logits at state s: theta_s (tabular, init 0) + w e_correct, with w one logit for "the correct
    action" shared by all states (a log-linear policy with a shared feature, the analogue of one
    rule applied at every step). ``shared=False`` freezes w = 0: the start state's gradient is
    mu_0 V(0) (e_0 - pi_0) = 0, so its policy never changes. ``shared=True`` trains w too
    (dJ/dw = sum_s dJ/dtheta_{s,0}), which raises the start state's success. Returns per iteration
    (0..iters) ``p_start`` = pi_0(correct), ``v_start`` = V(0) and ``v_prefix`` = J_pre."""
    mu = _lock_start_distribution(H, "prefix_only")
    theta = np.zeros((H, n_actions))
    w = 0.0
    p_start, v_start, v_prefix = [], [], []
    for _ in range(iters + 1):
        logits = theta.copy()
        logits[:, 0] += w
        grad, pi, values = _lock_gradient(logits, mu)
        p_start.append(pi[0, 0])
        v_start.append(values[0])
        v_prefix.append(float(mu @ values))
        theta += lr * grad
        if shared:
            w += lr * grad[:, 0].sum()
    return {"p_start": np.array(p_start), "v_start": np.array(v_start), "v_prefix": np.array(v_prefix)}


def back_generalization_check(H: int = 6, n_actions: int = 4, lr: float = 1.0, iters: int = 300) -> pd.DataFrame:
    """:func:`prefix_only_pg` with a tabular policy and with the shared parameter, as one long data
    frame: columns ``policy`` ("tabular" / "shared"), ``iteration``, ``p_start`` (start state's
    probability of the correct action), ``v_start`` (no-prefix success) and ``v_prefix`` (J_pre)."""
    frames = []
    for name, shared in [("tabular", False), ("shared", True)]:
        out = prefix_only_pg(H, n_actions, shared=shared, lr=lr, iters=iters)
        frames.append(pd.DataFrame({"policy": name, "iteration": np.arange(iters + 1), **out}))
    return pd.concat(frames, ignore_index=True)


def consistency_check(depth: int = 4, n_actions: int = 2, n_trees: int = 20, H: int = 6,
                      lock_actions: int = 4, lr: float = 1.0, iters: int = 300, seed: int = 0) -> dict:
    """The theory notebook's two numerical checks.

    ``trees``: :func:`tree_consistency` (J and J_pre share their optimum; every J_pre maximiser is
    J-optimal when rho(0) > 0), summarised per rho (``all_pi_star``, ``min_share_optimal_for_j``,
    ``mean_share_optimal_for_j``, ``min_max_j_pre``) with the per-tree rows in ``tree_rows``;
    ``tabular`` and ``shared``: :func:`prefix_only_pg` without and with the shared parameter."""
    rows = tree_consistency(depth, n_actions, n_trees=n_trees, seed=seed)
    summary = rows.groupby("rho", sort=False).agg(
        rho0=("rho0", "first"), all_pi_star=("pi_star", "all"),
        min_share_optimal_for_j=("share_optimal_for_j", "min"),
        mean_share_optimal_for_j=("share_optimal_for_j", "mean"), min_max_j_pre=("max_j_pre", "min"),
    ).reset_index()
    return {"trees": summary, "tree_rows": rows,
            "tabular": prefix_only_pg(H, lock_actions, shared=False, lr=lr, iters=iters),
            "shared": prefix_only_pg(H, lock_actions, shared=True, lr=lr, iters=iters)}
