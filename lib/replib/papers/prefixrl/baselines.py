"""PrefixRL's off-policy baseline: RL that imports the correct traces into its groups as
importance-weighted targets (the paper's "standard off-policy methods supervise against off-policy
data", abstract; the LUFFY-style form is our choice). GRPO is PrefixRL with h = 0 and SFT-then-RL
is :func:`replib.papers.prefixrl.experiment.sft` followed by GRPO, so neither needs code here."""

from __future__ import annotations

import numpy as np
import torch

from replib.models.causal_lm import sequence_logprob, token_logprobs
from replib.rl import group_advantages, nonzero_advantage_share, policy_gradient_loss

from .task import PROMPT_LEN, correct_traces, rollouts, sequences

__all__ = [
    "truncated_importance_weights",
    "iw_offpolicy_step",
]


def truncated_importance_weights(logprob_new: torch.Tensor, behaviour_prob, clip: float) -> torch.Tensor:
    """Per-token importance weights of an off-policy token, truncated (as in V-trace's rho-bar):
    w_t = min(pi_theta(y_t | x, y_<t) / mu(y_t | x, y_<t), clip), detached. ``logprob_new`` is
    log pi_theta, ``behaviour_prob`` the behaviour policy's probability mu of the same tokens."""
    mu = torch.as_tensor(behaviour_prob, dtype=logprob_new.dtype, device=logprob_new.device)
    ratio = torch.exp(logprob_new.detach()) / mu
    return ratio.clamp(max=clip)


def iw_offpolicy_step(model, optimiser, problems, behaviour_probs, cfg, generator: torch.Generator | None = None) -> dict:
    """One update of mixed-policy group RL (LUFFY-style): each group holds G - 1 on-policy rollouts
    of the unprefixed problem and the problem's correct off-policy trace (reward 1); A is the
    group-relative advantage over all G; the loss is

        -mean_i A_i * sum_t w_{i,t} log pi_theta(y_{i,t} | x, y_{i,<t}),

    with w = 1 for on-policy tokens and the truncated importance weight
    :func:`truncated_importance_weights` (clip ``cfg.iw_clip``) for the trace's tokens, whose
    behaviour policy mu is the model that produced them (``behaviour_probs`` (n, L) are its
    probabilities of the trace's tokens; the trace is that of strategy ``cfg.trace_strategy``, 0 when
    absent). Its gradient is the
    importance-weighted policy gradient A w grad log pi. One optimiser step. Returns the keys of
    :func:`replib.papers.prefixrl.method.rl_step`; ``sampled_tokens`` = n (G - 1) L counts only the
    on-policy samples (the traces were paid for by rejection sampling), ``trained_tokens`` the
    rollouts' and the traces' tokens."""
    G, L = cfg.group_size, cfg.L
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    n = len(problems)
    ids, mask, on_rewards = rollouts(model, problems, 0, G - 1, L, generator)
    rewards = torch.cat([on_rewards, torch.ones(n, 1, device=on_rewards.device)], dim=1)
    advantages = group_advantages(rewards)
    on_logprob = sequence_logprob(model, ids, mask).reshape(n, G - 1)
    traces = torch.as_tensor(sequences(problems, correct_traces(problems, L, getattr(cfg, "trace_strategy", 0))),
                             device=ids.device)
    trace_logprobs = token_logprobs(model, traces)
    trace_logprobs = trace_logprobs[:, PROMPT_LEN - 1:]
    weights = truncated_importance_weights(trace_logprobs, behaviour_probs, cfg.iw_clip)
    off_logprob = (weights * trace_logprobs).sum(dim=1, keepdim=True)
    loss = policy_gradient_loss(torch.cat([on_logprob, off_logprob], dim=1), advantages)
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    optimiser.step()
    return {
        "share_nonzero": nonzero_advantage_share(rewards),
        "mean_reward": float(on_rewards.mean()),
        "sampled_tokens": int(on_rewards.numel() * L),
        "trained_tokens": int(ids.numel() + traces.numel()),
        "loss": float(loss.detach()),
    }
