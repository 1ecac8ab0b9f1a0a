"""PrefixRL: on-policy RL on hard problems, started from prefixes of correct off-policy traces, at
CPU scale.

Paper: Setlur, Wang, Cohen, Rashidinejad, Xie, "Reuse your FLOPs: Scaling RL on Hard Problems by
Conditioning on Very Off-Policy Prefixes" (ICML 2026, arXiv 2601.18795). No official code; only the
abstract and third-party summaries could be read (digest ``/work/shared/papers/prefixrl.md``). The
loop: take a correct trace y^x of problem x, build the prefixed problem x + y^x_{1:h}, run
on-policy RL on the *completion only* (the prefix is part of the prompt: no gradient on it, no
importance weights), evaluate on the unprefixed problems. Objective (book notation)

    J_pre(pi) = E_x E_{h ~ rho} E_{y' ~ pi(. | x, y^x_{1:h})} r(x, y^x_{1:h} + y').

Contents (torch for the model, numpy for the theory):

1. The chain task (the digest's "modular chains" with another step rule, see the fidelity notes):
   :data:`BOS`, :data:`SEP`, :data:`VOCAB`, :data:`PROMPT_LEN`, :data:`STEP_TABLE`, :func:`step_rule`,
   :func:`all_problems`, :func:`split_problems`,
   :func:`correct_traces`, :func:`noisy_traces`, :func:`prompts`, :func:`sequences`,
   :func:`noise_floor`.
2. The base model: :func:`train_base` (the shared tiny GPT-2 of :mod:`replib.models.causal_lm`,
   trained on noisy traces) and :func:`sft` (imitation of the correct traces, the SFT-then-RL
   baseline).
3. Exact evaluation (no sampling noise): :func:`correct_step_probs`, :func:`pass_at_1`,
   :func:`step_accuracy`, :func:`prefix_curve`, :func:`trace_cost_tokens`.
4. The RL loop (digest "What to implement"): :func:`prefixed_prompts`, :func:`rollouts`,
   :func:`rl_step` (group advantages and the policy-gradient loss of :mod:`replib.rl`),
   :func:`draw_prefix_len`, :func:`train_method` (PrefixRL, standard GRPO, SFT-then-RL).
5. The experiment: :data:`EXPERIMENT_PROFILES`, :data:`METHODS`, :func:`run_seed`,
   :func:`run_experiment`, :func:`claim_values`.
6. Theory helpers (the theory notebook's "combination lock"): :func:`group_signal_probability`,
   :func:`lock_success`, :func:`softmax_pg_lock`, :func:`tree_consistency`,
   :func:`prefix_only_pg`, :func:`back_generalization_check`, :func:`consistency_check`.
7. Exercise graders: :func:`check_group_advantages`, :func:`check_group_signal_probability`.

Conventions. A problem is x = (v0, d0, d1), three digits; there are exactly 1000. The correct
response is y_t = f(y_{t-1}, d_{t mod 2}) for t = 1..L with y_0 = v0 (so y_1 uses d1, y_2 uses d0,
...), where f is a fixed operation table on the digits (:data:`STEP_TABLE`). Token ids: digits 0-9 are ids 0-9, ``BOS`` = 10, ``SEP`` = 11. A sequence is
``[BOS, v0, d0, d1, SEP, y_1 .. y_L]`` (prompt length 5, no end token: every response has exactly L
tokens). Reward 1 iff all L response tokens are correct (a non-digit token is simply wrong).
Positions t are 1-based in the text and in the data frames (``position`` 1..L), 0-based in arrays.

Fidelity notes (the paper's RL algorithm, prefix schedule, models and data are unknown; everything
below is the digest's proposal or ours):

* The step rule. The digest proposes f(a, d) = (a + d) mod 10. Before any claim was measured, the
  base model could not learn it: the tiny GPT-2 stayed at exactly ln 10 nats per step (uniform
  guessing) for 2,500 steps, at larger width and learning rate too, and at ln 5 even without noise.
  Modular addition is a parity-like target: given either operand alone the next digit is uniform,
  so gradient descent sees no partial signal and sits on a long plateau. We use instead a fixed
  random operation table (``STEP_TABLE``, drawn once from seed 2026), which keeps what the chapter
  needs (one per-step rule shared by all positions, exactly one correct trace per problem,
  per-step accuracy set by the noise) and is learnable: 600 steps reach 0.007 nats above the
  noise floor with per-step accuracy about 0.6.

* Off-policy traces are *oracle* traces (the generator program; the digest's "starved" regime, a
  different "model family"). Their cost is reported analytically, as if they were found by
  rejection sampling the base model: L / p_x expected sampled tokens for problem x with exact
  pass@1 p_x (:func:`trace_cost_tokens`); it is *not* added to the RL token counts.
* The base model is the tiny GPT-2 pretrained on noisy traces of all 1000 problems (each step
  replaced by a uniformly random other digit with probability eps, later steps continuing from the
  corrupted value), so its ideal conditional is p(correct next | history) = 1 - eps and its pass@1
  about (1 - eps)^L. The loss is on response tokens only. The GPT-2 config's pad/eos ids (SEP/BOS)
  are never used: training and scoring need neither, and :func:`rollouts` calls the sampler with
  ``eos_id=-1`` (no token equals it), so every completion has exactly L - h tokens.
* RL update: one on-policy Adam step per batch (lr ``rl_lr``, no schedule, no KL, no clipping:
  with a single update on fresh samples the clipped surrogate has the REINFORCE gradient), loss
  -mean(A * log pi(completion | prefixed prompt)) over the B*G sequences, A the group-relative
  advantage. Adam is stepped even when every advantage is 0 (standard practice); with no earlier
  signal this leaves the weights unchanged, after signal Adam's momentum still moves them.
* PrefixRL draws one h ~ U{floor(L/2), ..., L-2} per step (digest proposal) and trains on prefixed
  problems only (no unprefixed problems mixed in: the back-generalization setting). GRPO uses
  h = 0. SFT-then-RL first runs ``sft_epochs`` full-batch steps of :func:`train_lm` (AdamW, warmup 1,
  cosine decay) on the correct traces of all training problems, then the same GRPO. The digest
  proposed 20 steps at lr 1e-3; that leaves SFT far from converged (per-step accuracy 0.78 on the
  traces it imitates), so after the first book run we train it to convergence instead: 100 steps at
  lr 3e-3 (trace loss 0.02, per-step accuracy 0.97 on held-out problems; chosen from SFT's own loss
  and accuracy). The comparison with SFT-then-RL is not a judged claim.
* Streams: every method of a seed starts from a deep copy of the same base model and sees the same
  problem stream (B distinct training problems per step, numpy generator seeded by the seed only);
  the rollout sampler (torch generator) and PrefixRL's h stream are seeded per (seed, method).
  Each seed uses its own train/held-out split (:func:`split_problems` with the seed).
* Evaluation is exact: with a unique correct response, pass@1 = prod_t p(y_t | x, y_<t) under
  teacher forcing (one forward pass), averaged over problems. Evaluations at step 0, every
  ``eval_every`` steps and at the end; "tokens" counts the completion tokens sampled during RL.
* Threads: :func:`run_seed` runs on one thread with torch's deterministic algorithms
  (:func:`replib.core.runtime.compute_threads`), so a seed gives the same numbers on every run.
* Claim conventions (:func:`claim_values`): m1 is nan when SFT-then-RL's final pass@1 is 0; m2 is
  nan when either method never reaches the level, or when either already reaches it at step 0 (a
  speed is undefined there); claims needing a method missing from ``methods`` are nan.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, seed_everything
from replib.models.causal_lm import sample, sequence_logprob, tiny_gpt, token_logprobs, train_lm
from replib.rl import group_advantages, nonzero_advantage_share, policy_gradient_loss

__all__ = [
    "BOS",
    "SEP",
    "VOCAB",
    "PROMPT_LEN",
    "STEP_TABLE",
    "step_rule",
    "N_PROBLEMS",
    "NO_EOS",
    "METHODS",
    "EXPERIMENT_PROFILES",
    "all_problems",
    "split_problems",
    "correct_traces",
    "noisy_traces",
    "prompts",
    "sequences",
    "noise_floor",
    "train_base",
    "sft",
    "correct_step_probs",
    "pass_at_1",
    "step_accuracy",
    "prefix_curve",
    "trace_cost_tokens",
    "prefixed_prompts",
    "rollouts",
    "rl_step",
    "draw_prefix_len",
    "train_method",
    "run_seed",
    "run_experiment",
    "claim_values",
    "group_signal_probability",
    "lock_success",
    "softmax_pg_lock",
    "tree_consistency",
    "prefix_only_pg",
    "back_generalization_check",
    "consistency_check",
    "check_group_advantages",
    "check_group_signal_probability",
]

# --------------------------------------------------------------------------------------------
# 1. The chain task
# --------------------------------------------------------------------------------------------

BOS, SEP = 10, 11
VOCAB = 12
PROMPT_LEN = 5
N_PROBLEMS = 1000
STEP_TABLE = np.random.default_rng(2026).integers(0, 10, size=(10, 10))  # f(a, d) = STEP_TABLE[a, d]
NO_EOS = -1  # passed to the sampler as eos_id: no token equals it, so completions never stop early


def all_problems() -> np.ndarray:
    """All 1000 problems x = (v0, d0, d1) in lexicographic order, (1000, 3) int64."""
    return np.stack(np.meshgrid(np.arange(10), np.arange(10), np.arange(10), indexing="ij"),
                    axis=-1).reshape(-1, 3).astype(np.int64)


def split_problems(n_train: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A random split of :func:`all_problems` into ``n_train`` training problems and the remaining
    1000 - n_train held-out ones (disjoint, together complete; each part in lexicographic order)."""
    order = np.random.default_rng(seed).permutation(N_PROBLEMS)
    problems = all_problems()
    return problems[np.sort(order[:n_train])], problems[np.sort(order[n_train:])]


def step_rule(previous, digit):
    """One step of the chain, y_t = f(y_{t-1}, d_{t mod 2}), with f the fixed table
    :data:`STEP_TABLE` (elementwise on arrays)."""
    return STEP_TABLE[previous, digit]


def correct_traces(problems, L: int) -> np.ndarray:
    """The unique correct response of each problem, (n, L): y_t = f(y_{t-1}, d_{t mod 2}), y_0 = v0."""
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    out = np.empty((len(problems), L), dtype=np.int64)
    y = problems[:, 0].copy()
    for t in range(1, L + 1):
        y = step_rule(y, problems[:, 1 + t % 2])
        out[:, t - 1] = y
    return out


def noisy_traces(problems, L: int, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Pretraining responses, (n, L): each step applies the rule to the previous (possibly corrupted)
    value and, with probability ``eps``, is replaced by a uniformly random *other* digit. Given the
    history, the next digit is therefore correct with probability 1 - eps."""
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    n = len(problems)
    out = np.empty((n, L), dtype=np.int64)
    y = problems[:, 0].copy()
    for t in range(1, L + 1):
        rule = step_rule(y, problems[:, 1 + t % 2])
        corrupt = rng.random(n) < eps
        y = np.where(corrupt, (rule + rng.integers(1, 10, size=n)) % 10, rule)
        out[:, t - 1] = y
    return out


def prompts(problems) -> np.ndarray:
    """``[BOS, v0, d0, d1, SEP]`` per problem, (n, 5) int64."""
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    n = len(problems)
    return np.concatenate([np.full((n, 1), BOS), problems, np.full((n, 1), SEP)], axis=1).astype(np.int64)


def sequences(problems, responses) -> np.ndarray:
    """Prompt followed by response, (n, 5 + L) int64."""
    return np.concatenate([prompts(problems), np.asarray(responses, dtype=np.int64)], axis=1)


def noise_floor(eps: float) -> float:
    """Per-step cross-entropy (nats) of the noisy-trace generator given the history, the lowest
    loss the base model can reach: -(1 - eps) log(1 - eps) - eps log(eps / 9)."""
    terms = [(1 - eps) * np.log(1 - eps) if eps < 1 else 0.0, eps * np.log(eps / 9) if eps > 0 else 0.0]
    return float(-sum(terms))


# --------------------------------------------------------------------------------------------
# 2. Base model and SFT
# --------------------------------------------------------------------------------------------


def _response_mask(n: int, L: int) -> np.ndarray:
    mask = np.zeros((n, PROMPT_LEN + L), dtype=bool)
    mask[:, PROMPT_LEN:] = True
    return mask


def train_base(cfg, seed: int, progress=None):
    """The base model: the tiny GPT-2 (vocab 12, ``n_layer``/``n_embd``/``n_head`` of ``cfg``, 32
    positions) trained with :func:`train_lm` (AdamW, lr ``base_lr``, warmup 50, cosine) for
    ``base_steps`` steps on batches of ``base_batch`` fresh noisy traces of problems drawn uniformly
    from all 1000 (pretraining-like), cross-entropy on response tokens only. Returns
    ``(model, losses)``."""
    model = tiny_gpt(VOCAB, n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head, n_positions=32,
                     pad_id=SEP, eos_id=BOS, seed=seed)
    problems = all_problems()

    def draw_batch(rng):
        batch = problems[rng.integers(0, N_PROBLEMS, size=cfg.base_batch)]
        return sequences(batch, noisy_traces(batch, cfg.L, cfg.eps, rng)), _response_mask(len(batch), cfg.L)

    losses = train_lm(model, draw_batch, steps=cfg.base_steps, lr=cfg.base_lr, seed=seed, progress=progress)
    return model, losses


def sft(model, problems, L: int, *, epochs: int, lr: float, seed: int = 0) -> np.ndarray:
    """Supervised fine-tuning on the correct traces of ``problems`` (in place): ``epochs``
    full-batch steps of :func:`train_lm` (AdamW, warmup 1, cosine decay), loss on response tokens.
    Returns the losses."""
    ids = sequences(problems, correct_traces(problems, L))
    mask = _response_mask(len(ids), L)
    return train_lm(model, lambda rng: (ids, mask), steps=epochs, lr=lr, warmup=1, seed=seed)


# --------------------------------------------------------------------------------------------
# 3. Exact evaluation
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def correct_step_probs(model, problems, L: int, chunk: int = 2048) -> np.ndarray:
    """p(y_t = correct | x, correct y_<t) for t = 1..L under teacher forcing, (n, L) float64."""
    ids = torch.as_tensor(sequences(problems, correct_traces(problems, L)))
    parts = [token_logprobs(model, block)[:, PROMPT_LEN - 1:] for block in ids.split(chunk)]
    return np.exp(torch.cat(parts).double().numpy())


def pass_at_1(model, problems, L: int, prefix_len: int = 0) -> np.ndarray:
    """Exact per-problem probability of completing correctly from the correct prefix of length h =
    ``prefix_len``: prod_{t > h} p(y_t | x, y_<t). With h = 0 it is the no-prefix pass@1 (the only
    response with reward 1 is the correct one). (n,) float64."""
    return correct_step_probs(model, problems, L)[:, prefix_len:].prod(axis=1)


def step_accuracy(model, problems, L: int) -> np.ndarray:
    """Mean over problems of p(correct y_t | correct history), per position t = 1..L, (L,): the
    back-generalization map."""
    return correct_step_probs(model, problems, L).mean(axis=0)


def _prefix_curve_from_probs(probs: np.ndarray) -> np.ndarray:
    return np.array([probs[:, h:].prod(axis=1).mean() for h in range(probs.shape[1])])


def prefix_curve(model, problems, L: int) -> np.ndarray:
    """Mean pass@1 from the correct prefix of length h, for h = 0..L-1, (L,): the difficulty
    ladder."""
    return _prefix_curve_from_probs(correct_step_probs(model, problems, L))


def trace_cost_tokens(base_pass_per_problem, L: int) -> float:
    """Expected sampled tokens to find one correct trace per problem by rejection sampling the base
    model: sum_x L / p_x (geometric number of L-token samples; inf if some p_x = 0)."""
    p = np.asarray(base_pass_per_problem, dtype=float)
    with np.errstate(divide="ignore"):
        return float(np.sum(L / p))


# --------------------------------------------------------------------------------------------
# 4. The RL loop
# --------------------------------------------------------------------------------------------


def prefixed_prompts(problems, prefix_len: int, L: int) -> np.ndarray:
    """The prefixed problems x + y^x_{1:h}: prompt followed by the first h correct steps,
    (n, 5 + h)."""
    return sequences(problems, correct_traces(problems, L)[:, :prefix_len])


@torch.no_grad()
def rollouts(model, problems, prefix_len: int, G: int, L: int, generator: torch.Generator | None = None):
    """G completions (temperature 1) of each prefixed problem (algorithm step 3, sampling).

    Returns ``ids`` (n*G, 5 + L) (rows of one problem adjacent), the completion mask (n*G, 5 + L),
    True exactly at the L - h sampled positions 5 + h .. 5 + L - 1, and the rewards (n, G): 1 iff
    every sampled token equals the correct step (the prefix is correct by construction)."""
    if not 0 <= prefix_len < L:
        raise ValueError(f"prefix_len must be in 0..{L - 1}, got {prefix_len}")
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    n = len(problems)
    truth = torch.as_tensor(correct_traces(problems, L))
    start = torch.as_tensor(prefixed_prompts(problems, prefix_len, L)).repeat_interleave(G, dim=0)
    completions, _ = sample(model, start, L - prefix_len, eos_id=NO_EOS, pad_id=SEP, temperature=1.0,
                            generator=generator)
    ids = torch.cat([start, completions], dim=1)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, PROMPT_LEN + prefix_len:] = True
    target = truth[:, prefix_len:].repeat_interleave(G, dim=0)
    rewards = (completions == target).all(dim=1).float().reshape(n, G)
    return ids, mask, rewards


def rl_step(model, optimiser, problems, prefix_len: int, cfg, generator: torch.Generator | None = None) -> dict:
    """One on-policy update (algorithm step 3): ``group_size`` rollouts per prefixed problem, group
    advantages A = (r - mean_g) / (std_g + 1e-6), loss -mean(A log pi(completion | x, y^x_{1:h}))
    (gradient only through the sampled tokens; prefix = prompt, no importance weights), one
    optimiser step. Returns ``share_nonzero``, ``mean_reward``, ``sampled_tokens`` = n G (L - h) and
    ``loss``."""
    ids, mask, rewards = rollouts(model, problems, prefix_len, cfg.group_size, cfg.L, generator)
    advantages = group_advantages(rewards).reshape(-1)
    loss = policy_gradient_loss(sequence_logprob(model, ids, mask), advantages)
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    optimiser.step()
    return {
        "share_nonzero": nonzero_advantage_share(rewards),
        "mean_reward": float(rewards.mean()),
        "sampled_tokens": int(rewards.numel() * (cfg.L - prefix_len)),
        "loss": float(loss.detach()),
    }


def draw_prefix_len(method: str, L: int, rng: np.random.Generator) -> int:
    """h for one RL step: PrefixRL draws h ~ U{floor(L/2), ..., L-2} (digest proposal); GRPO and
    SFT-then-RL use h = 0."""
    if method == "prefixrl":
        return int(rng.integers(L // 2, L - 1))
    return 0


METHODS = ("prefixrl", "grpo", "sft_rl")
_METHOD_INDEX = {m: i for i, m in enumerate(METHODS)}


def _eval_steps(cfg) -> set[int]:
    return set(range(0, cfg.rl_steps + 1, max(1, cfg.eval_every))) | {cfg.rl_steps}


def train_method(base, method: str, train, heldout, cfg, seed: int, progress=None) -> dict:
    """Run one method from a deep copy of ``base`` (the base is not changed).

    Every step draws ``batch_problems`` distinct training problems (the stream depends on the seed
    only, so all methods see the same problems), picks h with :func:`draw_prefix_len` and calls
    :func:`rl_step`. Evaluations (exact no-prefix pass@1, held-out and train) at step 0, every
    ``eval_every`` steps and at the end. Returns the model, the eval rows, the per-step rows, the
    SFT losses and the held-out step probabilities right after SFT (SFT-then-RL only, else None)
    and the seconds spent in SFT, RL and evaluation."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    model = copy.deepcopy(base)
    seconds = {"sft": 0.0, "rl": 0.0, "eval": 0.0}
    sft_losses = sft_probs = None
    if method == "sft_rl":
        start = time.perf_counter()
        sft_losses = sft(model, train, cfg.L, epochs=cfg.sft_epochs, lr=cfg.sft_lr, seed=seed)
        seconds["sft"] = time.perf_counter() - start
        start = time.perf_counter()
        sft_probs = correct_step_probs(model, heldout, cfg.L)
        seconds["eval"] += time.perf_counter() - start
    problem_rng = np.random.default_rng([seed, 7])
    prefix_rng = np.random.default_rng([seed, 8, _METHOD_INDEX[method]])
    generator = torch.Generator().manual_seed(1000 * seed + _METHOD_INDEX[method])
    optimiser = torch.optim.Adam(model.parameters(), lr=cfg.rl_lr)
    evals, steps, tokens = [], [], 0
    eval_at = _eval_steps(cfg)

    def evaluate(step):
        start = time.perf_counter()
        evals.append({"seed": seed, "method": method, "step": step, "tokens": tokens,
                      "heldout_pass": float(pass_at_1(model, heldout, cfg.L).mean()),
                      "train_pass": float(pass_at_1(model, train, cfg.L).mean())})
        seconds["eval"] += time.perf_counter() - start

    evaluate(0)
    for step in (progress(range(1, cfg.rl_steps + 1)) if progress else range(1, cfg.rl_steps + 1)):
        batch = train[problem_rng.choice(len(train), size=min(cfg.batch_problems, len(train)), replace=False)]
        h = draw_prefix_len(method, cfg.L, prefix_rng)
        start = time.perf_counter()
        stats = rl_step(model, optimiser, batch, h, cfg, generator)
        seconds["rl"] += time.perf_counter() - start
        tokens += stats["sampled_tokens"]
        steps.append({"seed": seed, "method": method, "step": step, "prefix_len": h, "tokens": tokens, **stats})
        if step in eval_at:
            evaluate(step)
    return {"model": model, "evals": evals, "steps": steps, "sft_losses": sft_losses,
            "sft_heldout_probs": sft_probs, "seconds": seconds}


# --------------------------------------------------------------------------------------------
# 5. The experiment
# --------------------------------------------------------------------------------------------

_COMMON = dict(eps=0.4, n_layer=2, n_embd=32, n_head=4, base_batch=128, base_lr=3e-3, n_train=256,
               batch_problems=16, group_size=8, rl_lr=1e-3, sft_epochs=100, sft_lr=3e-3,
               methods=["prefixrl", "grpo", "sft_rl"])
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], L=8, base_steps=60, rl_steps=5, eval_every=5, **_COMMON),
    "book": dict(seeds=[0, 1, 2], L=20, base_steps=600, rl_steps=100, eval_every=20, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], L=20, base_steps=600, rl_steps=300, eval_every=10, **_COMMON),
}


def _profile_rows(seed, model_name, probs):
    rows = [{"seed": seed, "model": model_name, "position": t + 1, "step_accuracy": float(a)}
            for t, a in enumerate(probs.mean(axis=0))]
    curve = [{"seed": seed, "model": model_name, "prefix_len": h, "pass": float(p)}
             for h, p in enumerate(_prefix_curve_from_probs(probs))]
    return rows, curve


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: split, base model, every method of ``cfg.methods``; plain data only (no models).

    Keys: ``base`` (dict: exact no-prefix pass@1 held-out / train, trace cost in tokens, final base
    loss (mean of the last 10 steps), the noise floor and, with SFT-then-RL, the final SFT loss and
    the pass@1 right after SFT), ``evals`` and ``steps`` (lists of row
    dicts, see :func:`train_method`), ``profiles`` (step accuracy per position on held-out problems;
    model = "base", "sft" (after SFT, before RL) or a method after RL), ``prefix_curves`` (held-out
    pass@1 from a correct prefix of length h, same models), ``losses`` (base pretraining and SFT
    losses per step) and ``seconds`` (per phase: base, sft, each method's RL, eval)."""
    with compute_threads(threads):
        seed_everything(seed)
        train, heldout = split_problems(cfg.n_train, seed)
        start = time.perf_counter()
        base, base_losses = train_base(cfg, seed, progress)
        seconds = {"base": time.perf_counter() - start, "sft": 0.0, "eval": 0.0}
        start = time.perf_counter()
        held_probs = correct_step_probs(base, heldout, cfg.L)
        train_probs = correct_step_probs(base, train, cfg.L)
        seconds["eval"] += time.perf_counter() - start
        base_stats = {
            "seed": seed,
            "heldout_pass": float(held_probs.prod(axis=1).mean()),
            "train_pass": float(train_probs.prod(axis=1).mean()),
            "trace_cost_tokens": trace_cost_tokens(train_probs.prod(axis=1), cfg.L),
            "final_base_loss": float(np.mean(base_losses[-10:])),
            "noise_floor": noise_floor(cfg.eps),
        }
        profiles, curves = _profile_rows(seed, "base", held_probs)
        losses = [{"seed": seed, "phase": "base", "step": i + 1, "loss": float(v)} for i, v in enumerate(base_losses)]
        evals, steps = [], []
        for method in cfg.methods:
            out = train_method(base, method, train, heldout, cfg, seed, progress)
            evals += out["evals"]
            steps += out["steps"]
            seconds[method] = out["seconds"]["rl"]
            seconds["sft"] += out["seconds"]["sft"]
            seconds["eval"] += out["seconds"]["eval"]
            if out["sft_losses"] is not None:
                losses += [{"seed": seed, "phase": "sft", "step": i + 1, "loss": float(v)}
                           for i, v in enumerate(out["sft_losses"])]
                base_stats["final_sft_loss"] = float(out["sft_losses"][-1])
                base_stats["sft_heldout_pass"] = out["evals"][0]["heldout_pass"]
                base_stats["sft_train_pass"] = out["evals"][0]["train_pass"]
                rows, curve = _profile_rows(seed, "sft", out["sft_heldout_probs"])
                profiles += rows
                curves += curve
            start = time.perf_counter()
            probs = correct_step_probs(out["model"], heldout, cfg.L)
            seconds["eval"] += time.perf_counter() - start
            rows, curve = _profile_rows(seed, method, probs)
            profiles += rows
            curves += curve
    return {"seed": seed, "base": base_stats, "evals": evals, "steps": steps, "profiles": profiles,
            "prefix_curves": curves, "losses": losses, "seconds": {"seed": seed, **seconds}}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed; the rows of all seeds as data frames ``base``, ``evals``,
    ``steps``, ``profiles``, ``prefix_curves``, ``losses``, ``seconds`` (and the raw ``runs``)."""
    runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    frames = {key: pd.DataFrame([r for run in runs for r in run[key]])
              for key in ("evals", "steps", "profiles", "prefix_curves", "losses")}
    frames["base"] = pd.DataFrame([run["base"] for run in runs])
    frames["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return {"runs": runs, **frames}


def _first_step_reaching(evals: pd.DataFrame, level: float) -> float:
    hit = evals.loc[evals["train_pass"] >= level, "step"]
    return float(hit.min()) if len(hit) else float("nan")


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml`` (nan where a needed method
    was not run; see the module docstring for the m1/m2 conventions)."""
    nan = float("nan")
    evals, steps, profiles = results["evals"], results["steps"], results["profiles"]
    base = results["base"].set_index("seed")
    values = {}
    for seed in cfg.seeds:
        ev = {m: g.sort_values("step") for m, g in evals[evals["seed"] == seed].groupby("method")}
        st = dict(list(steps[steps["seed"] == seed].groupby("method"))) if len(steps) else {}
        final = {m: g.iloc[-1] for m, g in ev.items()}

        def share(method):
            return float(st[method]["share_nonzero"].mean()) if method in st else nan

        def held(method):
            return float(final[method]["heldout_pass"]) if method in final else nan

        acc = profiles[(profiles["seed"] == seed) & (profiles["position"] <= cfg.L // 2)]
        base_acc = acc[acc["model"] == "base"].sort_values("position")["step_accuracy"].to_numpy()
        pre_acc = acc[acc["model"] == "prefixrl"].sort_values("position")["step_accuracy"].to_numpy()
        c3 = float(np.mean(pre_acc - base_acc)) if len(pre_acc) else nan

        m1 = nan
        if "prefixrl" in final and "sft_rl" in final and held("sft_rl") > 0:
            m1 = held("prefixrl") / held("sft_rl")
        m2 = nan
        if "prefixrl" in final and "sft_rl" in final:
            level = 0.5 * min(final["prefixrl"]["train_pass"], final["sft_rl"]["train_pass"])
            s_pre, s_sft = _first_step_reaching(ev["prefixrl"], level), _first_step_reaching(ev["sft_rl"], level)
            if s_pre > 0 and s_sft > 0:  # a method already at the level at step 0 has no speed to compare
                m2 = s_sft / s_pre
        values[seed] = {
            "c1a_signal_prefixrl": share("prefixrl"),
            "c1b_signal_grpo": share("grpo"),
            "c2a_progress": held("prefixrl"),
            "c2b_progress_vs_grpo": held("prefixrl") - held("grpo"),
            "c3_back_generalization": c3,
            "m1_final_ratio_vs_sft_rl": m1,
            "m2_speed_vs_sft_rl": m2,
            "m3_base_pass1": float(base.loc[seed, "heldout_pass"]),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}


# --------------------------------------------------------------------------------------------
# 6. Theory helpers
# --------------------------------------------------------------------------------------------


def group_signal_probability(p, G: int):
    """Probability that a group of G independent rollouts with success probability p has a
    non-zero group-relative advantage (neither all failures nor all successes):
    1 - (1 - p)^G - p^G."""
    p = np.asarray(p, dtype=float)
    return 1.0 - (1.0 - p) ** G - p**G


def lock_success(q, H: int, h):
    """Success probability on a combination lock of horizon H with per-step success q, starting
    from the correct prefix state of depth h: q^(H - h)."""
    return np.asarray(q, dtype=float) ** (H - np.asarray(h))


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def _lock_start_distribution(H: int, start: str) -> np.ndarray:
    mu = np.zeros(H)
    if start == "start":
        mu[0] = 1.0
    elif start == "resets":
        mu[:] = 1.0 / H
    elif start == "prefix_only":  # rho(0) = 0: resets to the prefix states 1..H-1 only
        mu[1:] = 1.0 / (H - 1)
    else:
        raise ValueError(f"start must be 'start', 'resets' or 'prefix_only', got {start!r}")
    return mu


def _lock_gradient(theta: np.ndarray, mu: np.ndarray):
    """Exact gradient of J = sum_i mu_i V(i), V(i) = prod_{j >= i} pi_j(correct), for tabular
    softmax logits theta (H, n) with action 0 correct: dJ/dtheta_s = (sum_{i <= s} mu_i V(i))
    (e_0 - pi_s). Returns the gradient, pi and V."""
    pi = _softmax(theta)
    values = np.cumprod(pi[::-1, 0])[::-1]
    weight = np.cumsum(mu * values)
    e0 = np.zeros(theta.shape[1])
    e0[0] = 1.0
    return weight[:, None] * (e0 - pi), pi, values


def softmax_pg_lock(H: int, n_actions: int = 4, start: str = "start", lr: float = 1.0,
                    max_iters: int = 100_000, target: float = 0.9) -> int:
    """Iterations of exact softmax policy gradient on the combination lock until the start state's
    value V(0) reaches ``target`` (``max_iters`` if never).

    States 0..H-1 along the lock, one correct action each (action 0); a wrong action ends the
    episode with reward 0, H correct actions give reward 1. Tabular softmax logits, zero at init
    (per-step success 1/n_actions). The objective is J = E_{s ~ mu} V(s) with mu = the start state
    only (``"start"``, standard RL) or uniform over the states 0..H-1 of the correct trace
    (``"resets"``, prefixes of every length incl. 0); plain gradient ascent with step ``lr``."""
    mu = _lock_start_distribution(H, start)
    theta = np.zeros((H, n_actions))
    for it in range(max_iters + 1):
        grad, _, values = _lock_gradient(theta, mu)
        if values[0] >= target:
            return it
        theta += lr * grad
    return max_iters


def _tree_children(node: int, n_actions: int) -> np.ndarray:
    return n_actions * node + 1 + np.arange(n_actions)


def tree_consistency(depth: int = 4, n_actions: int = 2, p_success: float = 0.25, n_trees: int = 20,
                     rhos: dict | None = None, seed: int = 0) -> pd.DataFrame:
    """Consistency of J_pre with J on random trees, by exhaustive search over deterministic policies.

    Each tree: complete ``n_actions``-ary tree of ``depth`` moves, leaf rewards Bernoulli(p_success)
    (at least one success). The correct trace y* is a path to a uniformly chosen successful leaf;
    s_h is its node at depth h. J(pi) = V^pi(root); J_pre(pi) = sum_h rho(h) V^pi(s_h). Per tree and
    rho: ``max_j_pre`` (1: every prefix state of a correct trace has optimal value 1), ``pi_star``
    (the policy that is optimal from every state maximises J_pre), ``share_optimal_for_j`` (share
    of the J_pre maximisers that are optimal for J: 1 whenever rho(0) > 0)."""
    rng = np.random.default_rng(seed)
    n_internal = (n_actions**depth - 1) // (n_actions - 1)
    n_nodes = (n_actions ** (depth + 1) - 1) // (n_actions - 1)
    if rhos is None:
        rhos = {"J (rho(0) = 1)": np.eye(depth)[0], "uniform": np.full(depth, 1.0 / depth),
                "deep, rho(0) = 0.1": np.r_[0.1, np.zeros(depth - 2), 0.9],
                "rho(0) = 0": np.r_[0.0, np.full(depth - 1, 1.0 / (depth - 1))]}
    policies = np.stack(np.meshgrid(*[np.arange(n_actions)] * n_internal, indexing="ij"), -1).reshape(-1, n_internal)
    rows = []
    for tree in range(n_trees):
        leaf_reward = (rng.random(n_nodes - n_internal) < p_success).astype(float)
        if not leaf_reward.any():
            leaf_reward[rng.integers(len(leaf_reward))] = 1.0
        values = np.zeros((len(policies), n_nodes))  # V^pi(node) for every policy
        values[:, n_internal:] = leaf_reward
        best = np.zeros(n_nodes)  # V*(node)
        best[n_internal:] = leaf_reward
        for node in range(n_internal - 1, -1, -1):
            kids = _tree_children(node, n_actions)
            values[:, node] = values[np.arange(len(policies)), kids[policies[:, node]]]
            best[node] = best[kids].max()
        star_actions = np.array([int(np.argmax(best[_tree_children(k, n_actions)])) for k in range(n_internal)])
        star = int(np.flatnonzero((policies == star_actions).all(axis=1))[0])
        leaf = n_internal + int(rng.choice(np.flatnonzero(leaf_reward)))
        path = [leaf]
        while path[-1] > 0:
            path.append((path[-1] - 1) // n_actions)
        prefix_states = path[::-1][:depth]  # s_0 = root .. s_{depth-1}
        j_optimal = values[:, 0] >= best[0] - 1e-12
        for name, rho in rhos.items():
            j_pre = values[:, prefix_states] @ np.asarray(rho, dtype=float)
            maximisers = j_pre >= j_pre.max() - 1e-12
            rows.append({"tree": tree, "rho": name, "rho0": float(rho[0]), "max_j_pre": float(j_pre.max()),
                         "pi_star": bool(maximisers[star]),
                         "share_optimal_for_j": float(j_optimal[maximisers].mean())})
    return pd.DataFrame(rows)


def prefix_only_pg(H: int = 6, n_actions: int = 4, shared: bool = False, lr: float = 1.0,
                   iters: int = 300) -> dict:
    """Exact policy gradient on the combination lock with rho(0) = 0 (training only from the prefix
    states 1..H-1 of the correct trace), tracking the *start* state.

    Logits at state s: theta_s (tabular, init 0) + w e_correct, with w one logit for "the correct
    action" shared by all states (a log-linear policy with a shared feature, the analogue of one
    rule applied at every step). ``shared=False`` freezes w = 0: the start state's gradient is
    mu_0 V(0) (e_0 - pi_0) = 0, so its policy never changes. ``shared=True`` trains w too
    (dJ/dw = sum_s dJ/dtheta_{s,0}), which raises the start state's success. Returns per iteration
    (0..iters) ``p_start`` = pi_0(correct), ``v_start`` = V(0) and ``v_prefix`` = J_pre."""
    mu = _lock_start_distribution(H, "prefix_only")
    theta = np.zeros((H, n_actions))
    w = 0.0
    p_start, v_start, v_prefix = [], [], []
    for _ in range(iters + 1):
        logits = theta.copy()
        logits[:, 0] += w
        grad, pi, values = _lock_gradient(logits, mu)
        p_start.append(pi[0, 0])
        v_start.append(values[0])
        v_prefix.append(float(mu @ values))
        theta += lr * grad
        if shared:
            w += lr * grad[:, 0].sum()
    return {"p_start": np.array(p_start), "v_start": np.array(v_start), "v_prefix": np.array(v_prefix)}


def back_generalization_check(H: int = 6, n_actions: int = 4, lr: float = 1.0, iters: int = 300) -> pd.DataFrame:
    """:func:`prefix_only_pg` with a tabular policy and with the shared parameter, as one long data
    frame: columns ``policy`` ("tabular" / "shared"), ``iteration``, ``p_start`` (start state's
    probability of the correct action), ``v_start`` (no-prefix success) and ``v_prefix`` (J_pre)."""
    frames = []
    for name, shared in [("tabular", False), ("shared", True)]:
        out = prefix_only_pg(H, n_actions, shared=shared, lr=lr, iters=iters)
        frames.append(pd.DataFrame({"policy": name, "iteration": np.arange(iters + 1), **out}))
    return pd.concat(frames, ignore_index=True)


def consistency_check(depth: int = 4, n_actions: int = 2, n_trees: int = 20, H: int = 6,
                      lock_actions: int = 4, lr: float = 1.0, iters: int = 300, seed: int = 0) -> dict:
    """The theory notebook's two numerical checks.

    ``trees``: :func:`tree_consistency` (J and J_pre share their optimum; every J_pre maximiser is
    J-optimal when rho(0) > 0), summarised per rho (``all_pi_star``, ``min_share_optimal_for_j``,
    ``mean_share_optimal_for_j``, ``min_max_j_pre``) with the per-tree rows in ``tree_rows``;
    ``tabular`` and ``shared``: :func:`prefix_only_pg` without and with the shared parameter."""
    rows = tree_consistency(depth, n_actions, n_trees=n_trees, seed=seed)
    summary = rows.groupby("rho", sort=False).agg(
        rho0=("rho0", "first"), all_pi_star=("pi_star", "all"),
        min_share_optimal_for_j=("share_optimal_for_j", "min"),
        mean_share_optimal_for_j=("share_optimal_for_j", "mean"), min_max_j_pre=("max_j_pre", "min"),
    ).reset_index()
    return {"trees": summary, "tree_rows": rows,
            "tabular": prefix_only_pg(H, lock_actions, shared=False, lr=lr, iters=iters),
            "shared": prefix_only_pg(H, lock_actions, shared=True, lr=lr, iters=iters)}


# --------------------------------------------------------------------------------------------
# 7. Exercise graders
# --------------------------------------------------------------------------------------------


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def _advantages_reference(rewards):
    return group_advantages(torch.as_tensor(rewards, dtype=torch.float32)).numpy().astype(float)


def check_group_advantages(fn) -> None:
    """Grade an exercise answer ``fn(rewards)`` -> advantages: rewards a float numpy array (B, G),
    one group per row; the answer (numpy or torch, same shape) is (r - row mean) / (row std + 1e-6)
    with the population std (divide by G). Constant rows must give zeros."""
    from replib.core.exercises import grade

    rng = np.random.default_rng(21)
    cases = [
        (np.array([[0.0, 1.0, 0.0, 0.0]]),),
        (np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]),),
        ((rng.random((6, 8)) < 0.3).astype(float),),
        (np.array([[0.0, 0.5, 1.0], [2.0, -1.0, 0.5]]),),
        (rng.normal(size=(4, 5)),),
    ]
    grade(lambda r: _as_numpy(fn(r)), _advantages_reference, cases, name="group_advantages")


def check_group_signal_probability(fn) -> None:
    """Grade an exercise answer ``fn(p, G)`` -> probability that a group of G rollouts with success
    probability p has a non-zero advantage, 1 - (1 - p)^G - p^G (p may be an array)."""
    from replib.core.exercises import grade

    cases = [(0.5, 2), (0.1, 8), (0.0, 8), (1.0, 4), (1e-4, 16), (np.array([0.01, 0.2, 0.6, 0.95]), 8)]
    grade(lambda p, G: _as_numpy(fn(p, G)), lambda p, G: _as_numpy(group_signal_probability(p, G)), cases,
          name="group_signal_probability")
