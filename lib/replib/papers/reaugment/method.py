"""ReAugment's method: the model zoo and its overfit-prone anchors (stage 0), the variational masked
autoencoder that generates transformed windows (stage A), and the REINFORCE stage that steers it
toward the zoo's reward under a proximity constraint (stage B). Stage C (retraining the forecaster
on the augmented set) is a plain concatenation, done in the experiment.

The method knows nothing of the data sets: a window is a vector w = [x; y] of T = L + H numbers,
and the zoo is any callable that maps look-backs (N, L) to the K members' forecasts (K, N, H).
Where the paper's formula could not be read, the docstring says "(proposed)": the form is our
reconstruction.

Contents:

* Stage 0: :func:`kfold_assignment` (step 1), :func:`zoo_errors`, :func:`zoo_variance` (step 2),
  :func:`select_anchors` (step 3), :func:`fold_gap` (the diagnostic: out-of-fold over in-fold error).
* Stage A: :func:`contiguous_mask`, :func:`gaussian_kl`, :class:`VMAE` (posterior, prior, decoder),
  :func:`vmae_loss`, :func:`train_vmae`, :func:`generate`.
* Stage B: :func:`anchor_distance`, :func:`zoo_reward` (proposed), :func:`reinforce_step`,
  :func:`rl_finetune`.
"""

from __future__ import annotations

import numpy as np
import torch

from replib.models.mlp import MLP
from replib.rl import group_advantages, policy_gradient_loss

__all__ = [
    "kfold_assignment",
    "zoo_errors",
    "zoo_variance",
    "select_anchors",
    "fold_gap",
    "contiguous_mask",
    "gaussian_kl",
    "VMAE",
    "vmae_loss",
    "train_vmae",
    "generate",
    "anchor_distance",
    "zoo_reward",
    "reinforce_step",
    "rl_finetune",
]


# --------------------------------------------------------------------------------------------
# Stage 0: the model zoo and the anchors
# --------------------------------------------------------------------------------------------


def kfold_assignment(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Stage 0, step 1: a random K-fold split of the n training windows, as an int array of fold
    ids (sizes differ by at most one). Zoo member k trains on every window whose fold is not k."""
    folds = np.arange(n) % k
    return folds[rng.permutation(n)]


def zoo_errors(zoo, windows, lookback: int) -> torch.Tensor:
    """Stage 0, step 2: e_k(w_i) = ||f_theta_k(x_i) - y_i||^2 / H for every member k and window i,
    shape (K, N). ``zoo`` maps look-backs (N, L) to forecasts (K, N, H); ``windows`` is (N, L + H)
    (numpy or torch; gradients are never needed: the reward uses forward passes only)."""
    w = torch.as_tensor(windows, dtype=torch.float32)
    with torch.no_grad():
        forecasts = zoo(w[:, :lookback])
    return ((forecasts - w[None, :, lookback:]) ** 2).mean(dim=-1)


def zoo_variance(errors) -> torch.Tensor:
    """Stage 0, step 2: the model-zoo variance v_i = Var_k e_k(w_i), the population variance of the
    K members' errors on each window (errors (K, N) -> (N,))."""
    e = torch.as_tensor(errors)
    return e.var(dim=0, unbiased=False)


def select_anchors(variance, fraction: float = 0.5) -> np.ndarray:
    """Stage 0, step 3: the overfit-prone anchors A, the indices of the ``fraction`` of windows with
    the largest zoo variance (rounded to the nearest count, at least one), highest first."""
    v = np.asarray(variance, dtype=np.float64)
    count = max(1, int(round(fraction * len(v))))
    return np.argsort(-v, kind="stable")[:count]


def fold_gap(errors, folds) -> tuple[np.ndarray, np.ndarray]:
    """The diagnostic behind stage 0 (not a step of the method): per window, the out-of-fold error
    (of the one member that did not train on it) and the mean in-fold error (of the K - 1 members
    that did). ``errors`` (K, N), ``folds`` (N,) fold ids; returns (out_of_fold, in_fold), each (N,)."""
    e = np.asarray(errors, dtype=np.float64)
    folds = np.asarray(folds)
    held_out = np.arange(e.shape[0])[:, None] == folds[None, :]
    out_of_fold = e[held_out.argmax(axis=0), np.arange(e.shape[1])]
    in_fold = (e * ~held_out).sum(axis=0) / (~held_out).sum(axis=0)
    return out_of_fold, in_fold


# --------------------------------------------------------------------------------------------
# Stage A: the variational masked autoencoder
# --------------------------------------------------------------------------------------------


def contiguous_mask(n: int, length: int, ratio: float, generator: torch.Generator) -> torch.Tensor:
    """Stage A's masking (mask shape and ratio not stated in the paper; our choice): one
    contiguous span of round(ratio * length) steps per window, its start uniform over the positions
    where it fits. Returns (n, length) floats, 1 on the masked span."""
    span = max(1, int(round(ratio * length)))
    starts = torch.randint(0, length - span + 1, (n, 1), generator=generator)
    steps = torch.arange(length)[None, :]
    return ((steps >= starts) & (steps < starts + span)).float()


def gaussian_kl(mu_q, logvar_q, mu_p, logvar_p) -> torch.Tensor:
    """KL(q || p) between diagonal Gaussians, summed over the last axis:
    0.5 sum_j [log s_p^2 - log s_q^2 + (s_q^2 + (mu_q - mu_p)^2) / s_p^2 - 1]."""
    return 0.5 * (logvar_p - logvar_q + (logvar_q.exp() + (mu_q - mu_p) ** 2) / logvar_p.exp() - 1.0).sum(-1)


class VMAE(torch.nn.Module):
    """Stage A's generator: a variational masked autoencoder over windows of T steps.

    * posterior q(z | w): an MLP T-h-2d on the full window (mean and log-variance of z);
    * prior p(z | w_vis, m): an MLP 2T-h-2d on the visible window w_vis = w (1 - m) and the mask
      m; its log-variance is clamped to [-6, 2] (our choice, to keep sampling stable);
    * decoder: an MLP (d + 2T)-h-h-T from (z, w_vis, m) to the regenerated full window.

    All three are :class:`replib.models.mlp.MLP` (seeded). Sizes (latent d = 8, hidden h = 64) are
    ours; the paper does not state them. At generation z is drawn from the prior, so that
    one anchor yields many windows centred on it; the prior is the policy of stage B."""

    def __init__(self, length: int, latent: int = 8, hidden: int = 64, seed: int = 0):
        super().__init__()
        self.length, self.latent = length, latent
        self.posterior = MLP([length, hidden, 2 * latent], seed=seed)
        self.prior = MLP([2 * length, hidden, 2 * latent], seed=seed + 1)
        self.decoder = MLP([latent + 2 * length, hidden, hidden, length], seed=seed + 2)

    @staticmethod
    def _split(out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, logvar = out.chunk(2, dim=-1)
        return mu, logvar

    def prior_params(self, w: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, clamped log-variance) of p(z | w_vis, m)."""
        mu, logvar = self._split(self.prior(torch.cat([w * (1 - mask), mask], dim=-1)))
        return mu, logvar.clamp(-6.0, 2.0)

    def posterior_params(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log-variance) of q(z | w)."""
        return self._split(self.posterior(w))

    def decode(self, z: torch.Tensor, w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The regenerated window from z and the visible part of w."""
        return self.decoder(torch.cat([z, w * (1 - mask), mask], dim=-1))


def vmae_loss(model: VMAE, w: torch.Tensor, mask: torch.Tensor, beta: float = 0.1) -> tuple[torch.Tensor, dict]:
    """Stage A's objective (weights not stated in the paper; ours): with z ~ q(z | w) by
    reparameterisation, mean_t (w_hat_t - w_t)^2 + beta KL(q(z | w) || p(z | w_vis, m)) / T,
    averaged over the batch (a conditional-VAE ELBO with a per-step reconstruction term). Returns
    (loss, {"reconstruction", "kl"})."""
    mu_q, logvar_q = model.posterior_params(w)
    mu_p, logvar_p = model.prior_params(w, mask)
    z = mu_q + (0.5 * logvar_q).exp() * torch.randn_like(mu_q)
    reconstruction = ((model.decode(z, w, mask) - w) ** 2).mean(dim=-1)
    kl = gaussian_kl(mu_q, logvar_q, mu_p, logvar_p)
    loss = (reconstruction + beta * kl / model.length).mean()
    return loss, {"reconstruction": float(reconstruction.detach().mean()), "kl": float(kl.detach().mean())}


def train_vmae(model: VMAE, windows, steps: int, lr: float = 2e-3, mask_ratio: float = 0.25, beta: float = 0.1,
               seed: int = 0) -> list[dict]:
    """Stage A: pre-train the VMAE on the training windows D, full batch, Adam, a fresh contiguous
    mask per window and step (:func:`contiguous_mask`). The latent noise and masks come from
    generators seeded with ``seed``. Returns the per-step loss terms."""
    w = torch.as_tensor(np.asarray(windows), dtype=torch.float32)
    generator = torch.Generator().manual_seed(int(seed))
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        for _ in range(steps):
            loss, terms = vmae_loss(model, w, contiguous_mask(len(w), model.length, mask_ratio, generator), beta)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            history.append({"loss": float(loss.detach()), **terms})
    return history


def _sample_prior(model: VMAE, w: torch.Tensor, mask: torch.Tensor, generator: torch.Generator):
    mu, logvar = model.prior_params(w, mask)
    z = mu + (0.5 * logvar).exp() * torch.randn(mu.shape, generator=generator)
    return z, mu, logvar


def _gaussian_logprob(z, mu, logvar) -> torch.Tensor:
    return -0.5 * (((z - mu) ** 2) / logvar.exp() + logvar + np.log(2 * np.pi)).sum(-1)


@torch.no_grad()
def generate(model: VMAE, anchors, n_per_anchor: int, mask_ratio: float = 0.25, seed: int = 0) -> np.ndarray:
    """Stage C's input: ``n_per_anchor`` generated windows per anchor, each from a fresh mask and
    z ~ p(z | w_vis, m), w_tilde = decoder(z, w_vis, m) (the full regenerated window). Returns
    (n_anchors * n_per_anchor, T), anchor by anchor."""
    w = torch.as_tensor(np.asarray(anchors), dtype=torch.float32).repeat_interleave(n_per_anchor, dim=0)
    generator = torch.Generator().manual_seed(int(seed))
    mask = contiguous_mask(len(w), model.length, mask_ratio, generator)
    z, _, _ = _sample_prior(model, w, mask, generator)
    return model.decode(z, w, mask).double().numpy()


# --------------------------------------------------------------------------------------------
# Stage B: REINFORCE toward the zoo's reward
# --------------------------------------------------------------------------------------------


def anchor_distance(generated, anchors) -> torch.Tensor:
    """The proximity term: mean over the T steps of (w_tilde - w)^2, per generated window
    (standardised units)."""
    g, a = torch.as_tensor(generated), torch.as_tensor(anchors)
    return ((g - a) ** 2).mean(dim=-1)


def zoo_reward(zoo, generated, anchors, lookback: int, lam: float, d0: float, eps: float = 1e-4,
               direction: float = 1.0) -> dict:
    """Stage B's reward, (proposed) bounded form (the paper's formula could not be read):

        r(w_tilde) = s log(Var_k e_k(w_tilde) + eps) - lam ||w_tilde - w||^2 / d0,

    with e_k the zoo errors on the generated window (forward passes only: no gradient reaches the
    forecasters), ||.||^2 the mean squared step difference to its anchor w (:func:`anchor_distance`)
    and d0 the mean anchor distance of the generator before RL. The sign s = ``direction``: +1 (the
    later versions: toward regions where the zoo disagrees, i.e. over-fits) or -1 (the first
    version, AutoTSAug: toward samples that reduce the zoo's error variance). Returns ``reward``,
    ``variance`` and ``distance`` (each (N,))."""
    variance = zoo_variance(zoo_errors(zoo, generated, lookback)).double()
    distance = anchor_distance(torch.as_tensor(generated, dtype=torch.float64), torch.as_tensor(anchors, dtype=torch.float64))
    reward = direction * torch.log(variance + eps) - lam * distance / d0
    return {"reward": reward, "variance": variance, "distance": distance}


def reinforce_step(model: VMAE, optimiser, zoo, anchors: torch.Tensor, lookback: int, lam: float, d0: float,
                   mask_ratio: float, generator: torch.Generator, direction: float = 1.0) -> dict:
    """Stage B, one REINFORCE iteration with the VMAE as actor: for each anchor (state: its masked
    window), sample z ~ pi_phi(z | w_vis, m) (the prior network), decode w_tilde, score it with
    :func:`zoo_reward`, and descend -mean(A log pi_phi(z | w_vis, m)) with A = (r - mean r) / std r
    over the batch (``replib.rl.group_advantages`` on one group,
    ``replib.rl.policy_gradient_loss``). Only the prior network's parameters should be in
    ``optimiser`` (the decoder stays fixed, so the generator cannot drift from stage A). Returns the
    batch means of reward, variance and distance."""
    mask = contiguous_mask(len(anchors), model.length, mask_ratio, generator)
    z, mu, logvar = _sample_prior(model, anchors, mask, generator)
    z = z.detach()
    with torch.no_grad():
        generated = model.decode(z, anchors, mask)
    scored = zoo_reward(zoo, generated, anchors, lookback, lam, d0, direction=direction)
    advantages = group_advantages(scored["reward"][None, :].float())[0]
    loss = policy_gradient_loss(_gaussian_logprob(z, mu, logvar), advantages)
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    optimiser.step()
    return {key: float(value.mean()) for key, value in scored.items()}


def rl_finetune(model: VMAE, zoo, anchors, lookback: int, iterations: int, lr: float = 3e-4, lam: float = 0.3,
                samples_per_anchor: int = 4, mask_ratio: float = 0.25, seed: int = 0,
                direction: float = 1.0) -> tuple[list[dict], float]:
    """Stage B: ``iterations`` REINFORCE steps (:func:`reinforce_step`) on the prior network only
    (Adam, ``lr``), each on every anchor repeated ``samples_per_anchor`` times. d0 is measured
    first: the mean anchor distance of the generator before RL on one such batch. ``direction`` is
    the reward's sign (:func:`zoo_reward`). Returns (the per-iteration batch means, d0)."""
    w = torch.as_tensor(np.asarray(anchors), dtype=torch.float32).repeat_interleave(samples_per_anchor, dim=0)
    generator = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        mask = contiguous_mask(len(w), model.length, mask_ratio, generator)
        z, _, _ = _sample_prior(model, w, mask, generator)
        d0 = float(anchor_distance(model.decode(z, w, mask), w).mean())
    optimiser = torch.optim.Adam(model.prior.parameters(), lr=lr)
    history = [reinforce_step(model, optimiser, zoo, w, lookback, lam, d0, mask_ratio, generator, direction)
               for _ in range(iterations)]
    return history, d0
