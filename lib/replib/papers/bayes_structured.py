"""Bayes-optimal structured responses: task-aware decoding and Bayesian-risk uncertainty, at CPU scale.

Paper: Tomov, Fuchsgruber, Günnemann, "Task-Awareness Improves LLM Generations and Uncertainty"
(ICML 2026, arXiv 2601.21500). No official code. Sampled answers s_i are parsed (phi) into a latent
space with a task distance d_T; the Bayes-optimal response is the argmin over the *whole* latent space
of the mean distance to the parsed samples (a "centroid" the model may never have produced), and the
Bayesian risk U (that minimal mean distance) is the uncertainty score.

Contents (numpy only; scipy's rank helpers when importable):

1. Vocabulary and the three synthetic tasks: :data:`TOKENS`, :data:`TOKEN_ID`, :func:`encode`,
   :func:`decode`; T1 sets, T2 ratings, T3 labels (:func:`sample_problems`, :func:`noisy_answer`,
   :func:`training_batch`, :func:`max_answer_tokens`).
2. The interpretation map phi (:func:`parse`), the template psi (:func:`render`) and
   :func:`parsed_latents`.
3. Task distances and decision rules: :func:`distance`, :func:`expected_distance`, the closed-form
   Bayes rules :func:`bayes_response` (element-wise majority / lower median / mode), their brute-force
   check :func:`bayes_by_search`, the sample-restricted MBR :func:`mbr_medoid` and the string-level
   vote :func:`string_majority`.
4. Losses against the truth: :func:`hamming_loss`, :func:`expected_rating_loss`,
   :func:`label_correct`, :func:`task_loss`.
5. Uncertainty evaluation: :func:`spearman`, :func:`auroc`, :func:`risk_coverage`, :func:`aurc`; the
   sample-based baselines :func:`predictive_entropy`, :func:`semantic_entropy`, :func:`n_distinct`.
6. A *perfect* model of the T1 data, enumerated exactly: :func:`set_prior`,
   :func:`perfect_next_token_probs`, :func:`perfect_greedy`, :func:`perfect_beam`,
   :func:`string_mode_set`, :func:`string_mode_size_curve`, :func:`perfect_model_table`.
7. Worked examples of the theory chapter: :func:`three_item_example`,
   :func:`medoid_vs_centroid_example`, :func:`entropy_vs_risk_example` and the small-universe helpers
   :func:`set_marginals`, :func:`expected_hamming`.
8. Exercise graders: :func:`check_elementwise_majority`, :func:`check_median_bayes`.
9. The experiment: :data:`EXPERIMENT_PROFILES`, :func:`train_model` (the shared tiny GPT-2 of
   :mod:`replib.models.causal_lm`), :func:`decode_task` (algorithm steps 1-4 and every baseline on one
   task), :func:`run_seed`, :func:`run_experiment`, the summaries :func:`decoder_losses`,
   :func:`uncertainty_quality`, :func:`sample_size_curve`, and :func:`claim_values`.

Conventions. Token ids are int64; an answer is the token sequence after ``<sep>`` up to and including
the first ``<eos>`` (anything after it, e.g. padding, is ignored; no ``<eos>`` = cut off = unparsable).
Latents: sets are bool arrays over the 10 items A..J (item i = ``ITEMS[i]``), ratings ints 0..10,
labels class ids 0..3. Stacked latents of N samples: (N, 10) bool, (N,) int, (N,) int. Weights of the
samples are uniform (1/N over the *parsable* samples). Logs are natural.

Fidelity notes (the accessible text of the paper is the abstract and Fig. 1; see the digest):

* Standard decision theory fills the gaps: Hamming -> element-wise majority, absolute loss -> median,
  0-1 -> mode, each with its closed-form Bayesian risk (digest table). The tasks, noise levels, token
  formats and the perfect-model analysis are the book's proposal, not the paper's experiments.
* Tie conventions (each tied choice is equally Bayes-optimal): an item with q_e = 1/2 exactly is
  excluded; for an even number of ratings the lower median is returned (any integer between the two
  middle values is optimal); ties of the label mode go to the smallest class id; the medoid and the
  string vote take the first occurring sample. :func:`bayes_by_search` applies the same conventions
  (fewest items / smallest value among the minimisers), so the two agree exactly.
* The parser is strict (declared before the book run): a set answer that names an item twice is
  unparsable. :func:`parse_set_lenient` (reads a repeat once) was added after the first book run as
  an exploratory, unjudged variant, because half of the tiny model's set samples repeat an item.
* Unparsable samples are dropped before the decision; with none left the rules return ``(None, nan)``
  and every loss function scores ``None`` as the maximal loss (10 for sets and ratings, wrong label).
* The perfect model of T1 (Section 6): noisy set S (each membership flipped with prob. rho), listed in
  a uniformly random order, then ``<eos>``; a string of a set of size m has probability P(S) / m!.
  Beam search is the textbook one (``width`` hypotheses, sum of log-probs, no length penalty; an
  ``<eos>`` continuation is finished only if it ranks among the top ``width`` continuations, as in
  Hugging Face ``generate`` and fairseq); ties between equal log-probabilities (frequent: the model
  is symmetric in the items) are broken by token order. The exact string mode has genuine ties (at
  rho = 0.25 a set and its subset one item smaller tie whenever the larger has 3 items,
  s rho / (1 - rho) = 1); :func:`string_mode_set` returns the smaller set, as the digest's numbers
  do.
* Perfect-model numbers (rho = 0.25, true sizes 3..7, mean Hamming loss): string mode 1/2/3/4/5,
  greedy 0/0/1/1/2 and element-wise majority 0, as in the digest. The standard beam search (width
  5; width 2 alike, widths 10 and 20 give 1/0/1/1/2) gives 0/0/1/1/2, *not* the digest's 1/2/2/4/5: an ``<eos>`` after a
  short prefix never ranks among the top continuations, because continuing with a remaining true
  item is always more probable than stopping, so the beam follows the greedy path. Only the
  variant that finishes *every* ``<eos>`` continuation (``eos_rule="all"``) finds the string mode
  (1/2/3/4/5; the digest's s = 5 value 2 is the other side of an exact tie between a 2-set and a
  3-set string, decided there by rounding).
"""

from __future__ import annotations

import itertools
import math
import time
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import seed_everything
from replib.models.causal_lm import (
    beam_search,
    completion_mask,
    sample,
    sequence_logprob,
    tiny_gpt,
    train_lm,
)

__all__ = [
    "TOKENS",
    "TOKEN_ID",
    "PAD",
    "EOS",
    "SEP",
    "ITEMS",
    "ITEM_IDS",
    "DIGIT_IDS",
    "CLASS_WORDS",
    "CLASS_WORD_IDS",
    "RHO",
    "RATING_NOISE",
    "LABEL_PROBS",
    "TASKS",
    "TASK_TOKEN",
    "TRUTH_KEY",
    "PERMUTATIONS",
    "MAX_LEN",
    "N_ITEMS",
    "N_CLASSES",
    "MAX_RATING",
    "encode",
    "decode",
    "sample_problems",
    "truth_row",
    "noisy_answer",
    "training_batch",
    "max_answer_tokens",
    "answer_tokens",
    "parse",
    "render",
    "parsed_latents",
    "parse_set_lenient",
    "distance",
    "expected_distance",
    "bayes_response",
    "bayes_by_search",
    "latent_space",
    "mbr_medoid",
    "string_majority",
    "hamming_loss",
    "expected_rating_loss",
    "label_correct",
    "task_loss",
    "spearman",
    "auroc",
    "risk_coverage",
    "aurc",
    "predictive_entropy",
    "semantic_entropy",
    "n_distinct",
    "ALL_SETS",
    "set_prior",
    "perfect_next_token_probs",
    "Decoded",
    "perfect_greedy",
    "perfect_beam",
    "string_mode_set",
    "string_mode_size_curve",
    "perfect_model_table",
    "risk_estimates",
    "set_marginals",
    "expected_hamming",
    "three_item_example",
    "medoid_vs_centroid_example",
    "entropy_vs_risk_example",
    "check_elementwise_majority",
    "check_median_bayes",
]

# --------------------------------------------------------------------------------------------
# 1. Vocabulary and the three synthetic tasks
# --------------------------------------------------------------------------------------------

ITEMS = list("ABCDEFGHIJ")
CLASS_WORDS = (
    ("red", "crimson", "scarlet"),
    ("blue", "azure", "navy"),
    ("green", "olive", "lime"),
    ("gold", "amber", "honey"),
)
TOKENS = (
    ["<pad>", "<eos>", "<sep>", "<T1>", "<T2>", "<T3>", "-"]
    + ITEMS
    + [str(d) for d in range(10)]
    + [w for words in CLASS_WORDS for w in words]
)
TOKEN_ID = {t: i for i, t in enumerate(TOKENS)}
PAD, EOS, SEP = TOKEN_ID["<pad>"], TOKEN_ID["<eos>"], TOKEN_ID["<sep>"]
DASH = TOKEN_ID["-"]
ITEM_IDS = np.array([TOKEN_ID[t] for t in ITEMS], dtype=np.int64)
DIGIT_IDS = np.array([TOKEN_ID[str(d)] for d in range(10)], dtype=np.int64)
CLASS_WORD_IDS = np.array([[TOKEN_ID[w] for w in words] for words in CLASS_WORDS], dtype=np.int64)
_ITEM_OF = {int(t): i for i, t in enumerate(ITEM_IDS)}
_DIGIT_OF = {int(t): d for d, t in enumerate(DIGIT_IDS)}
_CLASS_OF = {int(t): c for c, row in enumerate(CLASS_WORD_IDS) for t in row}

N_ITEMS = 10
N_CLASSES = 4
MAX_RATING = 10
RHO = 0.25  # T1 membership flip probability
RATING_NOISE = {0: 0.4, 2: 0.3, 3: 0.3}  # T2 eps distribution: mode 0, median +2
LABEL_PROBS = (0.45, 0.30, 0.15, 0.10)  # T3 class probabilities in ranking order
TASKS = ("sets", "ratings", "labels")
TASK_TOKEN = {"sets": TOKEN_ID["<T1>"], "ratings": TOKEN_ID["<T2>"], "labels": TOKEN_ID["<T3>"]}
TRUTH_KEY = {"sets": "truth", "ratings": "center", "labels": "ranking"}
PERMUTATIONS = list(itertools.permutations(range(N_CLASSES)))  # 24 rankings
PROMPT_LEN = {"sets": 12, "ratings": 6, "labels": 4}
MAX_LEN = 23  # longest prompt (12) + longest answer (10 items + eos)


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")


def encode(tokens) -> list[int]:
    """Token strings -> ids."""
    return [TOKEN_ID[t] for t in tokens]


def decode(ids) -> list[str]:
    """Token ids -> token strings."""
    return [TOKENS[int(i)] for i in ids]


def max_answer_tokens(task: str) -> int:
    """Longest answer incl. ``<eos>``: 11 (sets: 10 items), 3 (ratings: 2 digits), 2 (labels)."""
    _check_task(task)
    return {"sets": N_ITEMS + 1, "ratings": 3, "labels": 2}[task]


def _rating_center(digits) -> np.ndarray:
    """T2 rule: c = clip(floor(mean(digits) + 0.5), 0, 10) per row."""
    d = np.asarray(digits, dtype=float)
    return np.clip(np.floor(d.mean(axis=-1) + 0.5), 0, MAX_RATING).astype(np.int64)


def sample_problems(task: str, n: int, rng: np.random.Generator) -> dict:
    """n prompts of one task with their ground truth.

    * sets: S* uniform among subsets of the 10 items with size uniform in 3..7; prompt
      ``<T1> x_A .. x_J <sep>`` (x_i = the item token if i in S* else ``-``), length 12. Keys
      ``prompt`` (n, 12), ``truth`` (n, 10) bool, ``size`` (n,).
    * ratings: 4 uniform digits; prompt ``<T2> d d d d <sep>`` (length 6); ``center`` =
      clip(floor(mean + 0.5), 0, 10). Keys ``prompt``, ``center``, ``digits`` (n, 4).
    * labels: permutation index k uniform in 0..23; prompt ``<T3> d1 d2 <sep>`` with d1 d2 the two
      zero-padded decimal digits of k (length 4); ``ranking`` = PERMUTATIONS[k] (most probable class
      first). Keys ``prompt``, ``ranking`` (n, 4), ``index`` (n,).
    """
    _check_task(task)
    n = int(n)
    if task == "sets":
        size = rng.integers(3, 8, size=n)
        truth = np.zeros((n, N_ITEMS), dtype=bool)
        for r in range(n):
            truth[r, rng.choice(N_ITEMS, size=int(size[r]), replace=False)] = True
        body = np.where(truth, ITEM_IDS[None, :], DASH)
        prompt = np.concatenate(
            [np.full((n, 1), TASK_TOKEN[task]), body, np.full((n, 1), SEP)], axis=1
        )
        return {"prompt": prompt.astype(np.int64), "truth": truth, "size": size.astype(np.int64)}
    if task == "ratings":
        digits = rng.integers(0, 10, size=(n, 4))
        prompt = np.concatenate(
            [np.full((n, 1), TASK_TOKEN[task]), DIGIT_IDS[digits], np.full((n, 1), SEP)], axis=1
        )
        return {"prompt": prompt.astype(np.int64), "center": _rating_center(digits), "digits": digits}
    index = rng.integers(0, len(PERMUTATIONS), size=n)
    ranking = np.array([PERMUTATIONS[k] for k in index], dtype=np.int64).reshape(n, N_CLASSES)
    prompt = np.stack(
        [np.full(n, TASK_TOKEN[task]), DIGIT_IDS[index // 10], DIGIT_IDS[index % 10], np.full(n, SEP)],
        axis=1,
    )
    return {"prompt": prompt.astype(np.int64), "ranking": ranking, "index": index.astype(np.int64)}


def truth_row(task: str, problems: dict, i: int):
    """The ground truth of problem i of :func:`sample_problems` (the argument of :func:`task_loss`)."""
    _check_task(task)
    return problems[TRUTH_KEY[task]][i]


def _draw_eps(rng: np.random.Generator) -> int:
    keys = list(RATING_NOISE)
    return int(keys[rng.choice(len(keys), p=[RATING_NOISE[k] for k in keys])])


def noisy_answer(task: str, truth, rng: np.random.Generator) -> list[int]:
    """One training answer (token ids incl. ``<eos>``) for a problem with ground truth ``truth``.

    * sets (truth = S*, bool (10,)): S = S* with each membership flipped independently with prob.
      RHO, its items listed in a uniformly random order (empty set: just ``<eos>``).
    * ratings (truth = center c): y = clip(c + eps, 0, 10), eps ~ RATING_NOISE, written as plain
      decimal ("7") or zero-padded to two digits ("07") with prob. 1/2 each ("10" either way).
    * labels (truth = ranking): class ranking[j] with prob. LABEL_PROBS[j]; the top class (j = 0) is
      spelled with one of its 3 synonyms uniformly, any other class with its first synonym.
    """
    _check_task(task)
    if task == "sets":
        S = np.asarray(truth, dtype=bool) ^ (rng.random(N_ITEMS) < RHO)
        items = rng.permutation(np.flatnonzero(S))
        return [int(ITEM_IDS[i]) for i in items] + [EOS]
    if task == "ratings":
        y = int(np.clip(int(truth) + _draw_eps(rng), 0, MAX_RATING))
        text = f"{y:02d}" if rng.random() < 0.5 else str(y)
        return [TOKEN_ID[ch] for ch in text] + [EOS]
    ranking = np.asarray(truth, dtype=np.int64)
    j = int(rng.choice(N_CLASSES, p=LABEL_PROBS))
    c = int(ranking[j])
    syn = int(rng.integers(3)) if j == 0 else 0
    return [int(CLASS_WORD_IDS[c, syn]), EOS]


def training_batch(
    n: int, rng: np.random.Generator, mix=(0.5, 0.25, 0.25)
) -> tuple[np.ndarray, np.ndarray]:
    """n training sequences ``prompt + answer`` of tasks drawn from ``mix`` (sets, ratings, labels).

    Returns ``ids`` (n, MAX_LEN = 23) int64, right-padded with PAD, and ``target_mask`` (n, 23) bool,
    True at the answer tokens incl. ``<eos>`` (the positions whose token the LM must predict from the
    prefix before it); prompt and padding positions are False."""
    n = int(n)
    ids = np.full((n, MAX_LEN), PAD, dtype=np.int64)
    mask = np.zeros((n, MAX_LEN), dtype=bool)
    tasks = rng.choice(len(TASKS), size=n, p=np.asarray(mix, dtype=float) / np.sum(mix))
    for r in range(n):
        task = TASKS[int(tasks[r])]
        prob = sample_problems(task, 1, rng)
        prompt = prob["prompt"][0]
        ans = noisy_answer(task, prob[TRUTH_KEY[task]][0], rng)
        P, A = prompt.size, len(ans)
        ids[r, :P] = prompt
        ids[r, P:P + A] = ans
        mask[r, P:P + A] = True
    return ids, mask


# --------------------------------------------------------------------------------------------
# 2. The interpretation map phi, the template psi
# --------------------------------------------------------------------------------------------


def answer_tokens(answer_ids) -> list[int] | None:
    """The tokens of an answer before its first ``<eos>`` (None if there is no ``<eos>``: cut off)."""
    ids = [int(t) for t in np.asarray(answer_ids, dtype=np.int64).ravel()]
    if EOS not in ids:
        return None
    return ids[: ids.index(EOS)]


def parse(task: str, answer_ids):
    """phi: answer tokens -> latent, or None (unparsable).

    * sets: every token an item, no item twice -> bool (10,) (just ``<eos>`` = the empty set).
    * ratings: one digit "d", or two digits "0d" / "10" -> int 0..10.
    * labels: exactly one class-word token (any synonym) -> class id 0..3.
    A missing ``<eos>`` (cut-off answer), any other token or format gives None."""
    _check_task(task)
    toks = answer_tokens(answer_ids)
    if toks is None:
        return None
    if task == "sets":
        idx = [_ITEM_OF.get(t) for t in toks]
        if any(i is None for i in idx) or len(set(idx)) != len(idx):
            return None
        S = np.zeros(N_ITEMS, dtype=bool)
        S[idx] = True
        return S
    if task == "ratings":
        digits = [_DIGIT_OF.get(t) for t in toks]
        if not digits or len(digits) > 2 or any(d is None for d in digits):
            return None
        if len(digits) == 1:
            return int(digits[0])
        if digits[0] == 0:
            return int(digits[1])
        return 10 if digits == [1, 0] else None
    if len(toks) != 1 or toks[0] not in _CLASS_OF:
        return None
    return int(_CLASS_OF[toks[0]])


def render(task: str, latent) -> list[int]:
    """psi: latent -> canonical answer tokens ending in ``<eos>`` (sets in item order, ratings in
    plain decimal, labels by their first synonym)."""
    _check_task(task)
    if task == "sets":
        return [int(ITEM_IDS[i]) for i in np.flatnonzero(np.asarray(latent, dtype=bool))] + [EOS]
    if task == "ratings":
        return [TOKEN_ID[ch] for ch in str(int(latent))] + [EOS]
    return [int(CLASS_WORD_IDS[int(latent), 0]), EOS]


def _empty_latents(task: str) -> np.ndarray:
    return np.zeros((0, N_ITEMS), dtype=bool) if task == "sets" else np.zeros(0, dtype=np.int64)


def parse_set_lenient(answer_ids):
    """An alternative phi for sets (exploratory, chosen after the first book run): the set of items an
    answer names, reading a repeated item once ("A B A" -> {A, B}); None for a cut-off answer or a
    token that is not an item."""
    toks = answer_tokens(answer_ids)
    if toks is None or any(t not in _ITEM_OF for t in toks):
        return None
    S = np.zeros(N_ITEMS, dtype=bool)
    S[[_ITEM_OF[t] for t in toks]] = True
    return S


def parsed_latents(task: str, answers, phi=None) -> tuple[np.ndarray, int]:
    """Step 2 of the algorithm: parse N sampled answers (with :func:`parse`, or ``phi`` if given) and
    drop the unparsable ones.

    Returns ``(latents, n_parsed)``: (n_parsed, 10) bool for sets, (n_parsed,) int64 otherwise."""
    _check_task(task)
    lat = [parse(task, a) if phi is None else phi(a) for a in answers]
    lat = [x for x in lat if x is not None]
    if not lat:
        return _empty_latents(task), 0
    if task == "sets":
        return np.stack(lat).astype(bool), len(lat)
    return np.asarray(lat, dtype=np.int64), len(lat)


# --------------------------------------------------------------------------------------------
# 3. Task distances and decision rules
# --------------------------------------------------------------------------------------------


def distance(task: str, a, b) -> float:
    """d_T: Hamming |A xor B| (sets), |a - b| (ratings), 0-1 (labels)."""
    _check_task(task)
    if task == "sets":
        return float(np.sum(np.asarray(a, dtype=bool) != np.asarray(b, dtype=bool)))
    if task == "ratings":
        return float(abs(int(a) - int(b)))
    return float(int(a) != int(b))


def _total_distance(task: str, answer, latents) -> int:
    """sum_i d_T(answer, l_i) as an exact integer."""
    if task == "sets":
        return int(np.sum(np.asarray(latents, dtype=bool) != np.asarray(answer, dtype=bool)[None, :]))
    lat = np.asarray(latents, dtype=np.int64)
    if task == "ratings":
        return int(np.abs(lat - int(answer)).sum())
    return int(np.sum(lat != int(answer)))


def expected_distance(task: str, answer, latents) -> float:
    """The expected loss under the empirical belief: (1/N) sum_i d_T(answer, l_i) (nan if N = 0)."""
    _check_task(task)
    n = len(latents)
    return float(_total_distance(task, answer, latents) / n) if n else float("nan")


def bayes_response(task: str, latents):
    """The Bayes-optimal response l_Bayes = argmin_l (1/N) sum_i d_T(l, l_i) over the whole latent
    space, in closed form (digest table), and the Bayesian risk U = the minimal value.

    * sets / Hamming: element-wise majority {e: q_e > 1/2}, q_e = share of samples containing e;
      U = sum_e min(q_e, 1 - q_e). (q_e = 1/2: e excluded; including it is equally optimal.)
    * ratings / absolute loss: the lower median; U = mean |l_i - median|. (Even N: every integer
      between the two middle values is optimal.)
    * labels / 0-1: the mode (ties -> smallest class id); U = 1 - max_c p_hat(c).
    Returns ``(answer, risk)``; ``(None, nan)`` when no sample was parsable."""
    _check_task(task)
    n = len(latents)
    if n == 0:
        return None, float("nan")
    if task == "sets":
        lat = np.asarray(latents, dtype=bool)
        counts = lat.sum(axis=0)
        answer = 2 * counts > n
        q = counts / n
        return answer, float(np.minimum(q, 1.0 - q).sum())
    lat = np.asarray(latents, dtype=np.int64)
    if task == "ratings":
        med = int(np.sort(lat)[(n - 1) // 2])
        return med, float(np.abs(lat - med).mean())
    counts = np.bincount(lat, minlength=N_CLASSES)
    mode = int(np.argmax(counts))
    return mode, float(1.0 - counts[mode] / n)


def latent_space(task: str, n_items: int = N_ITEMS):
    """All latents of a task: the 2^n_items sets as a bool matrix (row r = the bits of r, item i =
    bit i), ratings 0..10, classes 0..3."""
    _check_task(task)
    if task == "sets":
        r = np.arange(2**n_items)
        return ((r[:, None] >> np.arange(n_items)[None, :]) & 1).astype(bool)
    return np.arange(MAX_RATING + 1) if task == "ratings" else np.arange(N_CLASSES)


def bayes_by_search(task: str, latents):
    """l_Bayes by brute force over the whole latent space (all 2^K sets, ratings 0..10, 4 classes),
    with exact integer sums of distances. Ties: the set with the fewest items (unique: the tied items
    left out), the smallest rating, the smallest class id - the conventions of :func:`bayes_response`.
    Returns ``(answer, risk)`` (``(None, nan)`` without samples)."""
    _check_task(task)
    n = len(latents)
    if n == 0:
        return None, float("nan")
    if task == "sets":
        lat = np.asarray(latents, dtype=bool)
        space = latent_space("sets", lat.shape[1])
        # total Hamming distance of every candidate: sum_e (x_e ? N - c_e : c_e)
        counts = lat.sum(axis=0)
        totals = np.where(space, n - counts[None, :], counts[None, :]).sum(axis=1)
        best = np.flatnonzero(totals == totals.min())
        pick = best[np.argmin(space[best].sum(axis=1))]
        return space[pick].copy(), float(totals[pick] / n)
    space = latent_space(task)
    totals = np.array([_total_distance(task, v, latents) for v in space])
    pick = int(np.argmin(totals))
    return int(space[pick]), float(totals[pick] / n)


def mbr_medoid(task: str, latents):
    """Sample-based MBR (the medoid): argmin over the *samples* l_j of (1/N) sum_i d_T(l_j, l_i)
    (ties -> first sample). Returns ``(answer, its mean distance)``; ``(None, nan)`` without samples."""
    _check_task(task)
    n = len(latents)
    if n == 0:
        return None, float("nan")
    totals = [_total_distance(task, latents[j], latents) for j in range(n)]
    j = int(np.argmin(totals))
    ans = np.asarray(latents[j], dtype=bool).copy() if task == "sets" else int(latents[j])
    return ans, float(totals[j] / n)


def string_majority(answers, task: str | None = None) -> list[int] | None:
    """String-level majority vote: the most frequent exact token sequence (up to and incl. the first
    ``<eos>``) among the parsable samples (ties -> first occurring); the caller parses it.

    Parsable means :func:`parse` succeeds for ``task``; with ``task=None`` for at least one task.
    Returns None if no sample is parsable."""
    tasks = TASKS if task is None else (task,)
    counts: dict[tuple, int] = {}
    for a in answers:
        toks = answer_tokens(a)
        if toks is None or all(parse(t, a) is None for t in tasks):
            continue
        key = tuple(toks) + (EOS,)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return list(next(k for k, c in counts.items() if c == best))  # dicts keep first occurrence


# --------------------------------------------------------------------------------------------
# 4. Losses against the truth
# --------------------------------------------------------------------------------------------


def hamming_loss(answer, truth) -> float:
    """T1 loss: |answer xor S*| (None -> 10, the maximum)."""
    if answer is None:
        return float(N_ITEMS)
    return float(np.sum(np.asarray(answer, dtype=bool) != np.asarray(truth, dtype=bool)))


def expected_rating_loss(answer, center) -> float:
    """T2 loss: E|answer - y| exactly, y = clip(center + eps, 0, 10), eps ~ RATING_NOISE
    (None -> 10). E.g. center 5: answer 5 -> 1.5 (the mode), answer 7 -> 1.1 (the median)."""
    if answer is None:
        return float(MAX_RATING)
    return float(sum(p * abs(int(answer) - int(np.clip(int(center) + e, 0, MAX_RATING)))
                     for e, p in RATING_NOISE.items()))


def label_correct(answer, ranking) -> bool:
    """T3: the answer is the rule's most probable class ranking[0] (None -> False)."""
    return answer is not None and int(answer) == int(np.asarray(ranking)[0])


def task_loss(task: str, answer, truth) -> float:
    """Loss of a latent answer against a problem's truth: Hamming (sets), expected L1 (ratings),
    0-1 = 1 - correct (labels); None (unparsable) is the maximal loss."""
    _check_task(task)
    if task == "sets":
        return hamming_loss(answer, truth)
    if task == "ratings":
        return expected_rating_loss(answer, truth)
    return 1.0 - float(label_correct(answer, truth))


# --------------------------------------------------------------------------------------------
# 5. Uncertainty evaluation and sample-based uncertainty baselines
# --------------------------------------------------------------------------------------------


def _rankdata(x) -> np.ndarray:
    """Ranks 1..n with ties given their average rank."""
    x = np.asarray(x, dtype=float)
    try:
        from scipy.stats import rankdata

        return rankdata(x).astype(float)
    except ImportError:  # pragma: no cover - scipy ships with scikit-learn
        order = np.argsort(x, kind="stable")
        xs = x[order]
        ranks = np.empty(x.size)
        i = 0
        while i < x.size:
            j = i
            while j + 1 < x.size and xs[j + 1] == xs[i]:
                j += 1
            ranks[order[i:j + 1]] = 0.5 * (i + j) + 1.0
            i = j + 1
        return ranks


def spearman(x, y) -> float:
    """Spearman's rank correlation (Pearson correlation of average ranks); nan if either is constant."""
    rx, ry = _rankdata(x), _rankdata(y)
    if rx.size < 2 or np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def auroc(score, is_error) -> float:
    """P(score of a random error > score of a random non-error), ties counting 1/2 (Mann-Whitney);
    nan if either class is empty."""
    score = np.asarray(score, dtype=float)
    pos = np.asarray(is_error, dtype=bool)
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    r = _rankdata(score)
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def risk_coverage(score, loss) -> tuple[np.ndarray, np.ndarray]:
    """Risk-coverage curve: reject the most uncertain (highest score) first; at coverage k/n
    (k = 1..n) the mean loss of the k kept examples. Ties in the score are split at random in
    expectation (each tied example contributes its tie group's mean loss), so the curve does not
    depend on the order of the examples. Returns ``(coverage, risk)``."""
    score = np.asarray(score, dtype=float)
    loss = np.asarray(loss, dtype=float)
    n = score.size
    order = np.argsort(score, kind="stable")
    s, lo = score[order], loss[order]
    _, start, inv = np.unique(s, return_index=True, return_inverse=True)
    group_mean = np.bincount(inv, weights=lo) / np.bincount(inv)
    k = np.arange(1, n + 1)
    return k / n, np.cumsum(group_mean[inv]) / k


def aurc(score, loss) -> float:
    """Area under the risk-coverage curve: the mean of its risk over coverages 1/n, .., 1 (lower is
    better)."""
    return float(np.mean(risk_coverage(score, loss)[1]))


def predictive_entropy(sample_logprobs) -> np.ndarray | float:
    """Monte-Carlo predictive entropy over strings: -(1/N) sum_i log p(s_i) of N sampled sequences
    (last axis)."""
    lp = np.asarray(sample_logprobs, dtype=float)
    out = -lp.mean(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def _latent_counts(task: str, latents) -> np.ndarray:
    _check_task(task)
    if len(latents) == 0:
        return np.zeros(0, dtype=np.int64)
    lat = np.asarray(latents, dtype=bool if task == "sets" else np.int64)
    return np.unique(lat, axis=0, return_counts=True)[1]


def semantic_entropy(task: str, latents) -> float:
    """Discrete semantic entropy: -sum_l p_hat(l) log p_hat(l) over the distinct parsed latents
    (nan without samples)."""
    c = _latent_counts(task, latents)
    if c.size == 0:
        return float("nan")
    p = c / c.sum()
    return float(-(p * np.log(p)).sum())


def n_distinct(task: str, latents) -> int:
    """Number of distinct parsed latents."""
    return int(_latent_counts(task, latents).size)


# --------------------------------------------------------------------------------------------
# 6. A perfect model of the T1 data, enumerated exactly
# --------------------------------------------------------------------------------------------

ALL_SETS = latent_space("sets")  # (1024, 10) bool
_SIZES = ALL_SETS.sum(axis=1)
_LOG_FACT = np.array([math.lgamma(m + 1) for m in range(N_ITEMS + 1)])
_TIE = 1e-9  # log-prob differences below this count as ties (exact ties in real arithmetic)


def set_prior(truth, rho: float = RHO) -> tuple[np.ndarray, np.ndarray]:
    """Latent distribution of the perfect model: P(S) = rho^|S xor S*| (1 - rho)^(10 - |S xor S*|)
    for all 1024 sets. Returns ``(sets (1024, 10) bool, probs (1024,))``."""
    truth = np.asarray(truth, dtype=bool)
    flips = (ALL_SETS != truth[None, :]).sum(axis=1)
    probs = rho**flips * (1.0 - rho) ** (N_ITEMS - flips)
    return ALL_SETS, probs


def _prefix_weights(truth, prefix, rho):
    """P(S) * (m - k)! / m! for the sets S containing the k-item prefix (0 for the others)."""
    sets, probs = set_prior(truth, rho)
    prefix = [int(i) for i in prefix]
    if len(set(prefix)) != len(prefix):
        raise ValueError("a prefix cannot repeat an item (probability 0 under the model)")
    k = len(prefix)
    contains = sets[:, prefix].all(axis=1) if k else np.ones(len(sets), dtype=bool)
    logw = np.log(probs) + _LOG_FACT[np.maximum(_SIZES - k, 0)] - _LOG_FACT[_SIZES]
    return np.where(contains, np.exp(logw), 0.0), k


def perfect_next_token_probs(truth, prefix_items, rho: float = RHO) -> np.ndarray:
    """P(next token | prefix) of the perfect model, shape (11,): items A..J then ``<eos>`` (index 10).

    Sum over the sets S containing the prefix with weight P(S) (m - k)!/m! (the probability that a
    random order of S starts with this k-item prefix, m = |S|); the next token is ``<eos>`` if
    m = k, else each of the m - k remaining items with prob. 1/(m - k). Items already in the prefix
    get 0."""
    w, k = _prefix_weights(truth, prefix_items, rho)
    out = np.zeros(N_ITEMS + 1)
    more = _SIZES > k
    out[:N_ITEMS] = (w[more, None] / (_SIZES[more, None] - k) * ALL_SETS[more]).sum(axis=0)
    out[:N_ITEMS][list(prefix_items)] = 0.0
    out[N_ITEMS] = w[~more].sum()
    return out / out.sum()


class Decoded(NamedTuple):
    """A decoded T1 string: ``items`` (item indices in output order), ``latent`` (bool (10,)),
    ``logprob`` (its log-probability under the perfect model, incl. ``<eos>``)."""

    items: list
    latent: np.ndarray
    logprob: float


def _decoded(items, logprob) -> Decoded:
    S = np.zeros(N_ITEMS, dtype=bool)
    S[list(items)] = True
    return Decoded(list(items), S, float(logprob))


def perfect_greedy(truth, rho: float = RHO) -> Decoded:
    """Greedy decoding of the perfect model: the most probable next token at every step (ties ->
    lowest token index, items before ``<eos>``) until ``<eos>``."""
    items: list[int] = []
    lp = 0.0
    while True:
        p = perfect_next_token_probs(truth, items, rho)
        logp = np.log(np.where(p > 0, p, 1e-300))
        tok = int(np.flatnonzero(logp >= logp.max() - _TIE)[0])
        lp += float(np.log(p[tok]))
        if tok == N_ITEMS:
            return _decoded(items, lp)
        items.append(tok)


def perfect_beam(truth, rho: float = RHO, width: int = 5, eos_rule: str = "hf") -> Decoded:
    """Beam search on the perfect model: keep the ``width`` best unfinished strings by sum of
    log-probs (no length penalty). Each step scores every continuation (token of positive
    probability) of every alive hypothesis and sorts them (ties: lexicographic token order). The
    alive set becomes the ``width`` best continuations that do not end in ``<eos>``. Which
    ``<eos>`` continuations become finished hypotheses (kept until the end):

    * ``eos_rule="hf"`` (default; Hugging Face ``generate`` / fairseq): those ranked among the top
      ``width`` of all continuations;
    * ``eos_rule="all"``: every one (each alive hypothesis may stop; the search then returns the
      best *complete* string reachable through the beam).

    Stop when no alive hypothesis can beat the best finished one (log-probs only decrease). Returns
    the best finished string (exact ties: the shortest, then the first in token order, as in
    :func:`string_mode_set`)."""
    if eos_rule not in ("hf", "all"):
        raise ValueError("eos_rule must be 'hf' or 'all'")
    width = int(width)
    alive: list[tuple[float, tuple]] = [(0.0, ())]
    finished: list[tuple[float, tuple]] = []
    while alive:
        cands = []
        for lp, seq in alive:
            p = perfect_next_token_probs(truth, seq, rho)
            for tok in np.flatnonzero(p > 0):
                cands.append((lp + float(np.log(p[tok])), seq + (int(tok),)))
        cands.sort(key=lambda c: (-round(c[0] / _TIE), c[1]))
        ends = [r for r, c in enumerate(cands) if c[1][-1] == N_ITEMS]
        finished += [cands[r] for r in ends if eos_rule == "all" or r < width]
        alive = [c for c in cands if c[1][-1] != N_ITEMS][:width]
        if finished:
            best = max(f[0] for f in finished)
            if not alive or max(a[0] for a in alive) <= best + _TIE:
                break
    best_lp = max(f[0] for f in finished)
    lp, seq = min((f for f in finished if f[0] >= best_lp - _TIE), key=lambda f: (len(f[1]), f[1]))
    return _decoded(seq[:-1], lp)


def string_mode_set(truth, rho: float = RHO) -> np.ndarray:
    """The set of the single most probable string: argmax_S P(S) / |S|! (every one of the |S|!
    orderings of S has that probability). Exact ties (e.g. rho = 0.25: a 3-set and its 2-subsets)
    go to the smaller set, then to the first in enumeration order."""
    _, probs = set_prior(truth, rho)
    score = np.log(probs) - _LOG_FACT[_SIZES]
    best = np.flatnonzero(score >= score.max() - _TIE)
    return ALL_SETS[best[np.argmin(_SIZES[best])]].copy()


def string_mode_size_curve(rho: float = RHO, sizes=range(0, N_ITEMS + 1)) -> np.ndarray:
    """Size of the string-mode set (:func:`string_mode_set`) for a truth of each size in ``sizes``."""
    out = []
    for s in sizes:
        truth = np.arange(N_ITEMS) < int(s)
        out.append(int(string_mode_set(truth, rho).sum()))
    return np.array(out)


def perfect_model_table(rho: float = RHO, sizes=(3, 4, 5, 6, 7), width: int = 5) -> dict:
    """Hamming loss vs S* of each decision rule on the perfect model, per true size (S* = the first
    s items; by symmetry the loss depends only on s). Keys ``sizes``, ``beam``, ``string_mode``,
    ``greedy``, ``majority`` (element-wise majority of the exact marginals q_e), each a list of
    losses; and ``*_size``: the answer's set size. ``beam`` is the standard (Hugging Face) beam
    search, ``beam_all`` the variant that finishes every ``<eos>`` continuation
    (:func:`perfect_beam`)."""
    out: dict = {"sizes": list(sizes)}
    for s in sizes:
        truth = np.arange(N_ITEMS) < int(s)
        sets, probs = set_prior(truth, rho)
        q = probs @ sets
        answers = {
            "beam": perfect_beam(truth, rho, width).latent,
            "beam_all": perfect_beam(truth, rho, width, eos_rule="all").latent,
            "string_mode": string_mode_set(truth, rho),
            "greedy": perfect_greedy(truth, rho).latent,
            "majority": q > 0.5,
        }
        for name, S in answers.items():
            out.setdefault(name, []).append(hamming_loss(S, truth))
            out.setdefault(f"{name}_size", []).append(int(np.sum(S)))
    return out


def risk_estimates(truth, rho: float = RHO, ns=(1, 3, 5, 10, 20, 50), n_repeats: int = 2000,
                   seed: int = 0) -> dict:
    """The plug-in Bayesian risk U = sum_e min(q_e, 1 - q_e) estimated from N noisy sets of the perfect
    T1 model, repeated ``n_repeats`` times per N: keys ``n``, ``mean``, ``sd`` and ``true`` (the risk
    of the exact belief, sum_e min(rho, 1 - rho) = 10 min(rho, 1 - rho))."""
    rng = np.random.default_rng(seed)
    truth = np.asarray(truth, dtype=bool)
    means, sds = [], []
    for n in ns:
        sets = truth[None, None, :] ^ (rng.random((n_repeats, int(n), truth.size)) < rho)
        q = sets.mean(axis=1)
        risk = np.minimum(q, 1.0 - q).sum(axis=1)
        means.append(risk.mean())
        sds.append(risk.std())
    return {"n": list(ns), "mean": np.array(means), "sd": np.array(sds),
            "true": float(truth.size * min(rho, 1.0 - rho))}


# --------------------------------------------------------------------------------------------
# 7. Worked examples (theory chapter)
# --------------------------------------------------------------------------------------------


def _as_bool(S, universe) -> np.ndarray:
    return np.array([u in set(S) for u in universe], dtype=bool)


def _as_items(mask, universe) -> tuple:
    return tuple(u for u, b in zip(universe, mask) if b)


def set_marginals(sets, probs=None) -> np.ndarray:
    """q_e = sum_S p(S) [e in S] for sets given as a bool matrix (rows) and weights (uniform if
    None)."""
    sets = np.asarray(sets, dtype=bool)
    w = np.full(len(sets), 1.0 / len(sets)) if probs is None else np.asarray(probs, dtype=float)
    return w @ sets


def expected_hamming(answer, sets, probs=None) -> float:
    """Expected Hamming loss E_{S ~ p}|answer xor S| (uniform weights if None)."""
    sets = np.asarray(sets, dtype=bool)
    w = np.full(len(sets), 1.0 / len(sets)) if probs is None else np.asarray(probs, dtype=float)
    return float(w @ (sets != np.asarray(answer, dtype=bool)[None, :]).sum(axis=1))


def three_item_example(universe=("A", "B", "C"), set_probs=None) -> dict:
    """The digest's hand-made string distribution: each set's mass is split evenly over the
    orderings listed. Default: {A,B,C} 0.40 over its 6 orderings, {A} 0.25, {A,B} 0.35 over its
    2 orderings. Returns ``strings`` {tuple: prob}, ``top_string`` (most probable string, "A"),
    ``latent_mode`` (most probable set, {A,B,C}), ``q`` (marginals, (1.0, 0.75, 0.40)),
    ``bayes_set`` ({q_e > 1/2} = {A,B}) and ``losses``: expected Hamming loss of the set of each
    answer ({"top_string": 1.15, "latent_mode": 0.85, "bayes": 0.65})."""
    if set_probs is None:
        set_probs = [(("A", "B", "C"), 0.40, "all"), (("A",), 0.25, "all"), (("A", "B"), 0.35, "all")]
    strings: dict[tuple, float] = {}
    for S, p, orders in set_probs:
        perms = list(itertools.permutations(S)) if orders == "all" else list(orders)
        for s in perms:
            strings[tuple(s)] = strings.get(tuple(s), 0.0) + p / len(perms)
    sets = np.array([_as_bool(S, universe) for S, _, _ in set_probs])
    probs = np.array([p for _, p, _ in set_probs])
    top = max(strings, key=strings.get)
    mode = sets[int(np.argmax(probs))]
    q = set_marginals(sets, probs)
    bayes = q > 0.5
    answers = {"top_string": _as_bool(top, universe), "latent_mode": mode, "bayes": bayes}
    return {
        "universe": tuple(universe),
        "strings": strings,
        "top_string": top,
        "latent_mode": _as_items(mode, universe),
        "q": q,
        "bayes_set": _as_items(bayes, universe),
        "losses": {k: expected_hamming(v, sets, probs) for k, v in answers.items()},
    }


def medoid_vs_centroid_example(samples=None, universe=("A", "B", "C")) -> dict:
    """Centroid vs medoid on sampled sets (default {A,B},{A,C},{B,C},{A,B},{A,C}: q = (0.8, 0.6,
    0.6), so the Bayes set is {A,B,C}, which no sample contains; the medoid is a sampled pair).
    Returns ``q``, ``bayes_set``, ``bayes_risk``, ``medoid_set``, ``medoid_risk`` (its mean
    Hamming distance to the samples) and ``bayes_in_samples``."""
    if samples is None:
        samples = [("A", "B"), ("A", "C"), ("B", "C"), ("A", "B"), ("A", "C")]
    lat = np.array([_as_bool(S, universe) for S in samples])
    bayes, risk = bayes_response("sets", lat)
    medoid, m_risk = mbr_medoid("sets", lat)
    return {
        "universe": tuple(universe),
        "q": set_marginals(lat),
        "bayes_set": _as_items(bayes, universe),
        "bayes_risk": risk,
        "medoid_set": _as_items(medoid, universe),
        "medoid_risk": m_risk,
        "bayes_in_samples": bool((lat == bayes[None, :]).all(axis=1).any()),
    }


def entropy_vs_risk_example(a=(4, 5), b=(0, 10)) -> dict:
    """Two rating beliefs, half the mass on each value: equal semantic entropy (log 2) but very
    different Bayesian risk under |l - l'| (0.5 vs 5.0). Returns {name: {"entropy", "risk"}}."""
    out = {}
    for name, vals in (("close", a), ("far", b)):
        lat = np.asarray(vals, dtype=np.int64)
        out[name] = {"entropy": semantic_entropy("ratings", lat),
                     "risk": bayes_response("ratings", lat)[1]}
    return out


# --------------------------------------------------------------------------------------------
# 8. Exercise graders
# --------------------------------------------------------------------------------------------


def _majority_reference(latents):
    return bayes_response("sets", latents)


def check_elementwise_majority(fn) -> None:
    """Grade an exercise answer ``fn(latents)`` -> ``(answer, risk)``: latents bool (N, K) of N
    sampled sets, answer bool (K,) = the Hamming-Bayes set {e: q_e > 1/2}, risk =
    sum_e min(q_e, 1 - q_e). Items with q_e = 1/2 exactly may be included or not (both optimal); the
    risk must match."""
    from replib.core.exercises import grade

    def canonical(f):
        def wrapped(latents):
            ans, risk = f(latents)
            if np.shape(ans) == (latents.shape[1],):
                ans = np.array(ans, dtype=bool)
                ans[2 * latents.sum(axis=0) == latents.shape[0]] = False  # tied: either is optimal
            return ans, float(risk)

        return wrapped

    rng = np.random.default_rng(11)
    cases = [(rng.random((n, k)) < p,) for n, k, p in [(5, 3, 0.5), (20, 10, 0.6), (7, 6, 0.3),
                                                       (1, 4, 0.5)]]
    tie = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1], [0, 1, 1, 0]], dtype=bool)  # q_B = q_C = 1/2
    cases += [(tie,), (np.ones((4, 5), dtype=bool),)]
    grade(canonical(fn), canonical(_majority_reference), cases, name="elementwise_majority")


def _median_reference(values):
    return bayes_response("ratings", np.asarray(values, dtype=np.int64))


def check_median_bayes(fn) -> None:
    """Grade an exercise answer ``fn(values)`` -> ``(answer, risk)`` for the absolute loss: values an
    int array of sampled ratings, answer an integer minimiser of mean |answer - v_i| (any median:
    for an even count every integer between the two middle values is accepted), risk = that
    minimal mean absolute deviation."""
    from replib.core.exercises import grade

    def canonical(f):
        def wrapped(values):
            ans, risk = f(values)
            v = np.asarray(values, dtype=float)
            lower, best = _median_reference(values)
            try:
                a = float(ans)
                if a == round(a) and abs(np.abs(v - a).mean() - best) < 1e-9:
                    ans = lower  # every integer minimiser is equally Bayes-optimal
            except (TypeError, ValueError):
                pass
            return ans, float(risk)

        return wrapped

    rng = np.random.default_rng(12)
    cases = [
        (np.array([7]),),
        (np.array([5, 7, 7, 8, 10]),),
        (np.array([2, 9]),),  # even: any of 2..9
        (np.array([0, 0, 0, 10, 10]),),  # mean 4 is not optimal
        (np.array([4, 4, 5, 5, 6, 6]),),
        (rng.integers(0, 11, size=20),),
        (rng.integers(0, 11, size=9),),
    ]
    grade(canonical(fn), canonical(_median_reference), cases, name="median_bayes")


# --- experiment pipeline (model-driven) ---

EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], train_steps=120, batch_size=64, lr=3e-3, n_layer=2, n_embd=64, n_head=4,
                  n_test=20, n_samples=5, temperature=1.0, num_beams=2, n_grid=[1, 3, 5]),
    "book": dict(seeds=[0, 1, 2], train_steps=1400, batch_size=64, lr=3e-3, n_layer=2, n_embd=64, n_head=4,
                 n_test=300, n_samples=20, temperature=1.0, num_beams=5, n_grid=[1, 3, 5, 10, 20]),
    "paper": dict(seeds=[0, 1, 2, 3, 4], train_steps=3000, batch_size=64, lr=3e-3, n_layer=2, n_embd=64,
                  n_head=4, n_test=1000, n_samples=50, temperature=1.0, num_beams=5,
                  n_grid=[1, 3, 5, 10, 20, 50]),
}
DECODERS = ("greedy", "beam", "string majority", "medoid", "bayes")
SCORES = ("bayesian risk", "predictive entropy", "semantic entropy", "distinct answers", "beam nll")


def train_model(cfg, seed: int, progress=None):
    """The tiny GPT of the experiment, trained from scratch on the mixed training stream (Adam-W,
    cosine schedule; fresh noisy examples every step). Returns the model and its loss curve."""
    model = tiny_gpt(len(TOKENS), n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head,
                     n_positions=MAX_LEN + 1, pad_id=PAD, eos_id=EOS, seed=seed)
    losses = train_lm(model, lambda rng: training_batch(cfg.batch_size, rng), steps=cfg.train_steps,
                      lr=cfg.lr, seed=seed, progress=progress)
    return model, losses


def decode_task(model, task: str, problems: dict, cfg, seed: int) -> tuple[list[dict], dict]:
    """All decoders and uncertainty scores on one task's test prompts (algorithm steps 1-4).

    Step 1 draws ``n_samples`` answers per prompt at ``temperature``; step 2 parses them and drops the
    unparsable ones; step 3 takes the closed-form Bayes answer (greedy's answer if no sample parses);
    step 4 reports the Bayesian risk. The medoid and the string vote use the same samples; greedy
    and beam search decode the prompt directly. Returns one row per prompt and the seconds spent
    sampling and in beam search."""
    prompts = torch.as_tensor(problems["prompt"])
    n, N, max_new = len(prompts), cfg.n_samples, max_answer_tokens(task)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    samples, sample_logprob = sample(model, prompts.repeat_interleave(N, 0), max_new, eos_id=EOS, pad_id=PAD,
                                     temperature=cfg.temperature, generator=generator)
    seconds_sampling = time.perf_counter() - start
    greedy, _ = sample(model, prompts, max_new, eos_id=EOS, pad_id=PAD, temperature=0)
    start = time.perf_counter()
    beam = beam_search(model, prompts, max_new, num_beams=cfg.num_beams, eos_id=EOS, pad_id=PAD)
    seconds_beam = time.perf_counter() - start
    beam_logprob = _completion_logprob(model, prompts, beam)
    rows = []
    for i in range(n):
        answers = samples[i * N:(i + 1) * N].numpy()
        truth = truth_row(task, problems, i)
        latents, _ = parsed_latents(task, answers)
        greedy_answer = parse(task, greedy[i].numpy())
        majority = string_majority(answers, task)
        bayes, risk = bayes_response(task, latents) if len(latents) else (greedy_answer, np.nan)
        medoid = mbr_medoid(task, latents)[0] if len(latents) else greedy_answer
        decoded = {"greedy": greedy_answer, "beam": parse(task, beam[i].numpy()),
                   "string majority": None if majority is None else parse(task, majority),
                   "medoid": medoid, "bayes": bayes}
        row = {"task": task, "prompt": i, **{f"loss {k}": task_loss(task, v, truth) for k, v in decoded.items()}}
        if task == "sets":
            row.update({f"size {k}": (np.nan if v is None else int(np.sum(v))) for k, v in decoded.items()})
            row["size truth"] = int(np.sum(truth))
        if task == "labels":  # 0 = the most probable class, 1 = the second, ...; NaN = unparsable
            row.update({f"rank {k}": (np.nan if v is None else int(np.flatnonzero(truth == v)[0]))
                        for k, v in decoded.items()})
        row.update({"bayesian risk": risk,
                    "predictive entropy": float(predictive_entropy(sample_logprob[i * N:(i + 1) * N].numpy())),
                    "semantic entropy": semantic_entropy(task, latents) if len(latents) else np.nan,
                    "distinct answers": n_distinct(task, latents) if len(latents) else np.nan,
                    "beam nll": -float(beam_logprob[i]),
                    "parsed samples": len(latents)})
        if task == "sets":
            row.update(_lenient_set_losses(answers, greedy[i].numpy(), beam[i].numpy(), truth))
        for m in cfg.n_grid:
            first, _ = parsed_latents(task, answers[:m])
            for name, rule in (("bayes", bayes_response), ("medoid", mbr_medoid)):
                answer = rule(task, first)[0] if len(first) else greedy_answer
                row[f"loss {name} N={m}"] = task_loss(task, answer, truth)
        rows.append(row)
    return rows, {"sampling": seconds_sampling, "beam": seconds_beam}


def _lenient_set_losses(answers, greedy, beam, truth) -> dict:
    """The exploratory variant: the same samples and decodes read with :func:`parse_set_lenient`."""
    latents, n_parsed = parsed_latents("sets", answers, phi=parse_set_lenient)
    greedy_answer = parse_set_lenient(greedy)
    decoded = {"greedy": greedy_answer, "beam": parse_set_lenient(beam),
               "medoid": mbr_medoid("sets", latents)[0] if n_parsed else greedy_answer,
               "bayes": bayes_response("sets", latents)[0] if n_parsed else greedy_answer}
    out = {f"lenient loss {k}": hamming_loss(v, truth) for k, v in decoded.items()}
    out["lenient parsed samples"] = n_parsed
    out["samples repeating an item"] = n_parsed - parsed_latents("sets", answers)[1]
    out["samples cut off"] = sum(answer_tokens(a) is None for a in answers)
    return out


def _completion_logprob(model, prompts, completions):
    ids = torch.cat([prompts, completions], 1)
    mask = torch.cat([torch.zeros_like(prompts, dtype=torch.bool), completion_mask(completions, EOS)], 1)
    with torch.no_grad():
        return sequence_logprob(model, ids, mask)


def run_seed(cfg, seed: int, progress=None) -> dict:
    """Train one model and decode fresh test prompts of every task with it (one seed)."""
    seed_everything(seed)
    model, losses = train_model(cfg, seed, progress)
    rng = np.random.default_rng(10_000 + seed)
    rows, seconds = [], {"sampling": 0.0, "beam": 0.0}
    problems = {}
    for k, task in enumerate(TASKS):
        problems[task] = sample_problems(task, cfg.n_test, rng)
        task_rows, task_seconds = decode_task(model, task, problems[task], cfg, seed=100 * seed + k)
        rows += task_rows
        for key in seconds:
            seconds[key] += task_seconds[key]
    table = pd.DataFrame(rows)
    table.insert(0, "seed", seed)
    return {"table": table, "losses": losses, "seconds": seconds, "model": model, "problems": problems}


def run_experiment(cfg, progress=None) -> dict:
    """:func:`run_seed` for every seed of the profile; per-prompt rows of all seeds in ``table``."""
    runs = [run_seed(cfg, seed, progress) for seed in cfg.seeds]
    return {"runs": runs, "table": pd.concat([r["table"] for r in runs], ignore_index=True)}


def decoder_losses(table: pd.DataFrame) -> pd.DataFrame:
    """Mean loss of every decoder per task and seed (sets: Hamming, ratings: expected absolute loss,
    labels: error rate)."""
    columns = [f"loss {d}" for d in DECODERS]
    out = table.groupby(["task", "seed"])[columns].mean()
    return out.rename(columns=lambda c: c.removeprefix("loss "))


def uncertainty_quality(table: pd.DataFrame) -> pd.DataFrame:
    """Per task and seed, for every uncertainty score: Spearman correlation with the Bayes answer's
    realised loss, AUROC for detecting a non-zero loss, and the area under the risk-coverage curve."""
    rows = []
    for (task, seed), group in table.groupby(["task", "seed"]):
        loss = group["loss bayes"].to_numpy()
        for score in SCORES:
            s = group[score].fillna(np.inf).to_numpy()
            rows.append({"task": task, "seed": seed, "score": score, "spearman": spearman(s, loss),
                         "auroc": auroc(s, loss > 0), "aurc": aurc(s, loss)})
    return pd.DataFrame(rows)


def sample_size_curve(table: pd.DataFrame, n_grid, decoder: str = "bayes") -> pd.DataFrame:
    """Mean loss of the Bayes answer (or the medoid) from the first N samples, per task, seed and N."""
    columns = [f"loss {decoder} N={m}" for m in n_grid]
    out = table.groupby(["task", "seed"])[columns].mean()
    return out.rename(columns=lambda c: int(c.split("=")[1]))


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``."""
    table = results["table"]
    losses = decoder_losses(table)
    spearman_of = uncertainty_quality(table).set_index(["task", "seed", "score"])["spearman"]
    curve = sample_size_curve(table, cfg.n_grid)
    values = {}
    for run, seed in zip(results["runs"], cfg.seeds):
        sets, ratings, labels = (losses.loc[(t, seed)] for t in TASKS)
        set_rows = table[(table.seed == seed) & (table.task == "sets")]
        risk_gain = {task: spearman_of[(task, seed, "bayesian risk")] - spearman_of[(task, seed, "predictive entropy")]
                     for task in ("sets", "ratings")}
        beam_parsed = set_rows[set_rows["size beam"].notna()]  # sizes compared on the same prompts
        values[seed] = {
            "c1a_sets_vs_beam": sets["bayes"] / sets["beam"],
            "c1b_beam_sets_smaller": beam_parsed["size beam"].mean() - beam_parsed["size truth"].mean(),
            "c2a_sets_vs_medoid": sets["bayes"] / sets["medoid"],
            "c2b_ratings_vs_medoid": ratings["bayes"] - ratings["medoid"],
            "c3a_ratings_vs_beam": ratings["beam"] - ratings["bayes"],
            "c3b_labels_vs_beam": 100.0 * (labels["beam"] - labels["bayes"]),
            "c4a_risk_sets": risk_gain["sets"],
            "c4b_risk_ratings": risk_gain["ratings"],
            "c5_more_samples": max(np.diff(curve.loc[(task, seed)].to_numpy()).max() for task in ("sets", "ratings")),
            "m1_beam_seconds": run["seconds"]["beam"],
            "m2_sampling_seconds": run["seconds"]["sampling"],
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
