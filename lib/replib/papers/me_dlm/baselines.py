"""The headroom arm of the ME-DLM experiment: edit passes whose proposals come from an oracle
labeller instead of the edit heads. The compute-matched MDLM baseline is the same phase-1 checkpoint
continued in mask mode (a few lines of :func:`.experiment.run_seed`); the substitution-only ablation
is a flag of :func:`.method.edit_passes`.

Contents: :func:`oracle_edit_passes`.
"""

from __future__ import annotations

import numpy as np

from .method import (
    CANVAS,
    EOS,
    IGNORE,
    PAD,
    _as_array,
    _as_lists,
    apply_edits_batch,
    edit_labels_batch,
    levenshtein_batch,
)
from .task import MODES, valid_answers

__all__ = ["oracle_edit_passes"]


def oracle_edit_passes(prompts, responses, E: int) -> dict:
    """E edit passes in which the proposals r and g of each pass are the release's edit labels
    (:func:`.method.edit_labels_batch`, steps 1-7 of the canonical minimal edit script) of the
    current response (without its final token) against the valid answer nearest to it (Levenshtein, the
    first of reverse, sorted, doubled on ties), applied
    with the inference update of phase B (:func:`.method.apply_edits_batch`, truncated to the
    canvas). This is what a perfectly trained pair of edit heads would propose: the upper bound of
    what E edit passes can repair in a draft, measured through the same validity code as the model.
    Returns ``states`` (list over passes 0..E of the responses, as lists)."""
    seq, lengths = _as_array(responses)
    states = [_as_lists(seq, lengths)]
    for _ in range(E):
        current = states[-1]
        heads = [r[:-1] for r in current]
        options = [valid_answers(x) for x in prompts]
        dist = np.stack([levenshtein_batch(heads, [list(o[k]) for o in options]) for k in range(len(MODES))], 1)
        targets = [o[int(np.argmin(d))] for o, d in zip(options, dist)]
        token, gap = edit_labels_batch(heads, [list(t) for t in targets])
        width = token.shape[1]
        r = np.full((len(current), CANVAS), PAD, dtype=np.int64)
        g = np.full((len(current), CANVAS), IGNORE, dtype=np.int64)
        r[:, :min(width, CANVAS)] = token[:, :CANVAS]
        g[:, :min(width, CANVAS)] = gap[:, :CANVAS]
        seq, lengths = apply_edits_batch(seq, lengths, r, g)
        empty = lengths == 0
        seq[empty, 0], lengths[empty] = EOS, 1
        states.append(_as_lists(seq, lengths))
    return {"states": states}
