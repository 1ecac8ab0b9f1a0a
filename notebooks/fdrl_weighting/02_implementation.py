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
# # Client weighting in offline federated RL: implementation
#
# This notebook builds the toy and the method from `replib.papers.fdrl_weighting`: Pendulum and the
# client data sets in its `task` module, FEDORA's clients and server and the paper's plug-in in its
# `method` module. Each piece is shown next to the equation it implements and checked on tiny
# inputs. Pieces marked *proposed* are the chapter's reading of the abstract (see the Sources
# paragraphs of the theory notebook). FEDORA (federated ensemble-directed offline RL, reinforcement
# learning from fixed data) is the host method the paper plugs into; its clients run TD3+BC, an
# offline actor-critic learner whose actor raises the critic's Q-value (its estimate of the return of
# an action) while a behaviour-cloning (BC) term keeps it near the data's actions, with TD3's twin
# critics.
#
# **Learning goals.** After this notebook you can
#
# 1. generate offline Pendulum data sets of mixed quality for federated clients (clients that train
#    on their own data, which never leaves them, and share only model parameters with a server);
# 2. implement a batched ensemble that trains every client of several federations in one step;
# 3. implement FEDORA's critic target and actor loss, and the server's three weighting rules;
# 4. implement the policy inconsistency, the scaling factor, the combined score and the adaptive
#    pull toward the global model.

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
import pandas as pd
import torch

from replib import core
from replib.papers.fdrl_weighting import exercises, experiment, method, task

profile = core.resolve_profile(profile)
core.set_style()
episode_scale = {"smoke": 0.2, "book": 1.0, "paper": 1.0}[profile]

# %% [markdown]
# ## The task: Pendulum and six offline clients
#
# Pendulum-v1 (gymnasium's classic-control task, re-implemented with the same equations because
# gymnasium is not installed): the state is the angle $\theta$ ($0$ = upright) and its velocity,
# the observation $(\cos\theta, \sin\theta, \dot\theta)$, the action a torque in $[-2, 2]$, the
# reward $-(\theta^2 + 0.1\dot\theta^2 + 0.001u^2)$, 200 steps per episode.

# %%
core.show_source(task.pendulum_step)

# %%
theta, theta_dot, reward = task.pendulum_step(np.array([0.5]), np.array([1.0]), np.array([3.0]))
assert np.isclose(reward[0], -(0.25 + 0.1 + 0.004))  # the torque is clipped to 2 before the cost
assert np.isclose(theta_dot[0], 1 + (15 * np.sin(0.5) + 6) * 0.05)

# %% [markdown]
# The clients' behaviour policies: an **expert** (energy-pumping swing-up, PD
# (proportional-derivative) balance at the top, plus $\mathcal N(0, 0.3^2)$ noise), a **medium**
# policy (each step, half the time the expert with $\mathcal N(0, 1)$ noise, half the time a uniform
# action) and **random** uniform actions. The federation has three small expert clients (3 episodes,
# 600 transitions each: too few for a client to learn the task well alone, while their data put
# together are enough), one medium client and two random clients (25 episodes, 5000 transitions
# each). The data sets take a fraction of a second to generate, so they stay plain arrays (no cached
# data set).

# %%
datasets = task.client_datasets(0, "split", episode_scale)
pd.DataFrame({"kind": [d["kind"] for d in datasets], "transitions": [len(d["obs"]) for d in datasets],
              "behaviour return": [round(d["return"], 1) for d in datasets]})

# %% [markdown]
# The medium client's first transitions. Episodes run side by side, so the rows go by time step
# (row 0 is episode 0 at step 0, row 1 episode 1 at step 0, and so on).

# %%
task.to_frame(datasets[3]).head()

# %% [markdown]
# ## One batched ensemble for every client
#
# All clients of all federations are members of one ensemble: each layer's weights have a leading
# member axis, and one `torch.baddbmm` evaluates every member. Members start from the same weights,
# the shared global initialisation of federated learning.

# %%
core.show_source(method.Ensemble)

# %%
net = method.Ensemble(3, [2, 4, 1], torch.Generator().manual_seed(0))
x = torch.randn(1, 5, 2).expand(3, -1, -1)
out = net(x)
assert torch.allclose(out[0], out[1]) and torch.allclose(out[1], out[2])  # common initialisation
out[1].sum().backward()
assert net.params[0].grad[0].abs().sum() == 0 and net.params[0].grad[1].abs().sum() > 0  # independent

# %% [markdown]
# ## FEDORA's client: the critic
#
# $y = r + \gamma \max\{\min_i Q'_{k,i}(s', \tilde a), \min_i Q_{g,i}(s', \tilde a)\}$ with
# $\tilde a = \mathrm{clip}(\pi'_k(s') + \mathrm{clip}(\epsilon, \pm 0.5 a_{max}), \pm a_{max})$,
# $\epsilon \sim \mathcal N(0, (0.2 a_{max})^2)$; loss $\sum_i (Q_{k,i}(s, a) - y)^2$ (Pendulum
# episodes end only by the time limit, so $d = 0$).

# %%
core.show_source(method.critic_target)

# %%
q_local = torch.tensor([[[2.0, 5.0], [3.0, 1.0]]])   # twins at two next states: minima 2, 1
q_global = torch.tensor([[[1.0, 4.0], [0.0, 6.0]]])  # minima 0, 4
y = method.critic_target(torch.tensor([[1.0, 0.0]]), q_local, q_global, 0.5, torch.tensor([True]))
assert torch.allclose(y, torch.tensor([[1 + 0.5 * 2, 0 + 0.5 * 4]]))  # the larger minimum each time
core.show_source(method.critic_loss)

# %%
assert float(method.critic_loss(torch.tensor([[[1.0, 2.0], [0.0, 0.0]]]), torch.tensor([[1.0, 0.0]]))[0]) == 2.5

# %% [markdown]
# ## FEDORA's client: the actor and the decay
#
# $\mathcal L_\pi = -\lambda\,\delta_k\,\overline{Q_{k,1}(s, \pi_k(s))} + \delta_k\,\overline{\|\pi_k(s) - a\|^2}
# + \alpha_0\,\overline{\|\pi_k(s) - \pi_g(s)\|^2} + \alpha_2\,\overline{\|\pi_k(s) - \pi^{prev}_k(s)\|^2}$,
# $\lambda = 2.5 / \overline{|Q_{k,1}|}$; $\delta_k \leftarrow 0.995\,\delta_k$ whenever the global
# model's value on the client's data beats the client's own. The stress variant sets the
# behaviour-cloning weight of the medium client to 0 (pure TD3).

# %%
core.show_source(method.actor_loss)

# %%
q1 = torch.tensor([[-2.0, -4.0]])          # mean |Q| = 3, so lambda = 2.5 / 3
pi = torch.tensor([[[1.0], [0.0]]])
data_action = torch.zeros(1, 2, 1)           # behaviour cloning: (1 + 0) / 2
pi_global = torch.tensor([[[1.0], [2.0]]])   # proximity to the global actor: (0 + 4) / 2
pi_prev = torch.tensor([[[0.0], [1.0]]])     # proximity to the previous actor: (1 + 1) / 2
loss = method.actor_loss(q1, pi, data_action, pi_global, pi_prev, torch.tensor([0.5]), torch.tensor([3.0]), 0.25,
                         torch.tensor([1.0]))
assert np.isclose(float(loss[0]), (2.5 / 3) * 0.5 * 3 + 0.5 * 0.5 + 3.0 * 2 + 0.25 * 1)
core.show_source(method.decay_delta)

# %%
assert torch.allclose(method.decay_delta(torch.ones(2), torch.tensor([-1.0, -5.0]), torch.tensor([-2.0, -3.0])),
                      torch.tensor([0.995, 1.0]))

# %% [markdown]
# ## The server: three weighting rules
#
# FedAvg (federated averaging) $w_k = 1/K$; FEDORA $w_k = \mathrm{softmax}_k(\beta J_k)$,
# $\beta = 0.1$, with $J_k = \overline{Q_{k,1}(s, \pi_k(s))}$ over the client's data; and the paper's
# combined weights (proposed form) $w_k = \mathrm{softmax}_k(S_k / \mathrm{std}_k S_k)$,
# $S_k = c J_k - PI_k$, $c = \mathrm{mean}_k PI_k / \mathrm{mean}_k |J_k|$,
# $PI_k = \overline{\|\pi_k(s) - a\|^2} / |A|$. The combined weights change two things at once
# against FEDORA: the inconsistency term and the scale-free temperature. So the experiment also runs
# the Q-only weights at the same temperature rule, $w_k = \mathrm{softmax}_k(J_k / \mathrm{std}_k J_k)$
# (`q_std_weights`, our ablation), which isolate the inconsistency term.

# %%
core.show_source(method.value_score)
core.show_source(method.policy_inconsistency)

# %%
mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third transition is padding
assert float(method.value_score(torch.tensor([[2.0, 4.0, 100.0]]), mask)[0]) == 3.0
assert float(method.policy_inconsistency(torch.tensor([[[1.0], [0.0], [9.0]]]), torch.tensor([[[0.0], [2.0], [0.0]]]),
                                         mask)[0]) == 2.5
core.show_source(method.scaling_factor)
core.show_source(method.combined_score)
core.show_source(method.combined_weights)

# %%
j = torch.tensor([-10.0, -20.0, -30.0])
pi_inc = torch.tensor([0.1, 0.2, 0.6])
c = method.scaling_factor(j, pi_inc)
assert np.isclose(float(c), 0.3 / 20)
assert torch.allclose(method.combined_score(j, pi_inc, c), torch.tensor([-0.25, -0.5, -1.05]))
w = method.combined_weights(j, pi_inc)
assert np.isclose(float(w.sum()), 1.0) and w[0] > w[1] > w[2]
# scale-free: multiplying every Q-value by 10 leaves the weights unchanged (c absorbs it)
assert torch.allclose(method.combined_weights(10 * j, pi_inc), w)
# a client with the best Q-value but a policy far from its data loses the lead
assert method.q_softmax_weights(torch.tensor([-5.0, -6.0]))[0] > 0.5
assert method.combined_weights(torch.tensor([-5.0, -6.0]), torch.tensor([1.5, 0.1]))[1] > 0.5
core.show_source(method.q_std_weights)
# the Q-only ablation keeps the Q-value's ranking whatever the inconsistency
assert method.q_std_weights(torch.tensor([-5.0, -6.0]))[0] > 0.5
core.show_source(method.aggregate)

# %%
params = torch.arange(12, dtype=torch.float32).view(2, 3, 2)  # two runs of three clients
weights = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.25, 0.5]])
glob = method.aggregate(params, weights)
assert torch.allclose(glob[0], params[0, 0]) and torch.allclose(glob[1], (weights[1, :, None] * params[1]).sum(0))

# %% [markdown]
# ## The adaptive pull (proposed)
#
# At the start of a round client $k$ scores its own model and the global model on its data with
# the same $c$; it keeps the full pull $\alpha_0$ toward the global model unless its own score is
# higher, in which case the pull is $\rho\,\alpha_0$, $\rho = 0.1$. Both scores are measured with the
# client's own critic (its actor and the global actor, before any broadcast), so a gap between them is
# a gap between the two policies and not between two critics' calibrations; FEDORA's decay of
# $\delta_k$ keeps its own rule, the global critic's value. The plug-in keeps the clients' weights
# between rounds (FEDORA overwrites them); the experiment also runs each of the two changes alone.

# %%
core.show_source(method.adaptive_alpha0)

# %%
alpha = method.adaptive_alpha0(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 1.0]), 2.0, 0.1)
assert torch.allclose(alpha, torch.tensor([0.2, 2.0, 2.0]))  # only a strictly better client is freed

# %% [markdown]
# ## A round of the algorithm
#
# `Federation` holds the ensemble of several federations (here FEDORA and the paper's plug-in on
# the same six clients) and runs the round: broadcast (overwrite or keep), local TD3+BC steps,
# scores, decay, weights, aggregation. Every client starts from the same actor and the same pair of
# twin critics; the two twins of a pair are two different draws (TD3's clipped double Q takes the
# smaller of two different estimates; twins started equal would see the same batches and targets and
# stay equal).

# %%
core.show_source(method.Federation.finish_round)

# %%
kinds = [d["kind"] for d in datasets]
specs = [experiment.RUNS["fedora"](kinds), experiment.RUNS["combined_adaptive"](kinds)]
hp = experiment.hyperparameters(core.configure(experiment.EXPERIMENT_PROFILES, "smoke"))
fed = method.Federation(specs, len(kinds), experiment.pack_clients(datasets, len(specs), 200, 0), hp, seed=0)
with torch.no_grad():
    assert all(torch.allclose(p[0], p[k]) for p in fed.actor.params for k in range(fed.M))  # one initial model
    assert all(torch.equal(p[2 * m + t], p[t]) for p in fed.critic.params for m in range(fed.M) for t in (0, 1))
    assert not any(torch.allclose(p[0], p[1]) for p in fed.critic.params)  # the twins differ
fed.start_round()
for _ in range(20):
    fed.local_step()
round_out = fed.finish_round()
assert torch.allclose(round_out["weights"].sum(1), torch.ones(2))
K = len(kinds)
manual = (round_out["weights"][0][:, None, None] * fed.actor.params[0][:K].detach()).sum(0)
assert torch.allclose(fed.global_actor[0][0], manual, atol=1e-6)  # theta_g = sum_k w_k theta_k
pd.DataFrame({"kind": kinds * 2, "run": ["fedora"] * K + ["combined_adaptive"] * K,
              "J": round_out["j"].flatten().numpy(), "PI": round_out["pi"].flatten().numpy(),
              "weight": round_out["weights"].flatten().numpy()}).round(3)

# %% [markdown]
# After only 20 steps the critics are far from converged ($|J|$ is small), which is exactly when
# the Q-softmax with $\beta = 0.1$ is nearly uniform and the scale-free combined weights are not.
#
# ## Exercises
#
# **Exercise 1.** Write `policy_inconsistency(pi, action)` for one client's policy actions and data
# actions, NumPy arrays of shape (N, |A|) (or (K, N, |A|) for K clients): the mean squared gap per
# transition and action dimension.

# %% tags=["solution", "hide-input"]
def policy_inconsistency(pi, action):
    pi, action = np.asarray(pi, dtype=float), np.asarray(action, dtype=float)
    return ((pi - action) ** 2).mean(axis=(-2, -1))


# %%
exercises.check_policy_inconsistency(policy_inconsistency)

# %% [markdown]
# **Exercise 2.** Write `combined_weights(j, pi_inc)` for 1-D NumPy arrays of K clients' Q-value
# scores and inconsistencies: the scaling factor, the score, and the softmax at temperature
# $\mathrm{std}_k S_k$ (population standard deviation).

# %% tags=["solution", "hide-input"]
def combined_weights(j, pi_inc):
    j, pi_inc = np.asarray(j, dtype=float), np.asarray(pi_inc, dtype=float)
    score = pi_inc.mean() / np.abs(j).mean() * j - pi_inc
    z = score / score.std()
    e = np.exp(z - z.max())
    return e / e.sum()


# %%
exercises.check_combined_weights(combined_weights)

# %% [markdown]
# ## Summary
#
# - Every client of every federation is one member of a batched ensemble; aggregation is a weighted
#   sum over the client axis, so FEDORA and its variants run side by side on the same data.
# - FEDORA's client is TD3+BC with a critic target that may borrow the global critic's value and an
#   actor pulled toward the global and the previous actor.
# - The paper's plug-in (proposed form) changes two things: the server's weights (Q-value rescaled
#   by $c$, minus the policy inconsistency, softmax at a scale-free temperature) and the broadcast
#   (keep your model, and lean less on the global one when yours scores better, both scored with
#   the client's own critic). The experiment changes one of these pieces at a time.
