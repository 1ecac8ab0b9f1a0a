"""Policy-gradient pieces shared by the RL chapters: group-relative advantages (GRPO), the
REINFORCE loss with a group baseline, the clipped PPO/GRPO surrogate and the k3 KL estimator.

Reinforcement learning with verifiable rewards samples a *group* of G responses per prompt, scores
each with a reward r (often 0/1), and weights the log-probability of every response by its
advantage relative to the rest of its group. Everything here works on torch tensors and is
differentiable where it should be:

* :func:`group_advantages` -- A_i = (r_i - mean_g r) / (std_g r + eps), one row per prompt.
* :func:`nonzero_advantage_share` -- the share of groups that carry any learning signal (a group
  whose rewards are all equal has A = 0 for every member and contributes no gradient).
* :func:`policy_gradient_loss` -- -mean(A * log pi(y | x)), REINFORCE with the group mean as
  baseline; for a single on-policy update it has the same gradient as the clipped surrogate at
  ratio 1 (the values differ: -mean(A log pi) vs -mean(A), which is 0 for group advantages).
* :func:`clipped_surrogate` -- the PPO/GRPO objective as a loss,
  -mean(min(rho A, clip(rho, 1 - eps, 1 + eps) A)), rho = pi_new / pi_old.
* :func:`kl_k3` -- the non-negative, unbiased "k3" estimator of KL(pi_new || pi_ref) from samples of
  pi_new, elementwise.

Conventions. ``seq_logprob`` / ``logprob_*`` are log-probabilities of whatever unit the caller
chooses (a whole response, summed over its tokens, or single tokens); advantages must have the same
shape. Optional ``weights`` (same shape, e.g. a token mask) turn every mean into a weighted mean
sum(w x) / sum(w). ``logprob_old`` is treated as a constant (detached). Losses are to be minimised.
Advantages, weights and old or reference log-probabilities may be numpy arrays or CPU tensors: they
are moved to the device of the new log-probabilities (a GPU at a chapter's paper profile).
"""

from __future__ import annotations

import torch

__all__ = [
    "group_advantages",
    "nonzero_advantage_share",
    "policy_gradient_loss",
    "clipped_surrogate",
    "kl_k3",
]


def _weighted_mean(x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    if weights is None:
        return x.mean()
    weights = torch.as_tensor(weights, dtype=x.dtype, device=x.device)
    return (weights * x).sum() / weights.sum()


def group_advantages(rewards, eps: float = 1e-6) -> torch.Tensor:
    """GRPO's group-relative advantage, one group per row of ``rewards`` (B, G):

        A_{b,i} = (r_{b,i} - mean_j r_{b,j}) / (std_j r_{b,j} + eps),

    with the population standard deviation (normalised by G, not G - 1). Every row has mean 0 and
    (up to eps) standard deviation 1; a row of equal rewards gets A = 0 exactly."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    mean = r.mean(dim=-1, keepdim=True)
    std = r.std(dim=-1, keepdim=True, unbiased=False)
    return (r - mean) / (std + eps)


def nonzero_advantage_share(rewards) -> float:
    """Share of groups (rows of ``rewards``, shape (B, G)) whose rewards are not all equal, i.e. that
    give a non-zero group-relative advantage and hence a gradient."""
    r = torch.as_tensor(rewards)
    varied = (r != r[..., :1]).any(dim=-1)
    return float(varied.float().mean())


def policy_gradient_loss(seq_logprob: torch.Tensor, advantages, weights=None) -> torch.Tensor:
    """REINFORCE with the group baseline as a loss: -mean(A * log pi(y | x)).

    ``advantages`` are constants (detached). Its gradient is the on-policy policy gradient
    -mean(A * grad log pi(y | x)); for one update on fresh samples it has the gradient of
    :func:`clipped_surrogate` at ratio 1 (not its value, which is -mean(A))."""
    a = torch.as_tensor(advantages, dtype=seq_logprob.dtype, device=seq_logprob.device).detach()
    return -_weighted_mean(a * seq_logprob, weights)


def clipped_surrogate(logprob_new: torch.Tensor, logprob_old, advantages, clip_eps: float = 0.2,
                      weights=None) -> torch.Tensor:
    """The PPO/GRPO clipped objective as a loss:

        -mean(min(rho A, clip(rho, 1 - eps, 1 + eps) A)),   rho = exp(logprob_new - logprob_old).

    Where the ratio has left the trust region in the direction the advantage favours (rho > 1 + eps
    with A > 0, rho < 1 - eps with A < 0) the term is constant and passes no gradient."""
    old = torch.as_tensor(logprob_old, dtype=logprob_new.dtype, device=logprob_new.device).detach()
    a = torch.as_tensor(advantages, dtype=logprob_new.dtype, device=logprob_new.device).detach()
    ratio = torch.exp(logprob_new - old)
    surrogate = torch.minimum(ratio * a, torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * a)
    return -_weighted_mean(surrogate, weights)


def kl_k3(logprob_new: torch.Tensor, logprob_ref) -> torch.Tensor:
    """The k3 estimator of KL(pi_new || pi_ref), elementwise, for samples drawn from pi_new:

        k3 = exp(l_ref - l_new) - (l_ref - l_new) - 1 >= 0.

    Unbiased because E_{pi_new}[pi_ref / pi_new] = 1, and non-negative because e^x >= 1 + x."""
    log_ratio = torch.as_tensor(logprob_ref, dtype=logprob_new.dtype, device=logprob_new.device) - logprob_new
    return torch.exp(log_ratio) - log_ratio - 1.0
