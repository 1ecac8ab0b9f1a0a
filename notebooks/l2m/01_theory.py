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
# # In-context feature acquisition: theory
#
# **Learning goals.** After this notebook you can
#
# 1. state active feature acquisition (AFA: buying a test instance's features one at a time, each
#    chosen from what is known so far) and the greedy policy that buys the feature of largest
#    conditional mutual information (CMI) with the label;
# 2. show that "pick the feature that minimises the expected next-step NLL" (negative
#    log-likelihood of the label) is the greedy CMI policy;
# 3. explain why a sequence model trained on the prequential likelihood of many tasks (the product
#    of its one-step-ahead predictions of each label from the ones before) gives uncertainty that
#    shrinks with the context, like a Bayesian posterior predictive;
# 4. say what the experiment measures.
#
# **Sources.** Paper: Kobayashi, Jing, Yao, Namkoong and Joshi, "Learning-To-Measure: In-Context
# Active Feature Acquisition", ICML 2026 (arXiv 2510.12624). Its abstract and opening, third-party
# summaries and public reviews of its first version could be read, but not its tables, figures or
# exact theorem statements, so no number of the paper is quoted and every threshold is ours. The
# complete official code decided the tokens, attention masks, losses, heads and the selector
# objective ("Sources in detail" at the end).

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

from replib import core
from replib.papers.l2m import theory

core.set_style()
profile = core.resolve_profile(profile)
n_draws = {"smoke": 200, "book": 2000, "paper": 20000}[profile]

# %% [markdown]
# ## 1. The problem
#
# A test instance has features $X \in \mathbb R^d$ and a label $Y$. Features cost something to
# measure, so they are bought one at a time: at step $t$ the agent has acquired $\underline x_t$ and
# picks $A_{t+1}$ among the rest; after a budget of $k$ features a predictor outputs
# $p(Y \mid \underline x_k)$. The greedy policy buys the feature that tells most about the label given
# what is known:
# $$A_{t+1} = \arg\max_j I(Y; X_j \mid \underline X_t = \underline x_t),\qquad
# I(Y; X_j \mid \underline x_t) = \mathbb E\big[\mathrm{KL}\big(p(Y \mid X_j, \underline x_t) \,\|\,
# p(Y \mid \underline x_t)\big)\big].$$
# Here KL is the Kullback-Leibler divergence, so the CMI is how far, on average, learning $X_j$
# moves the predictive distribution of $Y$. Per-task methods learn $p$ and the policy from one
# task's data. L2M (Learning-To-Measure) learns both once, over a distribution of tasks, and reads a
# new task's labelled (and partly missing) rows in context, that is, as part of its input, without
# any training on the new task.
#
# ## 2. Greedy CMI for Gaussian tasks, and why the order is task-specific
#
# For jointly Gaussian $(X, Y)$ the CMI does not depend on the observed values:
# $I(Y; X_j \mid x_S) = \tfrac12 \log \frac{\mathrm{Var}(Y \mid x_S)}{\mathrm{Var}(Y \mid x_S, X_j)}$.
# Two linear tasks on the same three features, $y = w^\top x + \epsilon$, with different weights:

# %%
def linear_task_cov(w, noise=0.1, rho=0.5):
    a = np.array([[1.0, rho, 0.0], [rho, 1.0, 0.0], [0.0, 0.0, 1.0]])  # x1 and x2 correlated
    cxy = a @ w
    return np.block([[a, cxy[:, None]], [cxy[None, :], np.array([[w @ a @ w + noise**2]])]])


for name, w in [("task A", np.array([1.0, 0.0, 0.6])), ("task B", np.array([0.0, 0.3, 1.0]))]:
    cov = linear_task_cov(w)
    first = [round(theory.gaussian_cmi(cov, j, []), 3) for j in range(3)]
    print(f"{name}: CMI of each feature with nothing acquired {first}; greedy order {theory.greedy_cmi_order(cov)}")

cov = linear_task_cov(np.array([1.0, 0.0, 0.6]))
assert theory.greedy_cmi_order(cov)[0] == 0 and theory.greedy_cmi_order(linear_task_cov(np.array([0.0, 0.3, 1.0])))[0] == 2
# x2 is useless in task A, yet has CMI > 0 before x1 is known (it is correlated with x1), and none after:
assert theory.gaussian_cmi(cov, 1, []) > 0.05 and abs(theory.gaussian_cmi(cov, 1, [0, 2])) < 1e-9

# %% [markdown]
# The best first feature differs between the tasks, so a single fixed order cannot be greedy for
# both: the policy has to know the task, and L2M must read it from the context rows.
#
# ## 3. Minimising the next-step NLL is maximising CMI
#
# For the Bayes predictor, $\mathbb E[-\log p(Y \mid \underline x_t, X_j) \mid \underline x_t] =
# H(Y \mid \underline x_t) - I(Y; X_j \mid \underline x_t)$ (Covert et al., ICML 2023): the feature that
# lowers the expected NLL most is the one of largest CMI. So a selector trained to minimise the NLL
# after its pick learns the greedy CMI policy without ever estimating a mutual information. A check
# on a small discrete joint $p(x_1, x_2, y)$:

# %%
rng = np.random.default_rng(0)
joint = rng.dirichlet(np.ones(3 * 2 * 2)).reshape(3, 2, 2)
parts = theory.discrete_cmi_and_nll(joint)
print({k: round(v, 4) for k, v in parts.items()})
for j in (1, 2):
    assert np.isclose(parts[f"NLL after X{j}"], parts["H(Y)"] - parts[f"I(Y;X{j})"])

# %% [markdown]
# ## 4. Sequence prediction is Bayesian prediction
#
# L2M is pre-trained on the prequential likelihood $\sum_i \log p_\theta(y_i \mid \mathcal D_c, y_{<i},
# x_i)$ over many tasks drawn from a prior. The product of one-step-ahead predictives of a Bayesian
# model is its marginal likelihood, and the model that maximises the expected prequential likelihood
# over the prior is the Bayesian posterior predictive (the label's distribution averaged over every
# task still plausible given the context $\mathcal D_c$). That is why an in-context model can have
# *epistemic* uncertainty, uncertainty about which task it faces, which more data removes (unlike
# the label noise): its predictive variance should shrink as the context grows. Bayesian linear
# regression shows the target L2M imitates (prior $w \sim N(0, I)$, noise variance 0.01):

# %%
sizes = [1, 2, 4, 8, 16, 32]
variances = []
for n in sizes:
    v = []
    for _ in range(n_draws // 20):
        w = rng.normal(size=3)
        xc = rng.uniform(-2, 2, size=(n, 3))
        yc = xc @ w + 0.1 * rng.normal(size=n)
        _, var = theory.blr_predictive(xc, yc, rng.uniform(-2, 2, size=(20, 3)))
        v.append(var.mean())
    variances.append(np.mean(v))
fig, ax = plt.subplots(figsize=(5, 3.2))
ax.plot(sizes, variances, "o-", label="posterior predictive")
ax.axhline(0.01, color="grey", lw=1, label="noise variance")
ax.set(xscale="log", yscale="log", xlabel="context size", ylabel="predictive variance")
ax.legend(fontsize="small")
plt.show()
assert all(a > b for a, b in zip(variances, variances[1:]))

# %% [markdown]
# *Figure 1. Mean predictive variance of Bayesian linear regression (three features) against the
# number of labelled context rows: the epistemic part shrinks towards the noise variance.*
#
# ## 5. Missing entries in the retrospective rows
#
# The context rows are retrospective: some features were never measured. The paper identifies the
# task CMI from rows where $X_j$ was measured ($R_j = 1$), under three assumptions: missing at
# random given what is acquired ($R_j \perp X_j \mid \underline X_t$), measuring does not change
# the label ($R_j \perp Y \mid X_j, \underline X_t$), and positivity (every feature has some
# chance of having been measured). A quick illustration of why the first matters: estimate
# $\mathbb E[Y \mid X_1 > 0]$ from the rows where $X_1$ was measured, once with $X_1$ measured at
# random and once MNAR (missing not at random: here $X_1$ is measured mostly when it is large).

# %%
x1 = rng.normal(size=n_draws * 10)
y = x1 + 0.5 * rng.normal(size=x1.size)
truth = y[x1 > 0].mean()
mar = rng.uniform(size=x1.size) < 0.5  # measured at random
mnar = rng.uniform(size=x1.size) < 1 / (1 + np.exp(-3 * (x1 - 1)))  # measured mostly when x1 is large
est = {"MCAR / MAR": y[mar & (x1 > 0)].mean(), "MNAR": y[mnar & (x1 > 0)].mean()}
print(f"truth {truth:.3f}; " + ", ".join(f"{k} estimate {v:.3f}" for k, v in est.items()))
assert abs(est["MCAR / MAR"] - truth) < 0.1 and est["MNAR"] - truth > 0.2

# %% [markdown]
# Our tasks use MCAR missingness (missing completely at random: whether an entry is missing does not
# depend on any value), so the assumptions hold by construction; the paper's MAR setting (missing
# at random: missingness may depend on the observed values, not on the missing ones) is not
# tested.
#
# ## 6. What to expect in the experiment
#
# - With every feature observed, L2M's NLL should beat a model fitted to one task's few rows, most
#   at small context sizes (section 4: the prior does the work where data are scarce).
# - Its selector should pick informative features first, and its NLL curve over acquisitions
#   should fall faster than with random picks (sections 2 and 3), and match or beat a per-task MLP
#   (a small fully connected network fitted to one task) with a GDFS selector (greedy dynamic
#   feature selection, Covert et al.: a network trained on that task to pick the next feature by
#   the same next-step NLL).
#
# ## Summary
#
# Greedy CMI is the natural acquisition policy, and it is task-specific; minimising the next-step
# NLL implements it; a sequence model trained on the prequential likelihood of many tasks imitates
# the Bayesian posterior predictive, whose uncertainty shrinks with the context. L2M combines the
# three in one transformer.
#
# ## Exercises
#
# 1. In section 2, set `rho=0.0`. Does feature 2 still have positive CMI in task A before anything
#    is acquired? Why?
# 2. In section 3, make $Y$ independent of $X_2$ in the joint. What are $I(Y; X_2)$ and the NLL after
#    $X_2$?
# 3. In section 4, raise the noise variance to 0.25. At which context size does the epistemic part
#    fall below the noise?
#
# ## Sources in detail
#
# Paper: Kobayashi, Jing, Yao, Namkoong and Joshi, "Learning-To-Measure: In-Context Active Feature
# Acquisition", ICML 2026 (arXiv 2510.12624). What could be read: the abstract and opening of the
# paper, third-party summaries and public reviews of its first version, and the complete official
# code (https://github.com/reAIM-Lab/Learning-To-Measure). The paper's tables, figures and exact
# theorem statements were *not* available, so no number of the paper is quoted: the thresholds of
# this chapter are our choices. Tokens, attention masks, losses, heads and the selector objective
# follow the code. Our choices: the task prior (six features, sparse linear labels at the book
# profile; a random tanh-network prior, planned first, did not learn within the book budget), the
# model size, one random acquisition depth per target and step (the code loops over all depths),
# the selector trained with the inference mask, every budget, and batched per-task baselines. The
# identification result under missingness is stated in the paper but its exact statement was not
# available; we only illustrate its assumptions.
