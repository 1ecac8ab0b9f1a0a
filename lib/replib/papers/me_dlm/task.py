"""The toy ME-DLM is applied to, "one prompt, three valid answers": a prompt is a digit string of
length 2-3, its valid answers are its reverse, its sorted digits and every digit doubled. Prompts,
answers and training batches, the validity of a response and its distance to the nearest valid
answer (the task metrics), and readable tokens.

Contents: :func:`valid_answers`, :func:`is_valid`, :func:`nearest_valid_distance`,
:data:`MODES`, :func:`nearest_mode`, :func:`draw_prompts`, :func:`training_corpus` (the generated
training set, a cached ``datasets.Dataset``), :func:`corpus_examples`, :func:`edit_targets` (the
reference of an edit-mode draft among the three valid answers), :func:`response_answer`,
:func:`detok` (and the metrics ``_response_valid``, ``_response_distance``). The token ids and the
sequence layout are in :mod:`.method`.
"""

from __future__ import annotations

import numpy as np

from .method import DEL, EOS, MASK, MAX_PROMPT, MIN_PROMPT, PAD, SEP, levenshtein, levenshtein_batch

__all__ = [
    "valid_answers",
    "is_valid",
    "nearest_valid_distance",
    "MODES",
    "nearest_mode",
    "HELDOUT_SHARE",
    "prompt_split",
    "draw_prompts",
    "training_corpus",
    "corpus_examples",
    "edit_targets",
    "response_answer",
    "detok",
]

_NAMES = {SEP: "|", MASK: "_", DEL: "<del>", EOS: "<eos>", PAD: "<pad>"}


def valid_answers(prompt) -> list[tuple]:
    """The three valid answers of a digit prompt: reverse, sort, every digit doubled (as tuples;
    duplicates possible when two coincide)."""
    x = tuple(int(d) for d in prompt)
    return [x[::-1], tuple(sorted(x)), tuple(d for d in x for _ in range(2))]


def is_valid(prompt, answer) -> bool:
    """True iff ``answer`` (a digit sequence) equals one of :func:`valid_answers`."""
    return tuple(int(a) for a in answer) in valid_answers(prompt)


def nearest_valid_distance(prompt, answer) -> int:
    """Levenshtein distance from ``answer`` to the nearest valid answer."""
    return min(levenshtein(list(answer), list(v)) for v in valid_answers(prompt))


MODES = ("reverse", "sorted", "doubled")


def nearest_mode(prompt, answer) -> int:
    """Index in :data:`MODES` of the valid answer nearest to ``answer`` (Levenshtein; the first on
    ties): the answer mode a response was heading for."""
    return int(np.argmin([levenshtein(list(answer), list(v)) for v in valid_answers(prompt)]))


HELDOUT_SHARE = 0.3  # share of the prompts of each length kept out of every training corpus


def prompt_split() -> dict[str, dict[int, np.ndarray]]:
    """The fixed split of the prompt space into training and held-out prompts, the same for every
    seed: for each length k in {``MIN_PROMPT``, ..., ``MAX_PROMPT``}, a permutation of the 10^k digit
    strings (one numpy Generator seeded ``[43, 2026]``) whose first ``HELDOUT_SHARE`` are held out
    (30 of the 100 two-digit prompts, 300 of the 1,000 three-digit ones). Returns
    ``{"train": {k: (m, k) array}, "heldout": {k: (m', k) array}}``; no held-out prompt appears in
    any training corpus."""
    rng = np.random.default_rng([43, 2026])
    out = {"train": {}, "heldout": {}}
    for k in range(MIN_PROMPT, MAX_PROMPT + 1):
        allp = np.array(np.unravel_index(np.arange(10 ** k), (10,) * k)).T
        order = rng.permutation(len(allp))
        cut = int(round(HELDOUT_SHARE * len(allp)))
        out["heldout"][k], out["train"][k] = allp[order[:cut]], allp[order[cut:]]
    return out


_SPLIT = prompt_split()


def draw_prompts(n: int, rng: np.random.Generator, pool: str | None = None) -> list[tuple]:
    """n prompts: length uniform in {``MIN_PROMPT``, ..., ``MAX_PROMPT``} (2 or 3); then digits
    uniform (``pool=None``, the whole prompt space) or a prompt drawn uniformly from that length's
    ``"train"`` or ``"heldout"`` part of :func:`prompt_split`."""
    lengths = rng.integers(MIN_PROMPT, MAX_PROMPT + 1, size=n)
    if pool is None:
        return [tuple(int(d) for d in rng.integers(0, 10, size=k)) for k in lengths]
    part = _SPLIT[pool]
    return [tuple(int(d) for d in part[k][rng.integers(len(part[k]))]) for k in lengths]


def response_answer(response) -> tuple:
    """The answer a response stands for: its tokens before the first EOS (all if none)."""
    response = [int(t) for t in response]
    return tuple(response[:response.index(EOS)] if EOS in response else response)


def _response_valid(prompt, response) -> bool:
    answer = response_answer(response)
    return all(0 <= t <= 9 for t in answer) and is_valid(prompt, answer)


def _response_distance(prompt, response) -> int:
    return nearest_valid_distance(prompt, response_answer(response))


def detok(tokens) -> list[str]:
    """Readable token strings (digits as themselves, specials as ``|``, ``_``, ``<del>``...)."""
    return [_NAMES.get(int(t), str(int(t))) for t in tokens]


def _corpus_rows(seed: int, rows: int) -> dict:
    """The columns of :func:`training_corpus`, drawn with one numpy Generator."""
    rng = np.random.default_rng([seed, 2026])
    prompts = draw_prompts(rows, rng, pool="train")
    modes = rng.integers(len(MODES), size=rows)
    answers = [valid_answers(x)[m] for x, m in zip(prompts, modes)]
    text = lambda seq: "".join(map(str, seq))  # noqa: E731
    return {"prompt": [text(x) for x in prompts], "answer": [text(a) for a in answers],
            "mode": [MODES[m] for m in modes]}


def training_corpus(seed: int, rows: int):
    """The generated training set of one seed: ``rows`` examples (prompt, answer, mode), each a
    training prompt from :func:`draw_prompts` (``pool="train"``: no held-out prompt) and one of its three valid answers drawn uniformly, as digit
    strings. A ``datasets.Dataset`` built once per (seed, rows) and cached
    (:func:`replib.core.cached_dataset`); training reads it in order, ``batch`` rows per step."""
    from replib.core import cached_dataset

    return cached_dataset("me_dlm_corpus", {"seed": int(seed), "rows": int(rows), "split": "heldout30"},
                          lambda: _corpus_rows(int(seed), int(rows)))


def corpus_examples(ds, start: int, stop: int) -> tuple[list[tuple], list[tuple]]:
    """Rows ``start:stop`` of a :func:`training_corpus` as (prompts, answers), tuples of ints."""
    part = ds[start:stop]
    digits = lambda text: tuple(int(c) for c in text)  # noqa: E731
    return [digits(x) for x in part["prompt"]], [digits(a) for a in part["answer"]]


def edit_targets(prompts, drawn, drafts) -> list[tuple]:
    """The reference each edit-mode draft is labelled against: the valid answer nearest to the draft
    (Levenshtein, the draft without its final token), the drawn answer on ties. The release has one
    reference per prompt and labels against it; the toy has three, and a draft filled from the drawn
    answer is often another valid answer (or near one), which labels against the drawn answer would
    ask the model to rewrite. With a single valid answer this is the release's rule."""
    options = [valid_answers(x) for x in prompts]
    heads = [list(d[:-1]) for d in drafts]
    dist = np.stack([levenshtein_batch(heads, [list(o[k]) for o in options]) for k in range(len(MODES))], axis=1)
    out = []
    for i, (target, opts) in enumerate(zip(drawn, options)):
        nearest = int(np.argmin(dist[i]))
        own = dist[i, opts.index(tuple(target))]
        out.append(tuple(target) if own == dist[i, nearest] else opts[nearest])
    return out
