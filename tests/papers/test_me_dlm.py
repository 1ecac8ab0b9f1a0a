"""Unit tests of replib.papers.me_dlm (edit-based refinement of masked diffusion drafts)."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from replib.papers.me_dlm import exercises, experiment, method, task, theory

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def one_thread():
    from replib.core.runtime import compute_threads

    with compute_threads(1):
        yield


def test_toy_validity():
    x = (3, 1, 2)
    assert task.is_valid(x, (2, 1, 3)) and task.is_valid(x, (1, 2, 3)) and task.is_valid(x, (3, 3, 1, 1, 2, 2))
    assert not task.is_valid(x, (3, 1, 2)) and not task.is_valid(x, (1, 2))
    assert task.nearest_valid_distance(x, (1, 2, 4)) == 1
    assert task.nearest_valid_distance(x, (3, 3, 1, 2, 2)) == 1
    seq = np.concatenate([method.encode_prompts([(4, 2)]), method.clean_canvas([(2, 4)])], axis=1)[0]
    assert len(seq) == method.SEQ_LEN == 11 and method.CANVAS == 7
    assert list(seq[:4]) == [method.PAD, 4, 2, method.SEP]
    assert list(seq[4:7]) == [2, 4, method.EOS] and all(t == method.PAD for t in seq[7:])
    lengths = {len(p) for p in task.draw_prompts(200, np.random.default_rng(0))}
    assert lengths == {method.MIN_PROMPT, method.MAX_PROMPT} == {2, 3}
    assert [task.nearest_mode(x, a) for a in [(2, 1, 3), (1, 2, 3), (3, 3, 1, 1, 2, 2), (2, 1, 4), (3, 3, 1, 2, 2)]] == [
        0, 1, 2, 0, 2]
    assert task.response_answer([2, 1, 3, method.EOS, 5]) == (2, 1, 3)


def test_levenshtein_known_pairs():
    assert method.levenshtein("kitten", "sitting") == 3
    assert method.levenshtein("", "abc") == 3
    assert method.levenshtein("2+2=5", "2+2=4") == 1
    assert method.levenshtein("flaw", "lawn") == 2
    exercises.check_levenshtein(method.levenshtein)


def _one_insertion_per_gap(d, t):
    counts = {}
    for op, gap, _ in method.edit_script(d, t):
        if op == "insert":
            counts[gap] = counts.get(gap, 0) + 1
    return all(c <= 1 for c in counts.values())


def test_oracle_pass_reaches_target_with_distinct_tokens():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(400):
        pool = [int(v) for v in rng.permutation(20) + 100]  # away from the special ids
        target = pool[: rng.integers(1, 9)]
        draft = list(target)
        for _ in range(rng.integers(1, 4)):  # random edits with fresh, distinct tokens
            op = rng.integers(3)
            if op == 0 and draft:
                draft[rng.integers(len(draft))] = pool.pop()
            elif op == 1 and draft:
                del draft[rng.integers(len(draft))]
            else:
                draft.insert(int(rng.integers(len(draft) + 1)), pool.pop())
        if not _one_insertion_per_gap(draft, target):
            continue
        r, g = method.edit_labels(draft, target)
        assert len(r) == len(g) == len(draft) + 1 and r[-1] == method.EOS
        assert method.apply_edits(draft + [method.EOS], r, g) == target + [method.EOS]
        checked += 1
    assert checked > 200


def test_worked_examples_and_gap0_corner_case():
    ex = {(e["draft"], e["target"]): e for e in theory.worked_edit_examples()}
    assert ex[("2+2=5", "2+2=4")]["passes_to_target"] == 1
    assert ex[("abcd", "abd")]["passes_to_target"] == 1
    assert ex[("abcd", "abxcd")]["passes_to_target"] == 1
    assert ex[("ab", "axyb")]["passes_to_target"] == 2 and ex[("ab", "axyb")]["after_one_pass"] == "axb"
    # the release rule never checks gap 0: inserting a copy of the first token is dropped, so "cb" is stuck
    r, g = method.edit_labels(list("cb"), list("ccb"), eos="$", delete="#")
    assert method.apply_edits(list("cb$"), r, g, delete="#") == list("cb$")
    assert ex[("cb", "ccb")]["passes_to_target"] is None
    r, g = method.edit_labels(list("cb"), list("ccb"), check_gap0=True, eos="$", delete="#")
    assert method.apply_edits(list("cb$"), r, g, delete="#") == list("ccb$")


def test_stuck_rates_ballpark():
    release = theory.oracle_stuck_rate(1500, seed=1)
    fixed = theory.oracle_stuck_rate(1500, check_gap0=True, seed=1)
    assert 0.002 < release < 0.08
    assert fixed < release


def test_step_schedule_and_draft():
    assert method.step_schedule(11, 3) == [4, 4, 3]
    assert method.step_schedule(512, 48)[:32] == [11] * 32 and sum(method.step_schedule(512, 48)) == 512
    exercises.check_step_schedule(method.step_schedule)
    exercises.check_apply_edits(method.apply_edits)
    for L in range(1, 13):
        for S in range(1, L + 1):
            assert sum(method.step_schedule(L, S)) == L and len(method.step_schedule(L, S)) == S
    cfg = SimpleNamespace(n_layer=1, n_embd=16, n_head=2)
    model = method.new_model(cfg, 0)
    prompts = task.draw_prompts(6, np.random.default_rng(0))
    committed = []
    orig = model.forward

    def counting(ids, attention_mask=None):
        committed.append(int((ids == method.MASK).sum()))
        return orig(ids, attention_mask)

    model.forward = counting
    out = method.draft(model, prompts, 3)
    assert out["forward_passes"] == 3 and len(committed) == 3
    masks_left = committed + [0]
    assert [(a - b) // len(prompts) for a, b in zip(masks_left, masks_left[1:])] == method.step_schedule(method.CANVAS, 3)
    assert not (out["canvas"] == method.MASK).any()
    for resp in out["responses"]:
        assert method.PAD not in resp and resp[-1] == method.EOS


class Echo(torch.nn.Module):
    """Both heads put all mass on the input token (the insertion head on the *next* token): r = y, g = y."""

    def forward(self, ids, attention_mask=None):
        onehot = torch.nn.functional.one_hot(ids, method.VOCAB).float() * 10
        nxt = torch.roll(onehot, -1, dims=1)
        return onehot, nxt


def test_echo_model_converges_and_substitution_keeps_length():
    prompts = [(1, 2, 3), (4, 5, 6)]
    responses = [[3, 2, 1, method.EOS], [9, 9, method.EOS]]
    out = method.edit_passes(Echo(), prompts, responses, 3, keep_trace=2)
    assert out["states"][-1] == responses and list(out["real_steps"]) == [0, 0]
    model = method.new_model(SimpleNamespace(n_layer=1, n_embd=16, n_head=2), 0)
    sub = method.edit_passes(model, prompts, responses, 3, substitution_only=True)
    for state in sub["states"]:
        assert [len(s) for s in state] == [len(r) for r in responses]
        assert all(method.DEL not in s for s in state)


class Rules(torch.nn.Module):
    """A rule model, checkable by hand: the token head reads its own input token (7 -> <del>, 8 -> 9,
    [MASK] -> 7, <pad> -> 0, else itself); the insertion head of position p proposes the token head's label of
    position p + 1, except 6 before a 9 (one insertion before every 9). Records its inputs."""

    def __init__(self):
        super().__init__()
        self.calls, self.masks = [], []

    def forward(self, ids, attention_mask=None):
        self.calls.append(ids.clone())
        self.masks.append(attention_mask)
        rule = torch.arange(method.VOCAB)
        rule[7], rule[8], rule[method.MASK], rule[method.PAD] = method.DEL, 9, 7, 0
        nxt_ids = torch.roll(ids, -1, dims=1)
        nxt = torch.where(nxt_ids == 9, torch.full_like(ids, 6), rule[nxt_ids])
        onehot = torch.nn.functional.one_hot
        return onehot(rule[ids], method.VOCAB).float() * 10, onehot(nxt, method.VOCAB).float() * 10


def test_edit_passes_on_a_rule_model_worked_by_hand():
    """Phase B worked by hand on the rule model: deletions, replacements and the insertion before every 9 in
    parallel, the result cut at the canvas (7 tokens), an emptied response becomes [<eos>], real_steps = the
    pass index at which a response first stays put (E if never), the traces name the deleted, replaced and
    inserted positions; substitution-only keeps every length (a proposed <del> keeps the token)."""
    E = method.EOS
    responses = [[8, 8, 8, 9, 9, 1, E], [9, E], [7, 2, E], [3, 4, E], [7, 7]]
    model = Rules()
    out = method.edit_passes(model, [(1, 2, 3)] * 5, responses, 3, keep_trace=2)
    assert len(model.calls) == 3
    for ids, att, state in zip(model.calls, model.masks, out["states"]):  # prompt + response seen, padding hidden
        for b, resp in enumerate(state):
            n = method.RESP_START + len(resp)
            assert ids[b, :method.RESP_START].tolist() == [1, 2, 3, method.SEP] and ids[b, method.RESP_START:n].tolist() == resp
            assert att[b].tolist() == [1] * n + [0] * (method.SEQ_LEN - n) and att.dtype == torch.int64
    assert out["forward_passes"] == 3 and len(out["states"]) == 4 and out["states"][0] == responses
    assert out["states"][1] == [[9, 9, 9, 6, 9, 6, 9], [6, 9, E], [2, E], [3, 4, E], [E]]
    assert out["states"][2] == [[6, 9, 6, 9, 6, 9, 6], [6, 6, 9, E], [2, E], [3, 4, E], [E]]
    assert out["states"][3] == [[6, 6, 9, 6, 6, 9, 6], [6, 6, 6, 9, E], [2, E], [3, 4, E], [E]]
    assert out["real_steps"].tolist() == [3, 3, 1, 0, 1]
    first, second = out["traces"]
    assert len(first) == len(second) == 3
    assert first[0] == {"pass": 1, "before": [8, 8, 8, 9, 9, 1, E], "r": [9, 9, 9, 9, 9, 1, E],
                        "g": [9, 9, 9, 6, 6, 1, E], "deleted": [], "replaced": [0, 1, 2], "inserted": [3, 4],
                        "after": [9, 9, 9, 6, 9, 6, 9]}
    assert second[1] == {"pass": 2, "before": [6, 9, E], "r": [6, 9, E], "g": [6, 6, E], "deleted": [],
                         "replaced": [], "inserted": [1], "after": [6, 6, 9, E]}
    deleting = method.edit_passes(Rules(), [(1, 2)], [[7, 2, E]], 1, keep_trace=1)["traces"][0][0]
    assert deleting["deleted"] == [0] and deleting["replaced"] == [] and deleting["after"] == [2, E]
    assert method.edit_passes(Rules(), [(1, 2, 3)], [[9, E]], 1)["traces"] == []  # no traces unless asked
    sub = method.edit_passes(Rules(), [(1, 2, 3)] * 5, responses, 2, substitution_only=True)
    assert sub["states"][1] == [[9, 9, 9, 9, 9, 1, E], [9, E], [7, 2, E], [3, 4, E], [7, 7]] == sub["states"][2]
    assert sub["real_steps"].tolist() == [1, 0, 0, 0, 0]


class LateRules(Rules):
    """Echoes its input on every call but the second, where it applies the rules (a model that changes
    between passes, e.g. with dropout)."""

    def forward(self, ids, attention_mask=None):
        cur, nxt = super().forward(ids, attention_mask)
        if len(self.calls) != 2:
            onehot = torch.nn.functional.one_hot
            return onehot(ids, method.VOCAB).float() * 10, onehot(torch.roll(ids, -1, dims=1), method.VOCAB).float() * 10
        return cur, nxt


def test_real_steps_count_the_passes_before_the_first_convergence():
    """real_steps is the first pass at which a response stays put (r = y and g = y), even when a later pass
    changes it again: [7, 2, <eos>] is left alone at pass 0, edited at pass 1 ([2, <eos>]), left alone at 2."""
    E = method.EOS
    out = method.edit_passes(LateRules(), [(1, 2), (3, 4)], [[7, 2, E], [3, 4, E]], 3)
    assert out["states"] == [[[7, 2, E], [3, 4, E]], [[7, 2, E], [3, 4, E]], [[2, E], [3, 4, E]], [[2, E], [3, 4, E]]]
    assert out["real_steps"].tolist() == [0, 0]


def test_edit_mode_batch_fills_finishes_and_edits_with_the_current_model():
    """Edit mode's on-policy input by hand on the rule model: a row masked at t = 0 is its clean answer + <eos>,
    a row masked at t = 1 is filled with the model's token (7) everywhere, <pad> deleted and <eos> forced last;
    k edit passes then delete the 7s ([<eos>] is left)."""
    E = method.EOS
    prompts, answers, t = [(1, 2), (3, 4, 5)], [(2, 1), (5, 4, 3)], np.array([0.0, 1.0])
    rng = np.random.default_rng(0)
    assert method.edit_mode_batch(Rules(), prompts, answers, t, 0, rng) == [[2, 1, E], [7, 7, 7, 7, 7, 7, E]]
    model = Rules()
    assert method.edit_mode_batch(model, prompts, answers, t, 1, rng) == [[2, 1, E], [E]]
    fills = [c for c in model.calls if (c == method.MASK).any()]
    assert len(model.calls) == len(fills) + 1  # the fill passes, then one edit pass
    assert (fills[0][:, :method.RESP_START] == torch.as_tensor(method.encode_prompts(prompts))).all()
    assert not (fills[0][0] == method.MASK).any() and (fills[0][1, method.RESP_START:] == method.MASK).all()
    assert method.edit_mode_batch(Rules(), prompts, answers, t, 2, rng) == [[2, 1, E], [E]]
    # k passes: the response after the last one (each pass inserts a 6 before the 9)
    assert method.edit_mode_batch(Rules(), [(1, 9)], [(9, 1)], np.array([0.0]), 2, rng) == [[6, 6, 9, 1, E]]
    # a position is masked iff its draw u < t_b: t_b equal to the row's smallest draw masks nothing
    u = np.random.default_rng(3).random((1, method.CANVAS))
    assert method.edit_mode_batch(Rules(), [(1, 2)], [(2, 1)], u.min(1), 0, np.random.default_rng(3)) == [[2, 1, E]]
    # each position is masked on its own: at t = 0.5 some rows mix masked (7) and clean tokens
    mixed = method.edit_mode_batch(Rules(), [(1, 2, 3)] * 6, [(1, 2, 3, 3, 2, 1)] * 6, np.full(6, 0.5), 0,
                                   np.random.default_rng(0))
    assert any(7 in r and any(v in r for v in (1, 2, 3)) for r in mixed)
    # P is drawn uniformly from FILL_SIZES = (2, 4, CANVAS): the masks left before each fill pass of 7 masks
    seen = set()
    for seed in range(20):
        model = Rules()
        method.edit_mode_batch(model, prompts, answers, t, 0, np.random.default_rng(seed))
        seen.add(tuple(int((c[1] == method.MASK).sum()) for c in model.calls))
    assert seen == {(7, 5, 3, 1), (7, 3), (7,)}


class MaskCounter(torch.nn.Module):
    """Token head: every position proposes (number of [MASK] left in its row) mod 10, with <del> and [MASK]
    scored higher (both forbidden when filling)."""

    def forward(self, ids, attention_mask=None):
        logits = torch.zeros(*ids.shape, method.VOCAB)
        count = (ids == method.MASK).sum(1) % 10
        logits[torch.arange(len(ids)), :, count] = 5.0
        logits[..., method.DEL], logits[..., method.MASK] = 10.0, 9.0
        return logits, logits


def test_fill_masks_random_commits_p_per_pass_at_uniform_positions():
    """fill_masks_random: P masked positions per forward pass (fewer in the last), each the argmax with <del> and
    [MASK] forbidden, unmasked positions untouched, passes = ceil(max masks / P); the positions of the first
    pass are uniform over the masked ones."""
    M = method.MASK
    ids = np.array([[14, 1, 2, 10] + [M] * 7, [14, 3, 4, 10, 5, M, 6, M, M, 13, 14]])
    filled, passes = method.fill_masks_random(MaskCounter(), ids, 2, np.random.default_rng(0))
    assert passes == 4 and not (filled == M).any()
    assert np.array_equal(filled[ids != M], ids[ids != M])
    assert sorted(filled[0, 4:].tolist()) == [1, 3, 3, 5, 5, 7, 7]  # 7 masks: 2 at 7 left, 2 at 5, 2 at 3, 1 at 1
    assert sorted(filled[1, [5, 7, 8]].tolist()) == [1, 3, 3]
    assert ids[0, 4] == M  # the input is not changed
    firsts = np.zeros(7)
    for seed in range(140):
        out, n = method.fill_masks_random(MaskCounter(), ids[:1], 1, np.random.default_rng(seed))
        assert n == 7 and sorted(out[0, 4:].tolist()) == [1, 2, 3, 4, 5, 6, 7]
        firsts[int(np.flatnonzero(out[0, 4:] == 7)[0])] += 1
    assert firsts.min() > 8 and firsts.max() < 36  # 20 expected at each of the 7 positions


class Confidences(torch.nn.Module):
    """Fixed token-head logits per canvas position (the same in every row and pass), chosen so that the
    commit order is known by hand; records its inputs."""

    def __init__(self):
        super().__init__()
        table = torch.zeros(method.CANVAS, method.VOCAB)
        table[0, 3], table[0, method.PAD] = 2.0, 1.9  # conf e^2 / (e^2 + 11) = 0.40 once <pad> is forbidden
        table[1, 4], table[1, 5] = 2.0, 1.8  # conf e^2 / (e^2 + e^1.8 + 10) = 0.32
        table[2, method.DEL], table[2, 6] = 5.0, 3.0  # <del> forbidden: 6, conf e^3 / (e^3 + 11) = 0.65
        table[3, method.MASK], table[3, 1] = 5.0, 2.5  # [MASK] forbidden: 1, conf 0.53
        table[4, method.PAD] = 6.0  # <pad>: conf 0, committed last
        table[5, 2] = 4.0  # conf e^4 / (e^4 + 11) = 0.83, committed first
        table[6, 0] = 1.0  # conf e / (e + 11) = 0.20
        self.table, self.calls = table, []

    def forward(self, ids, attention_mask=None):
        self.calls.append(ids.clone())
        logits = torch.zeros(*ids.shape, method.VOCAB)
        logits[:, method.RESP_START:] = self.table
        return logits, logits


def test_draft_commits_the_most_confident_positions_first():
    """Phase A by hand: x^ = argmax with <del> and [MASK] forbidden, confidence = its softmax probability with
    <pad> forbidden too (0 for a predicted <pad>), the n_s most confident still-masked positions per pass;
    order 5, 2, 3, 0, 1, 6, 4; then <pad> deleted and <eos> forced last."""
    E, M, P = method.EOS, method.MASK, method.PAD
    for S, groups in ((7, [[5], [2], [3], [0], [1], [6], [4]]), (3, [[5, 2, 3], [0, 1], [6, 4]])):
        model = Confidences()
        out = method.draft(model, [(1, 2), (3, 4, 5)], S)
        assert out["forward_passes"] == S and len(model.calls) == S
        seen = [c[:, method.RESP_START:].numpy() for c in model.calls[1:]] + [out["canvas"]]
        for group, before, after in zip(groups, [np.full((2, 7), M)] + seen[:-1], seen):
            newly = sorted(np.flatnonzero((before[0] == M) & (after[0] != M)).tolist())
            assert newly == sorted(group), (S, group)
            assert np.array_equal(before != after, np.repeat((before[:1] != after[:1]), 2, axis=0))
        assert out["canvas"].tolist() == [[3, 4, 6, 1, P, 2, 0]] * 2
        assert out["responses"] == [[3, 4, 6, 1, 2, E]] * 2


def test_finish_draft_deletes_padding_and_forces_eos():
    """Phase A step 4 on hand rows: <pad> anywhere is deleted, the last remaining token becomes <eos>, an
    all-<pad> canvas gives [<eos>]."""
    P, E = method.PAD, method.EOS
    assert method._finish_draft([3, P, 4, P, 5, P, P]) == [3, 4, E]
    assert method._finish_draft([3, 4, E, P, P, P, P]) == [3, 4, E]
    assert method._finish_draft([P] * 7) == [E]
    assert method._finish_draft([6, 6, 6, 6, 6, 6, 6]) == [6, 6, 6, 6, 6, 6, E]


def _tiny_cfg():
    p = dict(experiment.EXPERIMENT_PROFILES["smoke"])
    p.update(profile="smoke", steps1=6, steps2=6, n_test=8, n_embd=16, n_head=2, batch=16)
    return SimpleNamespace(**p)


def test_claim_ids_and_determinism():
    cfg = _tiny_cfg()
    a = experiment.run_experiment(cfg)
    b = experiment.run_experiment(cfg)
    chapter = yaml.safe_load((ROOT / "notebooks" / "me_dlm" / "chapter.yml").read_text())
    ids = {c["id"] for c in chapter["claims"]}
    values = experiment.claim_values(a, cfg)
    assert set(values) == set(cfg.seeds) and set(values[0]) == ids
    assert values == experiment.claim_values(b, cfg) or all(
        np.isclose(values[0][k], experiment.claim_values(b, cfg)[0][k], equal_nan=True) for k in ids)
    assert a["validity"].equals(b["validity"]) and a["samples"].equals(b["samples"])
    assert len(a["traces"]) > 0


def _validity_rows(seed, mdlm, me, sub, drafts, oracle=None):
    """Rows in the shape of ``evaluate``'s ``validity``: ``mdlm`` {S: validity}; ``me`` {(S, E): validity}
    (full editing, E = 0 the draft); ``sub`` {E: validity} (substitution-only, 1-pass draft); ``drafts``
    {S: (valid drafts, {E: broken})}."""
    nan = float("nan")
    rows = [{"seed": seed, "model": "mdlm", "draft_passes": S, "edit_passes": 0, "mode": "none",
             "forward_passes": S, "validity": v, "distance": 1.0, "real_steps": nan} for S, v in mdlm.items()]
    for (S, E), v in me.items():
        row = {"seed": seed, "model": "me_dlm", "draft_passes": S, "edit_passes": E, "mode": "full" if E else "none",
               "forward_passes": S + E, "validity": v, "distance": 1.0, "real_steps": nan}
        if E:
            row.update(real_steps=float(E), valid_drafts=drafts[S][0], broken=drafts[S][1][E])
        rows.append(row)
    for E, v in sub.items():
        rows.append({"seed": seed, "model": "me_dlm", "draft_passes": 1, "edit_passes": E, "mode": "substitution",
                     "forward_passes": 1 + E, "validity": v, "distance": 1.0, "real_steps": float(E),
                     "valid_drafts": drafts[1][0], "broken": 0})
    for (S, E), v in (oracle or {}).items():
        rows.append({"seed": seed, "model": "oracle", "draft_passes": S, "edit_passes": E, "mode": "oracle",
                     "forward_passes": S + E, "validity": v, "distance": 1.0, "real_steps": nan})
    return rows


def test_claim_values_from_hand_made_rows():
    """claim_values on two hand-made seeds, every claim against a hand-computed number (decoys at the
    neighbouring pass counts, edit counts and modes, so a wrong pick, a swapped baseline or a sign
    error fails)."""
    import pandas as pd

    seed0 = _validity_rows(
        0, mdlm={1: 10.0, 2: 20.0, 3: 35.0, 4: 45.0, 5: 55.0, 7: 85.0},
        me={(1, 0): 12.0, (1, 1): 20.0, (1, 2): 41.0, (1, 4): 50.0, (3, 0): 40.0, (3, 1): 52.0, (3, 2): 63.0,
            (3, 4): 70.0},
        sub={1: 15.0, 2: 30.0, 4: 33.0},
        drafts={1: (4, {1: 1, 2: 2, 4: 3}), 3: (10, {1: 0, 2: 1, 4: 2})},
        oracle={(1, 1): 60.0, (1, 2): 80.0, (1, 4): 88.0, (3, 1): 75.0, (3, 2): 91.0, (3, 4): 95.0})
    seed1 = _validity_rows(
        1, mdlm={1: 5.0, 2: 15.0, 3: 30.0, 4: 40.0, 5: 60.0, 7: 90.0},
        me={(1, 0): 8.0, (1, 1): 18.0, (1, 2): 27.0, (1, 4): 33.0, (3, 0): 45.0, (3, 1): 50.0, (3, 2): 58.0,
            (3, 4): 61.0},
        sub={1: 10.0, 2: 35.0, 4: 36.0},
        drafts={1: (2, {1: 0, 2: 1, 4: 2}), 3: (5, {1: 0, 2: 0, 4: 1})},
        oracle={(1, 1): 50.0, (1, 2): 70.0, (1, 4): 78.0, (3, 1): 65.0, (3, 2): 81.0, (3, 4): 85.0})
    copied = pd.DataFrame([{"seed": seed, "edit_passes": E, "unchanged": u, "valid": 1.0}
                           for seed, us in ((1, (0.99, 0.97, 0.9)), (0, (0.98, 0.96, 0.5))) for E, u in zip((1, 2, 4), us)])
    results = {"validity": pd.DataFrame(seed1 + seed0), "copy": copied}  # seed 1 first: found by seed, not position
    cfg = SimpleNamespace(seeds=[0, 1])
    values = experiment.claim_values(results, cfg)
    chapter = yaml.safe_load((ROOT / "notebooks" / "me_dlm" / "chapter.yml").read_text())
    assert set(values) == {0, 1}
    expected = {
        0: {"p1_mdlm_learns_the_toy": 85.0,  # MDLM at CANVAS = 7 passes
            "p2_edits_keep_valid_answers": 0.96,  # unchanged after 2 edit passes (decoys at 1 and 4)
            "p3_room_at_3": 80.0 - 35.0,  # oracle edits, 1-pass draft + 2 - MDLM at 3
            "p4_room_at_5": 91.0 - 55.0,  # oracle edits, 3-pass draft + 2 - MDLM at 5
            "c1_parallel_breaks_validity": 10.0 - 85.0,  # MDLM 1 pass - 7 passes
            "c2_edits_repair": 41.0 - 12.0,  # 1-pass draft + 2 edits - the draft
            "c3a_equal_budget_3": 41.0 - 35.0,  # 1 + 2 edits - MDLM at 3
            "c3b_equal_budget_5": 63.0 - 55.0,  # 3 + 2 edits - MDLM at 5
            "c4_minimal_edits": (2 + 1) / (4 + 10),  # broken after 2 edits / valid drafts, 1- and 3-pass pooled
            "c5_full_vs_substitution": 41.0 - 30.0},  # full - substitution-only, 1-pass draft + 2 edits
        1: {"p1_mdlm_learns_the_toy": 90.0,
            "p2_edits_keep_valid_answers": 0.97,
            "p3_room_at_3": 70.0 - 30.0,
            "p4_room_at_5": 81.0 - 60.0,
            "c1_parallel_breaks_validity": 5.0 - 90.0,
            "c2_edits_repair": 27.0 - 8.0,
            "c3a_equal_budget_3": 27.0 - 30.0,
            "c3b_equal_budget_5": 58.0 - 60.0,
            "c4_minimal_edits": (1 + 0) / (2 + 5),
            "c5_full_vs_substitution": 27.0 - 35.0},
    }
    for seed in (0, 1):
        assert list(values[seed]) == [c["id"] for c in chapter["claims"]]
        for claim, value in expected[seed].items():
            assert values[seed][claim] == pytest.approx(value), (seed, claim)
    assert method.CANVAS == 7


def test_marginal_vs_joint():
    ex = theory.marginal_vs_joint_example()
    assert np.isclose(ex["p_valid_independent"], 12 / 27)
    assert ex["greedy_parallel"] == "2+2=5" and not ex["greedy_valid"]


def test_weighted_ce_is_llada_sum_over_t_times_length():
    from torch.nn import functional as F

    logits = torch.randn(2, 4, method.VOCAB, generator=torch.Generator().manual_seed(0))
    labels = torch.full((2, 4), method.IGNORE)
    labels[0, 1], labels[0, 2], labels[1, 3] = 3, 5, 7
    t = np.array([0.5, 0.25])
    loss, plain = method._weighted_ce(logits, labels, t)
    ce = F.cross_entropy(logits.reshape(-1, method.VOCAB), labels.reshape(-1), ignore_index=method.IGNORE,
                         reduction="none").reshape(2, 4)
    row0, row1 = ce[0, 1] + ce[0, 2], ce[1, 3]  # sums over the supervised positions, not means
    L = method.CANVAS
    assert torch.allclose(loss, (row0 / (0.5 * L) + row1 / (0.25 * L)) / 2)
    assert torch.allclose(method._weighted_ce(logits, labels, None)[0], (row0 / L + row1 / L) / 2)
    assert abs(plain - float((row0 + row1) / 3)) < 1e-5
    empty = torch.full((2, 4), method.IGNORE)
    assert float(method._weighted_ce(logits, empty, t)[0]) == 0.0


def test_stratified_mask_rates():
    rng = np.random.default_rng(0)
    for n in (1, 7, 32):
        t = method._draw_t(n, rng)
        strata = np.floor((t - method.T_MIN) / (1 - method.T_MIN) * n).astype(int)
        assert sorted(strata) == list(range(n)) and (t >= method.T_MIN).all() and (t <= 1).all()
    # u in [0, 1) maps onto [eps, 1): the largest of 2000 rates is within 1e-3 of 1 and never above it; each
    # row has its own offset inside its stratum
    t = method._draw_t(2000, rng)
    assert 1 - 1e-3 < t.max() <= 1
    offsets = (t - method.T_MIN) / (1 - method.T_MIN) * 2000 % 1
    assert len(np.unique(np.round(offsets, 6))) > 1900


def test_batched_labels_and_update_match_the_reference():
    rng = np.random.default_rng(4)
    for vocab in (2, 3, 10):  # small vocabularies: many repeated tokens, the corner cases
        drafts = [[int(v) for v in rng.integers(0, vocab, size=rng.integers(0, 8))] for _ in range(300)]
        targets = [[int(v) for v in rng.integers(0, vocab, size=rng.integers(0, 8))] for _ in range(300)]
        for check_gap0 in (False, True):
            token, gap = method.edit_labels_batch(drafts, targets, check_gap0)
            for i, (d, t) in enumerate(zip(drafts, targets)):
                r, g = method.edit_labels(d, t, check_gap0)
                n = len(d) + 1
                assert list(token[i, :n]) == r and list(gap[i, :n]) == g, (d, t)
                assert (token[i, n:] == method.IGNORE).all() and (gap[i, n:] == method.IGNORE).all()
    for _ in range(300):
        n = int(rng.integers(1, method.CANVAS + 1))
        seq, r, g = (rng.integers(lo, 14, size=(1, n)) for lo in (0, 8, 8))  # 12 = DEL among the proposals
        out, length = method.apply_edits_batch(seq, np.array([n]), r, g)
        assert list(out[0, :length[0]]) == method.apply_edits(list(seq[0]), list(r[0]), list(g[0]))[:method.CANVAS]
        assert (out[0, length[0]:] == method.PAD).all()


def test_curriculum_starts_late_and_reaches_e_max_minus_one():
    ks = [experiment.curriculum_passes(step, 100, 4, 0.5) for step in range(100)]
    assert ks[:50] == [0] * 50 and ks[-1] == 3 and ks == sorted(ks) and set(ks) == {0, 1, 2, 3}
    assert [experiment.curriculum_passes(s, 8, 4, 0.0) for s in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_copy_check_counts_unchanged_valid_answers():
    cfg = SimpleNamespace(edit_counts=[1, 2, 4])
    prompts = task.draw_prompts(20, np.random.default_rng(0))
    rows = experiment.copy_check(Echo(), prompts, cfg, seed=0)
    assert [r["edit_passes"] for r in rows] == [1, 2, 4]
    assert all(r["unchanged"] == 1.0 and r["valid"] == 1.0 for r in rows)


class Deleter(torch.nn.Module):
    """Proposes ``<del>`` everywhere: every valid answer is changed (to the lone ``<eos>``)."""

    def forward(self, ids, attention_mask=None):
        logits = torch.zeros(*ids.shape, method.VOCAB)
        logits[..., method.DEL] = 10.0
        return logits, logits


def test_copy_check_fails_a_model_that_edits():
    rows = experiment.copy_check(Deleter(), task.draw_prompts(20, np.random.default_rng(1)),
                                 SimpleNamespace(edit_counts=[1, 2, 4]), seed=0)
    assert all(r["unchanged"] == 0.0 and r["valid"] == 0.0 for r in rows)


def test_levenshtein_batch_matches_the_reference():
    rng = np.random.default_rng(7)
    a = [[int(v) for v in rng.integers(0, 3, size=rng.integers(0, 8))] for _ in range(200)]
    b = [[int(v) for v in rng.integers(0, 3, size=rng.integers(0, 8))] for _ in range(200)]
    dist = method.levenshtein_batch(a, b)
    assert list(dist) == [method.levenshtein(x, y) for x, y in zip(a, b)] and dist.dtype == np.int64


def test_edit_script_on_hand_examples():
    """Step 2's canonical script written out by hand: (op, draft position or gap, token) left to right,
    a deletion and an insertion deep inside the sequences (positions >= 2)."""
    assert method.edit_script("abcd", "abd") == [("keep", 0, "a"), ("keep", 1, "b"), ("delete", 2, None),
                                                 ("keep", 3, "d")]
    assert method.edit_script("abcde", "abcxde") == [("keep", 0, "a"), ("keep", 1, "b"), ("keep", 2, "c"),
                                                     ("insert", 3, "x"), ("keep", 3, "d"), ("keep", 4, "e")]
    assert method.edit_script("xbcd", "abcd") == [("replace", 0, "a"), ("keep", 1, "b"), ("keep", 2, "c"),
                                                  ("keep", 3, "d")]
    assert method.edit_script("", "ab") == [("insert", 0, "a"), ("insert", 0, "b")]
    assert method.edit_script("ab", "") == [("delete", 0, None), ("delete", 1, None)]


def test_batched_labels_have_the_documented_shape_also_for_empty_inputs():
    """edit_labels_batch returns two (n, max_len + 1) arrays (IGNORE after each row's labels), worked by hand
    for a one-token draft next to an empty one; a batch of no rows gives no rows."""
    ig, E = method.IGNORE, method.EOS
    token, gap = method.edit_labels_batch([[5], []], [[1], [2]])
    assert token.tolist() == [[1, E], [E, ig]] and gap.tolist() == [[1, E], [2, ig]]
    token, gap = method.edit_labels_batch([[1, 2, 3], [4]], [[1, 3], [4]])
    assert token.shape == gap.shape == (2, 4)
    token, gap = method.edit_labels_batch([], [])
    assert len(token) == len(gap) == 0 and len(method.levenshtein_batch([], [])) == 0


def test_new_model_is_sized_and_seeded_by_its_arguments():
    """new_model builds the library's TwoHeadMLM with cfg's layers, width and heads and the given seed."""
    from replib.models.masked_lm import TwoHeadMLM

    cfg = SimpleNamespace(n_layer=1, n_embd=16, n_head=2)
    model = method.new_model(cfg, 5)
    config = model.encoder.config
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (1, 16, 2)
    assert len(model.encoder.encoder.layer) == 1 and config.vocab_size == method.VOCAB
    same = TwoHeadMLM(method.VOCAB, n_layer=1, n_embd=16, n_head=2, max_len=method.SEQ_LEN, seed=5).state_dict()
    other = method.new_model(cfg, 6).state_dict()
    assert all(torch.equal(v, same[k]) for k, v in model.state_dict().items())
    assert not all(torch.equal(v, other[k]) for k, v in model.state_dict().items())


def test_edit_targets_pick_the_nearest_valid_answer_and_the_drawn_one_on_ties():
    E = method.EOS
    prompts = [(3, 1, 2), (3, 1, 2), (3, 1, 2), (4, 4), (5, 7)]
    drawn = [(2, 1, 3), (2, 1, 3), (3, 3, 1, 1, 2, 2), (4, 4, 4, 4), (7, 5)]
    drafts = [[1, 2, 3, E],  # the sorted answer itself: label against it, not against the drawn reverse
              [2, 1, 4, E],  # nearest the drawn reverse (distance 1)
              [1, 3, 2, E],  # distance 2 to reverse (213) and to sorted (123), 4 to the drawn doubled one
              [4, 4, E],  # reverse = sorted = (4, 4)
              [5, 7, 4, E]]  # distance 2 to the drawn reverse (7, 5) and to 5577, 1 to the sorted (5, 7)
    assert task.edit_targets(prompts, drawn, drafts) == [(1, 2, 3), (2, 1, 3), (2, 1, 3), (4, 4), (5, 7)]
    tie = task.edit_targets([(1, 2)], [(1, 2)], [[2, 2, E]])  # (1, 2) and (2, 1) both at distance 1: drawn
    assert tie == [(1, 2)]


def test_training_corpus_is_seeded_and_valid(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLIB_CACHE_DIR", str(tmp_path))
    ds = task.training_corpus(3, 600)
    again = task.training_corpus(3, 600)
    other = task.training_corpus(4, 600)
    assert ds.num_rows == 600 and ds["prompt"] == again["prompt"] and ds["prompt"] != other["prompt"]
    prompts, answers = task.corpus_examples(ds, 100, 400)
    assert len(prompts) == len(answers) == 300
    assert all(task.is_valid(x, a) for x, a in zip(prompts, answers))
    assert {len(x) for x in prompts} == {2, 3}
    modes = ds.to_pandas()["mode"].value_counts()
    assert set(modes.index) == set(task.MODES) and modes.min() > 150
    for row in ds.select(range(50)):  # the mode column names the answer's rule
        x = tuple(int(c) for c in row["prompt"])
        assert task.valid_answers(x)[task.MODES.index(row["mode"])] == tuple(int(c) for c in row["answer"])


def _stuck_rate_per_pair(n_pairs, check_gap0, seed, vocab=5, max_len=12, max_edits=6):
    """The oracle stuck rate pair by pair with the reference functions (the batched one must match it)."""
    rng = np.random.default_rng(seed)
    stuck = counted = 0
    while counted < n_pairs:
        d, t = theory._random_pair(rng, vocab, max_len, max_edits)
        before = method.levenshtein(d, t)
        if before == 0:
            continue
        r, g = method.edit_labels(d, t, check_gap0)
        stuck += method.levenshtein(method.apply_edits(d + [method.EOS], r, g), t + [method.EOS]) >= before
        counted += 1
    return stuck / n_pairs


@pytest.mark.parametrize("check_gap0", [False, True])
def test_batched_stuck_rate_equals_the_per_pair_count(check_gap0):
    assert theory.oracle_stuck_rate(1200, check_gap0=check_gap0, seed=3) == _stuck_rate_per_pair(1200, check_gap0, 3)


# Reading a number back from torch's shape-only "meta" device fails with one of these; a tensor left on
# the CPU while the model is elsewhere fails earlier, with "Expected all tensors to be on the same device".
META_READ = r"cannot be called on meta tensors|Cannot copy out of meta tensor"


class OnMeta(torch.nn.Module):
    """A stand-in model on the meta device: asserts that its inputs are there too (the real network on
    meta would not notice CPU ids) and returns meta logits."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1, device="meta"))

    def forward(self, ids, attention_mask=None):
        assert ids.device == self.w.device and (attention_mask is None or attention_mask.device == self.w.device)
        logits = torch.zeros(*ids.shape, method.VOCAB, device="meta")
        return logits, logits.clone()


def test_paper_profile_keeps_tensors_on_the_model_device(monkeypatch):
    monkeypatch.setenv("REPLIB_DEVICE", "meta")  # core.model_device("paper") is then "meta"
    from replib import core

    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "paper", experiment.EXPERIMENT_BOUNDS, seeds=[0], n_layer=1,
                         n_embd=16, n_head=2, batch=8, steps1=2, steps2=2, n_test=4, curve_every=1, n_curve=4)
    with pytest.raises((RuntimeError, NotImplementedError), match=META_READ):
        experiment.run_seed(cfg, 0)
    model = OnMeta()
    prompts, answers = [(1, 2), (3, 4, 5)], [(2, 1), (3, 4, 5)]
    t, rng = np.array([0.5, 0.9]), np.random.default_rng(0)
    calls = [lambda: method.draft(model, prompts, 2),
             lambda: method.edit_passes(model, prompts, [[2, 1, method.EOS], [3, method.EOS]], 1),
             lambda: method.mask_mode_loss(model, prompts, answers, t, rng),
             lambda: method.edit_mode_loss(model, prompts, answers, [[2, method.EOS], [3, 4, 5, method.EOS]], t)]
    for call in calls:
        with pytest.raises((RuntimeError, NotImplementedError), match=META_READ):
            call()
    logits = torch.zeros(2, method.SEQ_LEN, method.VOCAB, device="meta")
    labels = torch.zeros(2, method.SEQ_LEN, dtype=torch.long, device="meta")
    with pytest.raises((RuntimeError, NotImplementedError), match=META_READ):
        method._weighted_ce(logits, labels, t)


def test_seeds_in_two_processes_give_the_one_process_results(monkeypatch):
    monkeypatch.delenv("REPLIB_MAX_THREADS", raising=False)  # else the pool is capped to one process
    cfg = _tiny_cfg()
    cfg.seeds = [0, 1]
    one, two = experiment.run_experiment(cfg, workers=1), experiment.run_experiment(cfg, workers=2)
    for key in ("validity", "samples", "train", "curve"):
        assert one[key].equals(two[key]), key
    assert one["traces"] == two["traces"]


# ---- training steps: composite losses with hand-built labels, SGD steps, schedule ----------------


class TableModel(torch.nn.Module):
    """A hand-checkable two-head model: logits = token table[id] + position table (one pair per head, float64);
    records the ids and attention masks it is given."""

    def __init__(self, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.tok = torch.nn.Parameter(torch.randn(2, method.VOCAB, method.VOCAB, generator=g, dtype=torch.float64))
        self.pos = torch.nn.Parameter(torch.randn(2, method.SEQ_LEN, method.VOCAB, generator=g, dtype=torch.float64))
        self.calls = []

    def forward(self, ids, attention_mask=None):
        self.calls.append((ids.clone(), None if attention_mask is None else attention_mask.clone()))
        return self.tok[0][ids] + self.pos[0], self.tok[1][ids] + self.pos[1]


def _ce(logits, label):
    return -torch.log_softmax(logits, -1)[label]


def _hand_mask_loss(cur, nxt, clean, masked, t):
    """Mask mode written out per row: token head at masked response position p predicts clean[p]; the insertion
    head at p - 1 predicts it too; each head sum / (t_b L), averaged over rows; the loss is their sum."""
    L, n = method.CANVAS, len(clean)
    lc, ln, terms_c, terms_n = 0.0, 0.0, [], []
    for b in range(n):
        sc = sn = 0.0
        for p in range(method.RESP_START, method.SEQ_LEN):
            if masked[b, p - method.RESP_START]:
                c, x = _ce(cur[b, p], int(clean[b, p])), _ce(nxt[b, p - 1], int(clean[b, p]))
                sc, sn = sc + c, sn + x
                terms_c.append(float(c.detach()))
                terms_n.append(float(x.detach()))
        lc, ln = lc + sc / (t[b] * L), ln + sn / (t[b] * L)
    return lc / n, ln / n, np.mean(terms_c), np.mean(terms_n)


def test_mask_mode_loss_is_the_sum_of_both_heads_with_hand_labels():
    """mask_mode_loss = token-head part + insertion-head part, each checked by hand: the masked canvas (rate t_b
    per row) goes in, the token head predicts position p's clean token, the insertion head of position p - 1
    predicts it as well (the label shifted one position *left*); both parts change the total."""
    prompts, answers = [(3, 1), (4, 2, 9), (5, 5)], [(1, 3), (2, 4, 9), (5, 5, 5, 5)]
    t = np.array([0.6, 0.9, 0.4])
    t[1] = np.random.default_rng(5).random((3, method.CANVAS))[1, 2]  # a draw equal to t_b: not masked (u < t_b)
    model = TableModel()
    loss, stats = method.mask_mode_loss(model, prompts, answers, t, np.random.default_rng(5))
    clean = np.concatenate([method.encode_prompts(prompts), method.clean_canvas(answers)], axis=1)
    masked = np.random.default_rng(5).random((3, method.CANVAS)) < t[:, None]
    ids = model.calls[0][0].numpy()
    assert np.array_equal(ids[:, method.RESP_START:], np.where(masked, method.MASK, clean[:, method.RESP_START:]))
    assert np.array_equal(ids[:, :method.RESP_START], clean[:, :method.RESP_START]) and masked.sum() >= 8
    cur, nxt = model(torch.as_tensor(ids))
    part_c, part_n, ce_c, ce_n = _hand_mask_loss(cur, nxt, clean, masked, t)
    assert torch.allclose(loss, part_c + part_n)
    assert stats["ce_cur"] == pytest.approx(ce_c) and stats["ce_nxt"] == pytest.approx(ce_n)
    grad = torch.autograd.grad(loss, [model.tok, model.pos])
    want = torch.autograd.grad(part_c + part_n, [model.tok, model.pos])
    assert all(torch.allclose(a, b) for a, b in zip(grad, want))
    assert grad[0][0].abs().sum() > 0 and grad[0][1].abs().sum() > 0  # both heads are trained


def _hand_edit_loss(cur, nxt, responses, answers):
    """Edit mode written out per row with the reference edit_labels: the token head at response position i gets
    token label i; gap k (the slot before draft position k) trains the insertion head at the position *before*
    it, RESP_START - 1 + k (the SEP position for k = 0); ignored gaps skipped; each head sum / L, row mean."""
    L, n = method.CANVAS, len(responses)
    lc = ln = 0.0
    for b, (resp, ans) in enumerate(zip(responses, answers)):
        token, gap = method.edit_labels(resp[:-1], list(ans))
        sc = sum(_ce(cur[b, method.RESP_START + i], lab) for i, lab in enumerate(token))
        sn = sum(_ce(nxt[b, method.RESP_START - 1 + k], lab) for k, lab in enumerate(gap) if lab != method.IGNORE)
        lc, ln = lc + sc / L, ln + sn / L
    return lc / n, ln / n


def test_edit_mode_loss_is_the_sum_of_both_heads_with_hand_labels():
    """edit_mode_loss = token-head part + insertion-head part against the reference edit labels placed by hand
    (gap k at the hidden state of position k - 1); the model sees the packed prompt + response with the padding
    hidden."""
    E = method.EOS
    prompts, answers = [(3, 1, 2), (4, 2), (5, 7)], [(2, 1, 3), (2, 4), (5, 5, 7, 7)]
    responses = [[2, 3, E], [4, 2, 2, E], [5, 7, 7, E]]  # an insertion and a replacement, deletions, insertions
    model = TableModel(1)
    loss, stats = method.edit_mode_loss(model, prompts, answers, responses, np.array([0.5, 0.5, 0.5]))
    ids, att = (x.numpy() for x in model.calls[0])
    for b, resp in enumerate(responses):
        n = method.RESP_START + len(resp)
        assert list(ids[b, method.RESP_START:n]) == resp and att[b].tolist() == [1] * n + [0] * (method.SEQ_LEN - n)
    assert att.dtype == np.int64
    cur, nxt = model(torch.as_tensor(ids), torch.as_tensor(att))
    part_c, part_n = _hand_edit_loss(cur, nxt, responses, answers)
    assert torch.allclose(loss, part_c + part_n)
    grad = torch.autograd.grad(loss, [model.tok, model.pos])
    want = torch.autograd.grad(part_c + part_n, [model.tok, model.pos])
    assert all(torch.allclose(a, b) for a, b in zip(grad, want))
    assert grad[1][1].abs().sum() > 0 and np.isfinite(stats["ce_nxt"])
    token_ce = [float(_ce(cur[b, method.RESP_START + i], lab).detach()) for b, (resp, ans) in enumerate(zip(responses, answers))
                for i, lab in enumerate(method.edit_labels(resp[:-1], list(ans))[0])]
    assert stats["ce_cur"] == pytest.approx(np.mean(token_ce), rel=1e-9)  # the plain mean CE of the token head


def _examples(n=8, seed=0):
    prompts = task.draw_prompts(n, np.random.default_rng(seed))
    return prompts, [task.valid_answers(x)[i % 3] for i, x in enumerate(prompts)]


def _clip_sgd(params, loss, lr):
    grads = torch.autograd.grad(loss, params)
    norm = float(torch.sqrt(sum((g ** 2).sum() for g in grads)))
    scale = min(1.0, 1.0 / (norm + 1e-6))
    with torch.no_grad():
        for p, g in zip(params, grads):
            p -= lr * scale * g


@pytest.mark.parametrize("edit_prob", [0.0, 1.0])
def test_train_phase_steps_are_clipped_sgd_on_the_hand_written_losses(edit_prob):
    """train_phase with a plain-SGD optimiser and a constant schedule, two steps on consecutive batches of the
    examples: each step moves the weights by -lr clip(grad) of the hand-written mask-mode loss (edit_prob 0) or
    edit-mode loss (edit_prob 1: on-policy drafts from the current weights, labels against the nearest valid
    answer), the second step at the first step's weights with the next batch and the next random draws."""
    import copy

    cfg = SimpleNamespace(n_layer=1, n_embd=16, n_head=2, batch=4, e_max=2, curriculum_start=0.0, curve_every=100)
    model = method.new_model(cfg, 0)
    ref = copy.deepcopy(model)
    lr = 0.05
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    examples = _examples()
    rows = experiment.train_phase(model, opt, sched, cfg, 2, edit_prob, examples, np.random.default_rng(9), "x")
    rng = np.random.default_rng(9)
    params = list(ref.parameters())
    for step in range(2):
        prompts, answers = examples[0][4 * step:4 * step + 4], examples[1][4 * step:4 * step + 4]
        t = method._draw_t(4, rng)
        assert (rng.random() < edit_prob) == (rows[step]["mode"] == "edit")
        if edit_prob:
            k = experiment.curriculum_passes(step, 2, cfg.e_max, cfg.curriculum_start)
            responses = method.edit_mode_batch(ref, prompts, answers, t, k, rng)
            targets = task.edit_targets(prompts, answers, responses)
            ids, att = method._pack(method.encode_prompts(prompts), responses)
            cur, nxt = ref(ids, att)
            loss = sum(_hand_edit_loss(cur, nxt, responses, targets))
        else:
            clean = np.concatenate([method.encode_prompts(prompts), method.clean_canvas(answers)], axis=1)
            masked = rng.random((4, method.CANVAS)) < t[:, None]
            ids = clean.copy()
            ids[:, method.RESP_START:][masked] = method.MASK
            cur, nxt = ref(torch.as_tensor(ids))
            loss = sum(_hand_mask_loss(cur, nxt, clean, masked, t)[:2])
        assert rows[step]["loss"] == pytest.approx(float(loss.detach()), rel=1e-5)
        _clip_sgd(params, loss, lr)
    for (name, a), b in zip(model.named_parameters(), params):
        assert torch.allclose(a, b, atol=1e-6), name


def _learning_rates(model, opt, sched, steps):
    """The learning rate at each of ``steps`` optimiser steps (zero gradients, so only the schedule moves)."""
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        model.tok.grad, model.pos.grad = torch.zeros_like(model.tok), torch.zeros_like(model.pos)
        opt.step()
        sched.step()
    return lrs


def test_release_optimiser_warms_up_then_decays_and_decays_weights():
    """_make_optimiser: AdamW with weight decay 0.01; lr_s = lr min(1, (s + 1) / warmup) (1 + cos(pi s / steps)) / 2
    at steps s = 0, 1, 2, 3 (the schedule's state after each step)."""
    import math

    model = TableModel()
    cfg = SimpleNamespace(lr=1.0, warmup=3)
    opt, sched = method._make_optimiser(model, cfg, 10)
    assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0]["weight_decay"] == 0.01
    lrs = _learning_rates(model, opt, sched, 4)
    want = [min(1.0, (s + 1) / 3) * 0.5 * (1 + math.cos(math.pi * s / 10)) for s in range(4)]
    assert lrs == pytest.approx(want)


def test_release_schedule_stays_at_zero_after_its_steps():
    """_make_optimiser's cosine reaches 0 at s = steps and stays there (s is capped at steps); a warmup of one
    step starts at the full rate."""
    import math

    model = TableModel()
    opt, sched = method._make_optimiser(model, SimpleNamespace(lr=2.0, warmup=1), 4)
    lrs = _learning_rates(model, opt, sched, 7)
    assert lrs == pytest.approx([2.0, 1.0 + math.cos(math.pi / 4), 1.0, 1.0 - math.cos(math.pi / 4), 0.0, 0.0, 0.0],
                                abs=1e-12)


def test_prompt_split_holds_prompts_out_of_every_training_corpus(tmp_path, monkeypatch):
    """The held-out prompts (a fixed 30% of each length) never appear in a training corpus, and the
    test prompts of a run come from them."""
    monkeypatch.setenv("REPLIB_CACHE_DIR", str(tmp_path))
    split = task.prompt_split()
    assert {k: len(v) for k, v in split["heldout"].items()} == {2: 30, 3: 300}
    assert {k: len(v) for k, v in split["train"].items()} == {2: 70, 3: 700}
    heldout = {tuple(x) for part in split["heldout"].values() for x in part}
    train = {tuple(x) for part in split["train"].values() for x in part}
    assert not heldout & train and len(heldout | train) == 1100
    assert task.prompt_split()["heldout"][3].tolist() == split["heldout"][3].tolist()  # fixed, not per seed
    for seed in (0, 5):
        prompts, _ = task.corpus_examples(task.training_corpus(seed, 3000), 0, 3000)
        assert not set(prompts) & heldout
    drawn = task.draw_prompts(500, np.random.default_rng(1), pool="heldout")
    assert set(drawn) <= heldout and {len(x) for x in drawn} == {2, 3}


def test_oracle_edits_repair_what_two_passes_can_reach():
    """The headroom arm: oracle edit passes (the release's labels against the nearest valid answer)
    leave valid answers unchanged, fix one-edit errors of every kind in one pass, and never stand
    further from a valid answer after a pass (on drafts whose gaps need at most one insertion)."""
    from replib.papers.me_dlm import baselines

    E = method.EOS
    x = (3, 1, 2)
    drafts = [[2, 1, 3, E],  # valid (reverse): kept
              [2, 1, 4, E],  # one replacement
              [2, 1, 3, 3, E],  # one deletion
              [1, 3, E],  # one insertion (sorted, missing 2)
              [3, 3, 1, 1, 2, E]]  # doubled, missing the last 2
    out = baselines.oracle_edit_passes([x] * len(drafts), drafts, 2)
    assert out["states"][0] == drafts and len(out["states"]) == 3
    assert out["states"][1][0] == [2, 1, 3, E]
    assert all(task._response_valid(x, r) for r in out["states"][1])
    rng = np.random.default_rng(3)
    prompts = task.draw_prompts(300, rng)
    noisy = [list(rng.integers(0, 10, size=rng.integers(1, 6))) + [E] for _ in prompts]
    states = baselines.oracle_edit_passes(prompts, noisy, 2)["states"]
    d = [[task._response_distance(x, r) for x, r in zip(prompts, s)] for s in states]
    assert all(b <= a for a, b in zip(d[0], d[1])) and np.mean(d[1]) < 0.5 * np.mean(d[0])


def test_paired_bootstrap_pairs_prompts_within_seeds():
    import pandas as pd

    rows = []
    for seed, (me, md) in {0: ([1, 1, 0, 1], [0, 1, 0, 0]), 1: ([1, 0, 0, 0], [1, 0, 0, 0])}.items():
        for i, (a, b) in enumerate(zip(me, md)):
            rows.append({"seed": seed, "draft_passes": 1, "valid_2": bool(a), "mdlm_valid_matched": bool(b)})
            rows.append({"seed": seed, "draft_passes": 3, "valid_2": True, "mdlm_valid_matched": True})
    boot = experiment.paired_bootstrap(pd.DataFrame(rows), 1, n_boot=500)
    assert boot["per_seed"] == {0: 50.0, 1: 0.0} and boot["mean"] == 25.0
    assert boot["interval"][0] <= 25.0 <= boot["interval"][1] and boot["interval"][0] >= 0.0
    assert experiment.paired_bootstrap(pd.DataFrame(rows), 3)["interval"] == [0.0, 0.0]


def test_fast_forward_equals_the_library_bert():
    """new_model's written-out forward gives the library TwoHeadMLM's outputs (same weights), with
    and without a padding mask, and the same gradients."""
    from replib.models.masked_lm import TwoHeadMLM

    cfg = SimpleNamespace(n_layer=2, n_embd=32, n_head=4)
    fast = method.new_model(cfg, 3)
    ref = TwoHeadMLM(method.VOCAB, n_layer=2, n_embd=32, n_head=4, max_len=method.SEQ_LEN, seed=3)
    ref.load_state_dict(fast.state_dict())
    ids = torch.randint(0, method.VOCAB, (6, method.SEQ_LEN), generator=torch.Generator().manual_seed(0))
    att = torch.ones_like(ids)
    att[:3, 8:] = 0
    for mask in (None, att):
        for a, b in zip(fast(ids, mask), ref(ids, mask)):
            assert torch.allclose(a, b, atol=1e-5)
    fast.train()
    ref.train()
    sum(o.pow(2).sum() for o in fast(ids, att)).backward()
    sum(o.pow(2).sum() for o in ref(ids, att)).backward()
    for (name, p), q in zip(fast.named_parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-4, rtol=1e-4), name
