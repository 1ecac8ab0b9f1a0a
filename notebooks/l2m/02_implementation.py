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
# # In-context feature acquisition: implementation
#
# **Learning goals.** After this notebook you can
#
# 1. write the tokens and the two attention masks of L2M and test that no query sees its own label;
# 2. explain the prequential pre-training loss with acquisition-state augmentation;
# 3. explain how a straight-through Gumbel pick (a one-hot sample in the forward pass, its soft
#    relaxation in the backward pass) lets the NLL after the pick train the selector, and why that
#    objective is greedy conditional mutual information (CMI: how much a feature tells about the
#    label given what is already known);
# 4. run greedy test-time acquisition with the in-context model.
#
# Every function shown lives in `replib.papers.l2m.method`; its docstring names the piece of the
# method it implements. L2M (Learning-To-Measure) is one transformer that reads a new task's
# labelled rows in its input ("in context") and both predicts the label of a target row and chooses
# which of its features to measure next. The loss throughout is the NLL, the negative
# log-likelihood of the true label under the predicted distribution (lower is better).

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
import numpy as np
import torch

from replib import core
from replib.core.runtime import compute_threads
from replib.papers.l2m import baselines, exercises, experiment, method, task

core.set_style()
profile = core.resolve_profile(profile)
steps = {"smoke": 40, "book": 300, "paper": 1000}[profile]
torch.manual_seed(0)

# %% [markdown]
# ## 1. Tasks from the prior
#
# A task is a set of rows $(x, y)$ with $x \in \mathbb R^6$; its label depends on an informative subset
# $S$ of one to three features. Retrospective rows carry a measured indicator $r \in \{0, 1\}^6$
# (MCAR, missing completely at random: each entry is missing independently of every value, at a
# per-feature rate drawn from $U(0, p_{max})$).

# %%
core.show_source(task.sample_tasks)

# %%
tasks = task.sample_tasks(np.random.default_rng(0), n_tasks=2, n_rows=5, kind="linear")
print("informative sets:", [np.flatnonzero(s).tolist() for s in tasks["informative"]])
print("x of task 0:\n", tasks["x"][0].round(2))
print("measured r of task 0:\n", tasks["r"][0])
big = task.sample_tasks(np.random.default_rng(1), n_tasks=200, n_rows=50, kind="linear")
assert 0.9 < big["y"].std() < 1.1  # unit label variance, plus noise sd 0.1
assert set(big["informative"].sum(axis=1)) == {1, 2, 3}

# %% [markdown]
# ## 2. Tokens
#
# A context row is the token $[x_i \odot r_i,\ r_i,\ y_i]$; a query at acquisition state $m$ (the
# 0/1 mask of the features acquired so far) is $[x \odot m,\ m,\ 0]$. A missing entry is zeroed
# *and* flagged by the mask channel, so the model can tell "missing" from "measured as zero".

# %%
core.show_source(method.context_tokens)
core.show_source(method.query_tokens)

# %%
x = torch.tensor([[0.5, -1.0, 2.0]])
r = torch.tensor([[1.0, 0.0, 1.0]])
assert method.context_tokens(x, r, torch.tensor([0.25])).tolist() == [[0.5, 0.0, 2.0, 1.0, 0.0, 1.0, 0.25]]
assert method.query_tokens(x, torch.tensor([[0.0, 1.0, 0.0]])).tolist() == [[0.0, -1.0, 0.0, 0.0, 1.0, 0.0, 0.0]]

# %% [markdown]
# ## 3. The attention masks
#
# Pre-training uses the sequence [context | real targets (with labels) | query copies (label 0)] and
# the autoregressive mask: the context attends to itself; real target $i$ to the context and real
# targets $j \le i$; query $i$ to the context, real targets $j < i$ and itself. The model is then
# trained on the prequential likelihood
# $$-\sum_i \log p_\theta\big(y_i \mid \mathcal D_c, (x_j \odot r_j, r_j, y_j)_{j<i}, x_i \odot m_i, m_i\big),$$
# the product of one-step-ahead predictives that, for a Bayesian model, equals the marginal
# likelihood. At test time the queries attend to the context and themselves only.

# %%
core.show_source(method.attention_mask)

# %%
mask = method.attention_mask(2, 3, autoregressive=True)
print((mask == 0).int())
allowed = mask == 0
assert allowed[:2, :2].all() and not allowed[:2, 2:].any()  # context sees context only
assert allowed[5 + 1, 2] and not allowed[5 + 1, 3]  # query 1 sees real target 0, not its own label
assert not allowed[5:, 5:].logical_xor(torch.eye(3, dtype=torch.bool)).any()  # queries see themselves
assert (method.attention_mask(2, 3, autoregressive=False) == 0).sum() == 2 * 2 + 3 * 3

# %% [markdown]
# The leak test: perturb the labels of real targets $j \ge i$; query $i$'s output must not move.

# %%
model = method.L2M(d=3, width=16, ff=32, hidden=32)
ctx = method.context_tokens(torch.randn(1, 2, 3), torch.ones(1, 2, 3), torch.randn(1, 2))
xt, yt = torch.randn(1, 3, 3), torch.randn(1, 3)
queries = method.query_tokens(xt, torch.ones(1, 3, 3))
with torch.no_grad():
    before = model.encode(ctx, queries, method.context_tokens(xt, torch.ones(1, 3, 3), yt))
    changed = yt.clone()
    changed[0, 1:] += 10.0  # labels of targets 1 and 2
    after = model.encode(ctx, queries, method.context_tokens(xt, torch.ones(1, 3, 3), changed))
assert torch.allclose(before[0, :2], after[0, :2], atol=1e-5)  # queries 0 and 1 cannot see them
assert not torch.allclose(before[0, 2], after[0, 2])  # query 2 sees target 1's label

# %% [markdown]
# ## 4. The model
#
# Embedder (an MLP, a small fully connected network, with GELU activations (a smooth variant of the
# ReLU, max(0, x)), a linear skip and layer normalisation), a post-norm transformer encoder
# (normalisation after each residual sub-layer), and two heads read at the query tokens: the
# predictor (mean and $\sigma = 0.05 + 0.95\,\mathrm{softplus}$, a Gaussian over the label) and the
# selector ($d$ logits, one per feature, near-zero initial output).

# %%
core.show_source(method.L2M)

# %% [markdown]
# ## 5. Acquisition-state augmentation and the pre-training loss
#
# Each target is scored at a random acquisition state: $k$ uniform on $0..n_{avail}$, then $k$ of its
# available features, the state after $k$ random acquisitions.

# %%
core.show_source(method.acquisition_state)
core.show_source(method.prequential_nll)

# %%
generator = torch.Generator().manual_seed(0)
r = torch.tensor([[1.0, 0.0, 1.0, 1.0]]).repeat(4000, 1)
m = method.acquisition_state(r, generator)
assert (m <= r).all()  # never a missing feature
depths = m.sum(dim=1)
assert set(depths.tolist()) == {0.0, 1.0, 2.0, 3.0}  # k uniform on 0..3
assert abs((depths == 0).float().mean() - 0.25) < 0.03

# %% [markdown]
# A short pre-training run on the sparse linear prior (the experiment runs far longer): the
# prequential NLL falls.

# %%
core.show_source(method.train_predictor)

# %%
def draw_batch(rng):
    return {k: torch.as_tensor(v, dtype=torch.float32)
            for k, v in task.sample_tasks(rng, 8, 32, kind="linear").items() if k != "informative"}


small = method.L2M(task.N_FEATURES, width=32, ff=64, hidden=64)
with compute_threads(1):  # small models are fastest, and reproducible, on one thread
    losses = method.train_predictor(small, draw_batch, steps, lr=3e-3, seed=0, context_range=(4, 24))
print(f"prequential nll: first 20 steps {np.mean(losses[:20]):.3f}, last 20 steps {np.mean(losses[-20:]):.3f}")
assert np.mean(losses[-20:]) < np.mean(losses[:20])

# %% [markdown]
# ## 6. The selector: greedy CMI by the next-step NLL
#
# For the Bayes predictor, $\mathbb E[-\log p(Y \mid \underline x_t, X_j) \mid \underline x_t] =
# H(Y \mid \underline x_t) - I(Y; X_j \mid \underline x_t)$, so the feature whose acquisition lowers the
# expected NLL most is the one of largest conditional mutual information. The selector is trained to
# pick it: a straight-through Gumbel one-hot $s$ over the available, unacquired features, and the loss
# $-\log p_\theta(y \mid x \odot \max(m, s), \max(m, s); \mathcal D_c)$, whose gradient reaches the
# logits through the soft sample.

# %%
core.show_source(method.straight_through_gumbel)
core.show_source(method.selector_loss)

# %%
logits = torch.tensor([[0.0, 2.0, -1e8]], requires_grad=True)
s = method.straight_through_gumbel(logits, 1.0, torch.Generator().manual_seed(1))
assert abs(s.sum().item() - 1.0) < 1e-6 and s[0, 2].item() == 0.0  # one-hot, never a blocked feature
(s * torch.tensor([[1.0, 2.0, 3.0]])).sum().backward()
assert logits.grad.abs().sum() > 0  # the gradient passes through the hard sample

# %%
core.show_source(method.train_selector)

# %% [markdown]
# ## 7. Greedy acquisition at test time
#
# From $m = 0$: predict, pick the unacquired feature of largest selector logit, repeat.

# %%
core.show_source(method.greedy_acquisition)

# %%
def predict(x, m):  # a toy predictor: only feature 2 helps
    return torch.zeros(x.shape[:-1]), 1.0 - 0.9 * m[..., 2]


def select(x, m):  # prefers feature 2, then 0
    return torch.tensor([1.0, 0.0, 2.0]).expand_as(m)


nlls, picks = method.greedy_acquisition(predict, select, torch.zeros(2, 3), torch.zeros(2))
assert picks[0].tolist() == [2, 0, 1]
assert nlls.shape == (2, 4) and nlls[0, 1] < nlls[0, 0] and torch.allclose(nlls[0, 1], nlls[0, 3])

# %% [markdown]
# The per-task baselines use the same loop: a masked MLP trained on one task's context rows
# (many tasks at once, one network each; the mask tells it which inputs are missing) and a
# GDFS-style selector (greedy dynamic feature selection, Covert et al.: a per-task network that
# picks the next feature) trained on it with the same one-step objective.

# %%
core.show_source(baselines.fit_gdfs_selector)

# %% [markdown]
# ## 8. Two diagnostic arms: the oracle order and the state the selector reads
#
# Two arms tell a selector that did not learn from one that could not. The *oracle order* feeds
# the L2M predictor the task's features by decreasing weight in the label (it reads the task's
# generator, which no model sees): no selector with the same predictor can do much better, so its
# curve is the room a selector has. And the selector's first pick can only use the *empty-state
# hidden state*, the encoder's output at the query $[0, 0, 0]$, which is the same for every target
# of a task and depends on the context alone. A linear probe of the informative set on that state
# (logistic regression per feature, fitted on other prior tasks) says whether the frozen encoder
# put the relevance there at all.

# %%
core.show_source(method.empty_state_hidden)

# %%
tiny = method.L2M(task.N_FEATURES, width=16, ff=32, hidden=32).eval()
rows = experiment.as_tensors(task.sample_tasks(np.random.default_rng(3), 2, 10, kind="linear"))
ctx = method.context_tokens(rows["x"][:, :6], rows["r"][:, :6], rows["y"][:, :6])
h = method.empty_state_hidden(tiny, ctx)
weights = torch.tensor([[0.0, 0.5, 2.0, 0.0, 1.0, 0.0]] * 2)
_, order = method.l2m_acquisition(tiny, ctx, rows["x"][:, 6:], rows["y"][:, 6:], "oracle", importance=weights)
assert h.shape == (2, 16) and order[0, 0, :3].tolist() == [2, 4, 1]  # by decreasing weight

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write `allowed(n_context, n_target, autoregressive)`: the boolean matrix (rows
# attend to columns) of section 3, for the autoregressive sequence [context | real targets |
# queries] and the inference sequence [context | queries]. The grader passes plain Python ints and
# a bool.

# %% tags=["solution", "hide-input"]
def allowed(n_context, n_target, autoregressive):
    n_real = n_target if autoregressive else 0
    size = n_context + n_real + n_target
    a = np.zeros((size, size), dtype=bool)
    a[:, :n_context] = True
    q0 = n_context + n_real
    if autoregressive:
        a[n_context:q0, n_context:q0] = np.tril(np.ones((n_target, n_target), dtype=bool))
        a[q0:, n_context:q0] = np.tril(np.ones((n_target, n_target), dtype=bool), k=-1)
    a[q0:, q0:] = np.eye(n_target, dtype=bool)
    return a


# %%
exercises.check_attention_mask(allowed)

# %% [markdown]
# **Exercise 2.** For a Gaussian vector whose last coordinate is the label, write
# `gaussian_cmi(cov, j, given)`: the conditional mutual information $I(Y; X_j \mid X_{given})$.
# The grader passes `cov` as a NumPy array, `j` as an int and `given` as a plain Python list of
# feature indices (possibly empty).

# %% tags=["solution", "hide-input"]
def gaussian_cmi(cov, j, given):
    y = cov.shape[0] - 1

    def cond_var(idx):
        if not idx:
            return cov[y, y]
        c = cov[y, idx]
        return cov[y, y] - c @ np.linalg.solve(cov[np.ix_(idx, idx)], c)

    return 0.5 * np.log(cond_var(list(given)) / cond_var([*given, j]))


# %%
exercises.check_gaussian_cmi(gaussian_cmi)

# %% [markdown]
# **Exercise 3 (open).** The selector is trained at states reached by *random* acquisitions, not
# by its own picks. What could go wrong at test time, when it only ever sees states it chose itself?
#
# ## Summary
#
# L2M is one transformer over row tokens $[x \odot r, r, y]$: pre-trained with an autoregressive mask
# on the prequential likelihood of targets at random acquisition states, it predicts a new task in
# context; its selector head, trained with the encoder frozen to minimise the NLL after a
# straight-through Gumbel pick, implements greedy CMI acquisition. Two diagnostic arms check the
# selector's chances: an oracle acquisition order through the same predictor (the room a selector
# has) and a linear probe of the informative set on the hidden state the first pick reads. The
# experiment notebook trains it at the book scale and compares it with per-task models.
