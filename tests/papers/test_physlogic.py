"""Unit tests of replib.papers.physlogic (logicality metrics, PhysChain, trace selection, claims)."""

import math
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
    return {"evals": pd.DataFrame(ev), "defects": pd.DataFrame(de), "selected": pd.DataFrame(sel)}


def test_claim_values_on_hand_made_results():
    values = experiment.claim_values(_hand_results(), SimpleNamespace(seeds=[0, 1]))
    chapter = yaml.safe_load((repo_root() / "notebooks" / "physlogic" / "chapter.yml").read_text())
    assert set(values[0]) == {c["id"] for c in chapter["claims"]} == set(values[1])
    want = {
        0: {"p1_baseline_learns": 0.5, "p2_skip_lowers_recall": 0.3, "p3_swap_lowers_order": 0.7,
            "p4_loop_lowers_progress": 0.1, "p5_irrelevant_lowers_precision": 0.1, "r1_correct_but_illogical": 0.7,
            "r2_selected_data_more_logical": 0.2, "h1_logicality_gain": 0.7 - 0.4, "h2_accuracy_gain": 0.5,
            "c2_sampled_logicality_gain": 0.5, "c3_sampled_accuracy_gain": 0.5, "m1_order_gain": 0.5,
            "m2_progress_gain": 0.4 - 0.3},
        1: {"p1_baseline_learns": 1.0, "p2_skip_lowers_recall": 0.3, "p3_swap_lowers_order": 0.6,
            "p4_loop_lowers_progress": 0.1, "p5_irrelevant_lowers_precision": 0.2, "r1_correct_but_illogical": 0.65,
            "r2_selected_data_more_logical": 0.1, "h1_logicality_gain": 0.65 - 0.65, "h2_accuracy_gain": -0.5,
            "c2_sampled_logicality_gain": -0.1, "c3_sampled_accuracy_gain": 0.5, "m1_order_gain": -0.25,
            "m2_progress_gain": 0.6 - 0.2},
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
    assert math.isnan(values[0]["h1_logicality_gain"]) and math.isnan(values[0]["p1_baseline_learns"])


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


# Reading a number back from torch's shape-only "meta" device fails with this; tensors left on the CPU
# while the model is elsewhere fail earlier, with "Expected all tensors to be on the same device".
META_READ = r"cannot be called on meta tensors|Cannot copy out of meta tensor"


def test_paper_profile_keeps_tensors_on_the_model_device(monkeypatch):
    monkeypatch.setenv("REPLIB_DEVICE", "meta")  # core.model_device("paper") is then "meta"
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "paper", experiment.EXPERIMENT_BOUNDS, seeds=[0], n_train=20,
                         n_test=10, n_defect_problems=2, steps=2, n_embd=16, conditions=["logicality", "correctness"])
    with pytest.raises(RuntimeError, match=META_READ):
        experiment.run_seed(cfg, 0)  # training reaches loss.item()
    train, test = experiment.split_problems(cfg, 0)
    model, _ = experiment.train_condition(cfg, 0, [task.prompt_tokens(p) for p in train[:4]],
                                          [task.trace_tokens(p["steps"], p["answer"]) for p in train[:4]])
    with pytest.raises(RuntimeError, match=META_READ):
        experiment.solve(model.to("meta"), test[:3], 1.0, torch.Generator().manual_seed(0))


# ---- the SFT step of each data condition, against a hand-written objective and optimiser -----------------


def test_train_condition_takes_adamw_steps_down_the_trace_cross_entropy():
    """Three steps of ``train_condition`` on rows drawn by ``default_rng(seed)`` (a different batch each step):
    each loss is the mean over the trace tokens (not the question) of -log p(token | tokens before it), and the
    weights follow AdamW (decay 0.01) with a 1-step warm-up and the cosine (lr, lr, lr / 2) on its gradient."""
    problems = task.all_problems((2, 3))[::97][:5]
    prompts = [task.prompt_tokens(p) for p in problems]
    traces = [task.trace_tokens(p["steps"][: 1 + k % 3], p["answer"]) for k, p in enumerate(problems)]
    cfg = SimpleNamespace(n_layer=1, n_embd=16, n_head=2, lr=4e-3, batch=3, steps=3)
    model, losses = experiment.train_condition(cfg, 2, prompts, traces)
    ref = experiment.train_condition(SimpleNamespace(**{**vars(cfg), "steps": 0}), 2, prompts, traces)[0]
    params = list(ref.parameters())
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    rng = np.random.default_rng(2)
    drawn = []
    for t, factor in enumerate([1.0, 1.0, 0.5], start=1):
        rows = rng.integers(len(prompts), size=3)
        drawn.append(sorted(rows.tolist()))
        terms = []
        for r in rows:
            ids = torch.tensor([prompts[r] + traces[r]])
            logp = torch.log_softmax(ref(ids).logits[0], -1)
            terms += [-logp[j - 1, ids[0, j]] for j in range(len(prompts[r]), ids.shape[1])]
        loss = torch.stack(terms).mean()
        assert losses[t - 1] == pytest.approx(float(loss.detach()), rel=1e-5), t
        grads, lr = torch.autograd.grad(loss, params), 4e-3 * factor
        with torch.no_grad():
            for k, (p, g) in enumerate(zip(params, grads)):
                m, v = 0.9 * moments[k][0] + 0.1 * g, 0.999 * moments[k][1] + 0.001 * g * g
                moments[k] = (m, v)
                p.mul_(1 - lr * 0.01).sub_(lr / (1 - 0.9 ** t) * m / ((v / (1 - 0.999 ** t)).sqrt() + 1e-8))
    assert len({tuple(d) for d in drawn}) > 1
    err = max(float((p.detach() - q.detach()).abs().max()) for p, q in zip(model.parameters(), params))
    assert err < 2e-5  # a step moves a weight by about 2e-3 to 4e-3
