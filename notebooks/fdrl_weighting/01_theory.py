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
# # Client weighting in offline federated RL: theory
#
# **Learning goals.** After this notebook you can
#
# 1. state the offline federated RL problem (reinforcement learning from fixed data sets held by
#    separate clients that never share them) and how FEDORA, the host method, aggregates its
#    clients;
# 2. write the paper's two-criterion client score (expected return and policy inconsistency) and
#    say why the Q-value (a learned critic's estimate of the return) needs a scaling factor before
#    the two can be added;
# 3. explain, on a one-step example, why a high Q-value is not to be trusted where the policy has
#    left its data;
# 4. compute what a proximity term does to a client's local optimum, and what shrinking it buys.
#
# **Sources.** "Expected Returns and Policy Inconsistency-Aware Offline Federated Deep Reinforcement
# Learning", ICML 2026 (poster 63115; no arXiv version). Only its abstracts (the ICML page and an
# earlier, withdrawn ICLR 2026 submission) and its one-line summary could be read, and no official
# code was found. The host method it plugs into, FEDORA (federated ensemble-directed offline RL,
# NeurIPS 2024), follows FEDORA's official code
# ([DesikRengarajan/FEDORA](https://github.com/DesikRengarajan/FEDORA)); the paper's own formulas are
# not in the readable text, so the forms used here are our proposals (details at the end of this
# notebook).

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
import pandas as pd
import torch

from replib import core
from replib.papers.fdrl_weighting import method, theory

profile = core.resolve_profile(profile)
core.set_style()
n_datasets = {"smoke": 40, "book": 200, "paper": 1000}[profile]

# %% [markdown]
# ## The problem
#
# $K$ clients each hold a fixed data set $\mathcal D_k = \{(s, a, r, s')\}$ collected by an unknown
# behaviour policy $\beta_k$, and the data never leave the client. Some clients have expert data,
# some mediocre or random data, some very little. Each client trains an offline actor-critic
# locally; a server combines the clients' network parameters into a global model and sends it
# back. The question is **how much each client should count**.
#
# **FEDORA, the host.** Every client runs TD3+BC, an offline actor-critic method: the actor (the
# policy $\pi_k$) is trained to raise the critic's Q-value (the critic's estimate of the return from
# taking an action in a state) while staying close to the data's actions (the BC, behaviour-cloning,
# term); TD3 (twin delayed deep deterministic policy gradient) keeps two critics and uses the smaller
# of their estimates. The twin critics are trained toward
# $y = r + \gamma \max\{\min_i Q'_{k,i}(s', \tilde a), \min_i Q_{g,i}(s', \tilde a)\}$ (the better of
# its own target critics and the global critic), and an actor that minimises
#
# $$\mathcal L_\pi = -\lambda\,\delta_k\,\overline{Q_{k,1}(s, \pi_k(s))} + \delta_k\,\overline{\|\pi_k(s) - a\|^2}
#   + \alpha_0\,\overline{\|\pi_k(s) - \pi_g(s)\|^2} + \alpha_2\,\overline{\|\pi_k(s) - \pi^{prev}_k(s)\|^2},
#   \qquad \lambda = 2.5 / \overline{|Q_{k,1}|}.$$
#
# After local training the client reports $J_k = \overline{Q_{k,1}(s, \pi_k(s))}$ over its data, and
# the server weighs it by the softmax $w_k = \exp(\beta J_k) / \sum_j \exp(\beta J_j)$ with
# $\beta = 0.1$; $\theta_g = \sum_k w_k \theta_k$, and the clients' networks are overwritten by the
# global ones.
#
# ## The paper's idea (formulas proposed)
#
# A client's Q-value is its own critic's opinion of its own policy. Where the policy has moved far
# from the data's actions, the critic is extrapolating and the number may be too high. The paper
# therefore scores a client by **both** its expected return and its **policy inconsistency**:
#
# $$PI_k = \frac{1}{|\mathcal D_k|\,|A|} \sum_{(s, a) \in \mathcal D_k} \|\pi_k(s) - a\|^2, \qquad
#   c = \frac{\mathrm{mean}_k\,PI_k}{\mathrm{mean}_k\,|J_k|}, \qquad S_k = c\,J_k - PI_k, \qquad
#   w_k = \mathrm{softmax}_k\!\left(\frac{S_k}{\mathrm{std}_k S_k}\right).$$
#
# The scaling factor $c$ brings the Q term to the size of the inconsistency term: Q-values on
# Pendulum are in the tens or hundreds, squared action gaps below 4. Second, instead of being
# overwritten, a client keeps its model and is pulled toward the global one by $\alpha_0$, and
# the pull is weakened to $\rho\,\alpha_0$ ($\rho = 0.1$) when the client's own score beats the
# global model's on its data, $S^{loc}_k > S^{g}_k$.
#
# ## Two criteria on three clients
#
# Client 1 reports the highest Q-value but strays far from its data; client 2 a slightly lower
# Q-value with a policy close to its data; client 3 is poor on both.

# %%
j = torch.tensor([-20.0, -24.0, -60.0])
pi_inc = torch.tensor([1.2, 0.15, 0.9])
c = method.scaling_factor(j, pi_inc)
table = pd.DataFrame({
    "J (Q-value)": j.numpy(), "PI (inconsistency)": pi_inc.numpy(),
    "c J": (c * j).numpy(), "S = c J - PI": method.combined_score(j, pi_inc, c).numpy(),
    "FEDORA weights": method.q_softmax_weights(j).numpy(),
    "combined weights": method.combined_weights(j, pi_inc).numpy(),
    "J - PI (no scaling)": (j - pi_inc).numpy(),
}, index=["client 1", "client 2", "client 3"])
print(f"scaling factor c = {float(c):.4f}")
table.round(3)

# %% [markdown]
# FEDORA gives client 1 the largest weight, because its Q-value is the largest. The combined score
# moves the mass to client 2. Without the factor $c$, $J - PI$ is $J$ shifted by at most a few
# units: the term with the larger numeric range decides alone, and the ranking is FEDORA's.
#
# ## Why a high Q-value is suspect off the data
#
# A one-step task (a bandit) makes this visible. The true reward is $r(a) = 1 - (a - 0.5)^2$; the
# data's actions come from $\mathcal N(-0.5, 0.3^2)$ with noisy rewards. A cubic fitted to 30 such
# points plays the critic $\hat Q$. TD3+BC's trade-off in one dimension picks
# $a^\star = \arg\max_a \lambda \hat Q(a) - (a - \bar a)^2$: a larger $\lambda$ trusts the critic
# more and moves $a^\star$ away from the data. We repeat this on many data sets.

# %%
rows = []
for seed in range(n_datasets):
    actions, rewards = theory.bandit_data(30, -0.5, 0.3, 0.5, seed)
    rows.append(theory.greedy_sweep(theory.fit_critic(actions, rewards, 3), actions, [0.03, 0.1, 0.3, 1.0, 3.0]))
sweep = pd.concat(rows).groupby("lambda").median()
sweep.round(3)

# %%
fig, ax = plt.subplots(figsize=(5.5, 3.4))
ax.plot(sweep["inconsistency"], sweep["overestimate"], "o-")
for lam, row in sweep.iterrows():
    ax.annotate(f"lambda={lam:g}", (row["inconsistency"], row["overestimate"]), textcoords="offset points",
                xytext=(5, -10), fontsize="small")
ax.set(xscale="log", yscale="symlog", xlabel="policy inconsistency (mean squared gap to the data's actions)",
       ylabel="critic value minus true value")
plt.show()

# %% [markdown]
# *Figure 1. The one-step example: median over data sets of the critic's over-estimate at the
# chosen action against that action's policy inconsistency, for five values of TD3+BC's
# trade-off $\lambda$. Near the data the fitted critic is right; as the chosen action leaves the
# data the critic's value becomes far too high.*
#
# A client whose Q-value is high **and** whose policy is inconsistent is exactly the client whose
# Q-value is least reliable: the inconsistency term is a cheap warning light.
#
# ## What the proximity term does
#
# Take a client whose local objective is $(x - x_{loc})^2$ for some parameter $x$, plus the pull
# $\alpha_0 (x - x_g)^2$ toward the global model. The optimum is
# $x^\star = (x_{loc} + \alpha_0 x_g) / (1 + \alpha_0)$: with $\alpha_0 = 1$ the client ends half
# way to the global model, with $\alpha_0 = 0.1$ it keeps about 91% of its own solution.

# %%
alphas = np.array([0.0, 0.1, 0.3, 1.0, 3.0])
x_local, x_global = 1.0, 0.0  # a good client's own optimum and a weaker global model
optimum = theory.proximal_optimum(x_local, x_global, alphas)
assert np.allclose(optimum, 1.0 / (1.0 + alphas))
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(alphas, optimum, "o-")
ax.set(xlabel="alpha_0 (pull toward the global model)", ylabel="client optimum x*")
plt.show()

# %% [markdown]
# *Figure 2. Where a client ends when it minimises its own loss plus the pull toward a global model
# at 0 from its own optimum at 1. Shrinking $\alpha_0$ to $0.1\,\alpha_0$ when the client is the
# better one keeps it near its own solution; a weak client ($S^{loc} \le S^g$) keeps the full pull.*
#
# One caveat that matters for the experiment: averaging **parameters** of neural networks only
# makes sense when the clients stay close to a common model. FEDORA guarantees it by overwriting
# the clients each round; the paper's pull only encourages it.
#
# ## What to expect in the experiment
#
# On Pendulum with three small expert clients (each with too little data to learn the task well
# alone), one medium client and two random clients, federation has something to add: the experts'
# data put together are enough. Uniform averaging should be dominated by the poor clients; FEDORA's
# and the combined weights should both favour the experts; the combined weights may find them
# sooner because an expert's policy stays close to its data. To tell the inconsistency term from the
# scale-free temperature, the experiment also runs Q-only weights at the same temperature rule. In
# the stress variant the medium client drops the behaviour-cloning term, so its policy strays and,
# if its critic extrapolates as in Figure 1, its Q-value looks good: that is where the inconsistency
# term should matter most.
#
# ## Summary
#
# - Offline federated RL aggregates client models trained on fixed data sets of uneven quality;
#   FEDORA weighs clients by a softmax of their own Q-value estimates.
# - The paper adds the policy inconsistency, rescales the Q term by $c$ so both terms count, and
#   lets clients that beat the global model lean less on it (formulas proposed here).
# - Off the data, critics over-estimate, and they do so more the further the policy strays: the
#   reason to distrust a high $J$ paired with a high $PI$.
#
# ## Exercises
#
# 1. In the three-client table, for which values of client 1's inconsistency does it get the
#    largest combined weight? Vary `pi_inc[0]` and find the crossover.
# 2. Replace the temperature $\mathrm{std}_k S_k$ by a constant 1. What happens to the weights when
#    all Q-values are multiplied by 10, and why is the scale-free temperature preferable?
# 3. In the bandit, change the data's spread from 0.3 to 0.8. Does the over-estimate at a given
#    inconsistency shrink? Relate the answer to client data sets of different coverage.
#
# ## Sources in detail
#
# Only the abstracts of the paper (the ICML 2026 poster page and an earlier, withdrawn ICLR 2026
# submission) and its one-line summary could be read: no full text, no official code. The host
# method the paper plugs into, FEDORA (NeurIPS 2024), is taken from its official code: TD3+BC
# clients, softmax weights on Q-values, the $\max(Q', Q_g)$ critic target, the proximity terms and
# the decay. The paper's own pieces are **proposed** by this chapter, because their formulas are not
# stated in the readable text: the policy inconsistency as the mean squared gap between the learned
# action and the data's action, the scaling factor $c = \overline{PI} / \overline{|J|}$, the score
# $S_k = c J_k - PI_k$ with softmax weights at temperature $\mathrm{std}_k S_k$, and the adaptive
# pull ($\alpha_0$ times 0.1 when a client's own score beats the global model's, both scored with
# the client's own critic; clients keep their own weights, which the paper does not state either).
# The Pendulum task, the clients and the budgets are our choices.
