"""The paper's method, knowing nothing of the toy world: the mixture-entropy argument of Sec. 2 and
App. B (with the corrected derivative), DGSA (Sec. 3): the lambda schedule, the DPO loss and the
dual-objective alignment on the two preference sets built by style-prompt switching, and TDSC
(Sec. 4): multi-temperature sampling, the self-critique judge, the preference pairs and the
iteration's two updates.

Contents: :func:`entropy`, :func:`cross_entropy`, :func:`mixture_entropy` (H(p_alpha)),
:func:`mixture_entropy_slope` (dH/dalpha, App. B's Eq. 24; Eq. 22 has the sign flipped),
:func:`endpoint_slopes` (H'(0), H'(1)), :func:`dgsa_weights` (the lambda_s / lambda_e schedule),
:func:`dpo_loss` (L_DPO), :class:`PreferenceSet`, :func:`set_logprobs`, :func:`joint_logprobs` (several sets in one forward pass),
:func:`preference_accuracy` (the share of pairs with Delta > 0), :func:`dgsa_loss`
(L_DGSA = lambda_s L_DPO(T_stab) + lambda_e L_DPO(T_expr)) and :func:`align` (stage 3: AdamW on
L_DGSA against the frozen SFT reference; Standard DPO is the same call with T_expr alone); and TDSC
(Sec. 4): :func:`temperature_ladder` (step 1's temperatures and their curriculum),
:func:`self_critique` (step 2, the judge C(y)), :func:`tdsc_pair` (step 3, y_w and y_l) and
:func:`tdsc_update` (steps 4 and 5: SFT on the accepted set, then DPO on the pairs).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

__all__ = ["entropy", "cross_entropy", "mixture_entropy", "mixture_entropy_slope", "endpoint_slopes",
           "dgsa_weights", "dpo_loss", "PreferenceSet", "set_logprobs", "joint_logprobs", "preference_accuracy", "dgsa_loss", "align", "temperature_ladder",
           "self_critique", "tdsc_pair", "tdsc_update"]


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

    def to(self, device) -> "PreferenceSet":
        """The same pairs on ``device`` (the model's)."""
        return PreferenceSet(*(t.to(device) for t in (self.winner_ids, self.winner_mask, self.loser_ids,
                                                      self.loser_mask)))


def set_logprobs(model, pairs: PreferenceSet) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(y+|x), log pi(y-|x)) of every pair, summed over the scored tokens."""
    return joint_logprobs(model, [pairs])[0]


def joint_logprobs(model, sets: list[PreferenceSet]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`set_logprobs` of several preference sets in one forward pass: every winner and loser
    right-padded (with PAD = 0, masked out) to one width and scored together. Padding comes last and
    attention is causal, so each sequence's log-probability is the one it has alone (one batch of
    4 x 16 sequences instead of four of 16; it measured no faster on this model and is kept because
    its equality with separate scoring is tested)."""
    from replib.models.causal_lm import sequence_logprob  # transformers loads only when needed

    parts = [t for pairs in sets for t in ((pairs.winner_ids, pairs.winner_mask), (pairs.loser_ids, pairs.loser_mask))]
    width = max(ids.shape[1] for ids, _ in parts)
    ids = torch.cat([F.pad(ids, (0, width - ids.shape[1])) for ids, _ in parts])
    mask = torch.cat([F.pad(mask, (0, width - mask.shape[1])) for _, mask in parts])
    scores = sequence_logprob(model, ids, mask).split([p[0].shape[0] for p in parts])
    return [(scores[2 * i], scores[2 * i + 1]) for i in range(len(sets))]


@torch.no_grad()
def preference_accuracy(model, pairs: PreferenceSet, reference: tuple[torch.Tensor, torch.Tensor],
                        chunk: int = 256) -> float:
    """The share of pairs the model ranks right against the reference: Delta_theta > 0, where
    Delta_theta = log pi(y+)/pi_ref(y+) - log pi(y-)/pi_ref(y-) is DPO's implicit reward margin (0 for
    every pair at the start, when pi = pi_ref)."""
    deltas = []
    for start in range(0, len(pairs), chunk):
        rows = torch.arange(start, min(start + chunk, len(pairs)), device=pairs.winner_ids.device)
        logp_w, logp_l = set_logprobs(model, pairs.subset(rows))
        deltas.append((logp_w - reference[0][rows]) - (logp_l - reference[1][rows]))
    return float((torch.cat(deltas) > 0).float().mean())


def dgsa_loss(model, batches: dict[str, tuple[PreferenceSet, torch.Tensor, torch.Tensor]],
              weights: dict[str, float], beta: float) -> torch.Tensor:
    """L_DGSA = lambda_s L_DPO(T_stab) + lambda_e L_DPO(T_expr) (Sec. 3): ``batches`` maps a set's
    name to (pairs, reference log-probs of the winners, of the losers); ``weights`` to its lambda.
    A set of weight 0 is skipped."""
    total = torch.zeros((), device=next(model.parameters()).device)
    used = [name for name, weight in weights.items() if weight > 0]
    if not used:
        return total
    for name, (logp_w, logp_l) in zip(used, joint_logprobs(model, [batches[name][0] for name in used])):
        _, ref_w, ref_l = batches[name]
        total = total + weights[name] * dpo_loss(logp_w, logp_l, ref_w, ref_l, beta)
    return total


def align(sft_model, sets: dict[str, PreferenceSet], weights: dict[str, float], *, steps: int,
          batch_pairs: int, lr: float, beta: float, seed: int, checkpoints=(),
          on_checkpoint=None) -> tuple[torch.nn.Module, np.ndarray]:
    """Stage 3: a copy of ``sft_model`` trained for ``steps`` AdamW steps on :func:`dgsa_loss`
    (``batch_pairs`` pairs drawn per set per step), with the frozen SFT model as pi_ref. DGSA is
    ``weights = {"stab": lambda_s, "expr": lambda_e}``; Standard DPO is ``{"expr": 1}``. After each
    step count in ``checkpoints``, ``on_checkpoint(step, model, reference)`` is called with the model
    in eval mode (the trajectory of the grid: one run gives every step count of the grid).
    Returns the aligned model and the loss of every step."""
    where = next(sft_model.parameters()).device
    sets = {name: pairs.to(where) for name, pairs in sets.items()}
    with torch.no_grad():
        reference = {name: set_logprobs(sft_model, pairs) for name, pairs in sets.items()}
    model = copy.deepcopy(sft_model).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng([seed, 17])
    losses = np.empty(steps)
    for step in range(steps):
        batches = {}
        for name, pairs in sets.items():
            rows = torch.as_tensor(rng.integers(len(pairs), size=batch_pairs), device=where)
            batches[name] = (pairs.subset(rows), reference[name][0][rows], reference[name][1][rows])
        loss = dgsa_loss(model, batches, weights, beta)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses[step] = loss.item()
        if on_checkpoint is not None and step + 1 in checkpoints:
            model.eval()
            on_checkpoint(step + 1, model, reference)
            model.train()
    return model.eval(), losses


# --------------------------------------------------------------------------------------------
# Sec. 4: TDSC (temperature-diverse self-critique)
# --------------------------------------------------------------------------------------------

def temperature_ladder(k: int, iterations: int, fixed: tuple = (0.7, 1.0), t_first: float = 0.9,
                       t_last: float = 1.3) -> tuple[float, ...]:
    """Step 1's temperatures at iteration k = 1..K: T in {0.7, 1.0, T_max^(k)}, each candidate drawn
    from pi^(T)(y_t | .) proportional to pi(y_t | .)^(1/T). The curriculum T_max^(k) rises linearly
    from 0.9 at k = 1 to 1.3 at k = K: App. D.2's 0.8 + 0.1 k for the paper's K = 5, compressed
    for fewer iterations (Table 12's start at 1.3 contradicts App. D.2 and Sec. 5.4)."""
    t_max = t_last if iterations == 1 else t_first + (t_last - t_first) * (k - 1) / (iterations - 1)
    return (*fixed, round(float(t_max), 6))


def self_critique(wer, rep, length, text_length, *, tau_w: float = 0.40, tau_r: float = 0.10,
                  gamma_min: float = 0.5, gamma_max: float = 2.0,
                  frames_per_unit: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """Step 2, the judge, over arrays of candidates: C(y) = 1 iff WER(y) < tau_w and R_rep(y) <
    tau_r and Len(y) in [gamma_min |x|, gamma_max |x|] (Sec. 4). Len counts frames and |x| is the
    text length times ``frames_per_unit`` (the paper does not state the units; proposed). Returns
    (C, the length and repetition filters alone)."""
    expected = frames_per_unit * np.asarray(text_length, float)
    length = np.asarray(length, float)
    shape_ok = (np.asarray(rep) < tau_r) & (length >= gamma_min * expected) & (length <= gamma_max * expected)
    return shape_ok & (np.asarray(wer) < tau_w), shape_ok


def tdsc_pair(wer, accepted, shape_ok, spread) -> tuple[int, int] | None:
    """Step 3 for the candidates of one text: y_w is the accepted candidate (C = 1) with the lowest
    WER, ties broken by the largest ``spread`` (the candidate's own token entropy: proposed); y_l is
    the rejected candidate with the highest WER among those that pass the length and repetition
    filters, so that the pair differs in phonetics, not duration (ties: the first). Returns the
    indices (w, l), or None when the text has no accepted or no such rejected candidate."""
    wer, spread = np.asarray(wer, float), np.asarray(spread, float)
    accepted, shape_ok = np.asarray(accepted, bool), np.asarray(shape_ok, bool)
    winners, losers = np.flatnonzero(accepted), np.flatnonzero(shape_ok & ~accepted)
    if winners.size == 0 or losers.size == 0:
        return None
    w = winners[np.lexsort((-spread[winners], wer[winners]))[0]]
    return int(w), int(losers[np.argmax(wer[losers])])


def tdsc_update(model, draw_accepted, pairs: PreferenceSet | None, *, sft_steps: int, sft_lr: float,
                dpo_steps: int, batch_pairs: int, dpo_lr: float, beta: float, seed: int):
    """Steps 4 and 5 of a TDSC iteration on a copy of ``model``: SFT on the accepted set G,
    -E_{y in G} log pi(y | x) (``draw_accepted(rng)`` draws batches of G for
    :func:`replib.models.causal_lm.train_lm`), then DPO on the (y_w, y_l) pairs (:func:`align`
    with the one set at weight 1) against the model after step 4 as pi_ref (the paper names no
    reference: proposed). Self-Training is this update with ``pairs=None``. Returns the new model."""
    from replib.models.causal_lm import train_lm

    model = copy.deepcopy(model)
    train_lm(model, draw_accepted, steps=sft_steps, lr=sft_lr, warmup=max(1, sft_steps // 10), seed=seed)
    if pairs is not None and len(pairs) and dpo_steps:
        model, _ = align(model, {"tdsc": pairs}, {"tdsc": 1.0}, steps=dpo_steps, batch_pairs=batch_pairs, lr=dpo_lr,
                         beta=beta, seed=seed)
    return model
