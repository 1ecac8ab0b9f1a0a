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
# # RL-learned augmentation for few-shot forecasting: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. check that the few-shot forecaster and the generator learn before judging the augmentation;
# 2. say which of the paper's claims hold on three short real series: the zoo variance finds
#    over-fitted windows, RL raises the zoo's reward near the anchors, and the augmented data lowers
#    the test error against no augmentation and against the generator without RL;
# 3. read how much of an augmentation gain depends on how much the forecaster over-fits.
#
# **Setting (book profile).** The series of the implementation notebook (El Nino, sunspots, co2), 60
# few-shot training windows each ($L = 36$, $H = 12$), the MLP forecaster 36-64-12 (Adam $3 \times
# 10^{-3}$, 300 full-batch epochs, weight decay 0.1 on El Nino and sunspots, 0.01 on co2, chosen on
# a pilot of the forecaster alone). Per seed and series: a zoo of $K = 5$ fold models and the top
# 50% of windows by zoo variance as anchors (stage 0); the VMAE, 800 steps (stage A); 300 REINFORCE
# iterations on the prior network, 4 samples per anchor, $\lambda = 0.3$ (stage B); 2 generated
# windows per anchor appended to the training set, and 3 forecaster initialisations per method, the
# same for every method (stage C). The methods, all with 60 added windows and the same training:
#
# - **none**: the 60 windows alone;
# - **jitter**: one copy of every window with Gaussian noise, $\sigma = 0.1$;
# - **VMAE without RL**: the stage-A generator on the same anchors, with the same masks and noise;
# - **ReAugment**: the paper's method, stages 0, A, B, C;
# - **random anchors**: ReAugment with stage B and generation on a random half of the windows.
#
# Three seeds; every claim and threshold was declared in `chapter.yml` before the run that measured
# it. The toy's limits: an MLP instead of the paper's Transformers, 60 windows of one univariate
# series instead of five multivariate benchmarks.

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
datasets = None  # subset of elnino, sunspots, co2 (the judged claims need elnino and sunspots)
epochs = None  # full-batch epochs of every forecaster (zoo members and retrained models)
vmae_steps = None  # stage-A pre-training steps of the VMAE
rl_iterations = None  # stage-B REINFORCE iterations
lam = None  # weight of the proximity term in the reward
n_forecasters = None  # forecaster initialisations per method, seed and data set
untuned_run = None  # also run El Nino and sunspots without weight decay (m3, m4)

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from replib import core
from replib.papers.reaugment import experiment

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     datasets=datasets, epochs=epochs, vmae_steps=vmae_steps, rl_iterations=rl_iterations, lam=lam,
                     n_forecasters=n_forecasters, untuned_run=untuned_run)
ledger = core.Ledger("reaugment", cfg.profile, cfg.seeds, parameters=vars(cfg))
labels = {"none": "no augmentation", "jitter": "jitter", "vmae": "VMAE without RL", "reaugment": "ReAugment",
          "random_anchors": "random anchors"}
colors = {"none": "0.45", "jitter": "C2", "vmae": "C1", "reaugment": "C0", "random_anchors": "C4"}
cfg

# %% [markdown]
# ## First, the rebuild: does the forecaster learn, does the generator reconstruct?

# %%
results = experiment.run_experiment(cfg, progress=core.progress)
mse = results["mse"].groupby(["seed", "dataset", "method"])["mse"].mean().reset_index()
reference = results["reference"].merge(mse[mse.method == "none"].drop(columns="method"), on=["seed", "dataset"])
reference.groupby("dataset")[["lookback_mean", "seasonal_naive", "mse", "reconstruction"]].mean().rename(
    columns={"mse": "mlp_no_augmentation", "reconstruction": "vmae_reconstruction"}).round(4)

# %% [markdown]
# Test MSE in standardised units (mean over seeds) of the look-back mean, the seasonal naive
# forecast and the few-shot MLP without augmentation (p1 compares the last with the first), and the
# VMAE's reconstruction error at the end of stage A (p2).
#
# ## Stage 0: does the zoo variance find the over-fitted windows?

# %%
windows = results["windows"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
first = windows[windows.seed == cfg.seeds[0]]
for name, group in first.groupby("dataset", sort=False):
    axes[0].hist(np.log10(group.zoo_variance), bins=20, alpha=0.5, label=name)
    axes[0].axvline(np.log10(group[group.anchor].zoo_variance.min()), lw=0.8, ls="--",
                    color=axes[0].patches[-1].get_facecolor()[:3])
axes[0].set(xlabel="log10 zoo variance", ylabel="windows")
axes[0].legend(fontsize="small")
for anchor, marker in [(False, "o"), (True, "^")]:
    here = first[first.anchor == anchor]
    axes[1].scatter(here.in_fold, here.out_of_fold, s=14, marker=marker, alpha=0.7,
                    c=[f"C{experiment.CLAIM_DATASETS.index(d) if d in experiment.CLAIM_DATASETS else 2}"
                       for d in here.dataset], label="anchors" if anchor else "other windows")
lims = [first[["in_fold", "out_of_fold"]].min().min(), first[["in_fold", "out_of_fold"]].max().max()]
axes[1].plot(lims, lims, "k--", lw=0.8)
axes[1].set(xscale="log", yscale="log", xlabel="in-fold error", ylabel="out-of-fold error")
axes[1].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 1. Stage 0 on the first seed. Left: the zoo variance of the 60 training windows per series
# (log scale), the dashed lines the cut above which windows are anchors. Right: each window's
# out-of-fold error against its mean in-fold error (colours: El Nino C0, sunspots C1, co2 C2;
# triangles: anchors). Windows far above the diagonal are fitted when seen and missed when held
# out.*

# %%
def fold_ratio(group):
    return group.out_of_fold.mean() / group.in_fold.mean()


gaps = windows.groupby(["dataset", "seed", "anchor"]).apply(fold_ratio, include_groups=False).unstack("anchor")
gaps.columns = ["other_windows", "anchors"]
gaps["anchors_over_others"] = gaps.anchors / gaps.other_windows
gaps.groupby("dataset").mean().round(3)

# %% [markdown]
# Out-of-fold over in-fold zoo error of the anchors and of the other windows (mean over seeds); c1
# asks for a ratio of at least 1.5 between them.
#
# ## Stage B: does RL raise the zoo's reward near the anchors?

# %%
rl = results["rl"]
fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
for (name, method), group in rl.groupby(["dataset", "method"], sort=False):
    curve = group.groupby("iteration")[["reward", "variance", "distance"]].mean()
    style = "-" if method == "reaugment" else ":"
    color = f"C{list(cfg.datasets).index(name)}"
    for ax, column in zip(axes, ["reward", "variance", "distance"]):
        ax.plot(curve.index, curve[column], style, color=color, lw=1,
                label=f"{name}, {labels[method]}" if column == "reward" else None)
axes[0].set(xlabel="reinforce iteration", ylabel="mean reward")
axes[1].set(xlabel="reinforce iteration", ylabel="mean zoo variance", yscale="log")
axes[2].set(xlabel="reinforce iteration", ylabel="mean anchor distance", yscale="log")
fig.legend(fontsize="small", ncol=3, loc="upper center", bbox_to_anchor=(0.5, 0.0))
fig.subplots_adjust(wspace=0.35)
plt.show()

# %% [markdown]
# *Figure 2. Stage B per series (colours) on the variance anchors (solid) and on random anchors
# (dotted), mean over seeds: the batch-mean reward, the zoo variance of the sampled windows and their
# mean squared distance to the anchors.*

# %%
generated = results["generated"]
generated.groupby(["dataset", "method"])[["zoo_variance", "distance"]].mean().rename(index=labels).round(4)

# %% [markdown]
# The windows that stage C appends, mean over seeds: zoo variance and mean squared distance to their
# anchors, before RL (VMAE without RL), after it (ReAugment) and after RL on random anchors (c2a
# compares the first two, c2b bounds the second's distance by 0.25).

# %%
examples = results["examples"]
example_set = "sunspots" if "sunspots" in cfg.datasets else cfg.datasets[0]
here = examples[(examples.seed == cfg.seeds[0]) & (examples.dataset == example_set)]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), sharey=True)
for ax, method in zip(axes, ["vmae", "reaugment"]):
    rows = here[here.method == method]
    for w in rows.window:
        ax.plot(w, color=colors[method], lw=0.8, alpha=0.8)
    ax.plot(rows.anchor.iloc[0], color="k", lw=1.5, label="anchor")
    ax.axvline(cfg.lookback - 0.5, color="0.5", ls=":", lw=0.8)
    ax.set(xlabel="step in the window (look-back | target)", title=labels[method])
axes[0].set(ylabel="standardised value")
axes[0].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 3. The anchor of highest zoo variance (black) on the first seed's sunspot windows, and five
# windows generated from it (each with its own random mask and latent), before RL (left) and after
# (right); the dotted line separates the look-back from the target.*
#
# ## Stage C: does the augmented data lower the test error?

# %%
table = mse.groupby(["dataset", "method"])["mse"].agg(["mean", "std"]).unstack("method")
table.rename(columns=labels).round(4)

# %%
fig, axes = plt.subplots(1, len(cfg.datasets), figsize=(4.5 * len(cfg.datasets), 3.6))
for ax, name in zip(np.atleast_1d(axes), cfg.datasets):
    per_seed = mse[mse.dataset == name].pivot(index="seed", columns="method", values="mse")
    per_seed = per_seed.div(per_seed["none"], axis=0)[list(experiment.METHODS)]
    for i, m in enumerate(per_seed.columns):
        ax.scatter(np.full(len(per_seed), i), per_seed[m], color=colors[m], alpha=0.5, s=15)
        ax.errorbar(i, per_seed[m].mean(), yerr=per_seed[m].std() if len(per_seed) > 1 else None, fmt="o",
                    color=colors[m], markersize=8, capsize=3)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(0.98, color="k", ls="--", lw=0.8)
    ax.set_xticks(range(len(per_seed.columns)), [labels[m] for m in per_seed.columns], rotation=35, ha="right")
    ax.set(title=name, ylabel="test mse / no augmentation")
fig.subplots_adjust(wspace=0.35)
plt.show()

# %% [markdown]
# *Figure 4. Test MSE of each method relative to no augmentation, per series (small dots: seeds,
# each a mean over forecaster initialisations; large dots and error bars: mean and standard deviation
# over seeds; the dashed line is h1's threshold, 0.98).*
#
# ## With the digest's forecaster recipe (no weight decay)

# %%
untuned = results["untuned_mse"]
if len(untuned):
    untuned_mse = untuned.groupby(["seed", "dataset", "method"])["mse"].mean().reset_index()
    display(untuned_mse.groupby(["dataset", "method"])["mse"].agg(["mean", "std"]).unstack("method")
            .rename(columns=labels).round(4))

# %% [markdown]
# The whole run again on El Nino and sunspots with every forecaster (zoo members and retrained
# models) trained without weight decay, the recipe of the digest's pilot, which the base-model pilot
# found over-fitted (m3, m4; measurements, not judged).
#
# ## The claims

# %%
values = experiment.claim_values(results, cfg)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# ## What we learned
#
# *Written for the book-profile run (three seeds); the numbers above come from whatever run
# produced this page.*
#
# - **The rebuild works (p1 holds, 0.463 on every seed; p2 holds, 0.00865).** Without augmentation
#   the few-shot MLP forecasts El Nino with a test MSE of 0.544 and sunspots with 1.05 (standardised
#   units), against 1.17 and 2.29 for repeating the look-back mean and 0.62 and 1.24 for the
#   seasonal naive forecast. This needed weight decay: with the digest's recipe (none) the same MLP
#   scored 1.32 and 3.06, worse than the look-back mean. The VMAE reconstructs the windows with a
#   per-step MSE below 0.009.
# - **The zoo variance points the right way, but weakly (c1 fails, 1.25 ± 0.05, 1.20 to 1.30 per
#   seed, threshold 1.5).** The out-of-fold over in-fold error of the anchors is 1.72 against 1.29
#   for the other windows on El Nino, 1.83 against 1.44 on sunspots (1.14 times on co2). A
#   regularised forecaster memorises little, so there is little for the zoo to find; the theory
#   notebook's flexible polynomial gave 3.0 against 1.1.
# - **RL does what it is asked (c2a holds, 1.40 ± 0.15, 1.25 to 1.54 per seed; c2b holds, at most
#   0.052).** Stage B raised the zoo variance of the generated windows 1.68 times on sunspots and
#   1.13 times on El Nino, while their mean squared distance to the anchors stayed below 0.05, far
#   inside the bound of 0.25. Before RL the VMAE's windows are near copies of their anchors
#   (distance 0.007 on El Nino, 0.035 on sunspots).
# - **The headline fails: ReAugment raised the test error (h1 fails, 1.19 ± 0.03; h2 fails, 1.05 ±
#   0.02; no seed clears either).** With ReAugment's windows added, the test MSE rose from 0.544 to
#   0.585 on El Nino (+8%) and from 1.05 to 1.37 on sunspots (+30%). The same anchors' windows before
#   RL already hurt (0.577 and 1.31), and RL, by steering them toward higher zoo variance, made it
#   worse. Jitter changed nothing (0.546 and 1.055), so ReAugment also loses to it (c3 fails, 1.19).
# - **Our best explanation: the anchors are the windows the forecaster should not copy.** For a
#   regularised forecaster, the windows the zoo fits worst out of fold are the unusual ones, and the
#   near-copies triple their weight in training. Random anchors, with the same RL stage, hurt much
#   less (m1 0.88 ± 0.05: +2% and +6% over no augmentation): in this toy *where* to augment matters,
#   but in the opposite direction to the paper's. On co2 (m2 1.03) nothing helped, as in the
#   digest's pilot.
# - **Gains appear only for the over-fitted forecaster, and any augmenter gives them (m3 0.993,
#   0.973 to 1.007 per seed; m4 1.02).** Without weight decay, every augmenter lowered El Nino's
#   error by 3% to 5% (no augmentation 1.32; ReAugment, the VMAE without RL and jitter 1.28, random
#   anchors 1.25) and none helped sunspots (3.06 against 3.11 for ReAugment). So the gains of the
#   digest's pilot look like the regularisation of a forecaster that memorises its few windows,
#   which a tuned weight decay supplies far better (1.32 to 0.54).
#
# ## What we scaled down, and why the effect should survive it
#
# - **The forecaster.** An MLP 36-64-12 instead of the paper's Transformers. The public reviews saw
#   the largest gains for a vanilla Transformer and marginal ones for PatchTST and iTransformer,
#   which fits what we found: the gains need a forecaster that over-fits. We tuned the base model
#   before judging (weight decay chosen on the forecaster alone), and every method trains with it.
# - **The data.** Three univariate series, 60 training windows each, instead of five multivariate
#   benchmarks; 46 to 173 test windows per series. Per-seed spreads are small (the standard
#   deviation of h1 is 0.03 against a 0.21 gap to its threshold), so more seeds would not change the
#   verdicts.
# - **The method.** The reward's formula is the digest's bounded reconstruction (the paper's could
#   not be read), $K = 5$, a small VMAE (latent 8, hidden 64), 300 REINFORCE iterations on the prior
#   network with the decoder fixed, 2 windows per anchor, and a zoo that is not retrained during
#   stage B (whether the paper's is, is not stated). The mechanism the paper describes is
#   architecture-free and the toy reproduces it (RL raises the zoo's reward near the anchors), so
#   that part should survive at scale. What may not: our VMAE's windows are near copies of their
#   anchors, so stage C mostly re-weights the training set; a larger generator with more diverse
#   windows, or a different reward, could change the sign of h1. The reward's form is the largest
#   unknown of this rebuild.
#
# ## Reading the verdicts

# %%
ledger.report()

# %% [markdown]
# ## Summary
#
# On three short real series the pieces of ReAugment work as described: the model-zoo variance
# leans toward windows with a larger out-of-fold gap (but by 1.25 times, not the 1.5 declared), and
# REINFORCE on the VMAE's prior raises the zoo's variance of the generated windows 1.4 times while
# keeping them close to their anchors. The paper's headline does not hold here: with a forecaster
# tuned to learn from 60 windows, ReAugment's windows raised the test error by 19% on average
# against no augmentation and by 5% against the same generator without RL, on every seed, and
# generic jitter did no harm. Random anchors hurt less than the anchors the zoo chose, and the only
# gains (about 3%, on El Nino) came with an over-fitted forecaster and from every augmenter alike.
#
# ## Exercises
#
# 1. Run with `-p lam=0.05`. The RL stage may now move further from the anchors: does the zoo
#    variance of the generated windows rise, and does the test error follow?
# 2. The anchors are the windows the zoo gets wrong out of fold. Duplicating them gives them more
#    weight in training. Using the table of stage C, compare the VMAE without RL with random
#    anchors: what does that say about *which* windows should be augmented for a regularised
#    forecaster?
# 3. Run with `-p epochs=100` (a forecaster stopped early). Does augmentation help a forecaster that
#    under-fits rather than over-fits?
