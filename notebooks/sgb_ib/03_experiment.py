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
# # Granular-ball information bottleneck: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say whether clustering granular balls with a structure-aware information bottleneck beats
#    point-level sIB, K-means and spectral clustering on a small multi-view set, and by how much;
# 2. say what the balls buy in compute and what they cost in accuracy;
# 3. re-run the experiment at another scale, threshold or seed set from the `parameters` cell.
#
# **Setting.** Digits-3view: all 1797 digits of scikit-learn (book profile), $K = 10$, three
# non-negative views (64 pixels, 16 projection profiles, 32 orientation bins). SGB-IB (our reading
# of the abstract: MI-purity balls with $\theta = 0.9$, $n_{\min} = 8$, structure-aware IB with
# $\beta^{-1} = 0.01$, $\lambda = 0.05$) against the same balls with $\lambda = 0$, point-level
# multi-view sIB (the same optimiser, restarts, sweep cap and stopping rule on every sample),
# K-means and spectral clustering on the concatenated standardised views. Seeds change the
# pseudo-labels, initialisations and sweep orders; the data are the same for every seed. Runs are
# selected by the IB objective, never by accuracy. The claims were declared before any run compared methods.

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
n = None  # number of digits (a random subset when under 1797)
restarts = None  # draw-and-merge restarts per IB run (best objective kept)
max_sweeps = None  # sweep cap per restart
kmeans_n_init = None  # K-means restarts, for the pseudo-labels and the K-means baseline
K = None  # number of clusters
theta = None  # purity threshold of ball splitting
n_min = None  # smallest ball a split may leave
beta_inv = None  # compression weight beta^-1
lam = None  # weight lambda of the structure term

# %%
import matplotlib.pyplot as plt
import pandas as pd

from replib import core
from replib.papers.sgb_ib import experiment

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds, n=n,
                     restarts=restarts, max_sweeps=max_sweeps, kmeans_n_init=kmeans_n_init, K=K, theta=theta,
                     n_min=n_min, beta_inv=beta_inv, lam=lam)
ledger = core.Ledger("sgb_ib", cfg.profile, cfg.seeds, parameters=vars(cfg))

# %% [markdown]
# ## 1. Every method on every seed

# %%
rows, first = experiment.run_experiment(cfg, progress=core.progress)
df = pd.DataFrame(rows)
summary = df.groupby("method", sort=False)[["acc", "nmi", "t_ib", "m", "sweeps", "ball_oracle_acc"]].agg(["mean", "std"])
summary.round(3)

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
means = df.groupby("method", sort=False)[["acc", "nmi"]].mean()
sds = df.groupby("method", sort=False)[["acc", "nmi"]].std().fillna(0)
means.plot.bar(yerr=sds, ax=ax, rot=15, capsize=3)
ax.set_ylabel("score (mean over seeds)")
ax.set_xlabel("")
ax.set_ylim(0, 1)
plt.show()

# %% [markdown]
# *Figure 1. Clustering accuracy and NMI of each method on Digits-3view, mean and sd over the seeds.*

# %%
fig, ax = plt.subplots(figsize=(5, 2.8))
times = df.dropna(subset=["t_ib"]).groupby("method", sort=False)["t_ib"].mean()
times.plot.barh(ax=ax, logx=True)
ax.set_xlabel("wall seconds of the ib phase (log scale)")
ax.set_ylabel("")
plt.show()

# %% [markdown]
# *Figure 2. Wall time of the IB phase (all restarts) on balls and on points, mean over seeds.*
#
# ## 2. How pure are the balls? (not a claim)
#
# A ball takes one cluster for all its members, so labelling each ball with its true majority class
# sets a ceiling on any ball-level clustering (the `ball_oracle_acc` column above). We rerun SGB-IB
# on the first seed at two more purity thresholds and report the number of balls, the accuracy and
# that ceiling. This sweep was added after the first book-profile run, to explain its verdicts; it
# changes no claim.

# %%
main = df[(df.seed == cfg.seeds[0]) & (df.method == "sgb_ib")].assign(theta=cfg.theta)
sweep = pd.concat([pd.DataFrame(experiment.theta_sweep(cfg)), main[["theta", "m", "acc", "nmi", "ball_oracle_acc"]]])
sweep = sweep.sort_values("theta").reset_index(drop=True)
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(sweep["theta"], sweep["acc"], "o-", label="sgb-ib accuracy")
ax.plot(sweep["theta"], sweep["ball_oracle_acc"], "s--", label="ball-majority ceiling")
ax.axhline(df[df.method == "point sib"]["acc"].mean(), color="grey", ls=":", label="point-level sib")
ax.set_xlabel("purity threshold theta")
ax.set_ylabel("accuracy")
ax.legend()
plt.show()
sweep.round(3)

# %% [markdown]
# *Figure 3. SGB-IB accuracy and the ceiling its balls set, against the purity threshold (first
# seed); the dotted line is point-level sIB.*
#
# ## 3. The claims

# %%
values = experiment.claim_values(rows, cfg)
ledger.record_all(values)
ledger.save()
ledger.table()

# %%
ledger.report()

# %% [markdown]
# ## What we learned
#
# Book profile, seeds 0, 1 and 2 (all 1797 digits). These bullets quote that run.
#
# - **The baseline works (precondition holds).** Point-level multi-view sIB reaches NMI 0.795, 0.799
#   and 0.799 (ACC 0.80), so the IB machinery clusters the digits well; spectral clustering reaches
#   NMI 0.839 (ACC 0.792) and K-means 0.695 on average (ACC 0.680).
# - **The headline fails.** SGB-IB's NMI is 0.667 on average, 0.152, 0.116 and 0.122 *below*
#   point-level sIB (declared: at least 0.02 above), and its ACC (0.686) is 0.124, 0.106 and 0.112
#   below the best baseline (declared: above it). On this toy our reading of the abstract does not
#   cluster more accurately than single-granularity methods.
# - **The balls are not what limits it.** With $\theta = 0.9$ the balls number 28.7 on average
#   (1.6% of the samples, measurement m3), and labelling every ball with its true majority class would
#   reach an accuracy of 0.839 on average (Figure 3), above point-level sIB's 0.80. The loss happens in the
#   ball-level IB: about 30 heavy items for 10 clusters leave draw-and-merge few moves, and because the
#   balls are cut along K-means pseudo-labels, clustering them lands near K-means' own accuracy (0.69
#   against 0.68). Raising $\theta$ hardly adds balls (33 at $\theta = 0.98$): the rule that a split
#   must raise the size-weighted purity stops splitting first.
# - **The efficiency claim holds by a wide margin.** The IB phase on balls is roughly 40 to 180 times
#   faster than on points on every seed (declared: at least 3x). These are wall-clock ratios of a
#   phase that takes well under a second on balls, so they move from run to run (39-181 and 50-87
#   per seed in two book runs); point-level sIB takes about 5-9 s. The reason is structural: a sweep
#   costs $O(mK\sum_v d_v)$ with $m \approx 29$ balls instead of $n = 1797$ points.
# - **The structure term does not help here (fails).** $\lambda = 0.05$ against $\lambda = 0$ on the
#   same balls changes NMI by -0.023, +0.003 and -0.007 (declared: at least +0.01). Our best
#   explanation: with so few balls the graph links nearly every ball to its neighbours of other digits, so rewarding linked balls for
#   sharing a cluster pulls different digits together as often as it keeps one digit together.
#
# These verdicts judge our reconstruction of the abstract's idea, not the authors' algorithm, whose
# purity, split rule, objective and hyperparameters we could not read.
#
# ## What we scaled down, and why the effect should survive it
#
# - **One small data set, no corruption.** The paper's benchmark sets are not named in the abstract;
#   we use Digits-3view only and leave out the digest's synthetic bag-of-words set, the 20%-corrupted
#   variants (its robustness claim) and purity reading A, to fit the time we had. The corrupted
#   variants are where denoising by balls should matter most, so the accuracy verdict may not carry over.
# - **Fewer restarts and sweeps.** 3 restarts and at most 15 sweeps (the digest proposes 5 and 30), the
#   same for balls and points; K-means with 3 restarts for the pseudo-labels and the baseline. Point
#   sIB stopped before the cap on most restarts, so more sweeps would change little.
# - **Why the speed effect should survive.** The ratio follows from $m \ll n$ and grows with $n$; the
#   accuracy effect depends on how pure and how many the balls are, which is where our proposed split
#   rule, not the scale, is the likeliest reason for the failure.
#
# ## Summary
#
# - The point-level sIB baseline learns Digits-3view (NMI 0.80): the rebuild works.
# - SGB-IB, as we reconstruct it, is 13 NMI points below point-level sIB and 11 ACC points below the
#   best baseline: the abstract's accuracy claim fails on this toy.
# - Clustering about 29 balls instead of 1797 points makes the IB phase roughly 40-180 times faster
#   (wall-clock).
# - The structure term ($\lambda = 0.05$) does not help on Digits-3view.
#
# ## Exercises
#
# 1. Rerun with `theta = 0.98` and `n_min = 4`. How many balls do you get, and does the ceiling of
#    Figure 3 rise above point-level sIB's accuracy?
# 2. Set `lam = 0.5`. Does a strong structure term help or hurt on Digits-3view, and why might it?
# 3. Give point-level sIB one restart (`restarts = 1`) and compare its NMI: how much of its accuracy
#    comes from restarts?
