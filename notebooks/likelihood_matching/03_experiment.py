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
# # Likelihood matching for diffusion: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say which of the (reconstructed) claims of likelihood matching hold on a 2-D mixture whose score
#    and Hessian are known exactly, and by how much;
# 2. separate what the matched covariance buys at few sampling steps from what it buys at many;
# 3. check a learned Hessian against the analytic one.
#
# **Setting.** Six elongated Gaussian components on a ring (variances 0.3 along the ring, 0.01
# across it). Each method trains the same network trunk (3 x 64, SiLU, a sinusoidal time embedding)
# for 1,500 Adam steps on fresh batches of 256, with the same stream of data, times and noise for a
# given seed; then it samples 4,000 points with $N \in \{5, 10, 20, 50, 200\}$ steps, compared with 4,000
# fresh target points (sliced Wasserstein-2, 64 fixed projections), and its NLL bound is computed on
# 2,000 held-out points with identical code for every method.
#
# **Methods.** LM: likelihood matching (score and a rank-1 plus diagonal covariance; sampler with the
# matched covariance). B1 and B2: denoising score matching with the DDPM sampler and reverse variance
# $\beta_k$ (B1) or $\tilde\beta_k$ (B2), one network for both. B3: LM with $C = I$ (mean only), its own
# network. B4: LM with a diagonal covariance. The paper's own results were not available; the claims
# and thresholds are the paper digest's proposals, declared before this experiment ran, and they
# judge LM. A sixth, exploratory variant was added after the first results (not judged; see the end):
# LM with decoupled gradients, "LMsg". Training times are drawn continuously and do not sit on the
# sampler's grid; the network never sees the step size, which enters the loss only through
# $\sigma^2$ and $\kappa$.

# %%
# Colab set-up: installs the book's package, replib, from its repository (branch main).
# Anywhere else (a local clone, the book build, CI) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import subprocess

    package = "replib @ git+https://github.com/icml2026-replications/replib-book.git@main"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)

# %% tags=["parameters"]
profile = None  # "smoke", "book" or "paper"; None reads $REPLIB_PROFILE, else "book"
seeds = None  # list of ints; None takes the profile's seeds
train_steps = None  # Adam steps per network
n_samples = None  # samples per method and number of steps (and fresh target samples)
n_steps_grid = None  # numbers of sampling steps N
methods = None  # subset of LM, B1, B2, B3, B4

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.likelihood_matching import experiment, task

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, seeds=seeds, train_steps=train_steps,
                     n_samples=n_samples, n_steps_grid=n_steps_grid, methods=methods)
ledger = core.Ledger("likelihood_matching", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## Training and sampling every method

# %%
rows, extras = experiment.run_experiment(cfg, progress=core.progress)
runs = pd.DataFrame(rows)
sampling = runs[runs["kind"] == "sampling"].assign(label=lambda d: d["method"].map(experiment.METHOD_LABELS))
hessian = runs[runs["kind"] == "hessian"].assign(label=lambda d: d["method"].map(experiment.METHOD_LABELS))
sampling.pivot_table(index="label", columns="n_steps", values="sw2", aggfunc="mean").round(3)

# %% [markdown]
# Sliced Wasserstein-2 distance to the target (mean over seeds; lower is better) per method (rows)
# and number of sampling steps (columns). For reference, two independent target samples of the same
# size:

# %%
fresh = task.sample_mixture(extras["mixture"], len(extras["target"]), np.random.default_rng(99))
print(f"sliced w2 between two target samples: {task.sliced_w2(fresh, extras['target']):.3f}")

# %% mystnb={"figure": {"caption": "Samples (first seed) of each method (rows; LMsg is the exploratory variant) with N sampling steps (columns), over a fresh target sample in grey.", "name": "lm-samples"}}
shown_methods = [m for m in ["LM", "B1", "B2", "B3", "LMsg"] if m in cfg.methods]
shown_steps = [n for n in [5, 10, 50, 200] if n in cfg.n_steps_grid]
fig, axes = plt.subplots(len(shown_methods), len(shown_steps), figsize=(2.6 * len(shown_steps), 2.5 * len(shown_methods)),
                         sharex=True, sharey=True, squeeze=False)
for i, method in enumerate(shown_methods):
    for j, n in enumerate(shown_steps):
        ax = axes[i, j]
        ax.scatter(*extras["target"][:1500].T, s=1, color="0.8")
        ax.scatter(*extras["samples"][(method, n)][:1500].T, s=1, color=f"C{i}")
        ax.set(xlim=(-3.5, 3.5), ylim=(-3.5, 3.5), xticks=[], yticks=[],
               xlabel=f"n = {n}" if i == len(shown_methods) - 1 else "", ylabel=method if j == 0 else "")
plt.show()

# %% mystnb={"figure": {"caption": "Sliced Wasserstein-2 distance (left) and NLL bound in nats per dimension (right) against the number of sampling steps; mean over seeds, band: standard deviation.", "name": "lm-steps"}}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
sns.lineplot(sampling, x="n_steps", y="sw2", hue="label", marker="o", errorbar="sd", ax=axes[0])
sns.lineplot(sampling, x="n_steps", y="nll", hue="label", marker="o", errorbar="sd", ax=axes[1], legend=False)
axes[0].set(xscale="log", yscale="log", xlabel="sampling steps $n$", ylabel="sliced w2 to target")
axes[1].set(xscale="log", xlabel="sampling steps $n$", ylabel="nll bound (nats/dim)")
axes[0].legend(title="", fontsize="small")
plt.show()

# %% [markdown]
# The NLL bounds in nats per dimension, mean over seeds (lower is better). The data are continuous and
# not dequantised, so the values are not comparable with image benchmarks. The bound is likelihood
# matching's home ground: it is the quantity its loss optimises, one step at a time.

# %%
sampling.pivot_table(index="label", columns="n_steps", values="nll", aggfunc="mean").round(3)

# %% [markdown]
# ## The learned covariance

# %% mystnb={"figure": {"caption": "Reverse-transition covariances for one step of N = 10 at a few points x_t (first seed): the true one from the analytic Hessian (black), LM's (blue) and the isotropic ones of B1 (orange) and B2 (green), as 2-sigma ellipses all drawn around the true mean (so the figure compares covariances only, not LM's mean error).", "name": "lm-ellipses"}}
def ellipse(cov, n=100):
    evals, evecs = np.linalg.eigh(cov)
    angle = np.linspace(0, 2 * np.pi, n)
    return (evecs * 2 * np.sqrt(np.maximum(evals, 0))) @ np.stack([np.cos(angle), np.sin(angle)])


fig, ax = plt.subplots(figsize=(5.5, 5.5))
for e in extras["ellipses"]:
    for key, color in [("cov_true", "k"), ("cov_lm", "C0"), ("cov_b1", "C1"), ("cov_b2", "C2")]:
        xy = ellipse(e[key])
        ax.plot(e["mean_true"][0] + xy[0], e["mean_true"][1] + xy[1], color=color, lw=1.5 if key == "cov_true" else 1)
ax.scatter(*extras["target"][:1500].T, s=1, color="0.85")
ax.set(aspect="equal", xlabel="x1", ylabel="x2")
plt.show()

# %% mystnb={"figure": {"caption": "Relative Frobenius error of the learned Hessian of log p_t against the analytic one, per diffusion time t (mean over seeds and test points; band: standard deviation over seeds), for the two methods that learn a covariance.", "name": "lm-hessian"}}
learned = hessian[hessian["method"].isin(["LM", "B4"])]
fig, ax = plt.subplots(figsize=(6, 3.4))
sns.lineplot(learned, x="t", y="rel_error", hue="label", marker="o", errorbar="sd", ax=ax)
ax.set(xlabel="diffusion time $t$", ylabel="relative hessian error")
ax.legend(title="", fontsize="small")
plt.show()

# %% [markdown]
# How well each network learned the score itself: mean squared error of $s_\theta$ against the analytic
# score, per diffusion time (mean over seeds and test points). B1 and B2 share the DSM network. And
# the training time of each network (seconds, mean over seeds):

# %%
pd.DataFrame(extras["train"]).groupby("objective")["seconds"].mean().round(2).to_frame("training seconds").T

# %%

# %%
hessian.pivot_table(index="label", columns="t", values="score_mse", aggfunc="mean").round(3)

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its role and threshold before this experiment was
# run. The value is computed per seed from the runs above. A claim holds when the mean over seeds and
# every seed clear the threshold, and is fragile when the mean clears it but some seed does not.

# %%
values = experiment.claim_values(runs)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# The verdicts use every seed; here are the per-seed values behind them.

# %%
pd.DataFrame(values).round(3)

# %% [markdown]
# ## An exploratory variant: decoupling the score from the covariance
#
# After the first results we added one variant to test our explanation of them (below). In a Gaussian
# likelihood with a learned covariance, a poor score inflates the fitted covariance, and a larger
# covariance down-weights the score's own error in the loss: the two can lock each other in (the
# mean-variance coupling that beta-NLL, Seitzer et al. 2022, addresses). "LMsg" has the same loss
# value as LM and the same minimisers, but the score receives the gradient of B3's identity-weighted
# term and the covariance heads see the residual held fixed. The claims' metrics, computed for LMsg
# in place of LM; **not judged**, since this variant was not declared before the run:

# %%
pd.DataFrame(experiment.claim_values(runs, method="LMsg")).round(3) if "LMsg" in cfg.methods else None

# %% [markdown]
# ## What we scaled down, and why the effect should survive it
#
# - **The paper itself.** Its method section, hyperparameters and results were not available. The
#   loss, the covariance parameterisation, the schedule and the sampler are reconstructions from exact
#   identities and the abstract; a verdict here tests this reconstruction, not the authors' code.
# - **Data.** A 2-D mixture instead of images: small enough to know the score and Hessian exactly,
#   and anisotropic enough that an isotropic reverse variance is wrong. The optional 8-dimensional
#   digits variant of the digest is not run.
# - **Training budget.** 1,500 steps of a 3 x 64 network per method: every method gets the same
#   budget, but none is trained to convergence, which matters for claim c3 (a residual difference at
#   many steps can come from training rather than from the sampler).
#
# ## Reading the verdicts
#
# The lines below are generated from the claims table, so they always match this run.

# %%
ledger.report()

# %% [markdown]
# What the book-profile run (seeds 0, 1 and 2) shows, and why we think so. These bullets were
# written for that run; at other profiles or seeds, trust the tables above.
#
# - **No declared claim holds for LM as reconstructed.** Its samples fill the inside of the ring at
#   every number of steps (sample grid); its sliced distance stalls at about 0.19, against about 0.08
#   for the DDPM baselines (two target samples are 0.07 apart), and at 10 steps it is worse than both
#   (c1 fails); its NLL bound at 20 steps is above that of score matching with $\beta_k$ (c2 fails); at
#   200 steps it stays far *worse* than B2, the falsifying direction of c3, which points to training
#   rather than sampling; and its Hessian error at $t = 0.3$ is just above the declared 0.35 (c4 fails
#   narrowly).
# - **The score is the problem, not the covariance.** LM's reverse covariances at $t = 0.3$ are close
#   to the true ones (ellipse figure), but the score table shows its score error at $t = 0.1$ about four
#   times that of the DSM network and of B3, which uses the same likelihood-weighted loss with $C = I$.
#   So the likelihood weighting is not to blame; learning the covariance jointly is. A poor score
#   inflates the fitted covariance, and a larger covariance down-weights the score's error in the loss.
# - **Decoupling the gradients removes most of the failure (exploratory, not judged).** The LMsg
#   variant, with the same loss value and minimisers but the score trained on B3's identity-weighted
#   term, learns a score much closer to DSM's, draws the ring, is the best method at 5 and 10 steps on
#   the sliced distance and has the lowest NLL bound up to 50 steps (B1's is lower at 200). On
#   the claims' metrics it comes close to c1 (about 0.83 against 0.8), clears c2 and c3, and misses
#   c4 like LM. It was added after the first results, so it is evidence for the explanation above, not
#   a verdict on the paper.
# - **Where the matched covariance helps, even in LM.** At 5 steps LM beats B1 and B2 on the sliced
#   distance, and its NLL bound is below B1's at 5 and 10 steps. B3 (mean only, $C = I$) shows what a
#   wrong covariance costs: its NLL bound with few steps is far worse than every other method's.
# - **Sensitivity.** While building the chapter, runs with a tanh and then a ReLU trunk (the digest
#   asks for SiLU, which we kept) gave other numbers for LM; we did not keep them. At this budget the
#   verdicts depend on such choices, and the paper's architecture and training recipe are unknown.
#
# ## Summary
#
# We rebuilt likelihood matching from the abstract and exact identities: a loss that learns the score
# and the Hessian of $\log p_t$ together, and a sampler that draws each step from the matched Gaussian.
# On a 2-D mixture with known score and Hessian, trained as reconstructed, it learns the covariance but
# a worse score than denoising score matching at small diffusion times, and none of the four declared
# claims holds. Decoupling the score's gradient from the covariance (a variant we added afterwards,
# not judged) largely fixes the score and then shows the benefits the paper claims: better samples
# with few steps, a better likelihood bound, and convergence to the baselines with many steps. Whether
# the paper's own recipe includes something like it cannot be checked without its method section.
#
# ## Exercises
#
# 1. Re-run with `train_steps = 4000`. Does the gap between LM and B2 at 200 steps (claim c3) shrink,
#    as it should if it is a training effect?
# 2. Which component of the ring has the worst Hessian error, and why? (Look at where the elongated
#    components overlap after noising.)
# 3. B3 (mean only) and B1 both learn only a score, with different loss weightings, and sample with
#    different isotropic variances. Why is B3's NLL bound so much worse with few steps?
