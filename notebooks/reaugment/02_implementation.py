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
# # RL-learned augmentation for few-shot forecasting: implementation
#
# This notebook builds ReAugment from `replib.papers.reaugment`: the toy world (three short real
# series, few-shot windows, the forecaster) in its `task` module, the method (stage 0, the model
# zoo of $K$ forecasters, each trained on all but one of $K$ folds of the data, and its anchors, the
# windows on which the zoo's errors vary most; stage A, the VMAE, a variational masked autoencoder
# that hides part of a window and regenerates it; stage B, REINFORCE, the score-function policy
# gradient, which needs only the reward's values) in its `method` module, which uses the shared MLP
# (multilayer perceptron) of `replib.models.mlp` and the shared REINFORCE loss of `replib.rl`. Each piece is
# shown next to the equation or step it implements and checked on small inputs.
#
# **Learning goals.** After this notebook you can
#
# 1. cut few-shot forecasting windows from a series without leaking the test period;
# 2. build a K-fold model zoo, its variances and the overfit-prone anchors;
# 3. implement the VMAE's masking, its objective and its generation from the prior;
# 4. implement the bounded zoo reward and one REINFORCE step whose gradient never touches the
#    forecasters.

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
from replib.papers.reaugment import baselines, exercises, experiment, method, task

core.set_style()
profile = core.resolve_profile(profile)
torch.set_num_threads(1)
epochs, vmae_steps, rl_iterations = {"smoke": (60, 100, 20), "book": (300, 500, 100), "paper": (300, 800, 300)}[profile]

# %% [markdown]
# ## 1. The series and the few-shot windows
#
# Three series that ship with statsmodels (their values are stored in `task`, since statsmodels is
# not a dependency of the book): monthly El Nino sea-surface temperatures 1950-2010, yearly sunspot
# activity 1700-2008, and the monthly change of Mauna Loa CO2 1958-2001. Each is standardised with
# the mean and standard deviation of its first 70%; windows of $L = 36$ look-back steps and $H = 12$
# target steps are cut with stride 1; the **few-shot** training set $\mathcal D$ is the earliest 60
# windows of the training period, and every test window lies after it.

# %%
core.show_source(task.make_windows)

# %%
win = task.make_windows(task.load_series("elnino"))
print({k: np.shape(v) for k, v in win.items() if k in ("train", "extra", "val", "test")},
      "training windows before the cut:", win["n_train_total"])
z = (task.load_series("elnino") - win["mean"]) / win["std"]
assert np.allclose(win["train"][0], z[:48]) and np.allclose(win["train"][59], z[59:107])
cut = int(round(0.7 * len(z)))
assert np.allclose(win["test"][0], z[cut:cut + 48])  # the first test window starts after the training period
assert np.allclose(win["extra"][0], z[60:108])  # the headroom arm's real windows follow the few-shot ones
assert np.allclose(win["val"][-1], z[cut - 48:cut])  # validation: the end of the training period, never trained on
assert abs(z[:cut].mean()) < 1e-9 and abs(z[:cut].std() - 1) < 1e-9
ds = task.windows_dataset("elnino")
ds.to_pandas().head()

# %%
fig, axes = plt.subplots(3, 1, figsize=(10, 6))
for ax, name in zip(axes, task.DATASETS):
    w = task.make_windows(task.load_series(name))
    series = (task.load_series(name) - w["mean"]) / w["std"]
    cut = int(round(0.7 * len(series)))
    ax.plot(series, color="0.5", lw=0.8)
    ax.axvspan(0, 60 + 47, color="C0", alpha=0.15, label="few-shot windows")
    ax.axvspan(cut, len(series), color="C3", alpha=0.1, label="test period")
    ax.set(ylabel=name)
axes[0].legend(fontsize="small", loc="upper right")
axes[-1].set(xlabel="time step")
plt.show()

# %% [markdown]
# *Figure 1. The three standardised series; blue: the span of the 60 few-shot training windows,
# red: the test period (the last 30%). Everything between them is unused: few-shot means few.*
#
# ## 2. The forecaster
#
# $f_\theta$ is an MLP 36-64-12 with ReLU activations ($\max(0, x)$). The experiment trains many of
# them (zoo members, retrained models) at once, so `ForecasterBank` stacks $M$ of them: member $m$
# starts from the weights of the shared `MLP` with its seed and computes the same function.
# `fit_forecasters` trains each member by full-batch Adam on its own weighted windows; as Adam is
# elementwise and no weight is shared, each member trains exactly as it would alone.

# %%
core.show_source(task.ForecasterBank)

# %%
from replib.models.mlp import MLP  # noqa: E402

bank = task.ForecasterBank([3, 7])
x = torch.randn(5, 36, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    assert torch.allclose(bank(x)[1], MLP([36, 64, 12], seed=7)(x), atol=1e-6)
solo = task.ForecasterBank([7])
both = task.ForecasterBank([3, 7])
task.fit_forecasters(solo, win["train"][:20], epochs=20)
task.fit_forecasters(both, win["train"][:20], weights=np.ones((2, 20)), epochs=20)
assert torch.allclose(both.w1[1], solo.w1[0], atol=1e-5)  # trained together = trained alone
print("test MSE of two members trained 20 epochs:", task.forecast_mse(both, win["test"]).round(3))

# %% [markdown]
# ## 3. Stage 0: the model zoo and the anchors
#
# Step 1 splits $\mathcal D$ into $K$ folds and trains member $k$ on every fold but $k$. Step 2
# computes each member's error on each window, $e_k(w_i) = \|f_{\theta_k}(x_i) - y_i\|^2 / H$, and the
# zoo variance $v_i = \operatorname{Var}_k e_k(w_i)$ (population variance). Step 3 keeps the top 50%
# by $v_i$ as anchors.

# %%
core.show_source(method.kfold_assignment)
core.show_source(method.zoo_errors)
core.show_source(method.zoo_variance)
core.show_source(method.select_anchors)

# %%
folds = method.kfold_assignment(11, 3, np.random.default_rng(0))
assert sorted(np.bincount(folds)) == [3, 4, 4]
errors = torch.tensor([[1.0, 2.0, 0.0, 5.0], [1.0, 4.0, 0.0, 1.0]])
assert torch.allclose(method.zoo_variance(errors), torch.tensor([0.0, 1.0, 0.0, 4.0]))
assert list(method.select_anchors([0.0, 1.0, 0.0, 4.0], 0.5)) == [3, 1]


def constant_zoo(x):
    """A hand-made zoo of two members: forecasts 0 and 1 at every horizon step."""
    return torch.stack([torch.zeros(len(x), 2), torch.ones(len(x), 2)])


w_demo = torch.tensor([[5.0, 0.0, 0.0], [5.0, 1.0, 1.0]])  # L = 1, H = 2
assert torch.allclose(method.zoo_errors(constant_zoo, w_demo, 1), torch.tensor([[0.0, 1.0], [1.0, 0.0]]))

# %% [markdown]
# The diagnostic behind stage 0 (not a step of the method): per window, the out-of-fold error of the
# one member that did not see it against the mean in-fold error of the others. A zoo of five members
# on El Nino's 60 windows:

# %%
core.show_source(method.fold_gap)

# %%
folds = method.kfold_assignment(60, 5, np.random.default_rng(0))
zoo = task.ForecasterBank(range(5))
task.fit_forecasters(zoo, win["train"], (folds[None, :] != np.arange(5)[:, None]).astype(float), epochs=epochs,
                     weight_decay=task.WEIGHT_DECAY["elnino"])
errors = method.zoo_errors(zoo, win["train"], 36)
variance = method.zoo_variance(errors).numpy()
anchors = method.select_anchors(variance, 0.5)
oof, inf = method.fold_gap(errors.numpy(), folds)
is_anchor = np.isin(np.arange(60), anchors)
print(f"out-of-fold / in-fold error: anchors {oof[is_anchor].mean() / inf[is_anchor].mean():.2f}, "
      f"other windows {oof[~is_anchor].mean() / inf[~is_anchor].mean():.2f}")

# %% [markdown]
# **Exercise 1.** Write `fold_gap(errors, folds)`: for a $(K, N)$ array of zoo errors and the fold
# id of each window, return the pair (out-of-fold error, mean in-fold error), one value per window.

# %% tags=["solution", "hide-input"]
def fold_gap(errors, folds):
    errors = np.asarray(errors, dtype=float)
    held_out = np.arange(errors.shape[0])[:, None] == np.asarray(folds)[None, :]
    out_of_fold = (errors * held_out).sum(axis=0)
    in_fold = (errors * ~held_out).sum(axis=0) / (~held_out).sum(axis=0)
    return out_of_fold, in_fold


# %%
exercises.check_fold_gap(fold_gap)

# %% [markdown]
# ## 4. Stage A: the variational masked autoencoder
#
# One contiguous span of 25% of the $T = 48$ steps is masked (shape and ratio are not stated in the
# paper). The posterior $q(z \mid w)$ sees the full window, the prior $p(z \mid w_{\rm vis}, m)$ the
# visible part and the mask, and the decoder regenerates the window from $(z, w_{\rm vis}, m)$.

# %%
core.show_source(method.contiguous_mask)

# %%
mask = method.contiguous_mask(500, 48, 0.25, torch.Generator().manual_seed(0))
assert torch.all(mask.sum(dim=1) == 12)
assert torch.all((mask.diff(dim=1) != 0).sum(dim=1) <= 2)  # one span: at most one rise and one fall
assert mask[:, 0].any() and mask[:, -1].any()  # spans reach both ends

# %% [markdown]
# The KL (Kullback-Leibler divergence, how far one distribution is from another) between two
# diagonal Gaussians, $\frac12 \sum_j [\log \sigma_{p,j}^2 - \log \sigma_{q,j}^2 +
# (\sigma_{q,j}^2 + (\mu_{q,j} - \mu_{p,j})^2) / \sigma_{p,j}^2 - 1]$:

# %%
core.show_source(method.gaussian_kl)

# %%
zero = torch.zeros(1, 3)
assert torch.allclose(method.gaussian_kl(zero, zero, zero, zero), torch.zeros(1))
one = method.gaussian_kl(torch.ones(1, 1), zero[:, :1], zero[:, :1], zero[:, :1])
assert torch.allclose(one, torch.tensor([0.5]))  # unit variances, means 1 apart: 1/2
samples = 0.3 + np.exp(0.5 * -0.4) * np.random.default_rng(0).standard_normal(200_000)
log_q = -0.5 * ((samples - 0.3) ** 2 / np.exp(-0.4) - 0.4 + np.log(2 * np.pi))
log_p = -0.5 * ((samples + 0.2) ** 2 / np.exp(0.5) + 0.5 + np.log(2 * np.pi))
exact = float(method.gaussian_kl(torch.tensor([[0.3]]), torch.tensor([[-0.4]]), torch.tensor([[-0.2]]),
                                 torch.tensor([[0.5]])))
assert abs((log_q - log_p).mean() - exact) < 0.01  # agrees with a Monte-Carlo estimate
print(f"KL exact {exact:.4f}, Monte Carlo {(log_q - log_p).mean():.4f}")

# %% [markdown]
# **Exercise 2.** Write `gaussian_kl(mu_q, logvar_q, mu_p, logvar_p)` for torch tensors whose last
# axis holds the latent dimensions.

# %% tags=["solution", "hide-input"]
def gaussian_kl(mu_q, logvar_q, mu_p, logvar_p):
    var_q, var_p = logvar_q.exp(), logvar_p.exp()
    return 0.5 * (logvar_p - logvar_q + (var_q + (mu_q - mu_p) ** 2) / var_p - 1).sum(dim=-1)


# %%
exercises.check_gaussian_kl(gaussian_kl)

# %% [markdown]
# The VMAE and its objective, $\frac1T \|\hat w(z) - w\|^2 + \beta \, \mathrm{KL}(q \| p) / T$ with
# $z \sim q(z \mid w)$ and $\beta = 0.1$:

# %%
core.show_source(method.VMAE)
core.show_source(method.vmae_loss)

# %%
vmae = method.VMAE(48, seed=0)
history = method.train_vmae(vmae, win["train"], steps=vmae_steps, lr=4e-3, seed=1)
first, last = history[0]["reconstruction"], np.mean([h["reconstruction"] for h in history[-20:]])
print(f"reconstruction MSE: step 1 {first:.3f}, last 20 steps {last:.4f}; KL {history[-1]['kl']:.2f}")
assert last < 0.2 * first
generated = method.generate(vmae, win["train"][anchors[:3]], n_per_anchor=4, seed=2)
assert generated.shape == (12, 48)
print("mean squared distance of generated windows to their anchors:",
      float(method.anchor_distance(torch.tensor(generated), torch.tensor(np.repeat(win["train"][anchors[:3]], 4, 0))).mean()))

# %% [markdown]
# ## 5. Stage B: REINFORCE toward the zoo's reward
#
# The reward, in the *proposed* bounded form (the paper's formula could not be read):
# $r(\tilde w) = \log(\operatorname{Var}_k e_k(\tilde w) + \varepsilon) - \lambda \|\tilde w - w\|^2 /
# d_0$, with $\|\cdot\|^2$ the mean squared step difference, $\lambda = 0.3$, $\varepsilon = 10^{-4}$.

# %%
core.show_source(method.anchor_distance)
core.show_source(method.zoo_reward)

# %%
anchor = torch.tensor([[5.0, 0.0, 0.0]])
moved = torch.tensor([[5.0, 1.0, 1.0]])  # errors 1 and 0 under constant_zoo: variance 0.25
scored = method.zoo_reward(constant_zoo, moved, anchor, lookback=1, lam=0.3, d0=0.5)
assert torch.isclose(scored["variance"], torch.tensor([0.25], dtype=torch.float64))
assert torch.isclose(scored["distance"], torch.tensor([2 / 3], dtype=torch.float64))
assert torch.isclose(scored["reward"], torch.tensor([np.log(0.25 + 1e-4) - 0.3 * (2 / 3) / 0.5], dtype=torch.float64))
v1 = method.zoo_reward(constant_zoo, moved, anchor, lookback=1, lam=0.3, d0=0.5, direction=-1.0)
assert torch.isclose(v1["reward"], torch.tensor([-np.log(0.25 + 1e-4) - 0.3 * (2 / 3) / 0.5], dtype=torch.float64))

# %% [markdown]
# One REINFORCE step: sample $z \sim \pi_\phi(z \mid w_{\rm vis}, m)$ (the prior network), decode,
# score, and descend $-\frac1N \sum_i A_i \log \pi_\phi(z_i \mid w_{\rm vis}, m)$ with $A = (r - \bar r)
# / \mathrm{std}(r)$ (`replib.rl.group_advantages` on one group, `replib.rl.policy_gradient_loss`).
# Only the prior's parameters are optimised; the zoo is called under `no_grad`.

# %%
core.show_source(method.reinforce_step)
core.show_source(method.rl_finetune)

# %%
tuned = method.VMAE(48, seed=0)
tuned.load_state_dict(vmae.state_dict())
decoder_before = [p.detach().clone() for p in tuned.decoder.parameters()]
prior_before = [p.detach().clone() for p in tuned.prior.parameters()]
zoo.zero_grad(set_to_none=True)  # clear the gradients left by the zoo's own training
curve, d0 = method.rl_finetune(tuned, zoo, win["train"][anchors], 36, iterations=rl_iterations, seed=3)
assert all(torch.equal(a, b) for a, b in zip(decoder_before, tuned.decoder.parameters()))  # decoder fixed
assert any(not torch.equal(a, b) for a, b in zip(prior_before, tuned.prior.parameters()))  # the policy moved
assert all(p.grad is None for p in zoo.parameters())  # no gradient ever reached the forecasters
fig, axes = plt.subplots(1, 2, figsize=(10, 3))
axes[0].plot([c["reward"] for c in curve])
axes[0].set(xlabel="reinforce iteration", ylabel="mean reward")
axes[1].plot([c["distance"] for c in curve])
axes[1].axhline(d0, color="k", ls="--", lw=0.8)
axes[1].set(xlabel="reinforce iteration", ylabel="mean anchor distance")
plt.show()

# %% [markdown]
# *Figure 2. A short stage B on El Nino's anchors: the batch-mean reward (left) and mean squared
# distance to the anchors (right; dashed: $d_0$, the distance before RL).*
#
# ## 6. Stage C and the baselines
#
# The forecaster is retrained on $\mathcal D$ followed by the generated windows, the anchors
# augmented, never removed. Two knobs of stage C are not stated in the paper: how many windows to
# generate per anchor ($k$) and how much a generated window weighs in the loss against a real one
# ($\omega$). Member $m$ minimises
# $\sum_n \omega_n \|f_m(x_n) - y_n\|^2 / (H \sum_n \omega_n)$ with $\omega_n = 1$ on real windows and
# $\omega$ on generated ones. The experiment trains every $(k, \omega)$ of a grid for ReAugment, the
# VMAE without RL and jitter alike (jitter's dose: as many jittered copies of training windows) and
# judges each at the point chosen on a validation slice. The other arms: no augmentation, the next 60
# *real* windows of the training period (the headroom arm: what a perfect generator could at best
# imitate), random anchors, and the first version's reward sign.

# %%
core.show_source(baselines.jitter)
core.show_source(experiment.augmented_sets)

# %%
train = win["train"]
jittered = baselines.jitter(train, 0.1, np.random.default_rng(0))
additions = [(train[:0], 1.0), (win["extra"], 1.0), (np.full((30, 48), 2.0), 0.25), (jittered, 0.5)]
sets, weights = experiment.augmented_sets(train, additions)
assert sets.shape == (4, 120, 48) and weights.sum(axis=1).tolist() == [60, 120, 60 + 7.5, 60 + 30]
assert np.array_equal(sets[0, :60], train) and np.all(sets[2, 60:90] == 2.0) and np.all(sets[0, 60:] == 0)
assert np.all(weights[2, 60:90] == 0.25) and np.all(weights[2, 90:] == 0)
assert abs(np.std(jittered - train) - 0.1) < 0.005

# %% [markdown]
# ## Summary
#
# Stage 0 is K-fold training plus two lines (errors, variances, top half). Stage A is a conditional
# VAE over masked windows whose prior generates anchor-centred samples. Stage B fine-tunes that prior
# by REINFORCE on a reward computed from the zoo's forward passes, with the decoder fixed. Stage C
# appends the generated windows to the training set. The experiment runs all of it, with the
# baselines, on the three series.
#
# **Exercise 3 (open).** In stage B the advantage is normalised over the whole batch. Rewrite
# `reinforce_step` with one group per anchor (`group_advantages` on a (n_anchors, samples) array).
# Which source of variance does that remove, and what would it cost if every anchor's samples got
# the same reward?
