"""The toy world: tables on an 8x8 canvas, their assembly traces, the 2x2-patch image tokens, the
token sequences of the three variants, and the deterministic metric parsers.

A table is a top (a horizontal bar of width 5-8 in row 0-2) and ``k`` legs (1-pixel vertical bars
from under the top to the floor): two at the ends of the top, the rest at random interior columns,
not adjacent to each other or to the ends. The trace adds one part per step in parent-before-child
order (top, left leg, right leg, interior legs); the rationale tokens are *relative* (``LEG_LEFT``,
...), so the exact geometry lives only in the rendered states (a toy of our own design, not from the paper).
"""

from __future__ import annotations

import numpy as np

from .method import IMG0, IMG_LEN, TOK, VOCAB

__all__ = [
    "H", "W", "COUNTS", "VOCAB", "TOK", "IMG_LEN", "sample_table", "render_states",
    "image_tokens", "tokens_to_image", "build_sequence", "count_legs", "is_connected",
    "trace_stable",
]

H = W = 8
COUNTS = (2, 3)
PATCH = 2
assert IMG_LEN == (H // PATCH) * (W // PATCH)  # the model's 16 image tokens per state
VARIANTS = ("direct", "text_cot", "sot")


def sample_table(rng: np.random.Generator, k: int) -> list[tuple[str, np.ndarray]]:
    """One table with ``k`` legs as its parts in trace order: ``[(rationale, mask), ...]``, each mask
    an ``(H, W)`` boolean array of that part's pixels."""
    width = int(rng.integers(max(5, 2 * k - 1), W + 1))
    x0 = int(rng.integers(0, W - width + 1))
    row = int(rng.integers(0, 3))
    inner = list(range(x0 + 2, x0 + width - 2))
    interior: list[int] = []
    while len(interior) < k - 2:  # non-adjacent interior columns (rejection sampling)
        cols = sorted(rng.choice(inner, size=k - 2, replace=False).tolist())
        if all(b - a > 1 for a, b in zip(cols, cols[1:])):
            interior = cols

    def part(rows, cols):
        m = np.zeros((H, W), bool)
        m[rows, cols] = True
        return m

    parts = [("TOP", part(row, slice(x0, x0 + width)))]
    legs = [("LEG_LEFT", x0), ("LEG_RIGHT", x0 + width - 1)] + [("LEG_INTERIOR", c) for c in interior]
    parts += [(name, part(slice(row + 1, H), c)) for name, c in legs]
    return parts


def render_states(parts) -> list[np.ndarray]:
    """The cumulative renders I_n = I_{n-1} + part_n of a trace (the offline SoT-26K idea)."""
    states, canvas = [], np.zeros((H, W), bool)
    for _, mask in parts:
        canvas = canvas | mask
        states.append(canvas.copy())
    return states


def image_tokens(img: np.ndarray) -> np.ndarray:
    """An (H, W) binary image as 16 token ids, one per 2x2 patch (raster order, code = 4 bits)."""
    p = img.reshape(H // PATCH, PATCH, W // PATCH, PATCH).transpose(0, 2, 1, 3).reshape(-1, 4)
    return IMG0 + p.astype(int) @ np.array([1, 2, 4, 8])


def tokens_to_image(tokens) -> np.ndarray:
    """Inverse of :func:`image_tokens` (a MASK or text token decodes to an empty patch)."""
    codes = np.asarray(tokens) - IMG0
    codes = np.where((codes >= 0) & (codes < 16), codes, 0)
    bits = (codes[:, None] >> np.arange(4)) & 1
    return bits.reshape(H // PATCH, W // PATCH, PATCH, PATCH).transpose(0, 2, 1, 3).reshape(H, W).astype(bool)


def build_sequence(variant: str, k: int, parts) -> tuple[list[int], list[bool]]:
    """The token sequence of one training record and which tokens are image tokens.

    direct: ``TABLE K ASSEMBLY [final]``; text_cot: ``TABLE K r_1 .. r_n ASSEMBLY [final]``;
    sot: ``TABLE K (r_i [I_i])_i ASSEMBLY [final]`` (the release data loader's order: prompt, then
    each rationale followed by its rendered state, then the final assembly and the final image).
    """
    states = render_states(parts)
    seq, is_img = [TOK["TABLE"], TOK[f"K{k}"]], [False, False]
    for (name, _), state in zip(parts, states):
        if variant in ("text_cot", "sot"):
            seq.append(TOK[name])
            is_img.append(False)
        if variant == "sot":
            seq += image_tokens(state).tolist()
            is_img += [True] * IMG_LEN
    seq += [TOK["ASSEMBLY"]] + image_tokens(states[-1]).tolist()
    is_img += [False] + [True] * IMG_LEN
    return seq, is_img


def _components(img: np.ndarray) -> int:
    """Number of 4-connected components of the on-pixels."""
    seen, n = np.zeros_like(img, bool), 0
    for r, c in zip(*np.nonzero(img)):
        if seen[r, c]:
            continue
        n += 1
        stack = [(r, c)]
        seen[r, c] = True
        while stack:
            y, x = stack.pop()
            for yy, xx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if 0 <= yy < img.shape[0] and 0 <= xx < img.shape[1] and img[yy, xx] and not seen[yy, xx]:
                    seen[yy, xx] = True
                    stack.append((yy, xx))
    return n


def count_legs(img: np.ndarray) -> int:
    """Component numeracy parser: the number of 4-connected components below the top row (the
    first row with a pixel); 0 for an empty image."""
    rows = np.nonzero(img.any(axis=1))[0]
    return 0 if len(rows) == 0 else _components(img[rows[0] + 1:])


def is_connected(img: np.ndarray) -> bool:
    """Structural topology parser: the object is one 4-connected component (and not empty)."""
    return _components(img) == 1


def trace_stable(states) -> bool:
    """Trace stability parser: every state contains the one before and adds at least one pixel."""
    return all((b >= a).all() and b.sum() > a.sum() for a, b in zip(states, states[1:]))
