"""Unit tests of the replib.papers.foam package (FOAM: adaptive damping for stale Shampoo) and the
MLP options it uses (tanh, linear bottleneck)."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.linalg
import torch

from replib.core.paths import load_chapter
from replib.core.runtime import compute_threads
from replib.models.mlp import MLP
from replib.papers.foam import exercises, experiment, method, task, theory

X_SMALL = task.load_digits_train()[:64]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices: one torch and BLAS thread is fastest (and what run_experiment uses)."""
    with compute_threads(1):
        yield


def psd(seed, m=6, rank=None):
    return task.random_psd(np.random.default_rng(seed), m, rank)


def small_run(config, seed=0, steps=25, **kw):
    return experiment.train_autoencoder(config, seed=seed, steps=steps, X=X_SMALL, eval_every=5, **kw)


# ---- data and model --------------------------------------------------------------------------


def test_data_and_autoencoder_shapes():
    X = task.load_digits_train()
    assert X.shape == (1400, 64) and X.dtype == np.float32
    assert X.min() >= 0.0 and X.max() <= 1.0
    model = task.autoencoder(0)
    assert [lay.weight.shape[1] for lay in model.layers] + [64] == list(task.AE_SIZES)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(35_000, rel=0.05)
    # tanh everywhere except the linear 16-d bottleneck (hidden layer 2), linear output
    x = torch.from_numpy(X[:5])
    h = x
    for i, lay in enumerate(model.layers[:-1]):
        h = lay(h) if i == task.BOTTLENECK else torch.tanh(lay(h))
    assert torch.allclose(model(x), model.layers[-1](h))
    assert torch.allclose(model.hidden(x), h)


def test_mlp_options_validate_and_default_to_relu():
    a, b = MLP([5, 7, 3], seed=1), MLP([5, 7, 3], seed=1, activation="relu", linear_hidden=())
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a(x), b(x))
    assert torch.equal(a(x), a.layers[1](torch.relu(a.layers[0](x))))
    with pytest.raises(ValueError):
        MLP([5, 7, 3], activation="gelu")
    with pytest.raises(ValueError):
        MLP([5, 7, 3], linear_hidden=[1])  # only hidden layer 0 exists


# ---- Shampoo building blocks ----------------------------------------------------------------


def test_kronecker_identities():
    err = theory.kronecker_identity_check(np.random.default_rng(0), m=4, n=3, p=2)
    assert err["kron_root"] < 1e-10 and err["vec"] < 1e-10
    err = theory.kronecker_identity_check(np.random.default_rng(1), m=3, n=5, p=4)
    assert err["kron_root"] < 1e-10 and err["vec"] < 1e-10


@pytest.mark.parametrize("p", [2, 4])
def test_damped_inverse_root_matches_fractional_power(p):
    A = psd(3, m=7, rank=3)  # rank-deficient PSD
    eps = 1e-3
    want = np.real(scipy.linalg.fractional_matrix_power(A + eps * np.eye(7), -1.0 / p))
    got = method.damped_inverse_root(A, eps, p)
    assert np.allclose(got, want, rtol=1e-8, atol=1e-8)
    assert np.allclose(np.linalg.matrix_power(got, p) @ (A + eps * np.eye(7)), np.eye(7), atol=1e-8)
    # raw eigenvalues: d excludes eps and is non-negative; the root adds eps exactly once
    Q, d = method.eigendecompose(A)
    assert np.all(d >= 0) and np.sum(d < 1e-12) == 4
    assert np.allclose(method.inverse_root_from_eig(Q, d, eps, p), want, atol=1e-8)
    assert np.allclose(Q @ np.diag(d) @ Q.T, A, atol=1e-12)


def test_ema_and_bias_correction():
    rng = np.random.default_rng(2)
    G = rng.normal(size=(5, 3))
    S_L, S_R = G @ G.T, G.T @ G
    L = R = None
    L, R = np.zeros((5, 5)), np.zeros((3, 3))
    for t in range(1, 8):
        L, R = method.ema_factor(L, G, 0.9, "L"), method.ema_factor(R, G, 0.9, "R")
        # constant G G^T: the bias-corrected factor is exactly that matrix at every t
        assert np.allclose(method.bias_corrected(L, 0.9, t), S_L)
        assert np.allclose(method.bias_corrected(R, 0.9, t), S_R)
    assert np.allclose(L, (1 - 0.9**7) * S_L)
    G2 = rng.normal(size=(5, 3))
    assert np.allclose(method.ema_factor(L, G2, 0.9, "L"), 0.9 * L + 0.1 * G2 @ G2.T)


def test_grafting_has_the_adam_norm_and_the_shampoo_direction():
    rng = np.random.default_rng(4)
    P, A = rng.normal(size=(6, 4)), 3.0 * rng.normal(size=(6, 4))
    g = method.graft(P, A)
    assert np.linalg.norm(g) == pytest.approx(np.linalg.norm(A))
    assert np.allclose(g / np.linalg.norm(g), P / np.linalg.norm(P))
    assert np.array_equal(method.graft(np.zeros((2, 2)), A[:2, :2]), np.zeros((2, 2)))


def test_shampoo_weight_step_has_the_adam_step_norm():
    model = task.autoencoder(0)
    opt = method.ShampooOptimizer(model, method.policy("stale_f10"), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.from_numpy(X_SMALL[:4])
    torch.nn.functional.mse_loss(model(x), x).backward()
    grads = [p.grad.double().numpy().copy() for p in model.parameters()]
    opt.step()
    k = 0
    for p, p0, g in zip(model.parameters(), before, grads):
        step = (p0 - p.detach()).double().numpy()
        adam = method.adam_direction(g, g * g)  # t = 1: m_hat = g, v_hat = g^2
        assert np.linalg.norm(step) == pytest.approx(1e-2 * np.linalg.norm(adam), rel=1e-4)
        if p.ndim == 2:  # the direction is Shampoo's, not Adam's
            blk = opt.blocks[k]
            P = blk.L.root @ g @ blk.R.root
            assert np.allclose(step / np.linalg.norm(step), P / np.linalg.norm(P), atol=1e-4)
            k += 1


# ---- FOAM: proxy, controller, refresh policies ------------------------------------------------


def test_proxy_matches_its_matrix_form_and_bounds_the_error_to_first_order():
    A = psd(5, m=8, rank=5)
    B = A + 1e-6 * psd(6, m=8, rank=2)
    Q, d = method.eigendecompose(A)
    eps, p = 1e-3, 2
    h, rc, alpha = method.foam_proxy(Q, d, B, eps, p)
    W = method.damped_inverse_root(A, eps, 2)  # L_hat^{-1/2}
    assert rc == pytest.approx(np.linalg.norm(W @ (B - A) @ W), rel=1e-8)
    root = method.damped_inverse_root(A, eps, p)
    assert alpha == pytest.approx(np.linalg.norm(root, 2) / np.linalg.norm(root), rel=1e-8)
    assert h == pytest.approx(alpha * rc / p)
    true = theory.true_root_error(B, Q, d, eps, p)
    assert 0.3 * h < true <= 1.01 * h
    # no drift: no error
    assert method.foam_proxy(Q, d, A, eps, p)[0] == pytest.approx(0.0, abs=1e-9)


def test_sensitivity_bound_holds_and_is_tight_on_a_shared_null_direction():
    rng = np.random.default_rng(7)
    for eps in (1e-1, 1e-2, 1e-3):
        bound = theory.root_sensitivity_bound(eps, 2)
        assert bound == pytest.approx(0.5 * eps**-1.5)
        A, B = theory.sensitivity_pair(rng, 6, 1e-9, shared_null=True)
        assert theory.root_sensitivity(A, B, eps, 2) == pytest.approx(bound, rel=1e-3)
        A, B = theory.sensitivity_pair(rng, 6, 1e-4, shared_null=False)
        assert theory.root_sensitivity(A, B, eps, 2) <= bound
    assert np.allclose(theory.root_sensitivity_bound(np.array([1.0, 0.01]), 4), [0.25, 0.25 * 0.01**-1.25])


def test_controller_floor_cap_and_refresh_rule():
    rng = np.random.default_rng(8)
    eps0, eps_max, tau = 1e-12, 3e-10, 0.75
    eps = eps0
    for h in np.exp(rng.normal(0.0, 1.5, size=500)):
        want = eps * h / tau
        new, refresh = method.controller_step(eps, h, eps0, eps_max, tau)
        assert refresh == (max(eps0, want) > eps_max)
        assert new == (eps0 if refresh else max(eps0, want))
        assert eps0 <= new <= eps_max
        eps = new
    # constant h > tau: a refresh every refresh_interval checks, the saw-tooth
    h = 2.0
    k = theory.refresh_interval(h, tau, eps0, eps_max)
    assert k == math.floor(math.log(300) / math.log(h / tau)) + 1 == 6
    tr = theory.controller_trace(np.full(30, h), eps0, eps_max, tau)
    assert np.array_equal(np.flatnonzero(tr["refresh"]) + 1, np.arange(k, 31, k))
    assert tr["eps"].min() >= eps0 and tr["eps"].max() <= eps_max
    assert theory.refresh_interval(0.5, tau) == math.inf
    assert theory.controller_trace(np.full(10, 0.5))["refreshes"] == 0


def test_policy_names():
    assert method.policy("stale_f30") == method.Policy("stale", f=30)
    assert method.policy("foam") == method.Policy("foam", f=10, tau=0.75, eps0=1e-12, eps_max=3e-10, p=2)
    assert method.policy("foam_f20").f == 20
    assert method.config_label("foam_no_refresh") == "FOAM w/o refresh"
    assert method.policy("foam_no_adaptive_eps_tau4") == method.Policy("foam_no_adaptive_eps", tau=4.0)
    assert method.policy("foam_no_adaptive_eps_tau2.5").tau == 2.5
    assert method.config_label("foam_no_adaptive_eps") == "FOAM w/o adaptive eps"
    assert method.config_label("foam_no_adaptive_eps_tau4") == "FOAM w/o adaptive eps, tau=4"
    with pytest.raises(ValueError):
        method.policy("soap")
    # settings override the defaults; freeze applies to the no-refresh ablation only
    assert method.policy("foam", start=20, eps_max=1e-9) == method.Policy("foam", start=20, eps_max=1e-9)
    assert method.policy("foam_no_refresh", freeze=200).freeze == 200
    assert method.policy("stale_f10", start=20, freeze=200) == method.Policy("stale", f=10, start=20)
    with pytest.raises(ValueError):
        method.policy("foam", start=0)


@pytest.mark.parametrize("f", [1, 3, 10])
def test_stale_evd_count_and_no_proxy(monkeypatch, f):
    def boom(*a, **k):
        raise AssertionError("the stale baseline must not compute the proxy")

    monkeypatch.setattr(method, "foam_proxy", boom)
    res = small_run(f"stale_f{f}", steps=25)
    per_factor = 25 if f == 1 else 1 + 25 // f  # step 1 and every t % f == 0
    assert method.stale_evd_count(25, f) == per_factor
    assert set(res.evds_by_factor.values()) == {per_factor}
    assert res.evds == 12 * per_factor and res.checks == 0
    assert method.stale_evd_count(1000, 10) * 12 == 1212
    # preconditioning from step 20: the first EVD at 20, then t = 30, 40, ..., 1000
    assert method.stale_evd_count(1000, 10, start=20) == 99 and method.stale_evd_count(10, 10, start=20) == 0
    assert method.stale_evd_count(25, 1, start=20) == 6


def test_preconditioning_starts_at_the_start_step():
    """Before ``start`` the weights take the Adam step (no EVD, the factors still accumulate); at
    ``start`` every factor gets its first EVD; stale refreshes follow at t % f == 0, t > start."""
    ref = experiment.train_autoencoder("adam", seed=1, steps=4, X=X_SMALL, eval_every=1)
    orig = experiment.policy
    try:
        experiment.policy = lambda name, **_: orig(name, start=5)
        pre = experiment.train_autoencoder("stale_f10", seed=1, steps=4, X=X_SMALL, eval_every=1)
        run = experiment.train_autoencoder("stale_f10", seed=1, steps=25, X=X_SMALL, eval_every=1)
    finally:
        experiment.policy = orig
    assert pre.evds == 0 and np.array_equal(pre.curve["loss"], ref.curve["loss"])
    assert run.curve["evds"][4] == 0 and run.curve["evds"][5] == 12
    assert run.evds == 12 * method.stale_evd_count(25, 10, start=5) == 12 * 3  # steps 5, 10, 20


def test_foam_reuse_branch_changes_only_eps_and_cap_triggers_refresh():
    opt = method.ShampooOptimizer(task.autoencoder(0), method.policy("foam"), lr=1e-3)
    fac = opt.blocks[2].L  # 16 x 16
    def c2(t):  # the bias correction 1 - beta2^t that _maintain divides by
        return 1 - 0.99**t

    S = psd(9, m=16, rank=10)
    fac.stat = S * c2(1)
    opt._maintain(fac, 1)  # no basis yet: first EVD
    assert fac.evds == 1 and fac.eps == 1e-12 and opt.checks == 0
    Q, d = fac.Q, fac.d
    Q0, d0 = Q.copy(), d.copy()
    fac.rebuild(1e-3)  # pretend the damping had grown (a loose cap for this test)
    opt.policy = method.Policy("foam", eps0=1e-12, eps_max=1.0)
    F_bar = S + 1e-4 * psd(10, m=16, rank=2)
    fac.stat = F_bar * c2(10)
    h = method.foam_proxy(Q, d, F_bar, 1e-3, 2)[0]
    opt._maintain(fac, 10)  # a check in the reuse branch
    assert fac.evds == 1 and opt.checks == 1
    assert fac.Q is Q and fac.d is d and np.array_equal(Q, Q0) and np.array_equal(d, d0)
    assert fac.eps == pytest.approx(max(1e-12, 1e-3 * h / 0.75))
    assert np.allclose(fac.root, method.inverse_root_from_eig(Q0, d0, fac.eps, 2))
    # large drift: the next eps would exceed the cap -> fresh EVD and eps0
    F_bar = S + 10.0 * psd(11, m=16, rank=3)
    fac.stat = F_bar * c2(20)
    h = method.foam_proxy(fac.Q, fac.d, F_bar, fac.eps, 2)[0]
    assert fac.eps * h / 0.75 > 1.0
    opt._maintain(fac, 20)
    assert fac.evds == 2 and fac.eps == 1e-12
    assert np.allclose(fac.Q @ np.diag(fac.d) @ fac.Q.T, F_bar, atol=1e-10)


def test_ablations_follow_their_rules():
    res = small_run("foam_no_refresh", steps=40, log_controller=True)
    assert res.evds == 12  # only the first EVD of each factor
    log = res.controller
    assert len(log) == 12 * 4 and not any(e["refreshed"] for e in log)
    assert all(1e-12 <= e["eps"] <= 3e-10 for e in log)
    res = small_run("foam_no_adaptive_eps", steps=40, log_controller=True)
    assert all(e["eps"] == 1e-12 for e in res.controller)
    assert all(e["refreshed"] == (e["h"] > 0.75) for e in res.controller)
    assert res.evds == 12 + sum(e["refreshed"] for e in res.controller)
    matched = small_run("foam_no_adaptive_eps_tau4", steps=40, log_controller=True)
    assert all(e["eps"] == 1e-12 for e in matched.controller)
    assert all(e["refreshed"] == (e["h"] > 4.0) for e in matched.controller)
    assert any(e["h"] > 4.0 for e in matched.controller) and any(0.75 < e["h"] <= 4.0 for e in matched.controller)
    assert matched.evds < res.evds  # a higher threshold refreshes less
    res = small_run("foam", steps=40, log_controller=True)
    for e in res.controller:
        nxt = e["eps_prev"] * e["h"] / 0.75
        assert e["refreshed"] == (max(1e-12, nxt) > 3e-10)
    assert res.evds == 12 + sum(e["refreshed"] for e in res.controller)
    # the EVD operation rate per side: check refreshes / checks, from the same log
    for side in ("L", "R"):
        mine = [e for e in res.controller if e["factor"].endswith("." + side)]
        assert len(mine) == 6 * 4
        assert res.evd_rate(side) == pytest.approx(sum(e["refreshed"] for e in mine) / len(mine))
        assert res.row()[f"evd_rate_{side}"] == res.evd_rate(side)
    assert math.isnan(small_run("stale_f10", steps=20).evd_rate("L"))  # no checks


def test_training_is_deterministic_and_learns():
    a, b = small_run("foam", seed=3), small_run("foam", seed=3)
    assert np.array_equal(a.curve["loss"], b.curve["loss"]) and a.evds == b.evds
    assert a.evds_by_factor == b.evds_by_factor
    c = small_run("foam", seed=4)
    assert not np.array_equal(a.curve["loss"], c.curve["loss"])
    for config in ("stale_f10", "adam"):
        r = small_run(config, steps=60)
        assert r.final_loss < 0.5 * r.curve["loss"][0]
        assert r.curve["step"][-1] == 60 and r.curve["optimizer_seconds"][-1] == r.optimizer_seconds
    assert small_run("adam").evds == 0


# ---- theory helpers ---------------------------------------------------------------------------


def test_proxy_vs_true_error_simulation():
    r = theory.proxy_vs_true_error(np.random.default_rng(0), m=12, warmup=100, horizon=20)
    assert r["k"].shape == r["true"].shape == r["h"].shape == (20,)
    assert np.all(r["true"] > 0) and np.all(r["h"] > 0)
    assert r["h"][-5:].mean() > r["h"][:3].mean()  # drift grows with k
    assert np.allclose(r["drift"], 1 - 0.99 ** np.arange(1, 21))


# ---- chapter helpers -------------------------------------------------------------------------


def synthetic_rows_traces():
    """Hand-made run results in run_experiment's shape: rows (seed, config, final_loss, initial_loss,
    evds; FOAM's also evd_rate_L, evd_rate_R) and traces["curves"] (seed, config, step, loss, flops,
    evds), two seeds with different numbers."""
    abl = experiment.MATCHED_ABLATION
    spec = {  # seed: {config: (final loss, evds, total flops)}
        0: {"stale_f10": (0.010, 1212, 2.0), "stale_f50": (0.012, 252, 1.5), "foam": (0.009, 200, 1.6),
            "foam_no_refresh": (0.020, 12, 1.4), abl: (0.010, 210, 1.7), "adam": (0.030, 0, 0.5)},
        1: {"stale_f10": (0.020, 1010, 4.0), "stale_f50": (0.030, 210, 3.0), "foam": (0.021, 101, 2.5),
            "foam_no_refresh": (0.063, 10, 2.0), abl: (0.020, 90, 2.4), "adam": (0.050, 0, 1.0)},
    }
    rates = {0: (0.1, 0.05), 1: (0.08, 0.04)}  # FOAM's EVD rates per check, L and R
    initial = {0: 0.2, 1: 0.25}
    rows = [dict(seed=seed, config=c, final_loss=loss, evds=evds, initial_loss=initial[seed])
            for seed, by_config in spec.items() for c, (loss, evds, _) in by_config.items()]
    for r in rows:
        if r["config"] == "foam":
            r["evd_rate_L"], r["evd_rate_R"] = rates[r["seed"]]
    curves = []
    for seed, by_config in spec.items():
        for c, (loss, evds, flops) in by_config.items():
            # loss 10x, 2x, 1x the final one at steps 0, 50, 100; flops 0, half, all
            for step, mult, frac in ((0, 10.0, 0.0), (50, 2.0, 0.5), (100, 1.0, 1.0)):
                curves.append(dict(seed=seed, config=c, step=step, loss=loss * mult, flops=flops * frac,
                                   evds=0))
    # seed 0, common target 1.07 x 0.010 = 0.0107: stale f=10 first reaches it at step 80 (1.8
    # flops, not its total 2.0), FOAM at step 60 (0.9; listed out of step order on purpose). Seed 1,
    # target 0.0214: FOAM (final 0.021, above stale's 0.020) first reaches it at its last step (2.5),
    # stale f=10 at its last (4.0)
    curves.insert(0, dict(seed=0, config="foam", step=60, loss=0.0095, flops=0.9, evds=0))
    curves.append(dict(seed=0, config="stale_f10", step=80, loss=0.0105, flops=1.8, evds=0))
    return rows, {"curves": curves}


def test_claim_values_on_a_synthetic_case():
    rows, traces = synthetic_rows_traces()
    v = experiment.claim_values(rows, traces)
    chapter = load_chapter("foam")
    assert set(v) == {0, 1}
    for seed in (0, 1):
        assert set(v[seed]) == {c["id"] for c in chapter["claims"]}
    c1a = next(c for c in chapter["claims"] if c["id"] == "c1a_foam_vs_f10_loss")
    assert experiment.C1A_TOLERANCE == c1a["threshold"]  # c5's target uses c1a's tolerance
    want = {
        0: {
            "p1_every_arm_learns": 0.15,  # Adam's 0.030 / 0.2, the worst arm
            "p2_staleness_hurts": 1.2,  # 0.012 / 0.010
            "p3_matched_evds": 1.05,  # 210 / 200
            "c1a_foam_vs_f10_loss": 0.9,  # 0.009 / 0.010
            "c1b_evds_90pct_fewer": 0.16502,  # 200 / 1212
            "c5_flops_to_common_target": 0.5,  # 0.9 (step 60) / 1.8 (step 80)
            "c2_adaptive_vs_f50": 0.75,  # 0.009 / 0.012
            "c3_refresh_needed": 2.22222,  # 0.020 / 0.009
            "c6_damping_at_matched_evds": 0.9,  # 0.009 / 0.010
            "m1_evd_rate_L": 0.1,
            "m2_evd_rate_R": 0.05,
            "m3_steps_to_common_target": 0.75,  # step 60 / step 80
        },
        1: {
            "p1_every_arm_learns": 0.252,  # FOAM w/o refresh's 0.063 / 0.25
            "p2_staleness_hurts": 1.5,  # 0.030 / 0.020
            "p3_matched_evds": 0.891089,  # 90 / 101
            "c1a_foam_vs_f10_loss": 1.05,  # 0.021 / 0.020
            "c1b_evds_90pct_fewer": 0.1,  # 101 / 1010
            "c5_flops_to_common_target": 0.625,  # 2.5 / 4.0, both at step 100
            "c2_adaptive_vs_f50": 0.7,  # 0.021 / 0.030
            "c3_refresh_needed": 3.0,  # 0.063 / 0.021
            "c6_damping_at_matched_evds": 1.05,  # 0.021 / 0.020
            "m1_evd_rate_L": 0.08,
            "m2_evd_rate_R": 0.04,
            "m3_steps_to_common_target": 1.0,
        },
    }
    for seed, claims in want.items():
        for cid, value in claims.items():
            assert v[seed][cid] == pytest.approx(value, rel=1e-4), (seed, cid)
    flops = experiment.times_to_common_target(rows, traces)
    assert flops[0] == pytest.approx({"target": 0.0107, "stale_f10": 1.8, "foam": 0.9})
    steps = experiment.times_to_common_target(rows, traces, key="step")
    assert steps[0] == pytest.approx({"target": 0.0107, "stale_f10": 80, "foam": 60})
    assert steps[1] == pytest.approx({"target": 0.0214, "stale_f10": 100, "foam": 100})
    # a FOAM that never comes within 7% of stale f=10's final loss: c5 is inf
    worse = [dict(r, loss=r["loss"] * 1.2) if r["config"] == "foam" else r for r in traces["curves"]]
    assert experiment.claim_values(rows, {"curves": worse})[1]["c5_flops_to_common_target"] == math.inf
    # a DataFrame works too and gives the same values; a missing configuration gives NaN
    import pandas as pd

    assert experiment.claim_values(pd.DataFrame(rows), {"curves": pd.DataFrame(traces["curves"])}) == v
    v2 = experiment.claim_values(pd.DataFrame([r for r in rows if r["config"] not in ("stale_f50", "stale_f10")]),
                                 {"curves": pd.DataFrame(traces["curves"])})
    assert math.isnan(v2[0]["c2_adaptive_vs_f50"]) and math.isnan(v2[1]["c5_flops_to_common_target"])
    assert math.isnan(v2[0]["p1_every_arm_learns"])
    assert v2[0]["c6_damping_at_matched_evds"] == pytest.approx(0.9)


def test_profiles_and_a_tiny_experiment():
    chapter = load_chapter("foam")
    for name, prof in experiment.EXPERIMENT_PROFILES.items():
        for c in prof["configs"]:
            method.policy(c)
        assert set(experiment.CLAIM_CONFIGS) <= set(prof["configs"])  # every judged claim gets a value
        assert prof["start"] == 20 and prof["batch_size"] == experiment.BATCH_SIZE
        assert prof["eps_ratio"] == experiment.EPS_RATIO and prof["freeze"] == experiment.FREEZE
        if name != "smoke":
            assert prof["steps"] == 1000
            assert prof["tune_seed"] not in prof["seeds"]
    assert experiment.EXPERIMENT_PROFILES["book"]["seeds"] == chapter["confirmatory_seeds"]
    grid = chapter["tuning"]["grid"]  # the pilot's choices come from the declared grid
    assert experiment.BATCH_SIZE in grid["batch_size"] and experiment.EPS_RATIO in grid["eps_max_over_eps0"]
    assert experiment.MATCHED_TAU in grid["matched_ablation_tau"]
    assert experiment.EXPERIMENT_PROFILES["book"]["lr_grid"] == grid["lr"]
    cfg = SimpleNamespace(seeds=[0, 1], steps=20, batch_size=4, lr_grid=[1e-3, 1e-2], tune_steps=10,
                          tune_seed=100, eval_every=5, configs=["stale_f10", "foam", "adam"],
                          eps_ratio=300, start=3, freeze=0)
    torch.set_num_threads(2)
    rows, traces = experiment.run_experiment(cfg)
    assert torch.get_num_threads() == 2  # restored on exit
    assert [(r["seed"], r["config"]) for r in rows] == [(s, c) for s in (0, 1) for c in cfg.configs]
    assert set(traces["lr"]) == {"stale_f10", "foam", "adam"}
    assert len(traces["tuning"]) == 6
    for c in cfg.configs:
        best = min((r for r in traces["tuning"] if r["config"] == c), key=lambda r: r["final_loss"])
        assert traces["lr"][c] == best["lr"]
    assert {e["config"] for e in traces["controller"]} == {"foam"}
    assert rows[0]["evds"] == 12 * method.stale_evd_count(20, 10, start=3)
    foam_curve = [r for r in traces["curves"] if r["seed"] == 0 and r["config"] == "foam"]
    assert [r["step"] for r in foam_curve] == [0, 5, 10, 15, 20]
    v = experiment.claim_values(rows, traces)
    assert set(v) == {0, 1} and v[0]["c1b_evds_90pct_fewer"] <= 1.0
    # two worker processes give the same rows and curves (the seed halves are fixed)
    cfg2 = SimpleNamespace(**dict(vars(cfg), workers=2, seeds=[0, 1, 2]))
    cfg1 = SimpleNamespace(**dict(vars(cfg), workers=1, seeds=[0, 1, 2]))
    (r2, t2), (r1, t1) = experiment.run_experiment(cfg2), experiment.run_experiment(cfg1)
    keys = ("seed", "config", "final_loss", "evds", "flops", "lr")
    assert [[r[k] for k in keys] for r in r2] == [[r[k] for k in keys] for r in r1]
    assert [c["loss"] for c in t2["curves"]] == [c["loss"] for c in t1["curves"]]


# ---- the batched trainer: the reference's arithmetic, K members at once ------------------------


@pytest.mark.parametrize("config, settings", [
    ("stale_f10", dict(start=5)),
    ("foam", dict(start=5, eps_max=1e-10)),
    ("foam_no_refresh", dict(start=5, freeze=20)),
    ("foam_no_adaptive_eps_tau4", dict(start=5)),
    ("foam", dict(start=5, eps_max=1e-10, p=4)),  # fourth roots: the root order reaches every factor
    ("adam", {}),
])
def test_batched_trainer_equals_one_run_per_member(config, settings):
    """train_batch's member k is train_autoencoder(seed k, lr k): the same losses at every evaluation,
    the same eigendecompositions per factor, the same checks and the first member's check log."""
    seeds, lrs = [0, 3], [3e-3, 1e-2]
    batch = experiment.train_batch(config, seeds, lrs, steps=40, X=X_SMALL, eval_every=5,
                                   log_controller=True, **settings)
    orig = experiment.policy
    try:
        experiment.policy = lambda name, **_: orig(name, **settings)
        for k, (seed, lr) in enumerate(zip(seeds, lrs)):
            ref = experiment.train_autoencoder(config, seed, 40, lr, X=X_SMALL, eval_every=5,
                                               log_controller=k == 0)
            got = batch[k]
            assert np.allclose(got.curve["loss"], ref.curve["loss"], rtol=1e-5, atol=0), (config, k)
            assert got.evds_by_factor == ref.evds_by_factor and got.checks_by_factor == ref.checks_by_factor
            assert np.array_equal(got.curve["evds"], ref.curve["evds"])
            if k == 0:
                assert len(got.controller) == len(ref.controller)
                for a, b in zip(got.controller, ref.controller):  # every logged field, not only h
                    assert set(a) == set(b)
                    for key, value in b.items():
                        if isinstance(value, float):
                            assert a[key] == pytest.approx(value, rel=1e-6), key
                        else:
                            assert a[key] == value and type(a[key]) is type(value), key
    finally:
        experiment.policy = orig


def test_batched_loss_is_the_sum_of_the_members_losses_and_their_gradients():
    """The stacked objective is the sum of the members' minibatch MSEs, so member k's gradient is that
    of its own model's loss alone."""
    seeds = [0, 5]
    weights, biases = experiment._stacked_autoencoders(seeds)
    xb = torch.from_numpy(X_SMALL[:8]).reshape(2, 4, 64)
    parts = ((experiment._stacked_forward(weights, biases, xb) - xb) ** 2).mean(dim=(1, 2))
    total = parts.sum()
    total.backward()
    for k, seed in enumerate(seeds):
        model = task.autoencoder(seed)
        loss = torch.nn.functional.mse_loss(model(xb[k]), xb[k])
        assert float(parts[k].detach()) == pytest.approx(float(loss.detach()), rel=1e-6)
        loss.backward()
        assert torch.allclose(weights[0].grad[k], model.layers[0].weight.grad, rtol=1e-5, atol=1e-7)
        assert torch.allclose(biases[-1].grad[k], model.layers[-1].bias.grad, rtol=1e-5, atol=1e-7)
    assert float(total) == pytest.approx(float(parts[0]) + float(parts[1]), rel=1e-7)


@pytest.mark.parametrize("config", ["stale_f10", "foam", "adam"])
def test_batched_step_descends_on_a_fixed_batch(config):
    """One BatchedOptimizer step on a fixed minibatch (Shampoo preconditioned from step 1) moves every
    member's weights along a descent direction of its own minibatch MSE (<step, gradient> < 0 for every
    weight) and, at a small learning rate, lowers that loss."""
    seeds = [0, 1, 2]
    weights, biases = experiment._stacked_autoencoders(seeds)
    xb = torch.from_numpy(X_SMALL[:12]).reshape(3, 4, 64)

    def losses():
        with torch.no_grad():
            return ((experiment._stacked_forward(weights, biases, xb) - xb) ** 2).mean(dim=(1, 2)).numpy()

    before = losses()
    ((experiment._stacked_forward(weights, biases, xb) - xb) ** 2).mean(dim=(1, 2)).sum().backward()
    grads = [w.grad.detach().double().numpy().copy() for w in weights]
    olds = [w.detach().double().numpy().copy() for w in weights]
    opt = method.BatchedOptimizer(weights, biases, method.policy(config), [1e-4] * 3)
    opt.step()
    for W, G, old in zip(weights, grads, olds):
        step = W.detach().double().numpy() - old
        assert np.all(np.einsum("kij,kij->k", step, G) < 0)
    assert np.all(losses() < before)
    if config != "adam":
        assert np.all(opt.evds == 12)


def test_batched_flop_count_follows_its_rule():
    """Stale f = 10 for 25 steps from step 5: per member, Adam's elementwise work on every entry each
    step, the factor EMAs each step, the direction from step 5, and 9 m^3 + 2 m^3 per eigendecomposition
    (steps 5, 10, 20); the curve adds the model's 6 flops per weight per example."""
    res = experiment.train_batch("stale_f10", [0], [3e-3], steps=25, X=X_SMALL, eval_every=25, start=5)[0]
    shapes = [(b, a) for a, b in zip(task.AE_SIZES[:-1], task.AE_SIZES[1:])]  # (out, in) = (m, n)
    per_step = sum(10 * m * n + 2 * m * m * n + 2 * m * n * n for m, n in shapes) + 10 * sum(m for m, _ in shapes)
    direction = sum(2 * m * m * n + 2 * m * n * n for m, n in shapes)
    evd = sum((method.EVD_FLOPS_PER_CUBE + 2) * (m**3 + n**3) for m, n in shapes)
    want = 25 * per_step + 21 * direction + 3 * evd + 25 * experiment.model_flops_per_step(4)
    assert res.curve["flops"][-1] == pytest.approx(want, rel=1e-12)


def test_graders_accept_the_reference_and_reject_wrong_answers():
    exercises.check_damped_inverse_root(method.damped_inverse_root)
    exercises.check_controller_step(method.controller_step)
    with pytest.raises(AssertionError):  # counts the damping twice
        exercises.check_damped_inverse_root(lambda A, eps, p: method.damped_inverse_root(A + eps * np.eye(len(A)), eps, p))
    with pytest.raises(AssertionError):  # exponent -1/(2p)
        exercises.check_damped_inverse_root(lambda A, eps, p: method.damped_inverse_root(A, eps, 2 * p))
    with pytest.raises(AssertionError):  # no floor
        exercises.check_controller_step(
            lambda eps, h, eps0, eps_max, tau: (eps * h / tau, eps * h / tau > eps_max)
            if eps * h / tau <= eps_max else (eps0, True))
    with pytest.raises(AssertionError):  # refresh but keeps the grown eps
        exercises.check_controller_step(
            lambda eps, h, eps0, eps_max, tau: (max(eps0, eps * h / tau), max(eps0, eps * h / tau) > eps_max))


# ---- update steps: descent direction, second-step state ---------------------------------------


def _root(F, eps):
    """(F + eps I)^{-1/2} by scipy (independent of the method's eigendecomposition)."""
    return np.real(scipy.linalg.fractional_matrix_power(F + eps * np.eye(len(F)), -0.5))


def test_adam_two_steps_follow_the_bias_corrected_moments():
    """AdamOptimizer at steps 1 and 2 with different gradients: x -= lr m_hat / (sqrt(v_hat) + eps), m and v
    EMAs of the gradient with bias corrections 1 - beta^t (at step 2 the moments differ from the raw gradient)."""
    x0 = np.array([0.3, -1.2, 2.0])
    prm = torch.nn.Parameter(torch.tensor(x0, dtype=torch.float64))
    opt = method.AdamOptimizer([prm], lr=0.1)
    g1, g2 = np.array([1.0, -2.0, 0.5]), np.array([-3.0, 0.1, 0.5])
    b1, b2, e = method.BETA1, method.BETA2, method.ADAM_EPS
    m, v, x = np.zeros(3), np.zeros(3), x0.copy()
    for t, g in ((1, g1), (2, g2)):
        prm.grad = torch.tensor(g)
        opt.step()
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        x = x - 0.1 * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + e)
        assert np.allclose(prm.detach().numpy(), x, rtol=1e-12, atol=1e-12), t
    assert opt.t == 2


@pytest.mark.parametrize("f", [1, 10])
def test_shampoo_two_steps_use_momentum_roots_and_grafting(f):
    """ShampooOptimizer at steps 1 and 2 with different gradients, against an independent re-derivation:
    L, R EMAs of G G^T, G^T G; roots (L_bar + eps I)^{-1/2} refreshed at t = 1 and t % f == 0 (else the step-1
    root stays); P = L^{-1/2} M_hat R^{-1/2} with M_hat the bias-corrected *momentum* (not the raw gradient,
    equal to it only at step 1); P grafted to the Adam direction's norm; the bias by Adam."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 3).double()
    W0, c0 = lin.weight.detach().numpy().copy(), lin.bias.detach().numpy().copy()
    eps0, lr = 1e-3, 0.05
    opt = method.ShampooOptimizer(lin, method.Policy("stale", f=f, eps0=eps0), lr=lr)
    rng = np.random.default_rng(5)
    grads = [(rng.normal(size=(3, 2)), rng.normal(size=3)) for _ in range(2)]
    b1, b2, e = method.BETA1, method.BETA2, method.ADAM_EPS
    W, c = W0.copy(), c0.copy()
    L, R, m, v, mc, vc = np.zeros((3, 3)), np.zeros((2, 2)), np.zeros((3, 2)), np.zeros((3, 2)), np.zeros(3), np.zeros(3)
    for t, (G, gc) in enumerate(grads, start=1):
        lin.weight.grad, lin.bias.grad = torch.tensor(G), torch.tensor(gc)
        opt.step()
        L, R = b2 * L + (1 - b2) * G @ G.T, b2 * R + (1 - b2) * G.T @ G
        m, v = b1 * m + (1 - b1) * G, b2 * v + (1 - b2) * G * G
        if t == 1 or t % f == 0:
            Lr, Rr = _root(L / (1 - b2**t), eps0), _root(R / (1 - b2**t), eps0)
        m_hat = m / (1 - b1**t)
        A = m_hat / (np.sqrt(v / (1 - b2**t)) + e)
        P = Lr @ m_hat @ Rr
        step = lr * P * np.linalg.norm(A) / np.linalg.norm(P)
        if t == 1:  # a descent direction: <P, G> > 0 (the preconditioner is positive definite)
            assert float(np.sum(step * G)) > 0
        W = W - step
        mc, vc = b1 * mc + (1 - b1) * gc, b2 * vc + (1 - b2) * gc * gc
        c = c - lr * (mc / (1 - b1**t)) / (np.sqrt(vc / (1 - b2**t)) + e)
        assert np.allclose(lin.weight.detach().numpy(), W, rtol=1e-9, atol=1e-11), t
        assert np.allclose(lin.bias.detach().numpy(), c, rtol=1e-12, atol=1e-12), t
    assert opt.evds == 2 * (2 if f == 1 else 1)


def test_training_loop_takes_an_adam_step_on_the_minibatch_mse():
    """train_autoencoder's step: the minibatch of _batch_order, the MSE reconstruction loss and one Adam step
    (at t = 1: x -= lr g / (|g| + eps)); the curve's loss after step 1 is the full-batch MSE of the model updated
    by hand, and it is below the initial loss (descent)."""
    X = X_SMALL[:16]
    lr = 3e-3
    res = experiment.train_autoencoder("adam", seed=2, steps=1, lr=lr, batch_size=4, eval_every=1, X=X)
    model = task.autoencoder(2)
    xb = torch.from_numpy(X[task._batch_order(16, 1, 4, 2)[0]])
    ((model(xb) - xb) ** 2).mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            g = p.grad.double()
            p.copy_((p.double() - lr * g / (g.abs() + method.ADAM_EPS)).float())
        want = float(((model(torch.from_numpy(X)) - torch.from_numpy(X)) ** 2).mean())
    assert res.curve["step"].tolist() == [0, 1]
    assert res.curve["loss"][1] == pytest.approx(want, rel=1e-5)
    assert res.curve["loss"][1] < res.curve["loss"][0]


# ---- issue 44: messages, labels, counters, the controller log, FOAM's flop count ----------------


def test_policy_errors_name_the_bad_value_and_labels_name_each_configuration():
    """Invalid kinds, cadences, starts and configuration names are refused with the bad value and the valid
    choices; config_label gives each configuration's display label."""
    with pytest.raises(ValueError, match=r"^unknown policy kind 'soap'; valid: stale, foam, foam_no_refresh, "
                                         r"foam_no_adaptive_eps, adam$"):
        method.Policy("soap")
    with pytest.raises(ValueError, match=r"^the cadence f must be >= 1, got 0$"):
        method.Policy("stale", f=0)
    with pytest.raises(ValueError, match=r"^the preconditioning start must be a step >= 1, got 0$"):
        method.Policy("foam", start=0)
    assert method.Policy("foam", f=1, start=1).f == 1  # the smallest valid cadence and start
    with pytest.raises(ValueError, match=r"^unknown configuration 'soap'; valid: stale_f<f>, foam, foam_f<f>, "
                                         r"foam_no_refresh, foam_no_adaptive_eps, foam_no_adaptive_eps_tau<tau>, "
                                         r"adam$"):
        method.policy("soap")
    with pytest.raises(ValueError, match=r"^use AdamOptimizer for the adam configuration$"):
        method.ShampooOptimizer(torch.nn.Linear(2, 3), method.policy("adam"), lr=1e-3)
    names = ["stale_f10", "stale_f50", "foam", "foam_f20", "foam_no_refresh", "foam_no_adaptive_eps",
             "foam_no_adaptive_eps_tau0.75", "foam_no_adaptive_eps_tau2.5", "adam"]
    assert [method.config_label(n) for n in names] == [
        "stale f=10", "stale f=50", "FOAM", "FOAM f=20", "FOAM w/o refresh", "FOAM w/o adaptive eps",
        "FOAM w/o adaptive eps", "FOAM w/o adaptive eps, tau=2.5", "Adam"]


def test_counters_add_up_each_eigendecomposition_and_its_time(monkeypatch):
    """evds counts every eigendecomposition and eigh_seconds adds the clock time around each one (a fake clock
    advancing 0.25 s per reading: 0.25 s each); Adam has none of either, and no factors or log."""
    prm = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    adam = method.AdamOptimizer([prm], lr=0.1)
    assert adam.evds == 0 and adam.eigh_seconds == 0.0 and adam.factors == [] and adam.log == []
    ticks = iter(np.arange(1000) * 0.25)
    monkeypatch.setattr(method.time, "perf_counter", lambda: float(next(ticks)))
    fac = method.KroneckerFactor("W1.L", 3)
    assert fac.name == "W1.L" and fac.evds == 0 and fac.eigh_seconds == 0.0 and math.isnan(fac.eps)
    assert fac.Q is None and fac.d is None and fac.root is None  # nothing cached before the first EVD
    fac.refresh(psd(1, m=3), 1e-3)
    fac.refresh(psd(2, m=3), 1e-2)
    assert fac.evds == 2 and fac.eigh_seconds == pytest.approx(0.5) and fac.eps == 1e-2
    lin = torch.nn.Linear(2, 3).double()
    opt = method.ShampooOptimizer(lin, method.Policy("stale", f=1, eps0=1e-3), lr=0.01)
    rng = np.random.default_rng(0)
    for _ in range(2):
        lin.weight.grad, lin.bias.grad = torch.tensor(rng.normal(size=(3, 2))), torch.tensor(rng.normal(size=3))
        opt.step()
    assert [f.name for f in opt.factors] == ["W1.L", "W1.R"] and [f.evds for f in opt.factors] == [2, 2]
    assert opt.evds == 4 and opt.eigh_seconds == pytest.approx(4 * 0.25) and opt.checks == 0


def _whitened(F_old, F_new, eps):
    """rc = ||W (F_new - F_old) W||_F and alpha = ||W||_2 / ||W||_F with W = (F_old + eps I)^{-1/2} (scipy)."""
    W = _root(F_old, eps)
    return np.linalg.norm(W @ (F_new - F_old) @ W), np.linalg.norm(W, 2) / np.linalg.norm(W)


def test_foam_check_log_records_the_check_by_hand():
    """Each FOAM check logs step, factor, h = alpha RC / p, RC, alpha, eps before and after, whether it
    refreshed, and the median, largest eigenvalue and eps / median of the basis in use after it (inf when the
    median eigenvalue is 0); checks are counted per factor and in total."""
    opt = method.ShampooOptimizer(task.autoencoder(0), method.Policy("foam", eps0=1e-12, eps_max=1.0), lr=1e-3,
                                  log_controller=True)
    fac = opt.blocks[2].L  # W3.L, 16 x 16
    S = psd(9, m=16, rank=10)
    fac.stat = S * (1 - 0.99)
    opt._maintain(fac, 1)
    assert opt.log == [] and fac.checks == 0
    fac.rebuild(1e-3)
    # a small drift at step 10: reuse, eps grows from 1e-3
    F10 = S + 1e-4 * psd(10, m=16, rank=2)
    fac.stat = F10 * (1 - 0.99**10)
    opt._maintain(fac, 10)
    rc, alpha = _whitened(S, F10, 1e-3)
    h = alpha * rc / 2
    d = np.clip(np.linalg.eigvalsh(S), 0, None)
    eps = max(1e-12, 1e-3 * h / 0.75)
    e = opt.log[-1]
    assert (e["step"], e["factor"], e["refreshed"]) == (10, "W3.L", False)
    assert e["rc"] == pytest.approx(rc, rel=1e-6) and e["alpha"] == pytest.approx(alpha, rel=1e-6)
    assert e["h"] == pytest.approx(h, rel=1e-6) and e["eps_prev"] == 1e-3 and e["eps"] == pytest.approx(eps, rel=1e-9, abs=0)
    assert e["d_median"] == pytest.approx(np.median(d), rel=1e-8) and e["d_max"] == pytest.approx(d.max())
    assert e["eps_rel"] == pytest.approx(eps / np.median(d))
    # a rank-3 statistic at step 20 with a tight cap: refresh, eps0, the new basis has median eigenvalue 0
    opt.policy = method.Policy("foam")
    F20 = np.diag([0.0] * 13 + [1.0, 2.0, 3.0])  # exact zero eigenvalues
    fac.stat = F20 * (1 - 0.99**20)
    opt._maintain(fac, 20)
    e = opt.log[-1]
    assert (e["step"], e["refreshed"], e["eps"], e["eps_prev"]) == (20, True, 1e-12, pytest.approx(eps, rel=1e-9, abs=0))
    assert e["d_median"] == pytest.approx(0.0, abs=1e-10) and e["eps_rel"] == math.inf
    assert e["d_max"] == 3.0
    assert fac.checks == 2 and fac.check_refreshes == 1 and opt.checks == 2 and len(opt.log) == 2


def test_batched_foam_flops_count_checks_rebuilds_and_refreshes():
    """FOAM's optimizer flops per member: the elementwise, EMA and direction work of every step, 11 m^3 per
    eigendecomposition (the first ones at step 1 and each cap-triggered refresh), 4 m^3 per check and 2 m^3
    per root rebuilt with a changed eps, counted from the member's own check log."""
    res = experiment.train_batch("foam", [0], [3e-3], steps=30, X=X_SMALL, eval_every=30, start=1,
                                 eps_max=1e-10, log_controller=True)[0]
    shapes = [(b, a) for a, b in zip(task.AE_SIZES[:-1], task.AE_SIZES[1:])]
    size = {f"W{k}.{side}": (m if side == "L" else n) for k, (m, n) in enumerate(shapes, 1) for side in "LR"}
    per_step = sum(10 * m * n + 4 * m * m * n + 4 * m * n * n for m, n in shapes) + 10 * sum(m for m, _ in shapes)
    first = sum(11 * (m**3 + n**3) for m, n in shapes)
    log = res.controller
    assert len(log) == 12 * 3  # checks at steps 10, 20, 30
    refreshed = [e for e in log if e["refreshed"]]
    rebuilt = [e for e in log if not e["refreshed"] and e["eps"] != e["eps_prev"]]
    assert refreshed and rebuilt  # both branches are exercised
    checks = sum(4 * size[e["factor"]] ** 3 for e in log)
    extra = sum(11 * size[e["factor"]] ** 3 for e in refreshed) + sum(2 * size[e["factor"]] ** 3 for e in rebuilt)
    want = 30 * per_step + first + checks + extra + 30 * experiment.model_flops_per_step(4)
    assert res.curve["flops"][-1] == pytest.approx(want, rel=1e-12)
    assert res.evds == 12 + len(refreshed)


def test_graft_of_a_unit_direction_is_scaled_to_the_adam_norm():
    """graft(P, A) = P ||A||_F / ||P||_F by hand: P = (0.6, 0.8) of norm 1 and A = (3, 4) give (3, 4)."""
    assert np.allclose(method.graft(np.array([[0.6, 0.8]]), np.array([[3.0, 4.0]])), [[3.0, 4.0]])
    assert np.allclose(method.graft(np.array([[1.0, 0.0]]), np.array([[0.0, -2.0]])), [[2.0, 0.0]])


def _drifts():
    """A rank-10 statistic S, a large drift F (new directions), a larger one F2, and 3 S (no new direction)."""
    S = psd(9, m=16, rank=10)
    F = S + 10.0 * psd(11, m=16, rank=3)
    return S, F, F + 10.0 * psd(13, m=16, rank=3), 3.0 * S


def test_no_refresh_ablation_follows_foam_up_to_and_including_its_freeze_step():
    """FOAM w/o refresh with freeze = 20: a check at t = 20 still uses FOAM's rule (a large drift refreshes and
    resets eps to eps0); at t = 30 the damping is capped at eps_max and nothing is refreshed."""
    opt = method.ShampooOptimizer(task.autoencoder(0), method.policy("foam_no_refresh", freeze=20), lr=1e-3)
    fac = opt.blocks[2].L
    S, F, F2, _ = _drifts()
    for t, stat in ((1, S), (20, F), (30, F2)):
        fac.stat = stat * (1 - 0.99**t)
        opt._maintain(fac, t)
        if t == 20:
            assert fac.evds == 2 and fac.eps == 1e-12 and fac.check_refreshes == 1
    assert fac.evds == 2 and fac.eps == method.EPS_MAX and fac.checks == 2 and fac.check_refreshes == 1


def test_batched_checks_refresh_only_the_members_that_need_it():
    """BatchedOptimizer's checks for two members with different drifts, FOAM w/o refresh with freeze = 20: at
    t = 20 member 0 (large drift) alone refreshes and member 1 (no drift) keeps eps0 and its root; at t = 30
    member 0's eps is capped and member 1's grows to eps0 h / tau (h of its own drift, S to 3 S); the flops are
    11 m^3 per eigendecomposition, 4 m^3 per check, 2 m^3 per rebuilt root."""
    w = torch.zeros(2, 16, 3)
    opt = method.BatchedOptimizer([w], [], method.policy("foam_no_refresh", freeze=20), [1e-3, 1e-3], log_member=0)
    L = opt.pairs[0][0]
    S, _, F2, scaled = _drifts()
    F = np.diag([0.0] * 13 + [1.0, 2.0, 3.0])  # new directions, and exact zero eigenvalues after the refresh
    opt._refresh(L, np.arange(2), np.stack([S, S]))
    root1 = L.root[1].copy()
    opt._maintain(L, 20, np.stack([F, S]))
    assert L.evds.tolist() == [2, 1] and L.check_refreshes.tolist() == [1, 0] and L.eps.tolist() == [1e-12, 1e-12]
    assert np.array_equal(L.root[1], root1)
    assert np.allclose(L.Q[0] @ np.diag(L.d[0]) @ L.Q[0].T, F, atol=1e-10)
    e = opt.log[-1]  # member 0's check: refreshed onto a basis whose median eigenvalue is 0
    assert (e["step"], e["factor"], e["refreshed"], e["eps"], e["d_max"]) == (20, "W1.L", True, 1e-12, 3.0)
    assert e["d_median"] == 0.0 and e["eps_rel"] == math.inf
    opt._maintain(L, 30, np.stack([F2, scaled]))
    h1 = method.foam_proxy(L.Q[1], L.d[1], scaled, 1e-12, 2)[0]
    assert L.eps[0] == method.EPS_MAX and L.eps[1] == pytest.approx(1e-12 * h1 / 0.75, rel=1e-9, abs=0) and h1 > 0.75
    assert np.allclose(L.root[1], method.inverse_root_from_eig(L.Q[1], L.d[1], L.eps[1], 2))
    assert L.evds.tolist() == [2, 1] and L.checks.tolist() == [2, 2]
    m3 = 16**3
    assert opt.flops.tolist() == [(11 + 4 + 11 + 4 + 2) * m3, (11 + 4 + 4 + 2) * m3]
    assert opt.evds.tolist() == [2, 1] and opt.evds.dtype.kind == "i"
    assert L.evds.dtype.kind == L.checks.dtype.kind == L.check_refreshes.dtype.kind == "i"  # counts
    e = opt.log[-1]  # t = 30: the basis of t = 20 is kept, its damping capped
    assert (e["step"], e["refreshed"], e["eps"], e["eps_prev"], e["eps_rel"]) == (30, False, method.EPS_MAX, 1e-12, math.inf)


def test_single_precision_inputs_are_computed_in_double():
    """The building blocks work in float64 (the module's contract): float32 inputs give exactly the results of
    their float64 copies, for the EMA, the bias correction, the eigendecomposition, the root and the proxy."""
    rng = np.random.default_rng(12)
    G32 = rng.normal(size=(5, 3)).astype(np.float32)
    A32, B32 = psd(3, m=6).astype(np.float32), psd(4, m=6).astype(np.float32)
    f64 = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    for side, F32 in (("L", psd(1, m=5).astype(np.float32)), ("R", psd(2, m=3).astype(np.float32))):
        got = method.ema_factor(F32, G32, 0.9, side)
        assert got.dtype == np.float64 and np.array_equal(got, method.ema_factor(f64(F32), f64(G32), 0.9, side))
    got = method.bias_corrected(A32, 0.99, 3)
    assert got.dtype == np.float64 and np.array_equal(got, method.bias_corrected(f64(A32), 0.99, 3))
    Q, d = method.eigendecompose(A32)
    Q64, d64 = method.eigendecompose(f64(A32))
    assert Q.dtype == d.dtype == np.float64 and np.array_equal(d, d64) and np.array_equal(Q, Q64)
    assert np.array_equal(method.damped_inverse_root(A32, 1e-3), method.damped_inverse_root(f64(A32), 1e-3))
    Q32, d32 = Q64.astype(np.float32), d64.astype(np.float32)
    root = method.inverse_root_from_eig(f64(Q32), d32, 1e-3)
    assert np.array_equal(root, method.inverse_root_from_eig(f64(Q32), f64(d32), 1e-3))
    got = method.foam_proxy(Q32, d32, B32, 1e-3)
    assert got == method.foam_proxy(f64(Q32), f64(d32), f64(B32), 1e-3)


def test_boundaries_are_where_the_method_puts_them():
    """Boundary cases by hand: stale(f) runs its first EVD at step ``start`` even when the run ends there; the
    controller refreshes only when eps_tilde exceeds eps_max strictly (0.25 * 1.5 / 0.75 = 0.5 = eps_max
    keeps 0.5) and floors at eps0."""
    assert method.stale_evd_count(20, 10, start=20) == 1 and method.stale_evd_count(19, 10, start=20) == 0
    assert method.stale_evd_count(5, 10) == 1 and method.stale_evd_count(10, 10) == 2
    assert method.controller_step(0.25, 1.5, eps0=0.125, eps_max=0.5, tau=0.75) == (0.5, False)
    assert method.controller_step(0.25, 1.5, eps0=0.125, eps_max=0.4375, tau=0.75) == (0.125, True)
    assert method.controller_step(0.25, 0.25, eps0=0.125, eps_max=0.5, tau=0.75) == (0.125, False)


def test_checks_refresh_only_above_their_thresholds_in_both_optimizers():
    """A check whose h equals tau exactly (FOAM w/o adaptive eps) or whose eps_tilde equals eps_max exactly
    (FOAM) does not refresh, in ShampooOptimizer and in BatchedOptimizer; just above, it does. (h is computed
    from the very inputs the check sees, so the equality is exact.)"""
    S, _, _, scaled = _drifts()
    for kind, shrink, want in [("foam_no_adaptive_eps", 1.0, False), ("foam_no_adaptive_eps", 0.999, True),
                               ("foam", 1.0, False), ("foam", 0.999, True)]:
        opt = method.ShampooOptimizer(task.autoencoder(0), method.Policy(kind), lr=1e-3)
        fac = opt.blocks[2].L
        fac.stat = S * (1 - 0.99)
        opt._maintain(fac, 1)
        fac.stat = scaled * (1 - 0.99**10)
        h = method.foam_proxy(fac.Q, fac.d, method.bias_corrected(fac.stat, 0.99, 10), fac.eps, 2)[0]
        batched = method.BatchedOptimizer([torch.zeros(1, 16, 3)], [], method.Policy(kind), [1e-3])
        L = batched.pairs[0][0]
        batched._refresh(L, np.arange(1), S[None])
        hb = method._batched_proxy(L.Q, L.d, scaled[None], L.eps.copy(), 2)[0]
        if kind == "foam":  # eps_tilde = eps h / tau against eps_max
            opt.policy = method.Policy(kind, eps_max=shrink * (fac.eps * h / 0.75))
            batched.policy = method.Policy(kind, eps_max=shrink * float((L.eps * hb / 0.75)[0]))
        else:  # h against tau
            opt.policy = method.Policy(kind, tau=shrink * h)
            batched.policy = method.Policy(kind, tau=shrink * float(hb[0]))
        opt._maintain(fac, 10)
        batched._maintain(L, 10, scaled[None])
        assert fac.check_refreshes == L.check_refreshes[0] == int(want), (kind, shrink)


def test_batched_graft_keeps_the_adam_norm_for_small_directions_and_zero_for_zero_gradients():
    """One BatchedOptimizer step (stale, heavy damping eps0 = 100, so ||P|| << 1): member 0 moves by lr times
    graft(P, A) with P = (G G^T + 100 I)^{-1/2} G (G^T G + 100 I)^{-1/2} and A = G / (|G| + eps) (t = 1); member 1
    has a zero gradient and stays where it is (no 0/0)."""
    G = np.array([[0.3, -0.2], [0.1, 0.4], [-0.5, 0.2]])
    w = torch.zeros(2, 3, 2, dtype=torch.float64)
    w.grad = torch.from_numpy(np.stack([G, np.zeros_like(G)]))
    opt = method.BatchedOptimizer([w], [], method.Policy("stale", eps0=100.0), [0.1, 0.1])
    opt.step()
    P = _root(G @ G.T, 100.0) @ G @ _root(G.T @ G, 100.0)
    A = G / (np.abs(G) + method.ADAM_EPS)
    assert np.linalg.norm(P) < 0.1
    assert np.allclose(w[0].numpy(), -0.1 * P * np.linalg.norm(A) / np.linalg.norm(P), rtol=1e-10, atol=1e-13)
    assert np.array_equal(w[1].numpy(), np.zeros((3, 2)))


def test_ema_factor_defaults_to_the_left_factor_with_beta2():
    """ema_factor(F, G) without options is the left factor with beta2 = 0.99: 0.99 F + 0.01 G G^T."""
    G = np.array([[1.0, 2.0], [0.0, -1.0], [3.0, 0.5]])
    F = np.eye(3)
    assert np.allclose(method.ema_factor(F, G), 0.99 * F + 0.01 * G @ G.T)


def test_optimizers_use_their_own_epsilon_and_log_only_on_request():
    """Adam's epsilon given to an optimizer reaches every update (t = 1: x -= lr g / (|g| + eps), and the
    grafted Shampoo step has that direction's norm; eps = 0.5 here); without log_controller a check logs
    nothing."""
    g = np.array([1.0, -0.25, 0.5])
    prm = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    opt = method.AdamOptimizer([prm], lr=0.1, eps=0.5)
    prm.grad = torch.tensor(g)
    opt.step()
    assert np.allclose(prm.detach().numpy(), -0.1 * g / (np.abs(g) + 0.5), rtol=1e-12)
    lin = torch.nn.Linear(2, 3).double()
    W0, c0 = lin.weight.detach().numpy().copy(), lin.bias.detach().numpy().copy()
    G = np.array([[0.3, -0.2], [0.1, 0.4], [-0.5, 0.2]])
    sh = method.ShampooOptimizer(lin, method.Policy("foam"), lr=0.1, eps=0.5)
    lin.weight.grad, lin.bias.grad = torch.tensor(G), torch.tensor(g)
    sh.step()
    A = G / (np.abs(G) + 0.5)
    assert np.linalg.norm(lin.weight.detach().numpy() - W0) == pytest.approx(0.1 * np.linalg.norm(A), rel=1e-10)
    assert np.allclose(lin.bias.detach().numpy(), c0 - 0.1 * g / (np.abs(g) + 0.5), rtol=1e-12)
    fac = sh.blocks[0].L
    fac.stat = 3.0 * fac.stat
    sh._maintain(fac, 10)
    assert sh.checks == 1 and sh.log == []


@pytest.mark.parametrize("kind", ["foam", "foam_no_refresh"])
def test_checks_grow_the_damping_by_h_over_the_policys_own_tau(kind):
    """eps_t = max(eps0, eps_{t-1} h / tau) with the policy's tau (1 here, not the default 0.75), for FOAM and
    for FOAM w/o refresh before its freeze step, in ShampooOptimizer and BatchedOptimizer alike (h from the
    inputs each check sees)."""
    S, _, _, scaled = _drifts()
    pol = method.Policy(kind, tau=1.0, eps_max=1.0, freeze=20 if kind == "foam_no_refresh" else 0)
    opt = method.ShampooOptimizer(task.autoencoder(0), pol, lr=1e-3)
    fac = opt.blocks[2].L
    fac.stat = S * (1 - 0.99)
    opt._maintain(fac, 1)
    fac.stat = scaled * (1 - 0.99**10)
    h = method.foam_proxy(fac.Q, fac.d, method.bias_corrected(fac.stat, 0.99, 10), 1e-12, 2)[0]
    opt._maintain(fac, 10)
    batched = method.BatchedOptimizer([torch.zeros(1, 16, 3)], [], pol, [1e-3])
    L = batched.pairs[0][0]
    batched._refresh(L, np.arange(1), S[None])
    hb = float(method._batched_proxy(L.Q, L.d, scaled[None], L.eps.copy(), 2)[0][0])
    batched._maintain(L, 10, scaled[None])
    assert h > 1.0 and hb > 1.0  # eps grows above eps0
    assert fac.eps == pytest.approx(1e-12 * h / 1.0, rel=1e-9, abs=0)
    assert L.eps[0] == pytest.approx(1e-12 * hb / 1.0, rel=1e-9, abs=0)
