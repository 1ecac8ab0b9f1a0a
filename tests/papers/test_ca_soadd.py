"""Unit tests of replib.papers.ca_soadd (strict one-class deepfake detection with boundary probes)."""

import numpy as np
import pytest
import torch
import yaml

from replib.core.paths import repo_root
from replib.papers.ca_soadd import baselines, exercises, experiment, method, task, theory

# ---- toy world -------------------------------------------------------------------------------


def test_synthesiser_is_deterministic_and_levelled():
    a = task.bona_fide(np.random.default_rng(3))
    b = task.bona_fide(np.random.default_rng(3))
    assert a.shape == (task.N_SAMPLES,) and np.array_equal(a, b)
    rms_db = 20 * np.log10(np.sqrt(np.mean(a.astype(float) ** 2)))
    assert -23.5 < rms_db < -16.5


@pytest.mark.parametrize("name", task.ATTACKS)
def test_attacks_are_finite_and_levelled(name):
    x = task.attack(np.random.default_rng(0), name)
    rms_db = 20 * np.log10(np.sqrt(np.mean(x.astype(float) ** 2)))
    assert x.shape == (task.N_SAMPLES,) and np.isfinite(x).all() and -23.5 < rms_db < -16.5


def test_regular_source_removes_jitter():
    rng = np.random.default_rng(0)
    spk = task.draw_speaker(rng)
    f0 = np.full(task.N_SAMPLES, 100.0)
    regular = task._glottal_source(np.random.default_rng(1), f0, spk, 0.0, 0.0)
    jittered = task._glottal_source(np.random.default_rng(1), f0, spk, 0.05, 0.0)
    # a strictly periodic source: pulses every 80 samples, so the unfiltered train repeats
    assert np.allclose(regular[800:880], regular[880:960], atol=1e-6)
    assert not np.allclose(jittered[800:880], jittered[880:960], atol=1e-3)


def test_probes_do_what_they_say():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 800))
    perm = task.probe(rng, x, "perm")
    assert np.allclose(np.sort(perm, 1), np.sort(x, 1))
    segs_x = [tuple(np.round(s[0], 8)) for s in np.split(x, 8, 1)]
    segs_p = [tuple(np.round(s[0], 8)) for s in np.split(perm, 8, 1)]
    assert sorted(segs_x) == sorted(segs_p)
    scr = task.probe(rng, x, "phase_scr")
    assert np.allclose(np.abs(np.fft.rfft(scr))[:, 1:-1], np.abs(np.fft.rfft(x))[:, 1:-1])
    res = task.probe(rng, x, "resamp")
    assert np.allclose(res[:, ::3], x[:, ::3])
    ones = np.ones((2, 100))
    assert np.all(np.sum(task.benign_view(rng, ones, 0.0) == 0, 1) == 10)


def test_front_end_shape_and_bound():
    x = np.stack([task.bona_fide(np.random.default_rng(i)) for i in range(4)])
    fe = task.FrontEnd(d=8).fit(x)
    f = fe(x)
    assert f.shape == (4, 4, 49, 8) and f.dtype == np.float32 and np.abs(f).max() <= 1


# ---- method ------------------------------------------------------------------------------------


def test_layer_mix_and_entropy():
    h = torch.ones(1, 2, 1, 1) * torch.tensor([1.0, 3.0]).reshape(1, 2, 1, 1)
    f, a = method.layer_mix(h, torch.tensor([0.0, float(np.log(3.0))]))
    assert torch.allclose(a, torch.tensor([0.25, 0.75])) and abs(float(f) - 2.5) < 1e-6
    assert abs(float(method.entropy_regulariser(a)) - (0.25 * np.log(0.25) + 0.75 * np.log(0.75))) < 1e-6


def test_online_standardiser_matches_batch_statistics():
    rng = np.random.default_rng(0)
    data = torch.tensor(rng.normal(3, 2, (50, 3)), dtype=torch.float32)
    os_ = method.OnlineStandardiser(3)
    for chunk in torch.split(data, [7, 13, 30]):
        os_.update(chunk)
    out = os_(data)
    assert torch.allclose(out.mean(0), torch.zeros(3), atol=1e-4)
    assert torch.allclose(out.std(0, unbiased=False), torch.ones(3), atol=1e-3)


def test_cumulative_centroid_weights_by_batch_size():
    cen = method.CumulativeCentroid(2)
    cen.update(torch.tensor([[3.0, 0.0]]))
    c = cen.update(torch.tensor([[0.0, 1.0], [0.0, 4.0]]))
    assert torch.allclose(c, torch.tensor([1 / 3, 2 / 3]))


def test_losses_on_hand_made_inputs():
    c = torch.tensor([0.0, 2.0])
    z = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert abs(float(method.compactness_loss(z, c)) - 0.5) < 1e-6
    zp = torch.tensor([[0.0, -1.0], [0.0, 1.0]])
    # max(0, 1 - 1 - 1) = 0 ; max(0, 1 - 0 + 1) = 2 -> mean 1
    assert abs(float(method.boundary_hinge_loss(z, zp, c, 1.0)) - 1.0) < 1e-6
    assert abs(float(method.boundary_hinge_loss(z, zp, c, 0.0)) - 0.5) < 1e-6
    # BCE: logits (s - b)/0.1 for real scores [1, 0] (label 1), probe scores [-1, 1] (label 0)
    bce = float(method.probe_bce_loss(z, zp, c, torch.tensor(0.0)))
    logits = np.array([10.0, 0.0, -10.0, 10.0])
    want = np.mean(np.r_[np.log1p(np.exp(-logits[:2])), np.log1p(np.exp(logits[2:]))])
    assert abs(bce - want) < 1e-5
    zg = z.clone().requires_grad_(True)
    view = torch.tensor([[0.0, 3.0], [-1.0, 0.0]], requires_grad=True)
    loss = method.benign_invariance_loss(zg, view)
    loss.backward()
    assert abs(loss.item() - 1.0) < 1e-6 and view.grad is None


def test_total_loss_is_the_full_sum():
    parts = [torch.tensor(v) for v in (1.0, 2.0, 3.0, 4.0)]
    assert abs(float(method.total_loss(*parts)) - (5 + 2 + 3 + 0.04)) < 1e-6
    # the official code's reading (only lambda_1 L_cpt) would give 5.04: different
    assert abs(float(method.total_loss(*parts)) - 5.04) > 1


def test_eer_and_threshold():
    assert method.eer([1.0, 2.0, 3.0], [-1.0, 0.0]) == 0.0
    assert abs(method.eer([0.0, 2.0], [1.0, 3.0]) - 0.5) < 1e-9
    assert method.calibrate_threshold(np.arange(101.0), 0.05) == 5.0


def test_training_runs_and_is_deterministic():
    rng = np.random.default_rng(0)
    feats = rng.standard_normal((16, 4, 5, 6)).astype(np.float32)
    probes = {"a": rng.standard_normal((16, 4, 5, 6)).astype(np.float32)}
    cfg = method.SOADDConfig(steps=6, batch=4, warmup=2, dim=3)
    enc1, c1 = method.train_soadd(feats, feats, probes, cfg, seed=1)
    enc2, c2 = method.train_soadd(feats, feats, probes, cfg, seed=1)
    assert torch.allclose(c1, c2) and torch.allclose(method.embed(enc1, feats), method.embed(enc2, feats))
    enc, c0 = baselines.train_deep_svdd(feats, cfg, seed=0)
    assert baselines.deep_svdd_score(enc, c0, feats).shape == (16,)
    enc, w = baselines.train_oc_softmax(feats, cfg, seed=0)
    assert np.all(np.abs(baselines.oc_softmax_score(enc, w, feats)) <= 1 + 1e-6)


def test_theory_helpers():
    hinge, bce = theory.hinge_and_bce_gradients(0.9, np.array([-0.5, 0.0]))
    assert list(hinge) == [0.0, 1.0] and np.all(bce > 0)
    spread_far, _ = theory.cosine_spread(np.random.default_rng(0), 32.0, n=300)
    spread_near, _ = theory.cosine_spread(np.random.default_rng(0), 0.0, n=300)
    assert spread_far < 0.1 * spread_near


def test_graders_accept_reference_and_reject_wrong():
    def hinge(z, zp, c, m):
        return float(method.boundary_hinge_loss(torch.as_tensor(z), torch.as_tensor(zp), torch.as_tensor(c), m))

    exercises.check_boundary_hinge(hinge)
    with pytest.raises(AssertionError):
        exercises.check_boundary_hinge(lambda z, zp, c, m: hinge(z, zp, c, m) + 0.1)
    exercises.check_threshold(method.calibrate_threshold)
    with pytest.raises(AssertionError):
        exercises.check_threshold(lambda s, a: float(np.quantile(s, 1 - a)))


# ---- claim values ------------------------------------------------------------------------------


def _row(seed, variant, distant, splice=0.3, fnr=0.05):
    return dict(seed=seed, variant=variant, eer_distant=distant, eer_splice=splice, fnr_at_alpha=fnr)


def test_claim_values_by_hand():
    runs = []
    for seed, vals in [(0, dict(full=0.20, idinv=0.26, nocabs=0.35, bce=0.23, svdd=0.31, ocs=0.40, svm=0.28)),
                       (1, dict(full=0.30, idinv=0.27, nocabs=0.29, bce=0.28, svdd=0.25, ocs=0.45, svm=0.33))]:
        runs += [_row(seed, "ca_soadd", vals["full"], splice=0.10, fnr=0.01 if seed == 0 else 0.12),
                 _row(seed, "ca_soadd + idinv", vals["idinv"]),
                 _row(seed, "without L_cabs", vals["nocabs"], splice=0.25),
                 _row(seed, "BCE on probes", vals["bce"]),
                 _row(seed, "deep_svdd", vals["svdd"]), _row(seed, "oc_softmax", vals["ocs"]),
                 _row(seed, "oc_svm", vals["svm"])]
    out = experiment.claim_values(runs)
    want = {
        0: dict(p1_attacks_detectable=0.28, h1_beats_one_class=0.08, h2_cabs_ablation=0.15, m1_margin_vs_bce=0.03,
                m2_idinv_sensitivity=0.06, c1_calibration=0.01, x1_splice_gain=0.15),
        1: dict(p1_attacks_detectable=0.33, h1_beats_one_class=-0.05, h2_cabs_ablation=-0.01,
                m1_margin_vs_bce=-0.02, m2_idinv_sensitivity=0.03, c1_calibration=0.02, x1_splice_gain=0.15),
    }
    assert set(out) == {0, 1}
    for seed in want:
        assert set(out[seed]) == set(want[seed])
        for cid, value in want[seed].items():
            assert out[seed][cid] == pytest.approx(value, abs=1e-12), (seed, cid)
    chapter = yaml.safe_load((repo_root() / "notebooks/ca_soadd/chapter.yml").read_text())
    assert set(out[0]) == {c["id"] for c in chapter["claims"]}


def test_bounds_cover_every_setting():
    for prof in experiment.EXPERIMENT_PROFILES.values():
        assert set(prof) - {"seeds"} == set(experiment.EXPERIMENT_BOUNDS)
