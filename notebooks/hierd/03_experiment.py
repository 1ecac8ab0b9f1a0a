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
# # Structure distillation for multimodal embedders: experiment
#
# **Learning goals.** After this notebook you can
#
# 1. check the two things distillation needs before judging it: a teacher better than the student,
#    and teacher clusters that are objects;
# 2. say whether HieRD's student beats a contrastive-only and a global-KD student of the same size
#    and budget on the toy, and whether it copies the teacher's phrase x object structure;
# 3. read what the public code's detached group vectors do to the method.
#
# **Setting (book profile).** The scenes of the implementation notebook: 3000 training and 500
# test scenes, queries "what is in the top left cell" against the 16 answer phrases. One teacher
# (6-px patches, 16 vision tokens, width 64, 3 layers; 10 epochs at peak learning rate
# $2\cdot 10^{-3}$) trained contrastively, then frozen; its clusters, group vectors, similarities and
# attention weights are computed once. Per seed, three students from the same initial weights (8-px
# patches, 9 vision tokens, width 32, 2 layers, 4 heads), the same batches and the same number of
# steps (5 epochs, 465 steps of 32, peak learning rate $2\cdot 10^{-3}$). Both schedules warm up
# linearly over the first 10% of the steps (the code: 3%), then decay as a cosine. The students:
#
# - **contrastive**: InfoNCE only;
# - **global KD**: InfoNCE + RKD on the final embeddings (weight 0.25, the code's);
# - **HieRD**: InfoNCE + RKD + the intra-modal and cross-modal structure terms (steps 1-8), with
#   gradients flowing through the group vectors.
#
# The two ablations, HieRD without $L_{cross}$ and HieRD with the public code's detached group
# vectors, run at the paper profile only (the time budget); the code's caveat is checked on every
# seed instead (claim k1). Metrics on the test scenes: P@1 over the 16 phrases (chance 1/16),
# in-scene accuracy (the answer above the scene's two other tiles, chance 1/3) and the structural
# gap (mean squared difference between student and teacher phrase x cluster similarities at the
# last layer pair). The claims and thresholds were declared in
# `chapter.yml` before this experiment ran.

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
n_train = None  # training scenes
teacher_epochs = None  # the teacher's passes over the training scenes
student_epochs = None  # every student's passes (the same for all)
eps_percentile = None  # DBSCAN eps as a percentile of the token distances (the code: 3)
methods = None  # subset of contrastive, global_kd, hierd, hierd_no_cross, hierd_detached

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from replib import core
from replib.papers.hierd import experiment

core.set_style()
cfg = core.configure(experiment.EXPERIMENT_PROFILES, profile, experiment.EXPERIMENT_BOUNDS, seeds=seeds,
                     n_train=n_train, teacher_epochs=teacher_epochs, student_epochs=student_epochs,
                     eps_percentile=eps_percentile, methods=methods)
ledger = core.Ledger("hierd", cfg.profile, cfg.seeds, parameters=vars(cfg))
labels = {"contrastive": "contrastive", "global_kd": "global KD", "hierd": "HieRD",
          "hierd_no_cross": "HieRD w/o L_cross", "hierd_detached": "HieRD detached"}
cfg

# %%
out = experiment.run_experiment(cfg, progress=core.progress)
teacher = out["teacher"]
print("teacher test metrics:", {k: round(v, 3) for k, v in teacher["metrics"].items()})
print("teacher clusters:", {k: round(v, 3) for k, v in teacher["quality"].items()})
print("seconds:", {k: round(v, 1) for k, v in teacher["seconds"].items()})

# %% [markdown]
# ## First, the preconditions: a teacher worth distilling, clusters that are objects
#
# The teacher's clusters on one test scene, and how they land on the student's coarser grid:

# %%
data, tt = out["data"]["test"], teacher["test_targets"]
fig, axes = plt.subplots(1, 4, figsize=(10, 2.8))
g_t, g_s = 24 // cfg.teacher_patch, 24 // cfg.student_patch
panels = [("scene", None), ("fine clusters (teacher)", tt["clusters"]["word"][0].reshape(g_t, g_t)),
          ("coarse clusters (teacher)", tt["clusters"]["phrase"][0].reshape(g_t, g_t)),
          ("coarse, mapped to student", tt["pairs"]["vision"]["members"][0, 1].cpu().numpy().reshape(g_s, g_s))]
for ax, (title, grid) in zip(axes, panels):
    if grid is None:
        ax.imshow(data["images"][0].cpu().numpy().transpose(1, 2, 0))
    else:
        ax.imshow(np.ma.masked_less(grid, 0), cmap="tab10", vmin=0, vmax=9, extent=(0, 24, 24, 0))
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
plt.show()

# %% [markdown]
# *Figure 1. A test scene, the teacher's fine clusters (input layer) and coarse clusters (layer 2)
# on its 4 x 4 grid, and the coarse clusters mapped onto the student's 3 x 3 grid (blank: noise, or
# no clustered teacher patch).*
#
# ## The students

# %%
results = out["results"]
summary = results.groupby("method")[["p_at_1", "in_scene", "structure_gap", "seconds"]].agg(["mean", "std"])
display(summary.reindex([m for m in cfg.methods]).round(3))

# %%
fig, axes = plt.subplots(1, 3, figsize=(11, 3))
for ax, metric, name in zip(axes, ["p_at_1", "in_scene", "structure_gap"],
                            ["P@1 (16 phrases)", "in-scene accuracy", "structural gap"]):
    for i, m in enumerate(cfg.methods):
        values = results.loc[results.method == m, metric]
        ax.bar(i, values.mean(), color=f"C{i}", alpha=0.7)
        ax.scatter(np.full(len(values), i), values, color="k", s=12, zorder=3)
    if metric == "p_at_1":
        ax.axhline(teacher["metrics"]["p_at_1"], color="0.3", ls="--", lw=1, label="teacher")
        ax.legend(fontsize=8)
    ax.set_xticks(range(len(cfg.methods)), [labels[m] for m in cfg.methods], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(name)
plt.show()

# %% [markdown]
# *Figure 2. Test metrics of each student (bars: mean over seeds; dots: seeds). Dashed: the
# teacher's P@1. Lower structural gap = phrase x cluster similarities closer to the teacher's.*

# %%
curves = out["curves"]
fig, axes = plt.subplots(1, 4, figsize=(12, 2.8))
for ax, term in zip(axes, ["nce", "text", "vis", "cross"]):
    for i, m in enumerate(cfg.methods):
        c = curves[(curves.method == m) & (curves.seed == cfg.seeds[0])]
        if term in c and c[term].notna().any():
            ax.plot(c.step, c[term].rolling(10, min_periods=1).mean(), color=f"C{i}", label=labels[m], lw=1)
    ax.set_xlabel("step")
    ax.set_title(term, fontsize=9)
axes[0].legend(fontsize=7)
plt.show()

# %% [markdown]
# *Figure 3. Training curves of the first seed (moving mean over 10 steps): InfoNCE, and HieRD's
# text, vision and cross-modal terms (for the structure terms of the global-KD and contrastive
# students, which do not train them, no curve is drawn).*
#
# ## The claims

# %%
ledger.record_all(experiment.claim_values(out, cfg))
ledger.save()
display(ledger.table())

# %%
ledger.report()

# %% [markdown]
# ## What we learned
#
# Numbers from the book-profile run (3 student seeds, one teacher).
#
# **The preconditions hold.** The teacher retrieves the right phrase for 74.2% of the test questions
# (in-scene 80.8%). Its fine clusters agree with the tiles (ARI 0.750, p2 holds; the coarse clusters
# of layer 2 reach 0.606), but only with eps at the 10th percentile: the code's 3rd percentile gives
# ARI 0.197 on this 16-token grid, clusters that are not objects. The contrastive student learns the
# grounding on every seed, P@1 0.362, 0.364 and 0.514 (mean 0.413, chance 0.0625; p0 holds), and the
# teacher is 38.0, 37.8 and 22.8 points better (p1 holds). This took a longer warm-up (10% of the
# steps instead of the code's 3%) and one more epoch for the students, and a longer, faster schedule
# for the teacher, all declared before this run; at the previous budget the contrastive student
# reached only 0.220 on seed 0 and the chapter could not judge the method.
#
# **The headline fails on this toy.** HieRD's student is behind the contrastive-only student on every
# seed: -2.6, -12.8 and -3.8 points of P@1 (mean -6.4; h1 fails). Against the global-KD student it is
# +5.0, -14.8 and -4.4 points (mean -4.7; h2 fails, one seed of three clears). Mean P@1 is 0.413
# (contrastive), 0.397 (global KD) and 0.349 (HieRD). In-scene accuracy tells the same story: HieRD
# minus global KD is +8.6, -17.8 and -9.6 points (mean -6.3; m1 fails). The seeds spread widely (sd
# 6-14 points), but the sign is against HieRD on most of them.
#
# **What the structure terms do.** They do what they are built for: HieRD's student copies the
# teacher's phrase x cluster similarities closely, its structural gap is 0.25, 0.35 and 0.67 times
# the global-KD student's (mean 0.42; m2 holds). A student that matches the teacher's internal
# structure does not retrieve better here: trained from scratch for 5 epochs, the structure terms
# (weighted 2.5, the code's weights for fine-tuning pretrained models) compete with InfoNCE for a
# small model's capacity and steps, while the paper's students start from pretrained VLMs. The
# chapter's best explanation of the failure is that starting point and the weights, not a bug in the
# terms: the batched loss equals the pair-by-pair form, and the structural gap shows it is optimised.
#
# **The code's caveat.** With detached group vectors (the public code), the gradient of HieRD is
# exactly that of its token-level terms alone: the largest difference is 0 on every seed (check k1).
# The relational and cross-modal terms of that code are constants for the optimiser; what its runs
# measure is token-level feature KD plus RKD. This chapter's HieRD lets their gradients flow.
#
# **Cost.** A HieRD step costs 2 to 3 contrastive steps here (15-16 s against 6-7 s per student
# for the same 5 epochs, global KD about 9 s; see the table above), so "the same budget" in steps is
# not the same in time. The whole experiment takes a little over two minutes on one core, the
# teacher about 30 s of it.
#
# ## What we scaled down, and why the effect should survive it
#
# - **Models.** 2B and 0.5B-parameter VLM embedders become a 3-layer, width-64 teacher with 16
#   vision tokens and a 2-layer, width-32 student with 9; both trained from scratch on the toy. The
#   method's pieces are unchanged (groups, clusters, weights, the three losses, RKD, the weights),
#   so the mechanism is the paper's; what does not survive is the students' starting point, which is
#   the likeliest reason for the difference (see above).
# - **Data.** MMEB's 20 training sets become 3000 generated scenes with grounding questions;
#   spatial-relation questions and drawn shapes were piloted first and not learned by the teacher at
#   this budget, so the tiles carry fill patterns a single patch shows. Object identity and
#   phrase-to-object binding, what HieRD claims to transfer, are still what the task needs.
# - **Clustering.** The code's DBSCAN rule is for grids of hundreds of tokens; on 16 tokens eps was
#   calibrated on the teacher alone (10th percentile, min_samples 3), and the code's rule is shown
#   beside it (x2).
# - **Budget.** The students get 5 epochs, the teacher 10. The base student learns the task on every
#   seed (p0), so the verdicts are judged; whether HieRD catches up with a longer student budget (the
#   paper profile, or exercise 3) is a test this chapter could not afford at the book profile.
# - **Left out at the book profile:** the ablations without $L_{cross}$ and with detached groups
#   (paper profile), the caption-retrieval task and hard-negative captions of the digest, more seeds.
#
# ## Summary
#
# On the toy, the rebuild works: the teacher has something to distil, its clusters are objects once
# the clustering rule is fitted to the grid, and the contrastive student learns the task on every
# seed. Judged at that budget, HieRD's student does not beat the contrastive-only or the global-KD
# student (both headline claims fail, and so does the in-scene mechanism), although it copies the
# teacher's phrase x object structure far better than the global-KD student (m2 holds). The public
# code's detached group vectors turn the structural terms into constants, which the check confirms
# exactly.
#
# ## Exercises
#
# 1. Run with `eps_percentile=3` (the code's rule). What happens to the cluster ARI and to HieRD?
# 2. Run with `methods=["global_kd", "hierd", "hierd_detached"]` and compare the detached student
#    with the global-KD one: what does the check k1 predict, and what differs?
# 3. Give every student twice the epochs. Does HieRD's advantage grow or shrink?
