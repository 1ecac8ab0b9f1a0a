"""The paper's method, knowing nothing of the toy world: the mixture-entropy argument of Sec. 2 and
App. B (with the corrected derivative), and DGSA (Sec. 3): the lambda schedule, the DPO loss and
the dual-objective alignment on the two preference sets built by style-prompt switching.

Contents: :func:`entropy`, :func:`cross_entropy`, :func:`mixture_entropy` (H(p_alpha)),
:func:`mixture_entropy_slope` (dH/dalpha, App. B's Eq. 24; Eq. 22 has the sign flipped),
:func:`endpoint_slopes` (H'(0), H'(1)), :func:`dgsa_weights` (the lambda_s / lambda_e schedule),
:func:`dpo_loss` (L_DPO), :class:`PreferenceSet`, :func:`set_logprobs`, :func:`dgsa_loss`
(L_DGSA = lambda_s L_DPO(T_stab) + lambda_e L_DPO(T_expr)) and :func:`align` (stage 3: AdamW on
L_DGSA against the frozen SFT reference; Standard DPO is the same call with T_expr alone).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

__all__ = ["entropy", "cross_entropy", "mixture_entropy", "mixture_entropy_slope", "endpoint_slopes",
           "dgsa_weights", "dpo_loss", "PreferenceSet", "set_logprobs", "dgsa_loss", "align"]


# --------------------------------------------------------------------------------------------
# Sec. 2 and App. B: the entropy of the training mixture
# --------------------------------------------------------------------------------------------

def entropy(p: np.ndarray) -> float:
    """H(p) = -sum_v p(v) log2 p(v), in bits."""
    p = np.asarray(p, float)
    nz = p > 0
    return float(-(p[nz] * np.log2(p[nz])).sum())


def cross_entropy(p: np.ndarray, q: np.ndarray) -> float:
    """CE(p, q) = -sum_v p(v) log2 q(v), in bits (infinite when p has mass where q has none)."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    nz = p > 0
    if np.any(q[nz] == 0):
        return float("inf")
    return float(-(p[nz] * np.log2(q[nz])).sum())


def mixture_entropy(p_real: np.ndarray, p_syn: np.ndarray, alpha: float) -> float:
    """H(p_alpha) with p_alpha = (1 - alpha) p_real + alpha p_syn (Sec. 2): the entropy of the
    training tokens at synthetic ratio alpha; strictly concave in alpha when p_real != p_syn."""
    return entropy((1 - alpha) * np.asarray(p_real, float) + alpha * np.asarray(p_syn, float))


def mixture_entropy_slope(p_real: np.ndarray, p_syn: np.ndarray, alpha: float) -> float:
    """dH/dalpha = sum_v (p_syn(v) - p_real(v)) log2(1 / p_alpha(v)) (App. B, Eq. 24; the paper's
    Eq. 22 prints the opposite sign). Tokens with p_alpha(v) = 0 contribute nothing."""
    p_real, p_syn = np.asarray(p_real, float), np.asarray(p_syn, float)
    mix = (1 - alpha) * p_real + alpha * p_syn
    nz = mix > 0
    return float(((p_syn[nz] - p_real[nz]) * -np.log2(mix[nz])).sum())


def endpoint_slopes(p_real: np.ndarray, p_syn: np.ndarray) -> tuple[float, float]:
    """(H'(0), H'(1)) = (CE(p_syn, p_real) - H(p_real), H(p_syn) - CE(p_real, p_syn)). By concavity
    an interior peak exists iff H'(0) > 0 and H'(1) < 0; H'(0) is +inf when synthetic tokens are
    absent from the real data (the coverage gap)."""
    return (cross_entropy(p_syn, p_real) - entropy(p_real), entropy(p_syn) - cross_entropy(p_real, p_syn))


# --------------------------------------------------------------------------------------------
# Sec. 3: DGSA
# --------------------------------------------------------------------------------------------

def dgsa_weights(alpha: float, alpha_star: float = 0.5) -> tuple[float, float]:
    """The dynamic schedule: lambda_e = max(0, (alpha - alpha*) / (1 - alpha*)), lambda_s = 1 -
    lambda_e, with the paper's heuristic alpha* = 0.5. Returns (lambda_s, lambda_e)."""
    lambda_e = max(0.0, (alpha - alpha_star) / (1 - alpha_star))
    return 1.0 - lambda_e, lambda_e


def dpo_loss(logp_w: torch.Tensor, logp_l: torch.Tensor, ref_w: torch.Tensor, ref_l: torch.Tensor,
             beta: float) -> torch.Tensor:
    """L_DPO = -E log sigma(beta Delta), Delta = log pi(y+|x)/pi_ref(y+|x) - log pi(y-|x)/pi_ref(y-|x),
    from summed sequence log-probabilities (Sec. 3, stage 3)."""
    delta = (logp_w - ref_w) - (logp_l - ref_l)
    return -F.logsigmoid(beta * delta).mean()


@dataclass
class PreferenceSet:
    """Preference pairs (y+ over y-), each sequence as token ids and the mask of its scored tokens
    (the speech and EOS after the context it is scored in)."""

    winner_ids: torch.Tensor
    winner_mask: torch.Tensor
    loser_ids: torch.Tensor
    loser_mask: torch.Tensor

    def __len__(self) -> int:
        return self.winner_ids.shape[0]

    def subset(self, rows) -> "PreferenceSet":
        return PreferenceSet(self.winner_ids[rows], self.winner_mask[rows], self.loser_ids[rows], self.loser_mask[rows])


def set_logprobs(model, pairs: PreferenceSet) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(y+|x), log pi(y-|x)) of every pair, summed over the scored tokens."""
    from replib.models.causal_lm import sequence_logprob  # transformers loads only when needed

    return (sequence_logprob(model, pairs.winner_ids, pairs.winner_mask),
            sequence_logprob(model, pairs.loser_ids, pairs.loser_mask))


def dgsa_loss(model, batches: dict[str, tuple[PreferenceSet, torch.Tensor, torch.Tensor]],
              weights: dict[str, float], beta: float) -> torch.Tensor:
    """L_DGSA = lambda_s L_DPO(T_stab) + lambda_e L_DPO(T_expr) (Sec. 3): ``batches`` maps a set's
    name to (pairs, reference log-probs of the winners, of the losers); ``weights`` to its lambda.
    A set of weight 0 is skipped."""
    total = torch.zeros(())
    for name, weight in weights.items():
        if weight > 0:
            pairs, ref_w, ref_l = batches[name]
            logp_w, logp_l = set_logprobs(model, pairs)
            total = total + weight * dpo_loss(logp_w, logp_l, ref_w, ref_l, beta)
    return total


def align(sft_model, sets: dict[str, PreferenceSet], weights: dict[str, float], *, steps: int,
          batch_pairs: int, lr: float, beta: float, seed: int) -> tuple[torch.nn.Module, np.ndarray]:
    """Stage 3: a copy of ``sft_model`` trained for ``steps`` AdamW steps on :func:`dgsa_loss`
    (``batch_pairs`` pairs drawn per set per step), with the frozen SFT model as pi_ref. DGSA is
    ``weights = {"stab": lambda_s, "expr": lambda_e}``; Standard DPO is ``{"expr": 1}``. Returns the
    aligned model and the loss of every step."""
    with torch.no_grad():
        reference = {name: set_logprobs(sft_model, pairs) for name, pairs in sets.items()}
    model = copy.deepcopy(sft_model).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng([seed, 17])
    losses = np.empty(steps)
    for step in range(steps):
        batches = {}
        for name, pairs in sets.items():
            rows = torch.as_tensor(rng.integers(len(pairs), size=batch_pairs))
            batches[name] = (pairs.subset(rows), reference[name][0][rows], reference[name][1][rows])
        loss = dgsa_loss(model, batches, weights, beta)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses[step] = loss.item()
    return model.eval(), losses
