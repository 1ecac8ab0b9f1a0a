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
    assert f.shape == (4, 4, 97, 8) and f.dtype == np.float32 and np.abs(f).max() <= 1


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


def _row(seed, variant, distant, splice=0.3, fnr=0.05, probes=0.2):
    return dict(seed=seed, variant=variant, eer_distant=distant, eer_splice=splice, fnr_at_alpha=fnr,
                eer_probes=probes)


def test_claim_values_by_hand():
    runs = []
    for seed, vals in [(0, dict(full=0.20, idinv=0.26, nocabs=0.35, bce=0.23, noos=0.22, svdd=0.31, ocs=0.40,
                                svm=0.28, sup=0.10)),
                       (1, dict(full=0.30, idinv=0.27, nocabs=0.29, bce=0.28, noos=0.27, svdd=0.25, ocs=0.45,
                                svm=0.33, sup=0.24))]:
        runs += [_row(seed, "ca_soadd", vals["full"], splice=0.10, fnr=0.01 if seed == 0 else 0.12, probes=0.15),
                 _row(seed, "ca_soadd + idinv", vals["idinv"]),
                 _row(seed, "without L_cabs", vals["nocabs"], splice=0.25, probes=0.21 if seed == 0 else 0.14),
                 _row(seed, "BCE on probes", vals["bce"]),
                 _row(seed, "without OS", vals["noos"]),
                 _row(seed, "deep_svdd", vals["svdd"]), _row(seed, "oc_softmax", vals["ocs"]),
                 _row(seed, "oc_svm", vals["svm"]), _row(seed, "supervised (reference)", vals["sup"])]
    out = experiment.claim_values(runs)
    want = {
        0: dict(p1_one_class_competent=0.40, p2_encoder_competent=0.10, p3_headroom=0.18, p4_boundary_trained=0.06,
                h1_beats_one_class=0.08, h2_cabs_ablation=0.15, m1_margin_vs_bce=0.03, m2_idinv_sensitivity=0.06,
                m3_os_ablation=0.02, c1_calibration=0.01, x1_splice_gain=0.15, x2_ocsvm_calibration=0.28),
        1: dict(p1_one_class_competent=0.45, p2_encoder_competent=0.24, p3_headroom=0.01, p4_boundary_trained=-0.01,
                h1_beats_one_class=-0.05, h2_cabs_ablation=-0.01, m1_margin_vs_bce=-0.02, m2_idinv_sensitivity=0.03,
                m3_os_ablation=-0.03, c1_calibration=0.02, x1_splice_gain=0.15, x2_ocsvm_calibration=0.33),
    }
    assert set(out) == {0, 1}
    for seed in want:
        assert set(out[seed]) == set(want[seed])
        for cid, value in want[seed].items():
            assert out[seed][cid] == pytest.approx(value, abs=1e-12), (seed, cid)
    chapter = yaml.safe_load((repo_root() / "notebooks/ca_soadd/chapter.yml").read_text())
    assert set(out[0]) == {c["id"] for c in chapter["claims"]}


def test_corpus_has_every_split_and_seeds_differ():
    a = task.build_corpus(3, n_train=2, n_dev=1, n_test=1, n_sup=1)
    b = task.build_corpus(4, n_train=2, n_dev=1, n_test=1, n_sup=1)
    pairs = list(zip(a["split"], a["label"]))
    assert pairs.count(("train", "bona_fide")) == 2 and all(("test", x) in pairs for x in task.ATTACKS)
    assert sorted(lab for sp, lab in pairs if sp == "sup") == sorted(task.PROBE_DISTANT)
    assert not np.array_equal(a["wave"][0], b["wave"][0])


def test_harmonic_attack_has_no_noise_between_harmonics():
    """A5 is a sum of harmonics of F0: for a constant F0 its spectrum is concentrated at multiples of F0."""
    f0 = np.full(task.N_SAMPLES, 125.0)
    rng = np.random.default_rng(0)
    x = task.synthesise(rng, task.draw_speaker(rng))
    y = task._harmonic(rng, x, f0)
    spec = np.abs(np.fft.rfft(y * np.hanning(len(y)))) ** 2  # 1 Hz bins
    near = (np.abs((np.arange(len(spec)) + 62) % 125 - 62) <= 4) & (np.arange(len(spec)) > 60)
    assert spec[near].sum() / spec.sum() > 0.7  # white noise would put 9 / 125 there


def test_statistics_pooling_adds_the_weighted_std():
    torch.manual_seed(0)
    enc = method.Encoder(2, 3, 4, standardise=False, pooling="stats")
    h = torch.randn(5, 2, 6, 3)
    assert enc(h)[0].shape == (5, 4) and enc.head[0].in_features == 6


def test_supervised_reference_steps_descend_on_bce(monkeypatch):
    """Two SGD steps of the supervised reference equal the hand-written steps on BCE(logit, bona fide 1 /
    spoof 0) with balanced batches; the logit margin between bona fide and spoof clips widens."""
    _sgd(monkeypatch)
    feats, views, _ = _soadd_data()
    spoofs = views[::-1].copy() + 1.0
    cfg = method.SOADDConfig(steps=2, batch=4, lr=0.05, weight_decay=0.0, dim=3)
    enc0, out0 = baselines.train_supervised(feats, spoofs, method.SOADDConfig(**{**vars(cfg), "steps": 0}), seed=2)
    enc, out = baselines.train_supervised(feats, spoofs, cfg, seed=2)
    def margin(e, o):  # mean logit of bona fide clips minus that of spoofs
        return baselines.supervised_score(e, o, feats).mean() - baselines.supervised_score(e, o, spoofs).mean()

    before = margin(enc0, out0)
    params = list(enc0.parameters()) + list(out0.parameters())
    gen = np.random.default_rng(2)
    target = torch.tensor([1.0, 1.0, 0.0, 0.0])
    for _ in range(2):
        x = np.concatenate([feats[gen.choice(10, 2, replace=False)], spoofs[gen.choice(10, 2, replace=False)]])
        logit = out0(enc0(torch.from_numpy(x))[0])[:, 0]
        loss = -(target * torch.nn.functional.logsigmoid(logit)
                 + (1 - target) * torch.nn.functional.logsigmoid(-logit)).mean()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= cfg.lr * g
    for got, exp in zip(list(enc.parameters()) + list(out.parameters()), params):
        assert torch.allclose(got, exp, atol=1e-6)
    assert margin(enc, out) > before


def test_bounds_cover_every_setting():
    for prof in experiment.EXPERIMENT_PROFILES.values():
        assert set(prof) - {"seeds"} == set(experiment.EXPERIMENT_BOUNDS)


# ---- update steps: descent direction, composite loss, second step --------------------------------


def test_total_loss_weights_each_part_by_its_own_lambda():
    """Distinct lambdas and parts: each part is scaled by its own weight (a swap of l2 and l3, hidden by
    the default (5, 1, 1, 1e-2), or a dropped term changes the total)."""
    parts = [torch.tensor(v) for v in (1.0, 10.0, 100.0, 1000.0)]
    lambdas = (2.0, 3.0, 5.0, 7.0)
    assert float(method.total_loss(*parts, lambdas)) == pytest.approx(2 + 30 + 500 + 7000)
    for k in range(4):
        bumped = list(parts)
        bumped[k] = bumped[k] + 1.0
        assert float(method.total_loss(*bumped, lambdas)) == pytest.approx(7532 + lambdas[k])


def _sgd(monkeypatch):
    """Replace Adam by plain SGD (same lr, weight decay 0) inside the trainers."""
    def make(params, lr, weight_decay=0.0):
        assert weight_decay == 0.0
        return torch.optim.SGD(params, lr=lr)

    monkeypatch.setattr(torch.optim, "Adam", make)


def _soadd_data():
    rng = np.random.default_rng(5)
    feats = rng.standard_normal((10, 3, 4, 5)).astype(np.float32)
    views = (feats + 0.3 * rng.standard_normal(feats.shape)).astype(np.float32)
    probes = {"a": rng.standard_normal(feats.shape).astype(np.float32),
              "b": (feats[:, :, ::-1] + 0.1).astype(np.float32).copy()}
    return feats, views, probes


def _hand_soadd(enc, feats, views, probes, cfg, seed):
    """train_soadd written out: SGD on 5 L_cpt + L_binv + L_cabs + 1e-2 L_ent (warm-up: L_cpt and L_ent
    only), the centroid the running mean of the normalised bona fide embeddings, the hinge on the
    cosines to it, the view detached. Returns the encoder and the centroid."""
    gen = np.random.default_rng(seed)
    l1, l2, l3, l4 = cfg.lambdas
    e_bars = []
    bias = torch.zeros((), requires_grad=True)
    params = list(enc.parameters()) + [bias]
    for step in range(cfg.steps):
        idx = gen.choice(len(feats), cfg.batch, replace=False)
        z, a = enc(torch.from_numpy(feats[idx]), update_os=True)
        e_bars.append(torch.nn.functional.normalize(z.detach(), dim=-1).mean(0))
        c = torch.stack(e_bars).mean(0)
        cos_c = torch.nn.functional.cosine_similarity(z, c[None], dim=-1)
        loss = l1 * (1 - cos_c.mean()) + l4 * (a * a.log()).sum()
        if step >= cfg.warmup:
            if cfg.invariance:
                zv = enc(torch.from_numpy(views[idx]))[0].detach()
                loss = loss + l2 * (1 - torch.nn.functional.cosine_similarity(z, zv, dim=-1).mean())
            if cfg.boundary != "none":
                name = sorted(probes)[gen.integers(len(probes))]
                zp = enc(torch.from_numpy(probes[name][idx]))[0]
                cos_p = torch.nn.functional.cosine_similarity(zp, c[None], dim=-1)
                if cfg.boundary == "hinge":
                    loss = loss + l3 * torch.clamp(cfg.margin - cos_c + cos_p, min=0).mean()
                else:  # BCE on (s - b) / 0.1: bona fide 1, probe 0
                    loss = loss + l3 * 0.5 * (torch.nn.functional.softplus(-(cos_c - bias) / 0.1).mean()
                                              + torch.nn.functional.softplus((cos_p - bias) / 0.1).mean())
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        with torch.no_grad():
            for p, g in zip(params, grads):
                if g is not None:
                    p -= cfg.lr * g
    return enc, c


def test_train_soadd_first_step_is_sgd_on_the_full_objective(monkeypatch):
    """One plain-SGD step without warm-up moves every head parameter by -lr x the gradient of the
    hand-written objective (compactness towards the centroid, invariance, hinge, entropy)."""
    _sgd(monkeypatch)
    feats, views, probes = _soadd_data()
    cfg = method.SOADDConfig(steps=1, batch=4, lr=0.05, weight_decay=0.0, warmup=0, dim=3, lambdas=(5.0, 1.0, 1.0, 1e-2))
    enc0, _ = method.train_soadd(feats, views, probes, method.SOADDConfig(**{**vars(cfg), "steps": 0}), seed=3)
    initial = {n: p.detach().clone() for n, p in enc0.named_parameters()}
    enc, c = method.train_soadd(feats, views, probes, cfg, seed=3)
    want, c_want = _hand_soadd(enc0, feats, views, probes, cfg, seed=3)
    assert torch.allclose(c, c_want, atol=1e-6)
    # every parameter moves but the attention's last bias (softmax over frames ignores a shift)
    assert all(not torch.allclose(p, initial[n]) for n, p in enc.named_parameters() if n != "att.2.bias")
    for got, exp in zip(enc.parameters(), want.parameters()):
        assert torch.allclose(got, exp, atol=1e-6)


def _trained_as_by_hand(feats, views, probes, cfg, seed):
    """train_soadd's encoder and centroid equal the hand-written steps from the same initial encoder."""
    enc0, _ = method.train_soadd(feats, views, probes, method.SOADDConfig(**{**vars(cfg), "steps": 0}), seed=seed)
    enc, c = method.train_soadd(feats, views, probes, cfg, seed=seed)
    want, c_want = _hand_soadd(enc0, feats, views, probes, cfg, seed=seed)
    assert torch.allclose(c, c_want, atol=1e-6)
    for got, exp in zip(enc.parameters(), want.parameters()):
        assert torch.allclose(got, exp, atol=1e-6)
    return enc


def test_train_soadd_second_step_after_warm_up_uses_the_cumulative_centroid(monkeypatch):
    """Two SGD steps, warm-up 1: step 1 is L_cpt + L_ent only, step 2 (another batch and probe) the full
    loss against the centroid of both batches and the OS statistics of both."""
    _sgd(monkeypatch)
    feats, views, probes = _soadd_data()
    cfg = method.SOADDConfig(steps=2, batch=4, lr=0.05, weight_decay=0.0, warmup=1, dim=3, lambdas=(5.0, 2.0, 3.0, 0.1))
    enc = _trained_as_by_hand(feats, views, probes, cfg, seed=4)
    assert float(enc.os.n) == 8


@pytest.mark.parametrize("overrides", [{"boundary": "bce"}, {"boundary": "none", "invariance": False}])
def test_train_soadd_ablations_two_steps_are_sgd_on_their_objective(monkeypatch, overrides):
    """The Table 3 ablations over two SGD steps: BCE on the probes with the learnable bias (its first step
    moves b, which the second step's gradient sees), and L_cpt + L_ent alone."""
    _sgd(monkeypatch)
    feats, views, probes = _soadd_data()
    cfg = method.SOADDConfig(steps=2, batch=4, lr=0.05, weight_decay=0.0, warmup=0, dim=3, lambdas=(1.0, 1.0, 2.0, 0.1),
                             **overrides)
    _trained_as_by_hand(feats, views, probes, cfg, seed=8)


def test_train_soadd_step_pulls_bona_fide_towards_and_probes_away_from_the_centroid(monkeypatch):
    """A small SGD step on the hinge-dominated objective raises the bona fide cosine to the centroid and
    lowers the probes' on the step's own batch."""
    _sgd(monkeypatch)
    feats, views, probes = _soadd_data()
    probes = {"a": probes["a"]}
    cfg = method.SOADDConfig(steps=1, batch=4, lr=0.02, weight_decay=0.0, warmup=0, dim=3, standardise=False,
                             lambdas=(0.0, 0.0, 1.0, 0.0))
    enc0, _ = method.train_soadd(feats, views, probes, method.SOADDConfig(**{**vars(cfg), "steps": 0}), seed=2)
    enc, c = method.train_soadd(feats, views, probes, cfg, seed=2)
    idx = np.random.default_rng(2).choice(len(feats), 4, replace=False)
    before, after = (method.cosine_score(method.embed(e, feats[idx]), c).mean() for e in (enc0, enc))
    p_before, p_after = (method.cosine_score(method.embed(e, probes["a"][idx]), c).mean() for e in (enc0, enc))
    assert after > before and p_after < p_before


def test_deep_svdd_steps_descend_to_the_fixed_initial_centre(monkeypatch):
    """Two SGD steps of Deep-SVDD equal the hand-written steps on mean ||z - c0||^2 with c0 the initial
    mean embedding, kept fixed at the second step (another batch)."""
    _sgd(monkeypatch)
    feats, _, _ = _soadd_data()
    cfg = method.SOADDConfig(steps=2, batch=4, lr=0.05, weight_decay=0.0, dim=3)
    enc0, c0_init = baselines.train_deep_svdd(feats, method.SOADDConfig(**{**vars(cfg), "steps": 0}), seed=1)
    enc, c0 = baselines.train_deep_svdd(feats, cfg, seed=1)
    assert torch.allclose(c0, c0_init) and torch.allclose(c0, method.embed(enc0, feats).mean(0))
    gen = np.random.default_rng(1)
    for _ in range(2):
        z = enc0(torch.from_numpy(feats[gen.choice(len(feats), 4, replace=False)]))[0]
        loss = ((z - c0_init) ** 2).sum(-1).mean()
        grads = torch.autograd.grad(loss, list(enc0.parameters()))
        with torch.no_grad():
            for p, g in zip(enc0.parameters(), grads):
                p -= cfg.lr * g
    for got, exp in zip(enc.parameters(), enc0.parameters()):
        assert torch.allclose(got, exp, atol=1e-6)


def test_oc_softmax_steps_descend_on_the_softplus_margin(monkeypatch):
    """Two SGD steps of OC-Softmax equal the hand-written steps on mean softplus(alpha (m0 - cos(w, z))),
    both the head and the direction w updated; cos(w, z) of the first batch rises."""
    _sgd(monkeypatch)
    feats, _, _ = _soadd_data()
    cfg = method.SOADDConfig(steps=2, batch=4, lr=0.01, weight_decay=0.0, dim=3)
    enc0, w0 = baselines.train_oc_softmax(feats, method.SOADDConfig(**{**vars(cfg), "steps": 0}), seed=6)
    enc, w = baselines.train_oc_softmax(feats, cfg, seed=6)
    w_ref = w0.clone().requires_grad_(True)
    params = list(enc0.parameters()) + [w_ref]
    gen = np.random.default_rng(6)
    first = torch.from_numpy(feats[np.random.default_rng(6).choice(len(feats), 4, replace=False)])
    with torch.no_grad():
        before = float(torch.nn.functional.cosine_similarity(enc0(first)[0], w0[None], dim=-1).mean())
    for _ in range(2):
        z = enc0(torch.from_numpy(feats[gen.choice(len(feats), 4, replace=False)]))[0]
        cos = torch.nn.functional.cosine_similarity(z, w_ref[None], dim=-1)
        loss = torch.log1p(torch.exp(20.0 * (0.9 - cos))).mean()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= cfg.lr * g
    assert torch.allclose(w, w_ref.detach(), atol=1e-6) and not torch.allclose(w, w0)
    for got, exp in zip(enc.parameters(), enc0.parameters()):
        assert torch.allclose(got, exp, atol=1e-6)
    with torch.no_grad():
        after = float(torch.nn.functional.cosine_similarity(enc(first)[0], w[None], dim=-1).mean())
    assert after > before


# ---- mutation-hardening (issue 44): each piece against a reference computed another way ------------


def test_layer_mix_divides_the_logits_by_the_temperature():
    """M1 a = softmax(s / tau) at tau = 2 and 0.5, and F = sum_l a_l H^(l) frame by frame and channel by channel."""
    _, a2 = method.layer_mix(torch.zeros(1, 2, 1, 1), torch.tensor([0.0, 2 * float(np.log(3.0))]), tau=2.0)
    _, a_half = method.layer_mix(torch.zeros(1, 2, 1, 1), torch.tensor([0.0, 0.5 * float(np.log(3.0))]), tau=0.5)
    assert torch.allclose(a2, torch.tensor([0.25, 0.75])) and torch.allclose(a_half, torch.tensor([0.25, 0.75]))
    h = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).reshape(2, 3, 2, 2)
    f, a = method.layer_mix(h, torch.tensor([0.0, float(np.log(2.0)), float(np.log(5.0))]))
    assert torch.allclose(a, torch.tensor([1.0, 2.0, 5.0]) / 8)
    for b in range(2):
        for t in range(2):
            want = (h[b, 0, t] + 2 * h[b, 1, t] + 5 * h[b, 2, t]) / 8
            assert torch.allclose(f[b, t], want)


def test_entropy_regulariser_is_finite_at_a_zero_weight():
    """M1 L_ent = sum_l a_l log a_l with 0 log 0 = 0: a one-hot mix gives 0, an even split over two of three
    layers gives -log 2."""
    assert float(method.entropy_regulariser(torch.tensor([0.0, 1.0]))) == pytest.approx(0.0, abs=1e-9)
    assert float(method.entropy_regulariser(torch.tensor([0.5, 0.0, 0.5]))) == pytest.approx(-np.log(2.0), rel=1e-6)


def test_online_standardiser_is_welford_on_shifted_chunks():
    """Welford's batch update equals the numpy mean and population variance of everything seen, even when
    the chunks' means differ a lot (the between-chunk term matters); the output is (z - mu) / sqrt(var + 1e-5)
    with the 1e-5 visible at a small variance; a fresh standardiser divides by sqrt(1e-5) (no 0 / 0)."""
    rng = np.random.default_rng(1)
    chunks = [rng.normal(0, 0.01, (n, 2)) + shift for n, shift in ((1, 0.0), (4, 0.05), (3, -0.02))]
    os_ = method.OnlineStandardiser(2).double()
    fresh = os_(torch.tensor([[1.0, -2.0]], dtype=torch.float64))
    assert torch.allclose(fresh, torch.tensor([[1.0, -2.0]], dtype=torch.float64) / np.sqrt(1e-5))
    for chunk in chunks:
        os_.update(torch.tensor(chunk))
    data = np.concatenate(chunks)
    assert float(os_.n) == 8
    assert np.allclose(os_.mean.numpy(), data.mean(0), rtol=1e-10, atol=0)
    assert np.allclose(os_.m2.numpy() / 8, data.var(0), rtol=1e-10, atol=0)
    x = np.array([[0.1, -0.1], [0.0, 0.3]])
    want = (x - data.mean(0)) / np.sqrt(data.var(0) + 1e-5)
    assert np.allclose(os_(torch.tensor(x)).numpy(), want, rtol=1e-10)


def test_cosine_score_ignores_the_length_of_short_vectors():
    """M6 s(z, c) = z.c / (|z| |c|) for vectors much shorter than 1 (the eps only guards a zero vector)."""
    z = torch.tensor([[0.01, 0.0], [0.0, -0.002]])
    c = torch.tensor([0.003, 0.004])
    assert torch.allclose(method.cosine_score(z, c), torch.tensor([0.6, -0.8]), atol=1e-6)
    assert float(method.cosine_score(torch.zeros(1, 2), c)[0]) == 0.0


def test_boundary_hinge_default_margin_is_one_and_bce_subtracts_its_bias():
    """M3 L_cabs with the paper's m = 1 when none is given; the BCE ablation's logit is (s - b) / T for a
    non-zero bias b and another temperature, checked against log(1 + e^-x) written out."""
    c = torch.tensor([0.0, 2.0])
    z = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    zp = torch.tensor([[0.0, -1.0], [0.0, 1.0]])
    assert float(method.boundary_hinge_loss(z, zp, c)) == pytest.approx(1.0)
    # scores: bona fide [1, 0], probes [-1, 1]; b = 0.5, T = 0.25
    s, y = np.array([1.0, 0.0, -1.0, 1.0]), np.array([1.0, 1.0, 0.0, 0.0])
    x = (s - 0.5) / 0.25
    want = np.mean(y * np.log1p(np.exp(-x)) + (1 - y) * np.log1p(np.exp(x)))
    got = float(method.probe_bce_loss(z, zp, c, torch.tensor(0.5), temperature=0.25))
    assert got == pytest.approx(want, rel=1e-6)


def _encoder_by_hand(enc, h, tau):
    """The encoder written out with loops: layer mix, attention scores w2.tanh(W1 F_t + b1) + b2 softmaxed
    over frames, weighted mean (and weighted std for statistics pooling), Linear -> LayerNorm -> ReLU ->
    Linear, then (z - mu) / sqrt(m2 / n + 1e-5)."""
    h = h.double()
    a = torch.exp(enc.layer_logits.detach().double() / tau)
    a = a / a.sum()
    W1, b1 = enc.att[0].weight.detach().double(), enc.att[0].bias.detach().double()
    w2, b2 = enc.att[2].weight.detach().double()[0], enc.att[2].bias.detach().double()[0]
    out = []
    for clip in h:
        f = sum(a[i] * clip[i] for i in range(len(a)))  # T x d
        e = torch.stack([w2 @ torch.tanh(W1 @ f_t + b1) + b2 for f_t in f])
        beta = torch.exp(e - e.max())
        beta = beta / beta.sum()
        r = sum(beta[t] * f[t] for t in range(len(f)))
        if enc.pooling == "stats":
            var = sum(beta[t] * f[t] ** 2 for t in range(len(f))) - r ** 2
            r = torch.cat([r, torch.sqrt(torch.clamp(var, min=1e-6))])
        lin1, ln, lin2 = enc.head[0], enc.head[1], enc.head[3]
        u = lin1.weight.detach().double() @ r + lin1.bias.detach().double()
        u = (u - u.mean()) / torch.sqrt(u.var(unbiased=False) + ln.eps) * ln.weight.detach().double() + ln.bias.detach().double()
        z = lin2.weight.detach().double() @ torch.relu(u) + lin2.bias.detach().double()
        if enc.os is not None:
            z = (z - enc.os.mean.double()) / torch.sqrt(enc.os.m2.double() / enc.os.n.double() + 1e-5)
        out.append(z)
    return torch.stack(out), a


@pytest.mark.parametrize("pooling", ["mean", "stats"])
def test_encoder_forward_equals_the_head_written_out(pooling):
    """M1 head on random weights (non-zero layer logits, tau = 0.5, random LayerNorm affine): the embedding
    and the layer weights equal the loop-written reference; update_os folds the batch's pre-OS embeddings
    into the statistics first (their mean and variance), a plain call leaves them frozen."""
    torch.manual_seed(0)
    enc = method.Encoder(3, 4, 5, bottleneck=6, tau=0.5, pooling=pooling)
    with torch.no_grad():
        enc.layer_logits.copy_(torch.tensor([0.3, -0.7, 1.1]))
        enc.att[2].bias.fill_(0.4)
        enc.head[1].weight.uniform_(0.5, 1.5)
        enc.head[1].bias.uniform_(-0.5, 0.5)
    h1, h2 = torch.randn(6, 3, 7, 4), torch.randn(3, 3, 7, 4)
    saved = enc.os
    enc.os = None
    raw, a = enc(h1)
    want_raw, want_a = _encoder_by_hand(enc, h1, 0.5)
    assert torch.allclose(a.double(), want_a, atol=1e-6) and torch.allclose(raw.double(), want_raw, atol=1e-5)
    enc.os = saved
    z1, _ = enc(h1, update_os=True)
    assert float(enc.os.n) == 6
    assert torch.allclose(enc.os.mean, raw.detach().mean(0), atol=1e-5)
    assert torch.allclose(enc.os.m2 / 6, raw.detach().var(0, unbiased=False), atol=1e-5)
    assert torch.allclose(z1.double(), _encoder_by_hand(enc, h1, 0.5)[0], atol=1e-4)
    z2, _ = enc(h2)
    assert float(enc.os.n) == 6 and torch.allclose(z2.double(), _encoder_by_hand(enc, h2, 0.5)[0], atol=1e-4)
    frozen = method.embed(enc, h2.numpy())
    assert float(enc.os.n) == 6 and not frozen.requires_grad and torch.allclose(frozen, z2)


def test_encoder_defaults_and_the_deep_svdd_head():
    """M1 defaults: tau = 1 (a = softmax(s)), biases, a LayerNorm, OS on, mean pooling (head input d); the
    Deep-SVDD head has no bias anywhere and no LayerNorm."""
    torch.manual_seed(0)
    enc = method.Encoder(2, 3, 4)
    with torch.no_grad():
        enc.layer_logits.copy_(torch.tensor([0.0, float(np.log(3.0))]))
    _, a = enc(torch.randn(2, 2, 5, 3))
    assert torch.allclose(a, torch.tensor([0.25, 0.75]))
    assert isinstance(enc.os, method.OnlineStandardiser) and isinstance(enc.head[1], torch.nn.LayerNorm)
    assert enc.head[0].in_features == 3 and all(m.bias is not None for m in (enc.att[0], enc.att[2], enc.head[0], enc.head[3]))
    svdd = method.Encoder(2, 3, 4, standardise=False, deep_svdd=True)
    assert svdd.os is None and isinstance(svdd.head[1], torch.nn.Identity)
    assert not [n for n, _ in svdd.named_parameters() if n.endswith("bias")]


def test_soadd_config_defaults_are_the_chapters_setting():
    """SOADDConfig's defaults are the chapter's single tuning setting (chapter.yml: Adam, lr 1e-3, weight
    decay 1e-4, batch 32, 300 steps; the experiment's dim 32, margin 1 and warm-up steps / 4) and the full
    method: hinge boundary, invariance and OS on, mean pooling, lambda = (5, 1, 1, 1e-2)."""
    chapter = yaml.safe_load((repo_root() / "notebooks/ca_soadd/chapter.yml").read_text())
    grid, protocol = chapter["tuning"]["grid"], " ".join(chapter["tuning"]["protocol"].split())
    cfg = method.SOADDConfig()
    assert (cfg.lr, cfg.steps, cfg.batch) == (grid["lr"][0], grid["steps"][0], grid["batch"][0])
    assert "Adam, lr 1e-3, weight decay 1e-4" in protocol and cfg.weight_decay == 1e-4
    common = experiment.EXPERIMENT_PROFILES["book"]
    assert (cfg.dim, cfg.margin, cfg.warmup) == (common["dim"], common["margin"], common["steps"] // 4)
    assert (cfg.boundary, cfg.invariance, cfg.standardise, cfg.pooling) == ("hinge", True, True, "mean")
    assert tuple(cfg.lambdas) == (5.0, 1.0, 1.0, 1e-2)


def test_train_soadd_uses_adam_with_coupled_weight_decay(monkeypatch):
    """With every lambda 0 the objective's gradient is 0, so Adam's first step sees only the L2 weight-decay
    gradient g = wd p: each parameter moves by -lr g / (|g| + 1e-8) (about -lr sign(p)), zeros stay put."""
    feats, views, probes = _soadd_data()
    cfg = method.SOADDConfig(steps=1, batch=4, lr=0.01, weight_decay=0.1, warmup=0, dim=3, lambdas=(0.0, 0.0, 0.0, 0.0))
    enc0, _ = method.train_soadd(feats, views, probes, method.SOADDConfig(**{**vars(cfg), "steps": 0}), seed=3)
    enc, _ = method.train_soadd(feats, views, probes, cfg, seed=3)
    for (name, p0), p in zip(enc0.named_parameters(), enc.parameters()):
        g = 0.1 * p0.detach()  # Adam's first step: m_hat = g, v_hat = g^2, eps 1e-8
        assert torch.allclose(p.detach(), p0.detach() - 0.01 * g / (g.abs() + 1e-8), atol=1e-7), name
    assert any((p0 != 0).any() for p0 in enc0.parameters())


def test_eer_interpolates_when_the_first_roc_point_already_crosses():
    """M6 EER with a tie at the top score (ROC (0, 0) -> (0.5, 1)): FRR and FAR meet at 1/3 on the segment,
    not at the first point; bona fide only calibration defaults to alpha = 0.05."""
    assert method.eer([2.0, 2.0], [2.0, 0.0]) == pytest.approx(1 / 3)
    assert method.calibrate_threshold(np.arange(101.0)) == 5.0


def test_cumulative_centroid_counts_every_batch_seen():
    """M2 over three batches of sizes 1, 2, 3: c is the mean of all six normalised embeddings (the count n
    grows by each batch, so the third update weighs the first two batches by 3)."""
    cen = method.CumulativeCentroid(2)
    batches = [torch.tensor([[3.0, 0.0]]), torch.tensor([[0.0, 1.0], [0.0, 4.0]]),
               torch.tensor([[1.0, 1.0], [-2.0, 0.0], [0.0, -5.0]])]
    for b in batches:
        c = cen.update(b)
    unit = torch.cat([b / b.norm(dim=-1, keepdim=True) for b in batches])
    assert cen.n == 6 and torch.allclose(c, unit.mean(0), atol=1e-6)


def test_train_soadd_builds_the_configured_head():
    """The trained encoder is the configured one: no OS when standardise is off, statistics pooling (head input
    2 d) when asked, OS statistics of every bona fide batch otherwise."""
    feats, views, probes = _soadd_data()
    cfg = method.SOADDConfig(steps=1, batch=4, warmup=0, dim=3)
    enc, _ = method.train_soadd(feats, views, probes, method.SOADDConfig(**{**vars(cfg), "standardise": False}), seed=0)
    assert enc.os is None and enc.head[0].in_features == 5
    enc, _ = method.train_soadd(feats, views, probes, method.SOADDConfig(**{**vars(cfg), "pooling": "stats"}), seed=0)
    assert enc.head[0].in_features == 10 and float(enc.os.n) == 4


def test_train_soadd_small_margin_steps_are_sgd_on_the_hinge_with_that_margin(monkeypatch):
    """Two SGD steps with m = 0.1 (some hinge terms inactive, which m = 1 would switch on) equal the hand-written
    steps with that margin."""
    _sgd(monkeypatch)
    feats, views, probes = _soadd_data()
    cfg = method.SOADDConfig(steps=2, batch=4, lr=0.05, weight_decay=0.0, warmup=0, dim=3, margin=0.1,
                             lambdas=(1.0, 0.5, 4.0, 0.1))
    enc = _trained_as_by_hand(feats, views, probes, cfg, seed=5)
    enc0, _ = method.train_soadd(feats, views, probes, method.SOADDConfig(**{**vars(cfg), "steps": 0}), seed=5)
    other, _ = _hand_soadd(enc0, feats, views, probes, method.SOADDConfig(**{**vars(cfg), "margin": 1.0}), seed=5)
    assert not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(enc.parameters(), other.parameters()))


def test_eer_interpolates_along_a_flat_frr_segment():
    """M6 EER where the ROC crosses inside a segment that starts away from FPR = 0: bona fide [2, 3] and spoofs
    [1, 4, 2.5] give FRR = 0.5 while FAR rises from 1/3 to 2/3, so they meet at 0.5."""
    assert method.eer([2.0, 3.0], [1.0, 4.0, 2.5]) == pytest.approx(0.5)


def test_cosines_run_over_the_last_axis_of_any_stack():
    """M6 s(z, c) and M3 L_binv take the cosine over the feature (last) axis for a stack of batches too: a
    (2, 2, 3) stack gives the per-row cosines (not the cosines over the batch axis)."""
    z = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], [[3.0, 4.0, 0.0], [0.0, 0.0, -1.0]]])
    c = torch.tensor([1.0, 1.0, 0.0])
    want = torch.tensor([[1.0, 1.0], [7.0 / 5.0, 0.0]]) / np.sqrt(2.0)
    assert torch.allclose(method.cosine_score(z, c), want, atol=1e-6)
    view = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.0, 1.0]], [[0.0, 0.0, 1.0], [0.0, 0.0, -3.0]]])
    # row cosines 1, 0, 0, 1 -> mean 0.5
    assert float(method.benign_invariance_loss(z, view)) == pytest.approx(0.5)
