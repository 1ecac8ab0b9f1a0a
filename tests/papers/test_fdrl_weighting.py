"""Unit tests of replib.papers.fdrl_weighting (FEDORA's offline federated TD3+BC and the paper's
return- and inconsistency-aware client weights)."""

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from replib.core.paths import load_chapter
from replib.papers.fdrl_weighting import exercises, experiment, method, task

# ---- task -----------------------------------------------------------------------------------


def test_pendulum_step_by_hand():
    th, thd, r = task.pendulum_step(np.array([0.5]), np.array([1.0]), np.array([3.0]))
    # u clipped to 2; reward -(0.25 + 0.1 + 0.004); thd' = 1 + (15 sin 0.5 + 3 * 2) * 0.05
    want_dot = 1 + (15 * math.sin(0.5) + 6) * 0.05
    assert r[0] == pytest.approx(-(0.25 + 0.1 + 0.004))
    assert thd[0] == pytest.approx(want_dot) and th[0] == pytest.approx(0.5 + want_dot * 0.05)
    _, fast, _ = task.pendulum_step(np.array([0.0]), np.array([7.99]), np.array([2.0]))
    assert fast[0] == 8.0  # speed clipped
    tt = task.pendulum_step(torch.tensor([0.5]), torch.tensor([1.0]), torch.tensor([3.0]))
    assert float(tt[1][0]) == pytest.approx(want_dot, rel=1e-6)


def test_expert_balances_and_random_does_not():
    starts = task.initial_states(8, 0)
    ref = task.reference_returns(starts)
    assert ref["expert"] > -300 > -900 > ref["random"]
    assert task.normalised_score(ref["expert"], ref) == pytest.approx(100.0)
    assert task.normalised_score(ref["random"], ref) == pytest.approx(0.0)


def test_client_datasets_sizes_kinds_and_determinism():
    a = task.client_datasets(3)
    b = task.client_datasets(3)
    assert [d["kind"] for d in a] == ["expert", "medium", "random", "random"]
    assert [len(d["obs"]) for d in a] == [5000, 400, 5000, 5000]
    assert np.array_equal(a[1]["action"], b[1]["action"])
    assert a[0]["return"] > a[1]["return"] > a[2]["return"]
    assert np.abs(a[2]["action"]).max() <= 2.0
    frame = task.to_frame(a[1])
    assert len(frame) == 400 and {"cos", "action", "reward", "next_theta_dot"} <= set(frame.columns)


def test_evaluate_actor_matches_numpy_rollout():
    starts = task.initial_states(3, 1)
    got = task.evaluate_actor(lambda obs: torch.zeros(*obs.shape[:-1], 1), starts, 2)
    theta, theta_dot, total = starts[:, 0].copy(), starts[:, 1].copy(), np.zeros(3)
    for _ in range(task.HORIZON):
        theta, theta_dot, r = task.pendulum_step(theta, theta_dot, np.zeros(3))
        total += r
    assert got.shape == (2, 3) and np.allclose(got[0], total, rtol=1e-4) and np.allclose(got[1], got[0])


# ---- method: equations on hand-made inputs ------------------------------------------------------


def test_ensemble_members_start_equal_and_train_independently():
    gen = torch.Generator().manual_seed(0)
    net = method.Ensemble(3, [2, 4, 1], gen)
    x = torch.randn(3, 5, 2, generator=gen)
    y = net(x)
    assert y.shape == (3, 5, 1)
    same = net(x[:1].expand(3, -1, -1))
    assert torch.allclose(same[0], same[1]) and torch.allclose(same[1], same[2])
    y[1].sum().backward()  # only member 1's weights get a gradient
    g = net.params[0].grad
    assert g[0].abs().sum() == 0 and g[2].abs().sum() == 0 and g[1].abs().sum() > 0


def test_critic_target_takes_the_larger_of_local_and_global_minima():
    r = torch.tensor([[1.0, 0.0]])
    q_loc = torch.tensor([[[2.0, 5.0], [3.0, 1.0]]])   # min over twins: [2, 1]
    q_glob = torch.tensor([[[1.0, 4.0], [0.0, 6.0]]])  # min: [0, 4]
    y = method.critic_target(r, q_loc, q_glob, 0.5, torch.tensor([True]))
    assert torch.allclose(y, torch.tensor([[1 + 0.5 * 2, 0.5 * 4]]))
    alone = method.critic_target(r, q_loc, q_glob, 0.5, torch.tensor([False]))
    assert torch.allclose(alone, torch.tensor([[2.0, 0.5]]))


def test_critic_loss_sums_twins_and_averages_batch():
    q = torch.tensor([[[1.0, 2.0], [0.0, 0.0]]])
    y = torch.tensor([[1.0, 0.0]])
    assert float(method.critic_loss(q, y)[0]) == pytest.approx((0 + 4 + 1 + 0) / 2)


def test_actor_loss_terms():
    q1 = torch.tensor([[-2.0, -4.0]])                      # mean |Q| = 3, lambda = 2.5 / 3
    pi = torch.tensor([[[1.0], [0.0]]])
    a = torch.tensor([[[0.0], [0.0]]])                     # bc = 0.5
    pg = torch.tensor([[[1.0], [2.0]]])                    # prox_global = 2
    pp = torch.tensor([[[0.0], [1.0]]])                    # prox_prev = 1
    got = method.actor_loss(q1, pi, a, pg, pp, torch.tensor([0.5]), torch.tensor([3.0]), 0.25, torch.tensor([1.0]))
    want = -(2.5 / 3) * 0.5 * (-3.0) + 0.5 * 0.5 + 3.0 * 2 + 0.25 * 1
    assert float(got[0]) == pytest.approx(want)
    no_bc = method.actor_loss(q1, pi, a, pg, pp, torch.tensor([0.5]), torch.tensor([3.0]), 0.25, torch.tensor([0.0]))
    assert float(got[0] - no_bc[0]) == pytest.approx(0.25)


def test_decay_delta_only_where_global_is_better():
    d = method.decay_delta(torch.tensor([1.0, 1.0]), torch.tensor([-1.0, -5.0]), torch.tensor([-2.0, -3.0]))
    assert torch.allclose(d, torch.tensor([0.995, 1.0]))


def test_scores_and_weights_by_hand():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert float(method.value_score(torch.tensor([[2.0, 4.0, 100.0]]), mask)[0]) == pytest.approx(3.0)
    pi = torch.tensor([[[1.0], [0.0], [9.0]]])
    act = torch.tensor([[[0.0], [2.0], [0.0]]])
    assert float(method.policy_inconsistency(pi, act, mask)[0]) == pytest.approx((1 + 4) / 2)
    j = torch.tensor([-10.0, -20.0, -30.0])
    pinc = torch.tensor([0.1, 0.2, 0.6])
    c = method.scaling_factor(j, pinc)
    assert float(c) == pytest.approx(0.3 / 20)
    s = method.combined_score(j, pinc, c)
    assert torch.allclose(s, torch.tensor([-0.25, -0.5, -1.05]))
    w = method.combined_weights(j, pinc)
    want = torch.softmax(s / s.std(unbiased=False), -1)
    assert torch.allclose(w, want) and w[0] > w[1] > w[2]
    assert torch.allclose(method.q_softmax_weights(j), torch.softmax(0.1 * j, -1))
    assert torch.allclose(method.uniform_weights(j), torch.full((3,), 1 / 3))


def test_inconsistency_changes_the_ranking_q_softmax_keeps():
    j = torch.tensor([-5.0, -6.0])            # client 0 looks better by Q
    pinc = torch.tensor([1.5, 0.1])           # but strays far from its data
    assert method.q_softmax_weights(j)[0] > 0.5
    assert method.combined_weights(j, pinc)[1] > 0.5


def test_aggregate_is_a_weighted_sum_over_clients():
    params = torch.arange(12, dtype=torch.float32).view(2, 3, 2)  # R=2, K=3
    w = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.25, 0.5]])
    got = method.aggregate(params, w)
    assert torch.allclose(got[0], params[0, 0])
    assert torch.allclose(got[1], 0.25 * params[1, 0] + 0.25 * params[1, 1] + 0.5 * params[1, 2])


def test_adaptive_alpha0():
    got = method.adaptive_alpha0(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 0.0, 1.0]), 2.0, 0.1)
    assert torch.allclose(got, torch.tensor([0.2, 2.0, 2.0]))


def _tiny_federation(specs, steps=3):
    datasets = task.client_datasets(0, "mixed", 0.05)
    hp = {k: experiment.EXPERIMENT_PROFILES["smoke"][k] for k in experiment._HP_KEYS}
    hp["hidden"] = 8
    fed = method.Federation(specs, len(datasets), experiment.pack_clients(datasets, len(specs), 50, 0), hp, 0)
    return fed


def test_federation_overwrite_and_keep_own_and_aggregation():
    kinds = ["expert", "medium", "random", "random"]
    fed = _tiny_federation([experiment.RUNS["fedora"](kinds), experiment.RUNS["combined_adaptive"](kinds)])
    fed.start_round()
    for _ in range(4):
        fed.local_step()
    out = fed.finish_round()
    assert torch.allclose(out["weights"].sum(1), torch.ones(2))
    w = out["weights"][0]
    manual = sum(w[k] * fed.actor.params[0][k].detach() for k in range(4))
    assert torch.allclose(fed.global_actor[0][0], manual, atol=1e-6)
    # critic twins aggregate separately: twin 1 of run 1 from members 2m + 1, m = 4..7
    w1 = out["weights"][1]
    manual_c = sum(w1[k] * fed.critic.params[2][2 * (4 + k) + 1].detach() for k in range(4))
    assert torch.allclose(fed.global_critic[2][3], manual_c, atol=1e-6)
    before = [p.detach().clone() for p in fed.actor.params]
    fed.start_round()
    # run 0 (FEDORA) clients now hold the global actor, run 1 (keep own) clients their own
    assert torch.allclose(fed.actor.params[0][2], fed.global_actor[0][0])
    assert torch.allclose(fed.actor.params[0][5], before[0][5])


def test_federation_is_deterministic():
    kinds = ["expert", "medium", "random", "random"]

    def run():
        fed = _tiny_federation([experiment.RUNS["combined"](kinds)])
        fed.start_round()
        for _ in range(4):
            fed.local_step()
        return fed.finish_round()["j"]

    assert torch.equal(run(), run())


# ---- claim values from hand-made results ---------------------------------------------------------


def _fake_results():
    rounds, clients = [], []
    kinds = ["expert", "medium", "random"]
    base = {"isolated": 0, "uniform": -800, "fedora": -300, "combined": -250, "combined_adaptive": -200,
            "fedora_stress": -400, "combined_stress": -380}
    for seed, shift in ((0, 0.0), (1, 30.0)):
        for run, value in base.items():
            for t in range(4):
                rounds.append({"seed": seed, "run": run, "round": t, "global_return": value + shift + 10 * t})
                for k, kind in enumerate(kinds):
                    weight = {"combined": [0.6, 0.3, 0.1], "fedora": [0.4, 0.3, 0.3]}.get(run, [1 / 3] * 3)[k]
                    local = -150.0 - shift if (run, kind) == ("isolated", "expert") else -500.0 - t
                    if run == "combined_adaptive" and kind == "expert":
                        local = -300.0 + shift
                    j = {"expert": -10.0, "medium": -4.0 - shift, "random": -30.0}[kind]
                    clients.append({"seed": seed, "run": run, "round": t, "client": k, "kind": kind, "j": j,
                                    "pi": 0.1, "weight": weight, "local_return": local})
    reference = pd.DataFrame([{"seed": 0, "expert": -150.0, "random": -1150.0},
                              {"seed": 1, "expert": -100.0, "random": -1100.0}])
    return {"rounds": pd.DataFrame(rounds), "clients": pd.DataFrame(clients), "reference": reference}


def test_claim_values_by_hand():
    cfg = SimpleNamespace(seeds=[0, 1], last_rounds=3)
    values = experiment.claim_values(_fake_results(), cfg)
    ids = {c["id"] for c in load_chapter("fdrl_weighting")["claims"]}
    assert set(values) == {0, 1} and all(set(v) == ids for v in values.values())
    for seed, shift in ((0, 0.0), (1, 30.0)):
        v = values[seed]
        ref_expert, ref_random = (-150.0, -1150.0) if seed == 0 else (-100.0, -1100.0)
        assert v["p1_td3bc_learns_alone"] == pytest.approx(100 * (-150 - shift - ref_random) / (ref_expert - ref_random))
        assert v["p2_stress_q_looks_good"] == pytest.approx((-4.0 - shift) - (-10.0))
        # the last 3 rounds add the same +20 mean to every run: differences are the base gaps
        assert v["h1_combined_vs_uniform"] == pytest.approx(-250 - (-800))
        assert v["h2_plugin_vs_fedora"] == pytest.approx(-200 - (-300))
        assert v["m1_combined_vs_fedora"] == pytest.approx(-250 - (-300))
        assert v["m2_early_expert_mass"] == pytest.approx(0.6 - 0.4)
        assert v["m3_stress_combined_vs_fedora"] == pytest.approx(-380 - (-400))
        assert v["m4_adaptive_protects_experts"] == pytest.approx((-300 + shift) - (-500 - 2))
        assert v["x1_fedora_vs_uniform"] == pytest.approx(-300 - (-800))


def test_chapter_yml_declares_the_claims():
    chapter = load_chapter("fdrl_weighting")
    roles = {c["id"]: c["role"] for c in chapter["claims"]}
    assert roles["p1_td3bc_learns_alone"] == "precondition" and roles["h1_combined_vs_uniform"] == "headline"


# ---- profiles and graders ---------------------------------------------------------------------


def test_profiles_share_keys_and_bounds_refuse_bad_values():
    keys = {p: set(v) for p, v in experiment.EXPERIMENT_PROFILES.items()}
    assert keys["smoke"] == keys["book"] == keys["paper"]
    from replib.core import configure

    with pytest.raises(ValueError):
        configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS, local_steps=-5)
    with pytest.raises(ValueError):
        configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS, runs=["nope"])


def test_graders_accept_the_reference_and_reject_a_wrong_answer():
    exercises.check_policy_inconsistency(lambda pi, a: method.policy_inconsistency(
        torch.as_tensor(pi), torch.as_tensor(a), torch.ones(np.shape(a)[:-1])))
    exercises.check_combined_weights(lambda j, p: method.combined_weights(torch.as_tensor(j), torch.as_tensor(p)))
    with pytest.raises(AssertionError):
        exercises.check_combined_weights(lambda j, p: method.q_softmax_weights(torch.as_tensor(j)))
    with pytest.raises(AssertionError):
        exercises.check_policy_inconsistency(lambda pi, a: np.abs(np.asarray(pi) - np.asarray(a)).mean())
