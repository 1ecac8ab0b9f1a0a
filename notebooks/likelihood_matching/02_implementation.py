# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Likelihood matching for diffusion: implementation
#
# **Learning goals.** After this notebook you can
#
# 1. read each piece of `replib.papers.likelihood_matching` (its `method` and `task` modules) beside
#    the equation it implements: the toy data and its analytic score and Hessian, the forward
#    transitions, the Tweedie moments, the likelihood-matching loss, the covariance
#    parameterisation, the sampler and the metrics;
# 2. check each piece on inputs small enough to verify by hand;
# 3. train a small model with each objective and sample from it.
#
# The paper's method section could not be read: what follows is the reconstruction of the chapter's
# theory notebook, with our choices marked. The *score* is the gradient $\nabla \log p_t$ of the
# log-density of the data noised to time $t$, the *Hessian* its matrix of second derivatives
# $\nabla^2 \log p_t$; second-order Tweedie formulas turn the two into the mean and covariance of a
# reverse (denoising) step.

# %%
# Colab set-up: installs the book's package, replib, from its repository, at the book's version.
# Anywhere else (a local clone, the book build, CI) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import json
    import subprocess
    import time
    from importlib.metadata import distribution

    package = "replib @ git+https://github.com/icml2026-replications/replib-book.git@main"
    print("installing replib from the book's repository at main ...", end=" ", flush=True)
    started = time.time()
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package],
                         capture_output=True, text=True)
    if pip.returncode != 0:  # show pip's own words, then stop
        print(pip.stdout, pip.stderr)
        raise RuntimeError("installing replib failed: pip's output is printed above")
    origin = json.loads(distribution("replib").read_text("direct_url.json") or "{}")
    commit = origin.get("vcs_info", {}).get("commit_id", "unknown")[:7]
    print(f"done in {time.time() - started:.0f} s: replib {distribution('replib').version}, commit {commit}")

# %% tags=["parameters"]
profile = None  # "smoke", "book" or "paper"; None reads $REPLIB_PROFILE, else "book"

# %%
import numpy as np
import torch

from replib import core
from replib.core.runtime import compute_threads
from replib.papers.likelihood_matching import exercises, experiment, method, task

core.set_style()
profile = core.resolve_profile(profile)
mix = task.ring_mixture()

# %% [markdown]
# ## 1. The toy data and its exact score and Hessian
#
# Six Gaussian components on a ring of radius 2, each elongated along the ring (variances 0.3 and
# 0.01). Under the forward process $p_t$ is again a mixture,
# $\sum_i \pi_i \mathcal N(\sqrt{\bar\alpha_t}\mu_i, \bar\alpha_t \Sigma_i + (1 - \bar\alpha_t) I)$, so
# $\nabla \log p_t$ and $\nabla^2 \log p_t$ are analytic: the learned ones can be checked.

# %%
core.show_source(task.hessian_pt)

# %%
x = np.array([[1.3, -0.4], [0.2, 2.1]])
h = 1e-5
for t in (0.05, 0.5):
    score = task.score_pt(mix, x, t)
    numeric = np.stack([(task.log_pt(mix, x + h * e, t) - task.log_pt(mix, x - h * e, t)) / (2 * h)
                        for e in np.eye(2)], axis=-1)
    assert np.allclose(score, numeric, atol=1e-5)  # the score is the gradient of log p_t
    H = task.hessian_pt(mix, x, t)
    numeric_H = np.stack([(task.score_pt(mix, x + h * e, t) - task.score_pt(mix, x - h * e, t)) / (2 * h)
                          for e in np.eye(2)], axis=-1)
    assert np.allclose(H, numeric_H, atol=1e-4) and np.allclose(H, np.swapaxes(H, 1, 2))

# %% [markdown]
# ## 2. Forward transitions and the Tweedie moments
#
# $X_t \mid X_s \sim \mathcal N(a X_s, \sigma^2 I)$; the reverse moments are
# $\mathbb E[X_s \mid x_t] = (x_t + \sigma^2 \nabla \log p_t)/a$ and
# $\mathrm{Cov}[X_s \mid x_t] = \frac{\sigma^2}{a^2}(I + \sigma^2 \nabla^2 \log p_t)$.

# %%
core.show_source(method.tweedie_moments)

# %%
a, sigma2 = method.transition(0.5, 0.4)
assert np.isclose(a**2 + sigma2, 1.0)  # variance preserving
S = np.diag([0.3, 0.01])  # Gaussian data: the reverse transition is Gaussian with these moments
ab = method.alpha_bar(0.5)
P = np.linalg.inv(ab * S + (1 - ab) * np.eye(2))
xt = np.array([[0.4, -0.2]])
mean, cov = method.tweedie_moments(xt, -xt @ P, -P[None], a, sigma2)
ab_s = method.alpha_bar(0.4)
joint_cov = ab_s * S + (1 - ab_s) * np.eye(2)  # Cov[X_s], and Cov[X_s, X_t] = a Cov[X_s]
gain = a * joint_cov @ np.linalg.inv(a**2 * joint_cov + sigma2 * np.eye(2))
assert np.allclose(mean[0], gain @ xt[0]) and np.allclose(cov[0], joint_cov - gain @ (a * joint_cov))

# %% [markdown]
# ## 3. The likelihood-matching loss
#
# $L^{RB} = \tfrac12 \log\det C + \tfrac12 \sigma^2 (s - s_0)^\top C^{-1}(s - s_0) + \tfrac12 \kappa\,\mathrm{tr}(C^{-1})$
# with the denoising target $s_0$ and $\kappa = 1 - \sigma^2/(1 - \bar\alpha_t)$. Averaged over $x_0$ given
# $x_t$, it is smallest at the true score and $C^\star = I + \sigma^2 \nabla^2 \log p_t$: plugging in the
# exact quantities beats perturbed ones.

# %%
core.show_source(method.quasi_likelihood_rb)

# %%
rng = np.random.default_rng(0)
t, s = 0.3, 0.25
a, sigma2 = method.transition(t, s)
ab = method.alpha_bar(t)
x0 = task.sample_mixture(mix, 20000, rng)
xt = np.sqrt(ab) * x0 + np.sqrt(1 - ab) * rng.standard_normal(x0.shape)
s0 = -(xt - np.sqrt(ab) * x0) / (1 - ab)
kappa = 1 - sigma2 / (1 - ab)
score, H = task.score_pt(mix, xt, t), task.hessian_pt(mix, xt, t)
C_true = np.eye(2) + sigma2 * H


def mean_loss(score, C):
    return float(method.quasi_likelihood_rb(score, C, s0, sigma2, kappa).mean())


best = mean_loss(score, C_true)
assert best < mean_loss(score + 0.3, C_true)  # a wrong score costs
assert best < mean_loss(score, 1.5 * C_true) and best < mean_loss(score, np.broadcast_to(np.eye(2), C_true.shape))

# %% [markdown]
# ## 4. The covariance parameterisation
#
# $H_\theta = -\frac{I}{1 - \bar\alpha_t} + \frac{\bar\alpha_t}{(1 - \bar\alpha_t)^2}(\mathrm{diag}(e^{\lambda}) + L L^\top)$, so
# $C_\theta = D + W W^\top$ with $D = \kappa I + c\,\mathrm{diag}(e^\lambda)$, $W = \sqrt c L$,
# $c = \sigma^2 \bar\alpha_t / (1 - \bar\alpha_t)^2$ (our proposal, after the paper's "low-rank Hessian with
# Sherman-Morrison-Woodbury"). $C_\theta$ is positive definite whatever the network outputs.

# %%
core.show_source(method.covariance_factors)

# %%
lam, L = torch.zeros(3, 2, dtype=torch.float64), torch.ones(3, 2, 1, dtype=torch.float64)
tt = torch.full((3,), 0.3, dtype=torch.float64)
D, W, kappa_t = method.covariance_factors(lam, L, tt, torch.full_like(tt, 0.25))
C = torch.diag_embed(D) + W @ W.transpose(-1, -2)
assert torch.all(torch.linalg.eigvalsh(C) > 0)

# %% [markdown]
# ## 5. Training, sampling and the metrics
#
# The network has two trunks of the same shape (3 x 64, SiLU): one for the score, one for the
# covariance's diagonal and low-rank factor, so the covariance terms of the loss cannot push on the
# score's parameters. LM trains with *decoupled gradients*: the score receives the gradient of the
# identity-weighted term $\tfrac12 \bar w(t) \lVert \epsilon_\theta - \epsilon \rVert^2$ and the
# covariance trunk the rest of $L^{RB}$ with the score's residual held fixed (same loss value, same
# minimisers). The weight $\bar w(t)$ is $\sigma^2_{t|s} / (1 - \bar\alpha_t)$ averaged over the training
# step sizes, its Rao-Blackwellisation over the step (the step is drawn independently of the data,
# so the expected loss is unchanged and its variance drops). Each trunk's gradient is clipped to norm 1.
# With separate trunks, LM's score network is exactly the network that B3 (LM with $C = I$, mean
# only) would train, so B3 is LM's own score with the reverse variance $\sigma^2/a^2$; B4 (a diagonal
# covariance) trains a second covariance trunk on the same score in the same loop. The DSM network
# (denoising score matching, the usual diffusion loss) is shared by the two baselines B1 and B2 that
# sample with DDPM's fixed isotropic reverse variances. The sampler draws each reverse step from the
# method's own Gaussian. The metrics
# are the sliced Wasserstein-2 distance to fresh target samples (the points are projected on many
# random directions, and the 1-D optimal-transport distances of the projections, sorted point
# against sorted point, are averaged) and the NLL bound (an upper bound on the negative
# log-likelihood of held-out data, in nats per dimension, built from the sampler's reverse
# transitions).

# %%
core.show_source(method.rb_score_weight)

# %%
tq = torch.tensor([0.1, 0.3], dtype=torch.float64)
per_step = torch.stack([method.transition(tq, (tq - 1.0 / n).clamp_min(0.0))[1] / (1 - method.alpha_bar(tq))
                        for n in (5, 10, 20, 50, 200)])
print("per-step weights at t = 0.1, 0.3:", per_step.T.numpy().round(3))
print("Rao-Blackwellised weight:", method.rb_score_weight(tq, (5, 10, 20, 50, 200)).numpy().round(3))

# %%
core.show_source(method.sample)

# %%
exact = method.exact_reverse_fn(lambda x, t: task.score_pt(mix, np.asarray(x), t),
                                lambda x, t: task.hessian_pt(mix, np.asarray(x), t))
target = task.sample_mixture(mix, 2000, np.random.default_rng(1))
oracle = method.sample(exact, 2000, n_steps=50, seed=0)
assert task.sliced_w2(target, target) == 0.0
assert task.sliced_w2(oracle, target) < 0.1 < task.sliced_w2(target + 0.5, target)  # exact score and Hessian: close
steps = {"smoke": 100, "book": 600, "paper": 1500}[profile]
with compute_threads(1):
    for objective in ["lm_sg", "dsm"]:
        net, info = experiment.train_model(objective, seed=0, steps=steps)
        name = "LM" if objective == "lm_sg" else "B2"
        X = method.sample(method.model_reverse_fn(net, name), 2000, n_steps=10, seed=0)
        print(f"{objective}: {steps} steps in {info['seconds']:.1f} s; {name} with 10 sampling steps: "
              f"SW2 {task.sliced_w2(X, target):.3f} (exact score and Hessian, 50 steps: {task.sliced_w2(oracle, target):.3f})")

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write the second-order Tweedie moments for one point: `tweedie_moments(x, score,
# hess, a, sigma2)` returning the mean and covariance of $X_s$ given $x_t$.

# %% tags=["solution", "hide-input"]
def tweedie_moments(x, score, hess, a, sigma2):
    mean = (x + sigma2 * score) / a
    cov = sigma2 / a**2 * (np.eye(len(x)) + sigma2 * hess)
    return mean, cov


# %%
exercises.check_tweedie_moments(tweedie_moments)

# %% [markdown]
# **Exercise 2.** Write the sliced Wasserstein-2 distance of two equal-size point sets along given
# unit directions: project, sort, average the squared differences, average over directions, take the
# square root.

# %% tags=["solution", "hide-input"]
def sliced_w2(X, Y, directions):
    px, py = np.sort(X @ directions.T, axis=0), np.sort(Y @ directions.T, axis=0)
    return float(np.sqrt(np.mean((px - py) ** 2)))


# %%
exercises.check_sliced_w2(sliced_w2)

# %% [markdown]
# **Exercise 3 (open).** Train LM with B4 beside it (`net, info = experiment.train_model("lm_sg", with_diag=True)`;
# B4 is `info["diag_net"]`) and compare their Hessian
# errors with `task.hessian_error`. Why does a diagonal covariance suffice for some components of the
# ring and not for others?
#
# ## Summary
#
# The method is a handful of functions: exact Tweedie moments from a score and a Hessian, a
# quasi-likelihood that learns both, a covariance parameterised to stay positive definite, and a
# sampler that draws each step from the matched Gaussian. On the toy data everything can be checked
# against analytic answers, which the experiment uses to test the paper's claims.
