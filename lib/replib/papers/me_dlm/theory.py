"""Helpers of the ME-DLM theory notebook: the introduction's marginal-vs-joint example, worked
edit-label examples and the oracle stuck rate of the release's label builder.

Contents: :func:`marginal_vs_joint_example`, :func:`worked_edit_examples`, :func:`oracle_stuck_rate`.
"""

from __future__ import annotations

import numpy as np

from .method import apply_edits, edit_labels, edit_script, levenshtein

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
    skipped. Tokens ``vocab`` and ``vocab + 1`` play ``<eos>`` and ``<del>``."""
    rng = np.random.default_rng(seed)
    eos, dele = vocab, vocab + 1
    stuck = counted = 0
    while counted < n_pairs:
        d, t = _random_pair(rng, vocab, max_len, max_edits)
        before = levenshtein(d, t)
        if before == 0:
            continue
        r, g = edit_labels(d, t, check_gap0, eos=eos, delete=dele)
        after = levenshtein(apply_edits(d + [eos], r, g, delete=dele), t + [eos])
        stuck += after >= before
        counted += 1
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
