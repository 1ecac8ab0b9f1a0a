"""Unit tests of replib.papers.cogrouter (CoSFT then CoPO on DepthWorld)."""

import copy
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from replib.papers.cogrouter import exercises, experiment, method, task, theory
from replib.rl import kl_k3


@pytest.fixture(autouse=True)
def one_thread():
    from replib.core.runtime import compute_threads

    with compute_threads(1):
        yield


def hand_task(types, arrows, cues, plan):
    """A one-task dict built by hand, with memory and correct actions computed independently."""
    types = np.array([types])
    memory, last = [], -1
    for s in range(task.N_STAGES):
        memory.append(last)
        if types[0, s] == task.ROUTINE:
            last = cues[s]
    memory = np.array([memory])
    arrows, cues, plan = np.array([arrows]), np.array([cues]), np.array([plan])
    correct = np.where(types == task.ROUTINE, arrows, np.where(types == task.RECALL, memory, plan))
    return {"types": types, "arrows": arrows, "cues": cues, "plan": plan, "memory": memory, "correct": correct}


R, C, P = task.ROUTINE, task.RECALL, task.PLAN
TASK = hand_task(
    types=[R, C, R, P, R, R, C, R, R, R],
    arrows=[2, -1, 0, -1, 3, 1, -1, 2, 2, 0],
    cues=[1, -1, 3, -1, 0, 2, -1, 1, 0, 3],
    plan=[-1, -1, -1, 2, -1, -1, -1, -1, -1, -1],
)


def play(one_task, actions, variant="noisy"):
    state = task.new_state(1)
    for a in actions:
        if not state["alive"][0]:
            break
        task.env_step(one_task, state, np.array([0]), np.array([a]), variant)
    return state


# ---- DepthWorld -------------------------------------------------------------------------------


def test_sampled_tasks_follow_the_rules():
    tasks = task.sample_tasks(2000, np.random.default_rng(0))
    types = tasks["types"]
    assert types.shape == (2000, task.N_STAGES) and np.all(types[:, 0] == task.ROUTINE)
    share = np.bincount(types[:, 1:].ravel(), minlength=3) / types[:, 1:].size
    assert np.allclose(share, task.TYPE_PROBS, atol=0.02)
    routine = types == task.ROUTINE
    assert np.all((tasks["arrows"] >= 0) == routine) and np.all((tasks["cues"] >= 0) == routine)
    assert np.all((tasks["plan"] >= 0) == (types == task.PLAN))
    for i in range(50):  # recall answer = the cue of the most recent routine stage before it
        for s in np.flatnonzero(types[i] == task.RECALL):
            last = max(j for j in range(s) if types[i, j] == task.ROUTINE)
            assert tasks["correct"][i, s] == tasks["cues"][i, last]
    assert np.all(tasks["correct"][routine] == tasks["arrows"][routine])
    assert np.all(tasks["correct"] >= 0)


def test_correct_play_wins_and_recall_needs_the_last_cue():
    assert TASK["correct"][0].tolist() == [2, 1, 0, 2, 3, 1, 2, 2, 2, 0]  # recall at 6 -> cue of stage 5
    state = play(TASK, TASK["correct"][0])
    assert state["passed"][0] and not state["alive"][0] and state["steps"][0] == 10
    assert task.episode_returns(state).tolist() == [1.0]


def test_wrong_routine_action_repeats_the_stage():
    state = task.new_state(1)
    ok = task.env_step(TASK, state, np.array([0]), np.array([1]))  # arrow is 2
    assert not ok[0] and state["stage"][0] == 0 and state["steps"][0] == 1 and state["alive"][0]
    obs_before = task.observe(TASK, [0], [0])
    assert np.array_equal(obs_before, task.observe(TASK, [0], state["stage"]))  # same arrow and cue
    task.env_step(TASK, state, np.array([0]), np.array([2]))
    assert state["stage"][0] == 1 and state["steps"][0] == 2


def test_wrong_recall_or_plan_action_ends_the_episode():
    for stage in (1, 3):  # recall, plan
        actions = list(TASK["correct"][0, :stage]) + [(TASK["correct"][0, stage] + 1) % 4]
        state = play(TASK, actions)
        assert not state["alive"][0] and not state["passed"][0] and state["stage"][0] == stage
        assert task.episode_returns(state).tolist() == [0.0]
    # strong variant: the stage is passed, the mistake is counted, the win becomes a 0.3 coin
    wrong = (TASK["correct"][0, 1] + 1) % 4
    actions = [TASK["correct"][0, 0], wrong] + list(TASK["correct"][0, 2:])
    state = play(TASK, actions, variant="strong")
    assert state["passed"][0] and state["wrong"][0] == 1
    wins = [task.episode_returns(state, np.random.default_rng(i), "strong")[0] for i in range(400)]
    assert 0.2 < np.mean(wins) < 0.4


def test_step_limit():
    c = list(TASK["correct"][0])
    wrong0 = (c[0] + 1) % 4
    state = play(TASK, [wrong0] * 4 + c)  # 4 wasted + 10 = 14 steps: still a win
    assert state["passed"][0] and state["steps"][0] == 14 and task.episode_returns(state).tolist() == [1.0]
    state = play(TASK, [wrong0] * 5 + c)  # 5 wasted: the limit stops it at stage 9
    assert not state["passed"][0] and not state["alive"][0] and state["steps"][0] == task.MAX_STEPS
    assert state["stage"][0] == 9 and task.episode_returns(state).tolist() == [0.0]
    with pytest.raises(ValueError):
        task.env_step(TASK, state, np.array([0]), np.array([0]))


def test_observation_and_views():
    eps, stages = np.arange(1).repeat(10), np.arange(10)
    obs = task.observe(TASK, eps, stages)
    assert obs.shape == (10, task.obs_dim()) == (10, 11) and obs.dtype == np.float32
    assert obs[0, :4].tolist() == [0, 0, 1, 0] and obs[0, 4:8].tolist() == [0, 1, 0, 0]
    assert obs[1, :8].sum() == 0 and obs[1, 8] == 1 and obs[3, 9] == 1 and obs[3, 10] == pytest.approx(0.3)
    mem, look = task.memory_readout(TASK, eps, stages), task.lookahead_readout(TASK, eps, stages)
    assert mem[0].sum() == 0 and mem[6].tolist() == [0, 0, 1, 0] and look[3].tolist() == [0, 0, 1, 0]
    assert look[np.arange(10) != 3].sum() == 0
    views = task.thought_views(obs, mem, look, np.random.default_rng(0))
    d = task.obs_dim()
    assert views.shape == (10, 4, task.view_dim()) == (10, 4, 19)
    assert np.array_equal(views[:, 0, :d], obs) and views[:, 0, d:].sum() == 0  # level 1: clean obs
    for level in (1, 2, 3):  # levels 2-4: noisy arrow/cue, clean flags and stage
        assert np.abs(views[:, level, :8] - obs[:, :8]).mean() > 0.2
        assert np.array_equal(views[:, level, 8:d], obs[:, 8:])
    assert np.all(views[:, 1, d:] == 0) and np.all(views[:, 2, d + 4:] == 0)
    assert np.abs(views[:, 2:, d:d + 4]).min() > 0 and np.abs(views[:, 3, d + 4:]).min() > 0
    assert np.abs(views[:, 1, :8] - views[:, 2, :8]).max() > 0  # each level draws its own noise
    strong = task.sample_tasks(3, np.random.default_rng(1), "strong")
    assert task.observe(strong, [0, 1], [0, 0], "strong").shape == (2, 15) and task.view_dim("strong") == 23
    plan = strong["types"] == task.PLAN
    assert np.all(strong["distances"][~plan] == 0)
    with pytest.raises(ValueError):
        task.obs_dim("clean")


# ---- the agent, CoSFT, rollouts --------------------------------------------------------------


def test_policy_response_logprob_and_fixed_level():
    policy = task.make_policy(seed=3)
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(5, 11, generator=gen)
    views = torch.randn(5, 19, generator=gen)
    levels, actions = torch.tensor([0, 1, 2, 3, 0]), torch.tensor([1, 2, 3, 0, 0])
    lp = policy.response_logprob(obs, levels, views, actions)
    want = policy.level_logprobs(obs)[torch.arange(5), levels] + policy.action_logprobs(levels, views)[torch.arange(5), actions]
    assert torch.allclose(lp, want)
    hot = policy.level_logprobs(obs, temperature=0.4).exp().max(1).values
    assert torch.all(hot >= policy.level_logprobs(obs).exp().max(1).values - 1e-6)
    fixed = copy.deepcopy(policy)
    fixed.fixed_level = 3
    assert torch.allclose(fixed.response_logprob(obs, levels, views, actions),
                          policy.action_logprobs(levels, views)[torch.arange(5), actions])
    roll = task.rollout(fixed, task.sample_tasks(8, np.random.default_rng(0)), np.random.default_rng(1))
    assert np.all(roll["level"] == 3)


def test_cosft_learns_and_rollout_shapes():
    policy = task.make_policy(seed=0)
    b = task.cosft_batch(np.random.default_rng(0), 4000)
    sufficient = np.array(task.SUFFICIENT_LEVEL)[b["types"]] - 1
    assert 0.72 < np.mean(b["levels"] == sufficient) < 0.82  # 0.7 + 0.3 / 4
    losses = task.cosft(policy, 60, seed=0, batch=64)
    assert losses.shape == (60,) and losses[-10:].mean() < losses[:10].mean()
    tasks = task.sample_tasks(6, np.random.default_rng(2))
    roll = task.rollout(policy, task.repeat_tasks(tasks, 2), np.random.default_rng(3))
    m = len(roll["episode"])
    assert roll["obs"].shape == (m, 11) and roll["views"].shape == (m, 4, 19)
    assert np.array_equal(np.bincount(roll["episode"], minlength=12), roll["length"])
    assert np.all(roll["length"] <= task.MAX_STEPS) and roll["returns"].shape == (12,)
    assert np.array_equal(roll["returns"] > 0, roll["passed"])
    # the chosen level's view is the thought that acted: level 1's is the clean observation
    l1 = roll["level"] == 0
    assert np.array_equal(roll["views"][l1, 0, :11], roll["obs"][l1])


# ---- CoPO -------------------------------------------------------------------------------------


def test_pooled_group_advantages():
    returns = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    lengths = np.array([[10, 3, 5, 12], [10, 11, 12, 13], [4, 5, 6, 7]])
    adv = method.pooled_group_advantages(returns, lengths)
    pooled = np.repeat(returns[0], lengths[0])
    want = (returns[0] - pooled.mean()) / (pooled.std(ddof=1) + 1e-6)
    assert np.allclose(adv[0], want)
    assert np.all(adv[1:] == 0)
    assert (np.repeat(adv[0], lengths[0])).sum() == pytest.approx(0, abs=1e-9)  # mean zero over steps


def test_pooled_group_advantages_by_hand_per_group():
    """Step 2 on three groups worked by hand: mean and unbiased std over each group's own
    step-samples (a group of two one-step episodes divides by total - 1 = 1), A = (R - mean) /
    (std + 1e-6), and exactly 0 for an all-equal group even where the pooled mean rounds."""
    returns = np.array([[1.0, 0.0], [3.0, 1.0], [0.1, 0.1]])
    lengths = np.array([[1, 1], [1, 3], [1, 2]])
    adv = method.pooled_group_advantages(returns, lengths)
    # group 0: mean 1/2, var (1/4 + 1/4) / 1; group 1: mean 6/4, var (1.5^2 + 3 * 0.5^2) / 3 = 1
    s0 = math.sqrt(0.5)
    want = np.array([[0.5 / (s0 + 1e-6), -0.5 / (s0 + 1e-6)], [1.5 / (1 + 1e-6), -0.5 / (1 + 1e-6)], [0.0, 0.0]])
    np.testing.assert_allclose(adv, want, rtol=1e-12, atol=0)
    assert (0.1 * 1 + 0.1 * 2) / 3 != 0.1  # the pooled mean of group 2 is not exactly 0.1 ...
    assert np.all(adv[2] == 0.0)  # ... yet its advantages are exactly 0


def test_expansion_only_for_successful_steps_in_mixed_groups():
    returns = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])  # G = 2: mixed, all-1, all-0, mixed
    step_episode = np.array([0, 0, 1, 2, 3, 3, 4, 5, 6, 7, 7])
    mask = method.expansion_mask(returns, step_episode, G=2)
    assert mask.tolist() == [True, True, False, False, False, False, False, False, False, True, True]


def _two_group_rollout(types):
    """Five steps of episodes 0 (2 steps), 1, 2, 3; G = 2: group 0 mixed (episode 0 won), group 1 all won;
    ``types``: each step's stage type."""
    rng = np.random.default_rng(0)
    m = 5
    return {"episode": np.array([0, 0, 1, 2, 3]), "obs": rng.random((m, 11)).astype(np.float32),
            "views": rng.standard_normal((m, 4, 19)).astype(np.float32), "level": np.array([1, 3, 0, 2, 1]),
            "action": np.array([0, 1, 2, 3, 0]), "type": np.array(types),
            "returns": np.array([1.0, 0.0, 1.0, 1.0]), "length": np.array([2, 1, 1, 1])}


def test_build_batch_replaces_expanded_steps_by_weighted_variants():
    policy = task.make_policy(seed=1)
    roll = _two_group_rollout([0, 2, 1, 0, 0])
    adv_ep = method.pooled_group_advantages(roll["returns"].reshape(2, 2), roll["length"].reshape(2, 2)).ravel()
    assert adv_ep[0] > 0 > adv_ep[1] and adv_ep[2] == adv_ep[3] == 0
    plain = method.build_batch(policy, roll, G=2, expand=False)
    assert len(plain["advantages"]) == len(roll["episode"]) and plain["n_expanded"] == 0
    assert np.allclose(plain["advantages"].numpy(), adv_ep[roll["episode"]])
    assert torch.equal(plain["views"], torch.from_numpy(roll["views"][np.arange(len(roll["episode"])), roll["level"]]))
    batch = method.build_batch(policy, roll, G=2, expand=True, k=2.0)
    assert batch["n_expanded"] == 2 and len(batch["advantages"]) == 3 + 8
    assert np.allclose(batch["advantages"][:3].numpy(), adv_ep[[1, 2, 3]])  # non-expanded keep A_tau
    conf = method.action_confidences(policy, roll["views"][:2], roll["action"][:2])
    w = method.copo_weights(conf, 2.0)
    assert np.allclose(batch["advantages"][3:].numpy(), (w * adv_ep[0]).ravel(), atol=1e-6)
    assert batch["levels"][3:].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert torch.equal(batch["views"][3:7], torch.from_numpy(roll["views"][0]))  # incl. the original thought
    assert batch["actions"][3:].tolist() == [0] * 4 + [1] * 4
    with torch.no_grad():
        direct = policy.action_logprobs(torch.tensor([2]), torch.from_numpy(roll["views"][0, 2:3])).exp()[0, 0]
    assert conf[0, 2] == pytest.approx(float(direct), rel=1e-5)


def test_build_batch_controls_change_one_factor_each():
    """c6's control quarters the variants' advantages (the step's total is one sample's worth), c5's
    keeps the four variants for the action head only and adds the sampled level, with A_tau, for the
    level head; the paper's batch has both masks 1."""
    rng = np.random.default_rng(0)
    policy = task.make_policy(seed=1)
    m = 5
    roll = {"episode": np.array([0, 0, 1, 2, 3]), "obs": rng.random((m, 11)).astype(np.float32),
            "views": rng.standard_normal((m, 4, 19)).astype(np.float32), "level": np.array([1, 3, 0, 2, 1]),
            "action": np.array([0, 1, 2, 3, 0]), "type": np.array([0, 2, 1, 0, 0]),
            "returns": np.array([1.0, 0.0, 1.0, 1.0]), "length": np.array([2, 1, 1, 1])}
    paper = method.build_batch(policy, roll, G=2)
    assert torch.equal(paper["level_mask"], torch.ones(11)) and torch.equal(paper["action_mask"], torch.ones(11))
    quarter = method.build_batch(policy, roll, G=2, variant_scale=0.25)
    assert torch.allclose(quarter["advantages"][3:], paper["advantages"][3:] / 4)
    assert torch.equal(quarter["advantages"][:3], paper["advantages"][:3])
    assert torch.allclose(quarter["advantages"][3:].reshape(2, 4).sum(1),
                          torch.tensor(method.pooled_group_advantages([[1.0, 0.0]], [[2, 1]])[0, 0]).float())
    sampled = method.build_batch(policy, roll, G=2, expand_levels=False)
    assert len(sampled["advantages"]) == 11 + 2
    assert sampled["level_mask"].tolist() == [1.0] * 3 + [0.0] * 8 + [1.0] * 2
    assert sampled["action_mask"].tolist() == [1.0] * 11 + [0.0] * 2
    assert torch.equal(sampled["advantages"][:11], paper["advantages"])
    assert sampled["levels"][11:].tolist() == [1, 3]  # the sampled levels of the two expanded steps
    adv0 = method.pooled_group_advantages([[1.0, 0.0]], [[2, 1]])[0, 0]
    assert np.allclose(sampled["advantages"][11:].numpy(), adv0)


def test_build_batch_diagnostics_and_level_weights_use_k():
    """Steps 5-8's bookkeeping: the expanded steps' weights are copo_weights(c, k) for the k given
    (paper default k = 2), share_mixed is the share of groups with unequal returns, exp_type and
    exp_obs are the expanded steps' stage types and observations, every float tensor is float32,
    and a batch without expansion has a (0, 4) weight table."""
    policy = task.make_policy(seed=1)
    roll = _two_group_rollout([2, 1, 0, 0, 0])
    conf = method.action_confidences(policy, roll["views"][:2], roll["action"][:2])
    adv0 = method.pooled_group_advantages([[1.0, 0.0]], [[2, 1]])[0, 0]
    for k, kwargs in ((2.0, {}), (4.0, {"k": 4.0})):
        batch = method.build_batch(policy, roll, G=2, **kwargs)
        c_hat = (conf - conf.min(1, keepdims=True)) / (conf.max(1, keepdims=True) - conf.min(1, keepdims=True))
        w = np.exp(k * c_hat) / np.exp(k * c_hat).mean(1, keepdims=True)
        np.testing.assert_allclose(batch["exp_weights"], w, rtol=1e-10)
        np.testing.assert_allclose(batch["advantages"][3:].numpy(), (w * adv0).ravel(), rtol=1e-5)
        assert batch["share_mixed"] == 0.5
        assert batch["exp_type"].tolist() == [2, 1]
        assert np.array_equal(batch["exp_obs"], roll["obs"][:2])
        for key in ("obs", "views", "advantages", "level_mask", "action_mask"):
            assert batch[key].dtype == torch.float32, key
    for plain in (method.build_batch(policy, roll, G=2, expand=False),
                  method.build_batch(policy, {**roll, "returns": np.array([1.0, 1.0, 0.0, 0.0])}, G=2)):
        assert plain["n_expanded"] == 0 and plain["exp_weights"].shape == (0, 4)
        assert plain["exp_type"].shape == (0,) and plain["exp_obs"].shape == (0, 11)
    assert method.build_batch(policy, {**roll, "returns": np.array([1.0, 1.0, 0.0, 0.0])}, G=2)["share_mixed"] == 0.0
    assert method.build_batch(policy, {**roll, "returns": np.array([1.0, 0.0, 0.0, 1.0])}, G=2)["share_mixed"] == 1.0


def test_masked_update_is_one_sgd_step_on_the_masked_objective():
    """policy_update with masks: log pi = m_l log pi(l | s) + m_a log pi(a | view, l); one SGD step
    moves every parameter by -lr x grad of the hand-written masked surrogate + beta k3 - c_H entropy,
    and a sample with m_l = 0 sends no gradient to the level head (a dropped mask or a detached
    term fails)."""
    policy = task.make_policy(seed=5)
    reference = _perturbed(policy, 1)
    batch = _random_batch(3)
    batch["level_mask"] = torch.tensor([1.0, 0, 1, 0, 1, 1, 0, 1])
    batch["action_mask"] = torch.tensor([1.0, 1, 0, 1, 1, 1, 1, 0])
    obs, levels, views, actions = batch["obs"], batch["levels"], batch["views"], batch["actions"]

    def masked_terms(pol):
        lev = torch.log_softmax(pol.level_head(obs), -1)
        act = torch.log_softmax(pol.action_head(torch.cat([torch.nn.functional.one_hot(levels, 4).float(), views], -1)), -1)
        logp = batch["level_mask"] * lev.gather(1, levels[:, None])[:, 0] + batch["action_mask"] * act.gather(1, actions[:, None])[:, 0]
        ent = -batch["level_mask"] * (lev.exp() * lev).sum(-1) - batch["action_mask"] * (act.exp() * act).sum(-1)
        return logp, ent

    logp, ent = masked_terms(policy)
    with torch.no_grad():
        ref, _ = masked_terms(reference)
    d = ref - logp
    surrogate = -(batch["advantages"]).mul(torch.exp(logp - logp.detach())).mean()
    loss = surrogate + 0.5 * (d.exp() - d - 1).mean() - 0.3 * ent.mean()
    params = list(policy.parameters())
    grads = torch.autograd.grad(loss, params)
    before = [p.detach().clone() for p in params]
    stats = method.policy_update(policy, reference, torch.optim.SGD(params, lr=0.1), batch, kl_coef=0.5,
                                 entropy_coef=0.3, grad_clip=1e6)
    assert stats["loss"] == pytest.approx(loss.item(), rel=1e-5)
    for b, p, g in zip(before, params, grads):
        assert torch.allclose(p.detach() - b, -0.1 * g, rtol=1e-3, atol=1e-6)
    # a sample with m_l = 0 sends nothing to the level head: advantages on such samples only, no KL or
    # entropy, and one step leaves the level head where it was while the action head moves
    fresh = task.make_policy(seed=5)
    level_before = [p.detach().clone() for p in fresh.level_head.parameters()]
    action_before = [p.detach().clone() for p in fresh.action_head.parameters()]
    only = {**batch, "advantages": batch["advantages"] * (1 - batch["level_mask"])}
    method.policy_update(fresh, reference, torch.optim.SGD(fresh.parameters(), lr=0.1), only, kl_coef=0.0,
                         entropy_coef=0.0, grad_clip=1e6)
    assert all(torch.equal(a, b) for a, b in zip(level_before, fresh.level_head.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(action_before, fresh.action_head.parameters()))


def test_kl_is_zero_when_policy_equals_reference_and_update_moves_towards_advantage():
    policy = task.make_policy(seed=2)
    reference = copy.deepcopy(policy)
    gen = torch.Generator().manual_seed(0)
    obs, views = torch.randn(6, 11, generator=gen), torch.randn(6, 19, generator=gen)
    levels, actions = torch.tensor([0, 1, 2, 3, 3, 0]), torch.tensor([0, 1, 2, 3, 1, 2])
    lp = policy.response_logprob(obs, levels, views, actions)
    assert torch.allclose(kl_k3(lp, reference.response_logprob(obs, levels, views, actions)), torch.zeros(6))
    batch = {"obs": obs, "levels": levels, "views": views, "actions": actions,
             "advantages": torch.tensor([1.0, 0, 0, 0, 0, 0])}
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    stats = method.policy_update(policy, reference, opt, batch, kl_coef=0.1, entropy_coef=0.0)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-7)
    after = policy.response_logprob(obs, levels, views, actions)
    assert after[0] > lp[0]


# ---- theory -----------------------------------------------------------------------------------


def test_copo_weights_properties():
    rng = np.random.default_rng(0)
    c = rng.random((200, 4))
    for k in (0.5, 2.0, 4.0):
        w = method.copo_weights(c, k)
        assert np.allclose(w.mean(axis=1), 1.0)
        assert np.allclose(w.max(axis=1) / w.min(axis=1), np.exp(k))
        lo, hi = theory.weight_bounds(k)
        assert np.all(w >= lo - 1e-12) and np.all(w <= hi + 1e-12)
    assert np.allclose(theory.weight_bounds(2.0), (4 / (1 + 3 * np.e**2), 4 * np.e**2 / (3 + np.e**2)))
    assert np.allclose(method.copo_weights([0.0, 1.0, 1.0, 1.0]).min(), theory.weight_bounds(2.0)[0])
    assert np.allclose(method.copo_weights([0.0, 0.0, 0.0, 1.0]).max(), theory.weight_bounds(2.0)[1])
    assert np.allclose(method.copo_weights([[0.3, 0.3, 0.3, 0.3 + 1e-7]]), 1.0)  # range <= 1e-6: c_hat = 0.5
    assert np.allclose(method.copo_weights([0.0, 1e-7, 0.0, 0.0]), 1.0)  # clipping to 1e-6 first
    assert np.allclose(method.copo_weights([0.2, 0.9, 0.5, 0.2]), method.copo_weights([0.02, 0.09, 0.05, 0.02]))  # scale-free


def test_minmax_and_copo_weights_on_hand_values_and_edge_cases():
    """Steps 5-7 by hand: c_hat = (c - min) / (max - min), 0.5 everywhere when the range is <= 1e-6
    (a range of exactly 1e-6 included, no division by a zero range), c clipped to [1e-6, 1] first,
    w = exp(k c_hat) / mean exp(k c_hat), computed in float64 whatever the input precision."""
    np.testing.assert_allclose(method._minmax(np.array([[0.2, 0.6, 0.4, 1.0]])), [[0.0, 0.5, 0.25, 1.0]],
                               rtol=1e-12, atol=1e-15)
    assert np.array_equal(method._minmax(np.array([[0.3, 0.3, 0.3, 0.3 + 1e-7]])), np.full((1, 4), 0.5))
    with np.errstate(all="raise"):
        assert np.array_equal(method.copo_weights([0.5, 0.5, 0.5, 0.5]), np.ones(4))
        assert np.array_equal(method.copo_weights([[0.3, 0.3, 0.3, 0.3 + 1e-7]]), np.ones((1, 4)))
    # clipped to [1e-6, 2e-6]: range exactly 1e-6 -> flat
    assert np.array_equal(method.copo_weights([0.0, 0.0, 0.0, 2e-6]), np.ones(4))
    # the lower clip: 0 -> 1e-6 leaves a range of 5e-7 (flat); unclipped it would be 1.5e-6
    assert np.array_equal(method.copo_weights([0.0, 1.5e-6, 1.5e-6, 1.5e-6]), np.ones(4))

    def by_hand(c_hat, k):
        e = [math.exp(k * x) for x in c_hat]
        return [x / (sum(e) / 4) for x in e]

    # the upper clip: 3.0 -> 1.0, so c_hat = (0, 0.5, 1, 1)
    np.testing.assert_allclose(method.copo_weights([0.2, 0.6, 1.0, 3.0]), by_hand([0, 0.5, 1, 1], 2.0), rtol=1e-12)
    np.testing.assert_allclose(method.copo_weights([-1.0, 0.5, 0.5, 1.0], k=3.0),
                               by_hand([0, (0.5 - 1e-6) / (1 - 1e-6), (0.5 - 1e-6) / (1 - 1e-6), 1], 3.0), rtol=1e-12)
    c32 = np.array([0.1, 0.35, 0.7, 0.9], dtype=np.float32)
    w = method.copo_weights(c32)
    c = c32.astype(np.float64)
    assert w.dtype == np.float64
    np.testing.assert_allclose(w, by_hand((c - c.min()) / (c.max() - c.min()), 2.0), rtol=1e-13)


def test_level_update_converges_to_the_fixed_point():
    c = np.array([0.3, 0.3, 0.4, 0.95])
    w = method.copo_weights(c)
    traj = theory.iterate_level_update(c, k=2.0, lr=0.2, iters=600)
    assert traj.shape == (601, 4) and np.allclose(traj[0], 0.25)
    assert np.allclose(traj[-1], theory.level_fixed_point(w), atol=1e-4)
    assert theory.level_fixed_point(w)[3] <= np.e**2 / (np.e**2 + 3) + 1e-12
    cold = theory.iterate_level_update(c, k=2.0, lr=0.2, iters=600, temperature=0.4)
    assert cold[-1, 3] > traj[-1, 3]
    noisy = theory.iterate_level_update([0.9, 0.88, 0.88, 0.88], noise_sd=0.05, iters=300, seed=1)
    assert np.allclose(noisy.sum(axis=1), 1.0)


def test_credit_example():
    df = theory.grpo_vs_copo_credit_example()
    g = df.set_index(["method", "step", "level"])["grad"].sort_index()
    pi = np.full(4, 0.25)
    sigma = np.sqrt(0.25 * 0.75)
    assert np.allclose(g.loc["grpo", "hard"].to_numpy(), 0.25 * (np.eye(4)[3] - pi) / sigma)
    assert np.allclose(g.loc["grpo", "routine"].to_numpy(), 0.0)
    assert abs(g.loc["copo", "routine"].sum()) < 1e-12 and g.loc["copo", "routine"].abs().max() > 0
    assert g.loc["copo", "hard"].idxmax() == 4


# ---- the pipeline -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run():
    from replib import core

    with core.runtime.compute_threads(1):
        cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", cosft_steps=30, iterations=4, eval_every=1,
                             plateau_window=1, n_eval=24, n_val=24, n_premise_episodes=24,
                             methods=list(experiment.METHODS))
        return cfg, experiment.run_experiment(cfg), experiment.run_experiment(cfg)


def test_plateaued_compares_the_last_two_windows():
    assert not experiment.plateaued([0.1, 0.2, 0.3], window=2, delta=0.01)  # fewer than 2 windows
    assert not experiment.plateaued([0.1, 0.2, 0.3, 0.4], window=2, delta=0.01)  # gain 0.2
    assert experiment.plateaued([0.1, 0.2, 0.3, 0.3], window=2, delta=0.21)  # gain 0.15 below 0.21
    assert experiment.plateaued([0.5, 0.5, 0.4, 0.4], window=2, delta=0.0)  # a drop has plateaued
    assert not experiment.plateaued([0.9, 0.0, 0.2, 0.5, 0.6], window=2, delta=0.05)  # only the last 4 count
    assert experiment.plateaued([0.0, 0.9, 0.5, 0.5, 0.5], window=2, delta=0.05)
    assert not experiment.plateaued([0.5] * 10, window=0, delta=1.0)  # window 0: never stops


def test_pipeline_gives_every_declared_claim_and_is_deterministic(tiny_run):
    from replib import core

    cfg, first, again = tiny_run
    values = experiment.claim_values(first, cfg)
    ids = {c["id"] for c in core.load_chapter("cogrouter")["claims"]}
    assert set(values) == set(cfg.seeds) and set(values[0]) == ids
    assert all(isinstance(v, float) for v in values[0].values())
    for key in ("evals", "levels", "validation", "curves", "expansion", "stops", "premise", "confidence",
                "cosft_losses"):
        pd.testing.assert_frame_equal(first[key], again[key])
    evals, validation, stops = first["evals"], first["validation"], first["stops"].set_index("method")
    assert set(evals.method) == set(experiment.METHODS)
    assert set(stops.index) == set(experiment.METHODS) - set(experiment.EVAL_ONLY)
    for name, stop in stops.iterrows():  # each RL agent stops by the rule or at the cap, evaluated at 0 and there
        history = validation[validation.method == name]
        assert history.iteration.tolist() == list(range(stop.iterations + 1))
        assert bool(stop.plateaued) == experiment.plateaued(history.success.tolist(), 1, cfg.plateau_delta)
        assert stop.plateaued or stop.iterations == cfg.iterations
        for k in range(1, stop.iterations):  # the rule did not hold earlier
            assert not experiment.plateaued(history.success.tolist()[:k + 1], 1, cfg.plateau_delta)
        assert sorted(evals[(evals.method == name) & (evals.temperature == 0.4)].iteration) == [0, stop.iterations]
        assert len(first["curves"][first["curves"].method == name]) == stop.iterations
    for name in experiment.EVAL_ONLY:
        assert evals[evals.method == name].iteration.tolist() == [0, 0]
        assert validation[validation.method == name].iteration.tolist() == [0]
    assert np.all(evals[evals.method == "fixed_l4"].cost_per_step == 130.0)
    assert np.all(evals[evals.method == "fixed_l1"].cost_per_step == 8.0)
    assert values[0]["p1_agents_converged"] == pytest.approx(stops.plateaued.mean())
    assert {"cosft_training", "premise", "eval", *experiment.METHODS} <= set(first["seconds"].columns)
    shares = first["levels"].groupby(["method", "iteration", "temperature", "stage_type"])["share"].sum()
    assert np.allclose(shares.dropna(), 1.0)


def test_worker_processes_give_the_same_numbers(tiny_run):
    cfg, first, _ = tiny_run
    parallel = experiment.run_experiment(SimpleNamespace(**{**vars(cfg), "workers": 2}))
    for key in first:
        if key != "seconds":
            pd.testing.assert_frame_equal(first[key], parallel[key])


def test_claim_conventions_on_hand_made_results():
    """claim_values on two hand-made seeds, every claim against a hand-computed number. Decoys: earlier
    iterations (listed after the final one), temperature 1.0, and the other methods (fixed level 1),
    each with different numbers, so a wrong row, a swapped baseline, a flipped ratio or a sign error
    fails. CoSFT alone is the null of c2a, c2b, m1 and c3."""
    from replib import core

    cfg = SimpleNamespace(seeds=[0, 1])
    final = {  # per seed, method: success, cost per step, level at routine steps, level at recall + plan
        0: {"copo": (0.60, 39.0, 1.2, 3.5), "grpo": (0.70, 45.0, 1.1, 3.0), "fixed_l4": (0.62, 130.0, 4.0, 4.0),
            "grpo_scratch": (0.10, 60.0, 2.5, 2.5), "fixed_l1": (0.30, 8.0, 1.0, 1.0),
            "copo_sampled_level": (0.66, 41.0, 1.1, 3.4), "copo_quarter": (0.57, 38.0, 1.3, 3.6)},
        1: {"copo": (0.80, 52.0, 1.4, 3.1), "grpo": (0.65, 40.0, 1.3, 2.0), "fixed_l4": (0.70, 130.0, 4.0, 4.0),
            "grpo_scratch": (0.45, 70.0, 2.0, 2.2), "fixed_l1": (0.20, 8.0, 1.0, 1.0),
            "copo_sampled_level": (0.84, 50.0, 1.2, 3.2), "copo_quarter": (0.90, 45.0, 1.1, 3.3)},
    }
    rows = []
    for seed in (1, 0):
        for name, (success, cost, lr, lh) in final[seed].items():
            for it, temperature in [(10, 0.4), (10, 1.0), (0, 0.4), (5, 0.4), (0, 1.0)]:
                d = 0.0 if (it, temperature) == (10, 0.4) else 0.1 + it / 100 + temperature / 10  # decoys differ
                rows.append(dict(seed=seed, method=name, iteration=it, temperature=temperature, success=success - d,
                                 cost_per_step=cost * (1 + d), level_routine=lr + d, level_hard=lh - d))
        for name, (success, cost, lr, lh) in {"cosft": (0.5 + seed / 10, 50.0, 1.5, 3.3),
                                              "oracle": (0.9, 43.0, 1.0, 3.5)}.items():
            rows.append(dict(seed=seed, method=name, iteration=0, temperature=0.4, success=success,
                             cost_per_step=cost, level_routine=lr, level_hard=lh))
            rows.append(dict(seed=seed, method=name, iteration=0, temperature=1.0, success=0.2, cost_per_step=70.0,
                             level_routine=2.5, level_hard=2.6))  # decoy
    premise = pd.DataFrame([dict(seed=1, c1a=0.75, c1b=0.65, success=0.4), dict(seed=0, c1a=0.9, c1b=0.7, success=0.3)])
    rl = ("copo", "grpo", "fixed_l4", "grpo_scratch", "copo_sampled_level", "copo_quarter")
    stops = pd.DataFrame([dict(seed=seed, method=m, iterations=10, plateaued=not (seed == 1 and m == "grpo"))
                          for seed in (0, 1) for m in rl])
    results = {"evals": pd.DataFrame(rows), "premise": premise, "stops": stops}
    values = experiment.claim_values(results, cfg)
    expected = {}
    for seed, cosft_success, copo, grpo in ((0, 0.5, final[0]["copo"], final[0]["grpo"]),
                                            (1, 0.6, final[1]["copo"], final[1]["grpo"])):
        f = final[seed]
        expected[seed] = {
            "p1_agents_converged": 1.0 if seed == 0 else 5 / 6,  # GRPO of seed 1 reached the cap
            "p2_models_competent": min(cosft_success, grpo[0]),
            "p3_room_cost": 43.0 / 130.0 - 50.0 / 130.0,  # oracle - CoSFT, ratios to fixed level 4
            "p4_room_success": 100 * (0.9 - cosft_success),
            "p5_room_depth": (3.5 - 1.0) - (3.3 - 1.5),
            "c1a_premise_hard_steps": 0.9 if seed == 0 else 0.75,
            "c1b_premise_routine_steps": 0.7 if seed == 0 else 0.65,
            "c2a_cost_vs_cosft": (copo[1] - 50.0) / 130.0,
            "c2b_success_vs_cosft": 100 * (copo[0] - cosft_success),
            "m1_copo_vs_cosft": 100 * (copo[0] - cosft_success),
            "c3_depth_vs_cosft": (copo[3] - copo[2]) - (3.3 - 1.5),
            "c4_copo_vs_grpo": 100 * (copo[0] - grpo[0]),
            "c5_soft_level_target": 100 * (f["copo_sampled_level"][0] - copo[0]),
            "c6_repetition": 100 * (f["copo_quarter"][0] - copo[0]),
            "m2_cosft_cost_vs_always_think": 50.0 / 130.0,
            "m3_cosft_depth_gap": 3.3 - 1.5,
            "m4_copo_cost_vs_always_think": copo[1] / 130.0,
            "m5_copo_vs_fixed_l4": 100 * (copo[0] - f["fixed_l4"][0]),
            "m6_copo_vs_grpo_from_scratch": 100 * (copo[0] - f["grpo_scratch"][0]),
            "m7_copo_depth_gap": copo[3] - copo[2],
        }
    assert expected[0]["c5_soft_level_target"] == pytest.approx(6.0)  # hand check of the sign
    assert expected[1]["c2a_cost_vs_cosft"] == pytest.approx(2.0 / 130.0)
    ids = {c["id"] for c in core.load_chapter("cogrouter")["claims"]}
    assert set(values) == {0, 1}
    for seed in (0, 1):
        assert set(values[seed]) == ids == set(expected[seed])
        for claim, value in expected[seed].items():
            assert values[seed][claim] == pytest.approx(value), (seed, claim)
    results["evals"] = results["evals"][results["evals"].method != "fixed_l4"]
    v = experiment.claim_values(results, cfg)[0]
    assert math.isnan(v["c2a_cost_vs_cosft"]) and math.isnan(v["m4_copo_cost_vs_always_think"])
    assert v["c4_copo_vs_grpo"] == pytest.approx(-10.0)
    del results["stops"]
    assert math.isnan(experiment.claim_values(results, cfg)[0]["p1_agents_converged"])


def test_oracle_router_routes_minimally_and_reads_the_right_block():
    """The headroom arm: level 1 / 3 / 4 at routine / recall / plan stages, the arrow, the memory or
    the lookahead as its action; with noise-free views it wins every episode at cost 43-ish."""
    oracle = task.OracleRouter()
    tasks = task.sample_tasks(200, np.random.default_rng(0))
    episodes, stages = np.repeat(np.arange(200), 10), np.tile(np.arange(10), 200)
    obs = task.observe(tasks, episodes, stages)
    levels = oracle.level_logprobs(torch.from_numpy(obs), 0.4).argmax(-1).numpy()
    types = tasks["types"][episodes, stages]
    assert np.array_equal(levels, np.array(task.SUFFICIENT_LEVEL)[types] - 1)
    clean = np.concatenate([obs, task.memory_readout(tasks, episodes, stages),
                            task.lookahead_readout(tasks, episodes, stages)], axis=1)
    acts = oracle.action_logprobs(torch.from_numpy(levels), torch.from_numpy(clean), 1.0).argmax(-1).numpy()
    assert np.array_equal(acts, tasks["correct"][episodes, stages])
    summary, _ = task.evaluate(oracle, tasks, np.random.default_rng(1), 0.4)
    assert 0.8 < summary["success"] <= 1.0 and summary["level_routine"] == 1.0


def test_tuning_selection_rule_and_pilot_seeds_only():
    table = pd.DataFrame([
        dict(method="copo", rl_lr=1e-4, kl_coef=0.1, seed=s, val_success=v) for s, v in ((10, 0.80), (11, 0.84))] + [
        dict(method="copo", rl_lr=1e-3, kl_coef=0.1, seed=s, val_success=v) for s, v in ((10, 0.81), (11, 0.86))] + [
        dict(method="copo", rl_lr=3e-4, kl_coef=0.5, seed=s, val_success=v) for s, v in ((10, 0.83), (11, 0.836))] + [
        dict(method="grpo", rl_lr=1e-4, kl_coef=0.5, seed=s, val_success=v) for s, v in ((10, 0.70), (11, 0.70))] + [
        dict(method="grpo", rl_lr=3e-3, kl_coef=0.1, seed=s, val_success=v) for s, v in ((10, 0.90), (11, 0.92))])
    chosen = experiment.select_cells(table).set_index("method")
    # copo: best mean 0.835 (1e-3) and 0.833 (3e-4, within half a point): the smaller learning rate wins
    assert chosen.loc["copo", "rl_lr"] == 3e-4 and chosen.loc["copo", "kl_coef"] == 0.5
    assert chosen.loc["grpo", "rl_lr"] == 3e-3
    with pytest.raises(ValueError):
        experiment.tuning_grid(SimpleNamespace(), [10, 1000], experiment.TUNING_GRID)


def test_profiles_use_the_tuned_cells_and_the_confirmatory_seeds():
    from replib import core

    book = experiment.EXPERIMENT_PROFILES["book"]
    assert book["seeds"] == core.load_chapter("cogrouter")["confirmatory_seeds"]
    for key, value in experiment.TUNED.items():
        assert book[key] == value
    tuning = core.load_chapter("cogrouter")["tuning"]
    assert tuning["grid"] == experiment.TUNING_GRID and tuning["seeds"] == experiment.TUNING_SEEDS
    cfg = SimpleNamespace(**book)
    assert experiment.method_settings(cfg, "copo_quarter") == (book["copo_lr"], book["copo_kl"])
    assert experiment.method_settings(cfg, "fixed_l4") == (book["grpo_lr"], book["grpo_kl"])


# ---- graders ----------------------------------------------------------------------------------


def test_graders_accept_the_reference_and_reject_wrong_answers():
    exercises.check_copo_weights(method.copo_weights)
    exercises.check_level_fixed_point(theory.level_fixed_point)

    def no_fallback(c):
        c = np.clip(np.asarray(c, float), 1e-6, 1)
        lo, hi = c.min(1, keepdims=True), c.max(1, keepdims=True)
        e = np.exp(2 * (c - lo) / np.maximum(hi - lo, 1e-12))
        return e / e.mean(1, keepdims=True)

    def softmax_weights(c):
        e = np.exp(2 * np.asarray(c, float))
        return e / e.mean(1, keepdims=True)

    for wrong in (no_fallback, softmax_weights):
        with pytest.raises(AssertionError):
            exercises.check_copo_weights(wrong)
    with pytest.raises(AssertionError):
        exercises.check_level_fixed_point(lambda w: np.asarray(w) / 4)
    with pytest.raises(AssertionError):
        exercises.check_copo_weights(lambda c: (_ for _ in ()).throw(NotImplementedError))


# ---- update steps: direction, parts, second step ---------------------------------------------------


def _response_terms_by_hand(policy, batch):
    """log pi(l | s) + log pi(a | view, l) and the summed entropies of both heads, from the two MLPs."""
    obs, levels, views, actions = batch["obs"], batch["levels"], batch["views"], batch["actions"]
    lev = torch.log_softmax(policy.level_head(obs), -1)
    x = torch.cat([torch.nn.functional.one_hot(levels, method.N_LEVELS).float(), views], -1)
    act = torch.log_softmax(policy.action_head(x), -1)
    logp = lev.gather(1, levels[:, None])[:, 0] + act.gather(1, actions[:, None])[:, 0]
    entropy = -(lev.exp() * lev).sum(-1) - (act.exp() * act).sum(-1)
    return logp, entropy


def _copo_parts_by_hand(policy, reference, batch):
    """(surrogate at ratio 1, mean k3 against the reference, mean entropy), written out."""
    logp, entropy = _response_terms_by_hand(policy, batch)
    with torch.no_grad():
        ref, _ = _response_terms_by_hand(reference, batch)
    surrogate = -(torch.exp(logp - logp.detach()) * batch["advantages"]).mean()
    d = ref - logp
    return surrogate, (d.exp() - d - 1).mean(), entropy.mean()


def _random_batch(seed, n=8):
    gen = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(n, 11, generator=gen), "views": torch.randn(n, 19, generator=gen),
            "levels": torch.randint(0, 4, (n,), generator=gen), "actions": torch.randint(0, 4, (n,), generator=gen),
            "advantages": torch.randn(n, generator=gen)}


def _perturbed(policy, seed, scale=0.2):
    other = copy.deepcopy(policy)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen))
    return other.requires_grad_(False)


def test_policy_update_is_one_sgd_step_on_surrogate_plus_kl_minus_entropy():
    """policy_update with plain SGD (no clipping): the returned parts equal the hand-written
    surrogate, mean k3 and mean entropy, the loss is surrogate + beta kl - c_H entropy, and every
    parameter moves by -lr x grad of that hand-written loss."""
    policy = task.make_policy(seed=5)
    reference = _perturbed(policy, 1)
    batch = _random_batch(0)
    surrogate, kl, entropy = _copo_parts_by_hand(policy, reference, batch)
    loss = surrogate + 0.5 * kl - 0.3 * entropy
    params = list(policy.parameters())
    grads = torch.autograd.grad(loss, params)
    before = [p.detach().clone() for p in params]
    lr = 0.1
    stats = method.policy_update(policy, reference, torch.optim.SGD(params, lr=lr), batch, kl_coef=0.5,
                                 entropy_coef=0.3, grad_clip=1e6)
    assert kl.item() > 0.01
    assert stats["surrogate"] == pytest.approx(surrogate.item(), abs=1e-6)
    assert stats["kl"] == pytest.approx(kl.item(), rel=1e-5)
    assert stats["entropy"] == pytest.approx(entropy.item(), rel=1e-6)
    assert stats["loss"] == pytest.approx(stats["surrogate"] + 0.5 * stats["kl"] - 0.3 * stats["entropy"], rel=1e-5)
    for b, p, g in zip(before, params, grads):
        assert torch.allclose(p.detach() - b, -lr * g, rtol=1e-3, atol=1e-6)


def test_policy_update_clips_the_gradient_norm():
    """With grad_clip below the gradient's norm the SGD step is -lr g grad_clip / ||g||."""
    policy = task.make_policy(seed=6)
    reference = _perturbed(policy, 2)
    batch = _random_batch(1)
    surrogate, kl, entropy = _copo_parts_by_hand(policy, reference, batch)
    params = list(policy.parameters())
    grads = torch.autograd.grad(surrogate + 0.1 * kl - 0.01 * entropy, params)
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
    assert norm > 0.1
    before = [p.detach().clone() for p in params]
    method.policy_update(policy, reference, torch.optim.SGD(params, lr=0.1), batch, kl_coef=0.1, entropy_coef=0.01,
                         grad_clip=0.05)
    for b, p, g in zip(before, params, grads):
        assert torch.allclose(p.detach() - b, -0.1 * g * 0.05 / (norm + 1e-6), rtol=1e-3, atol=1e-7)


def test_policy_update_defaults_are_the_papers_coefficients_and_unit_clip():
    """policy_update with its defaults: loss = surrogate + 0.1 k3 - 0.001 entropy (the chapter's beta
    and c_H) and the SGD step -lr g / ||g|| (gradient norm clipped to 1) for a gradient of norm > 2."""
    policy = task.make_policy(seed=3)
    reference = _perturbed(policy, 4)
    batch = _random_batch(5)
    batch["advantages"] = 40 * batch["advantages"]
    surrogate, kl, entropy = _copo_parts_by_hand(policy, reference, batch)
    loss = surrogate + 0.1 * kl - 0.001 * entropy
    params = list(policy.parameters())
    grads = torch.autograd.grad(loss, params)
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
    assert norm > 2.5 and kl.item() > 0.01
    before = [p.detach().clone() for p in params]
    stats = method.policy_update(policy, reference, torch.optim.SGD(params, lr=0.1), batch)
    assert stats["loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert stats["kl"] == pytest.approx(kl.item(), rel=1e-5)
    for b, p, g in zip(before, params, grads):
        assert torch.allclose(p.detach() - b, -0.1 * g / (norm + 1e-6), rtol=1e-3, atol=1e-7)


def test_policy_update_leaves_a_fixed_level_agents_level_head_alone():
    """A fixed-level agent's response has no level term, so the update does not touch the level head:
    with gradients left on it by an earlier backward (CoSFT) and weight decay in the optimiser, the
    level head is unchanged after the step (its stale gradients are dropped, not zeroed) while the
    action head moves."""
    policy = task.make_policy(seed=2, fixed_level=3)
    reference = _perturbed(policy, 3)
    batch = _random_batch(6)
    policy.level_head(batch["obs"]).sum().backward()  # a leftover gradient on the level head
    assert all(p.grad is not None for p in policy.level_head.parameters())
    level_before = [p.detach().clone() for p in policy.level_head.parameters()]
    action_before = [p.detach().clone() for p in policy.action_head.parameters()]
    method.policy_update(policy, reference, torch.optim.SGD(policy.parameters(), lr=0.1, weight_decay=0.1), batch)
    assert all(torch.equal(a, b) for a, b in zip(level_before, policy.level_head.parameters()))
    assert all(p.grad is None for p in policy.level_head.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(action_before, policy.action_head.parameters()))


def test_policy_update_entropy_bonus_raises_the_entropy():
    """With zero advantages and the reference equal to the policy (k3 and its gradient are 0), the only
    force is the entropy bonus: one step raises the mean entropy of both heads."""
    policy = task.make_policy(seed=7)
    reference = copy.deepcopy(policy).requires_grad_(False)
    batch = {**_random_batch(2), "advantages": torch.zeros(8)}
    _, before = _response_terms_by_hand(policy, batch)
    method.policy_update(policy, reference, torch.optim.SGD(policy.parameters(), lr=0.5), batch, kl_coef=0.1,
                         entropy_coef=0.5, grad_clip=1e6)
    _, after = _response_terms_by_hand(policy, batch)
    assert after.mean().item() > before.mean().item() + 1e-4


def _crafted_policy(seed):
    """A policy whose action head reads the arrow (level 1-2), memory (3) and lookahead (4) entries of
    its view, so that some episodes succeed and groups are mixed (CoPO expands steps)."""
    policy = task.make_policy(seed=seed)
    hidden, out = policy.action_head.layers
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        hidden.weight.copy_(0.01 * torch.randn(hidden.weight.shape, generator=gen))
        out.weight.copy_(0.01 * torch.randn(out.weight.shape, generator=gen))
        hidden.bias.zero_()
        out.bias.zero_()
        for j in range(4):  # input = [level one-hot (4), obs (11: arrow first), memory (4), lookahead (4)]
            hidden.weight[j] = 0.0
            hidden.weight[j, [4 + j, 15 + j, 19 + j]] = 1.0
            out.weight[j, :4] = 0.0
            out.weight[j, j] = 6.0
    return policy


def test_rl_iteration_second_step_uses_the_moved_policy_and_the_frozen_reference():
    """Two rl_iteration calls (CoPO, SGD): at the second the policy has moved, so the k3 term is
    positive and measured against the frozen reference (not the policy itself, which is equal at step
    1), the level weights come from the moved policy's confidences (not the reference's), and the step
    is -lr x grad of the hand-written loss on the second batch at the parameters after step 1."""
    cfg = SimpleNamespace(group_size=4, rollout_temperature=1.0, k=2.0, clip_eps=0.2, kl_coef=0.5, entropy_coef=0.5,
                          grad_clip=1e6)
    policy = _crafted_policy(8)
    reference = copy.deepcopy(policy).requires_grad_(False)
    frozen = [p.clone() for p in reference.parameters()]
    tasks = task.sample_tasks(4, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    lr = 0.5
    opt = torch.optim.SGD(policy.parameters(), lr=lr)
    first, _ = experiment.rl_iteration(policy, reference, opt, tasks, rng, cfg, expand=True)
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)
    mid = copy.deepcopy(policy)
    second, batch = experiment.rl_iteration(policy, reference, opt, tasks, rng, cfg, expand=True)
    n = batch["n_expanded"]
    assert n > 0 and batch["advantages"].abs().sum() > 0
    views = batch["views"][-4 * n:].reshape(n, 4, -1).numpy()
    actions = batch["actions"][-4 * n::4].numpy()
    want = method.copo_weights(method.action_confidences(mid, views, actions), cfg.k)
    assert np.allclose(batch["exp_weights"], want)
    assert not np.allclose(method.copo_weights(method.action_confidences(reference, views, actions), cfg.k), want,
                           atol=1e-3)
    surrogate, kl, entropy = _copo_parts_by_hand(mid, reference, batch)
    assert kl.item() > 1e-3 and second["kl"] == pytest.approx(kl.item(), rel=1e-4)
    grads = torch.autograd.grad(surrogate + 0.5 * kl - 0.5 * entropy, list(mid.parameters()))
    for b, p, g in zip(mid.parameters(), policy.parameters(), grads):
        assert torch.allclose(p.detach() - b.detach(), -lr * g, rtol=1e-3, atol=1e-6)
    assert all(torch.equal(a, b) for a, b in zip(frozen, reference.parameters()))


def test_cosft_first_step_is_adam_on_both_heads_cross_entropy():
    """cosft, one step: the recorded loss is the level head's plus the action head's cross-entropy on
    the first CoSFT batch (recomputed by hand from the same stream), and Adam's first step moves every
    weight against the sign of that loss's gradient."""
    policy = task.make_policy(seed=9)
    b = task.cosft_batch(np.random.default_rng([3, 6]), 32, "noisy", 0.3)
    obs, views = torch.from_numpy(b["obs"]), torch.from_numpy(b["views"])
    levels, actions = torch.from_numpy(b["levels"]), torch.from_numpy(b["actions"])
    lev = torch.log_softmax(policy.level_head(obs), -1)
    act = torch.log_softmax(policy.action_head(torch.cat([torch.nn.functional.one_hot(levels, 4).float(), views], -1)), -1)
    loss = -lev[torch.arange(32), levels].mean() - act[torch.arange(32), actions].mean()
    params = list(policy.parameters())
    grads = torch.autograd.grad(loss, params)
    before = [p.detach().clone() for p in params]
    lr = 1e-3
    losses = task.cosft(policy, 1, seed=3, batch=32, lr=lr)
    assert losses[0] == pytest.approx(loss.item(), rel=1e-6)
    for b0, p, g in zip(before, params, grads):
        step = (p.detach() - b0) / -lr
        big = g.abs() > 1e-5
        assert torch.allclose(step[big], torch.sign(g[big]), atol=1e-2)


def test_tuned_cells_follow_from_the_recorded_grid():
    table = experiment.TUNING_RESULTS
    assert len(table) == 2 * 3 * len(experiment.TUNING_GRID["rl_lr"]) * len(experiment.TUNING_GRID["kl_coef"])
    assert set(table.seed) == set(experiment.TUNING_SEEDS) and table.seed.max() < 1000
    chosen = experiment.select_cells(table).set_index("method")
    for name in ("copo", "grpo"):
        assert experiment.TUNED[f"{name}_lr"] == chosen.loc[name, "rl_lr"]
        assert experiment.TUNED[f"{name}_kl"] == chosen.loc[name, "kl_coef"]
