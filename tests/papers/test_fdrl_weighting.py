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


def test_twin_critics_start_different_and_every_client_shares_the_pair():
    """TD3's twins must start from two different draws (twins started equal see the same batches and
    targets and so stay equal: the clipped double Q would be a no-op); every client starts from the same
    pair, and the run's global critic is that pair."""
    fed = _toy_federation()
    for p in fed.critic.params:
        assert not torch.allclose(p[0], p[1])  # twins of member 0 differ
        for m in range(1, fed.M):
            assert torch.equal(p[2 * m], p[0]) and torch.equal(p[2 * m + 1], p[1])
    for g, p in zip(fed.global_critic, fed.critic.params):
        assert torch.equal(g[0::2], p[0].expand_as(g[0::2])) and torch.equal(g[1::2], p[1].expand_as(g[1::2]))
    obs = fed.data["obs"][:, :5]
    q = method.twin_q(fed.critic, obs, torch.zeros(fed.M, 5, 1))
    assert not torch.allclose(q[:, 0], q[:, 1])
    with pytest.raises(ValueError):
        method.Ensemble(3, [2, 1], torch.Generator().manual_seed(0), distinct=2)


def test_q_std_weights_are_the_combined_rule_without_the_inconsistency():
    j = torch.tensor([-3.0, -1.0, -10.0])
    w = method.q_std_weights(j)
    e = torch.exp(j / j.std(unbiased=False))
    assert torch.allclose(w, e / e.sum())
    assert torch.allclose(method.q_std_weights(10 * j), w)  # scale-free
    assert torch.allclose(method.q_std_weights(j, 2.0), torch.softmax(j / (2 * j.std(unbiased=False)), -1))


def test_make_spec_takes_the_tuned_factor_or_the_suffix():
    cfg = SimpleNamespace(temp_fedora=2.0, temp_q_std=0.5, temp_combined=1.0)
    kinds = ["expert", "medium", "random"]
    assert experiment.make_spec("fedora", kinds, cfg).temp == 2.0
    assert experiment.make_spec("q_std_stress", kinds, cfg).temp == 0.5
    assert experiment.make_spec("combined@0.5", kinds, cfg).temp == 0.5
    spec = experiment.make_spec("combined_adaptive_overwrite", kinds, cfg)
    assert spec.adaptive and not spec.keep_own and spec.aggregator == "combined"
    spec = experiment.make_spec("combined_keep", kinds, cfg)
    assert spec.keep_own and not spec.adaptive


def test_pack_clients_per_run_data_and_pooled_oracle():
    clients = _toy_clients()
    for d, kind in zip(clients, ["expert", "expert", "random"]):
        d["kind"] = kind
    pooled = experiment.pooled_data(clients)
    assert len(pooled["obs"]) == 12 + 7
    data = experiment.pack_clients([[pooled] * 3, clients], 2, 6, 0)
    assert data["size"].tolist() == [19.0] * 3 + [12.0, 7.0, 10.0]
    assert torch.equal(data["obs"][1, :19], torch.tensor(pooled["obs"]))
    assert torch.equal(data["obs"][4, :7], torch.tensor(clients[1]["obs"]))
    assert (data["score_idx"][3:] < data["size"][3:, None]).all()


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
    kinds = ["expert", "expert", "medium", "random"]
    base = {"isolated": 0, "pooled": 0, "uniform": -800, "fedora": -300, "q_std": -280, "combined": -250,
            "combined_keep": -260, "combined_adaptive_overwrite": -240, "combined_adaptive": -200,
            "fedora_stress": -400, "q_std_stress": -420, "combined_stress": -380}
    for seed, shift in ((0, 0.0), (1, 30.0)):
        for run, value in base.items():
            for t in range(6):
                evaluated = t % 2 == 1  # rounds 1, 3, 5 evaluated
                rounds.append({"seed": seed, "run": run, "round": t,
                               "global_return": value + shift + 10 * t if evaluated else float("nan")})
                for k, kind in enumerate(kinds):
                    weight = {"combined": [0.4, 0.3, 0.2, 0.1], "q_std": [0.3, 0.2, 0.3, 0.2]}.get(run, [0.25] * 4)[k]
                    local = -500.0 - t
                    if run == "isolated":
                        local = [-400.0, -350.0 - shift, -600.0, -1200.0][k]
                    if run == "pooled":
                        local, kind = -180.0 - shift, "pooled"
                    if run == "combined_adaptive" and kind == "expert":
                        local = -300.0 + shift
                    j = {"expert": -10.0, "medium": -4.0 - shift, "random": -30.0, "pooled": -1.0}[kind]
                    if run == "fedora" and kind == "medium":
                        j = -8.0
                    clients.append({"seed": seed, "run": run, "round": t, "client": k, "kind": kind, "j": j,
                                    "pi": 0.1, "weight": weight,
                                    "local_return": local if evaluated else float("nan")})
    reference = pd.DataFrame([{"seed": 0, "expert": -150.0, "random": -1150.0},
                              {"seed": 1, "expert": -100.0, "random": -1100.0}])
    return {"rounds": pd.DataFrame(rounds), "clients": pd.DataFrame(clients), "reference": reference}


def test_claim_values_by_hand():
    cfg = SimpleNamespace(seeds=[0, 1], last_rounds=2)
    values = experiment.claim_values(_fake_results(), cfg)
    ids = {c["id"] for c in load_chapter("fdrl_weighting")["claims"]}
    assert set(values) == {0, 1} and all(set(v) == ids for v in values.values())
    for seed, shift in ((0, 0.0), (1, 30.0)):
        v = values[seed]
        ref_expert, ref_random = (-150.0, -1150.0) if seed == 0 else (-100.0, -1100.0)
        assert v["p1_pooled_learns"] == pytest.approx(100 * (-180 - shift - ref_random) / (ref_expert - ref_random))
        best_alone = max(-400.0, -350.0 - shift)
        assert v["p2_room_for_federation"] == pytest.approx(-180 - shift - best_alone)
        assert v["p3_stress_inflates_j"] == pytest.approx((-4.0 - shift) - (-8.0))
        # the last 2 evaluated rounds (3, 5) add the same +40 to every run: differences are the base gaps
        assert v["h1_weights_vs_fedora"] == pytest.approx(-250 - (-300))
        assert v["h2_plugin_vs_fedora"] == pytest.approx(-200 - (-300))
        assert v["m1_inconsistency_term"] == pytest.approx(-250 - (-280))
        assert v["m2_early_expert_mass"] == pytest.approx(0.7 - 0.5)
        assert v["m3_stress_combined_vs_q_only"] == pytest.approx(-380 - (-420))
        assert v["m4_adaptive_protects_experts"] == pytest.approx((-300 + shift) - (-500 - 3))  # rounds 1, 3, 5
        assert v["x1_fedora_vs_uniform"] == pytest.approx(-300 - (-800))
        assert v["x2_fedora_vs_best_alone"] == pytest.approx(-300 + shift + 40 - best_alone)
        assert v["x3_keep_vs_overwrite"] == pytest.approx(-260 - (-250))
        assert v["x4_adaptive_with_overwrite"] == pytest.approx(-240 - (-250))
        assert v["x5_stress_combined_vs_fedora"] == pytest.approx(-380 - (-400))


def test_chapter_yml_declares_the_claims():
    chapter = load_chapter("fdrl_weighting")
    roles = {c["id"]: c["role"] for c in chapter["claims"]}
    assert roles["p1_pooled_learns"] == "precondition" and roles["h1_weights_vs_fedora"] == "headline"
    kinds = {c["id"]: c.get("kind") for c in chapter["claims"]}
    assert kinds["p2_room_for_federation"] == "headroom"


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


# ---- update steps: TD3+BC critic and actor steps, targets, round state (tiny hand-made clients) ------------

_HP = dict(hidden=6, lr=1e-3, batch=8, gamma=0.9, tau=0.2, policy_noise=0.2, noise_clip=0.5, policy_freq=2,
           alpha=2.5, alpha0=1.0, alpha2=0.5, rho=0.1, temperature=1.0, beta=0.1)


def _toy_clients(sizes=(12, 7, 10), seed=0):
    """Hand-made client data sets (pendulum-shaped: obs = (cos, sin, theta_dot), |a| <= 2, r <= 0)."""
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        th, thd = rng.uniform(-np.pi, np.pi, n), rng.uniform(-8, 8, n)
        obs = np.stack([np.cos(th), np.sin(th), thd], 1).astype(np.float32)
        nth = th + 0.05 * thd
        out.append({"obs": obs, "action": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
                    "reward": (-(th ** 2) - 0.1 * thd ** 2).astype(np.float32),
                    "next_obs": np.stack([np.cos(nth), np.sin(nth), thd], 1).astype(np.float32)})
    return out


def _toy_federation(runs=("fedora_stress", "combined_adaptive", "isolated"), seed=0):
    """R runs of K = 3 toy clients (client 1 is 'medium', so the stress run trains it as pure TD3)."""
    kinds = ["expert", "medium", "random"]
    specs = [experiment.RUNS[name](kinds) for name in runs]
    data = experiment.pack_clients(_toy_clients(), len(specs), 6, seed)
    return method.Federation(specs, 3, data, dict(_HP), seed)


def _mlp(params, x):
    """The ensemble's forward written out: x @ W + b per member, ReLU between layers."""
    n_layers = len(params) // 2
    for i in range(n_layers):
        x = torch.matmul(x, params[2 * i]) + params[2 * i + 1]
        if i < n_layers - 1:
            x = torch.relu(x)
    return x


def _twins(params, obs, action):
    """Q_1, Q_2 of every member: member m's twins are critic members 2m, 2m + 1; -> (M, 2, B)."""
    x = torch.cat([obs, action], -1).repeat_interleave(2, 0)
    return _mlp(params, x).view(obs.shape[0], 2, -1)


def _per_member(params_run, fed, twin):
    """A run's global network as per-member weights (member m = r K + k uses run r's)."""
    run = torch.arange(fed.M) // fed.K
    idx = torch.stack([2 * run, 2 * run + 1], 1).reshape(-1) if twin else run
    return [p[idx] for p in params_run]


def _draw_batch(fed, state):
    """The minibatch and the target-smoothing noise of one local step, replayed from the generator state."""
    gen = torch.Generator().manual_seed(0)
    gen.set_state(state)
    d, hp = fed.data, fed.hp
    idx = (torch.rand(fed.M, hp["batch"], generator=gen) * d["size"][:, None]).long()
    take = lambda x: torch.gather(x, 1, idx[..., None].expand(-1, -1, x.shape[-1]))  # noqa: E731
    noise = (torch.randn(fed.M, hp["batch"], 1, generator=gen) * hp["policy_noise"] * 2).clamp(
        -hp["noise_clip"] * 2, hp["noise_clip"] * 2)
    return take(d["obs"]), take(d["action"]), torch.gather(d["reward"], 1, idx), take(d["next_obs"]), noise


def _one_round(fed, steps=4):
    fed.start_round()
    for _ in range(steps):
        fed.local_step()
    return fed.finish_round()



def _sgd(fed, which, lr):
    opt = torch.optim.SGD(getattr(fed, which).params, lr=lr)
    setattr(fed, which + "_opt", opt)


def test_critic_step_is_sgd_on_the_fedora_td3_target():
    """A critic-only local step with plain SGD moves every critic by -lr grad of sum_m mean_B sum_i (Q_i - y)^2,
    y = r + gamma max{min_i Q'_i(s', a~), min_i Q_g,i(s', a~)} (local target only for the isolated run),
    a~ = clip(pi'(s') + clipped noise), all written out here."""
    torch.manual_seed(0)
    fed = _toy_federation()
    _one_round(fed)
    fed.start_round()  # round 2: global, target and online critics all differ
    assert fed.step_count % 2 == 0  # the next step is critic-only
    # shift the global critics' output bias: run 0's above its clients' targets, run 1's below, and the
    # isolated run's above (which its clients must ignore)
    fed.global_critic[-1] += torch.tensor([5.0, 5.0, -5.0, -5.0, 5.0, 5.0]).view(-1, 1, 1)
    _sgd(fed, "critic", 0.01)
    before = [p.detach().clone() for p in fed.critic.params]
    actor_before = [p.detach().clone() for p in fed.actor.params]
    state = fed.gen.get_state()
    fed.local_step()
    obs, action, reward, next_obs, noise = _draw_batch(fed, state)
    hp = fed.hp
    next_a = (2 * torch.tanh(_mlp(fed.actor_target, next_obs)) + noise).clamp(-2, 2)
    local = _twins(fed.critic_target, next_obs, next_a).min(1).values
    glob = _twins(_per_member(fed.global_critic, fed, True), next_obs, next_a).min(1).values
    federated = torch.tensor([True] * 6 + [False] * 3)[:, None]
    y = reward + hp["gamma"] * torch.where(federated, torch.maximum(local, glob), local)
    assert (glob > local)[:3].all() and (glob < local)[3:6].all() and (glob > local)[6:].all()  # all three cases
    params = [p.clone().requires_grad_(True) for p in before]
    loss = ((_twins(params, obs, action) - y[:, None, :]) ** 2).sum(1).mean(-1).sum()
    grads = torch.autograd.grad(loss, params)
    for p, p0, g in zip(fed.critic.params, before, grads):
        assert torch.allclose(p.detach(), p0 - 0.01 * g, rtol=1e-5, atol=1e-6)
    assert max(float((0.01 * g).abs().max()) for g in grads) > 1e-3
    assert all(torch.equal(p.detach(), q) for p, q in zip(fed.actor.params, actor_before))  # policy delay


def test_actor_step_is_sgd_on_the_fedora_actor_loss_and_targets_follow():
    """The delayed actor step with plain SGD moves every actor by -lr grad of sum_m [-lambda delta mean Q_1(s, pi(s))
    + bc delta mean |pi - a|^2 + alpha_0 mean |pi - pi_g|^2 + alpha_2 mean |pi - pi_prev|^2], lambda = alpha / mean |Q_1|
    held constant (alpha = hp alpha, here 1.5 rather than TD3+BC's 2.5), pi_prev the client's actor at the end of the
    previous round (not the broadcast global one); then the targets move tau of the way to the online weights."""
    torch.manual_seed(0)
    fed = _toy_federation()
    fed.hp = dict(fed.hp, alpha=1.5)
    _one_round(fed)
    prev = [p.detach().clone() for p in fed.actor.params]  # end of round 1, before the broadcast
    fed.start_round()
    fed.local_step()  # critic only
    fed.delta = torch.linspace(0.6, 1.0, fed.M)
    fed.alpha0 = torch.linspace(0.0, 0.8, fed.M)
    _sgd(fed, "actor", 0.05)
    actor_before = [p.detach().clone() for p in fed.actor.params]
    targets_before = [t.clone() for t in fed.actor_target], [t.clone() for t in fed.critic_target]
    state = fed.gen.get_state()
    fed.local_step()  # critic, then actor and targets
    obs, action, _, _, _ = _draw_batch(fed, state)
    critic = [p.detach() for p in fed.critic.params]  # after this step's critic update
    hp = fed.hp
    params = [p.clone().requires_grad_(True) for p in actor_before]
    pi = 2 * torch.tanh(_mlp(params, obs))
    q1 = _twins(critic, obs, pi)[:, 0]
    lam = 1.5 / q1.abs().mean(-1).detach()
    pi_g = 2 * torch.tanh(_mlp(_per_member(fed.global_actor, fed, False), obs))
    pi_prev = 2 * torch.tanh(_mlp(prev, obs))
    bc = torch.tensor([1.0, 0.0, 1.0] + [1.0] * 6)  # the stress run's medium client is pure TD3
    sq = lambda u, v: ((u - v) ** 2).sum(-1).mean(-1)  # noqa: E731
    loss = (-lam * fed.delta * q1.mean(-1) + bc * fed.delta * sq(pi, action) + fed.alpha0 * sq(pi, pi_g)
            + hp["alpha2"] * sq(pi, pi_prev)).sum()
    grads = torch.autograd.grad(loss, params)
    for p, p0, g in zip(fed.actor.params, actor_before, grads):
        assert torch.allclose(p.detach(), p0 - 0.05 * g, rtol=1e-5, atol=1e-6)
    assert max(float((0.05 * g).abs().max()) for g in grads) > 1e-3
    for online, old, new in ((fed.actor.params, targets_before[0], fed.actor_target),
                             (fed.critic.params, targets_before[1], fed.critic_target)):
        for p, t0, t in zip(online, old, new):
            assert torch.allclose(t, (1 - hp["tau"]) * t0 + hp["tau"] * p.detach(), atol=1e-7)


def _hand_scores(fed, actor, critic):
    """(J_k, PI_k) on each member's score transitions with per-member actor and critic weights."""
    idx = fed.data["score_idx"][..., None]
    obs = torch.gather(fed.data["obs"], 1, idx.expand(-1, -1, 3))
    action = torch.gather(fed.data["action"], 1, idx)
    mask = fed.data["score_mask"]
    pi = 2 * torch.tanh(_mlp(actor, obs))
    q1 = _twins(critic, obs, pi)[:, 0]
    j = (q1 * mask).sum(-1) / mask.sum(-1)
    return j, (((pi - action) ** 2).mean(-1) * mask).sum(-1) / mask.sum(-1)


def test_start_round_scores_with_the_last_rounds_scaling_and_sets_alpha0():
    """Round 2's start: S_loc = c J_loc - PI_loc (own actor and critic, before the broadcast) and S_g the same
    for the run's global actor judged by the client's own critic (the global critic's value is kept for the decay), with c the scaling factor of round 1 (mean PI / mean |J|; 0 in round 1);
    alpha_0,k = rho alpha_0 where S_loc > S_g in the adaptive run, alpha_0 elsewhere, 0 for isolated clients."""
    torch.manual_seed(0)
    fed = _toy_federation()
    first = fed.start_round()
    j0, pi0 = _hand_scores(fed, fed.actor.params, fed.critic.params)
    assert torch.allclose(first["s_local"], -pi0, atol=1e-6)  # c = 0 before any round
    for _ in range(4):
        fed.local_step()
    end = fed.finish_round()
    c = end["pi"].mean(1) / end["j"].abs().mean(1)
    assert torch.allclose(end["c"], c) and (c > 0).all()
    actor, critic = [p.detach().clone() for p in fed.actor.params], [p.detach().clone() for p in fed.critic.params]
    begin = fed.start_round()
    cm = c.repeat_interleave(3)
    j_loc, pi_loc = _hand_scores(fed, actor, critic)
    global_actor = _per_member(fed.global_actor, fed, False)
    j_g, pi_g = _hand_scores(fed, global_actor, _per_member(fed.global_critic, fed, True))
    j_g_own, pi_g_own = _hand_scores(fed, global_actor, critic)  # the global actor under the client's own critic
    assert torch.allclose(begin["s_local"], cm * j_loc - pi_loc, atol=1e-5)
    assert torch.allclose(begin["s_global"], cm * j_g_own - pi_g_own, atol=1e-5)
    assert not torch.allclose(j_g_own, j_g, atol=1e-3)  # the two critics differ, so the choice matters
    assert torch.allclose(fed.value_global, j_g, atol=1e-5)  # FEDORA's decay keeps the global critic
    adaptive = torch.where(begin["s_local"][3:6] > begin["s_global"][3:6], 0.1, 1.0)
    assert torch.allclose(begin["alpha0"], torch.cat([torch.ones(3), adaptive, torch.zeros(3)]))


def test_finish_round_decays_delta_from_the_previous_value_and_aggregates_by_run():
    """delta_k <- 0.995 delta_k (the round's incoming delta, not 1) exactly where the global model's value beat
    the client's J after training; weights per run: FEDORA softmax(0.1 J), combined softmax(S / std S) with
    S = c J - PI, isolated 1/K; every global weight (actor, both critic twins) is the weighted client sum."""
    torch.manual_seed(0)
    fed = _toy_federation(("fedora", "combined", "isolated"))
    _one_round(fed)
    fed.start_round()
    for _ in range(3):
        fed.local_step()
    j, pinc = _hand_scores(fed, fed.actor.params, fed.critic.params)
    better = torch.tensor([1, 0, 1, 0, 0, 1, 1, 1, 0], dtype=torch.bool)
    fed.value_global = torch.where(better, j + 1.0, j - 1.0)
    fed.delta = torch.linspace(0.5, 0.9, 9)
    out = fed.finish_round()
    assert torch.allclose(out["j"].reshape(-1), j, atol=1e-5) and torch.allclose(out["pi"].reshape(-1), pinc, atol=1e-6)
    assert torch.allclose(fed.delta, torch.where(better, 0.995, 1.0) * torch.linspace(0.5, 0.9, 9))
    jr, pr = j.view(3, 3).double(), pinc.view(3, 3).double()
    e = torch.exp(0.1 * jr[0])
    s = (pr[1].mean() / jr[1].abs().mean()) * jr[1] - pr[1]
    e2 = torch.exp(s / s.std(unbiased=False))
    want = torch.stack([e / e.sum(), e2 / e2.sum(), torch.full((3,), 1 / 3, dtype=torch.float64)]).float()
    assert torch.allclose(out["weights"], want, atol=1e-5)
    w = out["weights"]
    for p, g in zip(fed.actor.params, fed.global_actor):
        for r in range(3):
            assert torch.allclose(g[r], sum(w[r, k] * p[3 * r + k].detach() for k in range(3)), atol=1e-6)
    for p, g in zip(fed.critic.params, fed.global_critic):
        for r in range(3):
            for t in range(2):
                manual = sum(w[r, k] * p[2 * (3 * r + k) + t].detach() for k in range(3))
                assert torch.allclose(g[2 * r + t], manual, atol=1e-6)


def test_actor_loss_holds_lambda_constant_in_the_gradient():
    """d loss / d Q_1(s_b, pi(s_b)) = -lambda delta / B exactly: lambda = alpha / mean |Q| is not differentiated."""
    q1 = torch.tensor([[-2.0, -4.0, 1.0]], requires_grad=True)
    z = torch.zeros(1, 3, 1)
    loss = method.actor_loss(q1, z, z, z, z, torch.tensor([0.5]), torch.tensor([0.0]), 0.0, torch.tensor([1.0]))
    loss.sum().backward()
    assert torch.allclose(q1.grad, torch.full((1, 3), -(2.5 / (7 / 3)) * 0.5 / 3))


# ---- mutation-hardening (issue 44): edge cases, small scales, defaults, the remaining entry points ----


def test_ensemble_initialisation_is_torchs_linear_uniform():
    """Every weight and bias of a layer with fan-in n is drawn from U(-1/sqrt(n), 1/sqrt(n)): all inside the
    bound, the extremes near it on both sides, mean about 0; distinct=2 alternates two draws over members."""
    net = method.Ensemble(4, [9, 400, 1], torch.Generator().manual_seed(0), distinct=2)
    for p, fan_in in zip(net.params, (9, 9, 400, 400)):
        bound = 1 / math.sqrt(fan_in)
        assert p.shape[0] == 4 and p.requires_grad
        p = p.detach()
        assert float(p.max()) <= bound and float(p.min()) >= -bound
        if p.numel() >= 1600:
            assert float(p.max()) > 0.95 * bound and float(p.min()) < -0.95 * bound and abs(float(p.mean())) < 0.05 * bound
        assert torch.equal(p[0], p[2]) and torch.equal(p[1], p[3]) and not torch.equal(p[0], p[1])
    x = torch.randn(4, 2, 9)
    assert torch.allclose(net(x), torch.relu(x @ net.params[0] + net.params[1]) @ net.params[2] + net.params[3], atol=1e-6)
    copies = net.copy_params()
    assert all(not c.requires_grad and torch.equal(c, p) for c, p in zip(copies, net.params))


def test_actor_loss_lambda_at_a_small_mean_abs_q_and_default_alpha():
    """lambda = alpha / mean |Q| also below 1 (mean |Q| = 0.25 -> lambda = 10 at the default alpha 2.5); the
    1e-6 floor only guards a zero mean (Q = 0 gives a finite loss)."""
    q1 = torch.tensor([[0.5, -0.25, 0.0, 0.25]], requires_grad=True)  # mean |Q| = 0.25
    z = torch.zeros(1, 4, 1)
    loss = method.actor_loss(q1, z, z, z, z, torch.tensor([1.0]), torch.tensor([0.0]), 0.0, torch.tensor([1.0]))
    assert float(loss[0].detach()) == pytest.approx(-10.0 * 0.125)
    loss.sum().backward()
    assert torch.allclose(q1.grad, torch.full((1, 4), -10.0 / 4))
    zero = method.actor_loss(torch.zeros(1, 4), z, z, z, z, torch.tensor([1.0]), torch.tensor([0.0]), 0.0,
                             torch.tensor([1.0]))
    assert torch.isfinite(zero).all() and float(zero[0]) == 0.0


def test_decay_delta_keeps_delta_on_a_tie_and_uses_its_rate():
    """delta decays only where the global value is strictly higher; a tie keeps it; another rate is used as given."""
    d = method.decay_delta(torch.tensor([0.8, 0.8]), torch.tensor([-2.0, -1.0]), torch.tensor([-2.0, -3.0]), rate=0.5)
    assert torch.allclose(d, torch.tensor([0.8, 0.4]))


def test_weights_are_scale_free_at_small_scales_too():
    """softmax(J / std J) and softmax(S / std S) depend only on the shape of the scores: J and PI a thousand
    times smaller (std well below 1) give the same weights; c scales as mean PI / mean |J|."""
    j = torch.tensor([-10.0, -20.0, -30.0])
    pinc = torch.tensor([0.1, 0.2, 0.6])
    small = 1e-3
    assert torch.allclose(method.q_std_weights(small * j), method.q_std_weights(j), atol=1e-6)
    assert torch.allclose(method.combined_weights(small * j, small * pinc), method.combined_weights(j, pinc), atol=1e-6)
    assert float(method.scaling_factor(small * j, pinc)) == pytest.approx(0.3 / (small * 20), rel=1e-5)
    equal = method.combined_weights(torch.full((3,), -5.0), torch.full((3,), 0.2))
    assert torch.allclose(equal, torch.full((3,), 1 / 3)) and torch.allclose(method.q_std_weights(torch.full((4,), 2.0)), torch.full((4,), 0.25))


def test_adaptive_alpha0_default_rho_and_strict_comparison():
    """alpha_0,k = rho alpha_0 with the default rho = 0.1 where S_loc > S_g strictly; a tie keeps alpha_0."""
    got = method.adaptive_alpha0(torch.tensor([2.0, 1.0, 0.5]), torch.tensor([1.0, 1.0, 1.0]), 3.0)
    assert torch.allclose(got, torch.tensor([0.3, 3.0, 3.0]))


def test_unknown_names_are_refused_with_the_valid_ones():
    """An unknown aggregator or score kind raises a ValueError that lists the valid names; scores() defaults
    to the clients' own models."""
    fed = _toy_federation()
    with pytest.raises(ValueError, match="unknown aggregator 'nope'; valid: combined, none, q_softmax, q_std, uniform"):
        fed._weights("nope", torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match="unknown scores 'nope'; valid: local, global, global_own_critic"):
        fed.scores("nope")
    with pytest.raises(ValueError, match="n = 3 members is not a multiple of distinct = 2"):
        method.Ensemble(3, [2, 1], torch.Generator().manual_seed(0), distinct=2)
    default, local = fed.scores(), fed.scores("local")
    assert all(torch.equal(a, b) for a, b in zip(default, local))


def test_act_local_and_act_global_are_the_clients_and_the_runs_policies():
    """act_local = 2 tanh(f_k(s)) with each client's own weights, act_global = 2 tanh(f_g(s)) with each run's
    global weights (after a round they differ)."""
    torch.manual_seed(0)
    fed = _toy_federation()
    _one_round(fed)
    obs = torch.randn(fed.M, 5, 3)
    assert torch.allclose(fed.act_local(obs), 2 * torch.tanh(_mlp([p.detach() for p in fed.actor.params], obs)), atol=1e-6)
    obs_r = torch.randn(fed.R, 5, 3)
    assert torch.allclose(fed.act_global(obs_r), 2 * torch.tanh(_mlp(fed.global_actor, obs_r)), atol=1e-6)
    assert not torch.allclose(fed.act_global(obs_r), fed.act_local(obs_r.repeat_interleave(fed.K, 0))[:: fed.K], atol=1e-4)


def test_federation_starts_from_the_documented_state():
    """Before any round: delta = 1, alpha_0 = hp alpha_0 for federated clients and 0 for isolated ones, c = 0,
    no step taken, pi_prev and both targets equal to the online weights, every run's global actor the shared
    initial actor; the stress run's medium client has bc = 0."""
    fed = _toy_federation()
    assert torch.equal(fed.delta, torch.ones(9)) and torch.equal(fed.c, torch.zeros(3)) and fed.step_count == 0
    assert torch.equal(fed.alpha0, torch.tensor([1.0] * 6 + [0.0] * 3))
    half = method.Federation(fed.specs, 3, fed.data, dict(_HP, alpha0=0.5), 0)
    assert torch.equal(half.alpha0, torch.tensor([0.5] * 6 + [0.0] * 3))
    assert torch.equal(fed.bc, torch.tensor([1.0, 0.0, 1.0] + [1.0] * 6)) and fed.bc.dtype == torch.float32
    assert torch.equal(fed.federated, torch.tensor([True] * 6 + [False] * 3))
    for copies, online in ((fed.prev_actor, fed.actor.params), (fed.actor_target, fed.actor.params),
                           (fed.critic_target, fed.critic.params)):
        assert all(torch.equal(c, p.detach()) for c, p in zip(copies, online))
    for g, p in zip(fed.global_actor, fed.actor.params):
        assert g.shape[0] == fed.R and torch.equal(g, p.detach()[:1].expand_as(g))
    for g, p in zip(fed.global_critic, fed.critic.params):
        assert g.shape[0] == 2 * fed.R


def test_start_round_overwrites_the_critics_of_fedora_style_runs_only():
    """The broadcast overwrites both twins of every client of an overwrite run with its run's global twins;
    keep-own and isolated clients keep their own critics (and actors)."""
    torch.manual_seed(0)
    fed = _toy_federation(("fedora", "combined_adaptive", "isolated"))
    _one_round(fed)
    before_c = [p.detach().clone() for p in fed.critic.params]
    before_a = [p.detach().clone() for p in fed.actor.params]
    fed.start_round()
    for p, g, b in zip(fed.critic.params, fed.global_critic, before_c):
        for m in range(9):
            for t in range(2):
                want = g[2 * (m // 3) + t] if m < 3 else b[2 * m + t]
                assert torch.equal(p[2 * m + t].detach(), want)
        assert not torch.equal(b[:6], p.detach()[:6])
    for p, b in zip(fed.actor.params, before_a):
        assert torch.equal(p.detach()[3:], b[3:])


def test_finish_round_weights_of_uniform_q_std_and_tempered_runs():
    """The server's weights per aggregator with the run's temperature factor: FedAvg 1/K; q_std softmax(J / (T
    std J)); q_softmax softmax(beta J / temp); combined softmax(S / (T std S)) with T = temperature x temp."""
    torch.manual_seed(0)
    specs = [method.RunSpec("uniform"), method.RunSpec("q_std", temp=2.0), method.RunSpec("q_softmax", temp=0.5),
             method.RunSpec("combined", temp=3.0)]
    data = experiment.pack_clients(_toy_clients(), len(specs), 6, 0)
    hp = dict(_HP, temperature=0.7, beta=0.3)
    fed = method.Federation(specs, 3, data, hp, 0)
    out = _one_round(fed)
    j, pinc = out["j"].double(), out["pi"].double()
    assert torch.allclose(out["weights"][0], torch.full((3,), 1 / 3))

    def soft(x):
        e = torch.exp(x - x.max())
        return e / e.sum()

    assert torch.allclose(out["weights"][1].double(), soft(j[1] / (0.7 * 2.0 * j[1].std(unbiased=False))), atol=1e-5)
    assert torch.allclose(out["weights"][2].double(), soft(0.3 / 0.5 * j[2]), atol=1e-5)
    s = pinc[3].mean() / j[3].abs().mean() * j[3] - pinc[3]
    assert torch.allclose(out["weights"][3].double(), soft(s / (0.7 * 3.0 * s.std(unbiased=False))), atol=1e-5)
    assert not torch.allclose(out["weights"][1:], torch.full((3, 3), 1 / 3), atol=1e-3)
    plain = method.RunSpec("uniform")  # FEDORA's defaults: overwrite, fixed alpha_0, TD3+BC everywhere, temp 1
    assert (plain.keep_own, plain.adaptive, plain.bc, plain.temp) == (False, False, [], 1.0)


def test_weights_of_several_runs_at_once_are_per_row():
    """Given (R, K) scores, q_std and combined weights (and c) are computed row by row: each run's clients only."""
    j = torch.tensor([[-10.0, -20.0, -30.0], [-1.0, -1.5, -4.0]])
    pinc = torch.tensor([[0.1, 0.2, 0.6], [0.3, 0.1, 0.2]])
    both_q, both_c = method.q_std_weights(j), method.combined_weights(j, pinc)
    for r in range(2):
        assert torch.allclose(both_q[r], method.q_std_weights(j[r])) and torch.allclose(both_c[r], method.combined_weights(j[r], pinc[r]))
    assert torch.allclose(method.scaling_factor(j, pinc), torch.tensor([0.3 / 20, 0.2 / (6.5 / 3)]), rtol=1e-5)


def test_local_step_optimisers_use_the_learning_rate_and_clip_the_smoothing_noise():
    """Adam's first critic step moves each weight by at most lr (about lr where the gradient is clearly non-zero)
    with lr = hp lr = 0.05; with large smoothing noise (std 2 x 1.0) clipped at 2 x 0.3, the critic step is SGD on
    the target built from the clipped noise and clipped actions (written out)."""
    torch.manual_seed(0)
    fed = method.Federation([method.RunSpec("uniform")], 3, experiment.pack_clients(_toy_clients(), 1, 6, 0),
                            dict(_HP, lr=0.05), 0)
    before = [p.detach().clone() for p in fed.critic.params]
    fed.local_step()
    moves = torch.cat([(p.detach() - b).abs().reshape(-1) for p, b in zip(fed.critic.params, before)])
    assert float(moves.max()) <= 0.05 * (1 + 1e-5) and float(moves.max()) > 0.04 and fed.step_count == 1
    before = [p.detach().clone() for p in fed.actor.params]
    fed.local_step()  # the actor's first (Adam) step
    moves = torch.cat([(p.detach() - b).abs().reshape(-1) for p, b in zip(fed.actor.params, before)])
    assert float(moves.max()) <= 0.05 * (1 + 1e-5) and float(moves.max()) > 0.04 and fed.step_count == 2
    fed = _toy_federation()
    fed.hp = dict(fed.hp, policy_noise=1.0, noise_clip=0.3)
    _one_round(fed)
    fed.start_round()
    # saturate the target actors at +2 (even members) and -2 (odd): the smoothed actions leave [-2, 2] both ways
    fed.actor_target[-1] += 10.0 * torch.tensor([1.0, -1.0] * 4 + [1.0]).view(-1, 1, 1)
    _sgd(fed, "critic", 0.01)
    before = [p.detach().clone() for p in fed.critic.params]
    state = fed.gen.get_state()
    fed.local_step()
    obs, action, reward, next_obs, noise = _draw_batch(fed, state)
    assert float(noise.abs().max()) == pytest.approx(0.6) and float((noise.abs() == 0.6).float().mean()) > 0.5
    raw = 2 * torch.tanh(_mlp(fed.actor_target, next_obs)) + noise
    assert float(raw.max()) > 2.3 and float(raw.min()) < -2.3
    next_a = raw.clamp(-2, 2)
    local = _twins(fed.critic_target, next_obs, next_a).min(1).values
    glob = _twins(_per_member(fed.global_critic, fed, True), next_obs, next_a).min(1).values
    y = reward + fed.hp["gamma"] * torch.where(fed.federated[:, None], torch.maximum(local, glob), local)
    params = [p.clone().requires_grad_(True) for p in before]
    grads = torch.autograd.grad(((_twins(params, obs, action) - y[:, None, :]) ** 2).sum(1).mean(-1).sum(), params)
    for p, p0, g in zip(fed.critic.params, before, grads):
        assert torch.allclose(p.detach(), p0 - 0.01 * g, rtol=1e-5, atol=1e-6)


def test_actor_loss_and_scores_are_per_member_and_per_leading_index():
    """The actor loss is one value per member (each its own proximal term), and J_k, PI_k accept leading
    dimensions (..., N): a (R, K, N) stack gives the (R, K) per-client values."""
    z = torch.zeros(2, 2, 1)
    pi_prev = torch.tensor([[[1.0], [1.0]], [[0.0], [2.0]]])  # prox_prev per member: 1 and 2
    got = method.actor_loss(torch.ones(2, 2), z, z, z, pi_prev, torch.zeros(2), torch.zeros(2), 0.5, torch.zeros(2))
    assert torch.allclose(got, torch.tensor([0.5, 1.0]))
    q = torch.arange(12.0).view(2, 2, 3)
    mask = torch.tensor([[[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], [[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]])
    assert torch.allclose(method.value_score(q, mask), torch.tensor([[0.5, 3.0], [7.0, 10.5]]))
    act = torch.zeros(2, 2, 3, 1)
    assert torch.allclose(method.policy_inconsistency(q[..., None], act, mask), torch.tensor([[0.5, 9.0], [(36 + 49 + 64) / 3, 110.5]]))
    fed = _toy_federation(("fedora",))
    j, pinc = torch.tensor([-1.0, -2.0, -4.0]), torch.tensor([0.1, 0.2, 0.3])
    assert torch.allclose(fed._weights("q_softmax", j, pinc), method.q_softmax_weights(j, _HP["beta"]))
