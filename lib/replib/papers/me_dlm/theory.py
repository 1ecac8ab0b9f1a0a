"""Helpers of the ME-DLM theory notebook: the introduction's marginal-vs-joint example, worked
edit-label examples and the oracle stuck rate of the release's label builder.

Contents: :func:`marginal_vs_joint_example`, :func:`worked_edit_examples`, :func:`oracle_stuck_rate`.
"""

from __future__ import annotations

import numpy as np

from .method import (
    EOS,
    PAD,
    apply_edits,
    apply_edits_batch,
    edit_labels,
    edit_labels_batch,
    edit_script,
    levenshtein,
    levenshtein_batch,
)

__all__ = [
    "marginal_vs_joint_example",
    "worked_edit_examples",
    "oracle_stuck_rate",
]


def _random_pair(rng, vocab, max_len, max_edits):
    target = list(rng.integers(0, vocab, size=int(rng.integers(1, max_len + 1))))
    draft = list(target)
    for _ in range(int(rng.integers(1, max_edits + 1))):
        op = rng.integers(3)
        if op == 0 and draft:
            draft[rng.integers(len(draft))] = int(rng.integers(vocab))
        elif op == 1 and draft:
            del draft[rng.integers(len(draft))]
        elif len(draft) < max_len:
            draft.insert(int(rng.integers(len(draft) + 1)), int(rng.integers(vocab)))
    return [int(t) for t in draft], [int(t) for t in target]


def oracle_stuck_rate(n_pairs: int = 20000, vocab: int = 5, max_len: int = 12, max_edits: int = 6,
                      check_gap0: bool = False, seed: int = 0) -> float:
    """Share of random (draft, target) pairs at positive distance where one oracle pass (labels of
    :func:`edit_labels` applied with :func:`apply_edits`) does not reduce the edit distance.

    Targets: length uniform in 1..``max_len``, tokens uniform over ``vocab``; drafts: 1..``max_edits``
    random replace/delete/insert operations (length capped at ``max_len``). Pairs at distance 0 are
    skipped.

    Computed in blocks with the batched twins (:func:`levenshtein_batch`, :func:`edit_labels_batch`,
    :func:`apply_edits_batch`), which give the same distances, labels and updates as the per-pair
    functions, on the same sequence of pairs; tokens must be ids below ``<del>``."""
    if vocab > 10:
        raise ValueError("oracle_stuck_rate: vocab must be at most 10 (the digit ids)")
    rng = np.random.default_rng(seed)
    stuck = counted = 0
    while counted < n_pairs:  # each block draws at most the pairs still needed
        pairs = [_random_pair(rng, vocab, max_len, max_edits) for _ in range(n_pairs - counted)]
        before = levenshtein_batch([d for d, _ in pairs], [t for _, t in pairs])
        pairs = [pair for pair, b in zip(pairs, before) if b > 0]
        before = before[before > 0]
        if not pairs:
            continue
        drafts, targets = [d for d, _ in pairs], [t for _, t in pairs]
        r, g = edit_labels_batch(drafts, targets, check_gap0)
        seq = np.full(r.shape, PAD, dtype=np.int64)
        for i, d in enumerate(drafts):
            seq[i, :len(d) + 1] = d + [EOS]
        after, lengths = apply_edits_batch(seq, np.array([len(d) + 1 for d in drafts]), r, g, cap=2 * r.shape[1])
        dist = levenshtein_batch([list(row[:n]) for row, n in zip(after, lengths)], [t + [EOS] for t in targets])
        stuck += int((dist >= before).sum())
        counted += len(pairs)
    return stuck / n_pairs


def marginal_vs_joint_example() -> dict:
    """The introduction's example: data {"2+2=4", "2+3=5", "3+2=5"} (uniform). Returns the
    per-position marginals (list of {char: prob}), the probability that sampling every position
    independently from its marginal gives one of the three (12/27), the greedy-parallel output
    (argmax of each marginal) and whether it is valid."""
    data = ["2+2=4", "2+3=5", "3+2=5"]
    marg = []
    for i in range(len(data[0])):
        chars = [s[i] for s in data]
        marg.append({c: chars.count(c) / len(data) for c in sorted(set(chars))})
    p_valid = sum(float(np.prod([marg[i][c] for i, c in enumerate(s)])) for s in data)
    greedy = "".join(max(m, key=m.get) for m in marg)
    return {"data": data, "marginals": marg, "p_valid_independent": p_valid, "p_valid_sequential": 1.0,
            "greedy_parallel": greedy, "greedy_valid": greedy in data}


def worked_edit_examples() -> list[dict]:
    """The theory notebook's examples, with string tokens: script, labels, the text after one
    oracle pass and the passes needed to reach the target."""
    out = []
    for a, b in [("2+2=5", "2+2=4"), ("abcd", "abd"), ("abcd", "abxcd"), ("ab", "axyb"), ("cb", "ccb")]:
        seq, passes = list(a), 0
        after_one = None
        while seq != list(b) and passes < 5:
            r, g = edit_labels(seq, list(b), eos="<eos>", delete="<del>")
            seq = apply_edits(seq + ["<eos>"], r, g, delete="<del>")[:-1]
            passes += 1
            after_one = after_one or "".join(seq)
        token, gap = edit_labels(list(a), list(b), eos="<eos>", delete="<del>")
        out.append({"draft": a, "target": b, "distance": levenshtein(a, b), "script": edit_script(a, b),
                    "token_labels": token, "gap_labels": gap, "after_one_pass": after_one if passes else a,
                    "passes_to_target": passes if seq == list(b) else None})
    return out
