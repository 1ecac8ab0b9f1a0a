"""PrefixRL's toy world: the chain task, its base model, exact evaluation, and the prefixed problems
with their rollouts and rewards."""

from __future__ import annotations

import functools

import numpy as np
import torch

from replib.core.data import cached_batches
from replib.core.runtime import model_device
from replib.models.causal_lm import sample, tiny_gpt, token_logprobs, train_lm

__all__ = [
    "BOS",
    "SEP",
    "VOCAB",
    "PROMPT_LEN",
    "STEP_TABLE",
    "step_rule",
    "N_PROBLEMS",
    "NO_EOS",
    "all_problems",
    "split_problems",
    "correct_traces",
    "noisy_traces",
    "prompts",
    "sequences",
    "noise_floor",
    "train_base",
    "correct_step_probs",
    "pass_at_1",
    "step_accuracy",
    "prefix_curve",
    "trace_cost_tokens",
    "rejection_sample",
    "prefixed_prompts",
    "rollouts",
]


# --------------------------------------------------------------------------------------------
# The chain task
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
# The base model
# --------------------------------------------------------------------------------------------


def _response_mask(n: int, L: int) -> np.ndarray:
    mask = np.zeros((n, PROMPT_LEN + L), dtype=bool)
    mask[:, PROMPT_LEN:] = True
    return mask


def pretraining_batch(batch_size: int, L: int, eps: float, rng: np.random.Generator):
    """``batch_size`` pretraining sequences (prompt + noisy trace of ``L`` steps) of problems drawn
    uniformly from all 1000, and the mask of their response tokens (the positions the loss covers)."""
    batch = all_problems()[rng.integers(0, N_PROBLEMS, size=batch_size)]
    return sequences(batch, noisy_traces(batch, L, eps, rng)), _response_mask(len(batch), L)


def pretraining_corpus(steps: int, batch_size: int, L: int, eps: float, seed: int):
    """The base model's whole pretraining stream as a ``datasets.Dataset`` (columns ``ids`` and
    ``target_mask``, one row per sequence, in training order): ``steps`` batches of
    :func:`pretraining_batch` drawn from a numpy generator seeded with ``seed``, as ``train_lm`` would
    draw them live. Generated by code once and cached under data/cache/."""
    draw = functools.partial(pretraining_batch, int(batch_size), int(L), float(eps))
    return cached_batches("prefixrl_pretrain", {"batch_size": int(batch_size), "L": int(L), "eps": float(eps)},
                          draw, steps=int(steps), seed=int(seed))


def _stored_batches(corpus, batch_size: int):
    """A ``draw_batch(rng)`` for :func:`train_lm` that returns the stored stream's batches in order
    (``rng`` unused), the same batches as ``replib.core.data.replay_batches``, but with both columns
    read in one piece instead of row by row (which took about half of the base model's training
    time)."""
    columns = corpus.with_format("numpy")[:]
    ids, mask = columns["ids"], columns["target_mask"]
    starts = iter(range(0, len(corpus) - batch_size + 1, batch_size))

    def draw_batch(_rng=None):
        k = next(starts)
        return ids[k:k + batch_size], mask[k:k + batch_size]

    return draw_batch


def train_base(cfg, seed: int, progress=None):
    """The base model: the tiny GPT-2 (vocab 12, ``n_layer``/``n_embd``/``n_head`` of ``cfg``, 32
    positions) trained with :func:`train_lm` (AdamW, lr ``base_lr``, warmup 50, cosine) for
    ``base_steps`` steps on batches of ``base_batch`` fresh noisy traces (:func:`pretraining_corpus`),
    cross-entropy on response tokens only. The model lives on ``core.model_device(cfg.profile)`` (a
    GPU at the paper profile when there is one, else the CPU). Returns ``(model, losses)``."""
    model = tiny_gpt(VOCAB, n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head, n_positions=32,
                     pad_id=SEP, eos_id=BOS, seed=seed).to(model_device(cfg.profile))
    corpus = pretraining_corpus(cfg.base_steps, cfg.base_batch, cfg.L, cfg.eps, seed)
    losses = train_lm(model, _stored_batches(corpus, cfg.base_batch), steps=cfg.base_steps, lr=cfg.base_lr,
                      seed=seed, progress=progress)
    return model, losses


# --------------------------------------------------------------------------------------------
# Exact evaluation
# --------------------------------------------------------------------------------------------


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def correct_step_probs(model, problems, L: int, chunk: int = 2048) -> np.ndarray:
    """p(y_t = correct | x, correct y_<t) for t = 1..L under teacher forcing, (n, L) float64 (on the
    CPU, wherever the model is)."""
    ids = torch.as_tensor(sequences(problems, correct_traces(problems, L)), device=_device_of(model))
    parts = [token_logprobs(model, block)[:, PROMPT_LEN - 1:] for block in ids.split(chunk)]
    return np.exp(torch.cat(parts).double().cpu().numpy())


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


def rejection_sample(base_pass_per_problem, K: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Rejection sampling the base model for a correct trace of each problem, at most ``K`` samples
    (algorithm step 1, the self-improvement loop), simulated exactly: a sample is correct with the
    exact probability p_x and the only correct response is the correct trace, so the number of
    samples to the first success is geometric(p_x). Returns ``found`` (n,) bool (a trace within K
    samples) and ``draws`` (n,) int, the samples spent per problem (min(first success, K)); the
    compute is ``draws.sum() * L`` sampled tokens."""
    p = np.clip(np.asarray(base_pass_per_problem, dtype=float), 1e-12, 1.0)
    first_success = rng.geometric(p)
    return first_success <= K, np.minimum(first_success, K)


# --------------------------------------------------------------------------------------------
# Prefixed problems and rollouts
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
    where = _device_of(model)
    truth = torch.as_tensor(correct_traces(problems, L), device=where)
    start = torch.as_tensor(prefixed_prompts(problems, prefix_len, L), device=where).repeat_interleave(G, dim=0)
    completions, _ = sample(model, start, L - prefix_len, eos_id=NO_EOS, pad_id=SEP, temperature=1.0,
                            generator=generator)
    ids = torch.cat([start, completions], dim=1)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, PROMPT_LEN + prefix_len:] = True
    target = truth[:, prefix_len:].repeat_interleave(G, dim=0)
    rewards = (completions == target).all(dim=1).float().reshape(n, G)
    return ids, mask, rewards
