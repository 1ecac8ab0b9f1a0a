"""The toy world: the vocabulary, the three synthetic tasks (T1 sets, T2 ratings, T3 labels) and
their training data, the interpretation map phi (the parser, algorithm step 2) and the template
psi, the losses of an answer against the truth, and the metrics that score an uncertainty
estimate."""

from __future__ import annotations

import functools
import itertools

import numpy as np

from replib.core.data import cached_batches

from .method import MAX_RATING, N_CLASSES, N_ITEMS, TASKS, _check_task

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
    "TASK_TOKEN",
    "TRUTH_KEY",
    "PERMUTATIONS",
    "MAX_LEN",
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
    "parse_set_named",
    "answer_entropy",
    "heldout_examples",
    "interpret",
    "hamming_loss",
    "expected_rating_loss",
    "label_correct",
    "task_loss",
    "spearman",
    "auroc",
    "risk_coverage",
    "aurc",
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

RHO = 0.25  # T1 membership flip probability
RATING_NOISE = {0: 0.4, 2: 0.3, 3: 0.3}  # T2 eps distribution: mode 0, median +2
LABEL_PROBS = (0.45, 0.30, 0.15, 0.10)  # T3 class probabilities in ranking order
TASK_TOKEN = {"sets": TOKEN_ID["<T1>"], "ratings": TOKEN_ID["<T2>"], "labels": TOKEN_ID["<T3>"]}
TRUTH_KEY = {"sets": "truth", "ratings": "center", "labels": "ranking"}
PERMUTATIONS = list(itertools.permutations(range(N_CLASSES)))  # 24 rankings
PROMPT_LEN = {"sets": 12, "ratings": 6, "labels": 4}
MAX_LEN = 23  # longest prompt (12) + longest answer (10 items + eos)


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


def training_corpus(steps: int, batch_size: int, seed: int):
    """The whole training stream of one model as a ``datasets.Dataset``: ``steps`` batches of
    :func:`training_batch` (columns ``ids`` and ``target_mask``, one row per example, in training
    order), drawn from a numpy generator seeded with ``seed`` as ``train_lm`` would draw them live.
    Generated by code once and cached under data/cache/ (see :func:`replib.core.cached_dataset`)."""
    return cached_batches("bayes_structured_train", {"batch_size": int(batch_size)},
                          functools.partial(training_batch, int(batch_size)), steps=int(steps), seed=int(seed))


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
    """The strict phi (the format as declared first): answer tokens -> latent, or None (unparsable).

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
    """The lenient phi for sets: the set of items an answer names, reading a repeated item once
    ("A B A" -> {A, B}); None for a cut-off answer or a token that is not an item. Added after the
    first book run; since the revision of 2026-12-02 it is the reading the chapter judges sets with
    (:func:`interpret`)."""
    toks = answer_tokens(answer_ids)
    if toks is None or any(t not in _ITEM_OF for t in toks):
        return None
    S = np.zeros(N_ITEMS, dtype=bool)
    S[[_ITEM_OF[t] for t in toks]] = True
    return S


def interpret(task: str, answer_ids):
    """The phi the chapter judges with: :func:`parse_set_lenient` for sets (an answer that names an
    item twice still names a set), :func:`parse` for ratings and labels."""
    _check_task(task)
    return parse_set_lenient(answer_ids) if task == "sets" else parse(task, answer_ids)


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
# 3. Losses against the truth
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
# 4. Uncertainty evaluation
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


# --------------------------------------------------------------------------------------------
# 5. The noise floor: the entropy of the generator's answers (competence of a trained model)
# --------------------------------------------------------------------------------------------


def _binomial_pmf(n: int, p: float) -> np.ndarray:
    from math import comb

    return np.array([comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)])


@functools.lru_cache(maxsize=None)
def _set_entropy(size: int) -> float:
    """H of the answer string of a T1 prompt whose true set has ``size`` items: the noisy set S has
    H(S) = 10 h(RHO) (independent flips) and, given S, each of its |S|! orders is equally likely, so
    H = 10 h(RHO) + E[log |S|!], with |S| = Bin(size, 1 - RHO) + Bin(10 - size, RHO)."""
    from math import lgamma

    h = -(RHO * np.log(RHO) + (1 - RHO) * np.log(1 - RHO))
    pmf = np.convolve(_binomial_pmf(size, 1 - RHO), _binomial_pmf(N_ITEMS - size, RHO))
    return float(N_ITEMS * h + sum(p * lgamma(k + 1) for k, p in enumerate(pmf)))


def answer_entropy(task: str, truth) -> float:
    """The entropy (nats) of the training answer string of one prompt (:func:`noisy_answer`), the
    lowest mean negative log-likelihood per answer a model can reach on that prompt (the noise floor).

    * sets: 10 h(RHO) + E[log |S|!] (a set's orders are equally likely);
    * ratings: H(y) + P(y < 10) log 2 (every y < 10 has two spellings, "7" and "07"; "10" one);
    * labels: the entropy of the class-and-synonym distribution (the top class over 3 synonyms)."""
    _check_task(task)
    if task == "sets":
        return _set_entropy(int(np.sum(np.asarray(truth, dtype=bool))))
    if task == "ratings":
        p = {}
        for e, w in RATING_NOISE.items():
            y = int(np.clip(int(truth) + e, 0, MAX_RATING))
            p[y] = p.get(y, 0.0) + w
        return float(-sum(w * np.log(w) for w in p.values())
                     + np.log(2) * sum(w for y, w in p.items() if y < MAX_RATING))
    probs = [LABEL_PROBS[0] / 3] * 3 + list(LABEL_PROBS[1:])
    return float(-sum(w * np.log(w) for w in probs))


def heldout_examples(task: str, n: int, rng: np.random.Generator) -> dict:
    """n fresh training-style examples of one task (prompt + noisy answer, right-padded to MAX_LEN),
    with the answer mask and each prompt's noise floor :func:`answer_entropy`: keys ``ids``,
    ``target_mask``, ``entropy``, and the problems' own keys."""
    problems = sample_problems(task, n, rng)
    ids = np.full((n, MAX_LEN), PAD, dtype=np.int64)
    mask = np.zeros((n, MAX_LEN), dtype=bool)
    P = problems["prompt"].shape[1]
    entropy = np.empty(n)
    for r in range(n):
        truth = problems[TRUTH_KEY[task]][r]
        ans = noisy_answer(task, truth, rng)
        ids[r, :P] = problems["prompt"][r]
        ids[r, P:P + len(ans)] = ans
        mask[r, P:P + len(ans)] = True
        entropy[r] = answer_entropy(task, truth)
    return {**problems, "ids": ids, "target_mask": mask, "entropy": entropy}


def parse_set_named(answer_ids):
    """The items an answer names, whether or not it ended: :func:`parse_set_lenient`, except that an
    answer cut off at the token cap (no ``<eos>``) is read for the items among its tokens. Used only
    to check that dropping cut-off samples does not bias q_e (the judged reading drops them)."""
    ids = [int(t) for t in np.asarray(answer_ids, dtype=np.int64).ravel()]
    toks = ids[: ids.index(EOS)] if EOS in ids else [t for t in ids if t != PAD]
    if any(t not in _ITEM_OF for t in toks):
        return None
    S = np.zeros(N_ITEMS, dtype=bool)
    S[[_ITEM_OF[t] for t in toks]] = True
    return S
