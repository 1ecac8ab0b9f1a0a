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
# # Adaptive damping for stale Shampoo: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say which of the paper's claims about FOAM hold on a small, ill-conditioned training problem, and
#    by how much;
# 2. read the trade-off between eigendecompositions and loss for fixed and adaptive refresh;
# 3. follow FOAM's damping controller on one factor during training.
#
# **Setting.** A deep autoencoder (64-128-64-16-64-128-64, tanh with a linear 16-dimensional
# bottleneck, about 35,000 parameters) reconstructs 1,400 digits (8 x 8) under mean squared error,
# with minibatches of 4 for 1,000 steps. Small batches make the Kronecker factors low rank and make
# them drift fast: the regime where stale inverse roots with a tiny damping misbehave. Shampoo runs on
# the six weight matrices ($p = 2$ per factor, $\beta_1 = 0.9$, $\beta_2 = 0.99$, Adam grafting), plain
# Adam on the biases; factors and eigendecompositions in float64; one thread.
#
# **Configurations.** Stale Shampoo refreshed every $f \in \{10, 50\}$ steps with
# $\epsilon_0 = 10^{-12}$ (the `paper` profile adds $f = 30$ and $100$); FOAM (checks every 10 steps,
# $\tau = 0.75$, $\epsilon_{\max} = 300\,\epsilon_0$); two ablations, FOAM without refresh and FOAM
# without adaptive damping ($\epsilon \equiv \epsilon_0$, refresh whenever $h > \tau$) at $\tau = 4$, the
# threshold that gives it FOAM's number of eigendecompositions (set on the tuning seed from counts
# alone); plain Adam. Every configuration gets the same learning-rate search, and sees the same
# initial weights and minibatches for a given seed. Refreshing at every step ($f = 1$) is too slow for
# the book's budget: it runs only for the first 200 steps, untuned, with the learning rate chosen for
# $f = 10$. The claims and their thresholds were declared in `chapter.yml` before any run that
# measured them: where the paper gives a number (90% fewer eigendecompositions) the threshold is that
# number, elsewhere the paper digest's proposals or parity.

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
steps = None  # training steps per run
lr_grid = None  # learning rates searched for every configuration
tune_steps = None  # steps of each learning-rate trial
configs = None  # stale_f<f>, foam, foam_f<f>, foam_no_refresh, foam_no_adaptive_eps[_tau<tau>], adam
batch_size = None  # minibatch size

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.foam import experiment, method

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     steps=steps, lr_grid=lr_grid, tune_steps=tune_steps, configs=configs, batch_size=batch_size)
ledger = core.Ledger("foam", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## The same learning-rate search for everyone, then the runs
#
# Each configuration trains with every learning rate of the grid for the same number of steps (half
# a run) on a tuning seed that is not an evaluation seed, and keeps the one with the lowest final loss.
# Two choices were made after a first look, in an earlier revision: 500 rather than 300 tuning steps
# (300 favoured a too-large rate for stale $f = 100$), and a lowest rate of $3 \times 10^{-4}$ (Adam had
# picked the lowest rate of the first grid). Neither changed the rates of the configurations in the
# claims, and since no configuration then chose $3 \times 10^{-4}$, this revision drops it again to fit
# the budget (Adam, in no claim, now sits at the grid's lower edge).

# %%
rows, traces = experiment.run_experiment(cfg, progress=core.progress)
runs = pd.DataFrame(rows)
curves = pd.DataFrame(traces["curves"])
pd.Series(traces["lr"], name="learning rate").to_frame().T

# %%
summary = runs.groupby("label", sort=False)[["final_loss", "evds", "evds_L", "evds_R", "evd_rate_L", "evd_rate_R",
                                             "optimizer_seconds", "eigh_seconds", "model_seconds"]].mean()
summary.round(4)

# %% [markdown]
# Means over seeds: final full-batch MSE, eigendecompositions (in all, and of the left and right
# factors), the share of checks that ended in an eigendecomposition (FOAM and its ablations), and
# seconds spent in the optimizer (of which inside `eigh`) and in the model's forward and backward
# passes.

# %%
curves["label"] = curves["config"].map(method.config_label)
mean_curves = curves.groupby(["label", "step"], sort=False)[["loss", "optimizer_seconds"]].mean().reset_index()
mean_curves["family"] = np.where(mean_curves["label"].str.startswith("FOAM"), "foam", "other")
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
style = dict(hue="label", style="family", palette="tab10", lw=1.5)
sns.lineplot(mean_curves, x="step", y="loss", ax=axes[0], **style)
sns.lineplot(mean_curves, x="optimizer_seconds", y="loss", ax=axes[1], legend=False, **style)
axes[0].set(yscale="log", xlabel="step", ylabel="training mse")
axes[1].set(xlabel="optimizer seconds")
handles, labels = axes[0].get_legend_handles_labels()
keep = [i for i, label in enumerate(labels) if label not in ("label", "family", "foam", "other")]
axes[0].legend([handles[i] for i in keep], [labels[i] for i in keep], title="", fontsize="small")
plt.show()

# %% [markdown]
# *Figure 1. Full-batch training loss (mean over seeds) against the step (left) and against the
# cumulative seconds spent in the optimizer (right), per configuration.*

# %% [markdown]
# ## Loss against eigendecompositions

# %%
stats = runs.groupby("label", sort=False).agg(loss=("final_loss", "mean"), sd=("final_loss", "std"),
                                              evds=("evds", "mean"), config=("config", "first"))
stats = stats[stats["evds"] > 0]
stale = stats[stats["config"].str.startswith("stale")].sort_values("evds")
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.plot(stale["evds"], stale["loss"], color="0.6", lw=1)
for label, row in stats.iterrows():
    ax.errorbar(row["evds"], row["loss"], yerr=row["sd"], marker="*" if label == "FOAM" else "o",
                ms=14 if label == "FOAM" else 7, ls="none", label=label)
ax.set(xscale="log", xlabel="eigendecompositions", ylabel="final training mse")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. Final training loss against the number of eigendecompositions (log scale), means over
# seeds with the standard deviation of the loss as error bars. The stale sweep over f is joined by a
# line.*

# %% [markdown]
# Refreshing at every step, for the first 200 steps only (the book profile's side run), against the
# other configurations at the same step:

# %%
side = pd.DataFrame(traces["side_rows"])
at_side = None
if len(side):
    at_side = curves[curves["step"] == int(side["steps"].iloc[0])].groupby("label", sort=False)["loss"].mean()
    at_side = pd.concat([at_side, side.groupby("label")["final_loss"].mean()]).rename(
        f"loss at step {int(side['steps'].iloc[0])}").sort_values()
at_side

# %% [markdown]
# ## Inside FOAM: one factor's damping

# %%
log = pd.DataFrame(traces["controller"])
factor_log = log[(log["config"] == "foam") & (log["factor"] == traces["controller_factor"])]
fig, axes = plt.subplots(2, 1, figsize=(8, 4.5), sharex=True)
axes[0].step(factor_log["step"], factor_log["eps"] / method.EPS0, where="post")
refreshed = factor_log[factor_log["refreshed"]]
axes[0].plot(refreshed["step"], np.ones(len(refreshed)), "rv", label="refresh")
axes[0].axhline(method.EPS_MAX / method.EPS0, color="k", ls="--", lw=1)
axes[0].set(yscale="log", ylabel=r"$\epsilon / \epsilon_0$")
axes[0].legend(fontsize="small")
axes[1].plot(factor_log["step"], factor_log["h"], lw=1)
axes[1].axhline(method.TAU, color="k", ls="--", lw=1)
axes[1].set(yscale="log", xlabel="step", ylabel="proxy $h$")
plt.show()
print(f"damping relative to the median eigenvalue in use: {factor_log['eps_rel'].median():.1e} (median)")

# %% [markdown]
# *Figure 3. FOAM on one factor (the left factor of the first weight matrix, first seed). Top: the
# damping relative to its floor, with the cap dashed and refreshes marked. Bottom: the proxy h at
# each check, with the target tau dashed.*

# %% [markdown]
# ## Which part of FOAM matters

# %%
parts = ["stale f=10", "FOAM", method.config_label(experiment.MATCHED_ABLATION), "FOAM w/o adaptive eps",
         "FOAM w/o refresh"]
parts = [p for p in parts if p in set(runs["label"])]
fig, ax = plt.subplots(figsize=(6.5, 3))
sns.barplot(runs[runs["label"].isin(parts)], y="label", x="final_loss", order=parts, errorbar="sd", ax=ax)
for i, label in enumerate(parts):
    evds = runs.loc[runs["label"] == label, "evds"].mean()
    ax.annotate(f"{evds:.0f} eigendecompositions", (0, i), xytext=(4, 0), textcoords="offset points",
                va="center", color="white", fontsize="small")
ax.set(xlabel="final training mse", ylabel="")
plt.show()

# %% [markdown]
# *Figure 4. Final training loss of FOAM and its two ablations, and of stale f = 10 for reference
# (bars: mean over seeds; error bars: standard deviation).*

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its role and threshold before this experiment was
# run. The value is computed per seed from the runs above. A claim holds when the whole 95% interval
# of the mean over seeds clears the threshold, fails when the whole interval misses it, and is
# undecided when the interval contains it.

# %%
values = experiment.claim_values(runs, traces)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# The verdicts use every seed; here are the per-seed values behind them.

# %%
pd.DataFrame(values).round(4)

# %% [markdown]
# Claim c5's common target, declared before this run: stale $f = 10$'s final loss within c1a's
# tolerance (7%). The target per seed, the optimizer seconds FOAM and stale $f = 10$ need to first
# reach it (their ratio is c5), and the step at which they do (which, unlike the seconds, is the same
# in every run):

# %%
seconds = pd.DataFrame(experiment.times_to_common_target(runs, traces)).T
at_step = pd.DataFrame(experiment.times_to_common_target(runs, traces, key="step")).T.drop(columns="target")
seconds = seconds.rename(columns=lambda c: "target loss" if c == "target" else method.config_label(c) + " s")
seconds.join(at_step.rename(columns=lambda c: method.config_label(c) + " step")).round(4)

# %% [markdown]
# ## What we scaled down, and why the effect should survive it
#
# - **Model and data.** A 35,000-parameter autoencoder on 8 x 8 digits instead of ViTs and ResNets on
#   ImageNet. Deep autoencoders are the classic ill-conditioned problem where Kronecker preconditioners
#   help, and with minibatches of 4 the factors drift fast, so staleness matters at this size.
# - **Damping scale.** The damping is absolute, so the paper's values do not transfer; we keep the
#   paper's ratio $\epsilon_{\max}/\epsilon_0 = 300$ with $\epsilon_0 = 10^{-12}$, tiny against the factors'
#   spectra (the controller figure reports $\epsilon$ relative to the median eigenvalue).
# - **Refreshing at every step** is shown only over 200 steps; the `paper` profile runs it in full.
# - **Timing.** Optimizer seconds are measured on one CPU thread with small matrices, where an
#   eigendecomposition of a 128 x 128 factor is cheap next to Python overhead; on GPUs with large
#   factors the eigendecompositions dominate and FOAM's savings weigh more. The counts of
#   eigendecompositions are the machine-independent measure.
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
# - **Staleness hurts (c4 holds).** Refreshing every 50 steps ends 13% above refreshing every 10 steps
#   (1.11 to 1.17 per seed), and refreshing at every step is best of all over the first 200 steps. (The
#   previous revision's sweep over $f = 10, 30, 50, 100$ gave a final loss rising at each step:
#   0.0084, 0.0089, 0.0095, 0.0103.) In this small-batch regime the factors drift fast enough for
#   stale roots to cost accuracy.
# - **FOAM keeps the accuracy (c1a holds) but saves fewer eigendecompositions than the paper (c1b
#   fails).** Its final loss is 1.01 to 1.03 times that of refreshing every 10 steps, its own check
#   cadence, while it makes 188 eigendecompositions against 1,212: 0.155 of them, 84.5% fewer,
#   short of the paper's 90-95%. Per check, 14% of FOAM's checks of left factors and 15% of right ones
#   end in a refresh, against the paper's 10% and 5% on ViT: our factors are small (at most 128 x 128)
#   and drift fast under minibatches of 4, and on the right factors the drift is no slower than on
#   the left ones. Before this revision, c1b asked for at most 25% and held (0.155 on the same runs).
# - **Adaptive beats a fixed cadence (c2 holds).** FOAM ends at 0.88 to 0.93 times the loss of
#   refreshing every 50 steps, which uses more eigendecompositions (252).
# - **Refresh is necessary (c3 holds).** Without refreshes the adaptive damping only makes the stale
#   roots safer, not right: the loss ends 2.35 to 2.62 times FOAM's, worse even than Adam's.
# - **Damping's own contribution is real but small (p1 and c6 hold).** Without adaptive damping, a
#   refresh threshold of $\tau = 4$ gives 193 eigendecompositions against FOAM's 188 (1.01 to 1.05
#   times, p1), and at that matched count FOAM ends 1.5% lower (0.983 to 0.987 of the ablation's
#   loss, every seed). Early on the order is reversed: at step 200 the ablation is ahead (0.0165
#   against 0.0191): while the loss falls fast, a grown damping weakens the preconditioner, and the
#   damping only pays off later in training. In the
#   previous revision the ablation at FOAM's own $\tau = 0.75$ matched refreshing every 10 steps
#   (0.0085) with 481 eigendecompositions: most of FOAM's saving comes from refreshing on the proxy
#   at all, and adaptive damping, at a matched count, buys the last percent and a half of loss.
# - **FOAM reaches a common target sooner on average, but not on every seed of every run (c5).** The
#   target, declared before the run, is stale $f = 10$'s final loss within c1a's 7%. In steps, which
#   do not depend on the machine, FOAM gets there no sooner: at step 960, 940 and 850 against stale
#   $f = 10$'s 900, 800 and 850. Its steps are cheaper, though: `eigh` is about a third of the stale
#   optimizer's time, and FOAM's optimizer spends about 15-20% less over the run. The two effects
#   nearly cancel, so the seconds ratio sits close enough to 1 for timing noise on a shared machine to
#   decide single seeds. Two earlier book-profile runs of this code gave means of 0.88 and 0.89 and
#   per-seed ratios from 0.69 to 1.04: one cleared 1 on every seed (0.89, 0.98, 0.78; holds), the
#   other on two of three (0.69, 0.95, 1.04; fragile). The tables and generated lines above give the
#   values and verdict of the run in front of you. Before this revision, c5's target was stale $f = 10$'s own
#   final loss; it failed (infinite on two seeds, 0.77 on the third) because FOAM ends 2% above that
#   loss, which tests loss parity (c1a), not speed.
# - **Adam** ends well above every Shampoo variant that refreshes, as expected on this ill-conditioned
#   problem.
#
# ## Summary
#
# On a small-batch deep autoencoder, stale Shampoo loses accuracy as its refresh period grows. FOAM
# comes within 2% of the loss of refreshing at its check cadence with 84.5% fewer
# eigendecompositions, which is short of the paper's 90-95% (that headline fails here), beats a fixed
# period with a larger budget, and reaches a common target loss about 10% sooner in optimizer time on
# average, though its cheaper steps only just outweigh the extra steps it needs, so single seeds can
# go either way (c5 held in one book run and was fragile in another). Both of
# FOAM's parts matter: without refreshes the loss is much worse, and at a matched number of
# eigendecompositions adaptive damping lowers the final loss by a small but consistent 1.5% against
# refreshing on the proxy with the damping at its floor.
#
# ## Exercises
#
# 1. Run FOAM with checks every 5 and every 20 steps (`configs = ["stale_f10", "foam_f5", "foam",
#    "foam_f20"]`). How do the eigendecompositions and the final loss move?
# 2. Run the ablation without adaptive damping at several thresholds (`configs = ["foam",
#    "foam_no_adaptive_eps", "foam_no_adaptive_eps_tau4", "foam_no_adaptive_eps_tau30"]`) and plot
#    its final loss against its eigendecompositions. Where does FOAM sit relative to that curve?
# 3. Re-run with `batch_size = 64`. Does staleness still hurt, and does FOAM still help? (The digest's
#    pilot says no: with large batches the factors barely drift.)
# 4. Claim c5 compares wall-clock time. Which parts of the optimizer step cost time besides `eigh`,
#    and how would their share change on a GPU with 1,024 x 1,024 factors?
