"""Unit tests of replib.papers.rast_moe (grid city, sparse MoE encoder, adaptive reward, PPO, claims)."""

import copy

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from replib import core
from replib.core.paths import repo_root
from replib.core.runtime import compute_threads
from replib.papers.rast_moe import baselines, exercises, experiment, method, task, theory

# ---- the city ----------------------------------------------------------------------------------


def test_match_released_is_the_min_distance_assignment_within_the_radius():
    req = np.array([[0.0, 0.0], [3.0, 3.0]])
    veh = np.array([[0.5, 0.0], [0.2, 0.1], [3.0, 2.0]])
    r, v, d = task.match_released(req, veh)
    assert list(zip(r.tolist(), v.tolist())) == [(0, 1), (1, 2)] and np.allclose(d, [0.3, 1.0])
    # greedy would give request 0 the vehicle at distance 0.1 and leave request 1 with 2.9 km;
    # the assignment minimises the total instead
    r, v, d = task.match_released(np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([[0.9, 0.0], [2.0, 0.0]]))
    assert np.isclose(d.sum(), 0.9 + 1.0) and sorted(v.tolist()) == [0, 1]
    r, v, d = task.match_released(np.array([[0.0, 0.0]]), np.array([[2.0, 1.0]]))  # 3 km > 2.5
    assert len(r) == 0
    r, v, d = task.match_released(np.zeros((0, 2)), veh)
    assert len(r) == 0


def test_speed_factor_and_schedule():
    assert task.speed_factor(0.0, "offpeak") == 1.0
    assert np.isclose(task.speed_factor(0.5, "peak_corner"), 1 - 0.6 / task.RHO_JAM) and task.RHO_JAM == 1.5
    assert task.speed_factor(10.0, "offpeak") == 0.2
    cfg = task.CityConfig(epochs=8)
    assert task.day_schedule(cfg) == ["offpeak"] * 2 + ["peak_center"] * 2 + ["offpeak"] * 2 + ["peak_corner"] * 2
    unseen = task.day_schedule(task.CityConfig(epochs=8, unseen=True))
    assert set(unseen) == {"offpeak", "peak_edge"}
    seen_hot = task.hotspot_zones("peak_center", 4) | task.hotspot_zones("peak_corner", 4)
    edge = task.hotspot_zones("peak_edge", 4)
    assert task.hotspot_zones("peak_center", 4).sum() == 4 and edge.sum() == 4 and not (edge & seen_hot).any()


def test_env_hold_all_then_release_and_determinism():
    cfg = task.CityConfig(epochs=12)
    env = task.RideHailingEnv(cfg)
    env.reset(np.random.default_rng(3))
    waiting = len(env.req_zone)
    info = env.step(np.zeros(cfg.zones, dtype=int))
    assert info.held == waiting and info.pickup.size == 0 and info.held_z.sum() == waiting
    assert info.abandoned == 0
    info = env.step(np.ones(cfg.zones, dtype=int))
    assert info.pickup.size > 0 and np.isclose(info.pickup_z.sum(), info.pickup.sum())
    assert np.all(info.match_delay >= 0) and np.all(info.match_delay % task.DT == 0)
    a = task.episode_metrics(task.run_episode(env, task.fixed_interval_policy(2), np.random.default_rng(5)))
    b = task.episode_metrics(task.run_episode(env, task.fixed_interval_policy(2), np.random.default_rng(5)))
    assert a == b


def test_holding_everything_makes_every_request_abandon():
    cfg = task.CityConfig(epochs=24)
    env = task.RideHailingEnv(cfg)
    infos = task.run_episode(env, lambda env, obs: np.zeros(cfg.zones, dtype=int), np.random.default_rng(0))
    m = task.episode_metrics(infos)
    # patience 600 s = 20 epochs of 30 s: a request of epoch a is held at decisions a, ..., a + 19 and
    # leaves at a + 19 <= 23
    assert task.PATIENCE / task.DT == 20
    arrived_early = sum(i.arrived for i in infos[: 24 - 19])
    assert m["matched"] == 0 and sum(i.abandoned for i in infos) == arrived_early


def test_evaluation_reward_by_hand():
    info = task.StepInfo(held=3, pickup=np.array([120.0, 60.0]), match_delay=np.zeros(2), abandoned=1, arrived=4,
                         regime="offpeak", held_z=np.zeros(16), pickup_z=np.zeros(16), abandoned_z=np.zeros(16))
    assert np.isclose(task.evaluation_reward(info), -(3 * task.DT + 180 + 600) / 600)


def test_city_wide_reward_charges_every_zone_the_whole_city():
    """The training reward of every zone is Eq. (5) on the city's totals: a zone with no requests of
    its own still pays for the pickups and abandonments elsewhere (the externality)."""
    held_z, pickup_z, abandoned_z = np.zeros(16), np.zeros(16), np.zeros(16)
    held_z[0], pickup_z[1], abandoned_z[2] = 3, 240.0, 1
    info = task.StepInfo(held=3, pickup=np.array([240.0]), match_delay=np.zeros(1), abandoned=1, arrived=2,
                         regime="offpeak", held_z=held_z, pickup_z=pickup_z, abandoned_z=abandoned_z)
    r = experiment.reward_of(info, 1.0, 1.0, 2.0)
    assert r.shape == (16,) and np.allclose(r, -(3 * task.DT + 240.0) / task.C0 - 2.0)
    fixed = experiment.reward_of(info, 2 / 9, 16 / 9, 0.0)
    assert np.allclose(fixed, -(2 / 9 * 3 * task.DT + 16 / 9 * 240.0) / task.C0)


def test_state_has_no_clock_and_peak_trips_stay_local():
    """The global features are the same at two times of day when the city is in the same state (no
    clock); in a peak every destination lies within peak_trip_km of its origin."""
    cfg = task.CityConfig()
    env = task.RideHailingEnv(cfg)
    env.reset(np.random.default_rng(0))
    _, early = env.observe()
    env.t = 37  # same vehicles, requests and speed, another time of day
    _, late = env.observe()
    assert np.allclose(early, late)
    env.reset(np.random.default_rng(1))
    env.t = cfg.epochs // 4  # the central peak
    env.req_xy = np.zeros((0, 2)); env.req_dest = np.zeros((0, 2))  # noqa: E702
    env.req_zone = np.zeros(0, dtype=int); env.req_wait = np.zeros(0)  # noqa: E702
    env._arrive()
    assert env.regime == "peak_center" and len(env.req_xy) > 0
    assert np.all(np.abs(env.req_dest - env.req_xy) <= cfg.peak_trip_km + 1e-12)


def test_regime_switching_policy_reads_the_regime():
    env = task.RideHailingEnv(task.CityConfig())
    obs = env.reset(np.random.default_rng(0))
    policy = task.regime_switching_policy(1, 4)
    env.t = 2  # off-peak: every epoch
    assert policy(env, obs).all()
    env.t = env.cfg.epochs // 4 + 1  # central peak, t % 4 == 1: hold
    assert not policy(env, obs).any()
    env.t = env.cfg.epochs // 4 + 3  # t % 4 == 3: release
    assert policy(env, obs).all()


def test_fixed_interval_and_threshold_policies():
    env = task.RideHailingEnv(task.CityConfig())
    obs = env.reset(np.random.default_rng(0))
    env.t = 2
    assert task.fixed_interval_policy(3)(env, obs).all() and not task.fixed_interval_policy(2)(env, obs).any()
    zone_feats = np.zeros((16, task.N_ZONE_FEATURES), dtype=np.float32)
    zone_feats[0, 0], zone_feats[0, 3] = 2 / 5, 1 / 20  # 2 waiting, 1 idle nearby: release
    zone_feats[1, 0], zone_feats[1, 3] = 1 / 5, 3 / 20  # 1 waiting, 3 nearby, fresh: hold
    zone_feats[2, 0], zone_feats[2, 1], zone_feats[2, 3] = 1 / 5, 0.3, 3 / 20  # waited 180 s: release
    action = task.threshold_policy()(env, (zone_feats, None))
    assert action[:3].tolist() == [1, 0, 1]


# ---- the method ----------------------------------------------------------------------------------


def test_factorised_log_prob_and_entropy_by_hand():
    logits = torch.tensor([[0.0, 2.0, -1.0]])
    actions = torch.tensor([[1.0, 0.0, 1.0]])
    sig = 1 / (1 + np.exp(-np.array([0.0, 2.0, -1.0])))
    by_hand = np.log(sig[0]) + np.log(1 - sig[1]) + np.log(sig[2])
    assert np.isclose(method.factorised_log_prob(logits, actions).item(), by_hand, atol=1e-6)
    live = torch.tensor([[0.0, 1.0, 0.0]])
    assert np.isclose(method.factorised_log_prob(logits, actions, live).item(), np.log(1 - sig[1]), atol=1e-6)
    ent = -(sig * np.log(sig) + (1 - sig) * np.log(1 - sig)).sum()
    assert np.isclose(method.factorised_entropy(logits).item(), ent, atol=1e-6)


def test_route_keeps_top_k_renormalised_and_respects_the_mask():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    q, gates, idx = method.route(logits, 2)
    p = np.exp([0.0, 1.0, 2.0, 3.0]) / np.exp([0.0, 1.0, 2.0, 3.0]).sum()
    assert np.allclose(q.numpy(), p, atol=1e-6)
    assert np.allclose(gates.numpy(), [[0, 0, p[2] / (p[2] + p[3]), p[3] / (p[2] + p[3])]], atol=1e-6)
    assert idx.tolist() == [[3, 2]]
    _, gates, idx = method.route(logits, 2, mask=torch.tensor([True, True, True, False]))
    assert gates[0, 3] == 0 and set(idx[0].tolist()) == {1, 2}


def test_sparse_moe_uses_only_the_chosen_experts_and_the_same_for_every_token():
    torch.manual_seed(0)
    moe = method.SparseMoE(d=8, d_ff=16, n_experts=6, k=2)
    h = torch.randn(2, 5, 8)
    out, aux = moe(h)
    chosen = set(torch.nonzero(aux["gates"] > 0)[:, 1].tolist())
    unused = sorted(set(range(6)) - chosen)
    assert len(unused) >= 2  # two states choose at most 4 of the 6 experts
    with torch.no_grad():
        for e in unused:
            moe.w1[e] *= 2.0
        assert torch.allclose(moe(h)[0], out)
        moe.w1[min(chosen)] *= 2.0
        assert not torch.allclose(moe(h)[0], out)
    # one state: its output equals the gate-weighted sum of its two experts' FFNs, computed by hand
    with torch.no_grad():
        x = moe.norm(h[:1])
        _, gates, idx = method.route(moe.router(h[:1].mean(1)), 2)
        manual = h[:1].clone()
        for e in idx[0].tolist():
            y = torch.nn.functional.gelu(x @ moe.w1[e] + moe.b1[e]) @ moe.w2[e] + moe.b2[e]
            manual += gates[0, e] * y
        assert torch.allclose(moe(h[:1])[0], manual, atol=1e-5)


def test_load_balancing_loss_uniform_and_collapsed():
    assert np.isclose(method.load_balancing_loss(torch.full((4, 4), 0.25), torch.tensor([0, 1, 2, 3])).item(), 1.0)
    collapsed = method.load_balancing_loss(torch.tensor([[1.0, 0.0, 0.0]] * 5), torch.zeros(5, dtype=torch.long))
    assert np.isclose(collapsed.item(), 3.0)
    probs = torch.tensor([[0.7, 0.3], [0.4, 0.6]])
    assert np.isclose(method.load_balancing_loss(probs, torch.tensor([0, 0])).item(), 2 * (1.0 * 0.55 + 0 * 0.45))


def test_shaped_reward_and_lambda_update_by_hand():
    r = method.shaped_reward(np.array([120.0, 0.0]), np.array([300.0, 60.0]), np.array([0, 2]), w_match=0.5,
                             w_pickup=2.0, lam=1.5, c0=600.0)
    assert np.allclose(r, [-(0.5 * 120 + 2 * 300) / 600, -(2 * 60) / 600 - 3.0])
    assert np.isclose(method.update_lambda(1.0, 0.10, 0.05, 10.0), 1.5)
    assert np.isclose(method.update_lambda(1.0, 0.0, 0.05, 10.0), 0.5)
    assert method.update_lambda(0.2, 0.0, 0.05, 10.0) == 0.0


def test_gae_by_hand():
    rewards = np.array([[1.0], [2.0], [0.0]])
    values = np.array([[0.5], [1.0], [0.2]])
    adv, ret = method.gae(rewards, values, gamma=0.9, lam=0.5)
    d2 = 0.0 - 0.2
    d1 = 2.0 + 0.9 * 0.2 - 1.0
    d0 = 1.0 + 0.9 * 1.0 - 0.5
    assert np.allclose(adv[:, 0], [d0 + 0.45 * d1 + 0.45**2 * d2, d1 + 0.45 * d2, d2])
    assert np.allclose(ret, adv + values)


def test_encoders_shapes_and_mlp_is_the_baseline():
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS)
    zone = torch.zeros(2, 16, task.N_ZONE_FEATURES)
    glob = torch.zeros(2, task.N_GLOBAL_FEATURES)
    for name in ("mlp", "transformer", "moe"):
        policy = experiment.make_agent(name, cfg, seed=0, zones=16)
        logits, value, aux = policy(zone, glob)
        assert logits.shape == (2, 16) and value.shape == (2, 16)
        assert ("top1" in aux) == (name == "moe")
    assert isinstance(experiment.make_agent("mlp", cfg, 0, 16), baselines.MLPEncoder)
    a = experiment.make_agent("moe", cfg, seed=4, zones=16)
    b = experiment.make_agent("moe", cfg, seed=4, zones=16)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_train_ppo_moves_lambda_by_eq6_and_is_deterministic():
    city = task.CityConfig(epochs=8)
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS, iterations=2, n_envs=2)
    with compute_threads(1):
        _, h1 = experiment.train_agent("moe", cfg, seed=1, city=city)
        _, h2 = experiment.train_agent("moe", cfg, seed=1, city=city)
        _, fixed = experiment.train_agent("moe_fixed_1_8", cfg, seed=1, city=city)
    assert h1 == h2
    assert np.isclose(h1[1]["lam"], max(0.0, h1[0]["lam"] + cfg.eta * (h1[0]["violation"] - cfg.tolerance)))
    assert all(row["lam"] == 0.0 for row in fixed)


# ---- theory and exercises -------------------------------------------------------------------------


def test_theory_helpers():
    counts = theory.moe_parameter_counts(d=4, d_ff=8, n_experts=3, k=2)
    expert = 4 * 8 + 8 + 8 * 4 + 4
    assert counts == {"total": 3 * expert + 4 * 3 + 8, "active": 2 * expert + 4 * 3 + 8, "dense_ffn": expert + 8}
    # the counts match the block as built
    assert counts["total"] == sum(p.numel() for p in method.SparseMoE(4, 8, 3, 2).parameters())
    run = theory.dual_ascent_bandit(lam0=0.0, eta=5.0, iterations=300)
    assert abs(run["violation"][-1] - 0.05) < 0.01 and run["lam"][-1] > 0
    assert np.isclose(theory.dual_ascent_bandit(0.0, 0.0, 3, fixed=True)["violation"][-1], 0.15, atol=0.01)


def test_graders_accept_the_reference_and_reject_a_wrong_answer():
    exercises.check_topk_gates(lambda z, k: method.route(torch.as_tensor(z, dtype=torch.float32), k)[1])
    with pytest.raises(AssertionError):  # no renormalisation
        exercises.check_topk_gates(lambda z, k: method.route(torch.as_tensor(z, dtype=torch.float32), k)[0])
    exercises.check_load_balancing_loss(lambda p, t: method.load_balancing_loss(torch.as_tensor(p), torch.as_tensor(t)))
    with pytest.raises(AssertionError):  # missing the factor E
        exercises.check_load_balancing_loss(
            lambda p, t: method.load_balancing_loss(torch.as_tensor(p), torch.as_tensor(t)) / np.shape(p)[1])


def test_bounds_refuse_bad_settings():
    with pytest.raises(ValueError):
        core.configure(experiment.EXPERIMENT_PROFILES, "book", experiment.EXPERIMENT_BOUNDS, iterations=-5)
    with pytest.raises(ValueError):
        core.configure(experiment.EXPERIMENT_PROFILES, "book", experiment.EXPERIMENT_BOUNDS, tolerance=2.0)
    keys = [set(p) for p in experiment.EXPERIMENT_PROFILES.values()]
    assert keys[0] == keys[1] == keys[2]


# ---- claim values on hand-made results -------------------------------------------------------------


def _row(seed, policy, condition, reward, md=60.0, pd_=200.0, ab=0.04):
    return dict(seed=seed, policy=policy, condition=condition, reward=reward, match_delay=md, pickup_delay=pd_,
                abandon_rate=ab, matched=100.0)


def _hand_results():
    rows = []
    for seed, shift in ((0, 0.0), (1, 10.0)):
        seen = {"interval_1": -100.0, "interval_2": -95.0 - shift, "interval_3": -98.0, "interval_4": -105.0,
                "interval_6": -120.0, "interval_8": -125.0, "threshold": -110.0}
        for name, reward in seen.items():
            rows.append(_row(seed, name, "seen", reward))
            rows.append(_row(seed, name, "unseen", reward - 50))
        # the oracle reads the regime label: never the strongest baseline, even when it is the best arm
        rows.append(dict(_row(seed, "oracle", "seen", -85.0 - 5 * seed), pair=("oracle_1_3", "oracle_3_8")[seed]))
        rows.append(_row(seed, "mlp", "seen", -94.0, md=50.0, pd_=190.0))           # strongest when seed 0
        rows.append(_row(seed, "transformer", "seen", -96.0 + shift * 2, md=40.0, pd_=210.0))  # strongest seed 1
        rows.append(_row(seed, "moe", "seen", -90.0, md=45.0, pd_=180.0, ab=0.06 + 0.03 * seed))
        rows.append(_row(seed, "moe_fixed_1_8", "seen", -150.0, md=20.0, pd_=90.0, ab=0.10 - 0.05 * seed))
        rows.append(_row(seed, "mlp", "unseen", -160.0))
        rows.append(_row(seed, "transformer", "unseen", -150.0))
        rows.append(_row(seed, "moe", "unseen", -147.0 - shift))
    regimes = []
    for seed in (0, 1):
        for h, (off, corner) in {1: (-20.0, -40.0), 2: (-21.0, -38.0), 3: (-22.0, -36.0 + seed * 3),
                                 4: (-24.0, -37.0), 6: (-30.0, -45.0)}.items():
            regimes += [dict(seed=seed, policy=f"interval_{h}", regime="offpeak", reward=off),
                        dict(seed=seed, policy=f"interval_{h}", regime="peak_corner", reward=corner)]
    routing = pd.DataFrame({"seed": [0] * 4 + [1] * 4,
                            "regime": ["offpeak", "offpeak", "peak_center", "peak_center"] * 2,
                            "top1": [0, 0, 1, 1, 2, 2, 2, 2], "top1_initial": [3, 3, 3, 3, 0, 0, 1, 1]})
    masks = pd.DataFrame([dict(seed=0, masked="most", reward=-99.0), dict(seed=0, masked="least", reward=-90.0),
                          dict(seed=1, masked="most", reward=-91.8), dict(seed=1, masked="least", reward=-89.1)])
    return {"evals": pd.DataFrame(rows), "regimes": pd.DataFrame(regimes), "routing": routing, "masks": masks}


def test_claim_values_on_hand_made_results():
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "book", experiment.EXPERIMENT_BOUNDS, seeds=[0, 1])
    values = experiment.claim_values(_hand_results(), cfg)
    claims = yaml.safe_load((repo_root() / "notebooks" / "rast_moe" / "chapter.yml").read_text())["claims"]
    assert set(values) == {0, 1}
    assert set(values[0]) == {c["id"] for c in claims}
    v0, v1 = values[0], values[1]
    # premise: the oracle's pair, peak interval minus off-peak interval (3 - 1; 8 - 3)
    assert v0["pr1_regime_dependent_optimum"] == 2.0 and v1["pr1_regime_dependent_optimum"] == 5.0
    # headroom: oracle (-85, -90) over interval_1 (-100)
    assert np.isclose(v0["p0_headroom_holding"], 0.15) and np.isclose(v1["p0_headroom_holding"], 0.10)
    # best fixed: seed 0 interval_2 at -95; seed 1 interval_3 at -98 (interval_2 is -105)
    assert np.isclose(v0["m1_oracle_over_best_fixed"], 10 / 95) and np.isclose(v1["m1_oracle_over_best_fixed"], 8 / 98)
    # p1: the better of MLP (-94) and Transformer (-96; seed 1: -76); p2: the worst of the three learners
    assert np.isclose(v0["p1_some_agent_beats_fixed"], 1 / 95) and np.isclose(v1["p1_some_agent_beats_fixed"], 22 / 98)
    assert np.isclose(v0["p2_every_agent_learns"], -1 / 95) and np.isclose(v1["p2_every_agent_learns"], 4 / 98)
    assert np.isclose(v0["c1_learned_holding"], 1 / 95) and np.isclose(v1["c1_learned_holding"], 4 / 98)
    # the untrained router's control: seed 0 sends everything to expert 3 (NMI 0), seed 1 splits (NMI 1)
    assert np.isclose(v0["m2_untrained_router_nmi"], 0.0) and np.isclose(v1["m2_untrained_router_nmi"], 1.0)
    # strongest baseline: seed 0 the MLP (-94), seed 1 the Transformer (-76)
    assert np.isclose(v0["h1_reward_vs_strongest"], (-90 + 94) / 94)
    assert np.isclose(v1["h1_reward_vs_strongest"], (-90 + 76) / 76)
    assert np.isclose(v0["h2_match_delay"], 45 / 50) and np.isclose(v1["h2_match_delay"], 45 / 40)
    assert np.isclose(v0["h3_pickup_delay"], 180 / 190) and np.isclose(v1["h3_pickup_delay"], 180 / 210)
    # unseen: min over the Transformer (-150) and the MLP (-160)
    assert np.isclose(v0["c2_unseen_regime"], (-147 + 150) / 150)
    assert np.isclose(v1["c2_unseen_regime"], (-157 + 150) / 150)
    # routing: seed 0 maps regimes one-to-one onto experts (NMI 1), seed 1 sends all to one (NMI 0)
    assert np.isclose(v0["c3a_expert_specialisation"], 1.0) and np.isclose(v1["c3a_expert_specialisation"], 0.0)
    assert np.isclose(v0["c3b_mask_most_used"], (-90 + 99) / 90) and np.isclose(v0["c3c_mask_least_used"], 0.0)
    assert np.isclose(v1["c3b_mask_most_used"], (-90 + 91.8) / 90)
    assert np.isclose(v1["c3c_mask_least_used"], (-90 + 89.1) / 90)
    assert np.isclose(v0["c4a_adaptive_violation"], 0.01) and np.isclose(v1["c4a_adaptive_violation"], 0.04)
    # 1:8: seed 0 abandons 10% (0.10 - 0.07 = 0.03 > delay term 110/225 - 1.05 < 0); seed 1 abandons 5%
    assert np.isclose(v0["c4b_fixed_ratio_hacks"], 0.03)
    assert np.isclose(v1["c4b_fixed_ratio_hacks"], max(0.05 - 0.07, 110 / 225 - 1.05))


# ---- update steps: direction, parts, second step ---------------------------------------------------


@pytest.fixture
def one_torch_thread():
    """The update-step tests below run on one torch thread (tiny tensors; fast and deterministic)."""
    from replib.core.runtime import compute_threads

    with compute_threads(1):
        yield


def _tiny_moe(seed=0):
    return method.RastEncoder(task.N_ZONE_FEATURES, task.N_GLOBAL_FEATURES, d=8, layers=1, heads=2, d_ff=16,
                              n_experts=4, k=2, seed=seed)


def _ppo_parts_by_hand(policy, b, clip_eps):
    """(policy loss, value loss, entropy, balance) of a minibatch, written out: the clipped surrogate
    on each live zone's Bernoulli log-probability (weighted mean over live zones), the MSE of the zone
    values, the mean over states of the summed live-zone entropies, and E sum_e f_e qbar_e."""
    logits, value, aux = policy(b["zone"], b["glob"])
    a, live, adv = b["action"], b["live"], b["adv"]
    logp = a * torch.nn.functional.logsigmoid(logits) + (1 - a) * torch.nn.functional.logsigmoid(-logits)
    ratio = torch.exp(logp - b["logp"])
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    policy_loss = -(live * surrogate).sum() / live.sum()
    value_loss = ((value - b["ret"]) ** 2).mean()
    p = torch.sigmoid(logits)
    bern = -(p * torch.nn.functional.logsigmoid(logits) + (1 - p) * torch.nn.functional.logsigmoid(-logits))
    entropy = (bern * live).sum(-1).mean()
    q, top1 = aux["router_probs"], aux["top1"]
    n_exp = q.shape[1]
    balance = n_exp * (torch.nn.functional.one_hot(top1, n_exp).float().mean(0) * q.mean(0)).sum()
    return policy_loss, value_loss, entropy, balance


def _rollout_data(policy, T=3, N=2, Z=16, seed=0):
    """collect_rollouts-shaped data (T, N, ...) with random features, actions and rewards; logp and value
    are the policy's own (as when sampled), a few zones not live."""
    gen = torch.Generator().manual_seed(seed)
    zone = torch.rand(T, N, Z, task.N_ZONE_FEATURES, generator=gen)
    zone[..., 0] = (torch.rand(T, N, Z, generator=gen) < 0.75).float() * zone[..., 0]
    glob = torch.rand(T, N, task.N_GLOBAL_FEATURES, generator=gen)
    action = (torch.rand(T, N, Z, generator=gen) < 0.5).float()
    with torch.no_grad():
        logits, value, _ = policy(zone.reshape(T * N, Z, -1), glob.reshape(T * N, -1))
        logp = method.zone_log_probs(logits, action.reshape(T * N, Z)).reshape(T, N, Z)
    return {"zone": zone.numpy(), "glob": glob.numpy(), "live": (zone[..., 0] > 0).float().numpy(),
            "action": action.numpy(), "logp": logp.numpy(), "value": value.reshape(T, N, Z).numpy(),
            "reward": -torch.rand(T, N, Z, generator=gen).numpy() * 3}


def _hand_batch(data, ppo):
    """The whole batch ppo_update trains on, built by hand: GAE as the explicit discounted sum of TD
    errors, returns = A + V, advantages standardised over live zones (unbiased std)."""
    r, v = ppo.reward_scale * data["reward"].astype(np.float64), data["value"].astype(np.float64)
    T = len(r)
    v_next = np.concatenate([v[1:], np.zeros_like(v[:1])])
    delta = r + ppo.gamma * v_next - v
    adv = np.stack([sum((ppo.gamma * ppo.gae_lambda) ** (s - t) * delta[s] for s in range(t, T)) for t in range(T)])
    live = data["live"].reshape(-1, data["live"].shape[-1]).astype(bool)
    a = adv.reshape(live.shape)
    norm = (a - a[live].mean()) / (a[live].std(ddof=1) + 1e-8)

    def flat(x):
        return torch.as_tensor(np.asarray(x).reshape(-1, *np.shape(x)[2:]), dtype=torch.float32)

    return {"zone": flat(data["zone"]), "glob": flat(data["glob"]), "action": flat(data["action"]),
            "live": flat(data["live"]), "logp": flat(data["logp"]), "ret": flat(adv + v), "adv": flat(norm.reshape(adv.shape))}


def test_ppo_loss_is_the_weighted_sum_of_its_parts(one_torch_thread):
    """ppo_loss = policy + c_v value - c_H entropy + c_b balance, every part recomputed by hand (with an
    old log-probability that puts some ratios outside the trust region); the balance term enters with
    a plus sign and its coefficient, and the dense encoder has no balance part."""
    torch.manual_seed(0)
    policy = _tiny_moe(1)
    data = _rollout_data(policy, seed=1)
    data["logp"] = data["logp"] + np.random.default_rng(0).normal(0, 0.3, data["logp"].shape).astype(np.float32)
    batch = _hand_batch(data, method.PPOConfig())
    pl, vl, ent, bal = _ppo_parts_by_hand(policy, batch, 0.2)
    loss, parts = method.ppo_loss(policy, batch, 0.2, value_coef=0.5, entropy_coef=0.1, balance_coef=0.3)
    assert parts["policy"] == pytest.approx(pl.item(), rel=1e-5, abs=1e-7)
    assert parts["value"] == pytest.approx(vl.item(), rel=1e-5)
    assert parts["entropy"] == pytest.approx(ent.item(), rel=1e-5)
    assert parts["balance"] == pytest.approx(bal.item(), rel=1e-5) and bal.item() >= 1.0
    assert loss.item() == pytest.approx((pl + 0.5 * vl - 0.1 * ent + 0.3 * bal).item(), rel=1e-5)
    loss2, _ = method.ppo_loss(policy, batch, 0.2, value_coef=0.5, entropy_coef=0.1, balance_coef=1.3)
    assert loss2.item() - loss.item() == pytest.approx(bal.item(), rel=1e-4)
    dense = method.RastEncoder(task.N_ZONE_FEATURES, task.N_GLOBAL_FEATURES, d=8, layers=1, heads=2, d_ff=16, seed=1)
    _, parts = method.ppo_loss(dense, batch, 0.2)
    assert "balance" not in parts


def test_load_balancing_loss_gradient_spreads_the_router(one_torch_thread):
    """A gradient step on L_bal lowers the mean router probability of the overloaded expert (the one
    most states pick first): descending it balances the load."""
    logits = torch.tensor([[2.0, 0.5, 0.1, 0.0], [1.5, 0.2, 0.3, 0.1], [0.1, 1.0, 0.2, 0.0]], requires_grad=True)
    q = torch.softmax(logits, -1)
    top1 = q.argmax(-1)
    loss = method.load_balancing_loss(q, top1)
    (grad,) = torch.autograd.grad(loss, logits)
    after = torch.softmax(logits.detach() - 1.0 * grad, -1)
    assert after.mean(0)[0] < q.detach().mean(0)[0]
    assert loss.item() == pytest.approx(4 * (2 / 3 * q[:, 0].mean() + 1 / 3 * q[:, 1].mean()).item(), rel=1e-6)


def _clipped_sgd_step_by_hand(policy, batch, ppo):
    """The gradient of the hand-written PPO loss (policy + c_v value - c_e entropy + c_b balance) and the
    norm-clip factor min(1, 0.5 / ||g||); with the parts, the parameters and their values before the step."""
    parts = _ppo_parts_by_hand(policy, batch, ppo.clip_eps)
    pl, vl, ent, bal = parts
    params = list(policy.parameters())
    grads = torch.autograd.grad(pl + ppo.value_coef * vl - ppo.entropy_coef * ent + ppo.balance_coef * bal, params,
                                allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    scale = min(1.0, 0.5 / (float(torch.sqrt(sum((g ** 2).sum() for g in grads))) + 1e-6))
    return parts, params, grads, scale, [p.detach().clone() for p in params]


def test_ppo_update_first_step_is_clipped_sgd_on_the_hand_written_loss(one_torch_thread):
    """ppo_update (one epoch, one minibatch, plain SGD): every parameter moves by -lr g min(1, 0.5 /
    ||g||), g the gradient of the hand-written PPO loss (GAE, standardised advantages, balance term
    included) on the whole batch."""
    ppo = method.PPOConfig(epochs=1, minibatches=1, entropy_coef=0.1, balance_coef=0.5)
    policy = _tiny_moe(2)
    data = _rollout_data(policy, seed=2)
    batch = _hand_batch(data, ppo)
    (_, vl, _, bal), params, grads, scale, before = _clipped_sgd_step_by_hand(policy, batch, ppo)
    lr = 0.05
    parts = method.ppo_update(policy, torch.optim.SGD(params, lr=lr), data, ppo, torch.Generator().manual_seed(0))
    assert parts["value"] == pytest.approx(vl.item(), rel=1e-4) and parts["balance"] == pytest.approx(bal.item(), rel=1e-4)
    for b, p, g in zip(before, params, grads):
        assert torch.allclose(p.detach() - b, -lr * scale * g, rtol=1e-3, atol=1e-7)


def test_ppo_update_second_epoch_uses_the_old_log_probabilities(one_torch_thread):
    """At the second epoch over the same batch the policy has moved, so the importance ratio against
    the rollout's (old) log-probabilities differs from 1: the second step is -lr x clipped gradient of
    the hand-written loss with the old log-probabilities, at the parameters after the first epoch."""
    ppo = method.PPOConfig(epochs=1, minibatches=1, entropy_coef=0.1, balance_coef=0.5)
    start = _tiny_moe(3)
    data = _rollout_data(start, seed=3)
    lr = 0.5
    one = copy.deepcopy(start)
    method.ppo_update(one, torch.optim.SGD(one.parameters(), lr=lr), data, ppo, torch.Generator().manual_seed(0))
    two = copy.deepcopy(start)
    ppo.epochs = 2
    method.ppo_update(two, torch.optim.SGD(two.parameters(), lr=lr), data, ppo, torch.Generator().manual_seed(0))
    batch = _hand_batch(data, ppo)
    pl, vl, ent, bal = _ppo_parts_by_hand(one, batch, ppo.clip_eps)
    logits, _, _ = one(batch["zone"], batch["glob"])
    ratio = torch.exp(method.zone_log_probs(logits, batch["action"]) - batch["logp"]).detach()
    assert float((ratio - 1).abs().max()) > 0.02
    params = list(one.parameters())
    grads = torch.autograd.grad(pl + ppo.value_coef * vl - ppo.entropy_coef * ent + ppo.balance_coef * bal, params,
                                allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    scale = min(1.0, 0.5 / (float(torch.sqrt(sum((g ** 2).sum() for g in grads))) + 1e-6))
    for a, b, g in zip(params, two.parameters(), grads):
        assert torch.allclose(b.detach() - a.detach(), -lr * scale * g, rtol=1e-3, atol=1e-6)


# ---- issue 44: what the mutation run found untested ------------------------------------------------


def test_defaults_are_the_stated_ones():
    """Eq. (5) by default: w_m = w_p = 1, lambda = 0, c0 = 600; Eq. (6): tolerance 0.05, eta 10; GAE gamma 0.99,
    lambda 0.95; PPOConfig's documented hyperparameters; ppo_loss's clip 0.2 and coefficients 0.5, 0.01, 0.01."""
    assert np.allclose(method.shaped_reward(np.array([120.0]), np.array([300.0]), np.array([2])), -(120 + 300) / 600)
    assert method.update_lambda(1.0, 0.15) == pytest.approx(1.0 + 10 * (0.15 - 0.05))
    rewards, values = np.array([[1.0], [2.0]]), np.array([[0.5], [1.0]])
    d1, d0 = 2.0 - 1.0, 1.0 + 0.99 * 1.0 - 0.5
    adv, _ = method.gae(rewards, values)
    assert np.allclose(adv[:, 0], [d0 + 0.99 * 0.95 * d1, d1])
    ppo = method.PPOConfig()
    assert vars(ppo) == dict(lr=3e-4, clip_eps=0.2, gamma=0.99, gae_lambda=0.95, value_coef=0.5, entropy_coef=0.01,
                             balance_coef=0.01, epochs=4, minibatches=2, reward_scale=0.05)
    with compute_threads(1):
        policy = _tiny_moe(1)
        batch = _hand_batch(_rollout_data(policy, seed=1), ppo)
        batch["logp"] = batch["logp"] - 0.4 * torch.sign(batch["adv"])  # ratios e^0.4 sign(A): the clip binds
        default, _ = method.ppo_loss(policy, batch)
        explicit, _ = method.ppo_loss(policy, batch, 0.2, 0.5, 0.01, 0.01)
        assert default.item() == explicit.item()
        pl, vl, ent, bal = _ppo_parts_by_hand(policy, batch, 0.2)
        assert default.item() == pytest.approx((pl + 0.5 * vl - 0.01 * ent + 0.01 * bal).item(), rel=1e-5)


def test_encoder_defaults_and_the_moe_sits_in_the_last_block_only():
    """RastEncoder by default: width 32, 2 blocks of 4 heads, dense FFN 64, no experts; with n_experts > 0 only
    the last block's FFN is the sparse MoE (top k = 2 by default), the others stay dense."""
    enc = method.RastEncoder(5, 3)
    assert len(enc.blocks) == 2 and enc.moe is None and enc.n_experts == 0
    assert tuple(enc.zone_in.weight.shape) == (32, 5) and tuple(enc.global_in.weight.shape) == (32, 3)
    for block in enc.blocks:
        assert block.attn.num_heads == 4 and tuple(block.ffn.ff[0].weight.shape) == (64, 32)
    moe = method.RastEncoder(5, 3, d=8, layers=3, heads=2, d_ff=16, n_experts=4)
    assert [type(b.ffn).__name__ for b in moe.blocks] == ["_DenseFFN", "_DenseFFN", "SparseMoE"]
    assert moe.moe is moe.blocks[-1].ffn and moe.moe.k == 2 and moe.n_experts == 4
    assert method.RastEncoder(5, 3, d=8, layers=1, heads=2, d_ff=16, n_experts=4).moe is not None
    a, b = method.RastEncoder(5, 3, d=8, heads=2), method.RastEncoder(5, 3, d=8, heads=2, seed=0)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_sparse_moe_initialisation_scale_and_top1_is_the_router_argmax():
    """Expert weights start at std 1/sqrt(d) (w1) and 1/sqrt(d_ff) (w2), biases at 0, the router without bias;
    aux's top1 is the expert of largest router probability, gates sum to 1 over the top k."""
    torch.manual_seed(0)
    moe = method.SparseMoE(d=16, d_ff=64, n_experts=8, k=3)
    assert float(moe.w1.detach().std()) * 16 ** 0.5 == pytest.approx(1.0, abs=0.05)
    assert float(moe.w2.detach().std()) * 64 ** 0.5 == pytest.approx(1.0, abs=0.05)
    assert not moe.b1.any() and not moe.b2.any() and moe.router.bias is None and moe.expert_mask is None
    _, aux = moe(torch.randn(6, 5, 16))
    assert torch.equal(aux["top1"], aux["router_probs"].argmax(-1))
    assert torch.allclose(aux["gates"].sum(-1), torch.ones(6)) and torch.all((aux["gates"] > 0).sum(-1) == 3)


class _FakeCity:
    """A duck-typed env of T steps: features from the rng given at reset and the step count; zone 0 never has
    waiting requests (not live); step returns the action it got."""

    def __init__(self, T, Z):
        self.T, self.Z, self.t = T, Z, 0

    def reset(self, rng):
        self.t, self.base = 0, rng.random((self.Z, task.N_ZONE_FEATURES)).astype(np.float32)
        return self.observe()

    def observe(self):
        zone = self.base + 0.1 * self.t
        zone[0, 0] = 0.0
        return zone.astype(np.float32), np.full(task.N_GLOBAL_FEATURES, 0.2 * self.t, dtype=np.float32)

    def step(self, action):
        self.t += 1
        return {"t": self.t, "action": np.array(action)}

    @property
    def done(self):
        return self.t >= self.T


def test_collect_rollouts_by_hand(one_torch_thread):
    """Sampling of Eq. (1): per step, the actions are Bernoulli(sigmoid(l_z)) draws of the given generator,
    logp their per-zone log-probabilities, live the zones with waiting requests, value the critic, reward
    reward_fn(info) of each env, top1 the router's first choice (-1 and no gates for a dense encoder), infos
    per env in step order; greedy releases exactly where l_z > 0."""
    T, Z = 3, 4
    for policy in (method.RastEncoder(task.N_ZONE_FEATURES, task.N_GLOBAL_FEATURES, d=8, layers=1, heads=2, d_ff=16,
                                      n_experts=3, k=2, seed=2),
                   method.RastEncoder(task.N_ZONE_FEATURES, task.N_GLOBAL_FEATURES, d=8, layers=1, heads=2, d_ff=16,
                                      seed=2)):
        envs = [_FakeCity(T, Z), _FakeCity(T, Z)]

        def reward_fn(info):
            return 10.0 * info["t"] + info["action"].sum()

        data = method.collect_rollouts(policy, envs, [np.random.default_rng(1), np.random.default_rng(2)], reward_fn,
                                       torch_gen=torch.Generator().manual_seed(5))
        gen = torch.Generator().manual_seed(5)
        bases = [np.random.default_rng(s).random((Z, task.N_ZONE_FEATURES)).astype(np.float32) for s in (1, 2)]
        for t in range(T):
            zone = np.stack([b + np.float32(0.1) * t for b in bases])
            zone[:, 0, 0] = 0.0
            glob = np.full((2, task.N_GLOBAL_FEATURES), 0.2 * t, dtype=np.float32)
            with torch.no_grad():
                logits, value, aux = policy(torch.as_tensor(zone), torch.as_tensor(glob))
            action = (torch.rand(logits.shape, generator=gen) < torch.sigmoid(logits)).float()
            assert np.allclose(data["zone"][t], zone, atol=1e-6) and np.allclose(data["glob"][t], glob)
            assert np.array_equal(data["action"][t], action.numpy())
            lp = action * torch.nn.functional.logsigmoid(logits) + (1 - action) * torch.nn.functional.logsigmoid(-logits)
            assert np.allclose(data["logp"][t], lp.numpy(), atol=1e-6)
            assert np.allclose(data["value"][t], value.numpy(), atol=1e-6)
            assert data["live"][t].tolist() == [[0.0, 1.0, 1.0, 1.0]] * 2
            assert data["reward"][t].tolist() == [10.0 * (t + 1) + action[i].sum().item() for i in range(2)]
            if "top1" in aux:
                assert data["top1"][t].tolist() == aux["top1"].tolist() and data["gates"][t].shape == (2, 3)
            else:
                assert data["top1"][t].tolist() == [-1, -1] and data["gates"][t].shape == (2, 0)
        assert [[i["t"] for i in infos] for infos in data["infos"]] == [[1, 2, 3]] * 2
        assert all(np.array_equal(info["action"], data["action"][k, i]) for i, infos in enumerate(data["infos"])
                   for k, info in enumerate(infos))
        greedy = method.collect_rollouts(policy, envs, [np.random.default_rng(1), np.random.default_rng(2)], reward_fn,
                                         greedy=True)
        with torch.no_grad():
            logits, _, _ = policy(torch.as_tensor(greedy["zone"][1]), torch.as_tensor(greedy["glob"][1]))
        assert np.array_equal(greedy["action"][1], (logits > 0).float().numpy())


def test_train_ppo_history_seeds_and_lambda_by_hand(monkeypatch, one_torch_thread):
    """train_ppo: iteration k plays one episode per env with env seeds drawn from default_rng(seed) (0..2^31),
    rewards reward_of(info, w_m, w_p, lambda_k); the history row holds k, lambda_k, the violation rate of its
    infos and the mean episode return; lambda moves by Eq. (6) only for the adaptive reward; Adam runs at
    ppo.lr; the first episode's actions are those of a generator seeded with ``seed``."""
    original_adam, original_collect = torch.optim.Adam, method.collect_rollouts
    lrs, first = [], []
    monkeypatch.setattr(torch.optim, "Adam", lambda params, lr: lrs.append(lr) or original_adam(params, lr=lr))
    monkeypatch.setattr(method, "collect_rollouts",
                        lambda *a, **kw: first.append(original_collect(*a, **kw)) or first[-1])
    T, Z, seed = 3, 4, 3  # seed 3: env seeds drawn from [0, 2^31) differ from draws from [1, 2^31)
    seen = []

    def reward_of(info, w_m, w_p, lam):
        seen.append((w_m, w_p, lam))
        return np.full(Z, -lam - info["t"])

    rates = iter([0.3, 0.0, 0.3, 0.0])
    for adaptive in (True, False):
        policy = method.RastEncoder(task.N_ZONE_FEATURES, task.N_GLOBAL_FEATURES, d=8, layers=1, heads=2, d_ff=16,
                                    seed=4)
        start = copy.deepcopy(policy)
        envs = [_FakeCity(T, Z), _FakeCity(T, Z)]
        resets = []
        seen.clear()
        for env in envs:
            env.reset = (lambda e, f: lambda rng: resets.append(rng.random()) or f(np.random.default_rng(0)))(env, env.reset)
        reward = dict(w_match=1.0, w_pickup=2.0, lam=0.5, adaptive=adaptive, eta=3.0, tolerance=0.1, reward_of=reward_of)
        sizes = []
        history = method.train_ppo(policy, envs, 2, seed, reward, lambda infos: sizes.append((len(infos), len(infos[0])))
                                   or next(rates), method.PPOConfig(lr=0.01, epochs=1, minibatches=1))
        lam1 = 0.5 + 3.0 * (0.3 - 0.1) if adaptive else 0.5
        assert [h["iteration"] for h in history] == [0, 1] and [h["lam"] for h in history] == pytest.approx([0.5, lam1])
        assert [h["violation"] for h in history] == [0.3, 0.0] and sizes == [(2, T)] * 2
        assert [h["train_return"] for h in history] == pytest.approx([-3 * 0.5 - 6, -3 * lam1 - 6])
        assert {"policy", "value", "entropy"} <= set(history[0])
        assert seen == [(1.0, 2.0, 0.5)] * (2 * T) + [(1.0, 2.0, pytest.approx(lam1))] * (2 * T)
        env_seeds = np.random.default_rng(seed).integers(0, 2**31, size=4)
        assert resets == pytest.approx([np.random.default_rng(s).random() for s in env_seeds])
        assert lrs[-1] == 0.01
        again = original_collect(start, envs, [np.random.default_rng(0)] * 2, lambda info: 0.0,
                                 torch_gen=torch.Generator().manual_seed(seed))
        assert np.array_equal(first[-2]["action"], again["action"])


def test_factorised_log_prob_is_per_row_on_any_batch_shape():
    """Eq. (1) gives one log-probability (and one entropy) per row: for a (2, 3, Z) batch each entry is the sum
    over its zones of a log sigma(l) + (1 - a) log(1 - sigma(l)) (of the Bernoulli entropies), by hand, over
    the live zones only when a mask is given."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 4, generator=g)
    actions = (torch.rand(2, 3, 4, generator=g) < 0.5).float()
    live = (torch.rand(2, 3, 4, generator=g) < 0.7).float()
    sig = torch.sigmoid(logits)
    terms = actions * torch.log(sig) + (1 - actions) * torch.log(1 - sig)
    assert torch.allclose(method.factorised_log_prob(logits, actions), terms.sum(-1), atol=1e-6)
    assert torch.allclose(method.factorised_log_prob(logits, actions, live), (terms * live).sum(-1), atol=1e-6)
    assert method.factorised_log_prob(logits[0], actions[0]).shape == (3,)
    bern = -(sig * torch.log(sig) + (1 - sig) * torch.log(1 - sig))
    assert torch.allclose(method.factorised_entropy(logits), bern.sum(-1), atol=1e-6)
    assert torch.allclose(method.factorised_entropy(logits, live), (bern * live).sum(-1), atol=1e-6)


def test_dense_block_is_pre_norm_attention_then_residual_gelu_ffn():
    """A dense block: h1 = h + MHA(LN(h)) (2 heads of softmax(q k^T / 2) v over each state's tokens), out = h1 +
    W2 GELU(W1 LN'(h1) + b1) + b2, all by hand from the block's weights."""
    enc = method.RastEncoder(task.N_ZONE_FEATURES, task.N_GLOBAL_FEATURES, d=8, layers=1, heads=2, d_ff=16, seed=3)
    block = enc.blocks[0]
    h = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        x = block.norm(h)
        q, k, v = (x @ w.T + b for w, b in zip(block.attn.in_proj_weight.chunk(3), block.attn.in_proj_bias.chunk(3)))
        heads = []
        for i in range(2):
            sl = slice(4 * i, 4 * i + 4)
            att = torch.softmax(q[..., sl] @ k[..., sl].transpose(1, 2) / 2.0, -1)
            heads.append(att @ v[..., sl])
        h1 = h + block.attn.out_proj(torch.cat(heads, -1))
        ffn = block.ffn
        lin1, lin2 = ffn.ff[0], ffn.ff[-1]
        want = h1 + lin2(torch.nn.functional.gelu(lin1(ffn.norm(h1))))
        out, extra = block(h)
    assert torch.allclose(out, want, atol=1e-6) and extra == {}


def test_ppo_update_reads_gamma_lambda_scale_and_coefficients_from_its_config(one_torch_thread):
    """ppo_update with a non-default PPOConfig (gamma 0.9, GAE lambda 0.5, reward scale 0.2, clip 0.1, value 0.3,
    entropy 0.05, balance 0.2; one epoch, one minibatch, plain SGD) moves every parameter by -lr x the
    clipped gradient of the hand-written loss built with those values."""
    ppo = method.PPOConfig(gamma=0.9, gae_lambda=0.5, reward_scale=0.2, clip_eps=0.1, value_coef=0.3,
                           entropy_coef=0.05, balance_coef=0.2, epochs=1, minibatches=1)
    policy = _tiny_moe(4)
    data = _rollout_data(policy, seed=4)
    data["logp"] = data["logp"] + np.random.default_rng(1).normal(0, 0.3, data["logp"].shape).astype(np.float32)
    batch = _hand_batch(data, ppo)
    pl, vl, ent, bal = _ppo_parts_by_hand(policy, batch, 0.1)
    params = list(policy.parameters())
    grads = torch.autograd.grad(pl + 0.3 * vl - 0.05 * ent + 0.2 * bal, params, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    scale = min(1.0, 0.5 / (float(torch.sqrt(sum((g ** 2).sum() for g in grads))) + 1e-6))
    before = [p.detach().clone() for p in params]
    parts = method.ppo_update(policy, torch.optim.SGD(params, lr=0.05), data, ppo, torch.Generator().manual_seed(0))
    assert parts["value"] == pytest.approx(vl.item(), rel=1e-4) and parts["policy"] == pytest.approx(pl.item(), rel=1e-4)
    for b, p, g in zip(before, params, grads):
        assert torch.allclose(p.detach() - b, -0.05 * scale * g, rtol=1e-3, atol=1e-7)


def test_route_and_gae_treat_leading_axes_and_integer_rewards_right():
    """Eq. (2) routes each state alone: a (2, 3, E) batch gives the (6, E) batch's q, gates and top k; GAE of
    integer rewards is computed in floats (the discounted sums keep their fractions)."""
    logits = torch.randn(6, 5, generator=torch.Generator().manual_seed(2))
    flat = method.route(logits, 2)
    deep = method.route(logits.reshape(2, 3, 5), 2)
    assert all(torch.allclose(a.reshape(b.shape), b) for a, b in zip(flat, deep)) and deep[2].shape == (2, 3, 2)
    assert torch.allclose(flat[1].sum(-1), torch.ones(6)) and torch.allclose(flat[0].sum(-1), torch.ones(6))
    adv, ret = method.gae(np.array([[1], [2], [0]]), np.array([[0.5], [1.0], [0.2]]), gamma=0.9, lam=0.5)
    d2, d1, d0 = -0.2, 2.0 + 0.9 * 0.2 - 1.0, 1.0 + 0.9 * 1.0 - 0.5
    assert np.allclose(adv[:, 0], [d0 + 0.45 * d1 + 0.45 ** 2 * d2, d1 + 0.45 * d2, d2])


def test_sparse_moe_by_hand_with_biases_and_a_switched_off_expert():
    """Eq. (3) with nonzero expert biases: h + sum_e q~_e (W2_e GELU(W1_e LN(h) + b1_e) + b2_e) by hand; an
    expert switched off by expert_mask is never chosen and gets gate 0."""
    torch.manual_seed(1)
    moe = method.SparseMoE(d=8, d_ff=16, n_experts=4, k=2)
    with torch.no_grad():
        moe.b1.normal_()
        moe.b2.normal_()
    h = torch.randn(3, 5, 8)
    with torch.no_grad():
        out, aux = moe(h)
        x = moe.norm(h)
        manual = h.clone()
        for b in range(3):
            for e in torch.nonzero(aux["gates"][b] > 0)[:, 0].tolist():
                y = torch.nn.functional.gelu(x[b] @ moe.w1[e] + moe.b1[e]) @ moe.w2[e] + moe.b2[e]
                manual[b] += aux["gates"][b, e] * y
        assert torch.allclose(out, manual, atol=1e-5)
        favourite = int(aux["top1"][0])
        moe.expert_mask = torch.arange(4) != favourite
        _, masked = moe(h)
    assert torch.all(masked["gates"][:, favourite] == 0) and not (masked["top1"] == favourite).any()
    assert torch.all(masked["router_probs"][:, favourite] == 0)


def test_ppo_update_trains_on_float32_minibatches(monkeypatch, one_torch_thread):
    """The rollout arrays (float64 rewards, hence float64 returns and advantages) reach ppo_loss as float32
    tensors of T x N rows: the loss stays in the policy's precision."""
    seen = []
    original = method.ppo_loss
    monkeypatch.setattr(method, "ppo_loss", lambda policy, b, *a: seen.append({k: (v.dtype, v.shape[0]) for k, v in b.items()})
                        or original(policy, b, *a))
    policy = _tiny_moe(5)
    data = _rollout_data(policy, seed=5)
    data["reward"] = data["reward"].astype(np.float64)
    method.ppo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.01), data,
                      method.PPOConfig(epochs=1, minibatches=1), torch.Generator().manual_seed(0))
    assert len(seen) == 1 and set(seen[0]) == {"zone", "glob", "action", "live", "logp", "ret", "adv"}
    assert all(v == (torch.float32, 6) for v in seen[0].values())


def test_ppo_update_standardises_tiny_advantages_with_a_positive_epsilon(one_torch_thread):
    """A = (A - mean) / (std + 1e-8) over live zones: with advantages of std ~1e-8 (gamma = 0, values within
    1e-8 of the scaled rewards) the epsilon is half the denominator; the step equals -lr x the clipped gradient
    of the hand-written loss standardised that way."""
    ppo = method.PPOConfig(gamma=0.0, gae_lambda=0.0, epochs=1, minibatches=1, entropy_coef=0.1, balance_coef=0.5)
    policy = _tiny_moe(6)
    data = _rollout_data(policy, seed=6)
    tiny = np.random.default_rng(2).normal(0, 1e-8, data["reward"].shape)
    data["reward"] = data["reward"].astype(np.float64)
    data["value"] = ppo.reward_scale * data["reward"] - tiny
    batch = _hand_batch(data, ppo)
    live = batch["live"].bool()
    assert 0.5e-8 < float(torch.as_tensor(tiny.reshape(live.shape))[live].std()) < 2e-8
    _, params, grads, scale, before = _clipped_sgd_step_by_hand(policy, batch, ppo)
    method.ppo_update(policy, torch.optim.SGD(params, lr=0.05), data, ppo, torch.Generator().manual_seed(0))
    for b, p, g in zip(before, params, grads):
        assert torch.allclose(p.detach() - b, -0.05 * scale * g, rtol=1e-3, atol=1e-7)
