"""HyperTrack's method pieces: the unified step and episode metrics of the evaluation kit
(GUIEvalKit), the semi-online history operator psi, the composite binary reward, and the two
fine-tuning updates compared in the scaling study (SFT's token cross-entropy and step-level GRPO with
DAPO's clip-higher, token-level averaging and dynamic sampling).

Everything here works on plain arrays and tensors and knows nothing of the toy: predictions and
ground truth come in the kit's readable form, a dict of equal-length arrays

* ``type``: action type names ("open", "click", "scroll", "type", "stop", ...);
* ``point``: (n, 2) click points normalised to [0, 1] (nan where not a click);
* ``box``: (n, 4) ground-truth boxes (centre x, centre y, width, height); width 0 where none;
* ``direction``: scroll directions; ``text``: typed text or the opened app's name,

so the metrics can be pointed at any agent whose actions are written this way. The policy must
offer ``token_logprobs(obs, actions) -> (logp (n, T), mask (n, T))`` and
``sample(obs, generator) -> actions`` for the updates.
"""

from __future__ import annotations

import numpy as np
import torch

from replib.rl import group_advantages

__all__ = [
    "BOX_ENLARGE", "DISTANCE_THRESHOLD", "TAP_THRESHOLD", "enlarge_box", "inside_box", "text_match",
    "step_match", "episode_metrics", "soeval_history", "action_reward", "dynamic_sampling",
    "dapo_loss", "sft_loss", "sft_update", "rft_update",
]

BOX_ENLARGE = 1.2  # GUIEvalKit: candidate boxes are enlarged by 1.2 in width and height
DISTANCE_THRESHOLD = 0.14  # GUIEvalKit: click correct within 0.14 of the GT point when no box exists
TAP_THRESHOLD = 0.04  # GUIEvalKit: a GT gesture is a tap if touch and lift are within 0.04


def enlarge_box(box, factor: float = BOX_ENLARGE) -> np.ndarray:
    """GUIEvalKit's box enlargement: the same centre, width and height times ``factor``."""
    box = np.asarray(box, dtype=float).copy()
    box[..., 2:4] *= factor
    return box


def inside_box(point, box) -> np.ndarray:
    """Whether each point (n, 2) lies in its box (n, 4: cx, cy, w, h), edges included."""
    point, box = np.asarray(point, dtype=float), np.asarray(box, dtype=float)
    return (np.abs(point[..., 0] - box[..., 0]) <= box[..., 2] / 2 + 1e-12) & \
        (np.abs(point[..., 1] - box[..., 1]) <= box[..., 3] / 2 + 1e-12)


def text_match(pred, gt) -> np.ndarray:
    """GUIEvalKit's text rule for TYPE and OPEN: lower-cased, stripped texts match when either
    contains the other (an empty prediction matches nothing)."""
    out = []
    for p, g in zip(pred, gt):
        p, g = str(p).strip().lower(), str(g).strip().lower()
        out.append(bool(p) and (p in g or g in p))
    return np.array(out, dtype=bool)


def step_match(pred: dict, gt: dict, box_factor: float = BOX_ENLARGE,
               distance: float = DISTANCE_THRESHOLD) -> tuple[np.ndarray, np.ndarray]:
    """The per-step metrics of the unified evaluation: (type match TM, exact match EM).

    TM: the predicted type equals the GT type, where a predicted "type" counts as the GT type when
    the GT is a click or a type (GUIEvalKit's relabelling). EM (step success): the type matches
    and the parameters are right: a click lies in the GT box enlarged ``box_factor`` times (within
    ``distance`` of the GT point when the step has no box); a scroll has the GT direction; a type
    or open passes :func:`text_match`; stop (and any parameter-free type) needs the type only."""
    ptype, gtype = np.asarray(pred["type"], dtype=object), np.asarray(gt["type"], dtype=object)
    relabel = (ptype == "type") & np.isin(gtype, ["click", "type"])
    tm = (ptype == gtype) | relabel
    same = ptype == gtype
    em = np.zeros(len(gtype), dtype=bool)
    click = same & (gtype == "click")
    if click.any():
        point = np.asarray(pred["point"], dtype=float)[click]
        box = np.asarray(gt["box"], dtype=float)[click]
        has_box = box[:, 2] > 0
        in_box = inside_box(point, enlarge_box(box, box_factor))
        near = np.hypot(*(point - box[:, :2]).T) <= distance
        em[click] = np.where(has_box, in_box, near) & np.isfinite(point).all(axis=1)
    scroll = same & (gtype == "scroll")
    em[scroll] = np.asarray(pred["direction"], dtype=object)[scroll] == np.asarray(gt["direction"], dtype=object)[scroll]
    text = same & np.isin(gtype, ["type", "open"])
    em[text] = text_match(np.asarray(pred["text"], dtype=object)[text], np.asarray(gt["text"], dtype=object)[text])
    rest = same & ~np.isin(gtype, ["click", "scroll", "type", "open"])
    em[rest] = True
    return tm, em


def episode_metrics(em, episode) -> dict:
    """The per-episode metrics, from the steps' EM (in step order within each episode): ``success``
    (every step EM) and ``goal_progress`` (the number of consecutive EM steps from the first step
    until the first error, divided by the episode length), one value per episode id, sorted."""
    em, episode = np.asarray(em, dtype=bool), np.asarray(episode)
    ids = np.unique(episode)
    success, progress = np.zeros(len(ids)), np.zeros(len(ids))
    for i, e in enumerate(ids):
        steps = em[episode == e]
        first_error = np.flatnonzero(~steps)
        run = len(steps) if len(first_error) == 0 else int(first_error[0])
        success[i] = float(run == len(steps))
        progress[i] = run / len(steps)
    return {"episode": ids, "success": success, "goal_progress": progress}


def soeval_history(reference, own, own_correct) -> np.ndarray:
    """SOEval's history operator psi for one step: the model's own action where it matched the
    reference (EM), the reference action otherwise,

        psi(o_t, a_t, a_hat_t) = phi(o_t, a_hat_t)  if a_hat_t = a_t,  else phi(o_t, a_t).

    ``reference`` and ``own`` are (n, ...) arrays of actions, ``own_correct`` (n,) booleans."""
    reference, own = np.asarray(reference), np.asarray(own)
    keep = np.asarray(own_correct, dtype=bool).reshape((-1,) + (1,) * (own.ndim - 1))
    return np.where(keep, own, reference)


def action_reward(pred: dict, gt: dict) -> np.ndarray:
    """The RFT reward R = R_type + R_param: R_type = 1{type correct}; R_param = 1{type correct and
    parameters correct}, with the training reward's strict rules: a click inside the GT box (not
    enlarged), the same scroll direction, exactly the same text. Values in {0, 1, 2}."""
    ptype, gtype = np.asarray(pred["type"], dtype=object), np.asarray(gt["type"], dtype=object)
    r_type = ptype == gtype
    r_param = r_type.copy()
    click = r_type & (gtype == "click")
    r_param[click] = inside_box(np.asarray(pred["point"], dtype=float)[click], np.asarray(gt["box"], dtype=float)[click])
    scroll = r_type & (gtype == "scroll")
    r_param[scroll] = np.asarray(pred["direction"], dtype=object)[scroll] == np.asarray(gt["direction"], dtype=object)[scroll]
    text = r_type & np.isin(gtype, ["type", "open"])
    r_param[text] = np.asarray(pred["text"], dtype=object)[text] == np.asarray(gt["text"], dtype=object)[text]
    return r_type.astype(float) + r_param.astype(float)


def dynamic_sampling(rewards) -> np.ndarray:
    """DAPO's dynamic sampling: True for the groups (rows of ``rewards``, (B, G)) whose rewards are
    not all equal; the others have zero group-normalised advantage and are dropped."""
    r = np.asarray(rewards)
    return (r != r[:, :1]).any(axis=1)


def dapo_loss(logp_new: torch.Tensor, logp_old, advantages, token_mask, eps_low: float = 0.2,
              eps_high: float = 0.3) -> torch.Tensor:
    """The DAPO objective J(theta) as a loss (to minimise), per token t of output i:

        -1 / sum_i |o_i| * sum_i sum_t min(rho_it A_i, clip(rho_it, 1 - eps_low, 1 + eps_high) A_i),
        rho_it = pi_theta(o_it | q, o_i,<t) / pi_old(o_it | q, o_i,<t),

    with clip-higher (eps_high > eps_low), token-level averaging over every token of the batch (the
    1 / sum |o_i| factor) and no KL term (beta = 0). ``logp_new``/``logp_old`` and ``token_mask``
    are (n, T); ``advantages`` (n,) is broadcast over each output's tokens."""
    old = torch.as_tensor(logp_old, dtype=logp_new.dtype).detach()
    adv = torch.as_tensor(advantages, dtype=logp_new.dtype).detach()[:, None]
    mask = torch.as_tensor(token_mask, dtype=logp_new.dtype)
    ratio = torch.exp(logp_new - old)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv)
    return -(surrogate * mask).sum() / mask.sum()


def sft_loss(token_logp: torch.Tensor, token_mask) -> torch.Tensor:
    """SFT's token cross-entropy on the target action: -sum(log p(token)) / number of tokens."""
    mask = torch.as_tensor(token_mask, dtype=token_logp.dtype)
    return -(token_logp * mask).sum() / mask.sum()


def sft_update(policy, optimiser, obs: dict, actions) -> float:
    """One SFT step: :func:`sft_loss` of the reference actions, one optimiser step; the loss."""
    logp, mask = policy.token_logprobs(obs, actions)
    loss = sft_loss(logp, mask)
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    optimiser.step()
    return float(loss.detach())


def _take(obs: dict, idx) -> dict:
    return {k: v[idx] for k, v in obs.items()}


def rft_update(policy, optimiser, draw_states, reward_fn, group_size: int, batch_groups: int,
               generator: torch.Generator, max_rounds: int = 8, epochs: int = 2, eps_low: float = 0.2,
               eps_high: float = 0.3) -> dict:
    """One step-level GRPO iteration with DAPO's changes. ``draw_states()`` returns a fresh batch of
    candidate prompts ``(obs, state_ids)``; ``reward_fn(state_ids, actions)`` scores actions.

    1. sample G = ``group_size`` actions per candidate state from pi_old (the current policy);
    2. score them, R_i = R_type + R_param (``reward_fn``);
    3. dynamic sampling: drop the groups whose rewards are all equal and draw new candidates until
       ``batch_groups`` groups are kept (at most ``max_rounds`` draws);
    4. A_i = (R_i - mean_j R_j) / (std_j R_j + eps) within each group;
    5. ``epochs`` optimiser steps on :func:`dapo_loss` (rho = 1 at the first, so clipping acts
       from the second on).

    Returns the iteration's statistics (mean reward of the samples, share of groups kept, groups
    used, draws, loss)."""
    kept_obs, kept_actions, kept_rewards = [], [], []
    n_kept, n_seen, reward_sum, draws = 0, 0, 0.0, 0
    while n_kept < batch_groups and draws < max_rounds:
        obs, states = draw_states()
        draws += 1
        n = len(states)
        rep = torch.arange(n).repeat_interleave(group_size)
        with torch.no_grad():
            actions = policy.sample(_take(obs, rep), generator)
        rewards = np.asarray(reward_fn(np.asarray(states)[rep.numpy()], actions), dtype=float).reshape(n, group_size)
        n_seen += n
        reward_sum += float(rewards.sum())
        keep = np.flatnonzero(dynamic_sampling(rewards))[:batch_groups - n_kept]
        if len(keep) == 0:
            continue
        rows = torch.as_tensor((keep[:, None] * group_size + np.arange(group_size)[None]).reshape(-1))
        kept_obs.append(_take(_take(obs, rep), rows))
        kept_actions.append(actions[rows.numpy()])
        kept_rewards.append(rewards[keep])
        n_kept += len(keep)
    stats = {"mean_reward": reward_sum / (n_seen * group_size), "share_kept": float(n_kept / n_seen) if n_seen else 0.0,
             "groups": n_kept, "draws": draws, "loss": 0.0}
    if n_kept == 0:
        return stats
    sub_obs = {k: torch.cat([o[k] for o in kept_obs]) for k in kept_obs[0]}
    sub_actions = np.concatenate(kept_actions)
    adv = group_advantages(np.concatenate(kept_rewards)).reshape(-1)
    with torch.no_grad():
        old, mask = policy.token_logprobs(sub_obs, sub_actions)
    for _ in range(epochs):
        new, _ = policy.token_logprobs(sub_obs, sub_actions)
        loss = dapo_loss(new, old, adv, mask, eps_low, eps_high)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
    stats["loss"] = float(loss.detach())
    return stats
