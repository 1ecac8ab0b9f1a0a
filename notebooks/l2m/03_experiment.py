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
# # In-context feature acquisition: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say whether one small transformer, pre-trained on synthetic tasks, predicts a new task's labels
#    in context better than a model trained on that task's few rows;
# 2. say whether its selector head acquires informative features first, and how its acquisition
#    curve compares with a per-task MLP with a GDFS-style selector and with random picks;
# 3. re-run the experiment at another size or seed set from the `parameters` cell.
#
# **Setting.** Tasks from the prior of the theory notebook: six features $x \sim U(-2, 2)^6$, a
# label that depends on an informative subset of one to three of them (sparse linear at the book
# profile, noise sd 0.1, unit label variance), and retrospective MCAR missingness in the context
# rows at a per-feature rate drawn from $U(0, 0.5)$. L2M is pre-trained on fresh tasks (context sizes
# 4 to 24), then its selector is trained with the encoder frozen. On 100 held-out tasks per seed we
# measure, with 24 fully observed target rows per task: the NLL with every feature observed at
# context sizes 4, 8, 16 and 24, and, at 16 context rows, the NLL after each of the six
# acquisitions. The per-task baselines see exactly the same context rows and missing entries.

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
prior = None  # task prior: "linear" (sparse linear labels) or "tanh" (random tanh network)
pretrain_steps = None  # pre-training steps of the in-context predictor
policy_steps = None  # training steps of the selector head (encoder frozen)
width = None  # model width (d_model); the embedder and heads use twice this
n_test_tasks = None  # held-out tasks per seed
p_max = None  # the largest MCAR missingness rate of a feature (training and test contexts)
mlp_epoch_grid = None  # epochs the per-task MLP's tuning chooses from

# %%
import matplotlib.pyplot as plt
import numpy as np

from replib import core
from replib.papers.l2m import experiment

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     prior=prior, pretrain_steps=pretrain_steps, policy_steps=policy_steps, width=width,
                     n_test_tasks=n_test_tasks, p_max=p_max, mlp_epoch_grid=mlp_epoch_grid)
ledger = core.Ledger("l2m", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## Training and evaluating, seed by seed
#
# Each seed pre-trains its own L2M, trains its selector, tunes the per-task MLP's epochs per context
# size on 50 separate prior tasks, then evaluates every model on the same held-out tasks.

# %%
results = experiment.run_experiment(cfg, progress=core.progress)
results["seconds"]

# %%
training = results["training"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
for ax, stage in zip(axes, ["pretrain", "policy"]):
    for seed, group in training[training.stage == stage].groupby("seed"):
        smooth = group["loss"].rolling(25, min_periods=1).mean()
        ax.plot(group["step"], smooth, label=f"seed {seed}")
    ax.set(xlabel="step", ylabel="training nll (running mean)", title=stage)
axes[0].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 1. Training losses: the prequential NLL of pre-training (left) and the selector's
# next-step NLL (right), running mean over 25 steps, per seed.*

# %% [markdown]
# ## Uncertainty in context against a model per task
#
# NLL with every feature of the target observed, mean over tasks, targets and seeds. The per-task
# MLP uses the epochs its tuning chose (table below); the label marginal is a Gaussian fitted to
# the context labels.

# %%
context = results["context"]
context.pivot_table(index="context", columns="model", values="nll").round(3)

# %%
tuning = results["tuning"]
tuning[tuning.chosen].pivot_table(index="context", columns="seed", values="epochs")

# %%
fig, ax = plt.subplots(figsize=(6, 3.6))
labels = {"l2m": "L2M (in context)", "mlp": "masked MLP per task", "marginal": "context-label Gaussian"}
for name, group in context.groupby("model"):
    curve = group.groupby("context")["nll"].agg(["mean", "min", "max"])
    ax.plot(curve.index, curve["mean"], "o-", label=labels[name])
    ax.fill_between(curve.index, curve["min"], curve["max"], alpha=0.15)
ax.set(xlabel="context size (labelled rows)", ylabel="nll, all features", xticks=experiment.CONTEXT_SIZES)
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. NLL with every feature observed against the number of labelled context rows, for
# L2M, the masked MLP trained on each task's context rows, and a Gaussian fitted to the context
# labels; mean over seeds, bands from the lowest to the highest seed.*

# %% [markdown]
# ## Acquiring features one at a time
#
# At 16 context rows: the NLL after $k$ acquisitions, for L2M with its selector and with random
# picks, and for the per-task MLP with its GDFS selector and with random picks.

# %%
curves = results["curves"]
curves.pivot_table(index="k", columns="method", values="nll").round(3)

# %%
fig, ax = plt.subplots(figsize=(6, 3.6))
names = {"l2m": "L2M selector", "l2m_random": "L2M, random picks", "mlp_gdfs": "MLP + GDFS",
         "mlp_random": "MLP, random picks"}
for name, group in curves.groupby("method"):
    curve = group.groupby("k")["nll"].agg(["mean", "std"])
    ax.errorbar(curve.index, curve["mean"], yerr=curve["std"], marker="o", capsize=3, label=names[name])
ax.set(xlabel="acquired features", ylabel="nll")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 3. NLL against the number of acquired features at 16 context rows; mean over seeds, error
# bars one standard deviation over seeds.*

# %% [markdown]
# ## Which feature comes first
#
# The first pick depends only on the context (nothing of the target is known yet). For each
# feature we count how often it is picked first, separately over the tasks where it is informative
# and where it is not.

# %%
picks = results["picks"]
info = results["informativeness"]
first = picks.merge(info, left_on=["seed", "task", "pick"], right_on=["seed", "task", "feature"])
rates = {}
for name in ["l2m", "mlp_gdfs", "l2m_random"]:
    chosen = picks[picks.method == name][["seed", "task", "pick"]]
    table = info.merge(chosen, on=["seed", "task"])
    table["picked"] = table["feature"] == table["pick"]
    rates[name] = table.groupby(["feature", "informative"])["picked"].mean().unstack()
fig, axes = plt.subplots(1, 3, figsize=(11, 3.2), sharey=True)
for ax, (name, rate) in zip(axes, rates.items()):
    x = np.arange(len(rate))
    ax.bar(x - 0.2, rate[True], 0.4, label="informative")
    ax.bar(x + 0.2, rate[False], 0.4, label="not informative")
    ax.set(title=names[name], xlabel="feature", xticks=x)
axes[0].set(ylabel="first-pick frequency")
axes[0].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 4. First-pick frequency of each feature over the held-out tasks where it is informative
# (left bars) and where it is not (right bars), for the L2M selector, the per-task GDFS selector and
# random picks; all seeds.*

# %%
picks.groupby("method")["informative"].mean().round(3)

# %% [markdown]
# ## The claims

# %%
values = experiment.claim_values(results, cfg)
ledger.record_all(values)
ledger.save()
ledger.table()

# %% [markdown]
# ## What we learned
#
# *Written for the book-profile run (three seeds, 100 held-out tasks each); the numbers above come
# from whatever run produced this page.*
#
# - **The base model learns in context (p1 holds: 0.77 nats, 0.76 to 0.79 per seed).** With 16
#   context rows and every feature observed, L2M's NLL is 0.72 against 1.49 for a Gaussian fitted
#   to the context labels; it keeps falling with the context (1.52, 1.05, 0.72, 0.57 at 4, 8, 16
#   and 24 rows), as a posterior predictive should. It is still far from the prior's Bayes
#   predictor (about -0.9 nats), so the model is small and short-trained, not converged.
# - **In-context uncertainty beats the per-task model (h1 holds: +0.36 nats, 0.33 to 0.38).** The
#   masked MLP trained on the same 16 rows, with its epochs tuned on prior tasks, reaches 1.07. This
#   is the paper's first claim, and the one the acquisition claims rest on.
# - **But the gain is not largest at the smallest context (m3 fails: -0.11, every seed below 0).**
#   L2M's advantage over the MLP is 0.06 nats at 4 rows, 0.46 at 8, 0.36 at 16 and 0.17 at 24.
#   At 4 rows both models stay near the label variance (the MLP's tuning stops it after 10 epochs,
#   close to its initial, uninformative prediction), and our small L2M has not learned to extract
#   much from four rows; the advantage peaks at 8 rows.
# - **The selector did not learn to acquire (m1 fails: -0.04 nats against random picks, one seed
#   of three above 0; m2 fails: 33% of first picks informative, 28% to 40%, chance is about a
#   third).** Its training loss did not fall (Figure 1, right), and its NLL curve lies on top of
#   random acquisition with the same predictor (Figure 3). A one-seed exploratory run outside the
#   ledger, with four times the selector steps (800) and a learning rate of 0.01, did not change
#   that (first picks 31% informative). With the encoder frozen, the selector can only read what
#   the query's hidden state already holds; after 1,200 pre-training steps that state evidently
#   carries the prediction, not which of the unobserved features matter.
# - **So the headline on acquisition fails here (h2 fails: -0.23 nats, every seed below 0).** The
#   per-task MLP with its GDFS selector, trained on the 16 context rows, picks an informative
#   feature first on 97% of the tasks and reaches 0.93 after one acquisition (L2M: 1.34);
#   its curve then rises as the overfit MLP sees more inputs (1.07 with all six), but averaged over
#   budgets 1 to 5 it stays 0.23 nats below L2M's (0.94 against 1.17).
#   In this rebuild the paper's in-context uncertainty holds, and its in-context acquisition does
#   not: the failure sits in the frozen-encoder selector at this scale, not in the predictor.
#
# ## What we scaled down, and why the effect should survive it
#
# - **The model.** About 25,000 parameters (width 32, two encoder layers) instead of about four
#   million, pre-trained for 1,200 steps of 8 tasks instead of 100,000 steps of 8 tasks of 500 rows.
#   The mechanism, a predictor that reads the labelled rows and the acquisition mask in its tokens,
#   does not depend on the size; what a small, short-trained model loses is accuracy, so the
#   comparisons here are if anything tilted against L2M.
# - **The prior.** Six features and sparse linear labels instead of GP and semi-synthetic tasks with
#   10 to 50 features. The digest's random tanh-network prior did not learn within the book budget
#   (a pilot of the base model alone); it is the paper profile's prior. What carries over is the
#   point of the method: which features matter changes from task to task and must be read from the
#   context.
# - **Training.** One random acquisition depth per target and step (the code loops over all depths);
#   the selector is trained with the inference mask (the code uses the autoregressive one); larger
#   learning rates for the short budget. The baselines are batched per-task networks whose epochs
#   are tuned per context size on prior tasks; DIME and the RL baseline are left out.
# - **Not tested here.** The semi-synthetic and real-label benchmarks, MAR missingness, the
#   high-missingness sweep and the bundled scikit-learn tables of the issue.
#
# ## Reading the verdicts

# %%
ledger.report()

# %% [markdown]
# ## Summary
#
# A small transformer pre-trained for about 20 seconds on synthetic sparse linear tasks predicts a
# new task's labels in context with a lower NLL than a masked MLP fitted to that task's 16 rows (by
# 0.36 nats on every seed), and its uncertainty shrinks with the context. Its selector head,
# trained with the encoder frozen, did not learn to pick informative features (first picks at the
# chance rate, an NLL curve on top of random acquisition), so the per-task MLP with a GDFS
# selector acquires better, and the paper's headline on acquisition is not reproduced at this
# scale; the gain over the per-task model also peaks at 8 context rows rather than at 4.
#
# ## Exercises
#
# 1. Run with `-p p_max=0.9`. Which model's NLL with all features suffers more from a context with
#    most entries missing, and why should the in-context model degrade more gracefully?
# 2. Raise `pretrain_steps` to 3000. Which claims move, and which stay where they are?
# 3. The first pick does not depend on the target row. Explain from the tokens why, and what that
#    means for a "static" acquisition order as a baseline.
