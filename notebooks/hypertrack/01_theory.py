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
# # GUI agents, evaluation protocols and SFT vs RFT scaling: theory
#
# **Learning goals.** After this notebook you can
#
# 1. state the kit's step metrics (type match, exact match) and episode metrics (success, goal
#    progress), and say how offline, semi-online and online evaluation differ;
# 2. write the DAPO objective the paper's RFT (reinforcement fine-tuning) maximises and explain
#    each of its three changes to GRPO with numbers;
# 3. explain, on a one-dimensional click, why RL (reinforcement learning) with a box reward can
#    generalise to a moved target where SFT (supervised fine-tuning) on a single demonstrated point
#    does not;
# 4. show how two agents can swap places between offline and online evaluation, and where the
#    semi-online protocol falls.
#
# **Sources.** The full text of HyperTrack (Qu et al., ICML 2026, arXiv 2605.27134) could not be
# read; we used its abstract, detailed secondary notes on it, and the official evaluation kit
# (GUIEvalKit), which decides every metric rule and the semi-online protocol exactly. The training
# code is not released, so the RFT objective and reward follow the secondary notes, and the toy
# world and every budget are ours ("Sources in detail" at the end).

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
import torch

from replib import core
from replib.papers.hypertrack import method, theory

core.set_style()
profile = core.resolve_profile(profile)
steps = {"smoke": 100, "book": 200, "paper": 400}[profile]

# %% [markdown]
# ## 1. The problem
#
# A mobile GUI agent (a model that operates a phone's graphical user interface) reads an
# instruction ("open the app, find the row, type the word"), a screenshot and the history of its
# own earlier actions, and emits one action:
# OPEN(app), CLICK(x, y), SCROLL(direction), TYPE(text) or STOP. HyperTrack contributes three
# things: a large Chinese data set (over 16,000 tasks, more than 650 apps, about 5.1 steps per
# episode), a unified evaluation kit, and a study of how supervised fine-tuning (SFT) and
# reinforcement fine-tuning (RFT) scale with the number of training episodes $N$, in-domain and on
# unseen apps and devices. Its headline: RFT scales better than SFT, and its lead is largest out of
# domain.
#
# ## 2. The kit's metrics
#
# Coordinates are normalised to $[0, 1]$. For one step with prediction $\hat a$ and reference $a$:
#
# - **type match** TM $= \mathbb 1\{\mathrm{type}(\hat a) = \mathrm{type}(a)\}$ (a predicted TYPE
#   counts as the reference type when the reference is a click or a type);
# - **exact match** EM (step success): the type matches and the parameters are right. A click must
#   land in the reference element's box enlarged by 1.2 in width and height (within 0.14 of the
#   reference point when there is no box); a scroll needs the same direction; TYPE and OPEN need
#   texts that contain one another after lower-casing and stripping; STOP needs the type only.
#
# Per episode of length $T$: **success** $= \prod_t \mathrm{EM}_t$, and **goal progress** $= k/T$
# with $k$ the number of consecutive EM steps from the first step until the first error.

# %%
box = np.array([[0.5, 0.5, 0.2, 0.1]] * 4)
points = np.array([[0.5, 0.5], [0.61, 0.5], [0.63, 0.5], [0.5, 0.56]])
gt = {"type": np.array(["click"] * 4, dtype=object), "box": box, "direction": np.array([""] * 4, dtype=object),
      "text": np.array([""] * 4, dtype=object)}
pred = {"type": gt["type"], "point": points, "direction": gt["direction"], "text": gt["text"]}
tm, em = method.step_match(pred, gt)
print("inside the plain box:", method.inside_box(points, box))
print("EM (box enlarged 1.2):", em)
print("text rule:", method.text_match(["Party", "art", "tea"], ["party ", "party", "team"]))
print("goal progress of [EM, EM, miss, EM]:",
      method.episode_metrics([True, True, False, True], [0, 0, 0, 0])["goal_progress"])

# %% [markdown]
# The second click lies outside the element but inside the enlarged box: the kit forgives it. The
# text rule forgives "art" for "party", because one contains the other; the training reward of RFT
# below is stricter (inside the plain box, exact text), and we keep the two apart as the paper does.
#
# ## 3. Three protocols
#
# **Offline** evaluation builds step $t$'s history from the reference: $\phi(o_t, a_t)$. It
# measures per-step accuracy with a perfect past. **Online** evaluation runs the agent closed loop
# on a device; its own mistakes change what it sees next. The paper's **semi-online** protocol
# (SOEval) stays on the recorded track but uses the model's own action where it matched:
#
# $$\psi(o_t, a_t, \hat a_t) = \begin{cases}\phi(o_t, \hat a_t) & \text{if } \hat a_t = a_t\\
# \phi(o_t, a_t) & \text{otherwise.}\end{cases}$$
#
# A two-number agent makes the difference concrete: step accuracy $p_r$ after a reference history
# and $p_o$ after its own. Offline EM is $p_r$; online success needs every step right, $p_r
# p_o^{T-1}$; under SOEval step $t$ sees its own history exactly when step $t-1$ was right, so
# $q_t = q_{t-1} p_o + (1 - q_{t-1}) p_r$.

# %%
agents = {"A: strong on the reference track": (0.92, 0.70), "B: robust to its own past": (0.86, 0.86)}
for name, (p_r, p_o) in agents.items():
    scores = theory.protocol_scores(p_r, p_o, length=6)
    print(f"{name:34s}", {k: round(v, 3) for k, v in scores.items()})

# %% [markdown]
# Offline EM ranks A first; online success ranks B first, by a wide margin. SOEval moves A's score
# toward its online weakness while leaving B's unchanged, so its ranking agrees with the online
# one. This is the paper's argument for SOEval: its Spearman correlation (the correlation of the
# two rankings of models) with online success on AndroidWorld, a benchmark of live Android tasks,
# is 0.771, against 0.657 offline. The effect needs $p_o \ne p_r$: an agent whose own correct
# actions look exactly like the reference gets the same score under both.
#
# ## 4. The RFT objective
#
# The paper's RFT is GRPO (Group Relative Policy Optimization) with the changes of DAPO (Decoupled
# Clip and Dynamic sAmpling Policy Optimization). GRPO scores each sampled output against the other
# outputs for the same prompt, so it needs no learned value function; DAPO changes how that policy
# gradient is clipped, averaged and sampled. For a step prompt $q$, RFT samples $G$ outputs $o_i$
# from the policy before the update, $\pi_{\text{old}}$, scores each with
# $R_i = R_{\text{type}} + R_{\text{param}}$ ($R_{\text{type}} = \mathbb 1\{\text{type right}\}$,
# $R_{\text{param}} = \mathbb 1\{\text{type and parameters right}\}$), normalises within the group
# into an *advantage* (how much better than its group an output did),
# $\hat A_i = (R_i - \mathrm{mean}_j R_j)/(\mathrm{std}_j R_j + \varepsilon)$, and maximises
#
# $$\mathcal J(\theta) = \mathbb E\Big[\frac{1}{\sum_i |o_i|}\sum_{i=1}^{G}\sum_{t=1}^{|o_i|}
# \min\big(\rho_{i,t}\hat A_i,\ \mathrm{clip}(\rho_{i,t}, 1-\epsilon_{low}, 1+\epsilon_{high})\hat A_i\big)\Big],
# \qquad \rho_{i,t} = \frac{\pi_\theta(o_{i,t}\mid q, o_{i,<t})}{\pi_{\text{old}}(o_{i,t}\mid q, o_{i,<t})}.$$
#
# DAPO's three changes to GRPO, each visible below: **clip-higher** ($\epsilon_{high} = 0.3 >
# \epsilon_{low} = 0.2$) lets a good but unlikely token grow further in one update; **token-level
# averaging** (the $1/\sum_i |o_i|$) weighs every token alike, so long outputs are not diluted;
# **dynamic sampling** drops groups whose rewards are all equal (their advantages are all zero). No
# KL term ($\beta = 0$: no Kullback-Leibler penalty pulling the policy toward a frozen reference
# model), so no reference model.

# %%
ratio = np.linspace(0.5, 1.6, 200)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
for advantage, style in ((1.0, "-"), (-1.0, "--")):
    axes[0].plot(ratio, theory.clipped_term(ratio, advantage), style, label=f"A = {advantage:+.0f}")
axes[0].axvline(0.8, color="0.6", lw=0.8)
axes[0].axvline(1.3, color="0.6", lw=0.8)
axes[0].set_xlabel("probability ratio rho")
axes[0].set_ylabel("objective term")
axes[0].legend()
p = np.linspace(0, 1, 101)
for g in (4, 8, 16):
    axes[1].plot(p, theory.zero_signal_share(p, g), label=f"G = {g}")
axes[1].set_xlabel("success probability p of one sample")
axes[1].set_ylabel("share of groups dropped")
axes[1].legend()
plt.show()

# %% [markdown]
# *Figure 1. Left: one token's term of the DAPO objective; it stops rewarding a positive advantage
# past $\rho = 1.3$ and a negative one below $\rho = 0.8$ (the asymmetric clip). Right: the share of
# groups with all-equal binary rewards, $p^G + (1-p)^G$, which dynamic sampling drops.*
#
# With $p = 0.9$ and $G = 16$, $0.9^{16} + 0.1^{16} = 0.185$: about one group in five carries no
# signal, and the share grows as the policy improves. Token-level averaging in numbers: in a group
# whose outputs have 1 and 3 tokens, sample-level averaging gives each token of the short output
# weight $1/2$ and each token of the long one $1/6$; token-level averaging gives all four $1/4$.

# %%
print("zero-signal share, p = 0.9, G = 16:", round(float(theory.zero_signal_share(0.9, 16)), 4))
logp = np.log(np.array([[0.5, 1.0, 1.0], [0.5, 0.4, 0.3]]))
mask = np.array([[1.0, 0, 0], [1.0, 1, 1]])
new = torch.tensor(logp, dtype=torch.float32, requires_grad=True)
loss = method.dapo_loss(new, logp, advantages=np.array([1.0, 1.0]), token_mask=mask)
loss.backward()
print("token-level weights (gradient of the loss in log p):", (-new.grad * torch.tensor(mask)).numpy().round(3))

# %% [markdown]
# ## 5. Why RL may generalise where SFT memorises: a one-dimensional click
#
# A click over 20 positions; the target is a box of four positions. SFT imitates the one
# demonstrated point (the box centre): its optimum puts all mass there. RL with the indicator reward
# $J = \sum_i \pi_i \mathbb 1\{i \in \text{box}\}$ needs only mass *somewhere* in the box; its
# gradient $\pi_i(\mathbb 1\{i \in \text{box}\} - J)$ is likelihood training on the successful
# clicks, weighted by how likely they already were, so it keeps the base's spread inside the box.
# Move the box (a new layout) and compare.

# %%
toy = theory.click_toy(steps=steps)
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
for name, color in (("base", "0.5"), ("sft", "C1"), ("rl", "C0")):
    axes[0].plot(toy["bins"], toy[name], color=color, label=name)
    axes[1].plot(toy["shifts"], toy["success"][name], "o-", color=color, label=name)
axes[0].axvspan(8 - 0.5, 11 + 0.5, color="C2", alpha=0.15)
axes[0].set_xlabel("click position")
axes[0].set_ylabel("probability")
axes[0].legend()
axes[1].set_xlabel("box moved right by (positions)")
axes[1].set_ylabel("success (mass inside the box)")
axes[1].legend()
plt.show()
print({k: np.round(v, 3).tolist() for k, v in toy["success"].items()})

# %% [markdown]
# *Figure 2. Left: the base, SFT and RL click distributions after training on the shaded box.
# Right: their success when the box moves right; SFT's single point leaves the box after two
# positions, RL's spread does not fall off as fast.*
#
# This is the mechanism behind the paper's "RFT generalises better out of domain" at its simplest.
# It is not a proof: a real policy must also find *which* element to click, and both methods can
# get that wrong on an unseen app.
#
# ## 6. What to expect in the experiment
#
# The experiment builds MiniGUI (apps, layouts on a phone and a tablet, tasks of 5-7 steps), a
# small pointer policy (a network that clicks by pointing, through attention, at one of the screen's
# elements) pretrained on 30 other apps, and fine-tunes it by SFT and by RFT on $N \in
# \{8, 32, 128, 1024\}$ episodes of 40 training apps, for the same 8 epochs at every $N$ and with
# the same number of optimiser steps for both, each at a learning rate tuned on the same grid. The
# 20 unseen apps belong to a visual family that neither the pretraining nor the training apps have,
# so the base starts out worse on them: that is the gap the paper says RFT closes better. The
# claims, declared before the runs: RFT beats SFT by 5 points on unseen apps at $N = 128$, more than
# in-domain; RFT's slope in $\log_2 N$ is at least SFT's; both curves are roughly log-linear (EM
# rises by about the same amount at each doubling of $N$). Preconditions check that the base leaves
# room, that the unseen apps are a real shift and that both arms finished training. The protocol
# comparison (SOEval against offline against online) and the history ablation are reported too.
#
# ## Summary
#
# - The kit's EM forgives a click in the 1.2-times enlarged box and contained texts; the RFT reward
#   does not.
# - Offline EM uses a perfect past, online success the agent's own; SOEval keeps the agent's own
#   past where it was right. Rankings can flip between offline and online.
# - DAPO: asymmetric clip, token-level averaging, dynamic sampling, no KL.
# - A box reward keeps mass spread inside the box; imitation of one point does not.
#
# ## Exercises
#
# 1. For $G = 8$, at what success probability $p$ is half of all groups dropped by dynamic
#    sampling? (Solve $p^8 + (1-p)^8 = 0.5$ numerically.)
# 2. In `theory.protocol_scores`, find $p_o$ such that agent A and agent B have the same online
#    success. Which protocol ranks them as equal too?
# 3. Re-run the click toy with a box of two positions. Does RL's advantage after a shift survive?
#
# ## Sources in detail
#
# The full text of HyperTrack (Qu et al., ICML 2026, arXiv 2605.27134) could not be read. What we
# used: the abstract, detailed secondary notes on the paper, and the official evaluation kit
# (GUIEvalKit, github.com/xiaomi-research/guievalkit), which is exact for the metric rules (box
# enlargement 1.2, distance 0.14, text containment, goal progress) and for the semi-online
# protocol. The training code is not released: the RFT objective (GRPO with DAPO's clip-higher,
# token-level averaging and dynamic sampling, no KL) and the reward come from the secondary notes;
# the advantage normalisation, learning rates and epochs are **not stated**. The toy phone simulator
# MiniGUI, the small pointer policy, its pretraining pool, every budget and every threshold of the
# claims are our choices.
