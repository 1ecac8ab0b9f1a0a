"""The method: FEDORA's offline federated TD3+BC (the host, as in its released code) and the paper's
plug-in, client weights from Q-values and policy inconsistency with an adaptive pull toward the
global model (the exact formulas are not stated in the readable text: those pieces are our own
*proposed* instantiation).

All K clients of R federations ("runs") are one batched ensemble: every network holds its weights
as tensors with a leading member axis M = R * K (member m = r * K + k), so one optimiser step trains
every client of every run, and aggregation is a weighted sum over the K axis.

Pieces, each named after the step it implements:

* :class:`Ensemble` -- n independent MLPs evaluated with one batched matrix product per layer.
* :func:`critic_target` -- FEDORA's target y = r + gamma max{min_i Q'_k,i(s', a~), min_i Q_g,i(s', a~)}
  with TD3's target-policy smoothing a~.
* :func:`critic_loss` -- sum_i (Q_k,i(s, a) - y)^2 (alpha_1 = 0, as in FEDORA's defaults).
* :func:`actor_loss` -- FEDORA's actor loss -lambda delta Q + delta ||pi - a||^2 + alpha_0 ||pi - pi_g||^2
  + alpha_2 ||pi - pi_prev||^2, lambda = 2.5 / mean |Q|.
* :func:`decay_delta` -- delta_k <- 0.995 delta_k when the global model's value beats the client's.
* :func:`value_score` (J_k), :func:`policy_inconsistency` (PI_k, proposed), :func:`scaling_factor`
  (c, proposed), :func:`combined_score` (S_k = c J_k - PI_k, proposed).
* :func:`uniform_weights` (FedAvg), :func:`q_softmax_weights` (FEDORA, beta = 0.1),
  :func:`q_std_weights` (softmax(J_k / std_k J_k), the Q-only ablation),
  :func:`combined_weights` (softmax(S_k / std_k S_k), proposed), :func:`aggregate` (theta_g = sum_k w_k theta_k).
* :func:`adaptive_alpha0` -- alpha_0,k = rho alpha_0 when the client's own score beats the global
  model's (proposed).
* :class:`RunSpec` and :class:`Federation` -- the state of R federations and one round of the
  algorithm (:meth:`Federation.start_round`, :meth:`Federation.local_step`,
  :meth:`Federation.finish_round`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = [
    "Ensemble", "critic_target", "critic_loss", "actor_loss", "decay_delta", "value_score",
    "policy_inconsistency", "scaling_factor", "combined_score", "uniform_weights", "q_softmax_weights",
    "q_std_weights", "combined_weights", "aggregate", "adaptive_alpha0", "AGGREGATORS", "RunSpec", "Federation",
]

MAX_ACTION = 2.0


class Ensemble:
    """``n`` independent MLPs of layer sizes ``sizes`` with ReLU between layers: weights W_l (n, in,
    out), biases b_l (n, 1, out). ``distinct`` initialisations (torch's Linear initialisation,
    U(-1/sqrt(in), 1/sqrt(in)), drawn from ``generator``) cycle over the members, member m taking
    draw m mod ``distinct``: with ``distinct=1`` every member starts from the same weights (federated
    clients share the global initialisation); the twin critics use ``distinct=2``, so the twins of
    every client start from two different draws (TD3's clipped double Q needs two different critics;
    twins started equal would stay equal, as they see the same batches and targets) while every
    client still starts from the same pair."""

    def __init__(self, n: int, sizes, generator: torch.Generator, distinct: int = 1):
        if n % distinct:
            raise ValueError(f"n = {n} members is not a multiple of distinct = {distinct}")
        self.params = []
        for d_in, d_out in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / math.sqrt(d_in)
            w = (torch.rand(distinct, d_in, d_out, generator=generator) * 2 - 1) * bound
            b = (torch.rand(distinct, 1, d_out, generator=generator) * 2 - 1) * bound
            self.params += [w.repeat(n // distinct, 1, 1), b.repeat(n // distinct, 1, 1)]
        for p in self.params:
            p.requires_grad_(True)

    def __call__(self, x: torch.Tensor, params=None) -> torch.Tensor:
        """Forward pass of every member, x (n, B, in) -> (n, B, out); ``params`` overrides the weights."""
        params = self.params if params is None else params
        n_layers = len(params) // 2
        for i in range(n_layers):
            x = torch.baddbmm(params[2 * i + 1], x, params[2 * i])
            if i < n_layers - 1:
                x = torch.relu(x)
        return x

    def copy_params(self) -> list:
        """Detached copies of the weights."""
        return [p.detach().clone() for p in self.params]


def actor_forward(net: Ensemble, obs: torch.Tensor, params=None) -> torch.Tensor:
    """Deterministic policy pi(s) = 2 tanh(f(s)), actions in [-2, 2]."""
    return MAX_ACTION * torch.tanh(net(obs, params))


def twin_q(net: Ensemble, obs: torch.Tensor, action: torch.Tensor, params=None) -> torch.Tensor:
    """Both critics of every member: ``net`` holds 2n members (member m's twins are 2m and 2m + 1);
    obs (n, B, 3), action (n, B, 1) -> (n, 2, B)."""
    x = torch.cat([obs, action], -1)
    n = x.shape[0]
    x = x.unsqueeze(1).expand(n, 2, *x.shape[1:]).reshape(2 * n, *x.shape[1:])
    return net(x, params).view(n, 2, -1)


def critic_target(reward, q_target_next, q_global_next, gamma: float, use_global) -> torch.Tensor:
    """FEDORA's critic target y = r + gamma max{min_i Q'_k,i(s', a~), min_i Q_g,i(s', a~)} (episodes
    here end by the time limit only, so d = 0). ``q_target_next`` and ``q_global_next`` are (n, 2, B)
    twin values at (s', a~); where ``use_global`` (n,) is False the global critic is left out
    (a client trained alone)."""
    local = q_target_next.min(1).values
    glob = q_global_next.min(1).values
    best = torch.where(use_global[:, None], torch.maximum(local, glob), local)
    return reward + gamma * best


def critic_loss(q_pred, y) -> torch.Tensor:
    """Per-member critic loss mean_B sum_i (Q_k,i(s, a) - y)^2; q_pred (n, 2, B), y (n, B) -> (n,)."""
    return ((q_pred - y[:, None, :]) ** 2).sum(1).mean(-1)


def actor_loss(q1, pi, action, pi_global, pi_prev, delta, alpha0, alpha2, bc_weight, alpha: float = 2.5):
    """FEDORA's actor loss per member (n,):
    -lambda delta mean Q_k,1(s, pi(s)) + bc delta mean ||pi(s) - a||^2 + alpha_0 mean ||pi(s) -
    pi_g(s)||^2 + alpha_2 mean ||pi(s) - pi_prev(s)||^2, lambda = alpha / mean |Q_k,1| (detached).
    q1 (n, B); pi, action, pi_global, pi_prev (n, B, 1); delta, alpha0, bc_weight (n,) (bc_weight 0 is
    the stress variant's pure-TD3 client); alpha2 a float."""
    lam = alpha / q1.abs().mean(-1).detach().clamp_min(1e-6)
    bc = ((pi - action) ** 2).sum(-1).mean(-1)
    prox_global = ((pi - pi_global) ** 2).sum(-1).mean(-1)
    prox_prev = ((pi - pi_prev) ** 2).sum(-1).mean(-1)
    return -lam * delta * q1.mean(-1) + bc_weight * delta * bc + alpha0 * prox_global + alpha2 * prox_prev


def decay_delta(delta, value_global, value_local, rate: float = 0.995):
    """FEDORA's decay: delta_k <- rate delta_k where the global model's value on D_k (global critic
    and actor, before local training) exceeds the client's J_k after local training."""
    return torch.where(value_global > value_local, delta * rate, delta)


def value_score(q1_on_policy, mask) -> torch.Tensor:
    """J_k = mean over s in D_k of Q_k,1(s, pi_k(s)); q1_on_policy (..., N) with a 0/1 ``mask`` of
    real transitions (clients hold different numbers)."""
    return (q1_on_policy * mask).sum(-1) / mask.sum(-1)


def policy_inconsistency(pi, action, mask) -> torch.Tensor:
    """PI_k = 1 / (|D_k| |A|) sum_{(s, a) in D_k} ||pi_k(s) - a||^2 (proposed: the discrepancy between the
    learned deterministic policy and the data's actions); pi, action (..., N, |A|)."""
    sq = ((pi - action) ** 2).mean(-1)
    return (sq * mask).sum(-1) / mask.sum(-1)


def scaling_factor(j, pi_inc) -> torch.Tensor:
    """c = mean_k PI_k / mean_k |J_k| over the clients of a run (last axis) (proposed): the Q term,
    multiplied by c, gets the magnitude of the inconsistency term."""
    return pi_inc.mean(-1) / j.abs().mean(-1).clamp_min(1e-8)


def combined_score(j, pi_inc, c) -> torch.Tensor:
    """S_k = c J_k - PI_k (proposed): a higher return and a lower inconsistency both raise it; ``c``
    broadcasts over the clients (last axis)."""
    return c[..., None] * j - pi_inc


def uniform_weights(j) -> torch.Tensor:
    """FedAvg: w_k = 1 / K."""
    return torch.full_like(j, 1.0 / j.shape[-1])


def q_softmax_weights(j, beta: float = 0.1) -> torch.Tensor:
    """FEDORA: w_k = exp(beta J_k) / sum_j exp(beta J_j), beta = 0.1."""
    return torch.softmax(beta * j, -1)


def q_std_weights(j, temperature: float = 1.0) -> torch.Tensor:
    """The Q-only ablation of the combined weights (ours): w_k = softmax_k(J_k / T), T =
    ``temperature`` times std_k J_k, the same scale-free temperature rule as
    :func:`combined_weights` without the inconsistency term."""
    t = temperature * j.std(-1, unbiased=False, keepdim=True).clamp_min(1e-8)
    return torch.softmax(j / t, -1)


def combined_weights(j, pi_inc, temperature: float = 1.0) -> torch.Tensor:
    """The paper's weights (proposed form): w_k = softmax_k(S_k / T), S_k = c J_k - PI_k, T =
    ``temperature`` times std_k S_k (scale-free; equal scores give equal weights)."""
    s = combined_score(j, pi_inc, scaling_factor(j, pi_inc))
    t = temperature * s.std(-1, unbiased=False, keepdim=True).clamp_min(1e-8)
    return torch.softmax(s / t, -1)


def aggregate(params, weights) -> torch.Tensor:
    """theta_g = sum_k w_k theta_k: ``params`` (R, K, ...) member weights, ``weights`` (R, K) -> (R, ...)."""
    w = weights.reshape(*weights.shape, *([1] * (params.dim() - 2)))
    return (w * params).sum(1)


def adaptive_alpha0(score_local, score_global, alpha0: float, rho: float = 0.1) -> torch.Tensor:
    """alpha_0,k = rho alpha_0 where the client's own model scores higher than the global model on
    D_k (S_loc > S_g, the same score as the weights), else alpha_0 (proposed)."""
    return torch.where(score_local > score_global, rho * alpha0, torch.full_like(score_local, alpha0))


AGGREGATORS = {"uniform", "q_softmax", "q_std", "combined", "none"}


@dataclass
class RunSpec:
    """One federation: ``aggregator`` (uniform / q_softmax / combined, or none = clients trained alone),
    ``keep_own`` (clients keep their weights and are pulled toward the global model; False =
    FEDORA's overwrite by the global model each round), ``adaptive`` (the adaptive alpha_0),
    ``bc`` (per client 1.0 = TD3+BC, 0.0 = pure TD3, the stress variant), ``temp`` (a factor on the
    softmax temperature of the run's aggregator, the tuned knob: q_softmax uses beta / temp,
    q_std and combined use temp times the hyperparameter ``temperature``)."""

    aggregator: str
    keep_own: bool = False
    adaptive: bool = False
    bc: list = field(default_factory=list)
    temp: float = 1.0


class Federation:
    """R federations of K clients each as one batched ensemble (see the module docstring).

    ``data``: per member tensors ``obs`` (M, N, 3), ``action`` (M, N, 1), ``reward`` (M, N),
    ``next_obs`` (M, N, 3) padded to a common N, with ``size`` (M,) the real counts; ``score_idx``
    (M, S) and ``score_mask`` (M, S) pick the transitions on which J_k and PI_k are measured.
    ``hp``: hidden, lr, batch, gamma, tau, policy_noise, noise_clip, policy_freq, alpha, alpha0,
    alpha2, rho, temperature, beta."""

    def __init__(self, specs: list, n_clients: int, data: dict, hp: dict, seed: int):
        self.specs, self.K, self.R = specs, n_clients, len(specs)
        self.M = self.R * self.K
        self.hp, self.data = hp, data
        gen = torch.Generator().manual_seed(seed)
        self.gen = gen
        h = hp["hidden"]
        self.actor = Ensemble(self.M, [3, h, h, 1], gen)
        self.critic = Ensemble(2 * self.M, [4, h, h, 1], gen, distinct=2)
        self.actor_target = self.actor.copy_params()
        self.critic_target = self.critic.copy_params()
        self.global_actor = [p[: self.R].clone() for p in self.actor.copy_params()]
        self.global_critic = [p[: 2 * self.R].clone() for p in self.critic.copy_params()]
        self.prev_actor = self.actor.copy_params()
        self.actor_opt = torch.optim.Adam(self.actor.params, lr=hp["lr"])
        self.critic_opt = torch.optim.Adam(self.critic.params, lr=hp["lr"])
        member = lambda values: torch.tensor([v for v in values], dtype=torch.float32)  # noqa: E731
        self.bc = member([spec.bc[k] if spec.bc else 1.0 for spec in specs for k in range(self.K)])
        self.federated = torch.tensor([spec.aggregator != "none" for spec in specs for _ in range(self.K)])
        self.delta = torch.ones(self.M)
        self.alpha0 = self.federated.float() * hp["alpha0"]
        self.c = torch.zeros(self.R)
        self.step_count = 0

    # ---- helpers -------------------------------------------------------------------------------
    def _to_members(self, params_run: list, twin: bool) -> list:
        reps = self.K
        if twin:  # (2R, ...) -> (2M, ...) with member m = r K + k, twins 2m, 2m + 1
            return [p.view(self.R, 2, *p.shape[1:]).repeat_interleave(reps, 0).reshape(2 * self.M, *p.shape[1:])
                    for p in params_run]
        return [p.repeat_interleave(reps, 0) for p in params_run]

    def _global_q_at(self, obs, action) -> torch.Tensor:
        """Twin values of each member's run's global critic at member inputs (M, B, .) -> (M, 2, B)."""
        B = obs.shape[1]
        x_obs = obs.reshape(self.R, self.K * B, -1)
        x_act = action.reshape(self.R, self.K * B, -1)
        q = twin_q(self.critic, x_obs, x_act, self.global_critic)  # (R, 2, K B)
        return q.view(self.R, 2, self.K, B).permute(0, 2, 1, 3).reshape(self.M, 2, B)

    def _global_pi_at(self, obs) -> torch.Tensor:
        B = obs.shape[1]
        return actor_forward(self.actor, obs.reshape(self.R, self.K * B, -1), self.global_actor).view(self.M, B, -1)

    def _score_batch(self):
        idx = self.data["score_idx"]
        take = lambda x: torch.gather(x, 1, idx[..., None].expand(-1, -1, x.shape[-1]))  # noqa: E731
        return take(self.data["obs"]), take(self.data["action"]), self.data["score_mask"]

    @torch.no_grad()
    def scores(self, which: str = "local") -> tuple[torch.Tensor, torch.Tensor]:
        """(J_k, PI_k) per member (M,) on its score transitions, for the clients' own models
        (``which="local"``: own actor and own critic), their run's global model ("global": global
        actor and global critic, FEDORA's value for the decay) or the global actor judged by the
        client's own critic ("global_own_critic": the adaptive rule compares the two actors under
        one critic, so a gap between the scores is a gap between the policies, not between two
        critics' calibrations)."""
        obs, action, mask = self._score_batch()
        if which == "local":
            pi = actor_forward(self.actor, obs)
            q1 = twin_q(self.critic, obs, pi)[:, 0]
        elif which == "global":
            pi = self._global_pi_at(obs)
            q1 = self._global_q_at(obs, pi)[:, 0]
        elif which == "global_own_critic":
            pi = self._global_pi_at(obs)
            q1 = twin_q(self.critic, obs, pi)[:, 0]
        else:
            raise ValueError(f"unknown scores {which!r}; valid: local, global, global_own_critic")
        return value_score(q1, mask), policy_inconsistency(pi, action, mask)

    # ---- one round -------------------------------------------------------------------------------
    @torch.no_grad()
    def start_round(self) -> dict:
        """Broadcast: FEDORA-style runs overwrite the clients' online actor and critic with the
        global ones (targets stay local); keep-own runs keep them. Records pi_prev (the client's actor
        at the end of its previous round), the global value on D_k (for the decay) and, for adaptive
        runs, alpha_0,k from S_loc vs S_g with the run's last scaling factor c, both scored with the
        client's own critic (before any overwrite)."""
        self.prev_actor = self.actor.copy_params()
        j_loc, pi_loc = self.scores("local")
        self.value_global = self.scores("global")[0]
        j_glob, pi_glob = self.scores("global_own_critic")
        c = self.c.repeat_interleave(self.K)
        s_loc, s_glob = c * j_loc - pi_loc, c * j_glob - pi_glob
        overwrite = torch.tensor([spec.aggregator != "none" and not spec.keep_own
                                  for spec in self.specs for _ in range(self.K)])
        for p, g in zip(self.actor.params, self._to_members(self.global_actor, twin=False)):
            p.copy_(torch.where(overwrite.view(-1, *[1] * (p.dim() - 1)), g, p))
        ow2 = overwrite.repeat_interleave(2)
        for p, g in zip(self.critic.params, self._to_members(self.global_critic, twin=True)):
            p.copy_(torch.where(ow2.view(-1, *[1] * (p.dim() - 1)), g, p))
        adaptive = torch.tensor([spec.adaptive for spec in self.specs for _ in range(self.K)])
        alpha = adaptive_alpha0(s_loc, s_glob, self.hp["alpha0"], self.hp["rho"])
        self.alpha0 = torch.where(adaptive, alpha, torch.full_like(alpha, self.hp["alpha0"])) * self.federated
        return {"s_local": s_loc, "s_global": s_glob, "alpha0": self.alpha0.clone()}

    def _sample(self, batch: int):
        d = self.data
        idx = (torch.rand(self.M, batch, generator=self.gen) * d["size"][:, None]).long()
        take = lambda x: torch.gather(x, 1, idx[..., None].expand(-1, -1, x.shape[-1]))  # noqa: E731
        return take(d["obs"]), take(d["action"]), torch.gather(d["reward"], 1, idx), take(d["next_obs"])

    def local_step(self) -> None:
        """One TD3+BC gradient step of every client of every run (critic every step, actor and
        targets every ``policy_freq`` steps)."""
        hp = self.hp
        obs, action, reward, next_obs = self._sample(hp["batch"])
        with torch.no_grad():
            noise = (torch.randn(action.shape, generator=self.gen) * hp["policy_noise"] * MAX_ACTION
                     ).clamp(-hp["noise_clip"] * MAX_ACTION, hp["noise_clip"] * MAX_ACTION)
            next_a = (actor_forward(self.actor, next_obs, self.actor_target) + noise).clamp(-MAX_ACTION, MAX_ACTION)
            y = critic_target(reward, twin_q(self.critic, next_obs, next_a, self.critic_target),
                              self._global_q_at(next_obs, next_a), hp["gamma"], self.federated)
        loss = critic_loss(twin_q(self.critic, obs, action), y).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_opt.step()
        self.step_count += 1
        if self.step_count % hp["policy_freq"]:
            return
        pi = actor_forward(self.actor, obs)
        q1 = twin_q(self.critic, obs, pi)[:, 0]
        with torch.no_grad():
            pi_g = self._global_pi_at(obs)
            pi_prev = actor_forward(self.actor, obs, self.prev_actor)
        a_loss = actor_loss(q1, pi, action, pi_g, pi_prev, self.delta, self.alpha0, hp["alpha2"], self.bc,
                            hp["alpha"]).sum()
        self.actor_opt.zero_grad(set_to_none=True)
        a_loss.backward()
        self.actor_opt.step()
        with torch.no_grad():
            for net, target in ((self.actor, self.actor_target), (self.critic, self.critic_target)):
                for p, t in zip(net.params, target):
                    t.lerp_(p.detach(), hp["tau"])

    @torch.no_grad()
    def finish_round(self) -> dict:
        """After local training: J_k and PI_k of every client, FEDORA's decay of delta_k, the server's
        weights of each run (its aggregator) and the new global actor and critic. Returns the
        round's J, PI, weights (R, K) and scaling factor c (R,)."""
        j, pi_inc = self.scores("local")
        self.delta = decay_delta(self.delta, self.value_global, j)
        jr, pr = j.view(self.R, self.K), pi_inc.view(self.R, self.K)
        self.c = scaling_factor(jr, pr)
        weights = torch.stack([self._weights(spec.aggregator, jr[r], pr[r], spec.temp)
                               for r, spec in enumerate(self.specs)])
        self.global_actor = [aggregate(p.detach().view(self.R, self.K, *p.shape[1:]), weights)
                             for p in self.actor.params]
        self.global_critic = [aggregate(p.detach().view(self.R, self.K, 2, *p.shape[1:]).transpose(1, 2).reshape(
            2 * self.R, self.K, *p.shape[1:]), weights.repeat_interleave(2, 0)) for p in self.critic.params]
        return {"j": jr.clone(), "pi": pr.clone(), "weights": weights, "c": self.c.clone()}

    def _weights(self, aggregator: str, j, pi_inc, temp: float = 1.0) -> torch.Tensor:
        if aggregator in ("uniform", "none"):
            return uniform_weights(j)
        if aggregator == "q_softmax":
            return q_softmax_weights(j, self.hp["beta"] / temp)
        if aggregator == "q_std":
            return q_std_weights(j, self.hp["temperature"] * temp)
        if aggregator == "combined":
            return combined_weights(j, pi_inc, self.hp["temperature"] * temp)
        raise ValueError(f"unknown aggregator {aggregator!r}; valid: {', '.join(sorted(AGGREGATORS))}")

    @torch.no_grad()
    def act_local(self, obs) -> torch.Tensor:
        """Every client's own policy, obs (M, B, 3) -> (M, B, 1)."""
        return actor_forward(self.actor, obs)

    @torch.no_grad()
    def act_global(self, obs) -> torch.Tensor:
        """Every run's global policy, obs (R, B, 3) -> (R, B, 1)."""
        return actor_forward(self.actor, obs, self.global_actor)
