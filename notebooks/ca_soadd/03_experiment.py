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
# # One-class deepfake audio with boundary probes: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. say whether CA-SOADD beats one-class baselines on unseen attacks in a small synthetic world,
#    and whether its boundary term is what helps;
# 2. tell coverage by design (an attack that resembles a probe) from generalisation;
# 3. re-run the experiment at another size or seed set from the `parameters` cell.
#
# **Setting.** Bona fide clips from the source-filter synthesiser (400 train, 150 dev, 150 test at
# the book profile), 150 test clips per attack; a frozen four-layer front-end; a 1.9k-parameter head
# trained for 300 steps (batch 32, Adam, lr 1e-3, the first 75 steps compactness only). Variants:
# CA-SOADD with the four structure probes, CA-SOADD with IDInv added, without $\mathcal L_{cabs}$,
# $\mathcal L_{cabs}$ replaced by BCE on probes, and the baselines OC-SVM, Deep-SVDD and OC-Softmax.
# The two deep baselines share the budget, seeds and head size. No spoof is used before testing.

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
n_train = None  # bona fide training clips
n_dev = None  # bona fide dev clips (threshold calibration)
n_test = None  # test clips per class (bona fide and each attack)
steps = None  # training steps of every learned variant
data_seed = None  # seed of the corpus, the probes and views, and the front-end
d = None  # front-end width per layer
dim = None  # embedding dimension D
batch = None  # batch size
lr = None  # Adam learning rate
margin = None  # hinge margin m of L_cabs
kappa = None  # benign-view noise, as a fraction of the clip RMS
alpha = None  # calibration level; the threshold is the alpha-quantile of bona fide dev scores

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from replib import core
from replib.papers.ca_soadd import experiment, task

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     n_train=n_train, n_dev=n_dev, n_test=n_test, steps=steps, data_seed=data_seed, d=d,
                     dim=dim, batch=batch, lr=lr, margin=margin, kappa=kappa, alpha=alpha)
ledger = core.Ledger("ca_soadd", cfg.profile, cfg.seeds, parameters=vars(cfg))
cfg

# %% [markdown]
# ## Every variant on every seed
#
# One corpus and one feature cache; each seed changes the head's initialisation, the batches and the
# probe operator drawn per batch. The table gives means over seeds: EER per attack (a fraction),
# `eer_distant` the mean over the probe-distant attacks A1-A3, `eer_probes` the mean EER against
# held-out structure probes of the bona fide test clips (how well the boundary was learned where it
# was trained; the baselines never see probes), the false rejection and acceptance
# rates at the bona fide-calibrated threshold, and `bona_std` the spread of bona fide test scores
# (a collapse index for the cosine scores).

# %%
rows, first_scores, feats = experiment.run_experiment(cfg, progress=core.progress)
runs = pd.DataFrame(rows)
runs.groupby("variant", sort=False).mean(numeric_only=True).drop(columns="seed").round(3)

# %%
long_form = runs.melt(id_vars=["seed", "variant"], value_vars=[f"eer_{a}" for a in task.ATTACKS])
long_form["attack"] = long_form["variable"].str.removeprefix("eer_")
fig, ax = plt.subplots(figsize=(10, 4))
sns.barplot(long_form, x="attack", y="value", hue="variant", errorbar="sd", ax=ax)
ax.axhline(0.5, color="grey", lw=0.8, ls="--")
ax.axvspan(2.5, 3.5, color="grey", alpha=0.12)
ax.set(xlabel="attack (shaded: probe-adjacent)", ylabel="eer")
ax.legend(fontsize="small", ncol=4, loc="upper left")
plt.show()

# %% [markdown]
# *Figure 1. EER per attack and variant, mean over seeds with the standard deviation; the dashed
# line is chance, and the shaded attack (splicing) resembles the Perm probe.*

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
for ax, variant in zip(axes, ["without L_cabs", "ca_soadd"]):
    s = first_scores[variant]
    for lab in ("bona_fide",) + task.ATTACKS + ("probe_perm",):
        ax.hist(s[lab], bins=30, histtype="step", density=True, label=lab.replace("_", " "))
    ax.set(title=variant, xlabel="cosine score", ylabel="density")
axes[1].legend(fontsize="small")
plt.show()

# %% [markdown]
# *Figure 2. Test score histograms of the first seed: without the boundary term (left) and CA-SOADD
# (right), with the Perm probes of the bona fide test clips.*
#
# ## Claims

# %%
ledger.record_all(experiment.claim_values(runs, cfg))
ledger.save()
ledger.table()

# %%
ledger.report()

# %% [markdown]
# ## What we learned
#
# Book profile, three seeds; EERs are fractions, means over seeds.
#
# * **The toy is learnable one-class** (precondition, holds): OC-SVM on mean and std pooled
#   front-end features reaches a mean EER of 0.322 on the probe-distant attacks (A1 0.413, A2 0.213,
#   A3 0.340), inside the digest's calibration band.
# * **Headline 1 fails.** CA-SOADD's mean EER on the probe-distant attacks is 0.429, against 0.322
#   for OC-SVM, 0.429 for Deep-SVDD and 0.453 for OC-Softmax: 10.7 points *worse* than the best
#   one-class baseline (per seed -0.118, -0.120, -0.082 against the required +0.03). Against the
#   two deep baselines alone it ties Deep-SVDD and beats OC-Softmax by 2.4 points.
# * **Headline 2 fails.** Without $\mathcal L_{cabs}$ the mean EER is 0.419, one point *below* the
#   full method (per seed +0.002, -0.049, +0.016 against the required +0.03); the paper's 20-point
#   ablation does not appear.
# * **A margin does not beat BCE here** (mechanism, fails): BCE on probes reaches 0.417, 1.2 points
#   below the hinge (per seed -0.011, -0.024, 0.000), as the digest's own pilot also found.
# * **The probe pool matters little** (mechanism, holds): adding IDInv moves the mean EER by 0.4
#   points (0.002, 0.007, 0.002). It holds because the boundary term barely moves the distant
#   attacks with either pool, so this is weak evidence for the paper's robustness claim.
# * **Calibration works** (check): at $\alpha = 0.05$ the bona fide test false rejection rate is
#   0.073, 0.067, 0.067, inside $[0.02, 0.10]$.
# * **Coverage by design** (measurement): on splicing, the attack that resembles the Perm probe,
#   the boundary term lowers the EER from 0.482 to 0.418 (per seed +0.100, +0.047, +0.047 points of
#   gain), and on held-out probes of bona fide test clips from 0.281 to 0.207. The term does what it
#   is trained to do; it does not carry over to attacks unlike the probes.
#
# Our best explanation of the failures is the encoder, not the objective. The learned heads pool
# frame features with an attentive *mean*, which keeps little of the temporal variability (jitter,
# shimmer, oversmoothed tracks) that separates A2 and A3, while OC-SVM sees the standard deviation
# over frames and detects them far better. (One variant of the front-end, random offsets inside
# the $\tanh$ so that a mean keeps even moments, was tried once after the first measurement; it did
# not change the picture, CA-SOADD 0.44 against OC-SVM 0.36, and was reverted.) Every deep head, with or without probes, stays near chance on the distant attacks.
# The paper's gain rides on XLS-R's contextual layers, which a head this small on frozen
# hand-made features cannot stand in for. What the toy does show is the collapse the paper warns
# about: the bona fide score spread is 0.012 without $\mathcal L_{cabs}$ and 0.001-0.009 for the
# deep baselines, 0.108 with it.
#
# ## What we scaled down, and why the effect should survive it
#
# * **Encoder.** XLS-R 300M fine-tuned on real speech is replaced by a frozen four-layer front-end
#   (log-mel, delta, LFCC, an instantaneous-frequency cue) and a 1.9k-parameter head. This is the
#   change that most likely breaks the transfer: the paper's claim is about where a strong encoder's
#   acceptance region ends, and our encoder barely separates anything without pooled statistics.
# * **Data.** Synthetic 8 kHz, 1 s clips from one source-filter synthesiser and four numpy attacks
#   instead of ASVspoof; 400 bona fide training clips; attacks tuned once so that OC-SVM lands in
#   the 15-40 % band, before any CA-SOADD run.
# * **Probes.** Four structure probes (plus IDInv for the sensitivity claim); the codec and vocoder
#   imitations PNCR and VocHF are left out. Probes and views are drawn once per clip, not per step.
# * **Training.** 300 steps, lr 1e-3, one corpus per experiment (seeds vary the initialisation,
#   batches and probe draws).
#
# The orderings the paper reports should survive a change of scale only if the encoder can
# represent the attack cues at all; here it cannot for A1-A3, so the failures say more about the
# toy's encoder than about the paper, and the chapter does not settle the headline.
#
# ## Summary
#
# In a strict one-class toy with a small head on frozen features, CA-SOADD learns the boundary it
# is trained on (held-out probes and the probe-like splicing attack move) and avoids cosine
# collapse, but it does not generalise to the probe-distant attacks: both headline claims and the
# margin-versus-BCE claim fail, and a plain OC-SVM on pooled features is the best detector.
#
# ## Exercises
#
# 1. Re-run with `margin = 0.5` and with `kappa = 0.1` (the official code's benign noise). Does
#    either change the ordering of the variants?
# 2. Add a probe that imitates one of the distant attacks (for example a strictly periodic
#    re-excitation) and watch its EER: is that generalisation or coverage by design?
# 3. Give the head frame-level statistics (the standard deviation over time beside the attentive
#    mean) and compare with OC-SVM, which sees them.
