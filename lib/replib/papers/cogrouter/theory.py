"""Helpers of the CogRouter theory notebook (the analysis is ours, not the paper's): the
range of CoPO's weights, the fixed point of the expected level update and its iteration, and the
comparison of GRPO's and CoPO's credit on one example.

Contents: :func:`weight_bounds`, :func:`level_fixed_point`, :func:`iterate_level_update`,
:func:`grpo_vs_copo_credit_example` (CoPO's weights themselves are :func:`method.copo_weights`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .method import N_LEVELS, copo_weights

__all__ = [
    "weight_bounds",
    "level_fixed_point",
    "iterate_level_update",
    "grpo_vs_copo_credit_example",
]


def weight_bounds(k: float = 2.0) -> tuple[float, float]:
    """The range of a CoPO weight when the confidence range exceeds 1e-6: the smallest weight is
    reached with three variants at c_hat = 1 and one at 0, the largest with one at 1 and three at 0:
    (4 / (1 + 3 e^k), 4 e^k / (3 + e^k)); (0.17, 2.85) for k = 2."""
    ek = float(np.exp(k))
    return 4.0 / (1.0 + 3.0 * ek), 4.0 * ek / (3.0 + ek)


def level_fixed_point(w) -> np.ndarray:
    """The level distribution at which the expected CoPO update A (w - sum(w) pi) vanishes:
    pi = w / sum(w) (last axis)."""
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum(axis=-1, keepdims=True)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def iterate_level_update(c_profile, k: float = 2.0, lr: float = 0.1, iters: int = 200, temperature: float = 1.0,
                         noise_sd: float = 0.0, seed: int = 0) -> np.ndarray:
    """The expected CoPO update of one state's four level logits theta (start 0, uniform), with
    A = 1: theta += lr (w - sum(w) pi), pi = softmax(theta) the training (temperature-1) policy and
    w = :func:`copo_weights` of confidences redrawn every iteration as ``c_profile`` + N(0,
    ``noise_sd``^2) (e.g. routine-like: near-equal c with noise; plan-like: one dominant c).
    Returns pi at the decoding ``temperature``, softmax(theta / T), for iterations 0..iters,
    (iters + 1, 4). Without noise pi (T = 1) converges to :func:`level_fixed_point` of w."""
    rng = np.random.default_rng(seed)
    c_profile = np.asarray(c_profile, dtype=np.float64)
    theta = np.zeros(N_LEVELS)
    out = [_softmax(theta / temperature)]
    for _ in range(iters):
        c = c_profile + noise_sd * rng.standard_normal(N_LEVELS) if noise_sd > 0 else c_profile
        w = copo_weights(c, k)
        theta = theta + lr * (w - w.sum() * _softmax(theta))
        out.append(_softmax(theta / temperature))
    return np.array(out)


def grpo_vs_copo_credit_example(pi_hard=(0.25, 0.25, 0.25, 0.25), pi_routine=(0.25, 0.25, 0.25, 0.25),
                                c_hard=(0.25, 0.25, 0.3, 0.95), c_routine=(0.95, 0.9, 0.9, 0.88), k: float = 2.0,
                                n_steps: int = 12) -> pd.DataFrame:
    """Expected gradient on one state's level logits, GRPO vs CoPO, in an episode of ``n_steps``
    steps with one hard step (definition of the example).

    The episode succeeds iff level 4 is chosen at the hard step (the other ``n_steps`` - 1 routine
    steps always succeed and their levels do not matter). Large-group limit: the success rate is
    p = pi_hard[4], the advantages are A+ = (1 - p) / sigma and A- = -p / sigma with
    sigma = sqrt(p (1 - p)), shared by every step of the episode. Per step type the expected
    update on the level logits is sum over the sampled level l of pi_l A(l) (e_l - pi):

    * GRPO: hard step: pi_4 A+ (e_4 - pi) + sum_{l<4} pi_l A- (e_l - pi) = pi_4 (e_4 - pi) / sigma,
      the true gradient of the success rate; routine steps: 0 (the level does not affect success;
      only sampling noise moves them).
    * CoPO: a successful episode's step is replaced by its four variants with w_l A+, so the
      success term becomes pi_4 A+ (w - sum(w) pi) with w = :func:`copo_weights` of the step's
      confidences (``c_hard`` / ``c_routine``); failures are as in GRPO. At routine steps this is
      p A+ (w - 4 pi), non-zero: CoPO moves routine levels towards w / sum(w).

    Returns rows (method, step: "hard" / "routine", level 1-4, grad, plus the per-episode total
    ``grad_episode`` = grad times the number of such steps)."""
    pi_h, pi_r = np.asarray(pi_hard, float), np.asarray(pi_routine, float)
    p = pi_h[3]
    sigma = np.sqrt(p * (1 - p))
    a_plus, a_minus = (1 - p) / sigma, -p / sigma
    eye = np.eye(N_LEVELS)
    w_h, w_r = copo_weights(c_hard, k), copo_weights(c_routine, k)
    fail_h = sum(pi_h[j] * a_minus * (eye[j] - pi_h) for j in range(3))
    grads = {
        ("grpo", "hard"): p * a_plus * (eye[3] - pi_h) + fail_h,
        ("grpo", "routine"): np.zeros(N_LEVELS),
        ("copo", "hard"): p * a_plus * (w_h - w_h.sum() * pi_h) + fail_h,
        ("copo", "routine"): p * a_plus * (w_r - w_r.sum() * pi_r),
    }
    rows = []
    for (method, step), g in grads.items():
        count = 1 if step == "hard" else n_steps - 1
        rows += [{"method": method, "step": step, "level": j + 1, "grad": float(g[j]),
                  "grad_episode": float(count * g[j])} for j in range(N_LEVELS)]
    return pd.DataFrame(rows)
