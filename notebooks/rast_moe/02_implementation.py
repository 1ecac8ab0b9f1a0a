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
# # Regime-aware MoE for delayed matching: implementation
#
# This notebook builds the toy city (`replib.papers.rast_moe.task`) and the method
# (`replib.papers.rast_moe.method`) piece by piece. Each piece of the method is shown next to the
# equation it implements, labelled (1)-(7) as in the module's docstring, and checked on tiny inputs.
# The method is RAST-MoE: a policy trained with PPO (proximal policy optimization, a policy-gradient
# reinforcement-learning algorithm whose clipped surrogate loss keeps each update small) on a
# Transformer encoder ending in a sparse mixture of experts (MoE: several small feed-forward networks,
# of which a router runs only the top $k$ for each state). PPO's clipped surrogate is the shared one
# of `replib.rl`; the MLP (multilayer perceptron) baseline uses the shared `replib.models.mlp.MLP`.
#
# **Learning goals.** After this notebook you can
#
# 1. step the grid city: arrivals, zone-wise release, batched Hungarian matching (the one-to-one
#    assignment of least total distance), abandonment, congestion;
# 2. implement the factorised zone-wise policy, the pooled top-$k$ router, the sparse MoE block and
#    its load-balancing loss;
# 3. implement the adaptive reward and its multiplier update, and run PPO iterations on them.

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
from replib.papers.rast_moe import baselines, exercises, experiment, method, task

core.set_style()
profile = core.resolve_profile(profile)
demo_iterations = {"smoke": 1, "book": 3, "paper": 3}[profile]

# %% [markdown]
# ## 1. The city
#
# $4 \times 4$ zones of 1 km, 40 vehicles, a day of 96 epochs of 30 s (the paper's epoch length) in
# four regimes: off-peak, a central peak, off-peak, a corner peak. Off-peak, trips go anywhere in the
# city; in a peak they end within 1 km of their origin, so the fleet stays near the hotspot. A request
# abandons after 600 s (the service violation). The state has no clock: its global features are the
# busy fraction, all waiting requests, all of this epoch's arrivals and the speed factor, so a policy
# can only tell the regime from what the regime does to demand, supply and traffic.
# The simulator draws its requests as it goes (a few milliseconds per day), so there is no data set
# to cache.

# %%
city = task.CityConfig()
print(city, "\nregimes of the day:", " ".join(r[:6] for r in task.day_schedule(city)[::12]))
env = task.RideHailingEnv(city)
zone_feats, global_feats = env.reset(np.random.default_rng(0))
print("zone features (first 3 zones):\n", zone_feats[:3].round(2), "\nglobal features:", global_feats.round(2))
assert zone_feats.shape == (city.zones, task.N_ZONE_FEATURES) and global_feats.shape == (task.N_GLOBAL_FEATURES,)

# %% [markdown]
# **Matching of the released zones** (the paper's batched assignment; algorithm and radius not
# stated): one minimum-total-distance assignment between the waiting requests of the released zones
# and the idle vehicles, pairs farther than 2.5 km (Manhattan) forbidden.

# %%
core.show_source(task.match_released)

# %%
requests = np.array([[0.0, 0.0], [3.0, 3.0]])
vehicles = np.array([[0.5, 0.0], [0.2, 0.1], [3.0, 2.0]])
r, v, d = task.match_released(requests, vehicles)
print("pairs", list(zip(r.tolist(), v.tolist())), "distances", d.round(2))
assert list(zip(r.tolist(), v.tolist())) == [(0, 1), (1, 2)] and np.allclose(d, [0.3, 1.0])
r, v, d = task.match_released(np.array([[0.0, 0.0]]), np.array([[3.0, 0.0]]))  # 3 km: beyond the radius
assert len(r) == 0

# %% [markdown]
# One epoch: release zone by zone, match, hold the rest (each held request adds $\Delta = 30$ s of
# matching delay), drop the requests that reach the patience, move on. Holding every zone matches
# nobody; releasing every zone matches as many as the idle vehicles in range allow.

# %%
env.reset(np.random.default_rng(1))
waiting = len(env.req_zone)
info = env.step(np.zeros(city.zones, dtype=int))
assert info.held == waiting and info.pickup.size == 0 and info.held_z.sum() == waiting
info = env.step(np.ones(city.zones, dtype=int))
print(f"released all: {info.pickup.size} matched, {info.held} held, pickups (s) {info.pickup.round(0)}")
assert info.pickup.size > 0 and np.all(info.match_delay == 0) | np.all(info.match_delay >= 0)
assert np.isclose(info.pickup_z.sum(), info.pickup.sum())

# %% [markdown]
# **Congestion** (our stand-in for the paper's travel-time table, which is consistent with a
# macroscopic fundamental diagram, MFD, the relation between traffic density and speed; its form is
# not stated): $v/v_f = \max(0.2, 1 - \rho/\rho_j)$, with $\rho$ the busy fraction of the fleet plus a
# background density of 0.1 in peaks, and jam density $\rho_j = 1.5$.

# %%
assert task.speed_factor(0.0, "offpeak") == 1.0 and np.isclose(task.speed_factor(0.65, "peak_center"), 0.5)
assert task.speed_factor(5.0, "offpeak") == 0.2

# %% [markdown]
# ## 2. The policy: Eq. (1)
#
# $\log \pi(a \mid s) = \sum_z [a_z \log \sigma(\ell_z) + (1 - a_z) \log(1 - \sigma(\ell_z))]$. Our
# implementation also takes a *live* mask: only zones with waiting requests count, since elsewhere
# the action changes nothing.

# %%
core.show_source(method.factorised_log_prob)

# %%
logits = torch.tensor([[0.0, 2.0, -1.0]])
actions = torch.tensor([[1.0, 0.0, 0.0]])
by_hand = np.log(0.5) + np.log(1 - 1 / (1 + np.exp(-2.0))) + np.log(1 - 1 / (1 + np.exp(1.0)))
assert np.isclose(method.factorised_log_prob(logits, actions).item(), by_hand)
assert np.isclose(method.factorised_log_prob(logits, actions, torch.tensor([[1.0, 0.0, 0.0]])).item(), np.log(0.5))
assert np.isclose(method.factorised_entropy(torch.zeros(1, 3)).item(), 3 * np.log(2))

# %% [markdown]
# ## 3. The pooled top-$k$ router, Eq. (2), and the sparse MoE block, Eq. (3)
#
# $q = \mathrm{softmax}(W_r \bar h)$, keep the top $k$, renormalise; then
# $h_z' = h_z + \sum_{e \in \mathcal T} \tilde q_e\, \mathrm{FFN}_e(\mathrm{LN}(h_z))$ with the same
# experts for every token of a state ($\mathrm{FFN}_e$: expert $e$'s feed-forward network;
# $\mathrm{LN}$: layer normalisation).

# %%
core.show_source(method.route)

# %%
core.show_source(method.SparseMoE.forward)

# %% [markdown]
# Two checks that would fail if the block were wrong: the gates are zero outside the top $k$ and sum
# to one inside; and changing the weights of an expert that no state chose leaves the output
# unchanged, while changing a chosen one does not.

# %%
torch.manual_seed(0)
moe = method.SparseMoE(d=8, d_ff=16, n_experts=6, k=2)
h = torch.randn(2, 5, 8)  # two states of five tokens: at most 4 of the 6 experts are chosen
out, aux = moe(h)
chosen = set(torch.nonzero(aux["gates"] > 0)[:, 1].tolist())
unused = sorted(set(range(6)) - chosen)
assert torch.allclose(aux["gates"].sum(-1), torch.ones(2)) and ((aux["gates"] > 0).sum(-1) == 2).all()
assert len(unused) >= 2
print("experts chosen by the 2 states:", sorted(chosen), "unused:", unused)
with torch.no_grad():
    for e in unused:
        moe.w1[e] *= 2.0
    assert torch.allclose(moe(h)[0], out)
    moe.w1[min(chosen)] *= 2.0
    assert not torch.allclose(moe(h)[0], out)

# %% [markdown]
# ## 4. The load-balancing loss, Eq. (4)

# %%
core.show_source(method.load_balancing_loss)

# %%
uniform = method.load_balancing_loss(torch.full((4, 4), 0.25), torch.tensor([0, 1, 2, 3]))
collapsed = method.load_balancing_loss(torch.tensor([[1.0, 0, 0, 0]] * 4), torch.zeros(4, dtype=torch.long))
assert np.isclose(uniform.item(), 1.0) and np.isclose(collapsed.item(), 4.0)

# %% [markdown]
# ## 5. The encoders
#
# `RastEncoder` puts one token per zone and a global token through two Transformer blocks
# ($d = 32$, 4 heads); with `n_experts > 0` the last block's feed-forward part is the sparse MoE.
# The MLP baseline flattens the state. Every policy returns one release logit and one value per zone.

# %%
zone_t, glob_t = torch.as_tensor(zone_feats)[None], torch.as_tensor(global_feats)[None]
for name in ("mlp", "transformer", "moe"):
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "book", experiment.EXPERIMENT_BOUNDS)
    policy = experiment.make_agent(name, cfg, seed=0, zones=city.zones)
    logits, value, aux = policy(zone_t, glob_t)
    print(f"{name:12s} {sum(p.numel() for p in policy.parameters()):6,d} parameters; logits {tuple(logits.shape)}, "
          f"values {tuple(value.shape)}, router: {'top1' in aux}")
    assert logits.shape == (1, city.zones) and value.shape == (1, city.zones)
assert isinstance(experiment.make_agent("mlp", cfg, 0, city.zones), baselines.MLPEncoder)

# %% [markdown]
# ## 6. The adaptive reward, Eqs. (5) and (6)
#
# $r_t = -(w_m \Delta N^{held}_t + w_p \sum \text{pickup}) / c_0 - \lambda\, n^{abandoned}_t$ over the
# whole city, and after each PPO iteration $\lambda \leftarrow [\lambda + \eta(\bar v - 0.05)]_+$.
# Every zone's decision is credited with the city's reward (`experiment.reward_of`): a zone that
# releases and takes a vehicle its neighbour needed pays for the neighbour's longer pickup or
# abandonment, an externality that crediting each zone with only its own requests' costs leaves
# uncharged (and that pushed the previous version of this chapter towards releasing everywhere).

# %%
core.show_source(method.shaped_reward)
core.show_source(method.update_lambda)

# %%
r = method.shaped_reward(np.array([120.0, 0.0]), np.array([300.0, 60.0]), np.array([0, 2]), lam=1.5, c0=600.0)
assert np.allclose(r, [-(120 + 300) / 600, -60 / 600 - 3.0])
assert np.isclose(method.update_lambda(1.0, 0.10, eta=10.0), 1.5) and method.update_lambda(0.2, 0.0, eta=10.0) == 0.0
env.reset(np.random.default_rng(2))
info = env.step(np.ones(city.zones, dtype=int))
city_reward = experiment.reward_of(info, 1.0, 1.0, 1.5)
print("training reward of one epoch, every zone:", city_reward.round(3))
assert np.allclose(city_reward, method.shaped_reward(info.held * task.DT, info.pickup.sum(), info.abandoned, lam=1.5))

# %% [markdown]
# ## 7. PPO, Eq. (7)
#
# Generalised advantage estimation (GAE: each step's advantage as a discounted sum of the errors of
# the value estimate), checked by hand on a two-step episode, then a few PPO iterations of the MoE
# agent with the adaptive reward (the experiment runs many more).

# %%
core.show_source(method.gae)

# %%
adv, ret = method.gae(np.array([[1.0], [2.0]]), np.array([[0.5], [1.0]]), gamma=0.9, lam=0.5)
delta1 = 2.0 - 1.0
delta0 = 1.0 + 0.9 * 1.0 - 0.5
assert np.allclose(adv[:, 0], [delta0 + 0.45 * delta1, delta1]) and np.allclose(ret, adv + [[0.5], [1.0]])

# %%
cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS,
                     iterations=demo_iterations, n_envs=2)
with compute_threads(1):
    policy, history = experiment.train_agent("moe", cfg, seed=0, city=city)
for row in history:
    print({key: round(value, 3) for key, value in row.items() if key not in ("seed", "agent")})
assert all(np.isfinite(row["policy"]) and row["lam"] >= 0 for row in history)

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Write the gates of the pooled top-$k$ router: `topk_gates(router_logits, k)` takes a
# `(B, E)` array of router logits and returns a `(B, E)` array: zero outside each row's $k$ largest
# probabilities, the renormalised probabilities inside.

# %% tags=["solution", "hide-input"]
def topk_gates(router_logits, k):
    z = np.asarray(router_logits, dtype=float)
    q = np.exp(z - z.max(-1, keepdims=True))
    q /= q.sum(-1, keepdims=True)
    top = np.argsort(-q, axis=-1, kind="stable")[:, :k]
    gates = np.zeros_like(q)
    np.put_along_axis(gates, top, np.take_along_axis(q, top, -1), -1)
    return gates / gates.sum(-1, keepdims=True)


# %%
exercises.check_topk_gates(topk_gates)

# %% [markdown]
# **Exercise 2.** Write the load-balancing loss: `load_balancing_loss(router_probs, top1)` for a
# `(B, E)` array of router probabilities and the `(B,)` top-1 experts, returning a number that is 1
# when routing is uniform and $E$ when every state goes to one expert with probability 1.

# %% tags=["solution", "hide-input"]
def load_balancing_loss(router_probs, top1):
    p = np.asarray(router_probs, dtype=float)
    share = np.bincount(np.asarray(top1), minlength=p.shape[1]) / len(top1)
    return p.shape[1] * float(share @ p.mean(0))


# %%
exercises.check_load_balancing_loss(load_balancing_loss)

# %% [markdown]
# **Exercise 3 (open).** The router sees $\bar h$, the mean of the zone tokens. Which of the state
# features could tell it the regime? What could it not tell apart on the unseen day, whose hotspot
# lies elsewhere?
#
# ## Summary
#
# The toy city releases or holds each zone every 30 s and matches released zones with one
# Hungarian assignment; congestion slows everyone as the fleet gets busy. The method is PPO on a
# factorised Bernoulli policy whose encoder ends in a sparse MoE routed once per state, with a
# load-balancing loss, and a reward whose abandonment penalty follows a dual-ascent multiplier. The
# experiment trains it beside an MLP and a dense Transformer under the same budget.
