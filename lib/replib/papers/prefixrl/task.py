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
    "MARKS",
    "VOCAB",
    "PROMPT_LEN",
    "STEP_TABLE",
    "step_rule",
    "N_PROBLEMS",
    "NO_EOS",
    "all_problems",
    "split_problems",
    "STRATEGIES",
    "correct_traces",
    "both_traces",
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
    "pass_from_probs",
    "rollouts",
]


# --------------------------------------------------------------------------------------------
# The chain task
# --------------------------------------------------------------------------------------------

BOS, SEP = 10, 11
MARKS = (12, 13)  # the first response token names the strategy: 12 for A, 13 for B
VOCAB = 14
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


STRATEGIES = (0, 1)  # 0: strategy A, starts from v0; 1: strategy B, starts from d0


def _digit_column(t: int, strategy=0) -> int:
    """Column of the problem (v0, d0, d1) whose digit step t uses: d_{t mod 2}, in both strategies."""
    return 1 + t % 2


def _start_column(strategy) -> np.ndarray | int:
    """Column of the problem (v0, d0, d1) each strategy starts its chain from: v0 (A) or d0 (B)."""
    return np.asarray(strategy)


def correct_traces(problems, L: int, strategy: int = 0) -> np.ndarray:
    """The correct response of each problem under one of the two valid strategies, (n, L): the
    strategy's mark (``MARKS[strategy]``) then L - 1 steps y_t = f(y_{t-1}, d_{t mod 2}), from y_0 =
    v0 (strategy A, ``strategy=0``, the one the base model mostly uses) or y_0 = d0 (strategy B,
    ``strategy=1``). The two traces differ from the mark on; the verifier accepts either."""
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    out = np.empty((len(problems), L), dtype=np.int64)
    out[:, 0] = MARKS[strategy]
    y = problems[:, _start_column(strategy)].copy()
    for t in range(1, L):
        y = step_rule(y, problems[:, _digit_column(t)])
        out[:, t] = y
    return out


def both_traces(problems, L: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two correct responses (A, B), each (n, L), and ``same`` (n,) bool: True where they are the
    same sequence (when d0 = d1, for instance), so that a probability is not counted twice."""
    a, b = correct_traces(problems, L, 0), correct_traces(problems, L, 1)
    return a, b, (a == b).all(axis=1)


def noisy_traces(problems, L: int, eps: float, rng: np.random.Generator, strategies=None) -> np.ndarray:
    """Pretraining responses, (n, L): the mark of the row's strategy (``strategies`` (n,) of 0/1,
    default all A), then L - 1 steps from the strategy's start (v0 or d0), each applying the rule to
    the previous (possibly corrupted) value and, with probability ``eps``, replaced by a uniformly
    random *other* digit. Given the history, the next digit is therefore correct with probability
    1 - eps."""
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    n = len(problems)
    strategies = np.zeros(n, dtype=np.int64) if strategies is None else np.asarray(strategies, dtype=np.int64)
    rows = np.arange(n)
    out = np.empty((n, L), dtype=np.int64)
    out[:, 0] = np.asarray(MARKS)[strategies]
    y = problems[rows, _start_column(strategies)].copy()
    for t in range(1, L):
        rule = step_rule(y, problems[:, _digit_column(t)])
        corrupt = rng.random(n) < eps
        y = np.where(corrupt, (rule + rng.integers(1, 10, size=n)) % 10, rule)
        out[:, t] = y
    return out


def prompts(problems) -> np.ndarray:
    """``[BOS, v0, d0, d1, SEP]`` per problem, (n, 5) int64."""
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    n = len(problems)
    return np.concatenate([np.full((n, 1), BOS), problems, np.full((n, 1), SEP)], axis=1).astype(np.int64)


def sequences(problems, responses) -> np.ndarray:
    """Prompt followed by response, (n, 5 + L) int64."""
    return np.concatenate([prompts(problems), np.asarray(responses, dtype=np.int64)], axis=1)


def noise_floor(eps: float, L: int | None = None, q_other: float = 0.0) -> float:
    """Cross-entropy (nats per response token) of the noisy-trace generator given the history, the
    lowest loss the base model can reach. Per digit step -(1 - eps) log(1 - eps) - eps log(eps / 9);
    with ``L`` given, the mean over the L response tokens, whose first (the strategy's mark) costs the
    strategy's entropy H(q_other): ((L - 1) step floor + H(q_other)) / L."""
    terms = [(1 - eps) * np.log(1 - eps) if eps < 1 else 0.0, eps * np.log(eps / 9) if eps > 0 else 0.0]
    step = float(-sum(terms))
    if L is None:
        return step
    q = float(q_other)
    mark = -sum(p * np.log(p) for p in (q, 1 - q) if p > 0)
    return float(((L - 1) * step + mark) / L)


# --------------------------------------------------------------------------------------------
# The base model
# --------------------------------------------------------------------------------------------


def _response_mask(n: int, L: int) -> np.ndarray:
    mask = np.zeros((n, PROMPT_LEN + L), dtype=bool)
    mask[:, PROMPT_LEN:] = True
    return mask


def pretraining_batch(batch_size: int, L: int, eps: float, rng: np.random.Generator, q_other: float = 0.0):
    """``batch_size`` pretraining sequences (prompt + noisy trace of ``L`` steps) of problems drawn
    uniformly from all 1000, and the mask of their response tokens (the positions the loss covers).
    Each sequence uses strategy B with probability ``q_other``, else A (with ``q_other = 0`` no
    strategy is drawn: the stream of the single-strategy toy)."""
    batch = all_problems()[rng.integers(0, N_PROBLEMS, size=batch_size)]
    strategies = (rng.random(batch_size) < q_other).astype(np.int64) if q_other > 0 else None
    return sequences(batch, noisy_traces(batch, L, eps, rng, strategies)), _response_mask(len(batch), L)


def pretraining_corpus(steps: int, batch_size: int, L: int, eps: float, seed: int, q_other: float = 0.0):
    """The base model's whole pretraining stream as a ``datasets.Dataset`` (columns ``ids`` and
    ``target_mask``, one row per sequence, in training order): ``steps`` batches of
    :func:`pretraining_batch` drawn from a numpy generator seeded with ``seed``, as ``train_lm`` would
    draw them live. Generated by code once and cached under data/cache/."""
    draw = functools.partial(pretraining_batch, int(batch_size), int(L), float(eps), q_other=float(q_other))
    key = {"batch_size": int(batch_size), "L": int(L), "eps": float(eps)}
    if q_other > 0:
        key["q_other"] = float(q_other)
    return cached_batches("prefixrl_pretrain", key, draw, steps=int(steps), seed=int(seed))


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
    ``base_steps`` steps on batches of ``base_batch`` fresh noisy traces (:func:`pretraining_corpus`; a
    share ``q_other`` of them in strategy B),
    cross-entropy on response tokens only. The model lives on ``core.model_device(cfg.profile)`` (a
    GPU at the paper profile when there is one, else the CPU). Returns ``(model, losses)``."""
    model = tiny_gpt(VOCAB, n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head, n_positions=32,
                     pad_id=SEP, eos_id=BOS, seed=seed).to(model_device(cfg.profile))
    corpus = pretraining_corpus(cfg.base_steps, cfg.base_batch, cfg.L, cfg.eps, seed, getattr(cfg, "q_other", 0.0))
    losses = train_lm(model, _stored_batches(corpus, cfg.base_batch), steps=cfg.base_steps, lr=cfg.base_lr,
                      seed=seed, progress=progress)
    return model, losses


# --------------------------------------------------------------------------------------------
# Exact evaluation
# --------------------------------------------------------------------------------------------


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def correct_step_probs(model, problems, L: int, chunk: int = 2048, strategy: int = 0) -> np.ndarray:
    """p(y_t = correct | x, correct y_<t) for t = 1..L under teacher forcing along the correct trace
    of ``strategy`` (0: A, 1: B), (n, L) float64 (on the CPU, wherever the model is)."""
    ids = torch.as_tensor(sequences(problems, correct_traces(problems, L, strategy)), device=_device_of(model))
    parts = [token_logprobs(model, block)[:, PROMPT_LEN - 1:] for block in ids.split(chunk)]
    return np.exp(torch.cat(parts).double().cpu().numpy())


def pass_from_probs(probs_a: np.ndarray, probs_b: np.ndarray, problems, L: int, prefix_len: int = 0,
                    prefix_strategy: int = 0) -> np.ndarray:
    """Exact pass@1 from the step probabilities along both correct traces ((n, L) each, from
    :func:`correct_step_probs`): a response is correct iff it equals the A or the B trace, so from
    the first h steps of the ``prefix_strategy`` trace the success probability is the sum, over the
    correct traces that start with that prefix (counted once when A = B), of prod_{t > h} p(y_t | x,
    y_<t). (n,) float64."""
    a, b, same = both_traces(problems, L)
    own, other = (a, b) if prefix_strategy == 0 else (b, a)
    p_own, p_other = (probs_a, probs_b) if prefix_strategy == 0 else (probs_b, probs_a)
    shares_prefix = (own[:, :prefix_len] == other[:, :prefix_len]).all(axis=1) & ~same
    return p_own[:, prefix_len:].prod(axis=1) + np.where(shares_prefix, p_other[:, prefix_len:].prod(axis=1), 0.0)


def pass_at_1(model, problems, L: int, prefix_len: int = 0, prefix_strategy: int = 0) -> np.ndarray:
    """Exact per-problem probability of completing correctly from the first h = ``prefix_len`` steps
    of the ``prefix_strategy`` trace (:func:`pass_from_probs`). With h = 0 it is the no-prefix pass@1:
    p(A trace) + p(B trace), the only two responses with reward 1. (n,) float64."""
    probs_a = correct_step_probs(model, problems, L, strategy=0)
    probs_b = correct_step_probs(model, problems, L, strategy=1)
    return pass_from_probs(probs_a, probs_b, problems, L, prefix_len, prefix_strategy)


def step_accuracy(model, problems, L: int, strategy: int = 0) -> np.ndarray:
    """Mean over problems of p(correct y_t | correct history), per position t = 1..L, along the
    ``strategy`` trace, (L,): the back-generalization map."""
    return correct_step_probs(model, problems, L, strategy=strategy).mean(axis=0)


def _prefix_curve_from_probs(probs: np.ndarray) -> np.ndarray:
    return np.array([probs[:, h:].prod(axis=1).mean() for h in range(probs.shape[1])])


def prefix_curve(model, problems, L: int, strategy: int = 0) -> np.ndarray:
    """Mean probability of completing the ``strategy`` trace from its correct prefix of length h, for
    h = 0..L-1, (L,): the difficulty ladder."""
    return _prefix_curve_from_probs(correct_step_probs(model, problems, L, strategy=strategy))


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


def prefixed_prompts(problems, prefix_len: int, L: int, strategy: int = 0) -> np.ndarray:
    """The prefixed problems x + y^x_{1:h}: prompt followed by the first h steps of the correct trace
    of ``strategy``, (n, 5 + h)."""
    return sequences(problems, correct_traces(problems, L, strategy)[:, :prefix_len])


@torch.no_grad()
def rollouts(model, problems, prefix_len: int, G: int, L: int, generator: torch.Generator | None = None,
             strategy: int = 0):
    """G completions (temperature 1) of each problem prefixed with the first h = ``prefix_len`` steps
    of its ``strategy`` trace (algorithm step 3, sampling).

    Returns ``ids`` (n*G, 5 + L) (rows of one problem adjacent), the completion mask (n*G, 5 + L),
    True exactly at the L - h sampled positions 5 + h .. 5 + L - 1, and the rewards (n, G): 1 iff
    prefix + completion is one of the two correct responses (A or B; the verifier accepts either)."""
    if not 0 <= prefix_len < L:
        raise ValueError(f"prefix_len must be in 0..{L - 1}, got {prefix_len}")
    problems = np.asarray(problems, dtype=np.int64).reshape(-1, 3)
    n = len(problems)
    where = _device_of(model)
    start = torch.as_tensor(prefixed_prompts(problems, prefix_len, L, strategy), device=where)
    start = start.repeat_interleave(G, dim=0)
    completions, _ = sample(model, start, L - prefix_len, eos_id=NO_EOS, pad_id=SEP, temperature=1.0,
                            generator=generator)
    ids = torch.cat([start, completions], dim=1)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, PROMPT_LEN + prefix_len:] = True
    response = ids[:, PROMPT_LEN:]
    correct = torch.zeros(len(ids), dtype=torch.bool, device=where)
    for s_ in STRATEGIES:
        truth = torch.as_tensor(correct_traces(problems, L, s_), device=where).repeat_interleave(G, dim=0)
        correct |= (response == truth).all(dim=1)
    rewards = correct.float().reshape(n, G)
    return ids, mask, rewards
