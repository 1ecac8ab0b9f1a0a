"""RAST-MoE-RL, the method: a PPO agent with zone-wise Bernoulli heads on a small Transformer whose
last feed-forward block is a sparse mixture of experts routed once per state from a pooled
embedding, trained on a reward whose service-violation penalty is an online Lagrange multiplier.

Equation labels follow the chapter (the paper's text could not be read; "stated" means stated in
the abstracts or the public reviews, "proposed" our concrete version):

* (1) factorised policy, stated: pi(a | s) = prod_z sigma(l_z)^{a_z} (1 - sigma(l_z))^{1 - a_z};
  :func:`factorised_log_prob`, :func:`factorised_entropy`.
* (2) pooled top-k router, stated (pooled global embedding, top-k) with the proposed form
  q = softmax(W_r mean_z h_z), keep the top k, renormalise; :func:`route`.
* (3) sparse MoE block, proposed: h_z' = h_z + sum_{e in T} q~_e FFN_e(LN(h_z)); :class:`SparseMoE`.
* (4) load-balancing loss, proposed (Switch style, not stated): L_bal = E sum_e f_e qbar_e;
  :func:`load_balancing_loss`.
* (5) adaptive reward, stated in words, proposed form:
  r_t = -(w_m DT N_held + w_p sum pickup) / c0 - lambda n_abandoned_t; :func:`shaped_reward`.
* (6) dual ascent on lambda, stated (5% tolerance), proposed step:
  lambda <- [lambda + eta (vbar - 0.05)]_+ after every PPO iteration; :func:`update_lambda`.
* (7) PPO (stated) with GAE and the clipped surrogate (proposed hyperparameters): :func:`gae`,
  :func:`ppo_loss`, :func:`collect_rollouts`, :func:`ppo_update`, :func:`train_ppo`.

The encoders: :class:`RastEncoder` (zone tokens plus one global token, pre-norm Transformer layers;
``n_experts = 0`` gives the dense Transformer baseline, ``n_experts > 0`` the paper's sparse MoE in
the last layer). Every policy maps (zone features (B, Z, F), global features (B, G)) to
(logits (B, Z), value (B,), aux), aux holding the router's probabilities and chosen experts.

The environment interface that :func:`collect_rollouts` needs is duck-typed (the toy world lives in
``task``): ``reset(rng) -> obs``, ``step(action) -> info``, ``observe() -> obs``, ``done``, with
obs = (zone features, global features).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from replib.rl import clipped_surrogate

__all__ = [
    "factorised_log_prob", "factorised_entropy", "route", "SparseMoE", "load_balancing_loss", "RastEncoder",
    "shaped_reward", "update_lambda", "gae", "ppo_loss", "collect_rollouts", "ppo_update", "train_ppo",
    "PPOConfig",
]


# ---- (1) the factorised zone-wise policy -----------------------------------------------------

def zone_log_probs(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The terms of Eq. (1), one per zone: a_z log sigma(l_z) + (1 - a_z) log(1 - sigma(l_z)) (B, Z)."""
    return -F.binary_cross_entropy_with_logits(logits, actions.float(), reduction="none")


def factorised_log_prob(logits: torch.Tensor, actions: torch.Tensor, live: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. (1): log pi(a | s) = sum_z [a_z log sigma(l_z) + (1 - a_z) log(1 - sigma(l_z))], one value
    per row of ``logits`` / ``actions`` (B, Z). ``live`` (B, Z), optional: only zones with waiting
    requests count (elsewhere the action changes nothing)."""
    terms = zone_log_probs(logits, actions)
    return (terms if live is None else terms * live).sum(-1)


def factorised_entropy(logits: torch.Tensor, live: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy of the policy of Eq. (1): the sum over (live) zones of the Bernoulli entropies (B,)."""
    terms = F.binary_cross_entropy_with_logits(logits, torch.sigmoid(logits), reduction="none")
    return (terms if live is None else terms * live).sum(-1)


# ---- (2)-(4) the sparse mixture of experts ---------------------------------------------------

def route(router_logits: torch.Tensor, k: int, mask: torch.Tensor | None = None):
    """Eq. (2): q = softmax(router_logits) over experts (one routing decision per state, the logits
    computed from the pooled embedding), keep the k largest entries and renormalise them,
    q~_e = q_e / sum_{e' in T} q_e'. ``mask`` (E,) bool marks experts switched off (ablation): they get
    probability 0 before the top-k. Returns (q (B, E), gates (B, E) with zeros outside the top k,
    top-k indices (B, k))."""
    if mask is not None:
        router_logits = router_logits.masked_fill(~mask, float("-inf"))
    q = torch.softmax(router_logits, dim=-1)
    top_q, top_idx = q.topk(k, dim=-1)
    gates = torch.zeros_like(q).scatter(-1, top_idx, top_q / top_q.sum(-1, keepdim=True))
    return q, gates, top_idx


class SparseMoE(nn.Module):
    """Eq. (3): h_z' = h_z + sum_{e in T} q~_e FFN_e(LN(h_z)), the same k experts (chosen by
    :func:`route` from the mean token h_bar = mean_z h_z) for every token of a state. Only the chosen
    experts are evaluated (per-sample compute of k experts, not E)."""

    def __init__(self, d: int, d_ff: int, n_experts: int, k: int):
        super().__init__()
        self.k = k
        self.norm = nn.LayerNorm(d)
        self.router = nn.Linear(d, n_experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(n_experts, d, d_ff) / d ** 0.5)
        self.b1 = nn.Parameter(torch.zeros(n_experts, d_ff))
        self.w2 = nn.Parameter(torch.randn(n_experts, d_ff, d) / d_ff ** 0.5)
        self.b2 = nn.Parameter(torch.zeros(n_experts, d))
        self.expert_mask = None  # set to a (E,) bool tensor to switch experts off (ablation)

    def forward(self, h: torch.Tensor):
        q, gates, top_idx = route(self.router(h.mean(1)), self.k, self.expert_mask)
        x = self.norm(h)  # (B, T, d)
        out = torch.zeros_like(h)
        for slot in range(self.k):
            e = top_idx[:, slot]  # (B,)
            hidden = F.gelu(torch.einsum("btd,bdf->btf", x, self.w1[e]) + self.b1[e][:, None])
            y = torch.einsum("btf,bfd->btd", hidden, self.w2[e]) + self.b2[e][:, None]
            out = out + gates.gather(1, e[:, None])[:, :, None] * y
        return h + out, {"router_probs": q, "gates": gates, "top1": top_idx[:, 0]}


def load_balancing_loss(router_probs: torch.Tensor, top1: torch.Tensor) -> torch.Tensor:
    """Eq. (4) (Switch style, proposed): E sum_e f_e qbar_e with f_e the share of states whose top-1
    expert is e and qbar_e the mean router probability of e over the minibatch; 1 when routing is
    uniform, E when every state goes to one expert with probability 1."""
    n_experts = router_probs.shape[-1]
    f = torch.bincount(top1, minlength=n_experts).float() / top1.numel()
    return n_experts * (f * router_probs.mean(0)).sum()


class _DenseFFN(nn.Module):
    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))

    def forward(self, h):
        return h + self.ff(self.norm(h)), {}


class _Block(nn.Module):
    def __init__(self, d: int, heads: int, ffn: nn.Module):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ffn = ffn

    def forward(self, h):
        x = self.norm(h)
        h = h + self.attn(x, x, x, need_weights=False)[0]
        return self.ffn(h)


class RastEncoder(nn.Module):
    """The spatio-temporal encoder and the actor-critic heads. Tokens: one per zone (a linear map of
    its features) and one global token (a linear map of the global features); ``layers`` pre-norm
    Transformer blocks of width ``d`` with ``heads`` heads; with ``n_experts > 0`` the last block's
    feed-forward part is :class:`SparseMoE` (top ``k``), else a dense FFN of width ``d_ff``. Actor:
    one logit per zone token (Eq. 1); critic: one value per zone token (the zone's share of the
    return, see :func:`ppo_loss`)."""

    def __init__(self, zone_features: int, global_features: int, d: int = 32, layers: int = 2, heads: int = 4,
                 d_ff: int = 64, n_experts: int = 0, k: int = 2, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.zone_in = nn.Linear(zone_features, d)
            self.global_in = nn.Linear(global_features, d)
            blocks = []
            for i in range(layers):
                last = i == layers - 1
                ffn = SparseMoE(d, d_ff, n_experts, k) if (last and n_experts) else _DenseFFN(d, d_ff)
                blocks.append(_Block(d, heads, ffn))
            self.blocks = nn.ModuleList(blocks)
            self.norm = nn.LayerNorm(d)
            self.actor = nn.Linear(d, 1)
            self.critic = nn.Linear(d, 1)
        self.n_experts = n_experts

    @property
    def moe(self) -> SparseMoE | None:
        ffn = self.blocks[-1].ffn
        return ffn if isinstance(ffn, SparseMoE) else None

    def forward(self, zone_feats: torch.Tensor, global_feats: torch.Tensor):
        h = torch.cat([self.zone_in(zone_feats), self.global_in(global_feats)[:, None]], dim=1)
        aux = {}
        for block in self.blocks:
            h, extra = block(h)
            aux.update(extra)
        h = self.norm(h)
        logits = self.actor(h[:, :-1]).squeeze(-1)
        value = self.critic(h[:, :-1]).squeeze(-1)
        return logits, value, aux


# ---- (5)-(6) the adaptive reward -------------------------------------------------------------

def shaped_reward(held_seconds, pickup_seconds, abandoned, w_match: float = 1.0, w_pickup: float = 1.0,
                  lam: float = 0.0, c0: float = 600.0):
    """Eq. (5): r_t = -(w_m held_seconds + w_p pickup_seconds) / c0 - lambda n_abandoned_t, with
    held_seconds = DT x (requests held this epoch), the increment of matching delay. The fixed-ratio
    variants set lambda = 0 and w_m : w_p to the ratio; the adaptive variant w_m = w_p = 1 and lambda
    from :func:`update_lambda`. Works elementwise on arrays. The chapter computes it on the city's
    totals and credits every zone's decision with it (``experiment.reward_of``)."""
    return -(w_match * held_seconds + w_pickup * pickup_seconds) / c0 - lam * abandoned


def update_lambda(lam: float, violation_rate: float, tolerance: float = 0.05, eta: float = 10.0) -> float:
    """Eq. (6): lambda <- max(0, lambda + eta (vbar - tolerance)), vbar the share of requests that
    abandoned during the last PPO iteration; raises the penalty while violations exceed the
    tolerance, lowers it otherwise."""
    return max(0.0, lam + eta * (violation_rate - tolerance))


# ---- (7) PPO ----------------------------------------------------------------------------------

def gae(rewards: np.ndarray, values: np.ndarray, gamma: float = 0.99, lam: float = 0.95):
    """Generalised advantage estimation over (T, N) arrays of rewards and values of N episodes that
    all end after T steps (the value after the last step is 0): delta_t = r_t + gamma V_{t+1} - V_t,
    A_t = sum_l (gamma lam)^l delta_{t+l}; returns (advantages, returns = A + V)."""
    T = rewards.shape[0]
    adv = np.zeros_like(rewards, dtype=np.float64)
    running = np.zeros(rewards.shape[1:])
    for t in reversed(range(T)):
        next_value = values[t + 1] if t + 1 < T else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
    return adv, adv + values


def ppo_loss(policy, batch: dict, clip_eps: float = 0.2, value_coef: float = 0.5, entropy_coef: float = 0.01,
             balance_coef: float = 0.01):
    """The PPO loss of a minibatch, zone by zone (each zone's decision with its own advantage, from
    the training reward given to that zone; the chapter gives every zone the city's reward): the
    clipped surrogate on each live zone's term of
    Eq. (1) with that zone's advantage (``replib.rl.clipped_surrogate``, weighted by the live mask) +
    value_coef x MSE(zone values, zone returns) - entropy_coef x entropy + balance_coef x L_bal
    (Eq. 4, MoE only). Returns (loss, parts)."""
    logits, value, aux = policy(batch["zone"], batch["glob"])
    logp = zone_log_probs(logits, batch["action"])
    policy_loss = clipped_surrogate(logp, batch["logp"], batch["adv"], clip_eps, weights=batch["live"])
    value_loss = F.mse_loss(value, batch["ret"])
    entropy = factorised_entropy(logits, batch["live"]).mean()
    loss = policy_loss + value_coef * value_loss - entropy_coef * entropy
    parts = {"policy": policy_loss.item(), "value": value_loss.item(), "entropy": entropy.item()}
    if "router_probs" in aux:
        balance = load_balancing_loss(aux["router_probs"], aux["top1"])
        loss = loss + balance_coef * balance
        parts["balance"] = balance.item()
    return loss, parts


def _obs_tensors(observations):
    zone = torch.as_tensor(np.stack([o[0] for o in observations]))
    glob = torch.as_tensor(np.stack([o[1] for o in observations]))
    return zone, glob


@torch.no_grad()
def collect_rollouts(policy, envs, rngs, reward_fn, greedy: bool = False, torch_gen=None):
    """Play one episode in every env at once (all episodes have the same length T), sampling the
    zone-wise actions from Eq. (1) (``greedy``: release where sigma(l_z) > 0.5). ``reward_fn(info)``
    gives the training reward of a step. Returns a dict of stacked (T, N, ...) arrays: zone, glob,
    live (zones with waiting requests, whose actions count in Eq. 1), action, logp, value, reward, top1 (MoE only, else -1), and ``infos``, a list over envs of their
    step infos."""
    obs = [env.reset(rng) for env, rng in zip(envs, rngs)]
    keys = ("zone", "glob", "live", "action", "logp", "value", "reward", "top1", "gates")
    out = {key: [] for key in keys}
    infos = [[] for _ in envs]
    while not envs[0].done:
        zone, glob = _obs_tensors(obs)
        logits, value, aux = policy(zone, glob)
        if greedy:
            action = (logits > 0).float()
        else:
            action = torch.bernoulli(torch.sigmoid(logits), generator=torch_gen)
        steps = [env.step(a) for env, a in zip(envs, action.numpy().astype(int))]
        for i, info in enumerate(steps):
            infos[i].append(info)
        out["zone"].append(zone.numpy())
        out["glob"].append(glob.numpy())
        live = (zone[..., 0] > 0).float()  # zones with waiting requests (feature 0: waiting count)
        out["live"].append(live.numpy())
        out["action"].append(action.numpy())
        out["logp"].append(zone_log_probs(logits, action).numpy())
        out["value"].append(value.numpy())
        out["reward"].append(np.array([reward_fn(info) for info in steps]))
        out["top1"].append(aux["top1"].numpy() if "top1" in aux else np.full(len(envs), -1))
        out["gates"].append(aux["gates"].numpy() if "gates" in aux else np.zeros((len(envs), 0)))
        obs = [env.observe() for env in envs] if not envs[0].done else obs
    data = {key: np.stack(value) for key, value in out.items()}
    data["infos"] = infos
    return data


class PPOConfig:
    """PPO hyperparameters (the paper's are not stated; our choice): clip 0.2, GAE gamma
    0.99 and lambda 0.95, value coefficient 0.5, entropy 0.01, load balance 0.01, Adam 3e-4 (the
    experiment uses 1e-3), 4 epochs of 2 minibatches per iteration; ``reward_scale`` (ours) multiplies
    the rewards before GAE so that the value loss does not swamp the policy gradient."""

    def __init__(self, lr=3e-4, clip_eps=0.2, gamma=0.99, gae_lambda=0.95, value_coef=0.5, entropy_coef=0.01,
                 balance_coef=0.01, epochs=4, minibatches=2, reward_scale=0.05):
        self.__dict__.update(lr=lr, clip_eps=clip_eps, gamma=gamma, gae_lambda=gae_lambda, value_coef=value_coef,
                             entropy_coef=entropy_coef, balance_coef=balance_coef, epochs=epochs,
                             minibatches=minibatches, reward_scale=reward_scale)


def ppo_update(policy, optimiser, data: dict, ppo: PPOConfig, gen: torch.Generator) -> dict:
    """One PPO iteration's update on the rollouts ``data`` of :func:`collect_rollouts`: GAE, advantages
    normalised over the batch, ``ppo.epochs`` passes of ``ppo.minibatches`` shuffled minibatches,
    gradient norm clipped at 0.5. Returns the mean loss parts."""
    adv, ret = gae(ppo.reward_scale * data["reward"], data["value"], ppo.gamma, ppo.gae_lambda)
    flat = lambda x: torch.as_tensor(x.reshape(-1, *x.shape[2:]), dtype=torch.float32)  # noqa: E731
    batch = {"zone": flat(data["zone"]), "glob": flat(data["glob"]), "action": flat(data["action"]), "live": flat(data["live"]),
             "logp": flat(data["logp"]), "ret": flat(ret)}
    a, live = flat(adv), batch["live"].bool()
    batch["adv"] = (a - a[live].mean()) / (a[live].std() + 1e-8)
    n = len(a)
    parts = []
    for _ in range(ppo.epochs):
        perm = torch.randperm(n, generator=gen)
        for idx in perm.chunk(ppo.minibatches):
            loss, p = ppo_loss(policy, {k: v[idx] for k, v in batch.items()}, ppo.clip_eps, ppo.value_coef,
                               ppo.entropy_coef, ppo.balance_coef)
            optimiser.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimiser.step()
            parts.append(p)
    return {key: float(np.mean([p[key] for p in parts])) for key in parts[0]}


def train_ppo(policy, envs, iterations: int, seed: int, reward: dict, violation_fn, ppo: PPOConfig | None = None):
    """PPO with the adaptive (or a fixed-ratio) reward: every iteration plays one episode per env
    (Eq. 1 sampling), updates the policy (Eq. 7), and, for the adaptive reward, moves lambda by
    Eq. (6) on the iteration's violation rate ``violation_fn(infos)``. ``reward``: {"w_match",
    "w_pickup", "lam" (the starting lambda), "adaptive" (bool), "eta", "tolerance", "reward_of"
    (info, w_match, w_pickup, lam) -> r}. Returns the history, one dict per iteration (lambda used,
    violation rate, mean episode training return, loss parts)."""
    ppo = ppo or PPOConfig()
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(policy.parameters(), lr=ppo.lr)
    lam = float(reward["lam"])
    history = []
    for it in range(iterations):
        rngs = [np.random.default_rng(s) for s in rng.integers(0, 2**31, size=len(envs))]
        reward_fn = lambda info: reward["reward_of"](info, reward["w_match"], reward["w_pickup"], lam)  # noqa: E731
        data = collect_rollouts(policy, envs, rngs, reward_fn, torch_gen=gen)
        violation = violation_fn(data["infos"])
        parts = ppo_update(policy, optimiser, data, ppo, gen)
        history.append({"iteration": it, "lam": lam, "violation": violation,
                        "train_return": float(data["reward"].sum(0).mean()), **parts})
        if reward["adaptive"]:
            lam = update_lambda(lam, violation, reward["tolerance"], reward["eta"])
    return history
