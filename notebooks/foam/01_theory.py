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
# # Adaptive damping for stale Shampoo: theory
#
# **Learning goals.** After this notebook you can
#
# 1. write Shampoo's preconditioner (Shampoo is an optimizer that rescales each weight matrix's
#    gradient by curvature statistics of its rows and columns) as a Kronecker product of two small
#    factors and compute its damped inverse roots by eigendecomposition;
# 2. explain why reusing a stale inverse root with a tiny damping $\epsilon$ is numerically fragile:
#    the inverse-root map's sensitivity grows like $\epsilon^{-(p+1)/p}$;
# 3. compute FOAM's cheap proxy of the stale root's error and see how well it tracks the true error;
# 4. predict how the damping controller's target $\tau$ and cap $\epsilon_{\max}$ set the refresh
#    interval.
#
# **Sources.** Nam and Ahn, "FOAM: Frequency and Operator Error-Based Adaptive Damping Method for
# Reducing Staleness-Oriented Error for Shampoo", ICML 2026
# ([arXiv 2606.02365](https://arxiv.org/abs/2606.02365)). The abstract and introduction could be
# read, the theorems not in full. The official code
# ([REAL-KENTECH/FOAM](https://github.com/REAL-KENTECH/FOAM)) decided the algorithm; the toy problem,
# the damping scale and the numeric illustrations are ours (details at the end of this notebook).

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
import matplotlib.pyplot as plt
import numpy as np

from replib import core
from replib.papers.foam import method, theory

core.set_style()
profile = core.resolve_profile(profile)

# %% [markdown]
# ## Shampoo in one equation
#
# For a weight matrix $W \in \mathbb R^{m \times n}$ with gradient $G_t$, Shampoo keeps two
# exponential moving averages (EMAs), $L_t = \beta_2 L_{t-1} + (1 - \beta_2) G_t G_t^\top$
# ($m \times m$) and $R_t = \beta_2 R_{t-1} + (1 - \beta_2) G_t^\top G_t$ ($n \times n$),
# bias-corrects them ($\bar L_t = L_t / (1 - \beta_2^t)$) and steps along
#
# $$P_t = (\bar L_t + \epsilon I)^{-1/p}\, M_t\, (\bar R_t + \epsilon I)^{-1/p},$$
#
# with $M_t$ the gradient's momentum, $p = 2$ per factor here, and the step's size taken from Adam
# ("grafting"). The damping $\epsilon$ is a small number: $\epsilon I$ is added so that the inverse
# root exists even where a factor has zero eigenvalues. This is a full-matrix preconditioner in
# disguise: with row-major vectorisation,
# $\mathrm{vec}(L^{-1/p} G R^{-1/p}) = (L^{-1/p} \otimes R^{-1/p})\,\mathrm{vec}(G)$ and
# $(L \otimes R)^{-1/p} = L^{-1/p} \otimes R^{-1/p}$, so an $mn \times mn$ preconditioner costs two
# eigendecompositions of size $m$ and $n$.

# %%
errors = theory.kronecker_identity_check(core.seed_everything(0), m=5, n=4)
assert max(errors.values()) < 1e-10
print(f"largest errors: (L kron R)^(-1/p) {errors['kron_root']:.1e}, vec identity {errors['vec']:.1e}")

# %% [markdown]
# ## Why stale roots with tiny damping are fragile
#
# The eigendecompositions are the expensive part, so practice recomputes the roots only every $f$
# steps ("stale Shampoo") and reuses them in between, while the factors keep drifting. How much can a
# small drift $A \to B$ of a factor move its damped inverse root? The map
# $A \mapsto (A + \epsilon I)^{-1/p}$ has Lipschitz constant (the largest ratio of output change to
# input change) $\frac1p \epsilon^{-(p+1)/p}$ on positive semi-definite matrices (the derivative of
# $x \mapsto (x + \epsilon)^{-1/p}$ at $x = 0$). It is reached when the drift hits a direction where
# the factor is (nearly) zero, which is common: with small batches the factors are low rank.

# %%
epsilons = np.logspace(-8, 0, 17)
rng = core.seed_everything(1)
pairs = {"shared near-zero eigenvalue": theory.sensitivity_pair(rng, delta=1e-9, shared_null=True),
         "well-conditioned pair": theory.sensitivity_pair(rng, delta=1e-9, shared_null=False)}
fig, ax = plt.subplots(figsize=(6, 3.6))
for name, (A, B) in pairs.items():
    ax.plot(epsilons, [theory.root_sensitivity(A, B, e) for e in epsilons], marker="o", label=name)
ax.plot(epsilons, theory.root_sensitivity_bound(epsilons), "k--", lw=1, label=r"bound $\epsilon^{-3/2}/2$")
ax.set(xscale="log", yscale="log", xlabel=r"damping $\epsilon$", ylabel="root change / factor change")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 1. How much the damped inverse square root moves per unit of drift of the factor, against
# the damping. With a shared near-zero eigenvalue the bound (dashed) is attained; a well-conditioned
# pair stays at a small, flat sensitivity until $\epsilon$ reaches its smallest eigenvalue, then falls.*
#
# So a tiny $\epsilon$ makes a stale root's error explode along the factor's null directions, and a
# large $\epsilon$ hides the curvature Shampoo is there to use. FOAM's idea: choose $\epsilon$
# *adaptively*, from a measurement of how stale the root is.
#
# ## A cheap proxy for the stale root's error
#
# At the last refresh the factor was $\bar L = Q\,\mathrm{diag}(d)\,Q^\top$. Now it is $\bar L_t$. FOAM
# measures the drift in the stale eigenbasis, whitened by the damped eigenvalues, without any new
# eigendecomposition:
#
# $$E = Q^\top \bar L_t Q - \mathrm{diag}(d), \qquad
# \mathrm{RC} = \Big\| \frac{E_{ij}}{\sqrt{(d_i + \epsilon)(d_j + \epsilon)}} \Big\|_F, \qquad
# \alpha = \frac{\max_i (d_i + \epsilon)^{-1/p}}{\big(\sum_i (d_i + \epsilon)^{-2/p}\big)^{1/2}}, \qquad
# h = \frac{\alpha\, \mathrm{RC}}{p}.$$
#
# ($\|\cdot\|_F$ is the Frobenius norm, the square root of the sum of squared entries.)
# $\mathrm{RC}$ is the relative change of the factor, measured in the stale root's own metric
# ($\|\hat L^{-1/2} (\bar L_t - \bar L) \hat L^{-1/2}\|_F$ with $\hat L = \bar L + \epsilon I$), and
# $\alpha = \|\hat L^{-1/p}\|_2 / \|\hat L^{-1/p}\|_F$ converts it into a relative change of the root.
# We let a factor drift under random low-rank gradients (an EMA with $\beta_2 = 0.99$) and compare
# $h$ with the true relative error of the stale root, $k$ steps after a refresh.

# %%
drift = theory.proxy_vs_true_error(core.seed_everything(2))
fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4))
axes[0].plot(drift["k"], drift["true"], label="true relative error")
axes[0].plot(drift["k"], drift["h"], label="proxy $h$")
axes[0].plot(drift["k"], drift["h"][-1] * drift["drift"] / drift["drift"][-1], "k:", lw=1,
             label=r"$\propto 1 - \beta_2^k$")
axes[0].set(xlabel="steps since the refresh $k$", ylabel="error", yscale="log")
axes[0].legend(fontsize="small")
axes[1].scatter(drift["true"], drift["h"], s=12)
lims = [min(drift["true"].min(), drift["h"].min()), max(drift["true"].max(), drift["h"].max())]
axes[1].plot(lims, lims, "k--", lw=1)
axes[1].set(xscale="log", yscale="log", xlabel="true relative error", ylabel="proxy $h$")
axes[1].xaxis.set_minor_formatter(plt.NullFormatter())
plt.show()
print(f"proxy above the true error at {np.mean(drift['h'] >= drift['true']):.0%} of the steps")

# %% [markdown]
# *Figure 2. Left: the proxy and the true error grow with the steps since the last refresh, as the
# EMA drifts (dotted: $1 - \beta_2^k$, scaled). Right: the proxy against the true error, with the
# diagonal dashed: here the proxy stays above the error, by about a factor of two, and tracks it
# closely. This illustration uses a moderate damping ($\epsilon = 10^{-3}$, proxy values below 1); in
# the experiment $\epsilon$ is tiny and the proxy runs far above 1, where it is a warning signal rather
# than an estimate of the error.*
#
# ## The damping controller
#
# At each check (every $f = 10$ steps) FOAM compares the proxy with a target $\tau$:
#
# $$\tilde\epsilon = \max\big(\epsilon_0,\ \epsilon\, h / \tau\big); \qquad
# \text{if } \tilde\epsilon > \epsilon_{\max}: \text{ refresh (new eigendecomposition), } \epsilon \leftarrow \epsilon_0;
# \qquad \text{else } \epsilon \leftarrow \tilde\epsilon.$$
#
# While the error is small ($h < \tau$) the damping decays to its floor $\epsilon_0$; while it is large,
# the damping grows geometrically, which shrinks the stale root's sensitivity, until the cap is reached
# and the root is recomputed. In the reuse branch only $\epsilon$ changes: the stale eigenvalues are
# kept. Here is the controller fed with a proxy that grows after each refresh.

# %%
h_seq, h, eps = [], 0.3, method.EPS0  # a proxy that grows after a refresh and drops back at the next
for _ in range(60):
    h = min(2.5, h * 1.25)
    h_seq.append(h)
    eps, refreshed = method.controller_step(eps, h)
    if refreshed:
        h = 0.3
trace = theory.controller_trace(h_seq)
fig, axes = plt.subplots(2, 1, figsize=(7, 4.2), sharex=True)
axes[0].plot(trace["eps"] / method.EPS0, drawstyle="steps-post")
axes[0].plot(np.flatnonzero(trace["refresh"]), np.ones(trace["refreshes"]), "rv", label="refresh")
axes[0].axhline(method.EPS_MAX / method.EPS0, color="k", ls="--", lw=1)
axes[0].set(yscale="log", ylabel=r"$\epsilon / \epsilon_0$")
axes[0].legend(fontsize="small")
axes[1].plot(h_seq)
axes[1].axhline(method.TAU, color="k", ls="--", lw=1)
axes[1].set(xlabel="check", ylabel="proxy $h$")
plt.show()
for h_const in (1.0, 1.5, 3.0):
    print(f"constant h = {h_const}: a refresh every {theory.refresh_interval(h_const):.0f} checks")

# %% [markdown]
# *Figure 3. The controller's saw-tooth. Top: the damping relative to its floor, with the cap
# $\epsilon_{\max} = 300\,\epsilon_0$ dashed and the refreshes marked. Bottom: the proxy fed to it, with
# the target $\tau = 0.75$ dashed.*
#
# Under a constant proxy $h > \tau$ the damping grows as $\epsilon_0 (h/\tau)^k$, so a refresh comes
# every $\lfloor \log(\epsilon_{\max}/\epsilon_0) / \log(h/\tau) \rfloor + 1$ checks: the cap ratio and
# the target set the refresh rate, and a faster-drifting factor is refreshed more often.
#
# This is why the experiment's efficiency claim depends on its regime: small minibatches make the
# factors drift fast, $h$ stays well above $\tau$, and the refresh interval is short unless the cap
# ratio is large. The experiment therefore chooses its minibatch size and cap ratio from a small grid
# declared in advance (the paper itself uses ratios of 100 to 500).
#
# ## What to expect in the experiment
#
# - Refreshing less often (larger $f$) should cost loss: staleness hurts. This is the premise of the
#   paper's method, so the experiment checks it first, as a precondition: if it fails, matching a
#   frequent refresh with fewer eigendecompositions is no achievement, and the efficiency claims have
#   no room to be tested.
# - FOAM should approach the loss of frequent refreshes with far fewer eigendecompositions, and beat
#   a fixed cadence that uses a similar number of them.
# - Without refreshes, adaptive damping alone should not be enough: the eigenbasis itself goes stale.
# - Adaptive damping should matter on its own: at the same number of eigendecompositions, FOAM should
#   beat refreshing whenever $h$ exceeds a (higher) target with the damping kept at its floor.
#
# ## Summary
#
# Shampoo's preconditioner is a Kronecker product of two damped inverse roots, each costing an
# eigendecomposition. Reusing stale roots is cheap but, with a tiny damping, the root is extremely
# sensitive to the factor's drift. FOAM measures the drift with a proxy computed in the stale
# eigenbasis, raises the damping when the proxy exceeds a target, and recomputes the root only when
# the damping would exceed a cap.
#
# ## Exercises
#
# 1. Show that the proxy $h$ is zero right after a refresh, and that it is invariant to rescaling the
#    factor together with $\epsilon$.
# 2. With `theory.refresh_interval`, plot the refresh interval against $h$ for $\tau \in \{0.5, 0.75, 1\}$.
#    Which parameter would you tune to halve the number of eigendecompositions?
# 3. Repeat Figure 1 with $p = 4$ (Meta's default exponent for matrices): how does the bound change?
#
# ## Sources in detail
#
# The abstract and the introduction of the paper could be read; the theorems could not be read in
# full. The algorithm follows the official code (a modified copy of Meta's Distributed Shampoo),
# cross-checked against two summaries of the paper. FOAM stands for frequency- and
# operator-error-based adaptive damping. Our choices: the toy problem (a deep autoencoder on digits),
# the absolute damping scale $\epsilon_0 = 10^{-12}$ (this notebook uses the paper's ViT ratio
# $\epsilon_{\max}/\epsilon_0 = 300$; the experiment picks its ratio from a declared grid), and the
# learning-rate search. The numeric illustrations in this
# notebook are ours.
