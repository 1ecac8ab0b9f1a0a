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
# # RL-learned augmentation for few-shot forecasting: theory
#
# **Learning goals.** After this notebook you can
#
# 1. explain why the variance of K-fold models' errors (models each trained on all but one of $K$
#    parts of the data) flags the samples a model memorises;
# 2. derive the score-function (REINFORCE) gradient for a Gaussian policy, and say when it works
#    where the reparameterised gradient (differentiating the reward through the sample) does not;
# 3. explain why an unbounded variance reward makes a generator run away, and how a log and a
#    distance penalty give it an interior optimum;
# 4. state the objective of the VMAE (variational masked autoencoder: a generator that hides part of
#    a window and regenerates it), a conditional-VAE bound (the training bound of a variational
#    autoencoder) with a prior that sees only the masked window.
#
# **Sources.** "ReAugment: Model Zoo-Guided RL for Few-Shot Time Series Augmentation and
# Forecasting", ICML 2026 ([arXiv 2409.06282](https://arxiv.org/abs/2409.06282)). Only the abstracts,
# the opening of the introduction, independent summaries and the public reviews of the first version
# could be read, and no official code was found; the paper's equations were not available. The
# method's structure follows those descriptions; its formulas, sizes and budgets are ours (see
# "Sources in detail" at the end).

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
from replib.papers.reaugment import theory

core.set_style()
profile = core.resolve_profile(profile)
batches = {"smoke": 200, "book": 2000, "paper": 5000}[profile]

# %% [markdown]
# ## The problem: few-shot forecasting overfits
#
# A forecaster $f_\theta$ maps a look-back $x \in \mathbb R^L$ to the next $H$ values $y$; a training
# sample is a window $w = [x; y]$. With few windows, a flexible forecaster memorises some of them:
# it fits them in training and fails on similar windows it has not seen. Generic augmentation
# (jitter, scaling) treats every window alike. ReAugment asks three questions: *which* windows to
# augment, *how* to transform them, and what reinforcement learning adds.
#
# ## 1. Which windows: the model-zoo variance
#
# Split the training set into $K$ folds and train $K$ copies of the forecaster, copy $k$ on every
# fold but fold $k$. For a window $w_i$ with member errors $e_k(w_i) = \|f_{\theta_k}(x_i) - y_i\|^2$,
# the **model-zoo variance** is
#
# $$v_i = \operatorname{Var}_k \, e_k(w_i).$$
#
# Exactly one member has not seen $w_i$. If the other $K - 1$ fit it much better than that one (the
# signature of memorisation), the errors disagree and $v_i$ is large: with in-fold errors near
# $e_{\rm in}$ and the held-out error $e_{\rm out}$, $v_i \approx \frac{K-1}{K^2} (e_{\rm out} -
# e_{\rm in})^2$. The windows with the largest $v_i$ (the top half, in the summaries of the paper)
# are the **anchors**. A toy: a degree-9 polynomial on 40 noisy points of a sine, with four
# outliers.

# %%
rng = np.random.default_rng(0)
x = np.sort(rng.uniform(-1, 1, 40))
y = np.sin(3 * x) + 0.1 * rng.standard_normal(40)
outliers = rng.choice(40, 4, replace=False)
y[outliers] += rng.choice([-1, 1], 4) * 1.0
zoo = theory.polynomial_zoo(x, y, k=5, degree=9, ridge=1e-4, rng=np.random.default_rng(1))
gap = zoo["out_of_fold"] - zoo["in_fold"]
top = zoo["variance"] >= np.median(zoo["variance"])
print(f"correlation of log zoo variance with log (out-of-fold - in-fold) gap: "
      f"{np.corrcoef(np.log(zoo['variance']), np.log(np.abs(gap) + 1e-9))[0, 1]:.2f}")
print(f"out-of-fold / in-fold error: top half by variance {zoo['out_of_fold'][top].mean() / zoo['in_fold'][top].mean():.1f}, "
      f"bottom half {zoo['out_of_fold'][~top].mean() / zoo['in_fold'][~top].mean():.1f}")
highest = np.argsort(-zoo["variance"])[:4]
print("outliers among the 4 points of highest variance:", sorted(int(i) for i in set(highest) & set(outliers)),
      "of", sorted(int(i) for i in outliers))

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
grid = np.linspace(-1, 1, 200)
for coef in zoo["coefs"]:
    axes[0].plot(grid, np.vander(grid, 10, increasing=True) @ coef, color="0.6", lw=0.8)
axes[0].scatter(x[~top], y[~top], s=15, color="C0", label="bottom half")
axes[0].scatter(x[top], y[top], s=15, color="C3", label="top half (anchors)")
axes[0].set(xlabel="x", ylabel="y", ylim=(-2.5, 2.5))
axes[0].legend(fontsize="small")
axes[1].scatter(zoo["in_fold"], zoo["out_of_fold"], c=np.where(top, "C3", "C0"), s=15)
lims = [1e-6, 10]
axes[1].plot(lims, lims, "k--", lw=0.8)
axes[1].set(xscale="log", yscale="log", xlabel="in-fold error (mean of 4 members)", ylabel="out-of-fold error")
plt.show()

# %% [markdown]
# *Figure 1. Left: the five fold models (grey) of a degree-9 polynomial on 40 noisy points, the
# top half by zoo variance in red. Right: each point's out-of-fold error against its mean in-fold
# error; points far above the diagonal are memorised (fitted when seen, missed when held out), and
# they are the ones the zoo variance puts in the top half.*
#
# This is leave-one-fold-out influence: a large gap means the point pulls the fit toward itself.
# The variance also rises where the members simply disagree (the edges of the interval, where the
# polynomial is unconstrained); the experiment measures how well it separates over-fitted windows
# on real series (claim c1).
#
# ## 2. How to steer the generator: the score-function gradient
#
# The generator is a policy $\pi_\phi(z \mid w)$ over latents $z$ that decode to windows
# $\tilde w$; the reward $r(\tilde w)$ comes from *forward passes* of the zoo. For any reward,
#
# $$\nabla_\phi \, \mathbb E_{z \sim \pi_\phi}[r(z)] = \mathbb E_{z \sim \pi_\phi}\big[r(z) \,
# \nabla_\phi \log \pi_\phi(z)\big],$$
#
# because $\nabla_\phi \pi_\phi = \pi_\phi \nabla_\phi \log \pi_\phi$. For a Gaussian
# $z \sim \mathcal N(\mu, \sigma^2)$, $\partial_\mu \log \pi = (z - \mu) / \sigma^2$. Subtracting a
# constant baseline $b$ keeps the estimate unbiased, since $\mathbb E[\nabla \log \pi] = 0$, and
# lowers its variance. The batch mean of $r$, the baseline of stage B, includes the sample itself,
# which shrinks the expected estimate by the factor $(n - 1)/n$: the direction is unchanged, and the
# Adam optimiser's normalised steps hardly notice the scale. The reparameterised gradient
# $\mathbb E[r'(\mu + \sigma \varepsilon)]$ needs $r$ to be differentiable, and in ReAugment that
# would mean back-propagating through every forecaster of the zoo, the step the paper avoids. Two
# rewards: a smooth one, $r(z) = -(z - 2)^2$, whose true gradient at $\mu = 0$ is 4, and a thresholded
# one, $r(z) = \mathbb 1[z > 1]$ (a frozen classifier's decision), whose reparameterised gradient is 0
# almost everywhere although the true gradient, the Gaussian density at $1 - \mu$, is 0.24 at
# $\mu = 0$, $\sigma = 1$.

# %%
smooth = theory.gradient_estimates(0.0, 1.0, lambda z: -(z - 2) ** 2, n=16, batches=batches,
                                   rng=np.random.default_rng(2), reward_grad=lambda z: -2 * (z - 2))
step = theory.gradient_estimates(0.0, 1.0, lambda z: (z > 1).astype(float), n=16, batches=batches,
                                 rng=np.random.default_rng(3), reward_grad=lambda z: np.zeros_like(z))
true_step = np.exp(-0.5) / np.sqrt(2 * np.pi)
for name, est, truth in [("smooth reward", smooth, 4.0), ("thresholded reward", step, true_step)]:  # n = 16
    for kind, values in est.items():
        print(f"{name:18s} {kind:9s} mean {values.mean():6.3f} (true {truth:.3f}), sd over batches {values.std():.3f}")
assert abs(smooth["baseline"].mean() - 4.0 * 15 / 16) < 0.2 and smooth["baseline"].std() < smooth["score"].std()
assert abs(step["score"].mean() - true_step) < 0.03 and np.all(step["reparam"] == 0)

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
for ax, est, truth, title in [(axes[0], smooth, 4.0, "smooth reward"), (axes[1], step, true_step, "thresholded reward")]:
    for kind, color in [("score", "C1"), ("baseline", "C0"), ("reparam", "C2")]:
        ax.hist(est[kind], bins=60, alpha=0.5, color=color, label=kind, density=True)
    ax.axvline(truth, color="k", ls="--", lw=0.8)
    ax.set(xlabel="gradient estimate (16 samples)", ylabel="density", title=title)
axes[0].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. Distribution over batches of 16 samples of three estimates of $\partial_\mu \mathbb
# E[r]$ at $\mu = 0$, $\sigma = 1$ (dashed: the true value). Left, a smooth reward: all three are
# centred on the truth (the batch-mean baseline on $15/16$ of it); the baseline narrows the
# score-function estimate, and the reparameterised one is narrowest. Right, a thresholded reward:
# the reparameterised estimate is identically 0 (a spike at 0), the score-function estimates are
# centred on the truth.*
#
# ## 3. What to reward: bounded, with a proximity constraint
#
# The later versions of the paper reward generated windows that land where the zoo overfits (large
# zoo variance) while staying close to the original data; the formula is not available. Far from
# every training window the zoo's errors, and their variance, grow without bound, so a reward
# $\operatorname{Var} - \lambda \|\tilde w - w\|^2$ is maximised at infinity whenever the variance
# grows faster than the squared distance. The chapter therefore uses the *proposed* bounded form
#
# $$r(\tilde w) = \log\big(\operatorname{Var}_k e_k(\tilde w) + \varepsilon\big) - \lambda \,
# \|\tilde w - w\|^2 / d_0,$$
#
# where $d_0$ is the mean anchor distance of the generator before RL: the log grows only
# logarithmically, the penalty quadratically, so the optimum is interior. A two-dimensional toy
# with $\operatorname{Var}(\tilde w) = 0.01 + 0.5 \|\tilde w\|^4$ and the anchor at $(0.5, 0)$:
# REINFORCE on the mean of a Gaussian policy (the advantages normalised as in the experiment).

# %%
anchor = np.array([0.5, 0.0])
lam = 0.3
runs = {}
for kind in ("unbounded", "log"):
    def reward(z, kind=kind):
        return theory.shaped_reward(z, anchor, kind, lam=lam, d0=0.05)

    runs[kind] = theory.reinforce_gaussian(reward, anchor, sigma=0.1, steps=300, n=32, lr=0.02,
                                           rng=np.random.default_rng(4))
    print(f"{kind:9s}: distance of the policy mean from the anchor after {len(runs[kind]) - 1} steps "
          f"{np.linalg.norm(runs[kind][-1] - anchor):.2f}")

t = np.linspace(0, 2.5, 300)
points = anchor + t[:, None] * np.array([1.0, 0.0])
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
for lam_sweep in (0.1, 0.3, 1.0):
    axes[0].plot(t, theory.shaped_reward(points, anchor, "log", lam_sweep, d0=0.05), label=f"log, $\\lambda$ = {lam_sweep}")
axes[0].plot(t, np.log(theory.shaped_reward(points, anchor, "unbounded", lam) + 1), "k--",
             label="unbounded, log(1 + r)")
axes[0].set(xlabel="distance from the anchor along $x_1$", ylabel="reward", ylim=(-15, 6))
axes[0].legend(fontsize="small")
for kind, color in [("unbounded", "C3"), ("log", "C0")]:
    axes[1].plot(np.linalg.norm(runs[kind] - anchor, axis=1), color=color, label=kind)
axes[1].set(xlabel="reinforce step", ylabel="distance of the policy mean from the anchor")
axes[1].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 3. Left: the two reward forms along a ray from the anchor; the log form (three values of
# $\lambda$, $d_0 = 0.05$) peaks at a finite distance that shrinks as $\lambda$ grows, the unbounded
# form (dashed, drawn as $\log(1 + r)$) keeps rising. Right: REINFORCE on the policy mean: under the
# unbounded reward it drifts away from the anchor at every step; under the log reward it settles at
# the interior optimum.*
#
# **Which way to steer.** The sources disagree on the reward's sign. The first version (AutoTSAug)
# generated samples that *reduce* the zoo's error variance; the later versions steer toward regions
# where the zoo *overfits*, under a proximity constraint. Both have a case. Toward high variance is
# hard-example mining: a window on which the members that saw it and the one that did not disagree
# lies where the forecaster memorises rather than generalises, and more data there should pin the
# function down where it is least determined. Toward low variance is consistency regularisation:
# windows the zoo agrees on are typical ones, and adding them smooths the forecaster without teaching
# it anything surprising. The first reading needs the generated windows to be *right* where the zoo is
# unsure (a generator that invents targets in exactly the region no model can check may teach noise);
# the second only needs them to be plausible. The chapter follows the later versions ($s = +1$ in
# `zoo_reward`) and measures the first version's sign ($s = -1$) as an ablation with the same anchors,
# dose and weight.
#
# ## 4. How to transform: the variational masked autoencoder
#
# The generator hides part of the window (one contiguous span of 25% of its steps, in this chapter)
# and regenerates the whole window from a latent $z$. A posterior network $q(z \mid w)$ sees the full
# window, a prior network $p(z \mid w_{\rm vis}, m)$ only the visible part and the mask, and the
# decoder maps $(z, w_{\rm vis}, m)$ to $\hat w$. Training maximises a conditional-VAE bound, written
# as the loss (KL is the Kullback-Leibler divergence, how far one distribution is from another)
#
# $$\mathcal L_A = \mathbb E_{z \sim q(z \mid w)}\Big[\tfrac1T \|\hat w(z) - w\|^2\Big] + \beta \,
# \mathrm{KL}\big(q(z \mid w) \,\|\, p(z \mid w_{\rm vis}, m)\big) / T,$$
#
# with, for diagonal Gaussians, $\mathrm{KL} = \frac12 \sum_j \big[\log \sigma_{p,j}^2 - \log
# \sigma_{q,j}^2 + (\sigma_{q,j}^2 + (\mu_{q,j} - \mu_{p,j})^2) / \sigma_{p,j}^2 - 1\big]$ (the weight
# $\beta = 0.1$ and the per-step scaling are our choices; the paper's are not stated). At generation
# $z$ is drawn from the *prior*, so one anchor yields many windows, all centred on it. The prior is
# the policy that stage B fine-tunes: $\log \pi_\phi(z \mid w) = \log p_\phi(z \mid w_{\rm vis}, m)$,
# and the decoder stays fixed.
#
# ## What to expect in the experiment
#
# On three short real series (El Nino sea temperatures, sunspots, the monthly change of CO2), with 60
# training windows each. Before the method is judged, the experiment checks that a fair test is
# possible: the forecaster learns (p1), the generator reconstructs (p2), 60 more *real* windows lower
# the test error (p3: if real data cannot help, no generated data can), and the forecaster over-fits
# (p4: the problem ReAugment addresses). Then: the zoo variance should separate windows with a large
# out-of-fold gap (c1); RL should raise the zoo variance of the generated windows while keeping them
# near their anchors (c2a, c2b); and forecasters retrained on the augmented data should beat no
# augmentation by at least 2% (h1) and the generator without RL (h2), on El Nino and co2, with the
# number and weight of the generated windows tuned for every augmenter alike. The reviews of the
# first version found most of the paper's gains below 5%, so the effects, if any, are small.
#
# ## Summary
#
# - The zoo variance is large where the members that saw a window and the one that did not disagree:
#   a cheap, architecture-free proxy for memorisation.
# - REINFORCE needs only the reward's values, so the zoo's forecasters are never differentiated;
#   a batch-mean baseline keeps its variance manageable.
# - A variance reward needs a bound and a proximity term, or the generator leaves the data.
#
# ## Exercises
#
# 1. In section 1, raise the ridge penalty (the weight of the penalty on the squared coefficients) to
#    $10^{-1}$. What happens to the separation of the top and bottom halves, and why does a strongly
#    regularised model leave less for the zoo to flag?
# 2. Show that for $K$ members with in-fold errors all equal to $e_{\rm in}$ and one held-out error
#    $e_{\rm out}$, $\operatorname{Var}_k e_k = (K - 1)(e_{\rm out} - e_{\rm in})^2 / K^2$.
# 3. For the one-dimensional version of the log reward, $\log(c\,t^4) - \lambda t^2 / d_0$, find the
#    optimal distance $t^*$. How does it scale with $\lambda$ and $d_0$?
#
# ## Sources in detail
#
# The paper has had three titles: "ReAugment: Model Zoo-Guided RL for Few-Shot Time Series
# Augmentation and Forecasting" (ICML 2026), and earlier "Learning Augmentation Policies from A Model
# Zoo for Time Series Forecasting" and "Automated Data Augmentation for Few-Shot Time Series
# Forecasting". Only the abstracts, the opening of the introduction, independent summaries and the
# public reviews of the first version could be read; no official code was found, and the paper's
# equations were not available. The model-zoo variance, the top-50% anchors, the VMAE with a prior
# and a posterior network, and REINFORCE with the VMAE as actor follow those descriptions. Not stated
# in what we could read, and therefore our choices: the number of folds ($K = 5$), the reward's
# formula (the proposed bounded form of section 3), the VMAE's losses, mask and sizes, every budget,
# the data sets and the forecaster. The first version of the paper steered toward *lower* zoo
# variance; the later versions toward the regions where the zoo overfits, under a proximity
# constraint, which is what this chapter implements. The toys in this notebook are ours.
