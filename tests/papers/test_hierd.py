"""Unit tests of replib.papers.hierd (hierarchical representation distillation on coloured tiles)."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.cluster import DBSCAN
from sklearn.metrics import adjusted_rand_score

from replib import core
from replib.core.paths import load_chapter
from replib.papers.hierd import exercises, experiment, method, task

# ---- the toy world ----------------------------------------------------------------------------


def test_scene_question_and_answer_agree():
    rng = np.random.default_rng(3)
    for _ in range(20):
        ex = task.draw_example(rng)
        assert len(set(ex["object_ids"])) == 3 and len(set(ex["cells"])) == 3
        ans = ex["object_ids"].index(ex["answer_id"])
        cell = ex["cells"][ans]
        assert ex["question"][4:6] == [task.TOKEN[task.ROWS[cell // 2]], task.TOKEN[task.COLUMNS[cell % 2]]]
        assert ex["answer"] == task.answer_phrases()[ex["answer_id"]].tolist()
        assert len(ex["question"]) == task.QUESTION_LEN
        # the mask labels each tile's pixels, and the tile sits inside its cell
        assert set(np.unique(ex["mask"])) == {-1, 0, 1, 2}
        rows, cols = np.nonzero(ex["mask"] == ans)
        assert set(rows // 12) == {cell // 2} and set(cols // 12) == {cell % 2}


def test_patch_labels_majority():
    masks = np.full((1, 24, 24), -1)
    masks[0, :4, :3] = 0  # 12 of the 16 pixels of patch 0 (4 px patches)
    masks[0, :4, 4:6] = 1  # 8 of 16 of patch 1: not more than half
    labels = task.patch_labels(masks, 4)
    assert labels.shape == (1, 36) and labels[0, 0] == 0 and labels[0, 1] == -1 and (labels[0, 2:] == -1).all()


def test_retrieval_metrics_hand_made():
    scores = np.zeros((3, 16))
    scores[0, 5] = 1.0  # right answer (5) at the top
    scores[1, 7], scores[1, 2] = 1.0, 0.5  # top is 7 (out of scene), in-scene best is 2 = answer
    scores[2, 9], scores[2, 1] = 1.0, 0.8  # top is 9 (in scene, wrong)
    answer = np.array([5, 2, 1])
    objects = np.array([[5, 0, 3], [2, 4, 6], [1, 9, 10]])
    m = task.retrieval_metrics(scores, answer, objects)
    assert m["p_at_1"] == pytest.approx(1 / 3) and m["in_scene"] == pytest.approx(2 / 3)


# ---- the embedder -------------------------------------------------------------------------------


def test_embedder_shapes_causality_and_norm():
    model = method.Embedder(patch=6, d=16, n_layer=2, n_head=2, vocab_size=len(task.VOCAB), eos_id=1, seed=0)
    images = torch.rand(2, 3, 24, 24)
    text = torch.tensor([[2, 3, 4, 5, 8, 10, 6]] * 2)
    out = model(images, text)
    assert len(out["hidden"]) == 3 and out["hidden"][0].shape == (2, 16 + 8, 16)
    assert out["attn"][0].shape == (2, 24, 24) and torch.allclose(out["attn"][0].sum(-1), torch.ones(2, 24))
    assert torch.allclose(out["embedding"].norm(dim=-1), torch.ones(2))
    changed = text.clone()
    changed[:, -1] = 16
    out2 = model(images, changed)
    # causal: the image tokens and the first text tokens do not see the last word
    assert torch.allclose(out["hidden"][2][:, :22], out2["hidden"][2][:, :22], atol=1e-6)
    assert not torch.allclose(out["embedding"], out2["embedding"])


def test_patch_centres_and_patchify_order():
    c = method.patch_centres(12)
    assert c.tolist() == [[6, 6], [18, 6], [6, 18], [18, 18]]
    model = method.Embedder(patch=12, d=8, n_layer=1, n_head=1, vocab_size=4, eos_id=1)
    images = torch.zeros(1, 3, 24, 24)
    images[0, :, :12, 12:] = 1.0  # top-right quadrant = patch 1 in row-major order
    patches = model.patchify(images)
    assert patches[0, 1].min() == 1 and patches[0, [0, 2, 3]].max() == 0


# ---- losses -------------------------------------------------------------------------------------


def test_info_nce_hand_computed_and_soft_targets():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss = method.info_nce(q, p, tau=0.5)
    expected = -math.log(math.exp(2) / (math.exp(2) + 1))
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    both = torch.ones(2, 2, dtype=torch.bool)  # the same answer twice: uniform soft target
    soft = method.info_nce(q, p, tau=0.5, positive=both)
    assert float(soft) == pytest.approx(-0.5 * (math.log(math.exp(2) / (math.exp(2) + 1)) + math.log(1 / (math.exp(2) + 1))), rel=1e-5)


def test_rkd_zero_for_scaled_copy_positive_otherwise():
    g = torch.Generator().manual_seed(0)
    t = torch.randn(6, 5, generator=g)
    assert float(method.rkd_loss(3.0 * t, t)) == pytest.approx(0.0, abs=1e-6)
    assert float(method.rkd_loss(torch.randn(6, 5, generator=g), t)) > 1e-3


def test_group_members_phrase_and_word():
    assert method.group_members(((0, 1), (4, 7)), 7, "phrase").tolist() == [0, -1, -1, -1, 1, 1, 1]
    assert method.group_members(((0, 1), (4, 7)), 7, "word").tolist() == [0, -1, -1, -1, 1, 2, 3]


def test_group_weights_hand_cases():
    h = torch.tensor([[[1.0, 2.0, 0.0], [0.0, 1.0, 3.0], [2.0, 0.0, 1.0], [5.0, 1.0, 1.0]]])
    omega, g, valid = method.group_weights(h, torch.tensor([[0, 0, 1, -1]]), 3)
    # a pair: each receives all the other's attention -> 1 each -> 0.5 after renormalising
    assert omega[0].tolist() == pytest.approx([0.5, 0.5, 1.0, 0.0])
    assert torch.allclose(g[0, 0], 0.5 * (h[0, 0] + h[0, 1])) and torch.allclose(g[0, 1], h[0, 2])
    assert valid[0].tolist() == [True, True, False] and torch.all(g[0, 2] == 0)


def test_group_weights_outlier_gets_less_and_matches_formula():
    h = torch.tensor([[[1.0, 0.0, 1.0, 0.0], [1.0, 0.1, 0.9, 0.0], [-1.0, 0.0, -1.0, 0.2]]], dtype=torch.float64)
    omega, _, _ = method.group_weights(h, torch.tensor([[0, 0, 0]]), 1)
    z = h[0] / (h[0].std(-1, keepdim=True) + 1e-6)
    s = z @ z.T / 2.0
    a = torch.zeros(3, 3, dtype=torch.float64)
    for i in range(3):
        others = [j for j in range(3) if j != i]
        a[i, others] = torch.softmax(s[i, others], 0)
    expected = a.sum(0) / a.sum()
    assert torch.allclose(omega[0], expected) and float(omega[0].sum()) == pytest.approx(1.0)
    assert omega[0, 2] < omega[0, 0] and omega[0, 2] < omega[0, 1]


def test_detach_removes_the_gradient_through_group_vectors():
    h = torch.randn(1, 3, 4, requires_grad=True)
    _, g, _ = method.group_weights(h, torch.tensor([[0, 0, 0]]), 1, detach=True)
    assert not g.requires_grad
    _, g2, _ = method.group_weights(h, torch.tensor([[0, 0, 0]]), 1, detach=False)
    g2.sum().backward()
    assert h.grad is not None and h.grad.abs().sum() > 0


def test_relational_loss_hand_and_rotation_invariance():
    gs = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    gt = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]]])
    valid = torch.tensor([[True, True, True]])
    # pair cosines: student (0, 0.707, 0.707), teacher (1, 0.707, 0.707): one of three pairs differs by 1
    assert float(method.relational_loss(gs, gt, valid)) == pytest.approx(1 / 3, rel=1e-5)
    q, _ = torch.linalg.qr(torch.randn(2, 2))
    assert float(method.relational_loss(gs @ q, gs, valid)) == pytest.approx(0.0, abs=1e-10)
    # a sample with one valid group has no pair: it is left out of the mean
    two = torch.cat([gs, gs])
    valid2 = torch.tensor([[True, True, True], [True, False, False]])
    assert float(method.relational_loss(two, torch.cat([gt, gt]), valid2)) == pytest.approx(1 / 3, rel=1e-5)


def test_token_loss_hand():
    proj = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    tgt = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])
    w = torch.tensor([[0.25, 0.75]])
    assert float(method.token_loss(proj, tgt, w)) == pytest.approx(0.75)


def test_cross_pi_and_cross_loss_hand():
    attention = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]])
    text = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    vision = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    pi = method.cross_pi(attention, text, vision)
    assert pi[0].tolist() == [[0.5, 0.0], [0.0, 0.5]]
    xs, xt = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]), torch.tensor([[[0.0, 0.0], [0.0, 0.5]]])
    assert float(method.cross_loss(pi, xs, xt)) == pytest.approx(0.5 * 1 + 0.5 * 0.25)


# ---- clustering ---------------------------------------------------------------------------------


def test_cluster_distance_properties():
    rng = np.random.default_rng(0)
    d = method.cluster_distance(rng.normal(size=(5, 3)), method.patch_centres(12)[[0, 1, 2, 3, 0]], 0.1)
    assert np.allclose(d, d.T) and np.all(np.diag(d) == 0) and d.min() >= 0
    same = method.cluster_distance(np.ones((2, 3)), np.array([[0.0, 0.0], [24.0, 24.0]]), 0.5)
    assert same[0, 1] == pytest.approx(0.5)  # identical states, opposite corners: lam_sp * 1


def test_dbscan_agrees_with_sklearn_on_noise_and_core_points():
    rng = np.random.default_rng(1)
    for _ in range(30):
        x = np.concatenate([rng.normal(c, 0.3, (8, 2)) for c in rng.normal(0, 3, (3, 2))] + [rng.normal(0, 4, (5, 2))])
        d = np.linalg.norm(x[:, None] - x[None], axis=-1)
        eps = np.percentile(d[~np.eye(len(d), dtype=bool)], 10)
        ours = method.dbscan(d, eps, 4)
        ref = DBSCAN(eps=eps, min_samples=4, metric="precomputed").fit(d)
        assert np.array_equal(ours < 0, ref.labels_ < 0)
        core = ref.core_sample_indices_
        pairs_ours = ours[core][:, None] == ours[core][None]
        pairs_ref = ref.labels_[core][:, None] == ref.labels_[core][None]
        assert np.array_equal(pairs_ours, pairs_ref)


def test_dbscan_all_noise_is_one_cluster_and_labels_ordered():
    d = np.full((4, 4), 1.0)
    np.fill_diagonal(d, 0)
    assert method.dbscan(d, 0.5, 2).tolist() == [0, 0, 0, 0]
    d = np.array([[0, 9, 0.1, 9], [9, 0, 9, 0.1], [0.1, 9, 0, 9], [9, 0.1, 9, 0]])
    assert method.dbscan(d, 0.5, 2).tolist() == [0, 1, 0, 1]


def test_dbscan_and_cluster_tokens_batched_equal_per_image():
    rng = np.random.default_rng(2)
    states = rng.normal(size=(12, 16, 5))
    states[:, :8] += 3.0  # a planted group on the first eight tokens
    centres = method.patch_centres(6)
    batched = method.cluster_tokens(states, centres, 0.1, 20.0, 3)
    single = np.stack([method.cluster_tokens(s, centres, 0.1, 20.0, 3) for s in states])
    assert batched.shape == (12, 16) and np.array_equal(batched, single)
    d = method.cluster_distance(states, centres, 0.1)
    assert np.allclose(d[3], method.cluster_distance(states[3], centres, 0.1))


def test_adjusted_rand_matches_sklearn():
    rng = np.random.default_rng(4)
    truth = rng.integers(-1, 3, size=(40, 16))
    labels = np.where(rng.random((40, 16)) < 0.6, truth, rng.integers(-1, 4, size=(40, 16)))
    labels[0] = truth[0]  # full agreement
    labels[1] = 0  # one cluster against several labels
    truth[2] = 1
    labels[2] = 1  # both one cluster: full agreement
    expected = [adjusted_rand_score(t, c) for t, c in zip(truth, labels)]
    assert np.allclose(experiment.adjusted_rand(truth, labels), expected, atol=1e-12)


def test_map_clusters_hand():
    labels = np.full(36, -1)  # teacher 4 px grid (6 x 6), student 8 px grid (3 x 3)
    labels[[0, 1, 6, 7]] = 0  # teacher patches centred (2,2), (6,2), (2,6), (6,6) -> student patch 0
    labels[2] = 1  # centre (10, 2) -> student patch 1
    labels[3] = 0  # centre (14, 2) -> student patch 1 as well: a tie, the lower label wins
    labels[35] = 2  # centre (22, 22) -> student patch 8
    out = method.map_clusters(labels, 4, 8)
    assert out.tolist() == [0, 0, -1, -1, -1, -1, -1, -1, 2]
    assert method.map_clusters(labels[None].repeat(2, 0), 4, 8).shape == (2, 9)


# ---- the experiment -----------------------------------------------------------------------------


def test_detached_gradient_gap_is_zero_on_a_tiny_run():
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", n_train=32, n_test=32)
    data = experiment.load_data(cfg)
    teacher = experiment.make_embedder(cfg, "teacher", seed=0)
    targets = experiment.teacher_targets(teacher, data["train"], cfg, 0)
    student = experiment._student(cfg, 0)
    assert experiment.detach_gradient_gap(student, data["train"], targets, n=16) <= 1e-7


def _per_pair_reference(out_q, out_a, pairs, projectors, n_patches, weights):
    """Step 8 written pair by pair and text by text with the loss pieces (the committed code's form)."""
    texts, visions, crosses = [], [], []
    for p, (_, s_idx, _) in enumerate(method.LAYER_PAIRS):
        t, v = pairs["text"], pairs["vision"]
        hq, ha = out_q["hidden"][s_idx], out_a["hidden"][s_idx]
        per_kind = []
        for kind, h in ((0, hq[:, n_patches:n_patches + 7]), (1, ha[:, :3])):
            n = h.shape[1]
            members, g_t = t["members"][:, kind, p, :n], t["g"][:, kind, p]
            _, g_s, valid = method.group_weights(h, members, g_t.shape[1])
            loss = weights.tok * method.token_loss(projectors[p](h), t["h"][:, kind, p, :n], t["omega"][:, kind, p, :n])
            per_kind.append((loss + method.relational_loss(g_s, g_t, valid & t["valid"][:, kind, p]), g_s))
        texts.append(0.5 * (per_kind[0][0] + per_kind[1][0]))
        h_vis, members = hq[:, :n_patches], v["members"][:, p]
        omega_s, g_vis, valid_s = method.group_weights(h_vis, members, v["g"].shape[2])
        target = v["g"][:, p][torch.arange(len(members))[:, None], members.clamp_min(0)]
        lv = weights.tok * method.token_loss(projectors[p](h_vis), target, omega_s)
        visions.append(lv + method.relational_loss(g_vis, v["g"][:, p], valid_s & v["valid"][:, p]))
        if pairs["has_pi"][p]:
            pi = pairs["pi"][:, p] * valid_s[:, None, :]
            pi = pi / pi.sum((1, 2), keepdim=True).clamp_min(1e-12)
            crosses.append(method.cross_loss(pi, method._cos_matrix(per_kind[0][1], g_vis), pairs["x"][:, p]))
    l_text, l_vis, l_cross = torch.stack(texts).mean(), torch.stack(visions).mean(), torch.stack(crosses).mean()
    return weights.kd * 0.5 * (l_text + l_vis) + weights.cross * l_cross, l_text, l_vis, l_cross


def test_batched_hierd_loss_equals_the_per_pair_form():
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", n_train=32, n_test=32)
    data = experiment.load_data(cfg)
    teacher = experiment.make_embedder(cfg, "teacher", seed=1)
    targets = experiment.teacher_targets(teacher, data["train"], cfg, 0)
    assert targets["pairs"]["has_pi"] == (True, True, False)
    student = experiment._student(cfg, 2)
    idx = torch.arange(12)
    out_q, out_a = student(data["train"]["images"][idx], data["train"]["questions"][idx]), student(None, data["train"]["answers"][idx])
    pairs = experiment._take(targets["pairs"], idx)
    weights = method.HieRDWeights()
    terms = method.hierd_loss(out_q, out_a, pairs, targets["projectors"], student.n_patches, weights)
    total, l_text, l_vis, l_cross = _per_pair_reference(out_q, out_a, pairs, targets["projectors"], student.n_patches, weights)
    assert l_cross.item() > 0 and l_text.item() > 0
    for got, want in ((terms["total"], total), (terms["text"], l_text), (terms["vis"], l_vis), (terms["cross"], l_cross)):
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)
    params = list(student.parameters()) + list(targets["projectors"].parameters())
    g1 = torch.autograd.grad(terms["total"], params, retain_graph=True, allow_unused=True)
    g2 = torch.autograd.grad(total, params, allow_unused=True)
    for a, b in zip(g1, g2):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, rtol=1e-4, atol=1e-6))


def _hand_results():
    rows = []
    for seed, (c, g, h, nc, dt) in {0: (0.30, 0.32, 0.36, 0.35, 0.31), 1: (0.40, 0.41, 0.40, 0.42, 0.38)}.items():
        scene = {"contrastive": 0.50, "global_kd": 0.52, "hierd": 0.60, "hierd_no_cross": 0.55, "hierd_detached": 0.5}
        gaps = {"contrastive": 0.2, "global_kd": 0.1, "hierd": 0.05 * (seed + 1), "hierd_no_cross": 0.07,
                "hierd_detached": 0.09}
        for method_name, p1 in zip(experiment.METHODS, (c, g, h, nc, dt)):
            rows.append({"seed": seed, "method": method_name, "p_at_1": p1, "in_scene": scene[method_name] - 0.1 * seed,
                         "p_at_1_probe": p1 - (0.05 if method_name == "global_kd" else 0.01),
                         "structure_gap": gaps[method_name], "seconds": 1.0})
    return {"results": pd.DataFrame(rows),
            "teacher": {"metrics": {"p_at_1": 0.5, "in_scene": 0.7},
                        "quality": {"ari_word": 0.6, "ari_phrase": 0.3, "ari_word_paper_rule": 0.2}},
            "detach_gap": {0: 0.0, 1: 1e-9}}


def test_claim_values_hand_made():
    values = experiment.claim_values(_hand_results(), None)
    declared = {c["id"] for c in load_chapter("hierd")["claims"]}
    assert set(values) == {0, 1} and set(values[0]) == declared
    v0, v1 = values[0], values[1]
    assert v0["p0_base_model_learns"] == pytest.approx(0.30) and v1["p0_base_model_learns"] == pytest.approx(0.40)
    assert v0["p1_teacher_has_something"] == pytest.approx(20.0) and v1["p1_teacher_has_something"] == pytest.approx(10.0)
    assert v0["p2_clusters_object_level"] == pytest.approx(0.6)
    assert v0["h1_beats_contrastive"] == pytest.approx(6.0) and v1["h1_beats_contrastive"] == pytest.approx(0.0)
    assert v0["h2_beats_global_kd"] == pytest.approx(4.0) and v1["h2_beats_global_kd"] == pytest.approx(-1.0)
    assert v0["m1_relations_vs_global_kd"] == pytest.approx(8.0) and v1["m1_relations_vs_global_kd"] == pytest.approx(8.0)
    assert v0["p5_hierd_fits_structure"] == pytest.approx(0.5) and v1["p5_hierd_fits_structure"] == pytest.approx(1.0)
    assert v0["p3_distillation_has_room"] == pytest.approx(2.0) and v1["p3_distillation_has_room"] == pytest.approx(1.0)
    assert v0["p4_students_converged"] == pytest.approx(5.0) and v1["p4_students_converged"] == pytest.approx(5.0)
    assert v0["k1_detached_groups_pass_no_gradient"] == 0.0 and v1["k1_detached_groups_pass_no_gradient"] == 1e-9
    assert v0["x1_coarse_cluster_ari"] == pytest.approx(0.3) and v0["x2_paper_rule_ari"] == pytest.approx(0.2)


def test_profiles_and_bounds():
    keys = {p: set(v) for p, v in experiment.EXPERIMENT_PROFILES.items()}
    assert keys["smoke"] == keys["book"] == keys["paper"]
    assert set(experiment.EXPERIMENT_BOUNDS) == keys["book"] - {"seeds"}
    assert len(experiment.EXPERIMENT_PROFILES["book"]["seeds"]) >= 5
    assert experiment.EXPERIMENT_PROFILES["book"]["seeds"] == load_chapter("hierd")["confirmatory_seeds"]


def test_student_patches_align_with_the_scene_cells():
    """Every student patch lies inside one 12-px cell of the scene (the cells' edges are patch edges)."""
    for profile in experiment.EXPERIMENT_PROFILES.values():
        assert task.CELL % profile["student_patch"] == 0


def test_method_weights_scale_only_the_distillation_weights():
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", gkd_scale=0.2, hierd_scale=5.0)
    assert experiment.method_weights(cfg, "contrastive") is None
    gkd, hierd = experiment.method_weights(cfg, "global_kd"), experiment.method_weights(cfg, "hierd")
    assert (gkd.kd, gkd.cross, gkd.rkd, gkd.tok) == pytest.approx((0.0, 0.0, 0.05, 0.1))
    assert (hierd.kd, hierd.cross, hierd.rkd, hierd.tok) == pytest.approx((12.5, 12.5, 1.25, 0.1))
    assert experiment.METHODS["hierd"].kd == 2.5  # the code's weights are left as they are


def test_forked_seeds_equal_the_sequential_run_and_the_probe_is_read():
    """Two worker processes give every seed the same numbers as one process, and the convergence probe
    (P@1 after the probe share of the steps) is recorded for every student."""
    kw = dict(n_train=64, n_test=32, seeds=[3, 4], teacher_epochs=1, student_epochs=2, probe_share=0.5)
    one = experiment.run_experiment(core.configure(experiment.EXPERIMENT_PROFILES, "smoke", workers=1, **kw))
    two = experiment.run_experiment(core.configure(experiment.EXPERIMENT_PROFILES, "smoke", workers=2, **kw))
    cols = ["seed", "method", "p_at_1", "in_scene", "p_at_1_probe", "val_p_at_1", "structure_gap"]
    pd.testing.assert_frame_equal(one["results"][cols], two["results"][cols])
    assert one["results"]["p_at_1_probe"].notna().all()


# ---- exercises ----------------------------------------------------------------------------------


def test_graders_accept_the_reference_and_reject_a_wrong_answer():
    def weights(h, members):
        return method.group_weights(torch.as_tensor(h)[None], torch.as_tensor(members)[None], int(members.max()) + 1)[0][0]

    exercises.check_group_weights(weights)
    with pytest.raises(AssertionError):
        exercises.check_group_weights(lambda h, m: (m >= 0) / np.maximum(1, np.bincount(m[m >= 0])[np.maximum(m, 0)]))

    def pi(a, t, c):
        b = (t[:, None] == np.arange(t.max() + 1)).astype(float)
        cc = (c[:, None] == np.arange(c.max() + 1)).astype(float)
        out = b.T @ a @ cc
        return out / out.sum()

    exercises.check_cross_pi(pi)
    with pytest.raises(AssertionError):
        exercises.check_cross_pi(lambda a, t, c: pi(a, t, c) * 2)


# ---- update steps: descent direction, composite losses, second step -------------------------------


def _smooth_l1(x):
    return 0.5 * x * x if abs(x) < 1 else abs(x) - 0.5


def _rkd_by_hand(s, t):
    """Step 7 with loops: squared distances of distinct pairs divided by their MEAN, Huber; cosines of
    the angle at j of distinct triplets (i, j, k), Huber; (L_D + L_A) / 2."""
    n = len(s)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]

    def dist(e):
        d = {(i, j): float(((e[i] - e[j]) ** 2).sum()) for i, j in pairs}
        mean = sum(d.values()) / len(d)
        return {k: v / mean for k, v in d.items()}

    def angle(e, i, j, k):
        u, v = e[i] - e[j], e[k] - e[j]
        return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))

    ds, dt = dist(s), dist(t)
    loss_d = np.mean([_smooth_l1(ds[p] - dt[p]) for p in pairs])
    triplets = [(i, j, k) for i, j in pairs for k in range(n) if k not in (i, j)]
    loss_a = np.mean([_smooth_l1(angle(s, *tr) - angle(t, *tr)) for tr in triplets])
    return 0.5 * (loss_d + loss_a), loss_d, loss_a


def test_rkd_loss_equals_the_hand_computed_mean_normalised_terms():
    """RKD on 5 points: the distance term (each model's squared distances over their mean, Huber) and the
    angle term, both nonzero, averaged; the sum-normalised variant would give another value."""
    rng = np.random.default_rng(3)
    s, t = rng.normal(size=(5, 3)), rng.normal(size=(5, 4)) * 2.0
    total, loss_d, loss_a = _rkd_by_hand(s, t)
    got = float(method.rkd_loss(torch.tensor(s), torch.tensor(t)))
    assert got == pytest.approx(total, rel=1e-10)
    assert loss_d > 1e-3 and loss_a > 1e-3


def test_rkd_loss_gradient_reaches_the_student_only_and_lowers_the_loss():
    """The gradient of RKD w.r.t. the student's embeddings is the finite-difference slope of the hand-made
    loss; the teacher gets none; a small step against it lowers the loss."""
    rng = np.random.default_rng(4)
    s = torch.tensor(rng.normal(size=(4, 3)), requires_grad=True)
    t = torch.tensor(rng.normal(size=(4, 3)), requires_grad=True)
    loss = method.rkd_loss(s, t)
    gs, gt = torch.autograd.grad(loss, (s, t), allow_unused=True)
    assert gt is None or torch.all(gt == 0)
    h = 1e-6
    base = s.detach().numpy()
    for i, j in ((0, 0), (2, 1), (3, 2)):
        plus, minus = base.copy(), base.copy()
        plus[i, j] += h
        minus[i, j] -= h
        fd = (_rkd_by_hand(plus, t.detach().numpy())[0] - _rkd_by_hand(minus, t.detach().numpy())[0]) / (2 * h)
        assert float(gs[i, j]) == pytest.approx(fd, rel=1e-4, abs=1e-8)
    stepped = _rkd_by_hand(base - 1e-3 * gs.numpy(), t.detach().numpy())[0]
    assert stepped < loss.item()


@pytest.fixture(scope="module")
def tiny_run():
    """32 training scenes, a teacher (untrained) and its targets: shared by the step tests."""
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", n_train=32, n_test=32)
    data = experiment.load_data(cfg)
    teacher = experiment.make_embedder(cfg, "teacher", seed=1)
    return cfg, data["train"], experiment.teacher_targets(teacher, data["train"], cfg, 0)


def test_hierd_loss_total_is_the_weighted_sum_of_its_returned_terms(tiny_run):
    """Step 8 with distinct weights: total = kd (text + vis) / 2 + cross L_cross; L^tok enters text and
    vis linearly in its weight; relational=False leaves only the token terms and no cross term."""
    cfg, train, targets = tiny_run
    student = experiment._student(cfg, 2)
    idx = torch.arange(12)
    out_q, out_a = student(train["images"][idx], train["questions"][idx]), student(None, train["answers"][idx])
    pairs = experiment._take(targets["pairs"], idx)

    def terms(**kw):
        return method.hierd_loss(out_q, out_a, pairs, targets["projectors"], student.n_patches,
                                 method.HieRDWeights(**kw))

    got = terms(kd=1.3, cross=0.7, tok=0.2)
    assert got["text"] > 0 and got["vis"] > 0 and got["cross"] > 0
    assert got["total"].item() == pytest.approx(float(1.3 * 0.5 * (got["text"] + got["vis"]) + 0.7 * got["cross"]), rel=1e-6)
    zero, double = terms(kd=1.3, cross=0.7, tok=0.0), terms(kd=1.3, cross=0.7, tok=0.4)
    for part in ("text", "vis"):
        tok_part = float(got[part] - zero[part])
        assert tok_part > 1e-4 and float(double[part] - zero[part]) == pytest.approx(2 * tok_part, rel=1e-5)
    assert float(zero["cross"]) == pytest.approx(float(got["cross"]), rel=1e-6)
    token_only = terms(kd=1.3, cross=0.7, tok=0.2, relational=False)
    assert float(token_only["cross"]) == 0.0
    for part in ("text", "vis"):
        assert float(token_only[part]) == pytest.approx(float(got[part] - zero[part]), rel=1e-5)


def _sgd_adamw(monkeypatch):
    """Plain SGD in place of the trainer's AdamW (the learning rates of its parameter groups kept)."""
    def make(params, weight_decay=0.0, fused=None, **kw):
        assert weight_decay == 0.0
        return torch.optim.SGD(params, lr=0.0)

    monkeypatch.setattr(torch.optim, "AdamW", make)


def _step_cfg(warmup):
    from types import SimpleNamespace

    return SimpleNamespace(batch=16, warmup=warmup, projector_lr_scale=5.0, weight_decay=0.0, grad_clip=1e9, tau=0.5)


def _hand_nce(q, a, ids, tau):
    """Eq. 1 by hand: soft targets uniform over the answers with the query's answer id."""
    positive = (ids[:, None] == ids[None]).float()
    logp = torch.log_softmax(q @ a.T / tau, 1)
    return -((positive / positive.sum(1, keepdim=True)) * logp).sum(1).mean()


def test_train_embedder_contrastive_step_is_sgd_on_info_nce(tiny_run, monkeypatch):
    """The teacher's (contrastive) step: one plain-SGD step (a one-step run: schedule 1) equals the
    hand-written InfoNCE step on the seeded batch."""
    import copy

    _sgd_adamw(monkeypatch)
    cfg, train, _ = tiny_run
    sub = {k: v[:16] for k, v in train.items()}
    model = experiment._student(cfg, 3)
    ref = copy.deepcopy(model)
    experiment.train_embedder(model, sub, 1, 0.2, _step_cfg(warmup=1.0), seed=5)
    idx = torch.as_tensor(np.random.default_rng([5, 7]).permutation(16))
    loss = _hand_nce(ref(sub["images"][idx], sub["questions"][idx])["embedding"],
                     ref(None, sub["answers"][idx])["embedding"], sub["answer_id"][idx], 0.5)
    grads = torch.autograd.grad(loss, list(ref.parameters()), allow_unused=True)
    for p_new, p_old, g in zip(model.parameters(), ref.parameters(), grads):
        want = p_old if g is None else p_old - 0.2 * g
        assert torch.allclose(p_new, want, atol=1e-6, rtol=1e-4)
    assert any(g is not None and g.abs().max() > 1e-4 for g in grads)


def test_train_embedder_student_two_steps_are_sgd_on_nce_rkd_and_hierd(tiny_run, monkeypatch):
    """A HieRD student over two steps (two batches; schedule 1/2 then 1; projectors at 5x the lr): each
    is -lr x the gradient of InfoNCE + rkd x RKD(student, teacher embeddings) + the step-8 total."""
    import copy

    _sgd_adamw(monkeypatch)
    cfg, train, targets = tiny_run
    weights = method.HieRDWeights(kd=1.5, cross=0.5, rkd=0.7, tok=0.2)
    model = experiment._student(cfg, 4)
    projectors = experiment.make_projectors(cfg, 1)
    ref, ref_proj = copy.deepcopy(model), copy.deepcopy(projectors)
    curve = experiment.train_embedder(model, train, 1, 0.05, _step_cfg(warmup=1.0), seed=6, weights=weights,
                                      targets={**targets, "projectors": projectors})
    assert len(curve) == 2 and (curve["rkd"] > 0).all() and (curve["cross"] > 0).all()
    order = np.random.default_rng([6, 7]).permutation(32)
    for step, scale in ((0, 0.5), (1, 1.0)):
        idx = torch.as_tensor(order[step * 16:(step + 1) * 16])
        out_q, out_a = ref(train["images"][idx], train["questions"][idx]), ref(None, train["answers"][idx])
        loss = _hand_nce(out_q["embedding"], out_a["embedding"], train["answer_id"][idx], 0.5)
        e_t = torch.cat([targets["e_q"][idx], targets["e_a"][idx]])
        loss = loss + 0.7 * method.rkd_loss(torch.cat([out_q["embedding"], out_a["embedding"]]), e_t)
        loss = loss + method.hierd_loss(out_q, out_a, experiment._take(targets["pairs"], idx), ref_proj,
                                        ref.n_patches, weights)["total"]
        params = list(ref.parameters()) + list(ref_proj.parameters())
        lrs = [0.05] * len(list(ref.parameters())) + [0.25] * len(list(ref_proj.parameters()))
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        with torch.no_grad():
            for p, g, lr in zip(params, grads, lrs):
                if g is not None:
                    p -= lr * scale * g
    for got, want in zip(list(model.parameters()) + list(projectors.parameters()),
                         list(ref.parameters()) + list(ref_proj.parameters())):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


def test_schedule_warm_up_then_cosine():
    """Linear warm-up over round(warmup x steps) steps, then a cosine from 1 to 0 over the rest."""
    values = [experiment._schedule(s, 8, 0.25) for s in range(8)]
    assert values[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert values[5] == pytest.approx(0.5) and values[7] == pytest.approx(0.5 * (1 + math.cos(math.pi * 5 / 6)))


# ---- mutation-hardening (issue 44): the embedder written out, edge cases of the group pieces ----------


def _embedder_by_hand(model, images, text):
    """The embedder written out: patches cut with loops (channel, row, column order), centred at 0.5, a
    linear patch embedding plus positions, then words plus positions and EOS; each block pre-LN causal
    attention (torch's scaled_dot_product_attention, scale 1 / sqrt(d_head)) and a GELU MLP; the last
    state through the final LayerNorm; the embedding its normalised EOS row."""
    d, p = model.ln_f.normalized_shape[0], model.patch
    text = torch.cat([text, torch.full((len(text), 1), model.eos_id)], 1)
    x = model.token_embed.weight[text] + model.text_pos[: text.shape[1]]
    if images is not None:
        g = 24 // p
        patches = torch.stack([torch.stack([images[b, :, r * p:(r + 1) * p, c * p:(c + 1) * p].reshape(-1)
                                            for r in range(g) for c in range(g)]) for b in range(len(images))])
        x = torch.cat([(patches - 0.5) @ model.patch_embed.weight.T + model.patch_embed.bias + model.image_pos, x], 1)
    hidden, attn = [x], []
    for blk in model.blocks:
        nh, t = blk.n_head, x.shape[1]
        y = torch.nn.functional.layer_norm(x, (d,), blk.ln1.weight, blk.ln1.bias, 1e-5)
        q, k, v = (z.reshape(len(x), t, nh, d // nh).transpose(1, 2) for z in (y @ blk.qkv.weight.T + blk.qkv.bias).split(d, -1))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        w = torch.zeros(len(x), nh, t, t)
        for i in range(t):
            w[:, :, i, : i + 1] = torch.softmax((q[:, :, i : i + 1] @ k[:, :, : i + 1].transpose(-1, -2))[:, :, 0] / math.sqrt(d // nh), -1)
        x = x + out.transpose(1, 2).reshape(len(x), t, d) @ blk.proj.weight.T + blk.proj.bias
        y = torch.nn.functional.layer_norm(x, (d,), blk.ln2.weight, blk.ln2.bias, 1e-5)
        x = x + torch.nn.functional.gelu(y @ blk.mlp[0].weight.T + blk.mlp[0].bias) @ blk.mlp[2].weight.T + blk.mlp[2].bias
        hidden.append(x)
        attn.append(w.mean(1))
    hidden[-1] = torch.nn.functional.layer_norm(x, (d,), model.ln_f.weight, model.ln_f.bias, 1e-5)
    return hidden, attn, hidden[-1][:, -1] / hidden[-1][:, -1].norm(dim=-1, keepdim=True)


def test_embedder_forward_equals_the_transformer_written_out():
    """The embedder's hidden states, head-averaged causal attention maps and EOS embedding equal the
    written-out transformer (image + text and text only), with random LayerNorm affines."""
    torch.manual_seed(0)
    model = method.Embedder(patch=12, d=8, n_layer=2, n_head=2, vocab_size=20, eos_id=1, seed=3)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    images, text = torch.rand(2, 3, 24, 24), torch.tensor([[2, 3, 4, 5, 6, 7, 8], [9, 8, 7, 6, 5, 4, 3]])
    with torch.no_grad():
        for imgs in (images, None):
            out = model(imgs, text)
            hidden, attn, emb = _embedder_by_hand(model, imgs, text)
            assert len(out["hidden"]) == 3 and len(out["attn"]) == 2
            for got, want in zip(out["hidden"] + out["attn"], hidden + attn):
                assert torch.allclose(got, want, atol=1e-5)
            assert torch.allclose(out["embedding"], emb, atol=1e-5)


def test_embedder_initial_scales_and_text_positions():
    """Patch positions and words start with standard deviation 0.3 (INIT_SCALE, the scale of the patch
    embeddings); there is one text position per question token plus EOS (7 + 1); the seed fixes the weights."""
    model = method.Embedder(patch=4, d=64, n_layer=1, n_head=2, vocab_size=40, eos_id=1, seed=0)
    assert model.text_pos.shape == (task.QUESTION_LEN + 1, 64) and model.image_pos.shape == (36, 64)
    for p in (model.image_pos, model.token_embed.weight, model.text_pos):
        assert 0.27 < float(p.detach().std()) < 0.33
    again = method.Embedder(patch=4, d=64, n_layer=1, n_head=2, vocab_size=40, eos_id=1, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))


def test_layer_pairs_go_from_the_input_to_the_last_states_word_level_first():
    """Step 8's layer pairs: the first maps input embeddings to input embeddings at word level, the others are
    phrase level, indices rise in both models and the last pairs the teacher's and the student's final states."""
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke")
    levels = [lev for _, _, lev in method.LAYER_PAIRS]
    assert method.LAYER_PAIRS[0][:2] == (0, 0) and levels == ["word", "phrase", "phrase"]
    t_idx, s_idx = [t for t, _, _ in method.LAYER_PAIRS], [s for _, s, _ in method.LAYER_PAIRS]
    assert t_idx == sorted(set(t_idx)) and s_idx == sorted(set(s_idx))
    assert (t_idx[-1], s_idx[-1]) == (cfg.teacher_layers, cfg.student_layers)
    assert t_idx[1] == 2 and s_idx[1] == 1


def test_cluster_distance_of_short_states_is_the_cosine_distance():
    """Step 3's 1 - cos does not depend on the states' lengths: states a thousand times shorter than 1 give the
    same distances, and orthogonal unit-free states at the same centre are 1 apart."""
    rng = np.random.default_rng(5)
    states, centres = rng.normal(size=(4, 3)), method.patch_centres(12)
    assert np.allclose(method.cluster_distance(1e-3 * states, centres, 0.2), method.cluster_distance(states, centres, 0.2))
    d = method.cluster_distance(np.array([[1e-3, 0.0], [0.0, 2e-3]]), np.zeros((2, 2)), 0.5)
    assert d[0, 1] == pytest.approx(1.0)


def test_dbscan_chains_and_border_points_join_the_nearest_core():
    """DBSCAN's clusters are transitive over a long chain of core points (16 points spaced 1, eps 1); a border
    point within eps of cores of two clusters joins the nearer one's cluster, not the first."""
    x = np.arange(16.0)
    chain = method.dbscan(np.abs(x[:, None] - x[None]), 1.0, 2)
    assert chain.tolist() == [0] * 16
    # "within eps" includes eps itself: 1 and 2 are cores (3 points at distance <= 1), 0 and 3 their border
    pts = np.array([0.0, 1.0, 2.0, 3.0, 10.0, 10.5, 10.9])
    assert method.dbscan(np.abs(pts[:, None] - pts[None]), 1.0, 3).tolist() == [0, 0, 0, 0, 1, 1, 1]
    # min_samples 4, eps 1.45: cores -0.9..0.0 (cluster 0) and 2.6..3.5 (cluster 1); a point at 1.4 reaches
    # only the cores 0.0 (1.4 away) and 2.6 (1.2 away): a border point, it joins cluster 1
    cores = [-0.9, -0.6, -0.3, 0.0, 2.6, 2.9, 3.2, 3.5]
    for border, cluster in ((1.4, 1), (1.2, 0)):
        pts = np.array(cores + [border, 10.0])
        labels = method.dbscan(np.abs(pts[:, None] - pts[None]), 1.45, 4)
        assert labels.tolist() == [0] * 4 + [1] * 4 + [cluster, -1]


def test_map_clusters_clamps_teacher_patches_beyond_the_student_grid():
    """A 5 px student grid covers 20 of the 24 px: teacher patches centred beyond it land in the last student
    row or column (clamped), by majority."""
    labels = np.full(36, -1)  # teacher 4 px grid, centres at 2, 6, ..., 22
    labels[5] = 0  # centre (22, 2): x -> floor(22 / 5) = 4 -> clamped to 3 -> student patch 3
    labels[35] = 1  # centre (22, 22) -> student patch 15
    labels[34] = 1  # centre (18, 22) -> (3, 4 -> 3): patch 15
    out = method.map_clusters(labels, 4, 5)
    want = np.full(16, -1)
    want[3], want[15] = 0, 1
    assert out.tolist() == want.tolist()


def test_group_weights_singletons_are_exactly_one_and_weights_scale_free():
    """Step 4: a singleton group's token gets omega = 1 exactly (float64); token and cross weights are
    normalised, so halving the token weights or scaling the attention by 0.01 changes nothing."""
    h = torch.tensor([[[1.0, 2.0, 0.5], [0.0, 1.0, 3.0], [2.0, 0.0, 1.0]]], dtype=torch.float64)
    omega, g, valid = method.group_weights(h, torch.tensor([[1, -1, 0]]), 2)
    assert omega[0].tolist() == [1.0, 0.0, 1.0] and torch.equal(g[0, 1], h[0, 0]) and valid[0].tolist() == [True, True]
    proj = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    tgt = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])
    assert float(method.token_loss(proj, tgt, torch.tensor([[0.125, 0.375]]))) == pytest.approx(0.75)
    attention = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]])
    text = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    vision = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    assert torch.allclose(method.cross_pi(0.01 * attention, text, vision), method.cross_pi(attention, text, vision))


def _to(x, device):
    """Every tensor of a nested dict / tuple / list moved to ``device``."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], (torch.Tensor, dict)):
        return type(x)(_to(v, device) for v in x)
    return x


def test_every_piece_stays_on_its_inputs_device(tiny_run):
    """The embedder and every loss build their masks, indices and constants on the device of their inputs
    (checked on torch's shape-only 'meta' device: a constant made on the CPU cannot meet a meta tensor), so a
    GPU run never mixes devices; every returned term lives there too."""
    meta = torch.device("meta")
    cfg, train, targets = tiny_run
    student = experiment._student(cfg, 2).to(meta)
    idx = torch.arange(4)
    out_q = student(train["images"][idx].to(meta), train["questions"][idx].to(meta))
    out_a = student(None, train["answers"][idx].to(meta))
    assert all(t.device == meta for t in out_q["hidden"] + out_q["attn"] + [out_q["embedding"], out_a["embedding"]])
    pairs = _to(experiment._take(targets["pairs"], idx), meta)
    projectors = experiment.make_projectors(cfg, 0).to(meta)  # fresh ones: .to moves a module in place
    for weights in (method.HieRDWeights(), method.HieRDWeights(relational=False)):
        terms = method.hierd_loss(out_q, out_a, pairs, projectors, student.n_patches, weights)
        assert all(v.device == meta for v in terms.values())
    # in double precision every term, the zero L_cross of the token-only variant included, is float64
    as64 = lambda o: {k: [t.double() for t in v] if k in ("hidden", "attn") else v.double() for k, v in o.items()}  # noqa: E731
    pairs64 = {k: ({kk: vv.double() if vv.is_floating_point() else vv for kk, vv in v.items()} if isinstance(v, dict)
                   else v.double() if isinstance(v, torch.Tensor) else v) for k, v in pairs.items()}
    terms = method.hierd_loss(as64(out_q), as64(out_a), pairs64, projectors.double(), student.n_patches,
                              method.HieRDWeights(relational=False))
    assert all(v.dtype == torch.float64 for v in terms.values())
    e = torch.randn(4, 3, device=meta)
    assert method.info_nce(e, e, 0.5).device == meta and method.rkd_loss(e, e).device == meta
    assert method.info_nce(e, e, 0.5, positive=torch.ones(4, 4, dtype=torch.bool, device=meta)).device == meta
    omega, g, valid = method.group_weights(torch.randn(2, 4, 3, device=meta), torch.zeros(2, 4, dtype=torch.long, device=meta), 2)
    assert omega.device == g.device == valid.device == meta
    assert method.relational_loss(g, g, valid).device == meta


def test_embedder_size_is_the_documented_architecture():
    """The parameter count equals the one written from the architecture: a linear patch embedding (3 p^2 -> d),
    one position per patch and per text slot (8), a word table, per block two LayerNorms, qkv (d -> 3d), the
    output projection and a 4x MLP, then the final LayerNorm."""
    d, p, v, n_layer = 8, 6, 11, 3
    model = method.Embedder(patch=p, d=d, n_layer=n_layer, n_head=2, vocab_size=v, eos_id=1)
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    want = (3 * p * p * d + d) + 16 * d + 8 * d + v * d + n_layer * block + 2 * d
    assert sum(t.numel() for t in model.parameters()) == want
    assert model.n_patches == 16 and model.grid == 4


def test_info_nce_soft_targets_normalise_each_querys_row():
    """Eq. 1 with positives that are not symmetric (query 0: targets 0 and 1; query 1: target 1 only): each
    query's soft target is uniform over its own positives."""
    q = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    t = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    positive = torch.tensor([[True, True], [False, True]])
    logits = (q @ t.T / 0.5).numpy()
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    want = -(0.5 * (logp[0, 0] + logp[0, 1]) + logp[1, 1]) / 2
    assert float(method.info_nce(q, t, 0.5, positive)) == pytest.approx(want, rel=1e-6)


def test_token_and_cross_losses_over_a_batch_by_hand():
    """Step 5's L^tok is length-free (projections 1000 times shorter change nothing) and averages over the samples
    with positive weight only; step 6's Pi is normalised per sample and L_cross is the mean over samples."""
    proj = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]])
    tgt = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]])
    w = torch.tensor([[0.25, 0.75], [0.0, 0.0]])  # the second sample has no weight: left out of the mean
    assert float(method.token_loss(proj, tgt, w)) == pytest.approx(0.75)
    assert float(method.token_loss(1e-3 * proj, tgt, w)) == pytest.approx(0.75, rel=1e-6)
    attention = torch.tensor([[[0.5, 0.5], [0.0, 1.0]], [[2.0, 0.0], [0.0, 2.0]]])
    eye = torch.eye(2).expand(2, 2, 2)
    pi = method.cross_pi(attention, eye, eye)
    assert torch.allclose(pi, torch.tensor([[[0.25, 0.25], [0.0, 0.5]], [[0.5, 0.0], [0.0, 0.5]]]))
    xs, xt = torch.ones(2, 2, 2), torch.zeros(2, 2, 2)
    xs[1] = 3.0
    # sample 0: sum_ak Pi (1 - 0)^2 = 1; sample 1: sum Pi 9 = 9; mean 5
    assert float(method.cross_loss(pi, xs, xt)) == pytest.approx(5.0)


def test_hierd_loss_cross_term_averages_the_pairs_with_attention_only(tiny_run):
    """Step 8's L_cross is the mean over the layer pairs that have a teacher attention map: with only the
    first pair's map it is that pair's value (not half of it), as the per-pair form gives."""
    cfg, train, targets = tiny_run
    student = experiment._student(cfg, 2)
    idx = torch.arange(4)
    with torch.no_grad():
        out_q, out_a = student(train["images"][idx], train["questions"][idx]), student(None, train["answers"][idx])
    pairs = {**experiment._take(targets["pairs"], idx), "has_pi": (True, False, False)}
    weights = method.HieRDWeights()
    terms = method.hierd_loss(out_q, out_a, pairs, targets["projectors"], student.n_patches, weights)
    *_, l_cross = _per_pair_reference(out_q, out_a, pairs, targets["projectors"], student.n_patches, weights)
    assert float(l_cross) > 0 and float(terms["cross"]) == pytest.approx(float(l_cross), rel=1e-5)


def test_cluster_tokens_eps_is_a_percentile_of_the_off_diagonal_distances():
    """Step 3's eps is the percentile of the distances between distinct tokens (the zero diagonal left out): two
    identical pairs of orthogonal states have off-diagonal distances 0 (4 of 12) and 1 (8 of 12), so the 20th
    percentile (0) splits them into two clusters and the 40th (1) joins all four."""
    states = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.0, 3.0]])
    centres = np.zeros((4, 2))
    assert method.cluster_tokens(states, centres, 0.0, 20.0, 2).tolist() == [0, 0, 1, 1]
    assert method.cluster_tokens(states, centres, 0.0, 40.0, 2).tolist() == [0, 0, 0, 0]


def test_default_seed_and_patch_centres_of_a_grid_short_of_the_image():
    """The embedder's default seed is 0 (two default embedders are equal); a 5 px grid has floor(24 / 5) = 4
    patches a side, centred at 2.5, 7.5, 12.5, 17.5."""
    a = method.Embedder(patch=12, d=8, n_layer=1, n_head=1, vocab_size=4, eos_id=1)
    b = method.Embedder(patch=12, d=8, n_layer=1, n_head=1, vocab_size=4, eos_id=1, seed=0)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    c = method.patch_centres(5)
    assert c.shape == (16, 2) and c[:5].tolist() == [[2.5, 2.5], [7.5, 2.5], [12.5, 2.5], [17.5, 2.5], [2.5, 7.5]]


def test_clustering_of_a_stack_with_two_leading_dimensions_equals_each_image_alone():
    """Step 3 on a (2, 2, N, .) stack: distances, DBSCAN (border points, noise, an all-noise image) and
    cluster_tokens (images of different distance scales, one eps each) equal the per-image results; the spatial
    term uses the distance between patch centres (not their sum)."""
    d = method.cluster_distance(np.ones((2, 3)), np.array([[6.0, 6.0], [18.0, 6.0]]), 1.0)
    assert d[0, 1] == pytest.approx(12 / math.hypot(24, 24))
    cores = [-0.9, -0.6, -0.3, 0.0, 2.6, 2.9, 3.2, 3.5]
    mats = []
    for border in (1.4, 1.2, 10.0):
        pts = np.array(cores + [border, 10.0])
        mats.append(np.abs(pts[:, None] - pts[None]))
    mats.append(np.abs(np.arange(10.0)[:, None] - np.arange(10.0)[None]) * 5.0)  # all noise at eps 1.45
    stack = np.stack(mats).reshape(2, 2, 10, 10)
    got = method.dbscan(stack, np.full((2, 2), 1.45), 4)
    for i in range(2):
        for j in range(2):
            assert got[i, j].tolist() == method.dbscan(stack[i, j], 1.45, 4).tolist()
    assert got[1, 1].tolist() == [0] * 10 and got[0, 0, 8] == 1 and got[0, 1, 8] == 0 and got[1, 0, 8] == -1
    rng = np.random.default_rng(7)
    states = rng.normal(size=(2, 2, 9, 4)) * np.array([1.0, 3.0])[None, :, None, None]
    states[:, :, :4] += np.array([[2.0, -1.0], [0.5, 4.0]])[:, :, None, None]
    centres = method.patch_centres(8)
    dist = method.cluster_distance(states, centres, 0.3)
    labels = method.cluster_tokens(states, centres, 0.3, 25.0, 2)
    for i in range(2):
        for j in range(2):
            assert np.allclose(dist[i, j], method.cluster_distance(states[i, j], centres, 0.3))
            assert labels[i, j].tolist() == method.cluster_tokens(states[i, j], centres, 0.3, 25.0, 2).tolist()


def test_relational_token_and_cross_losses_more_cases_by_hand():
    """L^rel is length-free (group vectors 100 times shorter than 1 give the same loss); L^tok is the mean over
    every sample with weight; L_cross squares the difference X^S - X^T (both non-zero here)."""
    gs = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    gt = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]]])
    valid = torch.tensor([[True, True, True]])
    assert float(method.relational_loss(0.01 * gs, 0.01 * gt, valid)) == pytest.approx(1 / 3, rel=1e-5)
    proj = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]])
    tgt = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]])
    w = torch.tensor([[0.25, 0.75], [0.5, 0.5]])  # per sample 0.75 and 0.5 -> mean 0.625
    assert float(method.token_loss(proj, tgt, w)) == pytest.approx(0.625)
    pi = torch.tensor([[[0.5, 0.0], [0.0, 0.5]]])
    xs, xt = torch.tensor([[[1.0, 0.2], [0.0, 0.3]]]), torch.tensor([[[0.5, 0.0], [0.0, 0.1]]])
    assert float(method.cross_loss(pi, xs, xt)) == pytest.approx(0.5 * 0.25 + 0.5 * 0.04)


def test_hierd_loss_leaves_out_groups_the_student_lacks_and_renormalises_pi(tiny_run):
    """A teacher group with no student token is left out of L^rel (the teacher marking every group valid changes
    nothing, as the per-pair form, which intersects the masks, gives), and Pi is renormalised over the student's
    clusters (halving the teacher's Pi changes nothing)."""
    cfg, train, targets = tiny_run
    student = experiment._student(cfg, 2)
    idx = torch.arange(4)
    with torch.no_grad():
        out_q, out_a = student(train["images"][idx], train["questions"][idx]), student(None, train["answers"][idx])
    pairs = experiment._take(targets["pairs"], idx)
    weights = method.HieRDWeights()
    base = method.hierd_loss(out_q, out_a, pairs, targets["projectors"], student.n_patches, weights)
    text = {**pairs["text"], "valid": torch.ones_like(pairs["text"]["valid"])}
    vision = {**pairs["vision"], "valid": torch.ones_like(pairs["vision"]["valid"])}
    loose = {**pairs, "text": text, "vision": vision, "pi": 0.5 * pairs["pi"]}
    assert not torch.equal(text["valid"], pairs["text"]["valid"]) and not torch.equal(vision["valid"], pairs["vision"]["valid"])
    got = method.hierd_loss(out_q, out_a, loose, targets["projectors"], student.n_patches, weights)
    for k in ("total", "text", "vis", "cross"):
        assert float(got[k].detach()) == pytest.approx(float(base[k].detach()), rel=1e-5), k
