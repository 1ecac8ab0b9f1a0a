"""Unit tests of replib.papers.likelihood_matching (LM: quasi-likelihood of reverse transitions)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from replib.core.runtime import compute_threads
from replib.papers.likelihood_matching import exercises, experiment, method, task, theory

MIX = task.ring_mixture()


@pytest.fixture(autouse=True)
def one_thread():
    with compute_threads(1):
        yield


# ---- data, analytic p_t ------------------------------------------------------------------------


def test_mixture_shape_and_anisotropy():
    assert MIX["means"].shape == (6, 2) and MIX["covs"].shape == (6, 2, 2)
    for mu, S in zip(MIX["means"], MIX["covs"]):
        ev, V = np.linalg.eigh(S)
        assert np.allclose(ev, [0.01, 0.3])
        # the long axis is tangential (orthogonal to the mean direction)
        assert abs(V[:, 1] @ mu) < 1e-9
    X = task.sample_mixture(MIX, 20000, 0)
    assert np.allclose(X.mean(0), 0, atol=0.05)


@pytest.mark.parametrize("t", [0.05, 0.3, 0.8])
def test_score_and_hessian_match_finite_differences(t):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 2)) * 1.5
    h = 1e-5
    s = task.score_pt(MIX, x, t)
    H = task.hessian_pt(MIX, x, t)
    fd_s = np.zeros_like(x)
    fd_H = np.zeros((5, 2, 2))
    for j in range(2):
        e = np.zeros(2)
        e[j] = h
        fd_s[:, j] = (task.log_pt(MIX, x + e, t) - task.log_pt(MIX, x - e, t)) / (2 * h)
        fd_H[:, :, j] = (task.score_pt(MIX, x + e, t) - task.score_pt(MIX, x - e, t)) / (2 * h)
    assert np.allclose(s, fd_s, rtol=1e-5, atol=1e-5)
    assert np.allclose(H, fd_H, rtol=1e-4, atol=1e-4)
    assert np.allclose(H, np.transpose(H, (0, 2, 1)))


def test_log_pt_integrates_to_one():
    g = np.linspace(-6, 6, 301)
    xx, yy = np.meshgrid(g, g)
    p = np.exp(task.log_pt(MIX, np.stack([xx.ravel(), yy.ravel()], 1), 0.3))
    assert p.sum() * (g[1] - g[0]) ** 2 == pytest.approx(1.0, abs=1e-3)


def test_schedule():
    assert method.alpha_bar(0.0) == 1.0
    assert method.alpha_bar(1.0) == pytest.approx(math.exp(-10.05))
    a, sig2 = method.transition(0.5, 0.3)
    assert a**2 + sig2 == pytest.approx(1.0)
    assert method.posterior_variance(0.5, 0.0) == 0.0
    assert np.allclose(method.time_grid(4), [0, 0.25, 0.5, 0.75, 1])


# ---- Tweedie, quasi-likelihood -----------------------------------------------------------------


def test_tweedie_matches_monte_carlo_on_gaussian():
    S = np.array([[1.0, 0.6], [0.6, 0.5]])
    t, s = 0.4, 0.25
    a, sig2 = method.transition(t, s)
    rng = np.random.default_rng(0)
    n = 400_000
    xs = rng.multivariate_normal(np.zeros(2), method.alpha_bar(s) * S + (1 - method.alpha_bar(s)) * np.eye(2), n)
    xt = a * xs + math.sqrt(sig2) * rng.standard_normal((n, 2))
    # condition on x_t near a point by regression: (X_s, X_t) jointly Gaussian; the conditional
    # moments are the linear-regression ones, estimated from the samples
    Z = np.hstack([xs, xt])
    C = np.cov(Z.T)
    B = C[:2, 2:] @ np.linalg.inv(C[2:, 2:])
    x0 = np.array([0.7, -0.4])
    mc_mean = B @ x0
    mc_cov = C[:2, :2] - B @ C[2:, :2]
    P = np.linalg.inv(method.alpha_bar(t) * S + (1 - method.alpha_bar(t)) * np.eye(2))
    mean, cov = method.tweedie_moments(x0, -P @ x0, -P, a, sig2)
    assert np.allclose(mean, mc_mean, atol=0.01)
    assert np.allclose(cov, mc_cov, atol=0.005)


def test_tweedie_quadrature_1d_mixture():
    mix1 = dict(weights=np.array([0.3, 0.7]), means=np.array([[-1.5], [1.0]]), covs=np.array([[[0.05]], [[0.2]]]))
    q = theory.tweedie_quadrature_1d(mix1, np.linspace(-2, 2, 9), 0.4, 0.2)
    assert np.allclose(q["mean_quad"], q["mean_tweedie"], atol=1e-6)
    assert np.allclose(q["var_quad"], q["var_tweedie"], atol=1e-6)


def test_smw_terms_match_dense():
    for r in (0, 1, 3):
        res = theory.smw_check(r, d=4, r=r)
        assert max(res.values()) < 1e-10


def _lm_batch(n=40_000, t=0.3, s=0.2, seed=0):
    rng = np.random.default_rng(seed)
    x0 = task.sample_mixture(MIX, n, rng)
    ab = method.alpha_bar(t)
    eps = rng.standard_normal(x0.shape)
    xt = math.sqrt(ab) * x0 + math.sqrt(1 - ab) * eps
    a, sig2 = method.transition(t, s)
    kappa = 1 - sig2 / (1 - ab)
    s0 = -eps / math.sqrt(1 - ab)
    return xt, s0, sig2, kappa, task.score_pt(MIX, xt, t), task.hessian_pt(MIX, xt, t)


def test_rb_loss_minimised_by_true_score_and_hessian():
    xt, s0, sig2, kappa, score, H = _lm_batch()
    eye = np.eye(2)

    def loss(sc, Hm):
        return float(method.quasi_likelihood_rb(sc, eye + sig2 * Hm, s0, sig2, kappa).mean())

    best = loss(score, H)
    assert best < loss(score + 0.3, H)
    assert best < loss(score * 0.8, H)
    assert best < loss(score, H * 0.8)
    assert best < loss(score, H + 0.5 * eye)
    assert best < loss(score, H - 0.5 * eye)
    # the optimal constant C at a point is kappa I + sigma^2 Cov[s0 | x_t] = I + sigma^2 H (section 4)
    assert 1 + sig2 * H[:, 0, 0].min() > 0


def test_network_loss_equals_dense_formula():
    net = method.LMNet(rank=1, seed=0)
    g = torch.Generator().manual_seed(0)
    x0 = task.sample_mixture(MIX, 64, generator=g)
    t = torch.rand(64, generator=g) * 0.9 + 0.05
    s = (t - 0.1).clamp_min(0)
    eps = torch.randn(64, 2, generator=g)
    got = method.training_loss(net, x0, t, s, eps, "lm").detach()
    ab = method.alpha_bar(t.double())
    xt = torch.sqrt(ab)[:, None] * x0.double() + torch.sqrt(1 - ab)[:, None] * eps.double()
    with torch.no_grad():
        out = net(xt.float(), t)
    _, sig2 = method.transition(t.double(), s.double())
    H = method.hessian_from_model(out, t.double())
    C = torch.eye(2, dtype=torch.float64) + sig2[:, None, None] * H
    s0 = -eps.double() / torch.sqrt(1 - ab)[:, None]
    kappa = 1 - sig2 / (1 - ab)
    want = method.quasi_likelihood_rb(out["score"], C, s0, sig2, kappa).mean()
    assert float(got) == pytest.approx(float(want), rel=1e-4, abs=1e-4)
    # mean-only: C = I
    got_m = method.training_loss(net, x0, t, s, eps, "lm_mean").detach()
    v = out["eps"].double() - eps.double()
    assert float(got_m) == pytest.approx(float((0.5 * sig2 / (1 - ab) * (v * v).sum(-1)).mean()), rel=1e-4)


# ---- samplers ----------------------------------------------------------------------------------


def _gauss_fns(S):
    S = np.asarray(S)

    def P(t):
        return np.linalg.inv(method.alpha_bar(float(t)) * S + (1 - method.alpha_bar(float(t))) * np.eye(len(S)))

    return (lambda x, t: -np.asarray(x) @ P(t)), (lambda x, t: np.broadcast_to(-P(t), (len(x),) + S.shape).copy())


def test_lm_sampler_with_exact_score_and_hessian_recovers_gaussian():
    S = np.array([[2.0, 0.9], [0.9, 0.6]])
    sf, hf = _gauss_fns(S)
    X = method.sample(method.exact_reverse_fn(sf, hf, "LM"), 40_000, 200, seed=0)
    assert np.allclose(X.mean(0), 0, atol=0.03)
    assert np.allclose(np.cov(X.T), S, atol=0.05)
    # exact for any N (up to the terminal mismatch): also with 5 steps
    X5 = method.sample(method.exact_reverse_fn(sf, hf, "LM"), 40_000, 5, seed=1)
    assert np.allclose(np.cov(X5.T), S, atol=0.05)


def test_gaussian_output_covariance_theory():
    S = np.array([[2.0, 0.9], [0.9, 0.6]])
    for N in (2, 5, 50):
        assert np.allclose(theory.gaussian_output_covariance(S, N, "LM"), S, atol=1e-3)
    bias = [np.abs(theory.gaussian_output_covariance(S, N, "beta") - S).max() for N in (5, 20, 200)]
    assert bias[0] > bias[1] > bias[2] and bias[0] > 0.1


def test_path_identity_holds():
    res = theory.path_identity_check(0.8, S=1.5, n_steps=7, n_paths=50)
    assert res["rhs_mean"] == pytest.approx(res["log_p0"], abs=1e-8)


def test_reverse_kl_lm_beats_isotropic_on_big_step():
    mix1 = dict(weights=np.array([0.5, 0.5]), means=np.array([[-1.0], [1.0]]), covs=np.array([[[0.01]], [[0.01]]]))
    r = theory.reverse_kl_1d(mix1, 0.3, 0.5, 0.3)
    assert r["kl_lm"] < r["kl_beta"] and r["kl_lm"] < r["kl_beta_tilde"]


# ---- metrics -----------------------------------------------------------------------------------


def test_sliced_w2():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 2))
    assert task.sliced_w2(X, X) == pytest.approx(0.0, abs=1e-12)
    d1, d2 = task.sliced_w2(X, X + [0.5, 0]), task.sliced_w2(X, X + [1.0, 0])
    assert 0 < d1 < d2
    # a pure shift c: SW2^2 = mean over directions (theta . c)^2 ~ |c|^2 / 2 in 2-D
    assert d2 == pytest.approx(math.sqrt(0.5), rel=0.2)
    assert task.sliced_w2(X, X[:250]) < 0.2  # unequal sizes handled


def test_nll_bound_exact_gaussian_is_near_true_nll():
    S = np.array([[1.0, 0.3], [0.3, 0.5]])
    sf, hf = _gauss_fns(S)
    rng = np.random.default_rng(2)
    x0 = rng.multivariate_normal([0, 0], S, 3000)
    true = -np.mean(-0.5 * (np.einsum("ni,ij,nj->n", x0, np.linalg.inv(S), x0) + np.log(np.linalg.det(2 * np.pi * S)))) / 2
    lmb = task.nll_bound(method.exact_reverse_fn(sf, hf, "LM"), x0, 20)
    beta = task.nll_bound(method.exact_reverse_fn(sf, hf, "beta"), x0, 20)
    assert lmb == pytest.approx(true, abs=0.03)  # exact transitions: the bound is tight
    assert beta > lmb + 0.01


# ---- network, training, experiment -------------------------------------------------------------


def test_network_heads_and_psd_covariance():
    net = method.LMNet(rank=1, seed=0)
    gen = torch.Generator().manual_seed(0)
    out = net(torch.randn(7, 2, generator=gen), torch.rand(7, generator=gen))
    assert out["eps"].shape == (7, 2) and out["lam"].shape == (7, 2) and out["L"].shape == (7, 2, 1)
    t = torch.full((7,), 0.3, dtype=torch.float64)
    D, W, kappa = method.covariance_factors(out["lam"], out["L"], t, t - 0.1)
    C = torch.diag_embed(D) + W @ W.transpose(-1, -2)
    assert (torch.linalg.eigvalsh(C) > 0).all()


def test_training_reduces_loss_and_is_deterministic():
    a, ia = experiment.train_model("lm", seed=3, steps=30, batch_size=64)
    b, ib = experiment.train_model("lm", seed=3, steps=30, batch_size=64)
    assert ia["final_loss"] == ib["final_loss"]
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    fn = method.model_reverse_fn(a, "LM")
    assert np.array_equal(method.sample(fn, 100, 5, seed=1), method.sample(fn, 100, 5, seed=1))


def test_dsm_training_learns_the_score():
    net, _ = experiment.train_model("dsm", seed=0, steps=300)
    he = task.hessian_error(net, MIX, 0.6, n=500)
    untrained = task.hessian_error(method.LMNet(seed=0), MIX, 0.6, n=500)
    assert he["score_mse"] < 0.3 * untrained["score_mse"]


def test_smoke_profile_has_every_claims_methods_and_grid_points():
    # p1, c4b: LM and DSM (B1) at t = 0.1 and 0.3; c1b, p2: LM, B1, B2 and the exact samplers at N = 10;
    # c2: LM, B1, B3 at N = 20; c3b, p3: LM, B2 and the exact samplers at N = 200
    smoke = experiment.EXPERIMENT_PROFILES["smoke"]
    assert {"LM", "B1", "B2", "B3"} <= set(smoke["methods"])
    assert {10, 20, 200} <= set(smoke["n_steps_grid"])
    assert {0.1, 0.3} <= set(smoke["hess_ts"])


def test_sampling_floor_and_corrected_distance():
    target = task.sample_mixture(MIX, 1000, np.random.default_rng(0))
    floor = task.sampling_floor(MIX, target, n_draws=3, seed=1)
    assert floor == task.sampling_floor(MIX, target, n_draws=3, seed=1)  # deterministic
    assert 0 < floor < task.sliced_w2(target + 0.3, target) ** 2  # far below a shifted copy's distance
    # an exact sample's distance is at the floor, so its corrected distance is small; a shifted one keeps most
    fresh = task.sample_mixture(MIX, 1000, np.random.default_rng(5))
    assert task.corrected_sw2(task.sliced_w2(fresh, target), floor) < 0.5 * task.sliced_w2(fresh, target)
    assert task.corrected_sw2(0.5, 0.09) == pytest.approx(0.4)
    assert task.corrected_sw2(0.2, 0.09) == 0.0  # below the floor: clamped at 0


def test_score_jacobian_hessian_matches_finite_differences():
    net = method.LMNet(seed=2)
    x = np.array([[0.3, -1.2], [1.5, 0.4]])
    J = task.score_jacobian_hessian(net, x, 0.4).numpy()
    h = 1e-2
    Jfd = np.zeros((2, 2, 2))  # Jfd[n, j, i] = d score_j / d x_i
    for i in range(2):
        dx = np.zeros(2)
        dx[i] = h
        with torch.no_grad():
            plus = net(torch.as_tensor(x + dx, dtype=torch.float32), 0.4)["score"].numpy()
            minus = net(torch.as_tensor(x - dx, dtype=torch.float32), 0.4)["score"].numpy()
        Jfd[:, :, i] = (plus - minus) / (2 * h)
    assert np.allclose(J, J.transpose(0, 2, 1))
    assert np.allclose(J, 0.5 * (Jfd + Jfd.transpose(0, 2, 1)), rtol=2e-2, atol=2e-2)
    assert not np.allclose(J, 0.0, atol=1e-3)


def test_hessian_error_reports_the_score_jacobian():
    net, _ = experiment.train_model("dsm", seed=0, steps=300)
    he = task.hessian_error(net, MIX, 0.6, n=300)
    untrained = task.hessian_error(method.LMNet(seed=0), MIX, 0.6, n=300)
    assert set(he) == {"rel_error", "jac_rel_error", "score_mse"}
    assert he["jac_rel_error"] < 0.5 * untrained["jac_rel_error"]


def test_exact_samplers_meet_the_recalibrated_c1_on_many_samples():
    # the calibration in miniature: with the analytic score and Hessian, LM's sampler at N = 10 beats
    # both isotropic samplers on the floor-corrected distance
    oracles = experiment.oracle_reverse_fns(MIX)
    assert set(oracles) == set(experiment.ORACLES) == {"LM*", "B1*", "B2*"}
    target = task.sample_mixture(MIX, 8000, np.random.default_rng(3))
    floor = task.sampling_floor(MIX, target, 2, seed=3)
    rows = experiment.distance_rows(oracles, 10, target, floor, seed=3)
    assert [r["method"] for r in rows] == ["LM*", "B1*", "B2*"] and all(r["n_points"] == 8000 for r in rows)
    p2 = experiment.claim_values(rows)[3]["p2_oracle_c1"]
    assert p2 < 0.8


def test_run_experiment_smoke_and_determinism():
    # the smoke profile, cut down: a short grid without the claims' N = 20 and 200 (c2, c3b, p3 NaN)
    cfg = SimpleNamespace(**{**experiment.EXPERIMENT_PROFILES["smoke"], "train_steps": 20, "n_samples": 100,
                             "n_nll": 50, "n_hess": 50, "n_steps_grid": [5, 10], "n_claim": 200,
                             "methods": ["LM", "B1", "B2", "B3", "B4"]})
    rows, ex = experiment.run_experiment(cfg)
    rows2, _ = experiment.run_experiment(cfg)
    samp = [r for r in rows if r["kind"] == "sampling"]
    assert len(samp) == 5 * 2
    assert all(np.isfinite(r["sw2"]) and np.isfinite(r["nll"]) and r["floor2"] > 0 for r in samp)
    dist = [(r["method"], r["n_steps"], r["n_points"]) for r in rows if r["kind"] == "distance"]
    assert dist == [("LM*", 10, 200), ("B1*", 10, 200), ("B2*", 10, 200), ("LM", 10, 200), ("B1", 10, 200),
                    ("B2", 10, 200), ("S1", 10, 200), ("S2", 10, 200)]
    score = [r for r in rows if r["kind"] == "score"]
    assert len(score) == 2 * len(task.SCORE_TS) and {r["method"] for r in score} == {"LM", "B1"}
    keys = ("sw2", "nll", "rel_error", "jac_rel_error", "score_mse", "floor2")
    key = lambda rs: np.array([[r.get(k, -1.0) for k in keys] for r in rs])  # noqa: E731
    assert np.array_equal(key(rows), key(rows2), equal_nan=True)
    assert ex["samples"][("LM", 5)].shape == (100, 2) and ex["target"].shape == (100, 2)
    assert len(ex["ellipses"]) == 6 and ex["ellipses"][0]["cov_true"].shape == (2, 2)
    cv = experiment.claim_values(rows)[0]
    assert set(cv) == _chapter_ids()
    nan_ids = {"c2_nll_bound", "c3b_convergence_floor", "p3_oracle_c3", "c3_convergence", "m2_lowrank_nll"}
    assert all(math.isnan(cv[k]) for k in nan_ids)
    assert all(np.isfinite(v) for k, v in cv.items() if k not in nan_ids)


def _chapter_ids():
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "notebooks" / "likelihood_matching" / "chapter.yml"
    return {c["id"] for c in yaml.safe_load(path.read_text())["claims"]}


def _claim_rows():
    """Hand-made rows of :func:`experiment.run_experiment`, two seeds with different numbers. Every
    method has its own value at every N and t, so a wrong method, N, t or row kind changes a claim's
    value: at N = 10 B3 is the best baseline (c1 must ignore it), at N = 20 B2 has the lowest NLL bound
    (c2 must ignore it), at N = 200 B1 differs from B2 (c3's baseline); c2 is positive on seed 0 and
    negative on seed 1, and LM is above B2 at N = 200 on seed 0 and below it on seed 1 (the absolute
    value). The "distance" rows (N = 10 on their own samples, and the exact samplers at N = 200) differ
    from the "sampling" rows; on seed 1 LM's distance is below the floor (corrected to 0). The score
    errors at t = 0.6 are a decoy for p1, and LM's own Jacobian error a decoy for c4b."""
    # (seed, method): {N: (sw2, nll)}
    table = {
        (0, "LM"): {5: (0.50, 3.0), 10: (0.12, 1.9), 20: (0.30, 1.00), 200: (0.11, 0.50)},
        (0, "B1"): {5: (0.60, 3.1), 10: (0.20, 2.0), 20: (0.25, 1.20), 200: (0.13, 0.55)},
        (0, "B2"): {5: (0.70, 3.2), 10: (0.24, 2.1), 20: (0.22, 0.80), 200: (0.10, 0.52)},
        (0, "B3"): {5: (0.40, 3.3), 10: (0.06, 2.2), 20: (0.35, 1.15), 200: (0.20, 0.60)},
        (0, "LMjoint"): {5: (0.45, 2.9), 10: (0.09, 1.8), 20: (0.28, 1.05), 200: (0.12, 0.48)},
        (1, "LM"): {5: (0.55, 3.5), 10: (0.30, 2.5), 20: (0.40, 1.60), 200: (0.16, 0.70)},
        (1, "B1"): {5: (0.65, 3.6), 10: (0.40, 2.6), 20: (0.45, 1.50), 200: (0.18, 0.75)},
        (1, "B2"): {5: (0.75, 3.7), 10: (0.25, 2.7), 20: (0.50, 1.20), 200: (0.20, 0.72)},
        (1, "B3"): {5: (0.35, 3.8), 10: (0.10, 2.8), 20: (0.60, 1.45), 200: (0.30, 0.80)},
        (1, "LMjoint"): {5: (0.50, 3.4), 10: (0.20, 2.4), 20: (0.42, 1.30), 200: (0.26, 0.69)},
        (0, "B4"): {20: (0.30, 1.10)},
        (1, "B4"): {20: (0.40, 1.55)},
    }
    floor = {0: 0.0016, 1: 0.0020}
    rows = [dict(kind="sampling", seed=seed, method=m, n_steps=n, sw2=sw2, floor2=floor[seed], nll=nll,
                 sample_seconds=0.01) for (seed, m), by_n in table.items() for n, (sw2, nll) in by_n.items()]
    # (seed, method, N): sw2 of the "distance" rows, with their own floor at N = 10
    distance = {
        (0, "LM", 10): 0.030, (0, "B1", 10): 0.100, (0, "B2", 10): 0.050, (0, "B3", 10): 0.020,
        (0, "LMjoint", 10): 0.090, (0, "LM*", 10): 0.028, (0, "B1*", 10): 0.096, (0, "B2*", 10): 0.052,
        (0, "LM*", 200): 0.042, (0, "B2*", 200): 0.049,
        (1, "LM", 10): 0.020, (1, "B1", 10): 0.040, (1, "B2", 10): 0.050, (1, "B3", 10): 0.010,
        (1, "LMjoint", 10): 0.060, (1, "LM*", 10): 0.035, (1, "B1*", 10): 0.045, (1, "B2*", 10): 0.060,
        (1, "LM*", 200): 0.050, (1, "B2*", 200): 0.045,
        (0, "S1", 10): 0.040, (0, "S2", 10): 0.045, (1, "S1", 10): 0.050, (1, "S2", 10): 0.035,
    }
    claim_floor = {0: 0.0004, 1: 0.0009}
    rows += [dict(kind="distance", seed=seed, method=m, n_steps=n, n_points=40000 if n == 10 else 4000, sw2=v,
                  floor2=claim_floor[seed] if n == 10 else floor[seed]) for (seed, m, n), v in distance.items()]
    # (seed, method): {t: (rel_error, jac_rel_error, score_mse)}; rel_error NaN for DSM's untrained heads
    hess = {
        (0, "LM"): {0.1: (0.90, 1.5, 0.30), 0.3: (0.20, 0.9, 0.05), 0.6: (0.15, 0.5, 0.02)},
        (0, "B1"): {0.1: (math.nan, 1.2, 0.20), 0.3: (math.nan, 0.8, 0.04), 0.6: (math.nan, 0.4, 0.01)},
        (0, "B4"): {0.1: (0.95, 0.7, 0.01), 0.3: (0.50, 0.3, 0.01), 0.6: (0.40, 0.2, 0.01)},
        (0, "LMjoint"): {0.1: (0.80, 1.6, 0.80), 0.3: (0.25, 1.0, 0.06), 0.6: (0.12, 0.6, 0.02)},
        (1, "LM"): {0.1: (0.70, 1.4, 0.10), 0.3: (0.40, 0.7, 0.09), 0.6: (0.30, 0.6, 0.05)},
        (1, "B1"): {0.1: (math.nan, 1.1, 0.10), 0.3: (math.nan, 0.5, 0.03), 0.6: (math.nan, 0.3, 0.01)},
        (1, "B4"): {0.1: (0.85, 0.6, 0.02), 0.3: (0.60, 0.2, 0.02), 0.6: (0.45, 0.1, 0.02)},
        (1, "LMjoint"): {0.1: (0.75, 1.3, 0.40), 0.3: (0.33, 0.8, 0.06), 0.6: (0.20, 0.5, 0.03)},
    }
    rows += [dict(kind="hessian", seed=seed, method=m, t=t, rel_error=e, jac_rel_error=j, score_mse=mse)
             for (seed, m), by_t in hess.items() for t, (e, j, mse) in by_t.items()]
    rows += [dict(kind="score", seed=seed, method=m, t=t, eps_mse=e, weight=w)
             for (seed, m), es in SCORE_ROWS.items() for t, e, w in zip((0.125, 0.325, 0.625), es, (0.6, 0.4, 0.2))]
    return rows


#: (seed, network): the score errors e(t) at t = 0.125, 0.325, 0.625 (weights 0.6, 0.4, 0.2)
SCORE_ROWS = {(0, "LM"): (0.5, 0.1, 0.02), (0, "B1"): (0.4, 0.12, 0.01),
              (1, "LM"): (0.3, 0.2, 0.05), (1, "B1"): (0.35, 0.1, 0.02)}


def _weighted(es, uniform=False):
    w = (1.0, 1.0, 1.0) if uniform else (0.6, 0.4, 0.2)
    return sum(a * b for a, b in zip(w, es)) / sum(w)


def test_claim_values_hand_computed():
    import pandas as pd

    rows = _claim_rows()
    oracle = {  # the exact samplers' preconditions do not depend on method=
        0: {"p2_oracle_c1": math.sqrt((0.028**2 - 0.0004) / (0.052**2 - 0.0004)),  # B2* is the better exact baseline
            "p3_oracle_c3": abs(0.042**2 - 0.049**2) / 0.0016},
        1: {"p2_oracle_c1": math.sqrt((0.035**2 - 0.0009) / (0.045**2 - 0.0009)),  # here B1*
            "p3_oracle_c3": abs(0.050**2 - 0.045**2) / 0.0020},
    }
    want = {
        "LM": {
            0: {"p1_score_learned": _weighted(SCORE_ROWS[0, "LM"]) / _weighted(SCORE_ROWS[0, "B1"]),
                "p4_dsm_competent": _weighted(SCORE_ROWS[0, "B1"], True) / _weighted(SCORE_ROWS[0, "LM"], True),
                "m1_covariance_alone": math.sqrt((0.03**2 - 0.0004) / (0.04**2 - 0.0004)),  # S1 the better
                "m2_lowrank_nll": 1.10 - 1.00, "x1_score_error_lm_t03": 0.1,
                "x2_old_p1": 0.30 / 0.20,  # t = 0.1 is the larger ratio (t = 0.6's 2.0 ignored)
                "c1b_few_steps_corrected": math.sqrt((0.03**2 - 0.0004) / (0.05**2 - 0.0004)),  # B2's distance row
                "c2_nll_bound": 1.15 - 1.00,  # min(B1, B3) at N = 20 is B3
                "c3b_convergence_floor": (0.11**2 - 0.10**2) / 0.0016,
                "c4b_hessian_vs_jacobian": 0.20 / 0.8,  # against DSM's Jacobian, not LM's own
                "c1_few_steps_sw2": 0.12 / 0.20,  # min(B1, B2) at N = 10 is B1
                "c3_convergence": (0.11 - 0.10) / 0.10,
                "c4_hessian_learned": 0.20},
            1: {"p1_score_learned": _weighted(SCORE_ROWS[1, "LM"]) / _weighted(SCORE_ROWS[1, "B1"]),
                "p4_dsm_competent": _weighted(SCORE_ROWS[1, "B1"], True) / _weighted(SCORE_ROWS[1, "LM"], True),
                "m1_covariance_alone": 0.0,  # LM below the floor
                "m2_lowrank_nll": 1.55 - 1.60, "x1_score_error_lm_t03": 0.2,
                "x2_old_p1": 0.09 / 0.03,  # here t = 0.3
                "c1b_few_steps_corrected": 0.0,  # LM below the floor
                "c2_nll_bound": 1.45 - 1.60,  # B3 again; LM worse: negative
                "c3b_convergence_floor": (0.20**2 - 0.16**2) / 0.0020,  # LM below B2
                "c4b_hessian_vs_jacobian": 0.40 / 0.5,
                "c1_few_steps_sw2": 0.30 / 0.25,  # here B2
                "c3_convergence": (0.20 - 0.16) / 0.20,
                "c4_hessian_learned": 0.40},
        },
        "LMjoint": {  # method= replaces LM in every formula of a trained network, the baselines stay
            0: {"x2_old_p1": 0.80 / 0.20, "p1_score_learned": math.nan, "p4_dsm_competent": math.nan,
                "x1_score_error_lm_t03": math.nan, "m2_lowrank_nll": 1.10 - 1.05,
                "m1_covariance_alone": math.sqrt((0.09**2 - 0.0004) / (0.04**2 - 0.0004)),
                "c1b_few_steps_corrected": math.sqrt((0.09**2 - 0.0004) / (0.05**2 - 0.0004)),
                "c2_nll_bound": 1.15 - 1.05, "c3b_convergence_floor": (0.12**2 - 0.10**2) / 0.0016,
                "c4b_hessian_vs_jacobian": 0.25 / 0.8, "c1_few_steps_sw2": 0.09 / 0.20,
                "c3_convergence": (0.12 - 0.10) / 0.10, "c4_hessian_learned": 0.25},
            1: {"x2_old_p1": 0.40 / 0.10, "p1_score_learned": math.nan, "p4_dsm_competent": math.nan,
                "x1_score_error_lm_t03": math.nan, "m2_lowrank_nll": 1.55 - 1.30,
                "m1_covariance_alone": math.sqrt((0.06**2 - 0.0009) / (0.035**2 - 0.0009)),
                "c1b_few_steps_corrected": math.sqrt((0.06**2 - 0.0009) / (0.04**2 - 0.0009)),  # B1's row
                "c2_nll_bound": 1.45 - 1.30, "c3b_convergence_floor": (0.26**2 - 0.20**2) / 0.0020,
                "c4b_hessian_vs_jacobian": 0.33 / 0.5, "c1_few_steps_sw2": 0.20 / 0.25,
                "c3_convergence": (0.26 - 0.20) / 0.20, "c4_hessian_learned": 0.33},
        },
    }
    ids = _chapter_ids()
    for m, by_seed in want.items():
        for got in (experiment.claim_values(rows, method=m), experiment.claim_values(pd.DataFrame(rows), method=m)):
            assert list(got) == [0, 1]
            for seed, values in by_seed.items():
                assert set(got[seed]) == ids == set(values) | set(oracle[seed])
                for claim, value in {**values, **oracle[seed]}.items():
                    if math.isnan(value):  # LMjoint has no score rows of its own
                        assert math.isnan(got[seed][claim]), (m, seed, claim)
                    else:
                        assert got[seed][claim] == pytest.approx(value, rel=1e-12, abs=1e-15), (m, seed, claim)


def test_claim_values_nan_where_a_method_or_grid_point_is_missing():
    rows = _claim_rows()
    cv = experiment.claim_values([r for r in rows if r["method"] != "B2"])[0]
    assert all(math.isnan(cv[k]) for k in ("c1b_few_steps_corrected", "c3b_convergence_floor", "c1_few_steps_sw2",
                                           "c3_convergence"))
    assert cv["c2_nll_bound"] == pytest.approx(1.15 - 1.00) and np.isfinite(cv["p2_oracle_c1"])
    cv = experiment.claim_values([r for r in rows if r.get("n_steps") not in (20, 200)])[0]
    assert all(math.isnan(cv[k]) for k in ("c2_nll_bound", "c3b_convergence_floor", "p3_oracle_c3", "c3_convergence"))
    assert cv["c1_few_steps_sw2"] == pytest.approx(0.6) and cv["c4_hessian_learned"] == pytest.approx(0.2)
    cv = experiment.claim_values([r for r in rows if not (r["method"] == "B1" and r.get("t") == 0.1)])[0]
    assert math.isnan(cv["x2_old_p1"])  # one t missing: no maximum over t
    assert np.isfinite(cv["p1_score_learned"])  # p1 is read from the "score" rows
    assert cv["c4b_hessian_vs_jacobian"] == pytest.approx(0.25)


def test_claims_in_chapter_yml_are_computed():
    rows = [dict(kind="hessian", seed=0, method="LM", t=0.3, rel_error=0.2, jac_rel_error=0.3, score_mse=0.1)]
    assert set(experiment.claim_values(rows)[0]) == _chapter_ids()


# ---- graders -----------------------------------------------------------------------------------


def test_graders_accept_reference_and_reject_wrong():
    exercises.check_tweedie_moments(lambda x, s, H, a, sig2: method.tweedie_moments(x, s, H, a, sig2))
    with pytest.raises(AssertionError):
        # forgets the 1/a^2 on the covariance
        exercises.check_tweedie_moments(lambda x, s, H, a, sig2: ((x + sig2 * s) / a, sig2 * (np.eye(len(x)) + sig2 * H)))
    exercises.check_sliced_w2(lambda X, Y, V: task.sliced_w2(X, Y, directions=V))
    with pytest.raises(AssertionError):
        # forgets the square root
        exercises.check_sliced_w2(lambda X, Y, V: task.sliced_w2(X, Y, directions=V) ** 2)


def test_decoupled_objective_has_the_same_value_and_split_gradients():
    net = method.LMNet(seed=0)
    gen = torch.Generator().manual_seed(0)
    x0 = torch.as_tensor(task.sample_mixture(task.ring_mixture(), 64, np.random.default_rng(0))).float()
    t = torch.rand(64, generator=gen) * 0.9 + 0.1
    s = (t - 0.05).clamp_min(0)
    eps = torch.randn(64, 2, generator=gen)
    full = method.training_loss(net, x0, t, s, eps, "lm")
    split = method.training_loss(net, x0, t, s, eps, "lm_sg")
    assert torch.isclose(full, split, rtol=1e-5)
    grads = {}
    for objective in ("lm", "lm_sg"):
        net.zero_grad()
        method.training_loss(net, x0, t, s, eps, objective).backward()
        grads[objective] = [p.grad.clone() for p in net.parameters()]
    assert any(not torch.allclose(a, b) for a, b in zip(grads["lm"], grads["lm_sg"]))
    # the diagonal ablation B4 is decoupled the same way
    assert torch.isclose(method.training_loss(net, x0, t, s, eps, "lm_diag"),
                         method.training_loss(net, x0, t, s, eps, "lm_diag_sg"), rtol=1e-5)
    with pytest.raises(ValueError, match="valid"):
        method.training_loss(net, x0, t, s, eps, "lm_bogus")


def test_read_only_arrays_become_tensors_without_a_warning():
    import warnings

    from replib.papers.likelihood_matching.method import _t

    view = np.broadcast_to(np.eye(2), (3, 2, 2))  # read-only
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _t(view)
    assert out.dtype == torch.float64 and out.shape == (3, 2, 2) and torch.equal(out[1], torch.eye(2, dtype=torch.float64))
    out[0, 0, 0] = 5.0  # a copy: the broadcast source is untouched
    assert view[0, 0, 0] == 1.0
    assert _t(torch.ones(2)).dtype == torch.float64


# ---- update steps: descent direction, composite losses, second step --------------------------------


def test_quasi_likelihood_rb_is_the_sum_of_its_three_hand_computed_terms():
    """L^RB on one sample with a 2 x 2 C: 1/2 log det C + 1/2 sigma^2 r^T C^-1 r + 1/2 kappa tr C^-1,
    each term by hand; changing kappa or sigma^2 changes the total by its own term."""
    C = np.array([[2.0, 0.5], [0.5, 1.0]])  # det 1.75, inverse [[1, -0.5], [-0.5, 2]] / 1.75
    score, s0 = np.array([[1.0, 2.0]]), np.array([[0.5, 1.0]])  # r = (0.5, 1)
    quad = (1.0 * 0.25 - 2 * 0.5 * 0.5 * 1.0 + 2.0 * 1.0) / 1.75
    logdet, trace = math.log(1.75), 3.0 / 1.75

    def rb(sigma2, kappa):
        return float(method.quasi_likelihood_rb(score, C[None], s0, sigma2, kappa)[0])

    assert rb(0.3, 0.2) == pytest.approx(0.5 * logdet + 0.5 * 0.3 * quad + 0.5 * 0.2 * trace, rel=1e-12)
    assert rb(0.3, 0.7) - rb(0.3, 0.2) == pytest.approx(0.5 * 0.5 * trace, rel=1e-10)
    assert rb(0.9, 0.2) - rb(0.3, 0.2) == pytest.approx(0.5 * 0.6 * quad, rel=1e-10)


def _lm_inputs(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x0 = task.sample_mixture(MIX, n, generator=g)
    t = torch.rand(n, generator=g) * 0.8 + 0.15
    s = (t - 0.1).clamp_min(0)
    eps = torch.randn(n, 2, generator=g)
    return x0, t, s, eps


def _hand_lm(net, x0, t, s, eps, objective, w=None):
    """The batch-mean training objective written out densely (section 4 with C = D + W W^T of section 5):
    ``lm`` / ``lm_diag`` (W = 0) as they stand; ``lm_sg`` / ``lm_diag_sg`` hold the residual fixed in the
    covariance terms and give the score the identity-weighted gradient of 1/2 sigma^2 / (1 - alpha_bar)
    ||eps_theta - eps||^2; ``lm_mean`` is C = I; ``dsm`` the plain epsilon loss."""
    td, sd = t.double(), s.double()
    ab = torch.exp(-0.1 * td - 0.5 * 19.9 * td * td)
    xt = torch.sqrt(ab.float())[:, None] * x0 + torch.sqrt(1 - ab.float())[:, None] * eps
    out = net(xt, t)
    if objective == "dsm":
        return ((out["eps"] - eps) ** 2).sum(-1).mean()
    sig2 = 1 - ab / torch.exp(-0.1 * sd - 0.5 * 19.9 * sd * sd)
    v = out["eps"].double() - eps.double()
    weight = 0.5 * sig2 / (1 - ab)
    sweight = weight if w is None else 0.5 * w  # the score term's weight (Rao-Blackwellised in training)
    mean_term = sweight * (v * v).sum(-1)
    if objective == "lm_mean":
        return mean_term.mean()
    kappa = (1 - sig2 / (1 - ab)).clamp_min(0)
    c = sig2 * ab / (1 - ab) ** 2
    L = out["L"][..., :0] if "diag" in objective else out["L"]
    C = torch.diag_embed(kappa[:, None] + c[:, None] * torch.exp(out["lam"]) + 1e-5) + c[:, None, None] * L @ L.transpose(-1, -2)
    Ci = torch.linalg.inv(C)
    vd = v.detach() if objective.endswith("_sg") else v
    cov_terms = 0.5 * torch.logdet(C) + weight * torch.einsum("ni,nij,nj->n", vd, Ci, vd) + 0.5 * kappa * Ci.diagonal(
        dim1=-2, dim2=-1).sum(-1)
    return (cov_terms + mean_term - sweight * (vd * vd).sum(-1)).mean()


@pytest.mark.parametrize("objective", ["lm", "lm_diag", "lm_sg", "lm_diag_sg"])
def test_lm_gradients_equal_the_hand_written_objective(objective):
    """The gradient of every LM objective equals that of the hand-written dense form; for the decoupled
    ones the score sees 1/2 sigma^2 / (1 - alpha_bar) ||eps_theta - eps||^2 (pushed towards eps, as in
    lm_mean) and the covariance heads the RB terms with the residual held fixed, at the coupled value."""
    net = method.LMNet(seed=1)
    x0, t, s, eps = _lm_inputs()
    got = method.training_loss(net, x0, t, s, eps, objective)
    g_got = torch.autograd.grad(got, list(net.parameters()))
    want = _hand_lm(net, x0, t, s, eps, objective)
    g_want = torch.autograd.grad(want, list(net.parameters()))
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    for a, b in zip(g_got, g_want):
        assert torch.allclose(a, b.float(), rtol=1e-3, atol=1e-6)
    if objective.endswith("_sg"):
        coupled = method.training_loss(net, x0, t, s, eps, objective[:-3])
        assert got.item() == pytest.approx(coupled.item(), rel=1e-5)
        # the score trunk gets exactly lm_mean's (B3's) gradient, the covariance trunk none of it
        n_trunk = len(list(net.trunk.parameters()))
        g_mean = torch.autograd.grad(method.training_loss(net, x0, t, s, eps, "lm_mean"), list(net.trunk.parameters()))
        for a, b in zip(g_got[:n_trunk], g_mean):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)
        assert max(float(b.abs().max()) for b in g_mean) > 1e-4
        parts = method.training_loss(net, x0, t, s, eps, objective, parts=True)
        g_cov = torch.autograd.grad(parts["covariance"], list(net.parameters()), allow_unused=True)
        assert all(g is None or float(g.abs().max()) == 0 for g in g_cov[:n_trunk])
        g_sc = torch.autograd.grad(parts["score"], list(net.parameters()), allow_unused=True)
        assert all(g is None or float(g.abs().max()) == 0 for g in g_sc[n_trunk:])


def _hand_training(objective, steps, warm, lr, seed=0, batch=8, grid=(5, 10)):
    """train_model written out with plain SGD: the seeded data stream, C = I for the first ``warm`` steps,
    the cosine-annealed learning rate lr (1 + cos(pi k / steps)) / 2."""
    net = method.LMNet(seed=seed)
    gen = torch.Generator().manual_seed(10_000 + seed)
    deltas = torch.tensor([1.0 / n for n in grid])
    for k in range(steps):
        x0 = task.sample_mixture(MIX, batch, generator=gen)
        t = 1.0 - torch.rand(batch, generator=gen)
        s = (t - deltas[torch.randint(len(deltas), (batch,), generator=gen)]).clamp_min(0.0)
        eps = torch.randn(batch, 2, generator=gen)
        td = t.double()
        w = sum(1 - torch.exp(-0.1 * td - 9.95 * td * td) / torch.exp(-0.1 * sn - 9.95 * sn * sn)
                for sn in ((td - 1.0 / n).clamp_min(0.0) for n in grid)) / len(grid) / (1 - torch.exp(-0.1 * td - 9.95 * td * td))
        loss = _hand_lm(net, x0, t, s, eps, "lm_mean" if k < warm else objective, w=w)
        grads = list(torch.autograd.grad(loss, list(net.parameters()), allow_unused=True))
        n_trunk = len(list(net.trunk.parameters()))
        for lo, hi in ((0, n_trunk), (n_trunk, len(grads))):  # clip each trunk to norm 1
            gs = [g for g in grads[lo:hi] if g is not None]
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in gs)) if gs else torch.tensor(0.0)
            scale = min(1.0, 1.0 / (float(norm) + 1e-6))
            grads[lo:hi] = [None if g is None else g * scale for g in grads[lo:hi]]
        with torch.no_grad():
            for p, g in zip(net.parameters(), grads):
                if g is not None:
                    p -= lr * 0.5 * (1 + math.cos(math.pi * k / steps)) * g.float()
    return net


@pytest.mark.parametrize("objective, warm", [("dsm", 0), ("lm_sg", 1), ("lm_mean", 0)])
def test_train_model_sgd_steps_follow_the_hand_written_objective(objective, warm, monkeypatch):
    """Two plain-SGD steps of train_model (warm start C = I on the first step for lm_sg, the cosine lr
    halved at the second) equal the hand-written steps on the same data stream."""
    monkeypatch.setattr(torch.optim, "Adam", lambda params, lr, **kw: torch.optim.SGD(params, lr=lr))
    net, _ = experiment.train_model(objective, seed=0, steps=2, batch_size=8, lr=0.05, n_steps_grid=(5, 10),
                                    warmup_frac=0.5, mix=MIX)
    want = _hand_training(objective, 2, warm, 0.05)
    moved = [not torch.equal(a, b) for a, b in zip(net.parameters(), method.LMNet(seed=0).parameters())]
    assert any(moved)
    for a, b in zip(net.parameters(), want.parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_decoupled_step_lowers_the_score_error_on_its_batch():
    """A small plain-SGD step on lm_sg lowers the weighted score error of the batch it was taken on (the
    identity-weighted gradient points the eps head towards eps)."""
    net = method.LMNet(seed=3)
    x0, t, s, eps = _lm_inputs(64, seed=2)

    def err():
        return _hand_lm(net, x0, t, s, eps, "lm_mean").item()

    before = err()
    grads = torch.autograd.grad(method.training_loss(net, x0, t, s, eps, "lm_sg"), list(net.parameters()))
    with torch.no_grad():
        for p, g in zip(net.parameters(), grads):
            p -= 1e-3 * g
    assert err() < before


def test_rb_score_weight_is_the_mean_over_the_step_sizes():
    t = torch.tensor([0.004, 0.1, 0.3, 0.9], dtype=torch.float64)
    grid = (5, 10, 200)
    want = torch.stack([method.transition(t, (t - 1.0 / n).clamp_min(0.0))[1] for n in grid]).mean(0) / (1 - method.alpha_bar(t))
    assert torch.allclose(method.rb_score_weight(t, grid), want)
    # its expectation over Delta equals the per-sample weight's, which ranges widely at one t
    per = torch.stack([method.transition(t, (t - 1.0 / n).clamp_min(0.0))[1] / (1 - method.alpha_bar(t)) for n in grid])
    assert float(per[:, 2].max() / per[:, 2].min()) > 10


@pytest.mark.parametrize("objective", ["dsm", "lm_mean", "lm", "lm_sg", "lm_diag_sg"])
def test_composite_loss_is_the_sum_of_its_parts(objective):
    net = method.LMNet(seed=2)
    x0, t, s, eps = _lm_inputs(32, seed=4)
    w = method.rb_score_weight(t.double(), (5, 10))
    p = method.training_loss(net, x0, t, s, eps, objective, score_weight=w, parts=True)
    assert p["loss"].item() == pytest.approx((p["score"] + p["covariance"]).item(), rel=1e-6)
    assert p["loss"].item() == pytest.approx(method.training_loss(net, x0, t, s, eps, objective, score_weight=w).item(), rel=1e-6)


def test_lm_score_trunk_is_b3s_and_b4_shares_it():
    """Separate trunks, per-trunk clipping and an element-wise optimiser: LM's score trunk trained with
    lm_sg equals B3's (lm_mean) trained alone, and training B4's diagonal covariance trunk in the same
    loop leaves LM unchanged while moving B4's own covariance trunk."""
    kw = dict(seed=5, steps=12, batch_size=32, mix=MIX, warmup_frac=0.25)
    lm, _ = experiment.train_model("lm_sg", **kw)
    b3, _ = experiment.train_model("lm_mean", **kw)
    lm2, info = experiment.train_model("lm_sg", with_diag=True, **kw)
    for a, b in zip(lm.trunk.parameters(), b3.trunk.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    for a, b in zip(lm.parameters(), lm2.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    b4 = info["diag_net"]
    assert b4.trunk is lm2.trunk and b4.rank == 0
    fresh = method.LMNet(rank=0, seed=5)
    assert any(not torch.equal(a, b) for a, b in zip(b4.cov_trunk.parameters(), fresh.cov_trunk.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(lm.cov_trunk.parameters(), b3.cov_trunk.parameters()))


def test_covariance_step_lowers_the_covariance_part_on_its_batch():
    """One small SGD step on the covariance part (residual held fixed) lowers it on its batch (LM's low
    rank and B4's diagonal form)."""
    for objective, rank in (("lm_sg", 1), ("lm_diag_sg", 0)):
        net = method.LMNet(seed=6, rank=rank)
        x0, t, s, eps = _lm_inputs(64, seed=7)

        def cov():
            return method.training_loss(net, x0, t, s, eps, objective, parts=True)["covariance"].item()

        before = cov()
        part = method.training_loss(net, x0, t, s, eps, objective, parts=True)["covariance"]
        grads = torch.autograd.grad(part, list(net.cov_trunk.parameters()))
        with torch.no_grad():
            for p, g in zip(net.cov_trunk.parameters(), grads):
                p -= 1e-3 * g
        assert cov() < before


def test_score_errors_vanish_for_the_exact_eps_and_drop_with_training():
    class Exact(torch.nn.Module):
        def forward(self, x, t):
            ab = float(method.alpha_bar(float(t)))
            return dict(eps=-math.sqrt(1 - ab) * torch.as_tensor(task.score_pt(MIX, x.double().numpy(), float(t))))

    assert np.allclose(task.score_errors(Exact(), MIX, (0.1, 0.5), n=50), 0.0, atol=1e-10)
    net, _ = experiment.train_model("dsm", seed=0, steps=200, mix=MIX)
    e = task.score_errors(net, MIX, (0.3,), n=300)
    e0 = task.score_errors(method.LMNet(seed=0), MIX, (0.3,), n=300)
    assert e[0] < 0.5 * e0[0]


# ---- the method's pieces on hand-made inputs (issue 44) ----------------------------------------


def _ab(t):
    """alpha_bar written out: exp(-0.1 t - 19.9 t^2 / 2)."""
    return math.exp(-0.1 * t - 9.95 * t * t)


def test_schedule_and_posterior_variance_by_hand():
    """alpha_bar on floats, arrays and tensors; a = sqrt(ab_t / ab_s), sigma^2 = 1 - ab_t / ab_s; beta-tilde =
    sigma^2 (1 - ab_s) / (1 - ab_t); the grid has N + 1 points from 0 to 1."""
    assert method.alpha_bar(0.3) == pytest.approx(_ab(0.3), rel=1e-14)
    assert np.allclose(method.alpha_bar(np.array([0.1, 0.7])), [_ab(0.1), _ab(0.7)], rtol=1e-14)
    assert torch.allclose(method.alpha_bar(torch.tensor([0.1, 0.7], dtype=torch.float64)),
                          torch.tensor([_ab(0.1), _ab(0.7)], dtype=torch.float64), rtol=1e-14)
    a, sig2 = method.transition(0.5, 0.2)
    assert a == pytest.approx(math.sqrt(_ab(0.5) / _ab(0.2)), rel=1e-13)
    assert sig2 == pytest.approx(1 - _ab(0.5) / _ab(0.2), rel=1e-13)
    a_t, sig2_t = method.transition(torch.tensor([0.5], dtype=torch.float64), torch.tensor([0.2], dtype=torch.float64))
    assert float(a_t) == pytest.approx(a, rel=1e-13) and float(sig2_t) == pytest.approx(sig2, rel=1e-13)
    want = (1 - _ab(0.5) / _ab(0.2)) * (1 - _ab(0.2)) / (1 - _ab(0.5))
    assert method.posterior_variance(0.5, 0.2) == pytest.approx(want, rel=1e-12)
    assert np.allclose(method.time_grid(3), [0, 1 / 3, 2 / 3, 1]) and method.time_grid(3.0).size == 4


def test_schedule_on_tensors_stays_differentiable():
    """alpha_bar and the transition of tensors are torch expressions: d alpha_bar / dt = -(0.1 + 19.9 t) alpha_bar,
    and d sigma^2 / dt = (0.1 + 19.9 t) alpha_bar_t / alpha_bar_s (s held fixed)."""
    t = torch.tensor([0.3, 0.6], dtype=torch.float64, requires_grad=True)
    s = torch.tensor([0.1, 0.2], dtype=torch.float64)
    ab = method.alpha_bar(t)
    (g,) = torch.autograd.grad(ab.sum(), t)
    assert torch.allclose(g, -(0.1 + 19.9 * t.detach()) * ab.detach(), rtol=1e-12)
    _, sig2 = method.transition(t, s)
    (g2,) = torch.autograd.grad(sig2.sum(), t)
    assert torch.allclose(g2, (0.1 + 19.9 * t.detach()) * ab.detach() / method.alpha_bar(s), rtol=1e-12)


def test_tweedie_moments_torch_and_numpy_by_hand():
    """E = (x + sigma^2 s) / a, Cov = sigma^2 / a^2 (I + sigma^2 H) on a batch, numpy and torch alike."""
    x = np.array([[1.0, 2.0], [0.0, -1.0], [3.0, 0.5]])
    score = np.array([[0.5, -1.0], [2.0, 0.0], [-0.5, 1.0]])
    H = np.array([[[-1.0, 0.2], [0.2, -0.5]], [[0.3, 0.0], [0.0, -2.0]], [[-0.1, -0.4], [-0.4, 0.6]]])
    a, sig2 = 0.9, 0.3
    want_mean = (x + 0.3 * score) / 0.9
    want_cov = 0.3 / 0.81 * (np.eye(2)[None] + 0.3 * H)
    mean, cov = method.tweedie_moments(x, score, H, a, sig2)
    assert isinstance(mean, np.ndarray) and isinstance(cov, np.ndarray)  # numpy in, numpy out
    assert method.tweedie_moments(x, score, H.astype(np.float32), a, sig2)[1].dtype == np.float64  # a float64 identity
    assert np.allclose(mean, want_mean) and np.allclose(cov, want_cov)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-6), (torch.bfloat16, 0.05)):
        mt, ct = method.tweedie_moments(*(torch.tensor(v, dtype=dtype) for v in (x, score, H)), a, sig2)
        assert torch.is_tensor(ct) and ct.dtype == dtype  # the identity takes the Hessian's dtype
        assert np.allclose(mt.double().numpy(), want_mean, atol=tol) and np.allclose(ct.double().numpy(), want_cov, atol=tol)


def test_smw_terms_and_covariance_factors_by_hand():
    """SMW on C = diag(2, 4) + w w^T, w = (1, 2): det 20, v^T C^-1 v = 7/20, tr C^-1 = 11/20 (and r = 0);
    C_theta's D = kappa + c e^lambda + jitter, W = sqrt(c) L with the section 5 constants."""
    D = torch.tensor([[2.0, 4.0]], dtype=torch.float64)
    W = torch.tensor([[[1.0], [2.0]]], dtype=torch.float64)
    v = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    logdet, quad, tr = method.smw_terms(D, W, v)
    assert float(logdet) == pytest.approx(math.log(20.0)) and float(quad) == pytest.approx(7 / 20)
    assert float(tr) == pytest.approx(11 / 20)
    logdet, quad, tr = method.smw_terms(D, W[..., :0], v)
    assert (float(logdet), float(quad), float(tr)) == pytest.approx((math.log(8.0), 0.75, 0.75))
    # rank 2: C = diag(1, 1) + [[1, 0], [1, 1]] [[1, 1], [0, 1]] = [[2, 1], [1, 3]], det 5, inverse [[3, -1], [-1, 2]] / 5
    W2 = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]], dtype=torch.float64)
    logdet, quad, tr = method.smw_terms(torch.ones(1, 2, dtype=torch.float64), W2, torch.tensor([[1.0, 2.0]], dtype=torch.float64))
    assert (float(logdet), float(quad), float(tr)) == pytest.approx((math.log(5.0), (3 - 4 + 8) / 5, 1.0))
    lam = torch.tensor([[0.0, -1.0], [0.5, 0.2]], dtype=torch.float64)
    L = torch.tensor([[[1.0], [-2.0]], [[0.5], [0.0]]], dtype=torch.float64)
    t = torch.tensor([0.5, 0.3], dtype=torch.float64)
    s = torch.tensor([0.2, 0.0], dtype=torch.float64)
    Df, Wf, kappa = method.covariance_factors(lam, L, t, s)
    for i, (ti, si) in enumerate(((0.5, 0.2), (0.3, 0.0))):
        sig2 = 1 - _ab(ti) / _ab(si)
        k = 1 - sig2 / (1 - _ab(ti))
        c = sig2 * _ab(ti) / (1 - _ab(ti)) ** 2
        assert float(kappa[i]) == pytest.approx(k, rel=1e-12, abs=1e-14)
        assert np.allclose(Df[i].numpy(), k + c * np.exp(lam[i].numpy()) + 1e-5, rtol=1e-12, atol=0)
        assert np.allclose(Wf[i].numpy(), math.sqrt(c) * L[i].numpy(), rtol=1e-12)
    assert float(kappa[1]) == 0.0  # s = 0: sigma^2 = 1 - alpha_bar_t, kappa 0 (not negative)


def test_lmnet_layout_seeds_embedding_and_heads_by_hand():
    """The two trunks' sizes and seeds (score: seed; covariance: seed + 7919 + r), the sinusoidal embedding
    with 8 geometric frequencies from 1 to 200, eps = trunk, score = -eps / sqrt(1 - ab), lambda = clamp(head,
    -10, 5) + log(1 - ab), L = head (d x r) sqrt(1 - ab); a float t is used for every row."""
    from replib.models.mlp import MLP

    net = method.LMNet(d=2, rank=2, seed=4)
    assert net.trunk.sizes == [18, 64, 64, 64, 2] and net.cov_trunk.sizes == [18, 64, 64, 64, 6]
    assert net.trunk.activation == net.cov_trunk.activation == "silu"
    for a, b in zip(net.trunk.parameters(), MLP([18, 64, 64, 64, 2], seed=4, activation="silu").parameters()):
        assert torch.equal(a, b)
    for a, b in zip(net.cov_trunk.parameters(), MLP([18, 64, 64, 64, 6], seed=4 + 7919 + 2, activation="silu").parameters()):
        assert torch.equal(a, b)
    freqs = torch.tensor([200.0 ** (k / 7) for k in range(8)])
    assert torch.allclose(net.freqs, freqs, rtol=1e-6)
    other = method.LMNet(d=2, rank=0, seed=4, share_score_with=net)
    assert other.trunk is net.trunk and other.cov_trunk.sizes == [18, 64, 64, 64, 2]
    x = torch.tensor([[0.5, -1.0], [2.0, 0.25], [-0.3, 0.1]])
    with torch.no_grad():
        net.cov_trunk.layers[-1].bias.copy_(torch.tensor([30.0, -30.0, 0.1, 0.2, 0.3, 0.4]))
        out = net(x, 0.4)
        inp = torch.cat([x, torch.sin(0.4 * freqs).expand(3, 8), torch.cos(0.4 * freqs).expand(3, 8)], 1)
        eps = net.trunk(inp)
        head = net.cov_trunk(inp).double()
    var = 1 - _ab(float(torch.tensor(0.4)))
    assert torch.allclose(out["eps"], eps, atol=1e-6)
    assert torch.allclose(out["score"], -eps.double() / math.sqrt(var), atol=1e-5)
    assert torch.allclose(out["lam"][:, 0], torch.full((3,), 5.0 + math.log(var), dtype=torch.float64), atol=1e-6)
    assert torch.allclose(out["lam"][:, 1], torch.full((3,), -10.0 + math.log(var), dtype=torch.float64), atol=1e-6)
    assert torch.allclose(out["L"], head[:, 2:].reshape(3, 2, 2) * math.sqrt(var), atol=1e-6)
    assert out["L"][0, 0, 1] != out["L"][0, 1, 0]  # row-major d x r, not transposed
    with torch.no_grad():  # double-precision inputs and a tensor t of times give the same heads
        again = net(x.double(), torch.full((3,), 0.4, dtype=torch.float64))
    assert all(torch.equal(again[k], out[k]) for k in ("eps", "score", "lam", "L"))


def test_hessian_from_model_by_hand_and_rank_zero_drops_l():
    """H = -I / (1 - ab) + ab / (1 - ab)^2 (diag e^lambda + L L^T); rank = 0 leaves L out."""
    lam = torch.tensor([[0.0, math.log(2.0)]], dtype=torch.float64)
    L = torch.tensor([[[1.0], [3.0]]], dtype=torch.float64)
    ab = _ab(0.3)
    base = -np.eye(2) / (1 - ab)
    full = method.hessian_from_model(dict(lam=lam, L=L), 0.3)
    assert full.dtype == torch.float64
    assert np.allclose(full[0].numpy(), base + ab / (1 - ab) ** 2 * np.array([[2.0, 3.0], [3.0, 11.0]]), rtol=1e-12, atol=0)
    diag = method.hessian_from_model(dict(lam=lam, L=L), torch.tensor([0.3], dtype=torch.float64), rank=0)
    assert np.allclose(diag[0].numpy(), base + ab / (1 - ab) ** 2 * np.diag([1.0, 2.0]), rtol=1e-12, atol=0)
    assert torch.allclose(method.hessian_from_model(dict(lam=lam, L=L), 0.3, rank=1), full)


def test_float64_tensors_share_writeable_arrays_and_cast_integers():
    """_t: float64 tensors; a writeable float64 array is shared, not copied; integer arrays and lists become float64."""
    from replib.papers.likelihood_matching.method import _t

    arr = np.array([1.0, 2.0])
    out = _t(arr)
    out[0] = 7.0
    assert arr[0] == 7.0  # shared memory
    assert _t(np.arange(3)).dtype == torch.float64 and _t([1, 2]).dtype == torch.float64
    assert torch.equal(_t(np.arange(3)), torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64))


def test_lmnet_defaults_are_the_documented_network():
    """LMNet() is d = 2, rank 1, three hidden layers of 64, a 16-dim time embedding, seed 0, silu."""
    net, ref = method.LMNet(), method.LMNet(d=2, rank=1, hidden=64, depth=3, emb=16, seed=0, activation="silu")
    assert (net.d, net.rank) == (2, 1) and net.trunk.sizes == [18, 64, 64, 64, 2] and net.cov_trunk.sizes == [18, 64, 64, 64, 4]
    assert net.trunk.activation == net.cov_trunk.activation == "silu" and net.freqs.shape == (8,)
    for a, b in zip(net.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b)


def test_rb_score_weight_is_computed_in_double_precision():
    """The Rao-Blackwellised weight of a list or float32 tensor of times equals that of the float64 times."""
    t64 = torch.tensor([0.05, 0.3, 0.71], dtype=torch.float64)
    want = method.rb_score_weight(t64, (5, 10))
    assert torch.equal(method.rb_score_weight([0.05, 0.3, 0.71], (5, 10)), want)
    t32 = torch.tensor([0.05, 0.3, 0.71])
    assert torch.allclose(method.rb_score_weight(t32, [5, 10]), method.rb_score_weight(t32.double(), [5, 10]), rtol=1e-14, atol=0)
    assert float(want[1]) == pytest.approx(((1 - _ab(0.3) / _ab(0.1)) + (1 - _ab(0.3) / _ab(0.2))) / 2 / (1 - _ab(0.3)), rel=1e-12)


def test_clip_trunks_clips_each_trunk_on_its_own():
    """Each trunk's gradient is scaled to norm max_norm (default 1) separately, not jointly."""
    net = method.LMNet(seed=0)
    for scale_max, kw in ((1.0, {}), (0.25, dict(max_norm=0.25))):
        for i, p in enumerate(net.parameters()):
            p.grad = torch.full_like(p, 3.0 if i < len(list(net.trunk.parameters())) else 0.5)
        method.clip_trunks(net, **kw)
        for trunk in (net.trunk, net.cov_trunk):
            norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in trunk.parameters()))
            assert norm == pytest.approx(scale_max, rel=1e-4)
    small = method.LMNet(seed=0)
    for p in small.parameters():
        p.grad = torch.full_like(p, 1e-5)
    method.clip_trunks(small)
    assert all(torch.all(p.grad == 1e-5) for p in small.parameters())  # below the norm: untouched


def test_training_loss_identity_cov_weights_and_parts_by_hand():
    """identity_cov (C = I) is lm_mean for every objective; a given score weight replaces sigma^2 / (1 - ab);
    dsm is ||eps_theta - eps||^2 alone; the parts of lm (score = loss, covariance 0) and of lm_sg (score 0,
    covariance = lm's value)."""
    net = method.LMNet(seed=1)
    x0, t, s, eps = _lm_inputs(12, seed=3)
    w = torch.linspace(0.5, 2.0, 12, dtype=torch.float64)
    mean = method.training_loss(net, x0, t, s, eps, "lm_mean")
    for objective in ("lm", "lm_sg", "lm_diag"):
        assert method.training_loss(net, x0, t, s, eps, objective, identity_cov=True).item() == pytest.approx(mean.item(), rel=1e-6)
    ab = torch.tensor([_ab(v) for v in t.double().tolist()], dtype=torch.float64)
    xt = torch.sqrt(ab.float())[:, None] * x0 + torch.sqrt(1 - ab.float())[:, None] * eps
    with torch.no_grad():
        v = net(xt, t)["eps"].double() - eps.double()
    weighted = method.training_loss(net, x0, t, s, eps, "lm_mean", score_weight=w, parts=True)
    assert weighted["loss"].item() == pytest.approx(float((0.5 * w * (v * v).sum(-1)).mean()), rel=1e-5)
    assert weighted["covariance"].item() == 0.0 and weighted["score"].item() == weighted["loss"].item()
    dsm = method.training_loss(net, x0, t, s, eps, "dsm", parts=True)
    assert dsm["loss"].item() == pytest.approx(float((v * v).sum(-1).mean()), rel=1e-5)
    assert dsm["covariance"].item() == 0.0 and dsm["covariance"].dtype == torch.float32
    lm = method.training_loss(net, x0, t, s, eps, "lm", parts=True)
    assert lm["covariance"].item() == 0.0 and lm["score"].item() == lm["loss"].item()
    sg = method.training_loss(net, x0, t, s, eps, "lm_sg", parts=True)
    assert sg["score"].item() == 0.0 and sg["covariance"].item() == pytest.approx(lm["loss"].item(), rel=1e-6)
    assert torch.is_tensor(method.training_loss(net, x0, t, s, eps, "lm_sg"))
    # a weight given as a list of Python floats is read in double precision (0.71 is not a float32 number)
    w71 = torch.full((12,), 0.71, dtype=torch.float64)
    for objective in ("lm_mean", "lm_sg"):
        as_list = method.training_loss(net, x0, t, s, eps, objective, identity_cov=True, score_weight=[0.71] * 12)
        assert as_list.item() == method.training_loss(net, x0, t, s, eps, objective, identity_cov=True, score_weight=w71).item()
    with pytest.raises(ValueError, match="valid: dsm, lm, lm_diag, lm_mean, lm_sg, lm_diag_sg"):
        method.training_loss(net, x0, t, s, eps, "lm_full")


def test_isotropic_and_model_reverse_gaussians_by_hand():
    """Reverse Gaussians: mean (x + sigma^2 s_theta) / a for every method; g = sigma^2 (beta), beta-tilde (or
    sigma^2 in the NLL decoder where beta-tilde = 0), sigma^2 / a^2 (identity, LM, B4); LM's C = D + W W^T of
    the network's heads, B4's without W; isotropic D = 1, no W."""
    mean = torch.zeros(3, 2, dtype=torch.float64)
    a, sig2 = method.transition(0.5, 0.25)
    bt = sig2 * (1 - _ab(0.25)) / (1 - _ab(0.5))
    for variance, g in (("beta", sig2), ("beta_tilde", bt), ("identity", sig2 / a**2)):
        m, got, D, W = method.isotropic_reverse(mean, 0.5, 0.25, variance)
        assert got == pytest.approx(g, rel=1e-12) and m is mean
        assert torch.equal(D, torch.ones(3, 2, dtype=torch.float64)) and W.shape == (3, 2, 0)
        assert D.dtype == W.dtype == torch.float64
    _, sig2_0 = method.transition(0.1, 0.0)
    assert method.isotropic_reverse(mean, 0.1, 0.0, "beta_tilde")[1] == 0.0
    assert method.isotropic_reverse(mean, 0.1, 0.0, "beta_tilde", for_nll=True)[1] == pytest.approx(sig2_0)
    assert method.isotropic_reverse(mean, 0.5, 0.25, "beta_tilde", for_nll=True)[1] == pytest.approx(bt)
    with pytest.raises(ValueError, match="valid: beta, beta_tilde, identity"):
        method.isotropic_reverse(mean, 0.5, 0.25, "beta_hat")
    net = method.LMNet(seed=2)
    x = torch.tensor([[0.3, -0.7], [1.2, 0.4], [-0.5, -0.1]], dtype=torch.float64)
    with torch.no_grad():
        out = net(x.float(), 0.5)
    want_mean = (x + sig2 * out["score"]) / a
    tt = torch.full((3,), 0.5, dtype=torch.float64)
    D_lm, W_lm, _ = method.covariance_factors(out["lam"], out["L"], tt, torch.full((3,), 0.25, dtype=torch.float64))
    want_g = {"LM": sig2 / a**2, "LMjoint": sig2 / a**2, "B4": sig2 / a**2, "B1": sig2, "S1": sig2, "B2": bt, "S2": bt,
              "B3": sig2 / a**2}
    for m in method.METHODS:
        got_mean, g, D, W = method.model_reverse_fn(net, m)(x, 0.5, 0.25)
        assert torch.allclose(got_mean, want_mean, atol=1e-12) and g == pytest.approx(want_g[m], rel=1e-12), m
        if m in ("LM", "LMjoint"):
            assert torch.allclose(D, D_lm) and torch.allclose(W, W_lm) and W.shape == (3, 2, 1)
        elif m == "B4":
            assert torch.allclose(D, D_lm) and W.shape == (3, 2, 0)
        else:
            assert torch.equal(D, torch.ones(3, 2, dtype=torch.float64)) and W.shape == (3, 2, 0)
    assert method.model_reverse_fn(net, "B2")(x, 0.1, 0.0, True)[1] == pytest.approx(sig2_0)
    assert method.model_reverse_fn(net, "B2")(x, 0.1, 0.0)[1] == 0.0
    with pytest.raises(ValueError, match="unknown method"):
        method.model_reverse_fn(net, "B5")


def test_exact_reverse_fn_factorises_the_matched_covariance():
    """LM: g = sigma^2 / a^2, D = 0, W W^T = I + sigma^2 H (negative eigenvalues clamped to 0); the others are
    the isotropic variances with the same mean (x + sigma^2 s) / a."""
    H = np.array([[-1.0, 0.5], [0.5, 2.0]])
    x = np.array([[1.0, 2.0], [-1.0, 0.0]])
    fn = method.exact_reverse_fn(lambda x, t: -2.0 * np.asarray(x), lambda x, t: np.broadcast_to(H, (len(x), 2, 2)), "LM")
    a, sig2 = method.transition(0.6, 0.4)
    mean, g, D, W = fn(torch.tensor(x), 0.6, 0.4)
    assert np.allclose(mean.numpy(), (x - 2.0 * sig2 * x) / a) and g == pytest.approx(sig2 / a**2)
    assert torch.equal(D, torch.zeros(2, 2, dtype=torch.float64)) and D.dtype == W.dtype == torch.float64
    assert np.allclose((W @ W.transpose(-1, -2)).numpy(), np.eye(2) + sig2 * H)
    big = method.exact_reverse_fn(lambda x, t: np.zeros_like(x), lambda x, t: np.broadcast_to(np.diag([-9.0, 1.0]), (2, 2, 2)))
    _, _, _, W = big(torch.tensor(x), 0.6, 0.4)
    assert sig2 * 9 > 1 and np.allclose((W @ W.transpose(-1, -2)).numpy(), np.diag([0.0, 1 + sig2]))
    for variance in ("beta", "beta_tilde", "identity"):
        iso = method.exact_reverse_fn(lambda x, t: -2.0 * np.asarray(x), None, variance)(torch.tensor(x), 0.6, 0.4)
        want = method.isotropic_reverse(torch.tensor((x - 2.0 * sig2 * x) / a), 0.6, 0.4, variance)
        assert torch.allclose(iso[0], want[0]) and iso[1] == pytest.approx(want[1]) and iso[3].shape == (2, 2, 0)
    # the NLL decoder's flag reaches the isotropic variance: beta-tilde is 0 at s = 0, sigma^2 when decoding
    tilde = method.exact_reverse_fn(lambda x, t: np.zeros_like(x), None, "beta_tilde")
    assert tilde(torch.tensor(x), 0.1, 0.0)[1] == 0.0
    assert tilde(torch.tensor(x), 0.1, 0.0, True)[1] == pytest.approx(method.transition(0.1, 0.0)[1])


def test_sample_runs_the_grid_backwards_and_draws_from_the_reverse_gaussian():
    """x_N ~ N(0, I) from generator 20_000 + seed; steps (t_k, t_{k-1}) for k = N..1; x <- mean + sqrt(g)
    (sqrt(D) z_1 + W z_2), with g < 0 read as 0."""
    calls = []

    def record(x, t, s, for_nll=False):
        calls.append((float(t), float(s)))
        n, d = x.shape
        return 0.5 * x + 1.0, 4.0, torch.full((n, d), 0.25, dtype=torch.float64), torch.ones(n, d, 1, dtype=torch.float64)

    out = method.sample(record, 5, 3, d=2, seed=7)
    assert calls == [pytest.approx((1.0, 2 / 3)), pytest.approx((2 / 3, 1 / 3)), pytest.approx((1 / 3, 0.0))]
    gen = torch.Generator().manual_seed(20_007)
    x = torch.randn(5, 2, generator=gen, dtype=torch.float64)
    for _ in range(3):
        z1 = torch.randn(5, 2, generator=gen, dtype=torch.float64)
        z2 = torch.randn(5, 1, generator=gen, dtype=torch.float64)
        x = 0.5 * x + 1.0 + 2.0 * (0.5 * z1 + z2)
    assert isinstance(out, np.ndarray) and out.shape == (5, 2) and out.dtype == np.float64
    assert np.allclose(out, x.numpy(), rtol=1e-13, atol=1e-13)
    first = []
    method.sample(lambda x, t, s: first.append(x.clone()) or (x, 0.0, torch.ones_like(x), torch.zeros(len(x), 2, 0)), 5, 1, seed=7)
    assert first[0].dtype == torch.float64 and torch.equal(first[0], torch.randn(5, 2, generator=torch.Generator().manual_seed(20_007), dtype=torch.float64))
    flat = method.sample(lambda x, t, s: (x * 0 + 3.0, -1.0, torch.ones_like(x), torch.zeros(len(x), 2, 0)), 4, 2, seed=1)
    assert flat.shape == (4, 2) and np.all(flat == 3.0)  # a negative g adds no noise; d = 2 by default
    assert np.array_equal(method.sample(record, 5, 3, seed=0), method.sample(record, 5, 3))
