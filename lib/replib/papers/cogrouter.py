"""CogRouter at CPU scale: an agent that picks a thinking depth ("cognitive level") at every step,
trained with CoSFT then CoPO (cognition-aware policy optimisation), on the toy task DepthWorld.

Paper: "Think Fast and Slow: Step-Level Cognitive Depth Adaptation for LLM Agents" (ICML 2026,
arXiv 2602.12662; official code https://github.com/rhyang2021/CogRouter). Only the abstract and the
opening of the introduction could be read; the algorithm below follows the official code as
summarised in the digest ``/work/shared/papers/cogrouter.md`` (its "Method" steps 1-9), and every
docstring names the step it implements. At each step the agent answers
``<level>l</level><think>z_l</think><action>a</action>`` with l in {1, 2, 3, 4}; CoPO gives every
step of a successful episode four "level variants" (same state and action, the thought of another
level) and reweights the episode's GRPO advantage by how confident each level makes the action:

    c_l = pi(a | s, l, z_l),   c_hat = minmax(c),   w_l = exp(k c_hat_l) / mean_l' exp(k c_hat_l'),
    A_{t,l} = w_l A_tau                                    (k = 2, steps 5-8).

Contents (torch for the policy, numpy for the task and the theory):

1. DepthWorld (the digest's proposal, its noisy-thought design; :data:`VARIANTS` adds the digest's
   "strong" variant for the exploratory sweep): :data:`N_STAGES`, :data:`MAX_STEPS`,
   :data:`N_ACTIONS`, :data:`N_LEVELS`, :data:`TYPE_PROBS`, :data:`STAGE_TYPES`,
   :data:`LEVEL_COSTS`, :data:`SUFFICIENT_LEVEL`, :func:`obs_dim`, :func:`view_dim`,
   :func:`sample_tasks`, :func:`repeat_tasks`, :func:`observe`, :func:`memory_readout`,
   :func:`lookahead_readout`, :func:`thought_views`, :func:`new_state`, :func:`env_step`,
   :func:`episode_returns`.
2. The agent: :class:`LevelPolicy` (level head pi(l | s) and action head pi(a | s, z_l, l), two
   :class:`replib.models.mlp.MLP`), :func:`make_policy`.
3. CoSFT: :func:`cosft_batch`, :func:`cosft`.
4. Rollouts (step 1): :func:`rollout`.
5. CoPO (steps 2-9): :func:`pooled_group_advantages`, :func:`expansion_mask`,
   :func:`action_confidences`, :func:`build_batch`, :func:`policy_update`, :func:`rl_iteration`.
6. Evaluation and the premise: :func:`evaluate`, :func:`premise`.
7. The experiment: :data:`METHODS`, :data:`EXPERIMENT_PROFILES`, :func:`train_method`,
   :func:`run_seed`, :func:`run_experiment`, :func:`claim_values`, :func:`regime_sweep`.
8. Theory helpers (the digest's theory outline): :func:`copo_weights`, :func:`weight_bounds`,
   :func:`level_fixed_point`, :func:`iterate_level_update`, :func:`grpo_vs_copo_credit_example`.
9. Exercise graders: :func:`check_copo_weights`, :func:`check_level_fixed_point`.

DepthWorld (digest's proposal; exact choices ours where marked).

* An episode has ``N_STAGES`` = 10 stages and at most ``MAX_STEPS`` = 14 steps, 4 actions. Stage
  types are i.i.d. routine (0.6), recall (0.2), plan (0.2), except that stage 0 is always routine
  (ours: so that a cue exists before any recall). A routine stage shows an "arrow" (its correct
  action) and a fresh random cue; a recall stage's correct action is the *memory* cue, the cue of
  the most recent routine stage before it; a plan stage's correct action is a random action that
  only the level-4 lookahead reveals. A wrong routine action wastes a step (the stage repeats, same
  arrow and cue); a wrong recall/plan action ends the episode with reward 0; reward 1 iff the 10
  stages are passed within 14 steps.
* Observation s (the level head's input and level 1's thought), :func:`observe`, 11 numbers:
  ``[arrow one-hot (4), cue one-hot (4), is_recall, is_plan, stage / N_STAGES]``; arrow and cue
  are zeros at recall and plan stages. (Strong variant: 4 more numbers, see below.)
* Thoughts (:func:`thought_views`; the digest's feature modules in place of written reasoning):
  z_1 = the clean observation; z_2 = a noisy re-description (Gaussian noise sd 0.55 on the arrow
  and cue entries, the flags and stage index clean); z_3 = z_2's kind of re-description plus a
  memory read-out (memory-cue one-hot, zeros before any cue, + noise sd 0.3); z_4 = the same plus a
  lookahead read-out (one-hot of the plan answer at plan stages, zeros elsewhere, + noise sd 0.3).
  The "view" fed to the action head is ``[obs block (11), memory block (4), lookahead block (4)]``
  with absent blocks zero, so ``view_dim = obs_dim + 8``. Every level's thought gets its own noise,
  drawn fresh at every step; no thought ever sees the chosen action. Token costs C = (8, 40, 80,
  130) per step at levels 1-4 (the digest's proposal, roughly the template lengths).
* Why noisy re-descriptions: they build in the paper's premise that at routine steps extra
  reasoning can only lower the action's confidence (the digest's pilot found that with clean
  thoughts level 1 was never the most confident level at routine steps). This tests CoPO's credit
  rule, not whether an LLM can learn to write useful reasoning (a limitation to state).
* Strong variant (``variant="strong"``, exploratory only): the observation gets a 4-entry
  "distances" block, at plan stages the true candidate distances d ~ U(0, 1)^4 plus noise sd 0.1
  (fixed per task), zeros elsewhere; the plan answer is argmin(d), so level 1 can learn it from the
  observation imperfectly while the lookahead reads out the clean argmin. Consequences are delayed:
  a wrong recall/plan action does not end the episode (the stage is passed) but multiplies the final
  success probability by 0.3 (the return is then Bernoulli(0.3^n_wrong) if all stages are passed
  in time). The numbers 0.1 and 0.3 are ours.

The agent. Level head pi(l | s) = ``MLP([obs_dim, 32, 4])``; action head pi(a | s, z_l, l) =
``MLP([4 + view_dim, 64, 4])`` on ``[level one-hot, view]``. A response's log-probability is
log pi(l | s) + log pi(a | view_l, l); fixed-level agents skip the level head (their response
log-prob is the action term only). A decoding temperature T divides both heads' logits.

Fidelity notes (the paper's numbers are from an LLM; everything else is the digest's or ours):

* CoSFT (:func:`cosft`, digest "What to implement"): supervised learning on freshly generated single
  stages, drawn as uniformly random stages of freshly sampled episodes (so memory cues and stage
  indices are as in real episodes). Level label = the minimal sufficient level (routine 1, recall 3,
  plan 4), replaced by a uniformly random level with probability 0.3; action label = the correct
  action, predicted from the view of the *labelled* level with fresh noise. Cross-entropy of both
  heads (summed), Adam lr 3e-3, batch 256. How the paper built its CoSFT data is unknown.
* Rollouts (step 1): B = 16 tasks x G = 4 episodes, temperature 1. A task fixes the stage types,
  arrows, cues and plan answers; its G episodes differ only in the agent's sampling and thought
  noise. Return R = 1[won] (the paper uses 10 * 1[won]; the scale cancels in the advantage).
  :func:`rollout` draws the thoughts of *all four* levels at every step and uses the chosen
  level's one; the others are never used for acting, so they are exactly the "fresh thoughts for the
  other levels" of step 4 (drawn earlier, which changes nothing in distribution).
* Advantage (step 2, :func:`pooled_group_advantages`): as in the code, pooled over the group's
  step-samples: every step of episode tau carries R_tau, and mean and *unbiased* std are taken over
  all the group's steps (long episodes weigh more); A = (R_tau - mean) / (std + 1e-6), A = 0 when
  the group's returns are all equal. (:func:`replib.rl.group_advantages` is per episode with the
  population std, hence our own small function.)
* Expansion (steps 3-8): only steps of successful episodes in mixed groups. The original sample is
  replaced by its four level variants (z_{l_orig} = the original thought, fresh thoughts for the
  others), each with advantage w_l A_tau. With single-token actions the geometric-mean confidence
  is pi(a | view_l, l); confidences use the current policy at temperature 1, under no_grad, before
  the update. The paper writes the other levels' thoughts *conditioned on the chosen action*
  (rationalisation); ours cannot see it (as the digest asks: otherwise confidences saturate).
* Update (step 9, :func:`policy_update`): one Adam step (lr ``rl_lr``, ours: 1e-3; the paper's
  5e-7 is for a 7B LLM) per iteration on the whole batch (the paper: mini-batches of 32, one PPO
  epoch). Loss = :func:`replib.rl.clipped_surrogate` (clip 0.2) on response log-probs + beta * mean
  :func:`replib.rl.kl_k3` (new vs reference, beta = 0.1 as for ALFWorld) - 0.001 * entropy (the
  paper's entropy coefficient; entropy = level-head + action-head entropy at the sample's state),
  gradient norm clipped to 1. With one update on fresh samples the ratio is exactly 1
  (old log-probs = the current ones, detached): the surrogate's gradient is -mean(A grad log pi),
  and clipping never acts; it is kept to mirror the algorithm. The loss is averaged over *samples*
  (a response = the level token + the action token), not over tokens as verl's token-mean does;
  with two policy tokens per response this only rescales, and keeps fixed-level agents (one token)
  comparable. The KL reference is the frozen CoSFT policy (``grpo_scratch``: its own initial
  policy). The invalid-action penalty of verl-agent has no analogue (every action is valid).
* Methods (:data:`METHODS`): ``cosft`` (evaluated only), ``copo``, ``grpo`` (the same update without
  the expansion: plain A_tau on the sampled responses; isolates the reweighting), ``fixed_l1`` and
  ``fixed_l4`` (level forced in rollouts and evaluation, GRPO on the action head only),
  ``grpo_scratch`` (adaptive GRPO from the random initial policy, no CoSFT). Every RL method of a
  seed runs the same number of iterations on the same task stream.
* Evaluation (:func:`evaluate`): a fixed set of ``n_eval`` episodes per seed, at temperatures 0.4 (the
  paper's) and 1.0, at iteration 0, every ``eval_every`` iterations and at the end. Cost per step
  and mean levels are averaged over all steps taken (repeated routine steps included).
* Premise (:func:`premise`, claim 1): CoSFT policy, ``n_premise_episodes`` episodes at temperature
  1; at every step of a successful episode c_l for the four levels as in step 5; the argmax level.
* Streams and determinism: numpy generators seeded by (seed, purpose[, method]) for tasks, thought
  noise and sampling; the task stream depends on the seed only. :func:`run_seed` runs under
  :func:`replib.core.runtime.compute_threads` (one thread by default, deterministic algorithms), so
  a seed gives the same numbers on every run with the same thread count.
* Claim conventions (:func:`claim_values`): final evaluation at temperature 0.4; c3 pools the
  steps of recall and plan stages; claims needing a missing method are nan.
* Profiles (:data:`EXPERIMENT_PROFILES`): ``smoke`` (1 seed, CoSFT 40 steps, 10 iterations, cosft /
  copo / grpo; about 1 s), ``book`` (seeds 0-2, CoSFT 400 steps, 500 iterations of each of the five
  RL methods, evaluation every 25 iterations on 300 episodes; measured 57 s on one thread of a
  2-core machine, about 19 s per seed; the digest's pilot used 200 iterations), ``paper`` (5 seeds,
  1500 iterations, 1000 evaluation episodes). One thread: two are not faster for these MLPs.
* Exploratory regime search (:func:`regime_sweep`, not judged): CoPO vs GRPO for settings of the
  learning rate, the KL coefficient, the evaluation temperature, the number of iterations and the
  variant (the digest's "strong" DepthWorld above).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.nn import functional as F

from replib.core.runtime import compute_threads, seed_everything
from replib.models.mlp import MLP
from replib.rl import clipped_surrogate, kl_k3

__all__ = [
    "N_STAGES",
    "MAX_STEPS",
    "N_ACTIONS",
    "N_LEVELS",
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
    "cosft_batch",
    "cosft",
    "rollout",
    "pooled_group_advantages",
    "expansion_mask",
    "action_confidences",
    "build_batch",
    "policy_update",
    "rl_iteration",
    "evaluate",
    "premise",
    "METHODS",
    "EXPERIMENT_PROFILES",
    "train_method",
    "run_seed",
    "run_experiment",
    "claim_values",
    "regime_sweep",
    "copo_weights",
    "weight_bounds",
    "level_fixed_point",
    "iterate_level_update",
    "grpo_vs_copo_credit_example",
    "check_copo_weights",
    "check_level_fixed_point",
]

# --------------------------------------------------------------------------------------------
# 1. DepthWorld
# --------------------------------------------------------------------------------------------

N_STAGES = 10
MAX_STEPS = 14
N_ACTIONS = 4
N_LEVELS = 4
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
# 5. CoPO
# --------------------------------------------------------------------------------------------


def pooled_group_advantages(returns, lengths, eps: float = 1e-6) -> np.ndarray:
    """Step 2: the trajectory advantage, pooled over step-samples as in the official code.

    ``returns`` and ``lengths`` (steps) are (B, G), one group (task) per row. Every step-sample of
    episode tau carries R_tau; mean and unbiased std are taken over all the group's step-samples,
    A_tau = (R_tau - mean) / (std + eps), and A = 0 for a group whose returns are all equal.
    Returns A per episode, (B, G)."""
    r = np.asarray(returns, dtype=np.float64)
    n = np.asarray(lengths, dtype=np.float64)
    total = n.sum(axis=1, keepdims=True)
    mean = (n * r).sum(axis=1, keepdims=True) / total
    var = (n * (r - mean) ** 2).sum(axis=1, keepdims=True) / np.maximum(total - 1, 1)
    adv = (r - mean) / (np.sqrt(var) + eps)
    mixed = (r != r[:, :1]).any(axis=1, keepdims=True)
    return np.where(mixed, adv, 0.0)


def expansion_mask(returns, step_episode, G: int) -> np.ndarray:
    """Step 3: which step-samples get the four level variants: steps of episodes with R > 0 whose
    group (``G`` consecutive episodes) has returns that are not all equal. ``returns`` per episode
    (B * G,), ``step_episode`` the episode of every step-sample; returns a boolean mask over
    step-samples."""
    r = np.asarray(returns, dtype=np.float64).reshape(-1, G)
    mixed = np.repeat((r != r[:, :1]).any(axis=1), G)
    expand_episode = mixed & (r.reshape(-1) > 0)
    return expand_episode[np.asarray(step_episode)]


@torch.no_grad()
def action_confidences(policy: LevelPolicy, views: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Step 5: c_l = pi(a | view_l, l) for the four levels of every step (single-token action: the
    geometric mean is the probability), current policy, temperature 1. ``views`` (m, 4, view_dim),
    ``actions`` (m,); returns (m, 4) float64."""
    m = len(actions)
    if m == 0:
        return np.zeros((0, N_LEVELS))
    levels = torch.arange(N_LEVELS).repeat(m)
    flat = torch.from_numpy(np.ascontiguousarray(views.reshape(m * N_LEVELS, -1)))
    logp = policy.action_logprobs(levels, flat)
    acts = torch.from_numpy(np.repeat(actions, N_LEVELS))
    return logp.gather(1, acts[:, None])[:, 0].exp().double().numpy().reshape(m, N_LEVELS)


def build_batch(policy: LevelPolicy, roll: dict, G: int, expand: bool = True, k: float = 2.0) -> dict:
    """Steps 2-8: the training batch of one iteration.

    Advantages A_tau by :func:`pooled_group_advantages`. Without ``expand`` (GRPO, fixed levels)
    every sampled response enters with A_tau. With ``expand`` (CoPO) each step selected by
    :func:`expansion_mask` is replaced by its four level variants (level l, view z_l, same state and
    action), with advantage w_l A_tau, w = :func:`copo_weights` of :func:`action_confidences`.
    Returns tensors ``obs``, ``levels``, ``views``, ``actions``, ``advantages`` and diagnostics
    (``n_expanded``, ``share_mixed``, and per expanded step ``exp_type``, ``exp_weights``,
    ``exp_obs`` for the fixed-point figure)."""
    returns = roll["returns"]
    adv_ep = pooled_group_advantages(returns.reshape(-1, G), roll["length"].reshape(-1, G)).reshape(-1)
    adv = adv_ep[roll["episode"]]
    m = len(adv)
    mask = expansion_mask(returns, roll["episode"], G) if expand else np.zeros(m, dtype=bool)
    keep = ~mask
    obs = [roll["obs"][keep]]
    levels = [roll["level"][keep]]
    views = [roll["views"][keep, roll["level"][keep]]]
    actions = [roll["action"][keep]]
    advantages = [adv[keep]]
    weights = np.zeros((0, N_LEVELS))
    idx = np.flatnonzero(mask)
    if idx.size:
        conf = action_confidences(policy, roll["views"][idx], roll["action"][idx])
        weights = copo_weights(conf, k)
        obs.append(np.repeat(roll["obs"][idx], N_LEVELS, axis=0))
        levels.append(np.tile(np.arange(N_LEVELS), idx.size))
        views.append(roll["views"][idx].reshape(idx.size * N_LEVELS, -1))
        actions.append(np.repeat(roll["action"][idx], N_LEVELS))
        advantages.append((weights * adv[idx][:, None]).reshape(-1))
    r = returns.reshape(-1, G)
    return {
        "obs": torch.from_numpy(np.concatenate(obs)),
        "levels": torch.from_numpy(np.concatenate(levels).astype(np.int64)),
        "views": torch.from_numpy(np.ascontiguousarray(np.concatenate(views))),
        "actions": torch.from_numpy(np.concatenate(actions).astype(np.int64)),
        "advantages": torch.from_numpy(np.concatenate(advantages).astype(np.float32)),
        "n_expanded": int(idx.size),
        "share_mixed": float((r != r[:, :1]).any(axis=1).mean()),
        "exp_type": roll["type"][idx],
        "exp_weights": weights,
        "exp_obs": roll["obs"][idx],
    }


def policy_update(policy: LevelPolicy, reference: LevelPolicy, optimiser, batch: dict, *, clip_eps: float = 0.2,
                  kl_coef: float = 0.1, entropy_coef: float = 0.001, grad_clip: float = 1.0) -> dict:
    """Step 9: one update on the whole batch,

        loss = clipped_surrogate(log pi, log pi_old, A) + beta mean k3(pi, pi_ref) - c_H mean entropy,

    log pi = the response log-probability, log pi_old = the same values detached (one update on fresh
    samples: ratio 1), k3 on response log-probs against the frozen ``reference``, gradient norm
    clipped to ``grad_clip``, one optimiser step. Returns the loss parts."""
    obs, levels, views, actions = batch["obs"], batch["levels"], batch["views"], batch["actions"]
    lev_lp, act_lp, lev_ent, act_ent = policy.response_terms(obs, levels, views, actions)
    logp = lev_lp + act_lp
    with torch.no_grad():
        ref_logp = reference.response_logprob(obs, levels, views, actions)
    surrogate = clipped_surrogate(logp, logp.detach(), batch["advantages"], clip_eps)
    kl = kl_k3(logp, ref_logp).mean()
    entropy = (lev_ent + act_ent).mean()
    loss = surrogate + kl_coef * kl - entropy_coef * entropy
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip)
    optimiser.step()
    return {"loss": float(loss.detach()), "surrogate": float(surrogate.detach()), "kl": float(kl.detach()),
            "entropy": float(entropy.detach())}


def rl_iteration(policy: LevelPolicy, reference: LevelPolicy, optimiser, tasks: dict, rng: np.random.Generator,
                 cfg, expand: bool) -> tuple[dict, dict]:
    """Steps 1-9 once: roll out the G episodes of each of the B ``tasks`` at temperature
    ``cfg.rollout_temperature``, build the batch (:func:`build_batch`, CoPO expansion iff
    ``expand``), one :func:`policy_update`. Returns (stats, batch)."""
    roll = rollout(policy, repeat_tasks(tasks, cfg.group_size), rng, cfg.rollout_temperature)
    batch = build_batch(policy, roll, cfg.group_size, expand=expand, k=cfg.k)
    stats = {"train_success": float(roll["returns"].mean()),
             "train_cost_per_step": float(LEVEL_COSTS[roll["level"]].mean()),
             "share_mixed": batch["share_mixed"], "n_expanded": batch["n_expanded"],
             "n_samples": int(len(batch["advantages"]))}
    stats.update(policy_update(policy, reference, optimiser, batch, clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef,
                               entropy_coef=cfg.entropy_coef, grad_clip=cfg.grad_clip))
    return stats, batch


# --------------------------------------------------------------------------------------------
# 6. Evaluation and the premise
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


def premise(policy: LevelPolicy, n_episodes: int, seed: int) -> tuple[dict, list]:
    """Claim 1's premise check: ``n_episodes`` episodes of ``policy`` (the CoSFT policy) at
    temperature 1; at every step of a successful episode c_l for the four levels as in step 5
    (z_{l_orig} the original thought, fresh thoughts for the others) and the level of highest c_l.

    Returns the summary (``c1a`` = share of successful recall and plan steps, pooled, whose argmax
    level is sufficient (3 or 4 at recall, 4 at plan); ``c1b`` = share of successful routine steps
    whose argmax is level 1; counts; per type shares) and heat-map rows per (stage_type, level):
    mean c_l, mean c_hat_l (min-max normalised as in step 6) and the share of argmax."""
    rng = np.random.default_rng([seed, 5])
    tasks = sample_tasks(n_episodes, rng, policy.variant)
    roll = rollout(policy, tasks, rng, 1.0)
    sel = roll["returns"][roll["episode"]] > 0
    conf = action_confidences(policy, roll["views"][sel], roll["action"][sel])
    types = roll["type"][sel]
    best = conf.argmax(axis=1)
    c_hat = _minmax(np.clip(conf, 1e-6, 1.0))
    ok_recall = best[types == RECALL] >= 2
    ok_plan = best[types == PLAN] == 3
    hard_ok = np.concatenate([ok_recall, ok_plan])
    routine_best = best[types == ROUTINE]
    nan = float("nan")
    summary = {"seed": seed, "c1a": float(hard_ok.mean()) if hard_ok.size else nan,
               "c1b": float((routine_best == 0).mean()) if routine_best.size else nan,
               "recall_sufficient": float(ok_recall.mean()) if ok_recall.size else nan,
               "plan_sufficient": float(ok_plan.mean()) if ok_plan.size else nan,
               "n_routine": int(routine_best.size), "n_recall": int(ok_recall.size), "n_plan": int(ok_plan.size),
               "success": float(roll["returns"].mean())}
    rows = []
    for t, name in enumerate(STAGE_TYPES):
        here = types == t
        for level in range(N_LEVELS):
            rows.append({"seed": seed, "stage_type": name, "level": level + 1, "n_steps": int(here.sum()),
                         "mean_c": float(conf[here, level].mean()) if here.any() else nan,
                         "mean_c_hat": float(c_hat[here, level].mean()) if here.any() else nan,
                         "share_argmax": float((best[here] == level).mean()) if here.any() else nan})
    return summary, rows


# --------------------------------------------------------------------------------------------
# 7. The experiment
# --------------------------------------------------------------------------------------------

METHODS = ("cosft", "copo", "grpo", "fixed_l1", "fixed_l4", "grpo_scratch")
_METHOD_INDEX = {m: i for i, m in enumerate(METHODS)}

_COMMON = dict(variant="noisy", cosft_batch=256, cosft_lr=3e-3, label_noise=0.3, batch_tasks=16, group_size=4,
               rollout_temperature=1.0, rl_lr=1e-3, kl_coef=0.1, clip_eps=0.2, entropy_coef=0.001, grad_clip=1.0,
               k=2.0, eval_temperatures=[0.4, 1.0])
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], cosft_steps=40, iterations=10, eval_every=5, n_eval=100, n_premise_episodes=64,
                  methods=["cosft", "copo", "grpo"], **_COMMON),
    "book": dict(seeds=[0, 1, 2], cosft_steps=400, iterations=500, eval_every=25, n_eval=300,
                 n_premise_episodes=400, methods=list(METHODS), **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], cosft_steps=400, iterations=1500, eval_every=50, n_eval=1000,
                  n_premise_episodes=1000, methods=list(METHODS), **_COMMON),
}


def _eval_points(cfg) -> set[int]:
    return set(range(0, cfg.iterations + 1, max(1, cfg.eval_every))) | {cfg.iterations}


def _method_policy(method: str, cosft_policy: LevelPolicy, init_policy: LevelPolicy) -> LevelPolicy:
    if method == "grpo_scratch":
        return copy.deepcopy(init_policy)
    policy = copy.deepcopy(cosft_policy)
    policy.fixed_level = {"fixed_l1": 0, "fixed_l4": 3}.get(method)
    return policy


def _expansion_rows(seed, method, iteration, batch, policy) -> list:
    """Per stage type: mean level-head probabilities at the expanded states (after that iteration's
    update) and the mean predicted fixed point w / sum(w)."""
    if batch["n_expanded"] == 0:
        return []
    with torch.no_grad():
        pi = policy.level_logprobs(torch.from_numpy(batch["exp_obs"])).exp().double().numpy()
    target = batch["exp_weights"] / batch["exp_weights"].sum(axis=1, keepdims=True)
    rows = []
    for t, name in enumerate(STAGE_TYPES):
        here = batch["exp_type"] == t
        if here.any():
            row = {"seed": seed, "method": method, "iteration": iteration, "stage_type": name, "n": int(here.sum())}
            row.update({f"pi_l{j + 1}": float(pi[here, j].mean()) for j in range(N_LEVELS)})
            row.update({f"target_l{j + 1}": float(target[here, j].mean()) for j in range(N_LEVELS)})
            rows.append(row)
    return rows


def train_method(method: str, cosft_policy: LevelPolicy, init_policy: LevelPolicy, eval_tasks: dict, cfg, seed: int,
                 progress=None) -> dict:
    """One method of one seed from copies of the CoSFT policy (``grpo_scratch``: of the random
    initial policy); the given policies are not changed.

    ``cosft`` is evaluated once (iteration 0). The RL methods run ``cfg.iterations`` iterations of
    :func:`rl_iteration` (expansion for ``copo`` only) on the seed's task stream (B tasks per
    iteration, the same for every method), with the KL reference frozen at the start policy, and
    are evaluated at iteration 0, every ``eval_every`` and at the end, at each of
    ``eval_temperatures`` on ``eval_tasks``. Returns rows ``evals``, ``levels`` (level
    distributions), ``curves`` (per iteration), ``expansion`` (copo) and ``seconds``."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    policy = _method_policy(method, cosft_policy, init_policy)
    reference = copy.deepcopy(policy).requires_grad_(False)
    m = _METHOD_INDEX[method]
    evals, levels, curves, expansion = [], [], [], []
    seconds = {"rl": 0.0, "eval": 0.0}

    def run_eval(iteration):
        start = time.perf_counter()
        for j, temperature in enumerate(cfg.eval_temperatures):
            rng = np.random.default_rng([seed, 4, m, iteration, j])
            summary, dist = evaluate(policy, eval_tasks, rng, temperature)
            key = {"seed": seed, "method": method, "iteration": iteration, "temperature": float(temperature)}
            evals.append({**key, **summary})
            levels.extend({**key, **row} for row in dist)
        seconds["eval"] += time.perf_counter() - start

    run_eval(0)
    if method != "cosft":
        task_rng = np.random.default_rng([seed, 1])
        agent_rng = np.random.default_rng([seed, 2, m])
        optimiser = torch.optim.Adam(policy.parameters(), lr=cfg.rl_lr)
        eval_at = _eval_points(cfg)
        iterations = range(1, cfg.iterations + 1)
        for it in progress(iterations) if progress else iterations:
            start = time.perf_counter()
            tasks = sample_tasks(cfg.batch_tasks, task_rng, cfg.variant)
            stats, batch = rl_iteration(policy, reference, optimiser, tasks, agent_rng, cfg, expand=method == "copo")
            if method == "copo":
                expansion += _expansion_rows(seed, method, it, batch, policy)
            seconds["rl"] += time.perf_counter() - start
            curves.append({"seed": seed, "method": method, "iteration": it, **stats})
            if it in eval_at:
                run_eval(it)
    return {"policy": policy, "evals": evals, "levels": levels, "curves": curves, "expansion": expansion,
            "seconds": seconds}


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: the random initial policy, CoSFT, the premise check and every method of
    ``cfg.methods``; plain data only (rows). Keys: ``evals``, ``levels``, ``curves``,
    ``expansion`` (see :func:`train_method`), ``premise`` (summary dict), ``confidence`` (heat-map
    rows), ``cosft_losses`` and ``seconds`` (``cosft_training``, ``premise``, each RL method's
    iterations (``cosft``: 0), ``eval``)."""
    with compute_threads(threads):
        seed_everything(seed)
        init = make_policy(cfg.variant, seed=100 * seed)
        policy = copy.deepcopy(init)
        start = time.perf_counter()
        losses = cosft(policy, cfg.cosft_steps, seed, cfg.cosft_batch, cfg.cosft_lr, cfg.label_noise)
        seconds = {"seed": seed, "cosft_training": time.perf_counter() - start}
        start = time.perf_counter()
        prem, conf_rows = premise(policy, cfg.n_premise_episodes, seed)
        seconds["premise"] = time.perf_counter() - start
        eval_tasks = sample_tasks(cfg.n_eval, np.random.default_rng([seed, 3]), cfg.variant)
        out = {"evals": [], "levels": [], "curves": [], "expansion": []}
        seconds["eval"] = 0.0
        for method in cfg.methods:
            res = train_method(method, policy, init, eval_tasks, cfg, seed, progress)
            for key in out:
                out[key] += res[key]
            seconds[method] = res["seconds"]["rl"]
            seconds["eval"] += res["seconds"]["eval"]
    return {"seed": seed, **out, "premise": prem, "confidence": conf_rows,
            "cosft_losses": [{"seed": seed, "step": i + 1, "loss": float(v)} for i, v in enumerate(losses)],
            "seconds": seconds}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed; data frames ``evals`` (seed, method, iteration,
    temperature, success, cost_per_step, steps_per_episode, level_routine, level_recall,
    level_plan, level_hard), ``levels`` (level distribution per stage type), ``curves`` (training
    statistics per iteration), ``expansion`` (CoPO's level-head probabilities vs w / sum(w) at
    expanded states), ``premise`` (one row per seed), ``confidence`` (c and c_hat per stage type and
    level), ``cosft_losses`` and ``seconds`` (per phase)."""
    runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    frames = {key: pd.DataFrame([row for run in runs for row in run[key]])
              for key in ("evals", "levels", "curves", "expansion", "confidence", "cosft_losses")}
    frames["premise"] = pd.DataFrame([run["premise"] for run in runs])
    frames["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return frames


def _final_eval(evals: pd.DataFrame, seed: int, method: str, temperature: float = 0.4):
    sel = evals[(evals["seed"] == seed) & (evals["method"] == method)
                & np.isclose(evals["temperature"], temperature)] if len(evals) else evals
    if not len(sel):
        return None
    return sel.loc[sel["iteration"].idxmax()]


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``: c1a / c1b from the premise
    check; c2a = CoPO cost per step / fixed-level-4 cost per step; c2b = (CoPO - fixed level 4)
    success in points; c3 = CoPO mean level at recall + plan steps minus at routine steps; c4 =
    (CoPO - GRPO) success in points; m1 = (CoPO - GRPO from scratch) in points. All at temperature
    0.4, final evaluation; nan where a needed method (or the premise row) is missing."""
    nan = float("nan")
    evals = results["evals"]
    prem = results["premise"].set_index("seed") if len(results.get("premise", [])) else None
    values = {}
    for seed in cfg.seeds:
        final = {m: _final_eval(evals, seed, m) for m in METHODS}

        def get(method, column):
            row = final[method]
            return float(row[column]) if row is not None else nan

        def premise_value(key):
            return float(prem.loc[seed, key]) if prem is not None and seed in prem.index else nan

        cost_l4 = get("fixed_l4", "cost_per_step")
        values[seed] = {
            "c1a_premise_hard_steps": premise_value("c1a"),
            "c1b_premise_routine_steps": premise_value("c1b"),
            "c2a_cost_vs_always_think": get("copo", "cost_per_step") / cost_l4 if cost_l4 == cost_l4 else nan,
            "c2b_success_vs_always_think": 100.0 * (get("copo", "success") - get("fixed_l4", "success")),
            "c3_depth_tracks_difficulty": get("copo", "level_hard") - get("copo", "level_routine"),
            "c4_copo_vs_grpo": 100.0 * (get("copo", "success") - get("grpo", "success")),
            "m1_copo_vs_grpo_from_scratch": 100.0 * (get("copo", "success") - get("grpo_scratch", "success")),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}


_SWEEP_KEYS = {"rl_lr", "kl_coef", "temperature", "variant", "iterations"}


def regime_sweep(cfg, seed: int, settings: list[dict], progress=None, threads: int = 1) -> pd.DataFrame:
    """Exploratory search (not judged) for a regime where CoPO's direction holds: for each settings
    dict (keys among ``rl_lr``, ``kl_coef``, ``temperature`` (the evaluation temperature),
    ``variant`` ("noisy" or "strong") and ``iterations``) run CoSFT, then ``copo`` and ``grpo`` on
    one seed with ``cfg``'s other settings, and return the final evaluation rows (``setting``
    index, the settings, method, temperature, success, cost per step, mean levels) including the
    CoSFT policy's."""
    rows = []
    for i, setting in enumerate(settings):
        unknown = set(setting) - _SWEEP_KEYS
        if unknown:
            raise ValueError(f"unknown sweep keys {sorted(unknown)}; valid: {sorted(_SWEEP_KEYS)}")
        run_cfg = copy.copy(cfg)
        for key, value in setting.items():
            if key == "temperature":
                run_cfg.eval_temperatures = [float(value)]
            else:
                setattr(run_cfg, key, value)
        run_cfg.methods = ["cosft", "copo", "grpo"]
        run_cfg.seeds = [seed]
        run_cfg.n_premise_episodes = 8
        run_cfg.eval_every = run_cfg.iterations
        out = run_seed(run_cfg, seed, progress, threads)
        ev = pd.DataFrame(out["evals"])
        final = ev[ev["iteration"] == ev.groupby("method")["iteration"].transform("max")]
        label = {"setting": i, "rl_lr": run_cfg.rl_lr, "kl_coef": run_cfg.kl_coef, "variant": run_cfg.variant,
                 "iterations": run_cfg.iterations}
        rows += [{**label, **row} for row in final.to_dict("records")]
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# 8. Theory helpers
# --------------------------------------------------------------------------------------------


def _minmax(c: np.ndarray) -> np.ndarray:
    """Step 6: min-max normalisation over the last axis; 0.5 everywhere when the range is <= 1e-6."""
    lo, hi = c.min(axis=-1, keepdims=True), c.max(axis=-1, keepdims=True)
    span = hi - lo
    flat = span <= 1e-6
    return np.where(flat, 0.5, (c - lo) / np.where(flat, 1.0, span))


def copo_weights(confidences, k: float = 2.0) -> np.ndarray:
    """Steps 5-7: CoPO's level weights from the action confidences of the four variants (last
    axis): clip c to [1e-6, 1], min-max normalise (all 0.5 when the range is <= 1e-6), then
    w_l = exp(k c_hat_l) / mean_l' exp(k c_hat_l'). Weights have mean 1; whenever the range
    exceeds 1e-6 the max/min ratio is exactly e^k."""
    c = np.clip(np.asarray(confidences, dtype=np.float64), 1e-6, 1.0)
    e = np.exp(k * _minmax(c))
    return e / e.mean(axis=-1, keepdims=True)


def weight_bounds(k: float = 2.0) -> tuple[float, float]:
    """The range of a CoPO weight when the confidence range exceeds 1e-6: the smallest weight is
    reached with three variants at c_hat = 1 and one at 0, the largest with one at 1 and three at 0:
    (4 / (1 + 3 e^k), 4 e^k / (3 + e^k)); (0.17, 2.85) for k = 2."""
    ek = float(np.exp(k))
    return 4.0 / (1.0 + 3.0 * ek), 4.0 * ek / (3.0 + ek)


def level_fixed_point(w) -> np.ndarray:
    """The level distribution at which the expected CoPO update A (w - sum(w) pi) vanishes:
    pi = w / sum(w) (last axis)."""
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum(axis=-1, keepdims=True)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def iterate_level_update(c_profile, k: float = 2.0, lr: float = 0.1, iters: int = 200, temperature: float = 1.0,
                         noise_sd: float = 0.0, seed: int = 0) -> np.ndarray:
    """The expected CoPO update of one state's four level logits theta (start 0, uniform), with
    A = 1: theta += lr (w - sum(w) pi), pi = softmax(theta) the training (temperature-1) policy and
    w = :func:`copo_weights` of confidences redrawn every iteration as ``c_profile`` + N(0,
    ``noise_sd``^2) (e.g. routine-like: near-equal c with noise; plan-like: one dominant c).
    Returns pi at the decoding ``temperature``, softmax(theta / T), for iterations 0..iters,
    (iters + 1, 4). Without noise pi (T = 1) converges to :func:`level_fixed_point` of w."""
    rng = np.random.default_rng(seed)
    c_profile = np.asarray(c_profile, dtype=np.float64)
    theta = np.zeros(N_LEVELS)
    out = [_softmax(theta / temperature)]
    for _ in range(iters):
        c = c_profile + noise_sd * rng.standard_normal(N_LEVELS) if noise_sd > 0 else c_profile
        w = copo_weights(c, k)
        theta = theta + lr * (w - w.sum() * _softmax(theta))
        out.append(_softmax(theta / temperature))
    return np.array(out)


def grpo_vs_copo_credit_example(pi_hard=(0.25, 0.25, 0.25, 0.25), pi_routine=(0.25, 0.25, 0.25, 0.25),
                                c_hard=(0.25, 0.25, 0.3, 0.95), c_routine=(0.95, 0.9, 0.9, 0.88), k: float = 2.0,
                                n_steps: int = 12) -> pd.DataFrame:
    """Expected gradient on one state's level logits, GRPO vs CoPO, in an episode of ``n_steps``
    steps with one hard step (definition of the example).

    The episode succeeds iff level 4 is chosen at the hard step (the other ``n_steps`` - 1 routine
    steps always succeed and their levels do not matter). Large-group limit: the success rate is
    p = pi_hard[4], the advantages are A+ = (1 - p) / sigma and A- = -p / sigma with
    sigma = sqrt(p (1 - p)), shared by every step of the episode. Per step type the expected
    update on the level logits is sum over the sampled level l of pi_l A(l) (e_l - pi):

    * GRPO: hard step: pi_4 A+ (e_4 - pi) + sum_{l<4} pi_l A- (e_l - pi) = pi_4 (e_4 - pi) / sigma,
      the true gradient of the success rate; routine steps: 0 (the level does not affect success;
      only sampling noise moves them).
    * CoPO: a successful episode's step is replaced by its four variants with w_l A+, so the
      success term becomes pi_4 A+ (w - sum(w) pi) with w = :func:`copo_weights` of the step's
      confidences (``c_hard`` / ``c_routine``); failures are as in GRPO. At routine steps this is
      p A+ (w - 4 pi), non-zero: CoPO moves routine levels towards w / sum(w).

    Returns rows (method, step: "hard" / "routine", level 1-4, grad, plus the per-episode total
    ``grad_episode`` = grad times the number of such steps)."""
    pi_h, pi_r = np.asarray(pi_hard, float), np.asarray(pi_routine, float)
    p = pi_h[3]
    sigma = np.sqrt(p * (1 - p))
    a_plus, a_minus = (1 - p) / sigma, -p / sigma
    eye = np.eye(N_LEVELS)
    w_h, w_r = copo_weights(c_hard, k), copo_weights(c_routine, k)
    fail_h = sum(pi_h[j] * a_minus * (eye[j] - pi_h) for j in range(3))
    grads = {
        ("grpo", "hard"): p * a_plus * (eye[3] - pi_h) + fail_h,
        ("grpo", "routine"): np.zeros(N_LEVELS),
        ("copo", "hard"): p * a_plus * (w_h - w_h.sum() * pi_h) + fail_h,
        ("copo", "routine"): p * a_plus * (w_r - w_r.sum() * pi_r),
    }
    rows = []
    for (method, step), g in grads.items():
        count = 1 if step == "hard" else n_steps - 1
        rows += [{"method": method, "step": step, "level": j + 1, "grad": float(g[j]),
                  "grad_episode": float(count * g[j])} for j in range(N_LEVELS)]
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# 9. Exercise graders
# --------------------------------------------------------------------------------------------


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def check_copo_weights(fn) -> None:
    """Grade an exercise answer ``fn(confidences)`` -> weights, for an (n, 4) array of action
    confidences: clip to [1e-6, 1], min-max normalise each row (all 0.5 when the row's range is
    <= 1e-6), w = exp(2 c_hat) / row mean of exp(2 c_hat)."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(7)
    cases = [
        (np.array([[0.9, 0.5, 0.5, 0.1]]),),
        (np.array([[0.25, 0.25, 0.25, 0.25], [0.3, 0.3, 0.3, 0.3 + 1e-8]]),),
        (np.array([[0.0, 0.0, 0.2, 0.4], [1.5, 0.2, 0.1, 0.3]]),),
        (rng.random((6, 4)),),
        (np.array([[0.97, 0.96, 0.95, 0.955]]),),
    ]
    grade(lambda c: _as_numpy(fn(c)), copo_weights, cases, name="copo_weights")


def check_level_fixed_point(fn) -> None:
    """Grade an exercise answer ``fn(w)`` -> the level distribution where the expected CoPO update
    A (w - sum(w) pi) vanishes, for a weight vector or an (n, 4) array of them (any positive
    weights, not only mean-1 ones): w / sum(w) over the last axis."""
    from replib.core.exercises import grade

    cases = [(np.ones(4),), (np.array([1.0, 2.0, 3.0, 4.0]),), (copo_weights(np.array([0.2, 0.3, 0.4, 0.9])),),
             (0.5 + np.random.default_rng(3).random((5, 4)),)]
    grade(lambda w: _as_numpy(fn(w)), level_fixed_point, cases, name="level_fixed_point")
