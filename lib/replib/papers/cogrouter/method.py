"""CogRouter's method: CoPO (cognition-aware policy optimisation), steps 2-9 of the algorithm of the
official code (numbered by us, see :mod:`replib.papers.cogrouter`); every function names the
step it implements. Nothing here knows DepthWorld: the policy is any module with the interface of
:class:`replib.papers.cogrouter.task.LevelPolicy` (``action_logprobs``, ``response_terms``,
``response_logprob``) and a rollout is the dict of per-step-sample arrays that
:func:`replib.papers.cogrouter.task.rollout` returns.

    c_l = pi(a | s, l, z_l),   c_hat = minmax(c),   w_l = exp(k c_hat_l) / mean_l' exp(k c_hat_l'),
    A_{t,l} = w_l A_tau                                    (k = 2, steps 5-8).

Contents: :data:`N_LEVELS` (the paper's four cognitive levels); step 2
:func:`pooled_group_advantages`; step 3 :func:`expansion_mask`; step 5 :func:`action_confidences`;
steps 5-7 :func:`copo_weights` (step 6's min-max normalisation in ``_minmax``); steps 2-8
:func:`build_batch`; step 9 :func:`policy_update`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from replib.rl import clipped_surrogate, kl_k3

__all__ = [
    "N_LEVELS",
    "pooled_group_advantages",
    "expansion_mask",
    "action_confidences",
    "copo_weights",
    "build_batch",
    "policy_update",
]

N_LEVELS = 4  # the cognitive levels l = 1..4 (0-based in code)


# --------------------------------------------------------------------------------------------
# Steps 2-3: the trajectory advantage and the steps to expand
# --------------------------------------------------------------------------------------------


def pooled_group_advantages(returns, lengths, eps: float = 1e-6) -> np.ndarray:
    """Step 2: the trajectory advantage, pooled over step-samples as in the official code.

    ``returns`` and ``lengths`` (steps) are (B, G), one group (task) per row. Every step-sample of
    episode tau carries R_tau; mean and unbiased std are taken over all the group's step-samples,
    A_tau = (R_tau - mean) / (std + eps), and A = 0 for a group whose returns are all equal.
    Returns A per episode, (B, G)."""
    r = np.asarray(returns, dtype=np.float64)
    n = np.asarray(lengths, dtype=np.float64)
    total = n.sum(axis=1, keepdims=True)
    mean = (n * r).sum(axis=1, keepdims=True) / total
    var = (n * (r - mean) ** 2).sum(axis=1, keepdims=True) / np.maximum(total - 1, 1)
    adv = (r - mean) / (np.sqrt(var) + eps)
    mixed = (r != r[:, :1]).any(axis=1, keepdims=True)
    return np.where(mixed, adv, 0.0)


def expansion_mask(returns, step_episode, G: int) -> np.ndarray:
    """Step 3: which step-samples get the four level variants: steps of episodes with R > 0 whose
    group (``G`` consecutive episodes) has returns that are not all equal. ``returns`` per episode
    (B * G,), ``step_episode`` the episode of every step-sample; returns a boolean mask over
    step-samples."""
    r = np.asarray(returns, dtype=np.float64).reshape(-1, G)
    mixed = np.repeat((r != r[:, :1]).any(axis=1), G)
    expand_episode = mixed & (r.reshape(-1) > 0)
    return expand_episode[np.asarray(step_episode)]


# --------------------------------------------------------------------------------------------
# Steps 5-7: action confidences and level weights
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def action_confidences(policy: nn.Module, views: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Step 5: c_l = pi(a | view_l, l) for the four levels of every step (single-token action: the
    geometric mean is the probability), current policy, temperature 1. ``views`` (m, 4, view_dim),
    ``actions`` (m,); returns (m, 4) float64."""
    m = len(actions)
    if m == 0:
        return np.zeros((0, N_LEVELS))
    levels = torch.arange(N_LEVELS).repeat(m)
    flat = torch.from_numpy(np.ascontiguousarray(views.reshape(m * N_LEVELS, -1)))
    logp = policy.action_logprobs(levels, flat)
    acts = torch.from_numpy(np.repeat(actions, N_LEVELS))
    return logp.gather(1, acts[:, None])[:, 0].exp().double().numpy().reshape(m, N_LEVELS)


def _minmax(c: np.ndarray) -> np.ndarray:
    """Step 6: min-max normalisation over the last axis; 0.5 everywhere when the range is <= 1e-6."""
    lo, hi = c.min(axis=-1, keepdims=True), c.max(axis=-1, keepdims=True)
    span = hi - lo
    flat = span <= 1e-6
    return np.where(flat, 0.5, (c - lo) / np.where(flat, 1.0, span))


def copo_weights(confidences, k: float = 2.0) -> np.ndarray:
    """Steps 5-7: CoPO's level weights from the action confidences of the four variants (last
    axis): clip c to [1e-6, 1], min-max normalise (all 0.5 when the range is <= 1e-6), then
    w_l = exp(k c_hat_l) / mean_l' exp(k c_hat_l'). Weights have mean 1; whenever the range
    exceeds 1e-6 the max/min ratio is exactly e^k."""
    c = np.clip(np.asarray(confidences, dtype=np.float64), 1e-6, 1.0)
    e = np.exp(k * _minmax(c))
    return e / e.mean(axis=-1, keepdims=True)


# --------------------------------------------------------------------------------------------
# Steps 8-9: the batch and the update
# --------------------------------------------------------------------------------------------


def build_batch(policy: nn.Module, roll: dict, G: int, expand: bool = True, k: float = 2.0,
                expand_levels: bool = True, variant_scale: float = 1.0) -> dict:
    """Steps 2-8: the training batch of one iteration.

    Advantages A_tau by :func:`pooled_group_advantages`. Without ``expand`` (GRPO, fixed levels)
    every sampled response enters with A_tau. With ``expand`` (CoPO) each step selected by
    :func:`expansion_mask` is replaced by its four level variants (level l, view z_l, same state and
    action), with advantage ``variant_scale`` * w_l A_tau, w = :func:`copo_weights` of
    :func:`action_confidences` (the paper: ``variant_scale`` = 1).

    Two controls of ours, each changing one factor (claims c5 and c6): ``variant_scale`` = 1/4 gives
    the four variants of a step together one sample's worth of advantage (sum_l w_l / 4 = 1: the
    step is no longer repeated four times in the mean loss, the level target w / sum(w) unchanged);
    ``expand_levels`` = False keeps the four variants for the action head only and trains the level
    head as GRPO does, on the sampled level with A_tau (one extra sample per expanded step whose
    response is the level token alone). Every sample carries ``level_mask`` and ``action_mask``
    (1 where its level / action token is part of the response), used by :func:`policy_update`.

    Returns tensors ``obs``, ``levels``, ``views``, ``actions``, ``advantages``, ``level_mask``,
    ``action_mask`` and diagnostics (``n_expanded``, ``share_mixed``, and per expanded step
    ``exp_type``, ``exp_weights``, ``exp_obs`` for the fixed-point figure)."""
    returns = roll["returns"]
    adv_ep = pooled_group_advantages(returns.reshape(-1, G), roll["length"].reshape(-1, G)).reshape(-1)
    adv = adv_ep[roll["episode"]]
    m = len(adv)
    mask = expansion_mask(returns, roll["episode"], G) if expand else np.zeros(m, dtype=bool)
    keep = ~mask
    obs = [roll["obs"][keep]]
    levels = [roll["level"][keep]]
    views = [roll["views"][keep, roll["level"][keep]]]
    actions = [roll["action"][keep]]
    advantages = [adv[keep]]
    level_mask = [np.ones(int(keep.sum()))]
    action_mask = [np.ones(int(keep.sum()))]
    weights = np.zeros((0, N_LEVELS))
    idx = np.flatnonzero(mask)
    if idx.size:
        conf = action_confidences(policy, roll["views"][idx], roll["action"][idx])
        weights = copo_weights(conf, k)
        n_var = idx.size * N_LEVELS
        obs.append(np.repeat(roll["obs"][idx], N_LEVELS, axis=0))
        levels.append(np.tile(np.arange(N_LEVELS), idx.size))
        views.append(roll["views"][idx].reshape(n_var, -1))
        actions.append(np.repeat(roll["action"][idx], N_LEVELS))
        advantages.append((variant_scale * weights * adv[idx][:, None]).reshape(-1))
        level_mask.append(np.full(n_var, 1.0 if expand_levels else 0.0))
        action_mask.append(np.ones(n_var))
        if not expand_levels:  # control c5: the level head sees the sampled level only, with A_tau
            sampled = roll["level"][idx]
            obs.append(roll["obs"][idx])
            levels.append(sampled)
            views.append(roll["views"][idx, sampled])
            actions.append(roll["action"][idx])
            advantages.append(adv[idx])
            level_mask.append(np.ones(idx.size))
            action_mask.append(np.zeros(idx.size))
    r = returns.reshape(-1, G)
    return {
        "obs": torch.from_numpy(np.concatenate(obs)),
        "levels": torch.from_numpy(np.concatenate(levels).astype(np.int64)),
        "views": torch.from_numpy(np.ascontiguousarray(np.concatenate(views))),
        "actions": torch.from_numpy(np.concatenate(actions).astype(np.int64)),
        "advantages": torch.from_numpy(np.concatenate(advantages).astype(np.float32)),
        "level_mask": torch.from_numpy(np.concatenate(level_mask).astype(np.float32)),
        "action_mask": torch.from_numpy(np.concatenate(action_mask).astype(np.float32)),
        "n_expanded": int(idx.size),
        "share_mixed": float((r != r[:, :1]).any(axis=1).mean()),
        "exp_type": roll["type"][idx],
        "exp_weights": weights,
        "exp_obs": roll["obs"][idx],
    }


def policy_update(policy: nn.Module, reference: nn.Module, optimiser, batch: dict, *, clip_eps: float = 0.2,
                  kl_coef: float = 0.1, entropy_coef: float = 0.001, grad_clip: float = 1.0) -> dict:
    """Step 9: one update on the whole batch,

        loss = clipped_surrogate(log pi, log pi_old, A) + beta mean k3(pi, pi_ref) - c_H mean entropy,

    log pi = the response log-probability m_l log pi(l | s) + m_a log pi(a | view_l, l) with the
    batch's ``level_mask`` m_l and ``action_mask`` m_a (both 1 for every sample but those of the c5
    control, see :func:`build_batch`; absent masks mean 1), log pi_old = the same values detached
    (one update on fresh samples: ratio 1), k3 on response log-probs against the frozen
    ``reference``, entropy of the heads in the response, gradient norm clipped to ``grad_clip``, one
    optimiser step. Returns the loss parts."""
    obs, levels, views, actions = batch["obs"], batch["levels"], batch["views"], batch["actions"]
    ones = torch.ones(len(actions))
    m_lev, m_act = batch.get("level_mask", ones), batch.get("action_mask", ones)
    lev_lp, act_lp, lev_ent, act_ent = policy.response_terms(obs, levels, views, actions)
    logp = m_lev * lev_lp + m_act * act_lp
    with torch.no_grad():
        ref_lev, ref_act, _, _ = reference.response_terms(obs, levels, views, actions)
        ref_logp = m_lev * ref_lev + m_act * ref_act
    surrogate = clipped_surrogate(logp, logp.detach(), batch["advantages"], clip_eps)
    kl = kl_k3(logp, ref_logp).mean()
    entropy = (m_lev * lev_ent + m_act * act_ent).mean()
    loss = surrogate + kl_coef * kl - entropy_coef * entropy
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip)
    optimiser.step()
    return {"loss": float(loss.detach()), "surrogate": float(surrogate.detach()), "kl": float(kl.detach()),
            "entropy": float(entropy.detach())}
