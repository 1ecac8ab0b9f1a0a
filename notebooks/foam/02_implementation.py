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
# # Adaptive damping for stale Shampoo: implementation
#
# **Learning goals.** After this notebook you can
#
# 1. read Shampoo (an optimizer that preconditions each weight matrix's gradient with two small
#    curvature factors) and FOAM (frequency- and operator-error-based adaptive damping, which decides
#    when those factors' inverse roots are recomputed) in `replib.papers.foam.method` piece by piece,
#    beside the equation or step each piece implements: the factor statistics, their bias correction,
#    the eigendecomposition, the damped inverse root, the preconditioned and grafted direction, FOAM's
#    proxy and its damping controller;
# 2. check each piece on inputs small enough to verify by hand;
# 3. run one short training with each refresh policy and count its eigendecompositions;
# 4. check that the experiment's batched trainer does the reference optimizer's arithmetic.

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
import scipy.linalg

from replib import core
from replib.core.runtime import compute_threads
from replib.papers.foam import exercises, experiment, method, task

core.set_style()
profile = core.resolve_profile(profile)
rng = core.seed_everything(0)

# %% [markdown]
# ## 1. The factor statistics and their bias correction
#
# Each factor is an exponential moving average (EMA) of gradient products:
#
# $L_t = \beta_2 L_{t-1} + (1 - \beta_2) G_t G_t^\top$, $R_t = \beta_2 R_{t-1} + (1 - \beta_2) G_t^\top G_t$,
# and $\bar L_t = L_t / (1 - \beta_2^t)$, so that a constant gradient gives $\bar L_t = G G^\top$ from the
# first step on.

# %%
core.show_source(method.ema_factor)

# %%
G = rng.normal(size=(3, 2))
L = np.zeros((3, 3))
for t in range(1, 6):
    L = method.ema_factor(L, G, beta2=0.99, side="L")
    assert np.allclose(method.bias_corrected(L, 0.99, t), G @ G.T)  # unbiased from step 1
assert method.ema_factor(np.zeros((2, 2)), G, 0.99, side="R").shape == (2, 2)  # R is n x n

# %% [markdown]
# ## 2. Eigendecomposition and the damped inverse root
#
# The damping $\epsilon$ is a small number added to every eigenvalue so that the inverse root stays
# finite where a factor has a zero eigenvalue; a stale root is one computed at an earlier step and
# reused. A refresh computes $\bar L = Q\,\mathrm{diag}(d)\,Q^\top$ and keeps the *raw* eigenvalues
# $d$ (no damping inside, so that $\epsilon$ is added exactly once); the cached root is
# $Q\,(\mathrm{diag}(d) + \epsilon I)^{-1/p} Q^\top$.

# %%
core.show_source(method.inverse_root_from_eig)

# %%
A = task.random_psd(rng, 5, rank=3)  # low rank, as with small batches
Q, d = method.eigendecompose(A)
assert np.all(d >= 0) and np.allclose((Q * d) @ Q.T, A)
root = method.inverse_root_from_eig(Q, d, eps=1e-3, p=2)
reference = scipy.linalg.fractional_matrix_power(A + 1e-3 * np.eye(5), -0.5)
assert np.allclose(root, reference.real, atol=1e-8)

# %% [markdown]
# ## 3. The preconditioned direction and Adam grafting
#
# $P = \hat L^{-1/p} \hat M \hat R^{-1/p}$ with the bias-corrected momentum $\hat M$, then rescaled to
# the Frobenius norm (the square root of the sum of squared entries) of Adam's direction for the same
# block: Shampoo chooses the direction, Adam the size.

# %%
core.show_source(method.graft)

# %%
M = rng.normal(size=(3, 2))
P = method.shampoo_direction(np.eye(3), M, np.eye(2))
assert np.allclose(P, M)  # identity roots leave the momentum unchanged
adam = method.adam_direction(M, M**2 + 1.0)
assert np.isclose(np.linalg.norm(method.graft(P, adam)), np.linalg.norm(adam))  # Adam's size
assert np.allclose(method.graft(P, adam) / np.linalg.norm(method.graft(P, adam)), P / np.linalg.norm(P))

# %% [markdown]
# ## 4. FOAM's proxy of the stale root's error
#
# In the stale basis $Q$ with stale eigenvalues $d$ and the damping $\epsilon$ in use:
# $E = Q^\top \bar L_t Q - \mathrm{diag}(d)$,
# $\mathrm{RC} = \| E_{ij} / \sqrt{(d_i + \epsilon)(d_j + \epsilon)} \|_F$,
# $\alpha = \max_i (d_i + \epsilon)^{-1/p} / (\sum_i (d_i + \epsilon)^{-2/p})^{1/2}$ and
# $h = \alpha\,\mathrm{RC}/p$: two matrix products, no eigendecomposition.

# %%
core.show_source(method.foam_proxy)

# %%
h, rc, alpha = method.foam_proxy(Q, d, A, eps=1e-3)
assert h < 1e-6 and rc < 1e-6  # right after a refresh nothing has drifted (up to round-off)
drifted = A + 1e-2 * task.random_psd(rng, 5, rank=1)
h_small = method.foam_proxy(Q, d, drifted, eps=1e-1)[0]
h_tiny = method.foam_proxy(Q, d, drifted, eps=1e-4)[0]
assert 0 < h_small < h_tiny  # the same drift is riskier under a smaller damping
# an independent matrix form: RC = ||L^-1/2 (L_t - L) L^-1/2||_F and alpha = ||L^-1/p||_2 / ||L^-1/p||_F
eps, p = 1e-3, 2
stale_half = method.inverse_root_from_eig(Q, d, eps, 2)  # (L + eps I)^(-1/2) in the stale basis
rc_matrix = np.linalg.norm(stale_half @ (drifted - (Q * d) @ Q.T) @ stale_half)
root = method.inverse_root_from_eig(Q, d, eps, p)
alpha_matrix = np.linalg.norm(root, 2) / np.linalg.norm(root)
assert np.allclose(method.foam_proxy(Q, d, drifted, eps, p), (alpha_matrix * rc_matrix / p, rc_matrix, alpha_matrix))

# %% [markdown]
# ## 5. The damping controller
#
# $\tilde\epsilon = \max(\epsilon_0, \epsilon h / \tau)$; if $\tilde\epsilon > \epsilon_{\max}$ the factor is
# refreshed and $\epsilon \leftarrow \epsilon_0$, else $\epsilon \leftarrow \tilde\epsilon$.

# %%
core.show_source(method.controller_step)

# %%
eps0, eps_max, tau = 1.0, 300.0, 0.75
assert method.controller_step(10.0, 0.375, eps0, eps_max, tau) == (5.0, False)  # h < tau: damping falls
assert method.controller_step(1.0, 0.1, eps0, eps_max, tau) == (1.0, False)  # never below the floor
assert method.controller_step(200.0, 1.5, eps0, eps_max, tau) == (1.0, True)  # 400 > cap: refresh, reset

# %% [markdown]
# ## 6. One factor's maintenance, and the refresh policies
#
# A factor keeps its statistic, its stale $(Q, d)$, its damping and its cached root. Stale Shampoo
# refreshes every $f$ steps with $\epsilon_0$; FOAM checks every $f = 10$ steps and, in its reuse
# branch, changes only $\epsilon$ (the stale eigenvalues are kept: updating them would be a different
# method). The ablations drop one part each: no refresh after the first (the damping still adapts,
# clipped at the cap), or no adaptive damping (refresh whenever $h > \tau$; the experiment also runs
# it with a higher $\tau$ that matches FOAM's number of eigendecompositions).

# %%
core.show_source(method.ShampooOptimizer._maintain)

# %%
fac = method.KroneckerFactor("toy", 5)
fac.refresh(A, eps=1e-6)
Q_before, d_before = fac.Q.copy(), fac.d.copy()
fac.rebuild(1e-3)  # the reuse branch: only the damping changes
assert np.array_equal(fac.Q, Q_before) and np.array_equal(fac.d, d_before) and fac.evds == 1
assert np.allclose(fac.root, method.inverse_root_from_eig(Q_before, d_before, 1e-3))
assert [method.stale_evd_count(1000, f) for f in (1, 10, 50)] == [1000, 101, 21]  # per factor

# %% [markdown]
# ## 7. A short run of every policy
#
# The deep autoencoder (64-128-64-16-64-128-64, tanh with a linear 16-dimensional bottleneck, the
# shared `replib.models.mlp.MLP`) on 1,400 digits, with the experiment's settings: minibatches of
# `experiment.BATCH_SIZE`, preconditioning from step 20 (the paper's runs; before it the weights take
# the Adam step alone), FOAM's cap ratio `experiment.EPS_RATIO`, and the no-refresh ablation
# refreshing as FOAM does up to step `experiment.FREEZE` (so within this short run it is FOAM). The
# optimizer's time is measured apart from the model's.

# %%
steps = {"smoke": 30, "book": 200, "paper": 200}[profile]
settings = dict(start=20, eps_max=experiment.EPS_RATIO * method.EPS0, freeze=experiment.FREEZE)
short = {}
with compute_threads(1):
    for config in ["stale_f10", "stale_f50", "foam", "foam_no_refresh", "adam"]:
        run = short[config] = experiment.train_batch(config, [0], [3e-3], steps, experiment.BATCH_SIZE,
                                                     **settings)[0]
        print(f"{method.config_label(config):<18} loss {run.final_loss:.4f}, {run.evds:4d} "
              f"eigendecompositions, {run.curve['flops'][-1] / 1e9:.2f} GFLOP, "
              f"optimizer {run.optimizer_seconds:.2f} s, model {run.model_seconds:.2f} s")
assert short["stale_f10"].evds == 12 * method.stale_evd_count(steps, 10, start=20)  # 6 matrices x (L, R)
assert short["stale_f10"].checks == 0  # the stale baseline never pays for the proxy
assert short["foam_no_refresh"].evds == short["foam"].evds  # it refreshes as FOAM up to step 200

# %% [markdown]
# ## 8. Many runs as one: the batched trainer
#
# The experiment trains all seeds of a configuration as one stacked model: each weight is a stack
# $(K, m, n)$, the objective is the sum of the $K$ members' minibatch losses (so each member's gradient
# is its own), and `BatchedOptimizer` applies the same steps as `ShampooOptimizer` with stacked matrix
# products and eigendecompositions: the proxy, the controller and the refresh are decided per member.
# It also counts each member's floating-point operations by a fixed rule (an eigendecomposition of an
# $m \times m$ factor at $9 m^3$), the unit of the experiment's cost-to-target claim. Two members here
# against two single runs of the reference optimizer:

# %%
core.show_source(method.BatchedOptimizer._maintain)

# %%
n = {"smoke": 30, "book": 60, "paper": 60}[profile]
with compute_threads(1):
    pair = experiment.train_batch("foam", [0, 1], [3e-3, 1e-2], n, 4, eval_every=10, start=5, eps_max=1e-10)
    orig = experiment.policy
    experiment.policy = lambda name, **_: orig(name, start=5, eps_max=1e-10)
    try:
        singles = [experiment.train_autoencoder("foam", s, n, lr, 4, eval_every=10)
                   for s, lr in ((0, 3e-3), (1, 1e-2))]
    finally:
        experiment.policy = orig
for b, r in zip(pair, singles):
    assert np.allclose(b.curve["loss"], r.curve["loss"], rtol=1e-5) and b.evds_by_factor == r.evds_by_factor
    print(f"seed {r.seed}: loss {r.final_loss:.5f} alone, {b.final_loss:.5f} batched; {r.evds} eigendecompositions")

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write the damped inverse root `damped_inverse_root(A, eps, p)` $= (A + \epsilon I)^{-1/p}$
# of a symmetric positive semi-definite matrix, by eigendecomposition. The grader passes `A` as a
# NumPy array and `eps` and `p` as plain Python numbers.

# %% tags=["solution", "hide-input"]
def damped_inverse_root(A, eps, p):
    d, Q = np.linalg.eigh(A)
    d = np.maximum(d, 0.0)
    return (Q * (d + eps) ** (-1.0 / p)) @ Q.T


# %%
exercises.check_damped_inverse_root(damped_inverse_root)

# %% [markdown]
# **Exercise 2.** Write FOAM's controller step `controller_step(eps, h, eps0, eps_max, tau)`, returning
# the next damping and whether the factor must be refreshed. The grader passes plain Python floats.

# %% tags=["solution", "hide-input"]
def controller_step(eps, h, eps0, eps_max, tau):
    proposed = max(eps0, eps * h / tau)
    return (eps0, True) if proposed > eps_max else (proposed, False)


# %%
exercises.check_controller_step(controller_step)

# %% [markdown]
# **Exercise 3 (open).** Meta's Shampoo uses the exponent $1/4$ per factor for matrices ($p = 4$),
# FOAM's experiments $1/2$. On a low-rank factor, compare `method.damped_inverse_root(A, eps, p)` and
# `method.foam_proxy(Q, d, drifted, eps, p)` for $p = 2$ and $p = 4$: which is less sensitive to a
# stale root, and why must the proxy use the same $p$ as the root?
#
# ## Summary
#
# Shampoo here is a few small functions: two EMA factors and their bias correction, an
# eigendecomposition that keeps raw eigenvalues, a damped inverse root, a Kronecker-preconditioned
# direction with Adam's size. FOAM adds a proxy computed in the stale basis and a multiplicative
# controller of the damping that triggers a refresh only at its cap. The experiment compares the
# policies over full training runs with the same learning-rate search for each.
