"""PrefixRL's method: the prefix length of each RL step and the on-policy update on the completion
only. Knows nothing of the chain task (the caller passes the task's rollout function in)."""

from __future__ import annotations

import numpy as np
import torch

from replib.models.causal_lm import sequence_logprob
from replib.rl import group_advantages, nonzero_advantage_share, policy_gradient_loss

__all__ = [
    "draw_prefix_len",
    "rl_step",
]


def draw_prefix_len(method: str, L: int, rng: np.random.Generator) -> int:
    """h for one RL step, the length of the correct prefix in x + y^x_{1:h} (algorithm step 2):
    PrefixRL draws h ~ U{floor(L/2), ..., L-2} (our choice; the paper does not state it); GRPO,
    SFT-then-RL and the importance-weighted baseline use h = 0."""
    if method == "prefixrl":
        return int(rng.integers(L // 2, L - 1))
    return 0


def rl_step(model, optimiser, problems, prefix_len: int, cfg, generator: torch.Generator | None = None, *,
            rollouts) -> dict:
    """One on-policy update (algorithm step 3): ``group_size`` rollouts per prefixed problem, group
    advantages A = (r - mean_g) / (std_g + 1e-6), loss -mean(A log pi(completion | x, y^x_{1:h}))
    (gradient only through the sampled tokens; prefix = prompt, no importance weights), one
    optimiser step. Returns ``share_nonzero``, ``mean_reward``, ``sampled_tokens`` = n G (L - h),
    ``trained_tokens`` = n G (5 + L) (the tokens of the forward and backward pass of the update) and
    ``loss``.

    ``rollouts`` is the task's sampler and scorer (algorithm steps 2-3 on the task),
    ``rollouts(model, problems, prefix_len, G, L, generator) -> (ids, mask, rewards)`` with rewards
    (n, G) and the mask True exactly at the sampled completion tokens: the caller passes it in (here
    :func:`replib.papers.prefixrl.task.rollouts`), so that the update does not know the task."""
    ids, mask, rewards = rollouts(model, problems, prefix_len, cfg.group_size, cfg.L, generator)
    advantages = group_advantages(rewards).reshape(-1)
    loss = policy_gradient_loss(sequence_logprob(model, ids, mask), advantages)
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    optimiser.step()
    return {
        "share_nonzero": nonzero_advantage_share(rewards),
        "mean_reward": float(rewards.mean()),
        "sampled_tokens": int(rewards.numel() * (cfg.L - prefix_len)),
        "trained_tokens": int(ids.numel()),
        "loss": float(loss.detach()),
    }
