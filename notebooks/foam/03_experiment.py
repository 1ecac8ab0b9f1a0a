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
# **Configurations.** Stale Shampoo refreshed every $f \in \{10, 30, 50, 100\}$ steps with
# $\epsilon_0 = 10^{-12}$; FOAM (checks every 10 steps, $\tau = 0.75$, $\epsilon_{\max} = 300\,\epsilon_0$);
# two ablations, FOAM without refresh and FOAM without adaptive damping; plain Adam. Every
# configuration gets the same learning-rate search, and sees the same initial weights and minibatches
# for a given seed. Refreshing at every step ($f = 1$) is too slow for the book's budget: it runs
# only for the first 200 steps, untuned, with the learning rate chosen for $f = 10$. The claims'
# thresholds are the ones the paper digest proposed, declared in `chapter.yml` before any run.

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
steps = None  # training steps per run
lr_grid = None  # learning rates searched for every configuration
tune_steps = None  # steps of each learning-rate trial
configs = None  # configurations: stale_f<f>, foam, foam_f<f>, foam_no_refresh, foam_no_adaptive_eps, adam
batch_size = None  # minibatch size

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.foam import experiment, method

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, seeds=seeds, steps=steps, lr_grid=lr_grid,
                     tune_steps=tune_steps, configs=configs, batch_size=batch_size)
ledger = core.Ledger("foam", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## The same learning-rate search for everyone, then the runs
#
# Each configuration trains with every learning rate of the grid for the same number of steps (half
# a run) on a tuning seed that is not an evaluation seed, and keeps the one with the lowest final loss.
# Two choices were made after a first look: 500 rather than 300 tuning steps (300 favoured a too-large
# rate for stale $f = 100$), and the grid's lowest rate $3 \times 10^{-4}$ (Adam had picked the lowest
# rate of the first grid). Neither changed the rates of the configurations in the claims.

# %%
rows, traces = experiment.run_experiment(cfg, progress=core.progress)
runs = pd.DataFrame(rows)
curves = pd.DataFrame(traces["curves"])
pd.Series(traces["lr"], name="learning rate").to_frame().T

# %%
summary = runs.groupby("label", sort=False)[["final_loss", "evds", "evds_L", "evds_R", "optimizer_seconds",
                                             "eigh_seconds", "model_seconds"]].mean()
summary.round(4)

# %% [markdown]
# Means over seeds: final full-batch MSE, eigendecompositions (in all, and of the left and right
# factors), and seconds spent in the optimizer (of which inside `eigh`) and in the model's forward
# and backward passes.

# %% mystnb={"figure": {"caption": "Full-batch training loss (mean over seeds) against the step (left) and against the cumulative seconds spent in the optimizer (right), per configuration.", "name": "foam-loss"}}
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
# ## Loss against eigendecompositions

# %% mystnb={"figure": {"caption": "Final training loss against the number of eigendecompositions (log scale), means over seeds with the standard deviation of the loss as error bars. The stale sweep over f is joined by a line.", "name": "foam-pareto"}}
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

# %% mystnb={"figure": {"caption": "FOAM on one factor (the left factor of the first weight matrix, first seed). Top: the damping relative to its floor, with the cap dashed and refreshes marked. Bottom: the proxy h at each check, with the target tau dashed.", "name": "foam-controller"}}
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
# ## Which part of FOAM matters

# %% mystnb={"figure": {"caption": "Final training loss of FOAM and its two ablations, and of stale f = 10 for reference (bars: mean over seeds; error bars: standard deviation).", "name": "foam-ablation"}}
parts = [p for p in ["stale f=10", "FOAM", "FOAM w/o adaptive eps", "FOAM w/o refresh"] if p in set(runs["label"])]
fig, ax = plt.subplots(figsize=(6.5, 3))
sns.barplot(runs[runs["label"].isin(parts)], y="label", x="final_loss", order=parts, errorbar="sd", ax=ax)
for i, label in enumerate(parts):
    evds = runs.loc[runs["label"] == label, "evds"].mean()
    ax.annotate(f"{evds:.0f} eigendecompositions", (0, i), xytext=(4, 0), textcoords="offset points",
                va="center", color="white", fontsize="small")
ax.set(xlabel="final training mse", ylabel="")
plt.show()

# %% [markdown]
# ## The claims
#
# Each claim was declared in `chapter.yml` with its role and threshold before this experiment was
# run. The value is computed per seed from the runs above. A claim holds when the mean over seeds and
# every seed clear the threshold, and is fragile when the mean clears it but some seed does not.

# %%
values = experiment.claim_values(runs, traces)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# The verdicts use every seed; here are the per-seed values behind them. Claim c5 divides by
# stale $f = 10$'s *total* optimizer time, as declared.

# %%
pd.DataFrame(values).round(4)

# %% [markdown]
# Claim c5's target is stale $f = 10$'s own final loss. For the record (not a declared claim), the
# optimizer seconds each configuration needs to come within 7% of that loss, the tolerance of c1a:

# %%
target_time = {}
for seed in cfg.seeds:
    by_config = curves[curves["seed"] == seed]
    target = 1.07 * runs[(runs["seed"] == seed) & (runs["config"] == "stale_f10")]["final_loss"].iloc[0]
    for config in ["stale_f10", "foam"]:
        target_time[(seed, config)] = experiment.time_to_loss(
            by_config[by_config["config"] == config].to_dict("records"), target)
pd.Series(target_time).unstack().rename(columns=method.config_label).round(3)

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
# - **Staleness hurts, steadily (c4 holds).** Refreshing every 10, 30, 50 and 100 steps gives a final
#   loss that rises at each step of the sweep, and refreshing at every step is best of all over the
#   first 200 steps. In this small-batch regime the factors drift fast enough for stale roots to cost
#   accuracy.
# - **FOAM keeps most of the accuracy with a fraction of the eigendecompositions (c1a, c1b hold).**
#   Its final loss is within a few percent of refreshing every 10 steps while it uses about a sixth of
#   the eigendecompositions (and about 2% of refreshing at every step). Against a fixed cadence with a
#   similar budget it wins clearly: it beats refreshing every 50 steps while using fewer
#   eigendecompositions (c2 holds).
# - **Refresh is necessary (c3 holds).** Without refreshes the adaptive damping only makes the stale
#   roots safer, not right: the loss ends about 2.5 times FOAM's, worse even than Adam's.
# - **Both parts of FOAM save eigendecompositions.** Refreshing only when the proxy exceeds $\tau$, with
#   the damping kept at its floor (the first ablation), already saves about 60% of the
#   eigendecompositions of refreshing every 10 steps at the same loss. Adaptive damping cuts them by a
#   further factor of about 2.5, for a few percent more loss: raising $\epsilon$ is what lets FOAM wait
#   while the proxy is above $\tau$, which with $\epsilon_0 = 10^{-12}$ is most of the time (controller
#   figure).
# - **The wall-clock claim fails (c5).** It fails because of the loss, not the clock: FOAM's final loss
#   stays a few percent above that of refreshing every 10 steps on every seed (c1a), so on two seeds
#   of three it never reaches that target and the ratio is infinite (on the third its loss touches
#   the target once along the way, well inside the stale optimizer's time: a wall-clock ratio, 0.7 to
#   0.8 in our runs, which moves from run to run). Its optimizer does spend about 15% less time in
#   total, and it comes within 7% of that target (the table above) about 10% sooner; the gain is small
#   because at these sizes an eigendecomposition is cheap, about a third of the stale optimizer's time.
# - **Adam** ends well above every Shampoo variant that refreshes, as expected on this ill-conditioned
#   problem.
#
# ## Summary
#
# On a small-batch deep autoencoder, stale Shampoo loses accuracy as its refresh period grows, and FOAM
# recovers nearly the accuracy of frequent refreshes with about a sixth of the eigendecompositions of
# refreshing every 10 steps, beating a fixed period with a similar budget. Both of FOAM's parts
# matter: without refreshes the loss is much worse; refreshing on the proxy alone saves most
# eigendecompositions at no loss, and adaptive damping saves another factor of 2.5 for a few percent
# of loss. Because FOAM ends slightly above the loss of frequent refreshes, it reaches that loss on
# only one seed of three, and the wall-clock claim fails.
#
# ## Exercises
#
# 1. Run FOAM with checks every 5 and every 20 steps (`configs = ["stale_f10", "foam_f5", "foam",
#    "foam_f20"]`). How do the eigendecompositions and the final loss move?
# 2. Re-run with `batch_size = 64`. Does staleness still hurt, and does FOAM still help? (The digest's
#    pilot says no: with large batches the factors barely drift.)
# 3. Claim c5 compares wall-clock time. Which parts of the optimizer step cost time besides `eigh`,
#    and how would their share change on a GPU with 1,024 x 1,024 factors?
