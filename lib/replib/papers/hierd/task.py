"""The toy world of the HieRD chapter: scenes of coloured, patterned tiles, grounding questions about
them, and the retrieval metrics.

A scene is a 24 x 24 RGB image on a smooth random-colour background with three tiles (a colour from
:data:`COLOURS` and a fill pattern from :data:`SHAPES`, three distinct pairs) in three of the four
12 x 12 cells of a 2 x 2 layout. The query is the image with a question in MMEB's VQA form, "what is
in the top left cell"; the target is the answer phrase "a red check", retrieved among the 16
colour x pattern phrases. The grammar emits the text groups HieRD needs (noun-chunk phrases and
their words), so no parser is needed. (Spatial-relation questions, "what is west of the blue
square", and shapes instead of patterns were piloted first: the teacher did not learn them at this
budget.)

Contents: :data:`VOCAB`, :func:`render_scene`, :func:`draw_example`, :func:`build_scenes` (the
generated data set, a ``datasets.Dataset``), :func:`as_arrays`, :func:`answer_phrases`,
:func:`patch_labels` (ground-truth object label of each patch), :func:`retrieval_metrics`.
"""

from __future__ import annotations

import numpy as np

from .method import IMAGE

__all__ = [
    "COLOURS", "SHAPES", "ROWS", "COLUMNS", "VOCAB", "TOKEN", "IMAGE", "CELL", "QUESTION_LEN", "ANSWER_LEN",
    "QUESTION_PHRASES", "ANSWER_PHRASES", "render_scene", "draw_example", "build_scenes", "as_arrays",
    "answer_phrases", "patch_labels", "retrieval_metrics",
]

COLOURS = {"red": (0.9, 0.1, 0.1), "green": (0.1, 0.8, 0.2), "blue": (0.15, 0.25, 0.95), "yellow": (0.95, 0.85, 0.1)}
SHAPES = ("block", "stripe", "bar", "check")  # fill patterns of a square tile: solid, horizontal, vertical, checked
ROWS, COLUMNS = ("top", "bottom"), ("left", "right")  # the cell a question names: "the top left cell"
VOCAB = ("<pad>", "<eos>", "what", "is", "in", "the", "cell", "a", *ROWS, *COLUMNS, *COLOURS, *SHAPES)
TOKEN = {w: i for i, w in enumerate(VOCAB)}
CELL = 12
DARK = 0.35  # the shade of a tile's off pixels
QUESTION_LEN, ANSWER_LEN = 7, 3  # "what is in the top left cell", "a red check"
# Text groups as token spans [start, end): the noun chunks a parser finds ("what", "the top left cell";
# "a red check"), the phrase groups of HieRD; their words are the word groups.
QUESTION_PHRASES = ((0, 1), (3, 7))
ANSWER_PHRASES = ((0, 3),)


def _pattern(shape: str, size: int) -> np.ndarray:
    """Where a size x size tile of pattern ``shape`` takes its full colour (elsewhere a dark shade):
    everywhere (block), even rows (stripe), even columns (bar), a 1-px checkerboard (check)."""
    y, x = np.mgrid[:size, :size]
    if shape == "block":
        return np.ones((size, size), bool)
    if shape == "stripe":
        return y % 2 == 0
    if shape == "bar":
        return x % 2 == 0
    if shape == "check":
        return (x + y) % 2 == 0
    raise ValueError(f"unknown pattern {shape!r}; valid: {SHAPES}")


def _background(rng: np.random.Generator) -> np.ndarray:
    """A smooth random-colour texture (a few low-frequency cosines per channel around mid grey)."""
    y, x = np.mgrid[:IMAGE, :IMAGE] / IMAGE
    img = np.full((3, IMAGE, IMAGE), 0.45)
    for ch in range(3):
        for _ in range(3):
            fx, fy = rng.uniform(0.5, 2.0, size=2)
            phase = rng.uniform(0, 2 * np.pi)
            img[ch] += 0.06 * np.cos(2 * np.pi * (fx * x + fy * y) + phase)
    return img


def render_scene(objects: list[tuple[str, str, int]], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``objects`` = [(colour, shape, cell)] (cell 0..3, row-major in the 2 x 2 layout), each of
    size 11-12 px at a random offset in its cell, on a random background. Returns the image (3, 24, 24)
    in [0, 1] and the object mask (24, 24): the object's index in ``objects``, -1 for background."""
    img = _background(rng)
    mask = np.full((IMAGE, IMAGE), -1)
    for k, (colour, shape, cell) in enumerate(objects):
        size = int(rng.integers(11, 13))
        top = (cell // 2) * CELL + int(rng.integers(0, CELL - size + 1))
        left = (cell % 2) * CELL + int(rng.integers(0, CELL - size + 1))
        full = _pattern(shape, size)
        region = (slice(top, top + size), slice(left, left + size))
        for ch in range(3):
            value = COLOURS[colour][ch] + rng.normal(0, 0.03)
            img[ch][region] = np.where(full, value, DARK * value)
        mask[region] = k
    return np.clip(img, 0.0, 1.0), mask


def draw_example(rng: np.random.Generator) -> dict:
    """One scene with one question: three distinct (colour, pattern) tiles in three random cells;
    the question names one of the three occupied cells, drawn uniformly. Returns the image, mask,
    the tiles (phrase ids, cells), question and answer token ids and the answer's index among the
    16 phrases (:func:`answer_phrases`)."""
    pairs = rng.choice(16, size=3, replace=False)
    cells = rng.choice(4, size=3, replace=False)
    objects = [(list(COLOURS)[p // 4], SHAPES[p % 4], int(c)) for p, c in zip(pairs, cells)]
    ans = int(rng.integers(3))
    image, mask = render_scene(objects, rng)
    cell = objects[ans][2]
    question = ["what", "is", "in", "the", ROWS[cell // 2], COLUMNS[cell % 2], "cell"]
    answer = ["a", objects[ans][0], objects[ans][1]]
    return {"image": image.astype(np.float32), "mask": mask.astype(np.int8),
            "question": [TOKEN[w] for w in question], "answer": [TOKEN[w] for w in answer],
            "answer_id": int(pairs[ans]), "object_ids": [int(p) for p in pairs], "cells": [int(c) for c in cells],
            "text": " ".join(question) + " -> " + " ".join(answer)}


def build_scenes(n: int, seed: int, name: str = "hierd_scenes"):
    """``n`` examples of :func:`draw_example` from ``np.random.default_rng(seed)``, as a cached
    ``datasets.Dataset`` (images flattened to 1728 floats, masks to 576 labels)."""
    from replib.core import cached_dataset

    def build():
        rng = np.random.default_rng(seed)
        rows = []
        for _ in range(n):
            ex = draw_example(rng)
            ex["image"] = ex["image"].reshape(-1).tolist()
            ex["mask"] = ex["mask"].reshape(-1).tolist()
            rows.append(ex)
        return rows

    return cached_dataset(name, {"n": n, "seed": seed}, build)


def as_arrays(ds) -> dict:
    """The columns the models need as numpy arrays: images (n, 3, 24, 24), masks (n, 24, 24),
    questions (n, 7), answers (n, 3), answer_id (n,), object_ids (n, 3)."""
    table = ds.data.table if hasattr(ds.data, "table") else ds.data

    def column(name, dtype, shape):
        values = table.column(name).combine_chunks()
        while hasattr(values, "flatten"):
            values = values.flatten()
        return values.to_numpy(zero_copy_only=False).astype(dtype).reshape(shape)

    n = len(ds)
    return {"images": column("image", np.float32, (n, 3, IMAGE, IMAGE)),
            "masks": column("mask", np.int64, (n, IMAGE, IMAGE)),
            "questions": column("question", np.int64, (n, QUESTION_LEN)),
            "answers": column("answer", np.int64, (n, ANSWER_LEN)),
            "answer_id": column("answer_id", np.int64, (n,)),
            "object_ids": column("object_ids", np.int64, (n, 3))}


def answer_phrases() -> np.ndarray:
    """The 16 candidate answers "a <colour> <shape>" as token ids (16, 3); phrase p is colour p // 4,
    shape p % 4."""
    return np.array([[TOKEN["a"], TOKEN[c], TOKEN[s]] for c in COLOURS for s in SHAPES], np.int64)


def patch_labels(masks: np.ndarray, patch: int) -> np.ndarray:
    """Ground-truth object label of each patch of a ``patch``-px grid (row-major): the object covering
    most of the patch's pixels, -1 when background covers at least half of it. (n, (24/patch)^2)."""
    n, g = masks.shape[0], IMAGE // patch
    blocks = masks.reshape(n, g, patch, g, patch).transpose(0, 1, 3, 2, 4).reshape(n, g * g, patch * patch)
    counts = np.stack([(blocks == k).sum(-1) for k in range(3)], axis=-1)
    best = counts.argmax(-1)
    return np.where(counts.max(-1) * 2 > patch * patch, best, -1)


def retrieval_metrics(scores: np.ndarray, answer_id: np.ndarray, object_ids: np.ndarray) -> dict:
    """From query x candidate scores (n, 16): ``p_at_1``, the share of queries whose best candidate
    is the answer (16-way retrieval, chance 1/16), and ``in_scene``, the share whose answer scores
    above the two other objects of its scene (the grounding hard negatives, chance 1/3)."""
    p1 = float((scores.argmax(1) == answer_id).mean())
    in_scene = scores[np.arange(len(scores))[:, None], object_ids]
    best_in_scene = object_ids[np.arange(len(scores)), in_scene.argmax(1)]
    return {"p_at_1": p1, "in_scene": float((best_in_scene == answer_id).mean())}
