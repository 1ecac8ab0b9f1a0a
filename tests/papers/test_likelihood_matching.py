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
    # c1: LM, B1, B2 at N = 10; c2: LM, B1, B3 at N = 20; c3: LM, B2 at N = 200; c4: LM at t = 0.3
    smoke = experiment.EXPERIMENT_PROFILES["smoke"]
    assert {"LM", "B1", "B2", "B3"} <= set(smoke["methods"])
    assert {10, 20, 200} <= set(smoke["n_steps_grid"])
    assert 0.3 in smoke["hess_ts"]


def test_run_experiment_smoke_and_determinism():
    # the smoke profile, cut down: a short grid without the claims' N = 20 and 200 (c2, c3 NaN)
    cfg = SimpleNamespace(**{**experiment.EXPERIMENT_PROFILES["smoke"], "train_steps": 20, "n_samples": 100,
                             "n_nll": 50, "n_hess": 50, "n_steps_grid": [5, 10],
                             "methods": ["LM", "B1", "B2", "B3", "B4"]})
    rows, ex = experiment.run_experiment(cfg)
    rows2, _ = experiment.run_experiment(cfg)
    samp = [r for r in rows if r["kind"] == "sampling"]
    assert len(samp) == 5 * 2
    assert all(np.isfinite(r["sw2"]) and np.isfinite(r["nll"]) for r in samp)
    key = lambda rs: np.array([[r.get(k, -1.0) for k in ("sw2", "nll", "rel_error", "score_mse")] for r in rs])  # noqa: E731
    assert np.array_equal(key(rows), key(rows2), equal_nan=True)
    assert ex["samples"][("LM", 5)].shape == (100, 2) and ex["target"].shape == (100, 2)
    assert len(ex["ellipses"]) == 6 and ex["ellipses"][0]["cov_true"].shape == (2, 2)
    cv = experiment.claim_values(rows)
    assert set(cv[0]) == {"c1_few_steps_sw2", "c2_nll_bound", "c3_convergence", "c4_hessian_learned"}
    assert math.isnan(cv[0]["c2_nll_bound"]) and math.isnan(cv[0]["c3_convergence"])
    assert np.isfinite(cv[0]["c1_few_steps_sw2"]) and np.isfinite(cv[0]["c4_hessian_learned"])


def _claim_rows():
    """Hand-made rows of :func:`experiment.run_experiment`, two seeds with different numbers. Every
    method has its own value at every N, so a wrong method or a wrong N changes a claim's value: at
    N = 10 B3 is the best baseline (c1 must ignore it), at N = 20 B2 has the lowest NLL bound (c2 must
    ignore it), at N = 200 B1 differs from B2 (c3's baseline); c2 is positive on seed 0 and negative
    on seed 1, and LM is above B2 at N = 200 on seed 0 and below it on seed 1 (the absolute value)."""
    # (seed, method): {N: (sw2, nll)}
    table = {
        (0, "LM"): {5: (0.50, 3.0), 10: (0.12, 1.9), 20: (0.30, 1.00), 200: (0.11, 0.50)},
        (0, "B1"): {5: (0.60, 3.1), 10: (0.20, 2.0), 20: (0.25, 1.20), 200: (0.13, 0.55)},
        (0, "B2"): {5: (0.70, 3.2), 10: (0.24, 2.1), 20: (0.22, 0.80), 200: (0.10, 0.52)},
        (0, "B3"): {5: (0.40, 3.3), 10: (0.06, 2.2), 20: (0.35, 1.15), 200: (0.20, 0.60)},
        (0, "LMsg"): {5: (0.45, 2.9), 10: (0.09, 1.8), 20: (0.28, 1.05), 200: (0.12, 0.48)},
        (1, "LM"): {5: (0.55, 3.5), 10: (0.30, 2.5), 20: (0.40, 1.60), 200: (0.16, 0.70)},
        (1, "B1"): {5: (0.65, 3.6), 10: (0.40, 2.6), 20: (0.45, 1.50), 200: (0.18, 0.75)},
        (1, "B2"): {5: (0.75, 3.7), 10: (0.25, 2.7), 20: (0.50, 1.20), 200: (0.20, 0.72)},
        (1, "B3"): {5: (0.35, 3.8), 10: (0.10, 2.8), 20: (0.60, 1.45), 200: (0.30, 0.80)},
        (1, "LMsg"): {5: (0.50, 3.4), 10: (0.20, 2.4), 20: (0.42, 1.30), 200: (0.26, 0.69)},
    }
    rows = [dict(kind="sampling", seed=seed, method=m, n_steps=n, sw2=sw2, nll=nll, sample_seconds=0.01)
            for (seed, m), by_n in table.items() for n, (sw2, nll) in by_n.items()]
    # (seed, method): {t: rel_error}; NaN for the methods whose covariance heads are untrained
    hess = {
        (0, "LM"): {0.1: 0.90, 0.3: 0.20, 0.6: 0.15},
        (0, "B1"): {0.1: math.nan, 0.3: math.nan, 0.6: math.nan},
        (0, "B4"): {0.1: 0.95, 0.3: 0.50, 0.6: 0.40},
        (0, "LMsg"): {0.1: 0.80, 0.3: 0.25, 0.6: 0.12},
        (1, "LM"): {0.1: 0.70, 0.3: 0.40, 0.6: 0.30},
        (1, "B1"): {0.1: math.nan, 0.3: math.nan, 0.6: math.nan},
        (1, "B4"): {0.1: 0.85, 0.3: 0.60, 0.6: 0.45},
        (1, "LMsg"): {0.1: 0.75, 0.3: 0.33, 0.6: 0.20},
    }
    rows += [dict(kind="hessian", seed=seed, method=m, t=t, rel_error=e, score_mse=0.1)
             for (seed, m), by_t in hess.items() for t, e in by_t.items()]
    return rows


def test_claim_values_hand_computed():
    from pathlib import Path

    import pandas as pd
    import yaml

    rows = _claim_rows()
    want = {
        "LM": {
            0: {"c1_few_steps_sw2": 0.12 / 0.20,  # min(B1, B2) at N = 10 is B1
                "c2_nll_bound": 1.15 - 1.00,  # min(B1, B3) at N = 20 is B3
                "c3_convergence": (0.11 - 0.10) / 0.10,
                "c4_hessian_learned": 0.20},
            1: {"c1_few_steps_sw2": 0.30 / 0.25,  # here B2
                "c2_nll_bound": 1.45 - 1.60,  # B3 again; LM worse: negative
                "c3_convergence": (0.20 - 0.16) / 0.20,  # LM below B2
                "c4_hessian_learned": 0.40},
        },
        "LMsg": {  # method= replaces LM in every formula, the baselines stay
            0: {"c1_few_steps_sw2": 0.09 / 0.20, "c2_nll_bound": 1.15 - 1.05,
                "c3_convergence": (0.12 - 0.10) / 0.10, "c4_hessian_learned": 0.25},
            1: {"c1_few_steps_sw2": 0.20 / 0.25, "c2_nll_bound": 1.45 - 1.30,
                "c3_convergence": (0.26 - 0.20) / 0.20, "c4_hessian_learned": 0.33},
        },
    }
    path = Path(__file__).resolve().parents[2] / "notebooks" / "likelihood_matching" / "chapter.yml"
    ids = {c["id"] for c in yaml.safe_load(path.read_text())["claims"]}
    for m, by_seed in want.items():
        for got in (experiment.claim_values(rows, method=m), experiment.claim_values(pd.DataFrame(rows), method=m)):
            assert list(got) == [0, 1]
            for seed, values in by_seed.items():
                assert set(got[seed]) == ids
                for claim, value in values.items():
                    assert got[seed][claim] == pytest.approx(value, rel=1e-12), (m, seed, claim)


def test_claim_values_nan_where_a_method_or_grid_point_is_missing():
    rows = _claim_rows()
    cv = experiment.claim_values([r for r in rows if r["method"] != "B2"])[0]
    assert math.isnan(cv["c1_few_steps_sw2"]) and math.isnan(cv["c3_convergence"])
    assert cv["c2_nll_bound"] == pytest.approx(1.15 - 1.00)
    cv = experiment.claim_values([r for r in rows if r.get("n_steps") not in (20, 200)])[0]
    assert math.isnan(cv["c2_nll_bound"]) and math.isnan(cv["c3_convergence"])
    assert cv["c1_few_steps_sw2"] == pytest.approx(0.6) and cv["c4_hessian_learned"] == pytest.approx(0.2)


def test_claims_in_chapter_yml_are_computed():
    from pathlib import Path

    import yaml

    path = Path(__file__).resolve().parents[2] / "notebooks" / "likelihood_matching" / "chapter.yml"
    ids = {c["id"] for c in yaml.safe_load(path.read_text())["claims"]}
    rows = [dict(kind="hessian", seed=0, method="LM", t=0.3, rel_error=0.2, score_mse=0.1)]
    assert set(experiment.claim_values(rows)[0]) == ids


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
