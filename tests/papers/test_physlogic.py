"""Unit tests of replib.papers.physlogic (logicality metrics, PhysChain, trace selection, claims)."""

import math
import re
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from replib import core
from replib.core.paths import repo_root
from replib.papers.physlogic import exercises, experiment, method, task

# ---- the metrics, on hand-made inputs -------------------------------------------------------------


def test_split_sentences_needs_whitespace_after_the_mark():
    assert method.split_sentences("A b. C d!  E?") == ["A b", "C d", "E?"]
    assert method.split_sentences("x = 2.5 * y.z") == ["x = 2.5 * y.z"]
    assert method.split_sentences("   ") == []
    assert method.split_sentences("a. b. ") == ["a", "b."]  # stripped first, as the official code does


CRAFTED = np.array([[0.9, 0.8, 0.0], [0.85, 0.1, 0.0], [0.0, 0.0, 0.2]])


def test_greedy_match_is_greedy_not_optimal():
    # greedy takes 0.9 first and then nothing clears tau; the optimal pairing (0,1),(1,0) would sum 1.65
    assert method.greedy_match(CRAFTED, 0.3) == [(0, 0)]
    assert method.greedy_match(CRAFTED, 0.15) == [(0, 0), (2, 2)]
    assert method.greedy_match(np.zeros((2, 0)), 0.3) == []


def test_fidelity_weighted_recall_count_precision():
    rec, prec, f = method.fidelity(CRAFTED, [(0, 0)], np.array([1.0, 2.0, 1.0]))
    assert rec == pytest.approx(0.9 / 4)
    assert prec == pytest.approx(1 / 3)
    assert f == pytest.approx(2 * 0.225 * (1 / 3) / (0.225 + 1 / 3))
    assert method.fidelity(CRAFTED, [], np.ones(3)) == (0.0, 0.0, 0.0)


def test_centroids_use_raw_similarities_and_zero_for_nonpositive_rows():
    M = np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0], [-1.0, 1.0, 0.0], [0.5, 0.0, 0.0]])
    assert np.allclose(method.centroids(M), [2.0, 2.0, 0.0, 1.0])


def test_causal_connection_by_hand():
    assert method.causal_connection(np.array([1.0, 3.0, 2.0]), np.array([1.0, 1.0, 2.0])) == pytest.approx(5 / 8)
    assert method.causal_connection(np.array([1.0, 2.0, 3.0]), np.ones(3)) == 1.0
    assert method.causal_connection(np.array([2.0, 2.0]), np.ones(2)) == 0.0  # ties do not count
    assert method.causal_connection(np.array([4.0]), np.ones(1)) == 0.5


def test_inferential_progress_by_hand():
    assert method.inferential_progress(np.eye(3)) == 1.0
    assert method.inferential_progress(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])) == pytest.approx(0.5)
    assert method.inferential_progress(np.array([[1.0, 0.0], [0.0, 0.0]])) == 1.0  # a zero column is skipped
    assert method.inferential_progress(np.array([[1.0], [0.0]])) == 1.0
    # negative cosine counts as fully novel: 1 - max(0, -1)
    assert method.inferential_progress(np.array([[1.0, -1.0]])) == 1.0
    cols = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    want = ((1 - 1 / math.sqrt(2)) + (1 - 1 / math.sqrt(2))) / 2
    assert method.inferential_progress(cols) == pytest.approx(want)


def test_logicality_of_empty_reasoning_is_zero_and_identical_trace_is_perfect_recall():
    assert method.logicality(np.eye(2), np.ones(2), np.zeros((0, 2))) == {"F": 0.0, "O": 0.0, "P": 0.0, "Rec": 0.0,
                                                                            "Prec": 0.0}
    s = method.logicality(np.eye(2), np.array([1.0, 2.0]), np.eye(2))
    assert s["Rec"] == 1.0 and s["Prec"] == 1.0 and s["F"] == 1.0 and s["O"] == 1.0 and s["P"] == 1.0
    swapped = method.logicality(np.eye(2), np.array([1.0, 2.0]), np.eye(2)[::-1])
    assert swapped["O"] == 0.0 and swapped["F"] == 1.0


def test_assess_matches_one_by_one_scoring():
    problems = task.all_problems((2, 3))[:40]
    encoder = experiment.encoder_for(problems)
    rng = np.random.default_rng(0)
    texts = [task.trace_text(*task.defective_trace(p, "loop", rng)[:1], p["target"], p["answer"]) for p in problems]
    nexus = [[task.step_sentence(s) for s in p["steps"]] for p in problems]
    weights = [task.nexus_weights(p) for p in problems]
    batch = method.assess(encoder, nexus, weights, texts)
    for k in (0, 7, 39):
        one = method.logicality(encoder(nexus[k]), weights[k], encoder(method.split_sentences(texts[k])))
        assert batch[k] == pytest.approx(one)


def test_select_traces_by_hand():
    correct = np.array([[False, True, True], [False, False, False], [True, False, True]])
    score = np.array([[0.9, 0.2, 0.5], [0.1, 0.2, 0.3], [0.4, 0.9, 0.4]])
    rng = np.random.default_rng(0)
    assert method.select_traces(correct, score, "logicality", rng).tolist() == [2, -1, 0]
    picks = np.array([method.select_traces(correct, score, "correctness", rng) for _ in range(200)])
    assert set(picks[:, 0]) == {1, 2} and set(picks[:, 1]) == {-1} and set(picks[:, 2]) == {0, 2}
    loose = np.array([method.select_traces(correct, score, "unfiltered", rng) for _ in range(200)])
    assert set(loose[:, 1]) == {0, 1, 2}
    with pytest.raises(ValueError):
        method.select_traces(correct, score, "best", rng)
    assert method.logicality_score({"F": 0.3, "O": 0.6, "P": 0.9}) == pytest.approx(0.6)


def test_mask_numbers_writes_num_for_every_whole_number():
    """mask_numbers: each whole number (\\b\\d+\\b) becomes the word ``num``; digits inside a word stay."""
    assert method.mask_numbers("F = 12 N at 3 m") == "F = num N at num m"
    assert method.mask_numbers("v2 is 2.5") == "v2 is num.num"


def _tfidf_by_hand(corpus, sentences):
    """The reference encoder: words are maximal runs of \\w (one character counts), case kept, the chapter's
    stop words dropped, then every word and every pair of adjacent kept words; idf = ln((1 + n) / (1 + df)) + 1;
    raw counts times idf, each row scaled to unit length. Returns the sorted features and the rows."""
    def grams(text):
        words = [w for w in re.findall(r"\w+", text) if w not in method.STOP_WORDS]
        return words + [f"{a} {b}" for a, b in zip(words, words[1:])]

    docs = [grams(t) for t in corpus]
    features = sorted({g for d in docs for g in d})
    idf = np.array([math.log((1 + len(docs)) / (1 + sum(f in d for d in docs))) + 1 for f in features])
    rows = np.array([[grams(s).count(f) for f in features] for s in sentences], float) * idf
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return features, rows / np.where(norms > 0, norms, 1.0)


def test_tfidf_encoder_equals_a_hand_written_tfidf():
    """TfidfEncoder: word 1- and 2-grams (single letters kept, case kept, stop words out), smoothed idf, L2 rows;
    numbers read as ``num`` when masked (the default) and as themselves when not."""
    corpus = ["The Force F is 12 N", "Newton's second law gives F = m a", "So the answer is 12 N by the law",
              "The mass m is 3 kg"]
    masked_corpus = ["The Force F is num N", "Newton's second law gives F = m a",
                     "So the answer is num N by the law", "The mass m is num kg"]  # masked by hand
    sentences = ["F = m a with m = 3", "The Force is 12 N", "the answer is 7"]
    masked_sentences = ["F = m a with m = num", "The Force is num N", "the answer is num"]
    for masked, (c, s) in [(True, (masked_corpus, masked_sentences)), (False, (corpus, sentences))]:
        enc = method.TfidfEncoder(corpus, masked) if not masked else method.TfidfEncoder(corpus)
        assert enc.masked is masked
        features, want = _tfidf_by_hand(c, s)
        assert list(enc.vectorizer.get_feature_names_out()) == features, masked
        assert np.allclose(enc(sentences), want), masked
    assert {"F", "m a", "The Force", "num N"} <= set(_tfidf_by_hand(masked_corpus, ["F"])[0])


def test_similarity_matrix_is_the_cosine_of_unnormalised_vectors():
    """M_ij = <n_i, s_j> / (|n_i| |s_j|) for vectors of any length; 0 against a zero vector."""
    nexus = np.array([[3.0, 4.0], [0.0, 0.5]])
    sent = np.array([[6.0, 8.0], [0.0, 2.0], [0.0, 0.0], [-1.0, 0.0]])
    want = np.array([[1.0, 0.8, 0.0, -0.6], [0.8, 1.0, 0.0, 0.0]])
    assert np.allclose(method.similarity_matrix(nexus, sent), want)


def test_greedy_match_takes_an_entry_equal_to_tau_and_integer_matrices():
    """Step 3's threshold is M_ij >= tau (inclusive); an integer matrix is matched like its float copy and left
    unchanged."""
    assert method.greedy_match(np.array([[0.5, 0.25]]), 0.5) == [(0, 0)]
    assert method.greedy_match(np.array([[0.25, 0.5]]), 0.5) == [(0, 1)]
    M = np.array([[2, 1], [1, 3]])
    assert method.greedy_match(M, 1) == [(1, 1), (0, 0)]
    assert M.tolist() == [[2, 1], [1, 3]]


def test_fidelity_sums_weights_in_double_precision():
    """Rec = sum_matched w_i M_ij / sum_i w_i holds for half-precision weights whose sum exceeds float16's range
    (60000 + 60000): Rec = (0.8 + 0.4) / 2 = 0.6."""
    M = np.array([[0.8, 0.0], [0.0, 0.4]])
    rec, prec, f = method.fidelity(M, [(0, 0), (1, 1)], np.array([60000.0, 60000.0], dtype=np.float16))
    assert rec == pytest.approx(0.6) and prec == 1.0 and f == pytest.approx(2 * 0.6 / 1.6)


def test_zero_rows_and_columns_are_skipped_not_divided_by():
    """Centroids of a row with zero total and novelties against a zero column are set, never computed as 0/0
    (no invalid-value warning); a zero first column does not hide a later repeat: P for columns 0, e1, e1 + e2
    is (1 + (1 - 1/sqrt 2)) / 2."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.allclose(method.centroids(np.array([[1.0, -1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]])),
                           [0.0, 0.0, 2.5])
        P = method.inferential_progress(np.array([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]))
        assert P == pytest.approx((1 + 1 - 1 / math.sqrt(2)) / 2)
        assert method.inferential_progress(np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])) == pytest.approx(0.5)


def test_inferential_progress_of_two_sentences_is_their_novelty():
    """P with m = 2 is nu_2 = 1 - max(0, cos(M_:2, M_:1)): 0 for a repeated focus, 1 - 0.8 for cos 0.8."""
    assert method.inferential_progress(np.array([[1.0, 1.0], [2.0, 2.0]])) == pytest.approx(0.0)
    assert method.inferential_progress(np.array([[3.0, 4.0], [4.0, 3.0]])) == pytest.approx(1 - 24 / 25)


class _OneHotEncoder:
    """Sentence k of a fixed list -> the k-th row of a fixed matrix; records each call; fails on an empty call."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, sentences):
        assert sentences, "encoder called without sentences"
        self.calls.append(list(sentences))
        return np.array([self.table[s] for s in sentences], float)


def test_logicality_and_assess_use_the_given_threshold():
    """The tau passed in decides the matches: a sentence at cosine 1/sqrt 5 ~ 0.447 to the nexus matches at
    tau = 0.4 (Rec = 0.447) and not at tau = 0.5 (Rec = F = 0)."""
    nexus, sent = np.array([[1.0, 0.0]]), np.array([[1.0, 2.0]])
    assert method.logicality(nexus, np.ones(1), sent, tau=0.4)["Rec"] == pytest.approx(1 / math.sqrt(5))
    assert method.logicality(nexus, np.ones(1), sent, tau=0.5)["Rec"] == 0.0
    assert method.logicality(nexus, np.ones(1), sent, tau=0.5)["F"] == 0.0
    enc = _OneHotEncoder({"n": [1.0, 0.0], "s": [1.0, 2.0]})
    low, high = (method.assess(enc, [["n"]], [np.ones(1)], ["s"], tau=t)[0] for t in (0.4, 0.5))
    assert low["Rec"] == pytest.approx(1 / math.sqrt(5)) and high["Rec"] == 0.0


def test_assess_of_empty_reasoning_is_zero_with_or_without_nexuses():
    """Step 7 through assess: a trace with no sentence scores F = O = P = Rec = Prec = 0, whether or not other
    text was encoded; with nothing to encode the encoder is not called."""
    zero = {"F": 0.0, "O": 0.0, "P": 0.0, "Rec": 0.0, "Prec": 0.0}
    enc = _OneHotEncoder({"n1": [1.0, 0.0], "n2": [0.0, 1.0], "s": [1.0, 1.0]})
    out = method.assess(enc, [["n1", "n2"], ["n1"]], [np.ones(2), np.ones(1)], ["  ", "s"])
    assert out[0] == zero and out[1]["Prec"] == 1.0
    assert enc.calls == [["n1", "n2", "s"]]  # one call, each distinct sentence once
    empty = _OneHotEncoder({})
    assert method.assess(empty, [[]], [np.ones(0)], [""]) == [zero] and empty.calls == []


def test_select_traces_names_an_unknown_condition():
    """An unknown condition is refused with its name and the valid ones."""
    with pytest.raises(ValueError, match="unknown condition 'best'.*logicality"):
        method.select_traces(np.ones((1, 2), bool), np.zeros((1, 2)), "best", np.random.default_rng(0))


# ---- PhysChain ---------------------------------------------------------------------------------------


def test_all_problems_are_consistent_and_distinct():
    problems = task.all_problems((2, 3))
    assert len(problems) == 780
    keys = {(p["target"], tuple(p["given"].items())) for p in problems}
    assert len(keys) == len(problems)
    for p in problems[::37]:
        known = dict(p["given"])
        for out, in1, in2, v1, v2, result in p["steps"]:
            assert (in1, in2) == task.LAWS[out][:2] and known[in1] == v1 and known[in2] == v2
            assert result == v1 * v2 <= task.MAX_VALUE
            known[out] = result
        assert p["steps"][-1][0] == p["target"] and p["answer"] == known[p["target"]]
        assert set(p["given"].values()) <= set(task.BASE_VALUES)


def _problem():
    return {"target": "W", "given": {"m": 2, "a": 3, "t": 2, "v": 4},
            "steps": [("F", "m", "a", 2, 3, 6), ("d", "v", "t", 4, 2, 8), ("W", "F", "d", 6, 8, 48)], "answer": 48}


def test_defects_do_what_they_say():
    p, rng = _problem(), np.random.default_rng(1)
    for _ in range(20):
        steps, answer = task.defective_trace(p, "skip", rng)
        assert len(steps) == 2 and steps[-1] == p["steps"][-1] and answer == 48
        steps, answer = task.defective_trace(p, "loop", rng)
        assert len(steps) == 4 and sorted(set(steps)) == sorted(p["steps"]) and answer == 48
        steps, answer = task.defective_trace(p, "swap", rng)  # only d -> W is an adjacent dependent pair
        assert steps == [p["steps"][0], p["steps"][2], p["steps"][1]] and answer == 48
        steps, answer = task.defective_trace(p, "irrelevant", rng)
        extra = [s for s in steps if s not in p["steps"]]
        assert len(steps) == 4 and len(extra) == 1 and extra[0][0] in ("J", "p") and answer == 48
        steps, answer = task.defective_trace(p, "slip", rng)
        assert answer != 48 and steps[-1][5] == answer
    assert task.defective_trace(p, "shortcut", rng) == ([], 48)
    assert task.nexus_weights(p).tolist() == [1.0, 1.0, 2.0]


def test_tokens_round_trip_to_text():
    p = _problem()
    tokens = task.trace_tokens(p["steps"], 48)
    assert len(tokens) == 7 * 3 + 3
    text, answer = task.parse_completion(tokens + [task.TOKEN[task.PAD]] * 3, p)
    assert answer == 48 and task.is_correct(answer, p)
    assert text == task.trace_text(p["steps"], "W", 48)
    assert text.startswith("By Newton's second law, F = m * a = 2 * 3 = 6. By the law of uniform motion")
    garbled, answer = task.parse_completion([task.TOKEN[w] for w in ["F", "m", "7", task.STOP, task.EOS]], p)
    assert garbled == "F m 7." and answer is None and not task.is_correct(answer, p)
    assert [task.VOCAB[t] for t in task.prompt_tokens(p)] == ["m", "2", "a", "3", "t", "2", "v", "4", "?", "W"]


def test_teacher_rates_zero_and_one():
    p, rng = _problem(), np.random.default_rng(2)
    clean = task.teacher_candidate(p, {}, rng)
    assert clean == {"steps": p["steps"], "answer": 48, "defects": []}
    assert task.teacher_candidate(p, {"shortcut": 1.0}, rng)["steps"] == []
    slipped = task.teacher_candidate(p, {"slip": 1.0}, rng)
    assert slipped["defects"] == ["slip"] and slipped["answer"] != 48


def test_each_defect_lowers_its_metric_on_a_few_problems():
    cfg = SimpleNamespace(n_defect_problems=40, tau=0.3)
    train = task.all_problems((2, 3))
    frame = experiment.defect_effects(cfg, 0, experiment.encoder_for(train))
    for defect, metric in experiment.DEFECT_TARGETS.items():
        assert experiment._defect_drop(frame, defect, metric) > 0.05, defect
    assert frame.groupby("defect")["Rec"].mean()["clean"] == pytest.approx(1.0)


# ---- claims ------------------------------------------------------------------------------------------


def _hand_results():
    ev = []
    # seed 0: logicality F .8/.6 acc 1,1 ; correctness F .5/.3 acc 1,0 (greedy); sampled: logic F .7 acc .5, corr F .2 acc 0
    for seed, rows in {
        0: [("logicality", "greedy", [1, 1], [0.8, 0.6], [1.0, 1.0], [0.5, 0.3]),
            ("correctness", "greedy", [1, 0], [0.5, 0.3], [1.0, 0.0], [0.4, 0.2]),
            ("logicality", "sampled", [1, 0], [0.7, 0.7], [1.0, 1.0], [0.4, 0.4]),
            ("correctness", "sampled", [0, 0], [0.2, 0.2], [0.5, 0.5], [0.4, 0.4])],
        1: [("logicality", "greedy", [0, 1], [0.4, 0.9], [1.0, 0.5], [0.6, 0.6]),
            ("correctness", "greedy", [1, 1], [0.6, 0.7], [1.0, 1.0], [0.3, 0.1]),
            ("logicality", "sampled", [1, 1], [0.5, 0.5], [1.0, 1.0], [0.4, 0.4]),
            ("correctness", "sampled", [1, 0], [0.6, 0.6], [1.0, 1.0], [0.4, 0.4]),
            ("unfiltered", "greedy", [0, 0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])],
    }.items():
        for condition, decoding, correct, f, o, p in rows:
            for k in range(2):
                ev.append({"seed": seed, "condition": condition, "decoding": decoding, "problem": k,
                           "correct": float(correct[k]), "F": f[k], "O": o[k], "P": p[k]})
    ev = pd.DataFrame(ev)
    # halfway: every greedy accuracy 0.1 lower for the baseline of seed 0, every sampled F 0.2 higher for
    # the method of seed 1
    half = ev.copy()
    half.loc[(half.seed == 0) & (half.condition == "correctness") & (half.decoding == "greedy"), "correct"] -= 0.1
    half.loc[(half.seed == 1) & (half.condition == "logicality") & (half.decoding == "sampled"), "F"] += 0.2
    de = []
    for seed, shift in ((0, 0.0), (1, 0.1)):
        for defect, rec, o, p, prec in [("clean", 1.0, 1.0, 0.4, 0.7), ("skip", 0.7, 0.9, 0.2, 0.6),
                                        ("swap", 1.0, 0.3 + shift, 0.4, 0.7), ("loop", 1.0, 1.0, 0.3, 0.5),
                                        ("irrelevant", 1.0, 1.0, 0.5, 0.6 - shift), ("shortcut", 0.0, 0.5, 1.0, 0.0)]:
            de.append({"seed": seed, "problem": 0, "defect": defect, "Rec": rec, "O": o, "P": p, "Prec": prec})
    sel = [{"seed": 0, "condition": "logicality", "F": 0.82, "correct_with_defect": 0.7},
           {"seed": 0, "condition": "correctness", "F": 0.62, "correct_with_defect": 0.7},
           {"seed": 1, "condition": "logicality", "F": 0.80, "correct_with_defect": 0.65},
           {"seed": 1, "condition": "correctness", "F": 0.70, "correct_with_defect": 0.65}]
    ceiling = pd.DataFrame({"seed": [0, 0, 1, 1], "problem": [0, 1, 0, 1], "F": [0.8, 0.8, 0.9, 0.7]})
    return {"evals": ev, "halfway": half, "defects": pd.DataFrame(de), "selected": pd.DataFrame(sel),
            "ceiling": ceiling}


def test_claim_values_on_hand_made_results():
    values = experiment.claim_values(_hand_results(), SimpleNamespace(seeds=[0, 1]))
    chapter = yaml.safe_load((repo_root() / "notebooks" / "physlogic" / "chapter.yml").read_text())
    assert set(values[0]) == {c["id"] for c in chapter["claims"]} == set(values[1])
    want = {
        0: {"p1_both_arms_learn": 0.5, "p2_skip_lowers_recall": 0.3, "p3_swap_lowers_order": 0.7,
            "p4_loop_lowers_progress": 0.1, "p5_irrelevant_lowers_precision": 0.1, "p6_accuracy_converged": 0.1,
            "p7_logicality_converged": 0.0, "p8_room_sampled_logicality": 0.8 - 0.2,
            "p9_room_greedy_logicality": 0.8 - 0.4, "p10_room_accuracy": 0.5, "r1_correct_but_illogical": 0.7,
            "r2_selected_data_more_logical": 0.2, "h1_logicality_gain": 0.5, "h2_accuracy_gain": 0.5,
            "c2_greedy_logicality_gain": 0.7 - 0.4, "c3_sampled_accuracy_gain": 0.5, "m1_order_gain": 0.5,
            "m2_progress_gain": 0.0, "m3_share_of_room_closed": 0.5 / 0.6},
        1: {"p1_both_arms_learn": 0.5, "p2_skip_lowers_recall": 0.3, "p3_swap_lowers_order": 0.6,
            "p4_loop_lowers_progress": 0.1, "p5_irrelevant_lowers_precision": 0.2, "p6_accuracy_converged": 0.0,
            "p7_logicality_converged": 0.2, "p8_room_sampled_logicality": 0.8 - 0.6,
            "p9_room_greedy_logicality": 0.8 - 0.65, "p10_room_accuracy": 0.0, "r1_correct_but_illogical": 0.65,
            "r2_selected_data_more_logical": 0.1, "h1_logicality_gain": -0.1, "h2_accuracy_gain": -0.5,
            "c2_greedy_logicality_gain": 0.0, "c3_sampled_accuracy_gain": 0.5, "m1_order_gain": 0.0,
            "m2_progress_gain": 0.0, "m3_share_of_room_closed": -0.1 / 0.2},
    }
    for seed in (0, 1):
        for cid, v in want[seed].items():
            assert values[seed][cid] == pytest.approx(v), (seed, cid)
    # Spearman over the four greedy solutions of seed 0: F .8 .6 .5 .3 against correct 1 1 1 0
    from scipy.stats import spearmanr
    assert values[0]["c1_logicality_predicts_correctness"] == pytest.approx(
        spearmanr([0.8, 0.6, 0.5, 0.3], [1, 1, 1, 0]).statistic)
    assert values[0]["c1_logicality_predicts_correctness"] == pytest.approx(0.7745967, abs=1e-6)
    # seed 1: the unfiltered rows are left out of rho
    assert values[1]["c1_logicality_predicts_correctness"] == pytest.approx(
        spearmanr([0.4, 0.9, 0.6, 0.7], [0, 1, 1, 1]).statistic)


def test_claim_values_nan_without_the_baseline():
    results = _hand_results()
    results["evals"] = results["evals"][results["evals"]["condition"] != "correctness"]
    values = experiment.claim_values(results, SimpleNamespace(seeds=[0]))
    assert math.isnan(values[0]["h1_logicality_gain"]) and math.isnan(values[0]["p1_both_arms_learn"])
    assert math.isnan(values[0]["p8_room_sampled_logicality"]) and math.isnan(values[0]["p6_accuracy_converged"])


# ---- profiles and graders ----------------------------------------------------------------------------


def test_profiles_and_bounds():
    keys = {frozenset(p) for p in experiment.EXPERIMENT_PROFILES.values()}
    assert len(keys) == 1
    with pytest.raises(ValueError):
        core.configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS, steps=-5)
    with pytest.raises(ValueError):
        core.configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS, conditions=["best"])
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "book", experiment.EXPERIMENT_BOUNDS)
    assert cfg.n_train + cfg.n_test <= len(task.all_problems(experiment.TRAIN_STEPS))


def test_graders_accept_the_reference_and_reject_a_wrong_answer():
    exercises.check_causal_connection(method.causal_connection)
    exercises.check_inferential_progress(method.inferential_progress)
    with pytest.raises(AssertionError):
        exercises.check_causal_connection(lambda p, w: method.causal_connection(p, np.ones_like(w)))
    with pytest.raises(AssertionError):  # forgetting the max(0, .) clip
        exercises.check_inferential_progress(
            lambda M: np.mean([1 - max(np.corrcoef(M[:, j], M[:, k])[0, 1] for k in range(j))
                               for j in range(1, M.shape[1])]) if M.shape[1] > 1 else 1.0)


def test_number_masking_makes_a_slip_invisible_to_the_metric():
    problems = task.all_problems((2, 3))
    masked, kept = experiment.encoder_for(problems), method.TfidfEncoder(task.reference_sentences(problems), False)
    p = _problem()
    nexus = [task.step_sentence(s) for s in p["steps"]]
    slipped = task.trace_text([*p["steps"][:2], (*p["steps"][2][:5], 50)], "W", 50)
    clean = task.trace_text(p["steps"], "W", 48)
    on_masked = method.assess(masked, [nexus] * 2, [task.nexus_weights(p)] * 2, [clean, slipped])
    on_kept = method.assess(kept, [nexus] * 2, [task.nexus_weights(p)] * 2, [clean, slipped])
    assert on_masked[0] == pytest.approx(on_masked[1])
    assert on_kept[1]["F"] < on_kept[0]["F"] - 0.01


# ---- the batched GPT: the same computation as the shared GPT-2 model ----------------------------------

_TINY = SimpleNamespace(n_layer=2, n_embd=16, n_head=2, batch=3, steps=1, schedule="constant")


def test_batched_forward_equals_each_gpt2_model():
    models = experiment.initial_models(_TINY, [3, 4, 3])
    params = experiment.stack_gpts(models)
    ids = torch.randint(0, len(task.VOCAB), (3, 4, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = experiment.batched_forward(params, ids, _TINY.n_head)
        for g in range(3):
            assert torch.allclose(out[g], models[g](ids[g]).logits, atol=1e-5)
        # the key-value cache: the prompt, then one token at a time, gives the same logits
        cache = []
        first = experiment.batched_forward(params, ids[:, :, :6], _TINY.n_head, cache)
        rest = [experiment.batched_forward(params, ids[:, :, t:t + 1], _TINY.n_head, cache, start=t)
                for t in range(6, 11)]
        assert torch.allclose(torch.cat([first, *rest], 2), out, atol=1e-5)
    assert torch.equal(params["transformer.wte.weight"][0], params["transformer.wte.weight"][2])
    copy = experiment.unstack_gpt(params, 1, experiment.initial_models(_TINY, [9])[0])
    assert torch.equal(copy.transformer.h[1].mlp.c_fc.weight, models[1].transformer.h[1].mlp.c_fc.weight)


def test_greedy_batched_decode_equals_the_shared_sampler():
    from replib.models.causal_lm import sample
    models = experiment.initial_models(_TINY, [5, 6])
    params = experiment.stack_gpts(models)
    problems = task.all_problems((2, 3))[::61][:8]
    solved = experiment.solve_all(params, _TINY.n_head, [problems, problems[::-1]])
    for g, group in enumerate([problems, problems[::-1]]):
        for k, p in enumerate(group):
            tokens, _ = sample(models[g], torch.tensor([task.prompt_tokens(p)]), experiment.MAX_NEW_TOKENS,
                               eos_id=task.TOKEN[task.EOS], pad_id=task.TOKEN[task.PAD], temperature=0.0)
            assert solved[g][k] == task.parse_completion(tokens[0].tolist(), p)


def test_sampled_decode_shares_its_noise_within_a_seed():
    models = experiment.initial_models(_TINY, [5, 5, 6])
    params = experiment.stack_gpts(models)
    problems = task.all_problems((2, 3))[::61][:8]
    a = experiment.solve_all(params, _TINY.n_head, [problems] * 3, [7, 7, 8])
    b = experiment.solve_all(params, _TINY.n_head, [problems] * 3, [7, 7, 8])
    greedy = experiment.solve_all(params, _TINY.n_head, [problems] * 3)
    assert a == b and a[0] == a[1]  # identical models, identical noise
    assert a[0] != greedy[0]  # an untrained model's draws are not its mode


def test_trace_loss_is_each_models_mean_over_trace_tokens():
    models = experiment.initial_models(_TINY, [1, 2])
    params = experiment.stack_gpts(models)
    problems = task.all_problems((2, 3))[::97][:3]
    ids, mask = experiment.sequences([task.prompt_tokens(p) for p in problems],
                                     [task.trace_tokens(p["steps"], p["answer"]) for p in problems])
    ids, mask = torch.from_numpy(np.stack([ids, ids[::-1].copy()])), torch.from_numpy(np.stack([mask, mask[::-1].copy()]))
    loss = experiment.trace_loss(params, ids, mask, _TINY.n_head)
    for g in range(2):
        logp = torch.log_softmax(models[g](ids[g]).logits, -1)
        terms = [-logp[r, t - 1, ids[g, r, t]] for r in range(3) for t in range(1, ids.shape[2]) if mask[g, r, t]]
        assert float(loss[g].detach()) == pytest.approx(float(torch.stack(terms).mean().detach()), rel=1e-5)


def test_stacked_adamw_is_one_torch_adamw_per_model():
    params = {"w": torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).requires_grad_(True)}
    twins = [params["w"][g].detach().clone().requires_grad_(True) for g in range(2)]
    ours = experiment.StackedAdamW(params, [1e-2, 3e-2])
    theirs = [torch.optim.AdamW([w], lr=lr, weight_decay=0.01) for w, lr in zip(twins, [1e-2, 3e-2])]
    for step in range(3):
        target = torch.arange(12.0).reshape(3, 4) * (step + 1)
        ((params["w"] - target) ** 2).sum().backward()
        ours.step()
        for w, opt in zip(twins, theirs):
            ((w - target) ** 2).sum().backward()
            opt.step()
            opt.zero_grad()
    for g in range(2):
        assert torch.allclose(params["w"][g], twins[g], atol=1e-6)


def test_one_training_step_descends_each_models_trace_cross_entropy():
    """One step of ``train_models``: the rows each model draws come from ``default_rng(seed)``, its loss is
    the mean trace cross-entropy of those rows, and its weights move by AdamW's first step (lr times the
    sign of the gradient, after a warm-up factor of 1/2 here) less weight decay; the loss on that batch
    falls. A sign error, a dropped term or a detached tensor fails it."""
    problems = task.all_problems((2, 3))[::97][:6]
    prompts = [task.prompt_tokens(p) for p in problems]
    data = [experiment.sequences(prompts, [task.trace_tokens(p["steps"][: 1 + (k + g) % 3], p["answer"])
                                           for k, p in enumerate(problems)]) for g in range(2)]
    cfg = SimpleNamespace(**{**vars(_TINY), "steps": 6})  # warm-up of 6 // 5 + 1 = 2 steps
    lrs = [4e-3, 1e-3]
    first = {}
    params, losses = experiment.train_models(cfg, data, [2, 7], lrs, checkpoints=(1,),
                                             on_checkpoint=lambda s, p: first.update({k: v.detach().clone()
                                                                                      for k, v in p.items()}))
    start = experiment.stack_gpts(experiment.initial_models(cfg, [2, 7]))
    rows = [np.random.default_rng(s).integers(6, size=3) for s in (2, 7)]
    width = max(d[0].shape[1] for d in data)
    ids = torch.stack([torch.nn.functional.pad(torch.from_numpy(d[0][r]), (0, width - d[0].shape[1]))
                       for d, r in zip(data, rows)])
    mask = torch.stack([torch.nn.functional.pad(torch.from_numpy(d[1][r]), (0, width - d[1].shape[1]))
                        for d, r in zip(data, rows)])
    loss = experiment.trace_loss(start, ids, mask, cfg.n_head)
    assert losses[0] == pytest.approx(loss.detach().numpy(), rel=1e-5)
    grads = torch.autograd.grad(loss.sum(), list(start.values()))
    for (name, p0), grad in zip(start.items(), grads):
        for g, lr in enumerate(lrs):
            step = lr * 0.5
            want = p0[g].detach() * (1 - step * 0.01) - step * grad[g] / (grad[g].abs() + 1e-8)
            assert torch.allclose(first[name][g], want, atol=1e-6), name
    after = experiment.trace_loss(first, ids, mask, cfg.n_head)
    assert (after < loss.detach()).all()
