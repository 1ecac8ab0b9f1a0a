"""The toy ME-DLM is applied to, "one prompt, three valid answers": a prompt is a digit string of
length 2-3, its valid answers are its reverse, its sorted digits and every digit doubled. Prompts,
answers and training batches, the validity of a response and its distance to the nearest valid
answer (the task metrics), and readable tokens.

Contents: :func:`valid_answers`, :func:`is_valid`, :func:`nearest_valid_distance`,
:data:`MODES`, :func:`nearest_mode`, :func:`draw_prompts`, :func:`response_answer`, :func:`detok` (and the training batch
``_training_batch``, the metrics ``_response_valid``, ``_response_distance``). The token ids and
the sequence layout are in :mod:`.method`.
"""

from __future__ import annotations

import numpy as np

from .method import DEL, EOS, MASK, MAX_PROMPT, MIN_PROMPT, PAD, SEP, levenshtein

__all__ = [
    "valid_answers",
    "is_valid",
    "nearest_valid_distance",
    "MODES",
    "nearest_mode",
    "draw_prompts",
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


def draw_prompts(n: int, rng: np.random.Generator) -> list[tuple]:
    """n prompts: length uniform in {``MIN_PROMPT``, ..., ``MAX_PROMPT``} (2 or 3), digits uniform."""
    lengths = rng.integers(MIN_PROMPT, MAX_PROMPT + 1, size=n)
    return [tuple(int(d) for d in rng.integers(0, 10, size=k)) for k in lengths]


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


def _training_batch(batch: int, rng):
    prompts = draw_prompts(batch, rng)
    answers = [valid_answers(x)[rng.integers(3)] for x in prompts]
    return prompts, answers
