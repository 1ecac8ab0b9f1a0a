"""DepthWorld, the toy CogRouter is applied to, and the agent sized to it: the task (stage types,
observations, the four levels' thoughts, the environment step, returns), the agent
(:class:`LevelPolicy`, level head pi(l | s) and action head pi(a | s, z_l, l)), CoSFT on DepthWorld
stages, rollouts (step 1 of the algorithm) and evaluation. The design is described in the package
docstring (:mod:`replib.papers.cogrouter`).

Contents:

1. DepthWorld: :data:`N_STAGES`, :data:`MAX_STEPS`, :data:`N_ACTIONS`, :data:`TYPE_PROBS`,
   :data:`STAGE_TYPES`, :data:`LEVEL_COSTS`, :data:`SUFFICIENT_LEVEL`, :data:`VARIANTS`,
   :func:`obs_dim`, :func:`view_dim`, :func:`sample_tasks`, :func:`repeat_tasks`, :func:`observe`,
   :func:`memory_readout`, :func:`lookahead_readout`, :func:`thought_views`, :func:`new_state`,
   :func:`env_step`, :func:`episode_returns`.
2. The agent: :class:`LevelPolicy` (two :class:`replib.models.mlp.MLP`), :func:`make_policy`; the
   headroom arm :class:`OracleRouter`.
3. CoSFT (stage 1): :func:`cosft_batch`, :func:`cosft`.
4. Rollouts (step 1): :func:`rollout`.
5. Evaluation: :func:`evaluate`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from replib.models.mlp import MLP

from .method import N_LEVELS

__all__ = [
    "N_STAGES",
    "MAX_STEPS",
    "N_ACTIONS",
    "ROUTINE",
    "RECALL",
    "PLAN",
    "STAGE_TYPES",
    "TYPE_PROBS",
    "LEVEL_COSTS",
    "SUFFICIENT_LEVEL",
    "OBS_NOISE",
    "READOUT_NOISE",
    "VARIANTS",
    "obs_dim",
    "view_dim",
    "sample_tasks",
    "repeat_tasks",
    "observe",
    "memory_readout",
    "lookahead_readout",
    "thought_views",
    "new_state",
    "env_step",
    "episode_returns",
    "LevelPolicy",
    "make_policy",
    "OracleRouter",
    "cosft_batch",
    "cosft",
    "rollout",
    "evaluate",
]


# --------------------------------------------------------------------------------------------
# 1. DepthWorld
# --------------------------------------------------------------------------------------------

N_STAGES = 10
MAX_STEPS = 14
N_ACTIONS = 4
ROUTINE, RECALL, PLAN = 0, 1, 2
STAGE_TYPES = ("routine", "recall", "plan")
TYPE_PROBS = (0.6, 0.2, 0.2)
LEVEL_COSTS = np.array([8.0, 40.0, 80.0, 130.0])  # thinking tokens per step at levels 1..4
SUFFICIENT_LEVEL = (1, 3, 4)  # minimal sufficient level (1-based) per stage type
OBS_NOISE = 0.55  # sd of the noisy re-description (arrow and cue entries), levels 2-4
READOUT_NOISE = 0.3  # sd of the memory and lookahead read-outs
VARIANTS = ("noisy", "strong")
STRONG_DIST_NOISE = 0.1  # strong variant: sd of the observed plan distances
STRONG_PENALTY = 0.3  # strong variant: success-probability factor per wrong recall/plan action

_BASE_OBS = 2 * N_ACTIONS + 3  # arrow, cue, is_recall, is_plan, stage / N_STAGES


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")


def obs_dim(variant: str = "noisy") -> int:
    """Length of the observation: 11 (``[arrow 4, cue 4, is_recall, is_plan, stage / S]``), 15 in
    the strong variant (plus 4 observed plan distances)."""
    _check_variant(variant)
    return _BASE_OBS + (N_ACTIONS if variant == "strong" else 0)


def view_dim(variant: str = "noisy") -> int:
    """Length of a thought's view: the observation block, the memory block and the lookahead block
    (4 each), absent blocks zero-padded."""
    return obs_dim(variant) + 2 * N_ACTIONS


def sample_tasks(n: int, rng: np.random.Generator, variant: str = "noisy") -> dict:
    """``n`` DepthWorld tasks (one fixed stage sequence each), arrays of shape (n, N_STAGES):

    ``types`` (0 routine, 1 recall, 2 plan; stage 0 always routine), ``arrows`` and ``cues`` (the
    routine stages' arrow and cue, -1 elsewhere), ``plan`` (the plan stages' answer, -1 elsewhere),
    ``memory`` (the cue of the most recent routine stage *before* each stage, -1 at stage 0) and
    ``correct`` (the correct action at each stage: arrow, memory cue or plan answer). Strong
    variant: also ``distances`` (n, N_STAGES, 4), the observed (noisy) plan distances, zeros
    elsewhere; the plan answer is the argmin of the true distances."""
    _check_variant(variant)
    types = rng.choice(3, size=(n, N_STAGES), p=TYPE_PROBS)
    types[:, 0] = ROUTINE
    arrows = rng.integers(0, N_ACTIONS, size=(n, N_STAGES))
    cues = rng.integers(0, N_ACTIONS, size=(n, N_STAGES))
    routine = types == ROUTINE
    is_plan = types == PLAN
    tasks = {}
    if variant == "strong":
        true_d = rng.random((n, N_STAGES, N_ACTIONS))
        seen = true_d + STRONG_DIST_NOISE * rng.standard_normal((n, N_STAGES, N_ACTIONS))
        plan = np.where(is_plan, true_d.argmin(axis=-1), -1)
        tasks["distances"] = np.where(is_plan[..., None], seen, 0.0)
    else:
        plan = np.where(is_plan, rng.integers(0, N_ACTIONS, size=(n, N_STAGES)), -1)
    arrows = np.where(routine, arrows, -1)
    cues = np.where(routine, cues, -1)
    memory = np.full((n, N_STAGES), -1)
    last = np.full(n, -1)
    for s in range(N_STAGES):
        memory[:, s] = last
        last = np.where(routine[:, s], cues[:, s], last)
    correct = np.where(routine, arrows, np.where(types == RECALL, memory, plan))
    tasks.update(types=types, arrows=arrows, cues=cues, plan=plan, memory=memory, correct=correct)
    return tasks


def repeat_tasks(tasks: dict, G: int) -> dict:
    """Each task repeated G times (rows of one task adjacent): the B * G episodes of a rollout."""
    return {key: np.repeat(value, G, axis=0) for key, value in tasks.items()}


def _one_hot(index: np.ndarray, n: int = N_ACTIONS) -> np.ndarray:
    """One-hot rows, all zeros where index < 0."""
    index = np.asarray(index)
    out = np.zeros(index.shape + (n,), dtype=np.float32)
    valid = index >= 0
    out[valid, index[valid]] = 1.0
    return out


def observe(tasks: dict, episodes, stages, variant: str = "noisy") -> np.ndarray:
    """The observation at ``stages`` of ``episodes`` (index arrays of equal length), (n, obs_dim)
    float32: ``[arrow one-hot, cue one-hot, is_recall, is_plan, stage / N_STAGES]`` (+ the observed
    distances in the strong variant)."""
    episodes, stages = np.asarray(episodes), np.asarray(stages)
    types = tasks["types"][episodes, stages]
    parts = [_one_hot(tasks["arrows"][episodes, stages]), _one_hot(tasks["cues"][episodes, stages]),
             (types == RECALL)[:, None], (types == PLAN)[:, None], (stages / N_STAGES)[:, None]]
    if variant == "strong":
        parts.append(tasks["distances"][episodes, stages])
    return np.concatenate(parts, axis=1, dtype=np.float32)


def memory_readout(tasks: dict, episodes, stages) -> np.ndarray:
    """Clean memory read-out: one-hot of the most recent cue shown before the stage (zeros before
    any cue), (n, 4)."""
    return _one_hot(tasks["memory"][np.asarray(episodes), np.asarray(stages)])


def lookahead_readout(tasks: dict, episodes, stages) -> np.ndarray:
    """Clean lookahead read-out: one-hot of the plan answer at plan stages, zeros elsewhere, (n, 4)."""
    return _one_hot(tasks["plan"][np.asarray(episodes), np.asarray(stages)])


def thought_views(obs: np.ndarray, memory: np.ndarray, lookahead: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """The thoughts z_1..z_4 of one step as views, (n, 4, obs_dim + 8) float32, noise drawn fresh
    per level: z_1 = [obs, 0, 0]; z_2 = [noisy obs, 0, 0]; z_3 = [noisy obs, memory + noise, 0];
    z_4 = [noisy obs, memory + noise, lookahead + noise]. The noisy re-description adds
    N(0, 0.55^2) to the 8 arrow and cue entries only; read-outs get N(0, 0.3^2)."""
    n, d = obs.shape
    k = N_ACTIONS
    views = np.zeros((n, N_LEVELS, d + 2 * k), dtype=np.float32)
    views[:, :, :d] = obs[:, None, :]
    views[:, 1:, : 2 * k] += OBS_NOISE * rng.standard_normal((n, 3, 2 * k))
    views[:, 2:, d: d + k] = memory[:, None, :] + READOUT_NOISE * rng.standard_normal((n, 2, k))
    views[:, 3, d + k:] = lookahead + READOUT_NOISE * rng.standard_normal((n, k))
    return views


def new_state(n: int) -> dict:
    """Start state of ``n`` episodes: ``stage``, ``steps`` (taken), ``alive``, ``passed`` (all
    stages cleared), ``wrong`` (wrong recall/plan actions, strong variant)."""
    return {"stage": np.zeros(n, dtype=np.int64), "steps": np.zeros(n, dtype=np.int64),
            "alive": np.ones(n, dtype=bool), "passed": np.zeros(n, dtype=bool),
            "wrong": np.zeros(n, dtype=np.int64)}


def env_step(tasks: dict, state: dict, episodes, actions, variant: str = "noisy") -> np.ndarray:
    """One step of the (alive) ``episodes`` with ``actions``, updating ``state`` in place; returns
    whether each action was correct.

    Correct: the stage is passed. Wrong at a routine stage: the stage repeats. Wrong at a
    recall/plan stage: the episode ends (noisy variant) or the stage is passed and ``wrong``
    counts it (strong variant). An episode ends when all stages are passed or after MAX_STEPS
    steps."""
    episodes, actions = np.asarray(episodes), np.asarray(actions)
    if not state["alive"][episodes].all():
        raise ValueError("env_step on an episode that has ended")
    stage = state["stage"][episodes]
    ok = actions == tasks["correct"][episodes, stage]
    hard = tasks["types"][episodes, stage] != ROUTINE
    state["steps"][episodes] += 1
    if variant == "strong":
        advance = ok | hard
        state["wrong"][episodes] += (hard & ~ok).astype(np.int64)
        dead = np.zeros_like(ok)
    else:
        advance = ok
        dead = hard & ~ok
    stage = stage + advance
    state["stage"][episodes] = stage
    passed = stage >= N_STAGES
    state["passed"][episodes] = passed
    state["alive"][episodes] = ~(dead | passed | (state["steps"][episodes] >= MAX_STEPS))
    return ok


def episode_returns(state: dict, rng: np.random.Generator | None = None, variant: str = "noisy") -> np.ndarray:
    """R = 1[won] per episode (float): all stages passed within MAX_STEPS; in the strong variant a
    passed episode is won with probability 0.3^wrong (drawn from ``rng``)."""
    won = state["passed"].copy()
    if variant == "strong":
        won &= rng.random(len(won)) < STRONG_PENALTY ** state["wrong"]
    return won.astype(np.float64)


# --------------------------------------------------------------------------------------------
# 2. The agent
# --------------------------------------------------------------------------------------------


class LevelPolicy(nn.Module):
    """The agent: level head pi(l | s) = ``MLP([obs_dim, 32, 4])`` and action head
    pi(a | s, z_l, l) = ``MLP([4 + view_dim, 64, 4])`` on ``[level one-hot, view]``.

    ``fixed_level`` (0-based, or None) forces the level: the level head is then skipped and a
    response's log-probability is the action term only. Levels are 0-based in code (level l is
    index l - 1)."""

    def __init__(self, variant: str = "noisy", seed: int = 0, fixed_level: int | None = None):
        super().__init__()
        self.variant = variant
        self.level_head = MLP([obs_dim(variant), 32, N_LEVELS], seed=seed)
        self.action_head = MLP([N_LEVELS + view_dim(variant), 64, N_ACTIONS], seed=seed + 1)
        self.fixed_level = fixed_level

    def level_logprobs(self, obs: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """log pi(. | s) at temperature T, (n, 4)."""
        return F.log_softmax(self.level_head(obs) / temperature, dim=-1)

    def action_logprobs(self, levels: torch.Tensor, views: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """log pi(. | view, l) at temperature T, (n, 4); ``levels`` 0-based (n,), ``views`` (n, view_dim)."""
        x = torch.cat([F.one_hot(levels, N_LEVELS).to(views.dtype), views], dim=-1)
        return F.log_softmax(self.action_head(x) / temperature, dim=-1)

    def response_terms(self, obs, levels, views, actions, temperature: float = 1.0):
        """Per sample: log pi(l | s), log pi(a | view_l, l) and the entropies of both heads
        (level terms are 0 for a fixed-level agent)."""
        act = self.action_logprobs(levels, views, temperature)
        act_lp = act.gather(1, actions[:, None])[:, 0]
        act_ent = -(act.exp() * act).sum(-1)
        if self.fixed_level is not None:
            zero = torch.zeros_like(act_lp)
            return zero, act_lp, zero, act_ent
        lev = self.level_logprobs(obs, temperature)
        return lev.gather(1, levels[:, None])[:, 0], act_lp, -(lev.exp() * lev).sum(-1), act_ent

    def response_logprob(self, obs, levels, views, actions, temperature: float = 1.0) -> torch.Tensor:
        """log pi(response) = log pi(l | s) + log pi(a | view_l, l) (action term only when the level
        is fixed), (n,)."""
        lev_lp, act_lp, _, _ = self.response_terms(obs, levels, views, actions, temperature)
        return lev_lp + act_lp


def make_policy(variant: str = "noisy", seed: int = 0, fixed_level: int | None = None) -> LevelPolicy:
    """A freshly initialised :class:`LevelPolicy` (weights fixed by ``seed``)."""
    _check_variant(variant)
    return LevelPolicy(variant, seed, fixed_level)


class OracleRouter(nn.Module):
    """The headroom arm (ours): at every stage the minimal sufficient level (routine 1, recall 3,
    plan 4, read from the observation's stage flags) and the action read from that level's thought:
    the arrow of the clean observation at routine stages, the argmax of the noisy memory read-out at
    recall stages, of the noisy lookahead read-out at plan stages. It has the interface of
    :class:`LevelPolicy` that :func:`rollout` and :func:`evaluate` use, with logits ``scale`` times
    one-hot (near-deterministic at any temperature), so it is scored by the same evaluation code.
    It is the cheapest agent that never guesses at recall and plan stages (noisy variant only)."""

    def __init__(self, scale: float = 50.0):
        super().__init__()
        self.variant = "noisy"
        self.fixed_level = None
        self.scale = scale

    def level_logprobs(self, obs: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        is_recall, is_plan = obs[:, 2 * N_ACTIONS], obs[:, 2 * N_ACTIONS + 1]
        level = torch.where(is_plan > 0.5, 3, torch.where(is_recall > 0.5, 2, 0))
        return F.log_softmax(self.scale * F.one_hot(level, N_LEVELS).to(obs.dtype) / temperature, dim=-1)

    def action_logprobs(self, levels: torch.Tensor, views: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        d = obs_dim("noisy")
        is_recall, is_plan = views[:, 2 * N_ACTIONS], views[:, 2 * N_ACTIONS + 1]
        block = torch.where((is_plan > 0.5)[:, None], views[:, d + N_ACTIONS: d + 2 * N_ACTIONS],
                            torch.where((is_recall > 0.5)[:, None], views[:, d: d + N_ACTIONS], views[:, :N_ACTIONS]))
        action = block.argmax(dim=-1)
        return F.log_softmax(self.scale * F.one_hot(action, N_ACTIONS).to(views.dtype) / temperature, dim=-1)


def _sample(logprobs: torch.Tensor, rng: np.random.Generator) -> np.ndarray:
    """One categorical draw per row (inverse CDF with numpy uniforms)."""
    cdf = np.cumsum(logprobs.exp().double().numpy(), axis=1)
    u = rng.random(len(cdf))[:, None] * cdf[:, -1:]
    return np.minimum((cdf < u).sum(axis=1), cdf.shape[1] - 1)


# --------------------------------------------------------------------------------------------
# 3. CoSFT
# --------------------------------------------------------------------------------------------


def cosft_batch(rng: np.random.Generator, n: int, variant: str = "noisy", label_noise: float = 0.3) -> dict:
    """One CoSFT batch of ``n`` single stages (uniformly random stages of fresh episodes): ``obs``,
    the level label (0-based: the minimal sufficient level, replaced by a uniformly random level with
    probability ``label_noise``), the view of the labelled level (fresh noise) and the action label
    (the correct action)."""
    tasks = sample_tasks(n, rng, variant)
    episodes, stages = np.arange(n), rng.integers(0, N_STAGES, size=n)
    obs = observe(tasks, episodes, stages, variant)
    types = tasks["types"][episodes, stages]
    levels = np.array(SUFFICIENT_LEVEL)[types] - 1
    noisy = rng.random(n) < label_noise
    levels = np.where(noisy, rng.integers(0, N_LEVELS, size=n), levels)
    views = thought_views(obs, memory_readout(tasks, episodes, stages), lookahead_readout(tasks, episodes, stages), rng)
    return {"obs": obs, "levels": levels, "views": views[np.arange(n), levels],
            "actions": tasks["correct"][episodes, stages], "types": types}


def cosft(policy: LevelPolicy, steps: int, seed: int, batch: int = 256, lr: float = 3e-3,
          label_noise: float = 0.3) -> np.ndarray:
    """Stage 1, CoSFT (in place): ``steps`` Adam steps of cross-entropy on the level head (level
    label) plus the action head (correct action from the labelled level's view), on fresh
    batches from :func:`cosft_batch`. Returns the losses."""
    rng = np.random.default_rng([seed, 6])
    optimiser = torch.optim.Adam(policy.parameters(), lr=lr)
    losses = np.empty(steps)
    for i in range(steps):
        b = cosft_batch(rng, batch, policy.variant, label_noise)
        obs, views = torch.from_numpy(b["obs"]), torch.from_numpy(b["views"])
        levels, actions = torch.from_numpy(b["levels"]), torch.from_numpy(b["actions"])
        loss = F.nll_loss(policy.level_logprobs(obs), levels) + F.nll_loss(policy.action_logprobs(levels, views), actions)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses[i] = float(loss.detach())
    return losses


# --------------------------------------------------------------------------------------------
# 4. Rollouts
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def rollout(policy: LevelPolicy, tasks: dict, rng: np.random.Generator, temperature: float = 1.0) -> dict:
    """Step 1: run one episode per row of ``tasks`` (batched over episodes, a python loop over the
    at most MAX_STEPS steps), sampling l ~ pi(. | s) (or the fixed level), the four thoughts and
    a ~ pi(. | view_l, l) at ``temperature``.

    Returns per step-sample (all steps of all episodes, in time order): ``episode``, ``stage``,
    ``type``, ``obs`` (m, obs_dim), ``views`` (m, 4, view_dim; the chosen level's view is the
    thought that produced the action, the others are fresh thoughts never used for acting),
    ``level`` (0-based), ``action``, ``correct``; per episode: ``returns``, ``length`` (steps),
    ``passed``, ``wrong``."""
    variant = policy.variant
    n = len(tasks["types"])
    state = new_state(n)
    keys = ("episode", "stage", "type", "obs", "views", "level", "action", "correct")
    rec = {key: [] for key in keys}
    for _ in range(MAX_STEPS):
        episodes = np.flatnonzero(state["alive"])
        if episodes.size == 0:
            break
        stages = state["stage"][episodes]
        obs = observe(tasks, episodes, stages, variant)
        views = thought_views(obs, memory_readout(tasks, episodes, stages),
                              lookahead_readout(tasks, episodes, stages), rng)
        if policy.fixed_level is None:
            levels = _sample(policy.level_logprobs(torch.from_numpy(obs), temperature), rng)
        else:
            levels = np.full(len(episodes), policy.fixed_level)
        chosen = torch.from_numpy(views[np.arange(len(episodes)), levels])
        actions = _sample(policy.action_logprobs(torch.from_numpy(levels), chosen, temperature), rng)
        rec["type"].append(tasks["types"][episodes, stages])
        ok = env_step(tasks, state, episodes, actions, variant)
        for key, value in zip(keys, (episodes, stages, None, obs, views, levels, actions, ok)):
            if value is not None:
                rec[key].append(value)
    out = {key: np.concatenate(value) for key, value in rec.items()}
    out.update(returns=episode_returns(state, rng, variant), length=state["steps"].copy(),
               passed=state["passed"].copy(), wrong=state["wrong"].copy())
    return out


# --------------------------------------------------------------------------------------------
# 5. Evaluation
# --------------------------------------------------------------------------------------------


def evaluate(policy: LevelPolicy, tasks: dict, rng: np.random.Generator, temperature: float) -> tuple[dict, list]:
    """One episode per task at ``temperature``. Returns the summary (``success``,
    ``cost_per_step``, ``steps_per_episode``, mean 1-based level at ``level_routine``,
    ``level_recall``, ``level_plan`` and ``level_hard`` (recall and plan steps pooled), nan where no
    step of that type was taken) and the level-distribution rows (stage_type, level 1-4, share)."""
    roll = rollout(policy, tasks, rng, temperature)
    lv, types = roll["level"], roll["type"]
    summary = {"success": float(roll["returns"].mean()), "cost_per_step": float(LEVEL_COSTS[lv].mean()),
               "steps_per_episode": float(roll["length"].mean())}
    for t, name in enumerate(STAGE_TYPES):
        summary[f"level_{name}"] = float(lv[types == t].mean() + 1) if (types == t).any() else float("nan")
    hard = types != ROUTINE
    summary["level_hard"] = float(lv[hard].mean() + 1) if hard.any() else float("nan")
    rows = []
    for t, name in enumerate(STAGE_TYPES):
        sel = lv[types == t]
        for level in range(N_LEVELS):
            rows.append({"stage_type": name, "level": level + 1, "n_steps": int(sel.size),
                         "share": float((sel == level).mean()) if sel.size else float("nan")})
    return summary, rows
