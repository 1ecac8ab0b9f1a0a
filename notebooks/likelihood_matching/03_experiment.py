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
# for 3,000 Adam steps on fresh batches of 256, with the same stream of data, times and noise for a
# given seed; then it samples 4,000 points with $N \in \{5, 10, 20, 50, 200\}$ steps, compared with 4,000
# fresh target points (sliced Wasserstein-2, 64 fixed projections), and its NLL bound is computed on
# 2,000 held-out points with identical code for every method. For the claims at $N = 10$, LM, B1 and
# B2 also draw 40,000 samples against 40,000 target points.
#
# **Methods.** LM: likelihood matching (score and a rank-1 plus diagonal covariance; sampler with the
# matched covariance), trained with *decoupled gradients*: the loss is the likelihood-matching loss,
# but the score receives the gradient of its identity-weighted term and the covariance heads see the
# score's residual held fixed (same loss value, same minimisers; why, below). B1 and B2: denoising
# score matching with the DDPM sampler and reverse variance $\beta_k$ (B1) or $\tilde\beta_k$ (B2), one
# network for both. B3: LM with $C = I$ (mean only), its own network. At the paper profile only (time
# budget): B4, LM with a diagonal covariance, and LMjoint, LM trained with the plain, coupled gradient
# (the recipe of this chapter's first version). The paper's own results were not available; the claims
# and thresholds are the paper digest's proposals, re-posed where an exact sampler could not meet
# them, and declared before this experiment ran. Training times are drawn continuously and do not sit
# on the sampler's grid; the network never sees the step size, which enters the loss only through
# $\sigma^2$ and $\kappa$.
#
# **Why decoupled gradients.** In the first version of this chapter LM was trained with the plain
# gradient of its loss, and its score error at $t = 0.1$ came out about four times that of DSM and of
# B3, which uses the same likelihood weighting with $C = I$. In a Gaussian likelihood with a learned
# covariance, a poor score inflates the fitted covariance, and $C^{-1}$ then down-weights the score's
# own error in the loss (the mean-variance coupling that beta-NLL, Seitzer et al. 2022, addresses).
# The stop-gradient removes that weight from the score's gradient for the whole run; a longer $C = I$
# warm start would only delay it, and separate trunks would keep it.

# %%
# Colab set-up: installs the book's package, replib, from its repository (branch main).
# Anywhere else (a local clone, the book build, CI) this cell does nothing.
import sys

if "google.colab" in sys.modules:
    import subprocess

    package = "replib @ git+https://github.com/icml2026-replications/replib-book.git@main"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package],
                         capture_output=True, text=True)
    if pip.returncode != 0:  # show pip's own words, then stop
        print(pip.stdout, pip.stderr)
        raise RuntimeError("installing replib failed: pip's output is printed above")

# %% tags=["parameters"]
profile = None  # "smoke", "book" or "paper"; None reads $REPLIB_PROFILE, else "book"
seeds = None  # list of ints; None takes the profile's seeds
train_steps = None  # Adam steps per network
n_samples = None  # samples per method and number of steps (and fresh target samples)
n_steps_grid = None  # numbers of sampling steps N
methods = None  # subset of LM, B1, B2, B3, B4, LMjoint

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.likelihood_matching import experiment, task

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     train_steps=train_steps, n_samples=n_samples, n_steps_grid=n_steps_grid, methods=methods)
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
# and number of sampling steps (columns). Even an exact sampler is not at distance 0: two samples of
# 4,000 points from the same distribution are apart by the *sampling floor*, about
# $\sqrt{\text{floor}}$ below (floor: the mean squared SW2 of four fresh target samples against the
# target; mean over seeds).

# %%
floor = sampling.groupby("seed")["floor2"].first()
print(f"sampling floor at {cfg.n_samples} points: sqrt(floor) = {np.sqrt(floor).mean():.3f} "
      f"(seeds: {', '.join(f'{v:.3f}' for v in np.sqrt(floor))})")

# %%
shown_methods = [m for m in ["LM", "B1", "B2", "B3", "LMjoint"] if m in cfg.methods]
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

# %% [markdown]
# *Figure 1. Samples (first seed) of each method (rows) with N sampling steps (columns), over a
# fresh target sample in grey.*

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
sns.lineplot(sampling, x="n_steps", y="sw2", hue="label", marker="o", errorbar="sd", ax=axes[0])
sns.lineplot(sampling, x="n_steps", y="nll", hue="label", marker="o", errorbar="sd", ax=axes[1], legend=False)
axes[0].set(xscale="log", yscale="log", xlabel="sampling steps $n$", ylabel="sliced w2 to target")
axes[1].set(xscale="log", xlabel="sampling steps $n$", ylabel="nll bound (nats/dim)")
axes[0].legend(title="", fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. Sliced Wasserstein-2 distance (left) and NLL bound in nats per dimension (right)
# against the number of sampling steps; mean over seeds, band: standard deviation.*

# %% [markdown]
# The NLL bounds in nats per dimension, mean over seeds (lower is better). The data are continuous and
# not dequantised, so the values are not comparable with image benchmarks. The bound is likelihood
# matching's home ground: it is the quantity its loss optimises, one step at a time.

# %%
sampling.pivot_table(index="label", columns="n_steps", values="nll", aggfunc="mean").round(3)

# %% [markdown]
# ## The learned covariance

# %%
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

# %% [markdown]
# *Figure 3. Reverse-transition covariances for one step of N = 10 at a few points x_t (first seed):
# the true one from the analytic Hessian (black), LM's (blue) and the isotropic ones of B1 (orange)
# and B2 (green), as 2-sigma ellipses all drawn around the true mean (so the figure compares
# covariances only, not LM's mean error).*

# %%
learned = hessian[hessian["method"].isin(["LM", "B4", "LMjoint"])]
jacobian = hessian[hessian["method"] == "B1"].assign(rel_error=lambda d: d["jac_rel_error"],
                                                       label="Jacobian of the DSM score")
fig, ax = plt.subplots(figsize=(6, 3.4))
sns.lineplot(pd.concat([learned, jacobian]), x="t", y="rel_error", hue="label", marker="o", errorbar="sd", ax=ax)
ax.set(xlabel="diffusion time $t$", ylabel="relative hessian error")
ax.legend(title="", fontsize="small")
plt.show()

# %% [markdown]
# *Figure 4. Relative Frobenius error of the learned Hessian of log p_t against the analytic one,
# per diffusion time t (mean over seeds and test points; band: standard deviation over seeds), for
# the methods that learn a covariance, and of the Hessian that the DSM network's score already holds
# (its symmetrised Jacobian, the reference of claim c4b).*

# %% [markdown]
# How well each network learned the score itself: mean squared error of $s_\theta$ against the analytic
# score, per diffusion time (mean over seeds and test points). B1 and B2 share the DSM network. And
# the training time of each network (seconds, mean over seeds):

# %%
pd.DataFrame(extras["train"]).groupby("objective")["seconds"].mean().round(2).to_frame("training seconds").T

# %%
hessian.pivot_table(index="label", columns="t", values="score_mse", aggfunc="mean").round(3)

# %% [markdown]
# ## Calibrating the distances with the exact sampler
#
# Before this revision, claims c1 and c3 compared raw distances of 4,000 samples, which an exact
# sampler could not meet: with the analytic score and Hessian, two independent 4,000-point samples are
# about 0.05 apart, and at 200 steps, where every sampler is nearly exact, the relative gap between two
# exact samplers is noise. So each claim is now posed on the distance corrected for the sampling
# floor, $\sqrt{\max(\mathrm{SW}_2^2 - \text{floor}, 0)}$, and every seed first runs the exact samplers
# (analytic score and Hessian: LM\* with the matched covariance, B1\* and B2\* with the isotropic
# variances) through the same metric: preconditions p2 and p3 check that the exact method meets the
# claims c1b and c3b on this seed's samples. The thresholds of c1b (0.8, the digest's) and c3b (4
# times the floor) were checked, before LM's run, on 20 seeds of the exact samplers alone
# (`experiment.oracle_rows(mix, cfg, seed)`, seeds 0-19; the numbers are in `chapter.yml`): the exact
# method met both on every seed, and missed the old c1 on two of three seeds and the old c3 on 14 of
# 20. The corrected distances at $N = 10$ (40,000 samples) and the raw ones at $N = 200$ (4,000
# samples), mean over seeds:

# %%
distance = runs[runs["kind"] == "distance"].assign(
    corrected=lambda d: [task.corrected_sw2(a, b) for a, b in zip(d["sw2"], d["floor2"])])
distance.pivot_table(index="method", columns="n_steps", values=["sw2", "corrected"], aggfunc="mean").round(4)

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its role and threshold before this experiment was
# run (the re-posed ones after the exact samplers' calibration and before LM's run). The value is
# computed per seed from the runs above. A claim holds when the whole 95% interval of the mean over
# seeds clears the threshold, fails when the whole interval misses it, and is undecided when the
# interval contains it; a claim whose
# precondition did not hold is inconclusive. The claims as posed before this revision (c1, c3, c4) are
# shown as measurements, not judged.

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
# Precondition p1's ratio for B3 instead of LM (not judged): B3 trains only a score, with the same
# likelihood weighting $\sigma^2_{t|s} / (1 - \bar\alpha_t)$ as LM and $C = I$, so it separates what the
# weighting does to the score from what learning the covariance does.

# %%
pd.DataFrame(experiment.claim_values(runs, method="B3")).loc[["p1_score_learned"]].round(3)

# %% [markdown]
# ## What we scaled down, and why the effect should survive it
#
# - **The paper itself.** Its method section, hyperparameters and results were not available. The
#   loss, the covariance parameterisation, the schedule and the sampler are reconstructions from exact
#   identities and the abstract; a verdict here tests this reconstruction, not the authors' code.
# - **Data.** A 2-D mixture instead of images: small enough to know the score and Hessian exactly,
#   and anisotropic enough that an isotropic reverse variance is wrong. The optional 8-dimensional
#   digits variant of the digest is not run.
# - **Training budget.** 3,000 steps of a 3 x 64 network per method: every method gets the same
#   budget, but none is trained to convergence, which matters for claim c3b (a residual difference at
#   many steps can come from training rather than from the sampler).
# - **Sample sizes.** 4,000 samples per method and grid point, 40,000 for the claim at $N = 10$; the
#   distances are corrected for the sampling floor, calibrated with the exact sampler.
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
# - **Before this revision** LM was trained with the plain, coupled gradient for 1,500 steps, and
#   every claim failed: c1 (raw SW2 ratio at $N = 10$) 1.62 against $\le 0.8$, c2 $-0.082$ against
#   $\ge 0.05$, c3 (relative gap at $N = 200$) 1.31 against $\le 0.10$, c4 (Hessian error) 0.381
#   against a guessed 0.35. Its score was the problem (about 4x DSM's error at $t = 0.1$), and c1 and c3
#   were posed so that even the exact sampler failed them (see the calibration).
# - **The calibration holds.** With the analytic score and Hessian, LM's sampler at $N = 10$ is at
#   ratio 0.50 of the better isotropic sampler on the corrected distance (p2: 0.513, 0.500, 0.498),
#   and the exact LM and B2 samplers at $N = 200$ differ by 0.18-1.0 floors (p3: 0.391, 0.999,
#   0.180), inside c3b's tolerance of 4. So c1b and c3b are claims the exact method meets.
# - **The rebuild's score is still not good enough: precondition p1 fails** (mean 1.89 against $\le
#   1.5$; seeds 1.29, 1.37, 3.01). Decoupling the gradients fixed the failure the issue named: at
#   $t = 0.1$ LM's mean score error is now 0.84 against DSM's 0.81 (it was about four times DSM's).
#   The gap is at $t = 0.3$, where all errors are small (mean 0.007 for LM, 0.004 for DSM) and one seed
#   is three times DSM's. B3, with the same likelihood weighting and no covariance, sits at 0.006 there,
#   so much of the gap comes from the likelihood weighting, which gives small diffusion steps little
#   weight, rather than from the covariance (B3's own ratio is in the table above).
# - **Why, from pilots of the score networks alone (issue 17's second pass; no claim value looked
#   at).** More data does not close the gap: with batches of 1,024 instead of 256 (same 3,000 steps)
#   both errors at $t = 0.3$ fall (DSM 0.0017-0.0020, LM 0.0029-0.0039), but the ratio rises (1.69,
#   2.27, 1.99), while LM's error at $t = 0.1$ drops *below* DSM's on two seeds (0.72 against 0.75,
#   0.68 against 0.74). Nor does capacity: a trunk of width 128 gives 1.64 on seed 0. The cause is the
#   likelihood weighting itself. The score's term in LM's loss is weighted by
#   $\sigma^2_{t|s} / (1 - \bar\alpha_t)$; averaged over the training step sizes $1/N$,
#   $N \in \{5, 10, 20, 50, 200\}$, that is 0.76 at $t = 0.05$, 0.64 at $t = 0.1$ and 0.44 at
#   $t = 0.3$, where DSM weights every $t$ alike. So LM spends its network on small $t$ at the cost
#   of $t = 0.3$. Changing that weighting would change the method, so this revision keeps it, and p1
#   fails.
# - **So the headline claims are inconclusive, although their values clear.** c1b: 0.747 ± 0.077
#   (seeds 0.732, 0.678, 0.830; seed 2, the one with the poor score, misses 0.8); c2: 0.242 ± 0.004
#   nats per dimension (0.246, 0.243, 0.238; every seed far above 0.05); c3b: 1.26 ± 0.95 floors
#   (0.202, 2.042, 1.548; every seed under 4). We declared that they need a score as good as DSM's;
#   on this rebuild, at 3,000 steps, LM's is not on every seed, so the book does not count them.
# - **c4b fails: LM's learned Hessian is worse than the one a score model already holds** (ratio
#   1.99 ± 0.52; seeds 1.50, 2.54, 1.92). The Hessian head improved (error 0.196 at $t = 0.3$, which
#   would now clear the old guess of 0.35: the measurement c4), but the symmetrised Jacobian of the DSM
#   network's score is about twice as accurate. On this toy, learning the Hessian by likelihood does
#   not beat differentiating a score; whether it does on images, where Jacobians cost $d$ backward
#   passes, this chapter cannot say.
# - **Where the matched covariance helps.** On the sample grid LM is the closest to the target at 5
#   steps (SW2 0.131 against 0.245-0.248 for B1 and B2) and at 10 (0.071 against 0.100 and 0.129); at
#   200 steps all four methods are at 0.075-0.076, about twice the sampling floor of 0.039. Its NLL
#   bound at $N = 20$ is 1.04 nats per dimension against 1.28 for B1 and 2.57 for B3 (mean only), and it
#   is the lowest at every $N$ (at 200 steps only just: 1.035 against B1's 1.052).
# - **The old claims, as measurements.** On the new recipe, c1 (raw ratio) reads 0.716 and c4 0.196,
#   both inside their old thresholds, and c3 0.149 (over 0.10 on two seeds): these are the numbers the
#   old posing gives, not verdicts.
# - **Choices made with numbers in view.** The decoupled recipe is the earlier exploratory LMsg,
#   whose values on the old c1-c3 we had seen; the re-posed claims, p1 and c4b's reference were
#   declared before LM's run, c4b knowing the DSM Jacobian's error from a baseline pilot. An earlier
#   version of this chapter also tried tanh and ReLU trunks (the digest asks for SiLU, which we kept).
#
# ## Summary
#
# We rebuilt likelihood matching from the abstract and exact identities: a loss that learns the score
# and the Hessian of $\log p_t$ together, and a sampler that draws each step from the matched Gaussian.
# On a 2-D mixture with known score and Hessian, trained with decoupled gradients (same loss value and
# minimisers as the plain likelihood-matching loss), it gives the best samples with few steps and the
# best NLL bound, and converges to the baselines with many steps, on distances calibrated so that the
# exact method meets the claims. But its score at $t = 0.3$ is not as good as score matching's on
# every seed, a precondition we declared, so the headline claims are inconclusive rather than
# reproduced; and its learned Hessian is less accurate than the Jacobian of a score-matching network.
#
# ## Exercises
#
# 1. Re-run with `train_steps = 6000`. Does precondition p1 hold, and do the headline claims keep
#    their values?
# 2. Which component of the ring has the worst Hessian error, and why? (Look at where the elongated
#    components overlap after noising.)
# 3. B3 (mean only) and B1 both learn only a score, with different loss weightings, and sample with
#    different isotropic variances. Why is B3's NLL bound so much worse with few steps?
# 4. Run the methods `["LM", "LMjoint", "B1", "B2", "B3"]` and compare LM's score error with that of
#    LMjoint, trained with the plain gradient of the same loss.
