"""Unit tests of replib.papers.bidprice_routing (OLP bid-price router and its simulator)."""

import numpy as np
import pytest

from replib.papers.bidprice_routing import exercises, experiment, method, task, theory


def small_workload(seed=0, arrival_steps=150, rate=0.5, noise=0.0):
    return task.generate_workload(
        np.random.default_rng(seed), rate=rate, arrival_steps=arrival_steps, noise=noise
    )


# ---- workload -------------------------------------------------------------------------------


def test_workload_ranges_and_noise():
    w = task.generate_workload(np.random.default_rng(1), arrival_steps=400)
    assert np.all(np.diff(w.arrival) >= 0) and w.arrival.min() >= 1 and w.arrival.max() <= 400
    assert w.s.min() >= 8 and w.s.max() <= 512 and w.o.min() >= 4 and w.o.max() <= 400
    assert np.array_equal(w.o_hat, w.o)
    assert abs(w.n / 400 - 0.55) < 0.1
    wn = task.generate_workload(np.random.default_rng(1), arrival_steps=400, noise=0.2)
    # same arrivals and true lengths, predictions within +-20% (after rounding), at least 1
    assert np.array_equal(wn.arrival, w.arrival) and np.array_equal(wn.o, w.o)
    assert np.all(wn.o_hat >= 1)
    assert np.all(np.abs(wn.o_hat - wn.o) <= 0.2 * wn.o + 0.5)
    assert np.any(wn.o_hat != wn.o)


def test_rate_shift_raises_the_second_half_and_leaves_no_shift_unchanged():
    args = dict(arrival_steps=4000, rate=0.4)
    w = task.generate_workload(np.random.default_rng(2), **args)
    same = task.generate_workload(np.random.default_rng(2), rate_shift=1.0, **args)
    assert np.array_equal(w.arrival, same.arrival) and np.array_equal(w.o_hat, same.o_hat)
    shifted = task.generate_workload(np.random.default_rng(2), rate_shift=1.5, **args)
    first = np.sum(shifted.arrival <= 2000) / 2000
    second = np.sum(shifted.arrival > 2000) / 2000
    assert abs(first - 0.4) < 0.04 and abs(second - 0.6) < 0.05 and shifted.rate_shift == 1.5


# ---- columns, reward, cost ------------------------------------------------------------------


def test_action_column_step_and_ramp():
    a_B, a_M, steps = method.action_column(s=5, o_hat=4, tau=3, T=100)
    assert steps.tolist() == [3, 4, 5, 6]
    assert a_B.tolist() == [1, 1, 1, 1]
    assert a_M.tolist() == [6, 7, 8, 9]  # s+1, s+2, ...
    # truncated at the horizon
    a_B, a_M, steps = method.action_column(s=5, o_hat=4, tau=9, T=10)
    assert steps.tolist() == [9, 10] and a_M.tolist() == [6, 7] and a_B.tolist() == [1, 1]


def test_slo_reward_hand_computed():
    # T=100, tau=10, t_arr=4, o_hat=20: thr=20, comp=100-29=71, ft=91, tau-t=6 < W_gp=10
    rw = method.slo_reward(20, 10, 4, 100, alpha=1, beta=2, gamma=3, sigma=0.5, w_gp=7, W_gp=10)
    assert float(rw.thr) == 20 and float(rw.comp) == 71 and float(rw.ft) == 91
    assert float(rw.gp) == 1
    r = 0.5 + 20 + 2 * 71 + 3 * 91 + 7
    assert float(rw.r) == pytest.approx(r)
    assert float(rw.r_norm) == 1.0  # r / T > 1 is capped
    rw = method.slo_reward(20, 10, 4, 100, beta=1, W_gp=6, w_gp=7)
    assert float(rw.gp) == 0 and float(rw.r_norm) == pytest.approx(0.71)
    # near the horizon: throughput truncated, completion term zero
    rw = method.slo_reward(20, 95, 95, 100, alpha=1, beta=1)
    assert float(rw.thr) == 6 and float(rw.comp) == 0 and float(rw.ft) == 6


def test_olp_config_weights():
    assert (method.OLPConfig().alpha, method.OLPConfig().beta, method.OLPConfig().gamma) == (0, 1, 0)
    c = method.OLPConfig(alpha=1)
    assert (c.alpha, c.beta, c.gamma) == (1, 0, 0)


def test_column_cost_matches_brute_force():
    rng = np.random.default_rng(0)
    G, T = 3, 50
    p_B, p_M = rng.uniform(size=(G, T)), rng.uniform(size=(G, T))
    c_M = 0.01
    for g, s, oh, tau in [(0, 5, 7, 1), (2, 30, 80, 20), (1, 1, 1, 50), (1, 9, 12, 44)]:
        a_B, a_M, steps = method.action_column(s, oh, tau, T)
        brute = np.sum(p_B[g, steps - 1] * a_B + c_M * p_M[g, steps - 1] * a_M)
        got = method.column_cost(p_B, p_M, g, s, oh, tau, c_M)
        assert float(got) == pytest.approx(brute, rel=1e-10)
    # vectorised over (request, worker)
    cost = method.column_cost(
        p_B, p_M, np.arange(G)[None, :], np.array([[5], [9]]), np.array([[7], [3]]), 4, c_M
    )
    assert cost.shape == (2, G)


def test_remaining_capacity():
    U_B = np.array([[2, 20]])
    U_M = np.array([[100, 3000]])
    d_B, d_M = method.remaining_capacity(
        U_B, U_M, [16], [2048], c_M=0.5, N_hat=4, R_bar=2, rho_b=0.5, kappa=1.0
    )
    assert d_B.tolist() == [[14 / 8 * 1.5, 0.0]]
    assert d_M.tolist() == [[0.5 * 1948 / 8 * 1.5, 0.0]]


# ---- dual update ----------------------------------------------------------------------------


def test_dual_update_raises_prices_when_over_demanded():
    h = method.History()
    h.add(0, 0, 3, 2, 1.0)  # worker 0, steps 1..3, s=2, reward 1
    G, T = 2, 6
    z = np.zeros((G, T))
    p_B, p_M = method.dual_update(
        z, z, h, z, z, c_M=0.1, rng=np.random.default_rng(0), K=5, eta=0.01, batch=64
    )
    assert np.allclose(p_B[0, :3], 0.05) and np.all(p_B[0, 3:] == 0) and np.all(p_B[1] == 0)
    assert np.allclose(p_M[0, :3], 5 * 0.01 * 0.1 * np.array([3, 4, 5]))
    assert np.all(p_M[:, 3:] == 0) and np.all(p_M[1] == 0)


def test_dual_update_lowers_prices_when_under_demanded():
    h = method.History()
    h.add([0, 1], [0, 2], [3, 3], [2, 2], [0.0, 0.0])  # unprofitable columns
    G, T = 2, 6
    p0 = np.full((G, T), 0.1)
    d = np.ones((G, T))
    p_B, p_M = method.dual_update(
        p0, p0, h, d, 3 * d, c_M=0.1, rng=np.random.default_rng(0), K=5, eta=0.01
    )
    assert np.allclose(p_B, 0.05) and np.allclose(p_M, 0.0)  # projected at zero
    # an empty history resets the prices (as in the official code)
    p_B, _ = method.dual_update(p0, p0, method.History(), d, d, 0.1, np.random.default_rng(0))
    assert np.all(p_B == 0)


# ---- feasibility and admission --------------------------------------------------------------


def test_feasibility_rejects_kv_ramp_overflow():
    res = method.Reservations(B=[2], M=[10], T=20)
    assert res.feasible([5], [5], 0).tolist() == [[True]]  # ramp 6..10 fits M=10
    assert res.feasible([6], [5], 0).tolist() == [[False]]  # ramp 7..11 overflows at the end
    res.commit(0, 2, 3, 0)  # U^M = 3, 4, 5 on steps 1..3
    assert res.U_M[0, :4].tolist() == [3, 4, 5, 0]
    assert res.feasible([3], [3], 0).tolist() == [[False]]  # 7, 9, 11
    assert res.feasible([3], [2], 0).tolist() == [[True]]  # 7, 9
    res.commit(0, 0, 1, 0)
    assert res.feasible([0], [1], 0).tolist() == [[False]]  # batch cap B=2 reached
    res.release(0, 2, 0, 1, 3)  # first column ends after step 1
    assert res.U_M[0, :4].tolist() == [4, 0, 0, 0] and res.U_B[0, :4].tolist() == [2, 0, 0, 0]


def test_feasibility_matches_brute_force():
    rng = np.random.default_rng(3)
    res = method.Reservations(B=[3, 4], M=[60, 80], T=40)
    for _ in range(12):
        res.commit(
            int(rng.integers(2)),
            int(rng.integers(1, 10)),
            int(rng.integers(1, 15)),
            int(rng.integers(0, 25)),
        )
    s = rng.integers(1, 30, size=30)
    L = rng.integers(1, 15, size=30)
    i0 = 5
    got = res.feasible(s, L, i0)
    for j in range(30):
        for g in range(2):
            ks = np.arange(i0, i0 + L[j])
            ok = np.all(res.U_B[g, ks] + 1 <= res.B[g]) and np.all(
                res.U_M[g, ks] + s[j] + 1 + np.arange(L[j]) <= res.M[g]
            )
            assert got[j, g] == ok


def test_admit_by_margin_orders_and_rechecks():
    res = method.Reservations(B=[1, 1], M=[100, 100], T=10)
    margins = np.array([[0.2, 0.1], [0.5, -np.inf], [0.5, 0.3]])
    t_arr = np.array([1, 3, 2])
    adm, n_cand = method.admit_by_margin(margins, t_arr, 0.0, res, [1, 1, 1], [2, 2, 2], 0)
    # ties at 0.5: request 2 arrived earlier -> worker 0; request 1 then has no feasible worker;
    # request 2 is already started, so its worker-1 candidate is skipped; request 0 gets worker 1
    assert adm == [(2, 0), (0, 1)] and n_cand == 5
    assert res.U_B[:, :2].tolist() == [[1, 1], [1, 1]]
    adm, n_cand = method.admit_by_margin(np.full((1, 2), -1.0), [1], 0.0, res, [1], [1], 0)
    assert adm == [] and n_cand == 0


# ---- simulator ------------------------------------------------------------------------------


def test_unknown_policy_names_valid_ones():
    w = small_workload(arrival_steps=10)
    with pytest.raises(ValueError, match="round_robin.*olp"):
        task.run_policy("least_loaded", w, 0)
    with pytest.raises(ValueError):
        task.run_policy("lor", w, 0, beta=1)  # OLP weights only for OLP


@pytest.mark.parametrize("policy", task.POLICIES)
def test_light_load_completes_everything(policy):
    w = small_workload(arrival_steps=120, rate=0.1)
    r = task.run_policy(policy, w, 0, drain=600)
    m = task.metrics(r)
    assert m["completed"] == w.n and m["tokens"] == int(w.o.sum())
    assert m["preemptions"] == 0
    e2e = r.completion - r.arrival + 1
    assert np.all(e2e >= w.o)  # a request needs at least o steps
    assert np.all(r.first_token >= r.arrival)


def test_olp_exact_predictions_reservations_match_kv_and_never_preempt():
    w = small_workload(arrival_steps=200, rate=0.55)
    sim = task.ClusterSim(w, "olp", np.random.default_rng(0), G=2, drain=800)
    r = sim.run()
    m = task.metrics(r)
    assert m["completed"] == w.n and m["preemptions"] == 0
    assert r.buffer_len.max() > 0 and m["epochs"] > 0  # the router was actually loaded
    assert r.kv.max() <= 2048
    # exact reservations: committed KV column equals the KV actually in use at every step
    assert np.array_equal(sim.res.U_M[:, : r.steps].T, r.kv)
    assert r.price_B.shape == (r.steps, 2) and np.all(r.price_B >= 0)


def test_sparser_epoch_trigger_also_serves_everyone_exactly():
    w = small_workload(arrival_steps=200, rate=0.55)
    dense = task.ClusterSim(w, "olp", np.random.default_rng(0), G=2, drain=800).run()
    sparse = task.ClusterSim(w, "olp", np.random.default_rng(0), G=2, drain=800, trigger="events").run()
    assert task.metrics(sparse)["completed"] == w.n and not sparse.preemptions
    assert len(sparse.epoch_steps) < len(dense.epoch_steps)  # arrivals and completions only
    with pytest.raises(ValueError, match="valid: batch_end, events"):
        task.ClusterSim(w, "olp", np.random.default_rng(0), trigger="often")


def test_noisy_predictions_keep_reservations_consistent():
    w = small_workload(arrival_steps=200, rate=0.55, noise=0.2)
    for policy in ("olp", "central_sjf"):
        sim = task.ClusterSim(w, policy, np.random.default_rng(0), G=2, drain=800)
        r = sim.run()
        assert task.metrics(r)["completed"] == w.n
        # released on early completion, extended on overrun, released on preemption
        assert np.array_equal(sim.res.U_M[:, : r.steps].T, r.kv)
        assert np.all(sim.res.U_M[:, r.steps :] == 0) and np.all(sim.res.U_B >= 0)


def test_dispatch_baseline_preempts_under_load():
    w = small_workload(arrival_steps=200, rate=0.55)
    r = task.run_policy("round_robin", w, 0, G=2, drain=800)
    m = task.metrics(r)
    assert m["completed"] == w.n and m["preemptions"] > 0
    assert m["tokens_emitted"] > m["tokens"]  # recompute wastes work
    assert r.kv.max() <= 2048
    assert all(1 <= k <= r.steps and 0 <= g < 2 for k, g in r.preemptions)


def test_determinism():
    w = small_workload(arrival_steps=120, rate=0.55)
    for policy in ("random", "p2c", "olp"):
        m1 = task.metrics(task.run_policy(policy, w, 7, G=2, drain=600))
        m2 = task.metrics(task.run_policy(policy, w, 7, G=2, drain=600))
        for key in ("mean_e2e", "p99_e2e", "mean_ttft", "ttft_le_20", "preemptions", "epochs"):
            assert m1[key] == m2[key]
    w2 = small_workload(arrival_steps=120, rate=0.55)
    assert np.array_equal(w.arrival, w2.arrival) and np.array_equal(w.s, w2.s)


def test_metrics_hand_case():
    r = task.SimResult(
        policy="x",
        T=100,
        steps=30,
        arrival=np.array([1, 2, 3]),
        o=np.array([5, 5, 5]),
        first_token=np.array([1, 30, -1]),
        completion=np.array([5, -1, -1]),
        worker=np.array([0, 0, -1]),
        tokens_emitted=12,
        buffer_len=np.zeros(30),
        kv=np.zeros((30, 1)),
        preemptions=[(4, 0)],
        epoch_seconds=[0.001, 0.003],
    )
    m = task.metrics(r)
    assert m["mean_e2e"] == 5 and m["completed"] == 1 and m["tokens"] == 5
    assert m["mean_ttft"] == 14 and m["ttft_le_20"] == pytest.approx(1 / 3)
    assert m["preemptions"] == 1 and m["ms_per_epoch"] == pytest.approx(2.0)
    assert np.isnan(m["throughput"])  # no prompt lengths or window given
    # throughput: prompt + decode tokens of requests completed within the arrival window, per step
    r.s = np.array([10, 20, 30])
    r.o = np.array([5, 6, 7])
    r.completion = np.array([5, 12, 9])
    r.arrival_steps = 10
    m = task.metrics(r)
    assert m["throughput"] == pytest.approx((15 + 37) / 10)  # request 1 completes after step 10
    assert m["tokens"] == 18


def test_ttft_term_is_shared_within_an_epoch_and_the_spread_would_show_otherwise():
    w = small_workload(arrival_steps=200, rate=0.55)
    r = task.run_policy("olp", w, 0, G=2, drain=800, gamma=1.0)
    assert task.metrics(r)["epochs"] > 0 and r.buffer_len.max() > 1  # epochs scored several requests
    assert task.metrics(r)["ttft_term_spread"] == 0.0
    assert np.isnan(task.metrics(task.run_policy("lor", w, 0, G=2, drain=800))["ttft_term_spread"])
    # the same term over start steps that differ (tau = arrival step) would spread
    T = task.horizon(w, 800)
    ft = method.slo_reward(w.o_hat, w.arrival, w.arrival, T, beta=0.0, gamma=1.0).ft
    assert np.ptp(ft) / T > 0.1


# ---- online knapsack ------------------------------------------------------------------------


def test_knapsack_offline_dominates_online():
    for seed, n in [(0, 250), (1, 1000), (2, 400)]:
        out = theory.knapsack_compare(np.random.default_rng(seed), n)
        lp = out["offline_lp"]
        for key in ("bid_price", "sgd_dual", "greedy"):
            assert out[key] <= lp + 1e-9
        assert out["bid_price"] > out["greedy"] and out["sgd_dual"] > out["greedy"]
        assert out["p_traj"].shape == (n + 1,) and out["p_star"] > 0


def test_knapsack_offline_lp_tiny():
    # ratios 2, 1, 0.5; capacity 2.5 -> items 0 and 1 whole (size 1+1), half of item 2
    value, p = theory.knapsack_offline([2.0, 1.0, 0.5], [1.0, 1.0, 1.0], 2.5)
    assert value == pytest.approx(3.25) and p == pytest.approx(0.5)
    value, p = theory.knapsack_offline([2.0, 1.0], [1.0, 1.0], 5.0)
    assert value == 3.0 and p == 0.0


# ---- chapter helpers ------------------------------------------------------------------------


def _chapter_ids():
    from pathlib import Path

    import yaml

    chapter = Path(__file__).resolve().parents[2] / "notebooks/bidprice_routing/chapter.yml"
    return {c["id"] for c in yaml.safe_load(chapter.read_text())["claims"]}


def test_smoke_experiment_and_claim_ids():
    import types

    cfg = types.SimpleNamespace(**experiment.EXPERIMENT_PROFILES["smoke"])
    rows, traces = experiment.run_experiment(cfg)
    assert len(rows) == len(cfg.seeds) * len(experiment.VARIANTS)
    assert [r["variant"] for r in rows] == [v[0] for v in experiment.VARIANTS]
    assert set(traces) == set(experiment.TRACED)
    assert all(set(experiment.REPORTED_METRICS) <= set(r) for r in rows)
    values = experiment.claim_values(rows, cfg.arrival_steps)
    assert set(values[cfg.seeds[0]]) == _chapter_ids()
    assert all(isinstance(v, float) for v in values[cfg.seeds[0]].values())
    assert np.isfinite(values[cfg.seeds[0]]["c1a_near"])
    assert values[cfg.seeds[0]]["c2b_preemptions"] == 0.0
    by = {r["variant"]: r for r in rows}
    # the unbounded cluster starts every request on arrival: E2E = decode length, TTFT 0, no preemption
    assert by["unbounded near"]["mean_ttft"] == 0 and by["unbounded near"]["preemptions"] == 0
    assert by["unbounded near"]["ttft_le_20"] == 1.0
    for load in experiment.LOADS:
        others = [r["mean_e2e"] for v, r in by.items() if v.endswith(f" {load}") and not v.startswith("unb")]
        assert len(others) >= 7 and by[f"unbounded {load}"]["mean_e2e"] <= min(others)


def test_parallel_experiment_gives_the_same_rows_as_one_process():
    import types

    base = dict(experiment.EXPERIMENT_PROFILES["smoke"], seeds=[3, 4], arrival_steps=60, capacity_steps=60)
    one, _ = experiment.run_experiment(types.SimpleNamespace(**{**base, "workers": 1}))
    two, _ = experiment.run_experiment(types.SimpleNamespace(**{**base, "workers": 2}))
    drop = ("wall_s", "ms_per_epoch")
    strip = [[{k: v for k, v in r.items() if k not in drop} for r in rows] for rows in (one, two)]
    assert [r["seed"] for r in one] == [3] * len(experiment.VARIANTS) + [4] * len(experiment.VARIANTS)
    assert str(strip[0]) == str(strip[1])  # NaN-safe equality of every value


def test_unbounded_cluster_runs_every_request_on_arrival():
    w = small_workload(arrival_steps=200, rate=0.9)
    r = task.run_policy("round_robin", w, 0, G=2, drain=800, **experiment.UNBOUNDED)
    assert np.all(r.first_token == r.arrival) and np.all(r.completion - r.arrival + 1 == w.o)
    assert not r.preemptions


def test_column_price_by_hand():
    r = task.run_policy("olp", small_workload(arrival_steps=120, rate=0.5), 0, G=2, drain=600)
    n = r.arrival_steps
    want = 100 * (r.price_B[:n].mean() + r.price_M[:n].mean() * (80 + 50.5) / task.KV_CAPACITY)
    assert experiment.column_price(r) == pytest.approx(want, rel=1e-12)
    assert experiment.column_price(r) > 0
    assert np.isnan(experiment.column_price(task.run_policy("lor", small_workload(), 0, G=2)))


def test_exercise_graders_accept_reference_and_reject_wrong(capsys):
    exercises.check_kv_ramp(lambda s, o_hat, tau, T: method.action_column(s, o_hat, tau, T)[1])
    exercises.check_price_step(lambda p, a, x, d, eta: max(0.0, p + eta * (a * x - d)))
    assert "correct" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        exercises.check_kv_ramp(lambda s, o_hat, tau, T: s + np.arange(o_hat))  # off by one, no truncation
    with pytest.raises(AssertionError):
        exercises.check_price_step(lambda p, a, x, d, eta: p + eta * (a * x - d))  # no projection


def _claim_rows():
    """Hand-made rows of :func:`experiment.run_experiment` for two seeds: every (seed, variant) gets its
    own numbers, so a claim that read a wrong variant, load or metric would get a different value."""
    keys = ("mean_e2e", "p99_e2e", "mean_ttft", "ttft_le_20", "throughput", "preemptions",
            "ms_per_epoch", "column_price", "completions_per_step")
    rng = np.random.default_rng(7)
    policy = {v[0]: v[1] for v in experiment.VARIANTS}
    rows = []
    for seed in (0, 1):
        for variant in policy:
            vals = dict(zip(keys, rng.uniform(1.0, 100.0, len(keys)).tolist()))
            vals["ttft_le_20"] /= 100.0
            rows.append(dict(seed=seed, variant=variant, policy=policy[variant], **vals))
    return rows


def _want(rows, seed):
    """The claim values of one seed, written out claim by claim."""
    m = {r["variant"]: r for r in rows if r["seed"] == seed}

    def best(key, load):
        return min(m[f"round_robin {load}"][key], m[f"random {load}"][key], m[f"lor {load}"][key],
                   m[f"p2c {load}"][key])

    want = {}
    for load in ("below", "near", "above"):
        want[f"p1_room_{load}"] = m[f"unbounded {load}"]["mean_e2e"] / best("mean_e2e", load)
        want[f"p9_prices_engaged_{load}"] = m[f"olp beta {load}"]["column_price"]
        want[f"c1a_{load}"] = m[f"olp beta {load}"]["mean_e2e"] / best("mean_e2e", load)
        want[f"c5_{load}"] = m[f"olp beta {load}"]["mean_e2e"] / m[f"central_sjf {load}"]["mean_e2e"]
    rr, rr_shift = m["round_robin near"], m["round_robin shift"]
    want.update({
        "p2_room_p99": m["unbounded near"]["p99_e2e"] / best("p99_e2e", "near"),
        "p4_room_throughput": m["unbounded near"]["throughput"] / rr["throughput"],
        "p5_room_shift_e2e": m["unbounded shift"]["mean_e2e"] / rr_shift["mean_e2e"],
        "p6_room_shift_throughput": m["unbounded shift"]["throughput"] / rr_shift["throughput"],
        "p7_room_tail": m["unbounded near"]["ttft_le_20"] - m["olp beta near"]["ttft_le_20"],
        "p8_room_tail_control": m["unbounded near"]["ttft_le_20"] - m["olp beta 2T near"]["ttft_le_20"],
        "c1b_p99_e2e": m["olp beta near"]["p99_e2e"] / best("p99_e2e", "near"),
        "c4b_noisy_e2e": m["olp beta noisy near"]["mean_e2e"] / best("mean_e2e", "near"),
        "c6_throughput": m["olp beta noisy near"]["throughput"] / rr["throughput"],
        "c7a_shift_mean_e2e": m["olp beta shift"]["mean_e2e"] / rr_shift["mean_e2e"],
        "c7b_shift_throughput": m["olp beta shift"]["throughput"] / rr_shift["throughput"],
        "c2a_mean_ttft": m["olp beta near"]["mean_ttft"] / best("mean_ttft", "near"),
        "c3a_steer_e2e": m["olp beta near"]["mean_e2e"] / m["olp alpha near"]["mean_e2e"],
        "c4a_tail_weight": m["olp beta + tail near"]["ttft_le_20"] - m["olp beta near"]["ttft_le_20"],
        "c4c_tail_weight_uncapped": m["olp beta + tail 2T near"]["ttft_le_20"]
        - m["olp beta 2T near"]["ttft_le_20"],
        "c2b_preemptions": m["olp beta below"]["preemptions"] + m["olp beta near"]["preemptions"]
        + m["olp beta above"]["preemptions"],
        "m0_capacity": m["central_fcfs capacity"]["completions_per_step"],
        "m6_window": 4000 / rr["mean_e2e"],
        "m1_decision_ms": m["olp beta near"]["ms_per_epoch"],
    })
    return want


def test_claim_values_hand_computed():
    import pandas as pd

    rows = _claim_rows()
    # the best heuristic differs between metrics and loads, so a wrong key or load changes a value
    for seed in (0, 1):
        want = _want(rows, seed)
        assert set(want) == _chapter_ids()
        for got in (experiment.claim_values(rows, 4000), experiment.claim_values(pd.DataFrame(rows), 4000)):
            assert set(got) == {0, 1}
            for claim, value in want.items():
                assert got[seed][claim] == pytest.approx(value, rel=1e-12, abs=1e-12), (seed, claim)


def test_claim_ratio_zero_denominator():
    # a heuristic with zero mean TTFT (light load): inf for a / 0, NaN for 0 / 0
    rows = [r for r in _claim_rows() if r["seed"] == 0]
    for r in rows:
        if r["variant"] == "lor near":
            r["mean_ttft"] = 0.0
    assert experiment.claim_values(rows, 4000)[0]["c2a_mean_ttft"] == float("inf")
    for r in rows:
        if r["variant"] == "olp beta near":
            r["mean_ttft"] = 0.0
    assert np.isnan(experiment.claim_values(rows, 4000)[0]["c2a_mean_ttft"])


# ---- update steps: the dual (price) descent, its second step, the epoch's composite margin ----------


_DUAL_COLS = [(0, 0, 3, 2, 0.9), (1, 2, 4, 1, 0.5), (0, 1, 2, 5, 0.3), (1, 0, 5, 3, 0.05), (0, 4, 3, 0, 0.2)]


def _dual_setup():
    """Two workers, T = 8, five history columns (g, i0, L, s, r~), positive prices, c_M = 0.2."""
    rng = np.random.default_rng(0)
    p_B, p_M = rng.uniform(0, 0.05, (2, 8)), rng.uniform(0, 0.05, (2, 8))
    h = method.History()
    for col in _DUAL_COLS:
        h.add(*col)
    return p_B, p_M, h, np.full((2, 8), 0.01), np.full((2, 8), 0.02), 0.2


def _col_cost(p_B, p_M, col, c_M):
    """a^T p written out: sum over the column's steps of p^B + c_M p^M (s + 1 + theta)."""
    g, i0, L, s, _ = col
    steps = np.arange(i0, i0 + L)
    return p_B[g, steps].sum() + c_M * (p_M[g, steps] * (s + 1 + np.arange(L))).sum()


def _dual_objective(p_B, p_M, cols, d_B, d_M, c_M):
    """f(p) = d^T p + (1/|H|) sum_i (r~_i - a_i^T p)^+."""
    hinge = [max(0.0, col[4] - _col_cost(p_B, p_M, col, c_M)) for col in cols]
    return float((d_B * p_B).sum() + (d_M * p_M).sum() + np.mean(hinge))


def _dual_reference(p_B, p_M, cols, d_B, d_M, c_M, eta, batches):
    """Projected subgradient steps on f, one per minibatch (lists of column indices), the active set
    recomputed at every step; returns the prices and the active sets."""
    p_B, p_M, active = p_B.copy(), p_M.copy(), []
    for batch in batches:
        g_B, g_M, act = d_B.copy(), d_M.copy(), []
        for i in batch:
            g, i0, L, s, r = cols[i]
            steps = np.arange(i0, i0 + L)
            act.append(bool(r - _col_cost(p_B, p_M, cols[i], c_M) > 0))
            if act[-1]:
                g_B[g, steps] -= 1.0 / len(batch)
                g_M[g, steps] -= c_M * (s + 1 + np.arange(L)) / len(batch)
        p_B, p_M = np.maximum(0.0, p_B - eta * g_B), np.maximum(0.0, p_M - eta * g_M)
        active.append(act)
    return p_B, p_M, active


def test_dual_update_one_step_is_a_subgradient_step_on_f():
    """K = 1, full batch: p <- [p - eta (d - mean_active a_i)]_+ (a hand subgradient of f), and f falls."""
    p_B, p_M, h, d_B, d_M, c_M = _dual_setup()
    got_B, got_M = method.dual_update(p_B, p_M, h, d_B, d_M, c_M, np.random.default_rng(0), K=1, eta=0.1)
    want_B, want_M, active = _dual_reference(p_B, p_M, _DUAL_COLS, d_B, d_M, c_M, 0.1, [range(5)])
    assert active == [[True, True, True, False, True]]  # a column below its cost gives no subgradient
    assert np.allclose(got_B, want_B, rtol=0, atol=1e-14) and np.allclose(got_M, want_M, rtol=0, atol=1e-14)
    assert np.any(got_B == 0) and np.any(got_B > p_B)  # projection and a price raised by demand both occur
    assert _dual_objective(got_B, got_M, _DUAL_COLS, d_B, d_M, c_M) < _dual_objective(
        p_B, p_M, _DUAL_COLS, d_B, d_M, c_M)


def test_dual_update_second_step_recomputes_the_active_set():
    """K = 2, full batch: the second step uses the prices of the first; column 4 leaves the active set."""
    p_B, p_M, h, d_B, d_M, c_M = _dual_setup()
    got_B, got_M = method.dual_update(p_B, p_M, h, d_B, d_M, c_M, np.random.default_rng(0), K=2, eta=0.1)
    want_B, want_M, active = _dual_reference(p_B, p_M, _DUAL_COLS, d_B, d_M, c_M, 0.1, [range(5)] * 2)
    assert active[0] != active[1]  # the case a stale active set would get wrong
    assert np.allclose(got_B, want_B, rtol=0, atol=1e-14) and np.allclose(got_M, want_M, rtol=0, atol=1e-14)


def test_dual_update_minibatch_draws_and_scales_by_the_batch():
    """batch 2 of |H| = 5: each step draws rng.choice(5, 2, replace=False) and averages over 2 columns."""
    p_B, p_M, h, d_B, d_M, c_M = _dual_setup()
    got_B, got_M = method.dual_update(p_B, p_M, h, d_B, d_M, c_M, np.random.default_rng(4), K=3, eta=0.1,
                                      batch=2)
    draw = np.random.default_rng(4)
    batches = [draw.choice(5, size=2, replace=False).tolist() for _ in range(3)]
    want_B, want_M, _ = _dual_reference(p_B, p_M, _DUAL_COLS, d_B, d_M, c_M, 0.1, batches)
    assert np.allclose(got_B, want_B, rtol=0, atol=1e-14) and np.allclose(got_M, want_M, rtol=0, atol=1e-14)


def test_knapsack_sgd_price_trajectory_by_hand():
    """x_t = 1{r_t > p_t a_t} (if it fits) with the price before item t; p_{t+1} = max(0, p_t + eta (a_t x_t - d))."""
    r, a = [0.9, 0.2, 0.05, 0.5, 0.3], [1.0, 0.5, 0.25, 0.25, 1.0]
    value, traj = theory.knapsack_sgd(r, a, 2.0, eta=0.5)  # d = 0.4
    # item 0 taken at p = 0 (price up to 0.3); item 1: 0.2 > 0.3 * 0.5, taken (up to 0.35); item 2 fits but
    # 0.05 < 0.35 * 0.25, refused (down to 0.15); item 3 taken (0.15 + 0.5 (0.25 - 0.4)); item 4 does not fit
    assert np.allclose(traj, [0.0, 0.3, 0.35, 0.15, 0.075, 0.0])
    assert value == pytest.approx(0.9 + 0.2 + 0.5)


def _epoch_sim(arrival, s, o, B, **olp):
    """A ClusterSim of the OLP router on hand-made requests (exact predictions), T = 20, M = 200, reset."""
    arrival, s, o = (np.asarray(x, dtype=np.int64) for x in (arrival, s, o))
    w = task.Workload(arrival, s, o, o.copy(), arrival_steps=2, rate=1.0, noise=0.0)
    sim = task.ClusterSim(w, "olp", np.random.default_rng(0), G=2, B=B, M=200, drain=18,
                          olp=method.OLPConfig(**olp))
    sim._reset()
    return sim


def _epoch_d(U_B, U_M, B, rho, T=20, M=200):
    """Step 2 by hand: d^B = (B - U^B)^+ (1 + rho) / (N_hat R_bar), d^M the same on c_M (M - U^M)^+."""
    scale = (1.0 + rho) / (float(np.sum(B)) * T)
    return np.clip(np.asarray(B)[:, None] - U_B, 0, None) * scale, np.clip(M - U_M, 0, None) * scale / M


def test_olp_epoch_margin_is_reward_minus_price_minus_length_penalty(monkeypatch):
    """Epoch 2's margins m_jg = r~_j - a_jg^T p - lambda_len o_hat_j (-inf where infeasible), with p the
    dual update of epoch 1's history; its history holds epoch 1's best columns (g*, 0, L, s, r~)."""
    seen = []
    real = task.admit_by_margin

    def spy(margins, *args, **kwargs):
        seen.append(np.array(margins, dtype=float))
        return real(margins, *args, **kwargs)

    monkeypatch.setattr(task, "admit_by_margin", spy)
    sim = _epoch_sim([1, 1, 2, 2], [4, 6, 3, 5], [5, 3, 6, 4], B=[3, 1], beta=1.0, lambda_len=0.01, K=3, eta=0.05)
    sim.buffer = [0, 1]
    sim._scheduling_epoch(1)
    # epoch 1: no history, prices 0; r~ = (T - o_hat) / T, margins 0.75 - 0.05 and 0.85 - 0.03 on both workers
    assert np.allclose(seen[0], [[0.70, 0.70], [0.82, 0.82]])
    assert sim.buffer == [] and sim.worker[:2] == [0, 0]  # request 1 first, both on worker 0 (B_0 = 3)
    g, i0, L, s, r = sim.hist.arrays()
    assert g.tolist() == [0, 0] and i0.tolist() == [0, 0] and L.tolist() == [5, 3] and s.tolist() == [4, 6]
    assert np.allclose(r, [0.75, 0.85])
    U_B, U_M = sim.res.U_B.copy(), sim.res.U_M.copy()
    assert U_B[0, :6].tolist() == [2, 2, 2, 1, 1, 0]
    sim.buffer = [2, 3]
    sim._scheduling_epoch(2)
    d_B, d_M = _epoch_d(U_B, U_M, [3, 1], rho=2 / 4)
    cols = [(0, 0, 5, 4, 0.75), (0, 0, 3, 6, 0.85)]
    p_B, p_M, _ = _dual_reference(np.zeros((2, 20)), np.zeros((2, 20)), cols, d_B, d_M, 1 / 200, 0.05, [range(2)] * 3)
    assert np.allclose(sim.p_B, p_B, rtol=0, atol=1e-14) and np.allclose(sim.p_M, p_M, rtol=0, atol=1e-14)
    assert p_B[0, 1] > 0  # demand raised worker 0's prices
    # epoch 2 scores requests 2 and 3 at tau = 2 (i0 = 1): r~ = (T - (tau + o_hat - 1)) / T
    want = np.empty((2, 2))
    for row, (j, oh) in enumerate(((2, 6), (3, 4))):
        for worker in range(2):
            cost = _col_cost(p_B, p_M, (worker, 1, oh, [4, 6, 3, 5][j], 0.0), 1 / 200)
            want[row, worker] = (20 - (2 + oh - 1)) / 20 - cost - 0.01 * oh
    assert np.allclose(seen[1], want, rtol=0, atol=1e-12)
    assert np.all(want[:, 0] < want[:, 1])  # the priced worker is the worse one


def test_olp_epoch_halves_prices_without_candidates_and_warm_starts_the_next():
    """No feasible candidate: p <- p / 2 after the dual update (step 7); the next epoch starts from the
    halved prices with the same history (requests are recorded once)."""
    sim = _epoch_sim([1, 1, 1], [4, 6, 3], [5, 6, 7], B=[1, 1], K=2, eta=0.05)
    sim.buffer = [0, 1, 2]
    sim._scheduling_epoch(1)
    assert sim.buffer == [2] and sim.hist.n == 3 and np.all(sim.p_B == 0)
    cols = list(zip(*(a.tolist() for a in sim.hist.arrays())))  # (g, i0, L, s, r~) of requests 0, 1, 2
    p_B, p_M = np.zeros((2, 20)), np.zeros((2, 20))
    for k in (2, 3):
        U_B, U_M = sim.res.U_B.copy(), sim.res.U_M.copy()
        sim._scheduling_epoch(k)  # both workers busy: request 2 has no feasible worker
        d_B, d_M = _epoch_d(U_B, U_M, [1, 1], rho=1 / 3)
        p_B, p_M, _ = _dual_reference(p_B, p_M, cols, d_B, d_M, 1 / 200, 0.05, [range(3)] * 2)
        p_B, p_M = 0.5 * p_B, 0.5 * p_M
        assert sim.buffer == [2] and sim.hist.n == 3
        assert np.allclose(sim.p_B, p_B, rtol=0, atol=1e-14) and np.allclose(sim.p_M, p_M, rtol=0, atol=1e-14)
        assert p_B.max() > 0


def test_dual_update_on_the_history_span_equals_the_whole_horizon():
    """The epoch updates prices on [0, hist.end) only: with zero prices past the last column end, the
    whole-horizon update leaves them zero and gives the same prices before it."""
    rng = np.random.default_rng(3)
    h = method.History()
    h.add(rng.integers(0, 3, 40), rng.integers(0, 30, 40), rng.integers(1, 20, 40), rng.integers(0, 50, 40),
          rng.uniform(0, 1, 40))
    G, T, span = 3, 80, h.end
    assert span < T
    p_B, p_M = np.zeros((G, T)), np.zeros((G, T))
    p_B[:, :span], p_M[:, :span] = rng.uniform(0, 0.02, (G, span)), rng.uniform(0, 0.001, (G, span))
    d_B, d_M = rng.uniform(0, 0.01, (G, T)), rng.uniform(0, 0.01, (G, T))
    full = method.dual_update(p_B, p_M, h, d_B, d_M, 0.01, np.random.default_rng(5), K=4, eta=0.05, batch=16)
    part = method.dual_update(p_B[:, :span], p_M[:, :span], h, d_B[:, :span], d_M[:, :span], 0.01,
                              np.random.default_rng(5), K=4, eta=0.05, batch=16)
    assert np.all(full[0][:, span:] == 0) and np.all(full[1][:, span:] == 0)
    assert np.array_equal(full[0][:, :span], part[0]) and np.array_equal(full[1][:, :span], part[1])


def test_olp_run_keeps_prices_zero_past_the_history_span():
    sim = task.ClusterSim(small_workload(arrival_steps=200, rate=0.55), "olp", np.random.default_rng(0), G=2,
                          drain=400)
    sim.run()
    assert sim.hist.end < sim.T and sim.p_B[:, : sim.hist.end].max() > 0
    assert np.all(sim.p_B[:, sim.hist.end :] == 0) and np.all(sim.p_M[:, sim.hist.end :] == 0)


# ---- the LP pieces on hand-made edge cases (issue 44) ----------------------------------------


def test_action_column_past_the_horizon_is_empty():
    """K_{j tau} = {tau, ..., min(T, tau + o_hat - 1)} is empty for tau > T; the horizon step itself is kept."""
    a_B, a_M, steps = method.action_column(s=5, o_hat=4, tau=11, T=10)
    assert a_B.size == a_M.size == steps.size == 0
    a_B, a_M, steps = method.action_column(s=0, o_hat=3, tau=10, T=10)
    assert steps.tolist() == [10] and a_M.tolist() == [1] and a_B.tolist() == [1]
    assert steps.dtype == np.int64 and a_B.dtype == np.int64


def test_slo_reward_defaults_window_normaliser_and_broadcasting():
    """Defaults (alpha, beta, gamma, sigma, w_gp) = (0, 1, 0, 0, 0), W_gp = 20 (strict tau - t_j < W_gp),
    R_bar = T, clamped to >= 1; ft and gp broadcast to the requests' shape."""
    rw = method.slo_reward([5, 30], 3, [1, -20], 10)
    assert rw.thr.tolist() == [5, 8] and rw.comp.tolist() == [3, 0] and rw.ft.tolist() == [8, 8]
    assert rw.gp.tolist() == [1, 0] and rw.r.tolist() == [3, 0] and np.allclose(rw.r_norm, [0.3, 0.0])
    assert method.slo_reward(5, 3, [-17, -16], 10, w_gp=1.0, beta=0.0).r.tolist() == [0.0, 1.0]  # 20 vs 19
    assert method.slo_reward(5, 3, [-17, -16], 10, w_gp=1.0, beta=0.0, W_gp=21).r.tolist() == [1.0, 1.0]
    assert np.allclose(method.slo_reward(5, 3, 1, 10, R_bar=6.0).r_norm, 0.5)
    assert np.allclose(method.slo_reward(5, 3, 1, 10, beta=0.1, R_bar=0.5).r_norm, 0.3)  # R_bar clamped to 1
    assert np.allclose(method.slo_reward(5, 3, 1, 0.5, beta=0.0, sigma=0.3).r_norm, 0.3)  # T < 1 clamped too
    rw = method.slo_reward(np.array([[2], [9]]), np.array([1, 4, 12]), 1, 10, gamma=1.0, beta=0.0)
    assert rw.ft.shape == rw.gp.shape == rw.r.shape == (2, 3)
    assert rw.ft.tolist() == [[10, 7, 0]] * 2 and rw.gp.tolist() == [[1, 1, 1]] * 2
    assert rw.thr.tolist() == [[2, 2, 0], [9, 7, 0]] and rw.comp.tolist() == [[8, 5, 0], [1, 0, 0]]
    rw = method.slo_reward(4, 2, 2, 10, alpha=2.0, beta=0.0, gamma=0.0, sigma=0.25)
    assert float(rw.r) == pytest.approx(0.25 + 2 * 4) and float(rw.r_norm) == pytest.approx(0.825)


def test_price_prefix_by_hand_and_column_cost_reuses_a_given_prefix():
    """Prefix sums with a leading zero: cumsum p^B, cumsum p^M, cumsum (i p^M), i the 0-based step; a passed
    prefix is used as is."""
    p_B = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])
    p_M = np.array([[4.0, 5.0, 6.0], [0.5, 0.0, 2.0]])
    PB, PM, PK = method.price_prefix(p_B, p_M)
    assert PB.tolist() == [[0, 1, 3, 6], [0, 10, 30, 60]]
    assert PM.tolist() == [[0, 4, 9, 15], [0, 0.5, 0.5, 2.5]]
    assert PK.tolist() == [[0, 0, 5, 17], [0, 0, 0, 4]]
    # worker 1, tau = 2, o_hat = 5 (truncated to 2 steps), s = 3: (20 + c 0 * 4) + (30 + c 2 * 5)
    assert float(method.column_cost(p_B, p_M, 1, 3, 5, 2, 0.1)) == pytest.approx(50.0 + 0.1 * 10.0)
    other = method.price_prefix(2 * p_B, 3 * p_M)
    assert float(method.column_cost(p_B, p_M, 1, 3, 5, 2, 0.1, prefix=other)) == pytest.approx(100.0 + 0.3 * 10.0)
    # float-typed lengths and start steps are cast to integer steps
    assert float(method.column_cost(p_B, p_M, 1, 3, 5.0, 2.0, 0.1)) == pytest.approx(51.0)


def test_remaining_capacity_defaults_and_clamps():
    """d = (B - U)^+ (1 + kappa rho_b) / (max(1, N_hat) max(1, R_bar)); kappa defaults to 1."""
    U_B, U_M = np.array([[1, 5], [0, 2]]), np.array([[10, 50], [0, 30]])
    d_B, d_M = method.remaining_capacity(U_B, U_M, [4, 2], [40, 20], c_M=0.5, N_hat=0.5, R_bar=0.25, rho_b=0.5)
    assert d_B.tolist() == [[4.5, 0.0], [3.0, 0.0]]
    assert d_M.tolist() == [[0.5 * 30 * 1.5, 0.0], [0.5 * 20 * 1.5, 0.0]]
    d_B, _ = method.remaining_capacity(U_B, U_M, [4, 2], [40, 20], c_M=0.5, N_hat=2, R_bar=3, rho_b=0.5, kappa=2.0)
    assert np.allclose(d_B, [[1.0, 0.0], [2 / 3, 0.0]])


def test_history_grows_keeps_rows_and_tracks_the_end():
    """Appending past the capacity (also a batch larger than twice of it) keeps every row in order;
    ``end`` is the largest i0 + L seen; ``arrays(idx)`` picks rows; a zero capacity still works."""
    h = method.History(capacity=0)
    h.add(1, 3, 4, 7, 0.5)
    h.add([0, 2], [10, 0], [2, 1], [5, 6], [0.1, 0.2])
    assert h.n == 3 and h.end == 12
    h.add(np.arange(10) % 3, np.zeros(10, int), np.ones(10, int), np.arange(10), np.linspace(0, 1, 10))
    assert h.n == 13 and h.end == 12  # a smaller end does not lower it
    g, i0, L, s, r = h.arrays()
    assert g.tolist() == [1, 0, 2] + (np.arange(10) % 3).tolist() and i0.tolist()[:3] == [3, 10, 0]
    assert L.tolist()[:3] == [4, 2, 1] and s.tolist() == [7, 5, 6] + list(range(10))
    assert np.allclose(r[:3], [0.5, 0.1, 0.2]) and g.dtype == i0.dtype == L.dtype == np.int64
    g, i0, L, s, r = h.arrays([2, 0])
    assert g.tolist() == [2, 1] and s.tolist() == [6, 7] and np.allclose(r, [0.2, 0.5])
    big = method.History(capacity=2)
    big.add(np.zeros(9, int), np.arange(9), np.full(9, 2), np.zeros(9), np.ones(9))
    big.add(1, 20, 3, 4, 0.25)
    assert big.n == 10 and big.end == 23 and big.arrays()[1].tolist() == list(range(9)) + [20]
    empty = method.History()
    assert empty.arrays()[0].size == 0 and empty.n == 0 and empty.end == 0


def test_dual_update_clamps_steps_and_batch_and_has_the_documented_defaults():
    """K < 1 and batch < 1 mean one step of one column; the defaults are K = 5, eta = 0.01, batch = 64; a
    column with r~ = a^T p exactly is not active; Fortran-ordered prices give the same update."""
    p_B, p_M, h, d_B, d_M, c_M = _dual_setup()
    got = method.dual_update(p_B, p_M, h, d_B, d_M, c_M, np.random.default_rng(0), K=0, eta=0.1)
    want = _dual_reference(p_B, p_M, _DUAL_COLS, d_B, d_M, c_M, 0.1, [range(5)])
    assert np.allclose(got[0], want[0], rtol=0, atol=1e-14) and np.allclose(got[1], want[1], rtol=0, atol=1e-14)
    got = method.dual_update(p_B, p_M, h, d_B, d_M, c_M, np.random.default_rng(2), K=1, eta=0.1, batch=0)
    one = [np.random.default_rng(2).choice(5, size=1, replace=False).tolist()]
    want = _dual_reference(p_B, p_M, _DUAL_COLS, d_B, d_M, c_M, 0.1, one)
    assert np.allclose(got[0], want[0], rtol=0, atol=1e-14) and np.allclose(got[1], want[1], rtol=0, atol=1e-14)
    fortran = method.dual_update(np.asfortranarray(p_B), np.asfortranarray(p_M), h, d_B, d_M, c_M,
                                 np.random.default_rng(0), K=1, eta=0.1)
    want = _dual_reference(p_B, p_M, _DUAL_COLS, d_B, d_M, c_M, 0.1, [range(5)])
    assert np.allclose(fortran[0], want[0], rtol=0, atol=1e-14) and np.allclose(fortran[1], want[1], rtol=0, atol=1e-14)
    # defaults on a history of 70 columns: 5 steps of 64 drawn columns, eta = 0.01
    rng = np.random.default_rng(8)
    cols = [(int(rng.integers(2)), int(rng.integers(6)), int(rng.integers(1, 3)), int(rng.integers(4)),
             float(rng.uniform(0, 0.1))) for _ in range(70)]
    big = method.History()
    for col in cols:
        big.add(*col)
    got = method.dual_update(p_B, p_M, big, d_B, d_M, c_M, np.random.default_rng(1))
    draw = np.random.default_rng(1)
    want = _dual_reference(p_B, p_M, cols, d_B, d_M, c_M, 0.01,
                           [draw.choice(70, size=64, replace=False).tolist() for _ in range(5)])
    assert np.allclose(got[0], want[0], rtol=0, atol=1e-14) and np.allclose(got[1], want[1], rtol=0, atol=1e-14)
    # float32 prices and capacities are read in double precision
    d32_B = (d_B * np.linspace(0.3, 1.7, 8)).astype(np.float32)
    d32_M = (d_M * np.linspace(1.9, 0.2, 8)).astype(np.float32)
    got = method.dual_update(p_B.astype(np.float32), p_M.astype(np.float32), h, d32_B, d32_M, c_M,
                             np.random.default_rng(0), K=1, eta=0.1)
    want = _dual_reference(*(x.astype(np.float32).astype(float) for x in (p_B, p_M)), _DUAL_COLS,
                           d32_B.astype(float), d32_M.astype(float), c_M, 0.1, [range(5)])
    assert got[0].dtype == got[1].dtype == np.float64
    assert np.allclose(got[0], want[0], rtol=0, atol=1e-14) and np.allclose(got[1], want[1], rtol=0, atol=1e-14)
    # r~ = 0 = a^T p at zero prices: inactive, so only -eta d moves the (projected) prices
    zero = method.History()
    zero.add(0, 0, 2, 1, 0.0)
    z = np.zeros((1, 3))
    pz = method.dual_update(z, z, zero, -np.ones((1, 3)), -np.ones((1, 3)), 0.5, np.random.default_rng(0), K=1, eta=0.1)
    assert np.allclose(pz[0], 0.1) and np.allclose(pz[1], 0.1)
    # an empty history resets both price arrays to zeros of their shape; a full batch draws nothing from rng
    reset = method.dual_update(p_B, np.ones((2, 8)), method.History(), d_B, d_M, c_M, np.random.default_rng(0))
    assert all(isinstance(p, np.ndarray) and p.shape == (2, 8) and p.dtype == np.float64 and not p.any() for p in reset)
    draw = np.random.default_rng(5)
    method.dual_update(p_B, p_M, h, d_B, d_M, c_M, draw, K=3, eta=0.1, batch=64)
    assert draw.random() == np.random.default_rng(5).random()
    # a zero-length column last in the history: no entries, no subgradient, no error
    h.add(1, 3, 0, 2, 0.9)
    cols = _DUAL_COLS + [(1, 3, 0, 2, 0.9)]
    got = method.dual_update(p_B, p_M, h, d_B, d_M, c_M, np.random.default_rng(0), K=1, eta=0.1)
    want = _dual_reference(p_B, p_M, cols, d_B, d_M, c_M, 0.1, [range(6)])
    assert np.allclose(got[0], want[0], rtol=0, atol=1e-14) and np.allclose(got[1], want[1], rtol=0, atol=1e-14)


def test_reservations_release_clips_to_the_column_and_the_horizon():
    """release removes only entries in [max(a, i_start), min(b, T)) with the column's own KV ramp offsets."""
    res = method.Reservations(B=[3], M=[100], T=6)
    res.commit(0, 2, 5, 1)  # steps 1..5: U^M = 3, 4, 5, 6, 7
    assert res.U_M[0].tolist() == [0, 3, 4, 5, 6, 7] and res.U_B[0].tolist() == [0, 1, 1, 1, 1, 1]
    res.release(0, 2, 1, 0, 3)  # a before the start: from index 1
    assert res.U_M[0].tolist() == [0, 0, 0, 5, 6, 7] and res.U_B[0].tolist() == [0, 0, 0, 1, 1, 1]
    res.release(0, 2, 1, 4, 99)  # b past the horizon: to T
    assert res.U_M[0].tolist() == [0, 0, 0, 5, 0, 0] and res.U_B[0].tolist() == [0, 0, 0, 1, 0, 0]
    res.release(0, 2, 1, 3, 3)  # empty range: nothing
    res.release(0, 2, 1, 4, 2)
    assert res.U_M[0].tolist() == [0, 0, 0, 5, 0, 0]
    res.release(0, 2, 1, 3, 4)
    assert not res.U_M.any() and not res.U_B.any()
    # prefix maxima of one worker's row, and the feasibility check with precomputed maxima
    res = method.Reservations(B=[2, 2], M=[20, 20], T=6)
    res.commit(1, 4, 3, 0)  # U^M = 5, 6, 7
    ub, um = res.prefix_max(0, 4, 1)
    assert ub.tolist() == [1, 1, 1, 1] and um.tolist() == [5, 7, 9, 9]
    cm = res.prefix_max(0, 4)
    assert res.feasible([10, 11], [4, 4], 0, cm=cm).tolist() == [[True, True], [True, False]]
    assert res.feasible(np.array([10.0, 11.0]), np.array([4.0, 4.0]), 0).tolist() == [[True, True], [True, False]]
    assert res.U_B.dtype == res.U_M.dtype == np.int64  # integer slot and token counts
    assert method.Reservations(B=[2.0], M=[20.0], T=3).B.dtype == method.Reservations([2.0], [20.0], 3).M.dtype == np.int64


def test_admit_by_margin_breaks_ties_by_arrival_then_id_then_worker_and_needs_margin_above_eps():
    """Candidates have m > eps strictly; equal margins and arrivals go by request id (ids, else the row),
    then by worker."""
    margins = np.array([[0.4, 0.4], [0.4, 0.4], [0.1, 0.3]])
    for ids, want in ((None, [(0, 0), (1, 1)]), ([9, 2, 5], [(1, 0), (0, 1)])):
        res = method.Reservations(B=[1, 1], M=[50, 50], T=5)
        adm, n = method.admit_by_margin(margins, [3, 3, 3], 0.1, res, [1, 1, 1], [1, 1, 1], 0, ids=ids)
        assert adm == want and n == 5  # 0.1 is not above eps = 0.1
    res = method.Reservations(B=[1, 1], M=[50, 50], T=5)
    adm, n = method.admit_by_margin(np.full((2, 2), 0.2), [1, 1], 0.2, res, [1, 1], [1, 1], 0)
    assert adm == [] and n == 0 and not res.U_B.any()
    # a single candidate is admitted; float-typed lengths are read as integer steps
    adm, n = method.admit_by_margin([[0.5, -np.inf]], [1], 0.0, res, [2], [3.0], 0)
    assert adm == [(0, 0)] and n == 1 and res.U_M[0, :4].tolist() == [3, 4, 5, 0]
    # the KV check is "fits exactly": ramp s + 1 .. s + L up to M = 5 is admitted, one token more is not
    res = method.Reservations(B=[3], M=[5], T=5)
    adm, _ = method.admit_by_margin([[0.9], [0.8]], [1, 1], 0.0, res, [2, 0], [3, 3], 0)
    assert adm == [(0, 0)] and res.U_M[0].tolist() == [3, 4, 5, 0, 0]
    res = method.Reservations(B=[3], M=[5], T=5)
    assert method.admit_by_margin([[0.9]], [1], 0.0, res, [3], [3], 0)[0] == []


def test_olp_config_documented_defaults():
    """The hyperparameters' defaults as documented; a single given weight leaves the others at 0."""
    c = method.OLPConfig()
    assert (c.sigma, c.w_gp, c.W_gp, c.K, c.eta, c.batch) == (0.0, 0.0, 20, 5, 0.01, 64)
    assert (c.mem_scale_factor, c.kappa, c.varsigma, c.lambda_len, c.max_waiting, c.R_bar) == (1.0, 1.0, 1.0, 0.0, 64, None)
    assert (method.OLPConfig(beta=2).alpha, method.OLPConfig(beta=2).beta, method.OLPConfig(beta=2).gamma) == (0.0, 2.0, 0.0)
    c = method.OLPConfig(gamma=0.5, alpha=0.25)
    assert (c.alpha, c.beta, c.gamma) == (0.25, 0.0, 0.5) and isinstance(c.beta, float)


def test_knapsack_price_step_by_hand():
    """max(0, p + eta (a x - d)): up when the item is taken, projected at zero when it is not."""
    assert method.knapsack_price_step(0.3, 2.0, 1, 0.5, 0.1) == pytest.approx(0.45)
    assert method.knapsack_price_step(0.3, 2.0, 0, 0.5, 0.1) == pytest.approx(0.25)
    assert method.knapsack_price_step(0.01, 2.0, 0, 0.5, 0.1) == 0.0
