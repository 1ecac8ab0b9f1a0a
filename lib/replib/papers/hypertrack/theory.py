"""Helpers of the HyperTrack theory notebook: the share of zero-signal groups that dynamic sampling
drops (:func:`zero_signal_share`), the clipped per-token objective (:func:`clipped_term`), the
one-dimensional click toy that contrasts SFT with RL under a box reward (:func:`click_toy`), and the
three evaluation protocols on a two-parameter agent (:func:`protocol_scores`)."""

from __future__ import annotations

import numpy as np

__all__ = ["zero_signal_share", "clipped_term", "click_toy", "protocol_scores"]


def zero_signal_share(p, group_size: int):
    """Probability that a group of ``group_size`` binary rewards, each 1 with probability ``p``, is
    all equal (all 1 or all 0): p^G + (1 - p)^G. Such groups have zero advantage."""
    p = np.asarray(p, dtype=float)
    return p ** group_size + (1 - p) ** group_size


def clipped_term(ratio, advantage: float, eps_low: float = 0.2, eps_high: float = 0.3):
    """One token's term of the DAPO objective, min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)."""
    ratio = np.asarray(ratio, dtype=float)
    return np.minimum(ratio * advantage, np.clip(ratio, 1 - eps_low, 1 + eps_high) * advantage)


def click_toy(n_bins: int = 20, box=(8, 11), steps: int = 200, lr: float = 0.5, shifts=(0, 1, 2, 3)) -> dict:
    """A click over ``n_bins`` positions, softmax policy from a broad base (a Gaussian bump around
    the box). SFT: exact gradient steps of cross-entropy to the box's centre bin. RL: exact gradient
    steps of the expected box reward J = sum_i pi_i 1{i in box} (the policy gradient, which equals
    likelihood training on the successful clicks weighted by pi_i (1 - J)). Returns both policies
    and their success (mass inside the box) when the box is shifted right by each of ``shifts``
    bins, a new layout where the old centre may lie near or past the edge."""
    bins = np.arange(n_bins)
    lo, hi = box
    centre = (lo + hi) // 2
    inside = ((bins >= lo) & (bins <= hi)).astype(float)
    base = -0.5 * ((bins - centre) / 3.0) ** 2

    def softmax(z):
        z = z - z.max()
        return np.exp(z) / np.exp(z).sum()

    sft, rl = base.copy(), base.copy()
    target = np.eye(n_bins)[centre]
    for _ in range(steps):
        p = softmax(sft)
        sft -= lr * (p - target)  # gradient of -log p_centre
        q = softmax(rl)
        rl += lr * q * (inside - q @ inside)  # gradient of sum_i q_i 1{i in box}
    out = {"bins": bins, "base": softmax(base), "sft": softmax(sft), "rl": softmax(rl), "success": {}}
    for name in ("base", "sft", "rl"):
        out["success"][name] = [float(out[name][(bins >= lo + s) & (bins <= hi + s)].sum()) for s in shifts]
    out["shifts"] = list(shifts)
    return out


def protocol_scores(p_reference: float, p_own: float, length: int) -> dict:
    """The three protocols for an agent whose step accuracy is ``p_reference`` after a reference
    history and ``p_own`` after its own history (the first step has no history: p_reference), on
    episodes of ``length`` steps. Offline EM = p_reference. Online success = p_reference *
    p_own^(length - 1) (every step must be right, each after the agent's own history). SOEval: step t
    sees the agent's own history iff step t - 1 was right, so its accuracy q_t = q_(t-1) p_own +
    (1 - q_(t-1)) p_reference; SOEval EM is the mean of q_t."""
    q = [p_reference]
    for _ in range(length - 1):
        q.append(q[-1] * p_own + (1 - q[-1]) * p_reference)
    return {"offline_em": float(p_reference), "soeval_em": float(np.mean(q)),
            "online_success": float(p_reference * p_own ** (length - 1))}
