"""Unit tests of replib.papers.hypertrack (the evaluation kit, the RFT pieces, MiniGUI, claim_values)."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from scipy import stats

from replib.core.paths import require_repo_root
from replib.papers.hypertrack import exercises, experiment, method, task, theory


def kit(types, points=None, boxes=None, directions=None, texts=None):
    n = len(types)
    return {"type": np.array(types, dtype=object),
            "point": np.full((n, 2), np.nan) if points is None else np.array(points, dtype=float),
            "box": np.zeros((n, 4)) if boxes is None else np.array(boxes, dtype=float),
            "direction": np.array(directions or [""] * n, dtype=object),
            "text": np.array(texts or [""] * n, dtype=object)}


# ---- the kit's rules ------------------------------------------------------------------------

def test_click_rule_enlarged_box_and_distance():
    box = [0.5, 0.5, 0.2, 0.1]
    gt = kit(["click"] * 5, boxes=[box] * 4 + [[0.3, 0.3, 0, 0]])
    pred = kit(["click"] * 5, points=[[0.5, 0.5], [0.615, 0.5], [0.625, 0.5], [0.5, 0.565], [0.3 + 0.13, 0.3]])
    tm, em = method.step_match(pred, gt)
    assert tm.all()
    assert em.tolist() == [True, True, False, False, True]
    far = kit(["click"], points=[[0.3 + 0.15, 0.3]])
    assert not method.step_match(far, kit(["click"], boxes=[[0.3, 0.3, 0, 0]]))[1][0]


def test_type_relabel_text_and_scroll_rules():
    gt = kit(["click", "type", "scroll", "open", "stop", "scroll"], directions=["", "", "down", "", "", "up"],
             texts=["", "party", "", "ab", "", ""])
    pred = kit(["type", "type", "scroll", "open", "stop", "click"], directions=["", "", "down", "", "", ""],
               texts=["x", " ART ", "", "b", "", ""])
    tm, em = method.step_match(pred, gt)
    assert tm.tolist() == [True, True, True, True, True, False]
    assert em.tolist() == [False, True, True, True, True, False]  # "art" in "party", "b" in "ab"
    assert not method.text_match([""], ["party"])[0]


def test_episode_metrics_by_hand():
    out = method.episode_metrics([True, False, True, True, True, True, False], [3, 3, 3, 5, 5, 7, 7])
    assert out["episode"].tolist() == [3, 5, 7]
    assert out["success"].tolist() == [0.0, 1.0, 0.0]
    assert np.allclose(out["goal_progress"], [1 / 3, 1.0, 0.5])


def test_soeval_history_keeps_own_only_when_correct():
    ref = np.array([[1, 2, 3], [4, 5, 6]])
    own = np.array([[1, 9, 3], [0, 0, 0]])
    assert method.soeval_history(ref, own, [True, False]).tolist() == [[1, 9, 3], [4, 5, 6]]
    assert method.soeval_history(ref, own, [False, True]).tolist() == [[1, 2, 3], [0, 0, 0]]


def test_reward_is_stricter_than_em():
    gt = kit(["click", "click", "type", "scroll", "stop"], boxes=[[0.5, 0.5, 0.2, 0.1]] * 2 + [[0] * 4] * 3,
             directions=["", "", "", "down", ""], texts=["", "", "party", "", ""])
    pred = kit(["click", "click", "type", "scroll", "type"], points=[[0.55, 0.5], [0.61, 0.5]] + [[np.nan] * 2] * 3,
               directions=["", "", "", "up", ""], texts=["", "", "art", "", "x"])
    assert method.action_reward(pred, gt).tolist() == [2.0, 1.0, 1.0, 1.0, 0.0]
    assert method.step_match(pred, gt)[1].tolist() == [True, True, True, False, False]


# ---- RFT pieces -----------------------------------------------------------------------------

def test_dynamic_sampling_and_group_advantages():
    r = np.array([[1, 1, 1], [0, 2, 1], [2, 2, 0]])
    assert method.dynamic_sampling(r).tolist() == [False, True, True]
    assert theory.zero_signal_share(0.9, 16) == pytest.approx(0.9 ** 16 + 0.1 ** 16)


def test_dapo_loss_clip_higher_and_token_average():
    old = torch.log(torch.full((2, 2), 0.5))
    new = torch.log(torch.tensor([[0.8, 0.6], [0.35, 0.5]]))  # ratios 1.6, 1.2 | 0.7, 1.0
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss = method.dapo_loss(new, old, torch.tensor([2.0, -1.0]), mask, 0.2, 0.3)
    # A=2: min(3.2, 2.6)=2.6, min(2.4, 2.4)=2.4; A=-1, rho=0.7: min(-0.7, -0.8)=-0.8; 3 tokens
    assert float(loss) == pytest.approx(-(2.6 + 2.4 - 0.8) / 3, abs=1e-6)
    symmetric = method.dapo_loss(new, old, torch.tensor([2.0, -1.0]), mask, 0.2, 0.2)
    assert float(symmetric) == pytest.approx(-(2.4 + 2.4 - 0.8) / 3, abs=1e-6)


def test_sft_loss_is_token_mean():
    logp = torch.log(torch.tensor([[0.5, 0.25, 1.0], [0.5, 1.0, 1.0]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert float(method.sft_loss(logp, mask)) == pytest.approx((np.log(2) + np.log(4) + np.log(2)) / 3)


# ---- MiniGUI --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small():
    world = task.make_world(0)
    tasks = task.sample_tasks(world, world.apps("train"), 12, np.random.default_rng(0))
    return world, tasks


def test_reference_track_is_exact_and_solves_the_phone(small):
    world, tasks = small
    for device in ("phone", "tablet"):
        rows = task.record_episodes(world, tasks, device)
        tm, em = method.step_match(task.to_kit(rows["action"]), task.gt_kit(rows))
        assert tm.all() and em.all()
        lengths = rows["length"][rows["step"] == 0]
        assert lengths.min() >= 5 and lengths.max() <= 7
        assert np.all(rows["ambiguous"] == (rows["screen"] == 3))
        for e, t in enumerate(tasks):
            phone = task.Phone(world, t, device)
            phone.reset()
            for a in rows["action"][rows["episode"] == e]:
                done = phone.step(a)
            assert done and phone.success


def test_phone_failures(small):
    world, tasks = small
    t = tasks[0]
    phone = task.Phone(world, t, "phone")
    phone.reset()
    other = [n for n in range(len(task.LETTERS)) if n != world.names[t[0], 0]][0]
    assert phone.step([task.OPEN, other, world.names[t[0], 1]]) and not phone.success
    phone.reset()
    assert not phone.step([task.OPEN, *world.names[t[0]]])
    assert not phone.step([task.CLICK, 0, 0])  # empty space (the corner) does nothing
    assert phone.screen == 1 and phone.step([task.STOP, -1, -1]) and not phone.success  # stop on the main screen


def test_form_is_ambiguous_without_history(small):
    world, tasks = small
    rows = task.record_episodes(world, tasks, "phone")
    form = np.flatnonzero(rows["screen"] == 3)
    typing, stopping = form[::2], form[1::2]
    assert np.array_equal(rows["elements"][typing], rows["elements"][stopping])
    assert not np.array_equal(task.history_features(rows["prev"][typing]), task.history_features(rows["prev"][stopping]))


def test_policy_tokens_and_sampling(small):
    world, tasks = small
    rows = task.record_episodes(world, tasks, "phone")
    obs = task.observe(rows)
    policy = task.GUIPolicy(seed=1)
    logp, mask = policy.token_logprobs(obs, rows["action"])
    counts = {task.OPEN: 3, task.CLICK: 2, task.SCROLL: 2, task.TYPE: 2, task.STOP: 1}
    assert mask.sum(1).tolist() == [counts[k] for k in rows["action"][:, 0]]
    with torch.no_grad():
        out = policy(obs)
    logp = logp.detach()
    i = int(np.flatnonzero(rows["action"][:, 0] == task.CLICK)[0])
    x, y = rows["action"][i, 1:]
    assert float(logp[i, 1]) == pytest.approx(float(out["point"][i, x * task.N_BINS + y]))
    assert float(logp[i, 0]) == pytest.approx(float(out["kind"][i, task.CLICK]))
    assert torch.allclose(out["point"].exp().sum(1), torch.ones(len(rows["step"])), atol=1e-4)
    actions = policy.sample(obs, torch.Generator().manual_seed(0))
    assert np.all((actions[:, 0] != task.CLICK) | ((actions[:, 1] >= 0) & (actions[:, 2] >= 0)))
    assert np.all(actions[actions[:, 0] == task.STOP][:, 1:] == -1)


def test_protocols_on_scripted_agents(small):
    world, tasks = small
    rows = task.record_episodes(world, tasks, "phone")
    stop = lambda o: np.tile([task.STOP, -1, -1], (len(o["mask"]), 1))  # noqa: E731
    result = task.evaluate(stop, world, tasks, "phone")
    assert result["em"] == pytest.approx(len(tasks) / len(rows["step"]))
    assert result["success"] == 0 and result["online_success"] == 0 and result["goal_progress"] == 0
    assert result["type_error_share"] == 1.0


def test_click_toy_and_protocol_scores():
    toy = theory.click_toy(steps=100)
    assert toy["sft"][9] > 0.9 and toy["success"]["rl"][2] > toy["success"]["sft"][2]
    s = theory.protocol_scores(0.9, 0.5, 3)
    assert s["offline_em"] == 0.9 and s["online_success"] == pytest.approx(0.9 * 0.25)
    q2 = 0.9 * 0.5 + 0.1 * 0.9  # 0.54
    assert s["soeval_em"] == pytest.approx(np.mean([0.9, q2, q2 * 0.5 + (1 - q2) * 0.9]))


def test_graders_reject_wrong_answers():
    with pytest.raises(AssertionError):
        exercises.check_click_match(lambda p, b: method.inside_box(p, b).astype(float))  # no enlargement
    with pytest.raises(AssertionError):
        exercises.check_goal_progress(lambda em: float(np.mean(em)))
    with pytest.raises(AssertionError):
        exercises.check_zero_signal_share(lambda p, g: p ** g)


# ---- claim values ---------------------------------------------------------------------------

def _hand_results():
    sizes = [8, 32, 128, 1024]
    rows = []
    for seed, shift in ((0, 0.0), (1, 0.05)):
        for split, offset in zip(task.SPLITS, (0.0, -0.1, -0.05, -0.15)):
            rows.append(dict(seed=seed, method="base", n=0, split=split, em=0.6 + offset + shift, soeval_em=0.62 + offset,
                             online_success=0.2 + offset, em_ambiguous=0.9, type_error_share=0.5))
            rows.append(dict(seed=seed, method="base_no_history", n=0, split=split, em=0.5, soeval_em=0.5,
                             online_success=0.1, em_ambiguous=0.6 - shift, type_error_share=0.7))
            for i, n in enumerate(sizes):
                sft = 0.6 + 0.05 * i + offset + shift
                rft = sft + (0.02 * i if split == "unseen_app" else 0.01) + (0.03 if split == "unseen_device" else 0)
                for m, em in (("sft", sft), ("rft", rft)):
                    rows.append(dict(seed=seed, method=m, n=n, split=split, em=em, soeval_em=em + 0.01,
                                     online_success=em - 0.3, em_ambiguous=0.9, type_error_share=0.4 + shift))
    pretrain = pd.DataFrame([dict(seed=s, policy="base", device=d, em=0.8 + 0.1 * s + (0.02 if d == "tablet" else 0))
                             for s in (0, 1) for d in ("phone", "tablet")])
    training = pd.DataFrame([dict(seed=s, method=m, n=n, val_curve=[0.5, 0.6, 0.7, 0.8, 0.85, 0.86 + 0.01 * s,
                                                                    0.87, 0.88 + (0.02 if m == "rft" else 0.0)])
                             for s in (0, 1) for m in ("sft", "rft") for n in sizes])
    return ({"evals": pd.DataFrame(rows), "pretrain": pretrain, "training": training},
            SimpleNamespace(seeds=[0, 1], sizes=sizes))


def test_claim_values_by_hand():
    results, cfg = _hand_results()
    values = experiment.claim_values(results, cfg)
    chapter = yaml.safe_load((require_repo_root() / "notebooks/hypertrack/chapter.yml").read_text())
    assert set(values[0]) == {c["id"] for c in chapter["claims"]}
    for seed, shift in ((0, 0.0), (1, 0.05)):
        v = values[seed]
        assert v["p1_base_learns"] == pytest.approx(0.81 + 0.1 * seed)
        assert v["p2_base_leaves_room"] == pytest.approx(0.6 + shift)
        assert v["p3_unseen_app_shift"] == pytest.approx(10.0)  # base in-domain 0.6, unseen app 0.5
        # the last quarter of 8 epochs: epoch 6 (0.86 + 0.01 seed) to epoch 8
        assert v["p4a_sft_converged"] == pytest.approx(100 * (0.88 - 0.86 - 0.01 * seed))
        assert v["p4b_rft_converged"] == pytest.approx(100 * (0.90 - 0.86 - 0.01 * seed))
        assert v["m3_val_em_sft_rft"] == pytest.approx(2.0)
        assert v["h1_rft_beats_sft_unseen_app"] == pytest.approx(4.0)  # 0.02 * i at N = 128 (i = 2)
        assert v["h2_gap_larger_unseen_than_in_domain"] == pytest.approx(4.0 - 1.0)
        # RFT - SFT on unseen apps is 2 i points at log2 N = 3, 5, 7, 10: slope of 2 i on log2 N
        i, x = np.arange(4), np.log2(cfg.sizes)
        assert v["h3_rft_slope_at_least_sft_unseen_app"] == pytest.approx(np.polyfit(x, 2.0 * i, 1)[0])
        r2 = np.corrcoef(x, i)[0, 1] ** 2
        assert v["c1a_sft_log_linear"] == pytest.approx(r2)
        assert v["c1b_rft_log_linear"] == pytest.approx(r2)
        assert v["c2b_soeval_not_below_offline"] == pytest.approx(
            100 * np.mean([0.02 - shift] * 4 + [0.01] * 32))
        assert v["c3_history_matters"] == pytest.approx(100 * (0.9 - (0.6 - shift)))
        assert v["m1_type_error_share"] == pytest.approx(0.4 + shift)
        assert v["m2_rft_minus_sft_unseen_device"] == pytest.approx(4.0)
        ev = results["evals"]
        pol = ev[(ev["seed"] == seed) & (ev["method"] != "base_no_history")]
        assert len(pol) == 36
        want = stats.spearmanr(pol["soeval_em"], pol["online_success"]).statistic \
            - stats.spearmanr(pol["em"], pol["online_success"]).statistic
        assert v["c2a_soeval_ranks_like_online"] == pytest.approx(want)
    # seed 1's bases have offline EM shifted up by 5 points, which breaks offline EM's ranking only
    assert values[1]["c2a_soeval_ranks_like_online"] > values[0]["c2a_soeval_ranks_like_online"]


def test_line_fit():
    slope, r2 = experiment.line_fit([1, 2, 3], [2, 4, 6])
    assert slope == pytest.approx(2) and r2 == pytest.approx(1)
    slope, r2 = experiment.line_fit([0, 1, 2, 3], [0, 1, 0, 1])
    assert slope == pytest.approx(0.2) and r2 == pytest.approx(0.2)


def test_rft_update_refills_the_batch(small):
    world, tasks = small
    rows = task.record_episodes(world, tasks, "phone")
    obs = task.observe(rows)
    policy = task.GUIPolicy(seed=0)
    optimiser = torch.optim.Adam(policy.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    calls = []

    def draw_states():  # 4 candidates per draw: states 0, 1, 2, 3
        calls.append(1)
        return {k: v[:4] for k, v in obs.items()}, np.arange(4)

    def reward(states, actions):  # only odd states give mixed rewards
        return np.where(states % 2 == 1, np.arange(len(states)) % 2, 1.0)

    stats = method.rft_update(policy, optimiser, draw_states, reward, group_size=4, batch_groups=5, generator=gen)
    assert stats["groups"] == 5 and stats["draws"] == 3 and len(calls) == 3  # 2 kept per draw
    assert stats["share_kept"] == pytest.approx(5 / 12)
    stats = method.rft_update(policy, optimiser, draw_states, lambda s, a: np.ones(len(s)), 4, 5, gen, max_rounds=2)
    assert stats["groups"] == 0 and stats["draws"] == 2 and stats["loss"] == 0.0


# ---- update steps: descent direction, composite loss, second epoch --------------------------------


def _sgd_step(params, loss, lr):
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p -= lr * g


def _hand_dapo(new, old, adv, mask, eps_low, eps_high):
    """The DAPO loss written out token by token: -sum min(rho A, clip(rho) A) / number of tokens."""
    total, count = 0.0, 0.0
    for i in range(new.shape[0]):
        for t in range(new.shape[1]):
            if mask[i, t]:
                rho = torch.exp(new[i, t] - old[i, t])
                total = total + torch.minimum(rho * adv[i], torch.clamp(rho, 1 - eps_low, 1 + eps_high) * adv[i])
                count += 1
    return -total / count


def test_dapo_loss_gradient_at_ratio_one_is_the_token_averaged_policy_gradient():
    """At rho = 1 (logp_new = logp_old) the DAPO loss's gradient is -sum_i A_i sum_t grad logp_it / sum |o_i|, and
    it does not reach the old log-probabilities; off rho = 1 it equals the hand-written clipped objective."""
    g = torch.Generator().manual_seed(0)
    logp = torch.log(torch.rand(3, 3, generator=g, dtype=torch.float64) * 0.9 + 0.05).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    adv = torch.tensor([1.5, -0.5, -1.0], dtype=torch.float64)
    method.dapo_loss(logp, logp, adv, mask).backward()  # the old log-probabilities are detached inside
    assert torch.allclose(logp.grad, -adv[:, None] * mask / mask.sum())
    old = logp.detach() + torch.tensor([[0.5, -0.1, 0.0], [0.3, 0.0, 0.0], [-0.4, 0.05, 0.2]], dtype=torch.float64)
    new = logp.detach().clone().requires_grad_(True)
    loss = method.dapo_loss(new, old, adv, mask, 0.2, 0.3)
    want = _hand_dapo(new, old, adv, mask, 0.2, 0.3)
    assert torch.allclose(loss, want)
    assert torch.allclose(torch.autograd.grad(loss, new)[0], torch.autograd.grad(want, new)[0])


def test_sft_update_is_an_sgd_step_on_the_token_cross_entropy(small):
    """sft_update with plain SGD: parameters move by -lr grad of -sum(log p(token)) / #tokens, and the reference
    actions' mean token log-probability rises."""
    import copy

    world, tasks = small
    rows = task.record_episodes(world, tasks[:4], "phone")
    obs, actions = task.observe(rows), rows["action"]
    policy = task.GUIPolicy(hidden=16, seed=0)
    ref = copy.deepcopy(policy)
    lr = 0.05
    before = float(policy.token_logprobs(obs, actions)[0].detach().sum())
    loss = method.sft_update(policy, torch.optim.SGD(policy.parameters(), lr=lr), obs, actions)
    logp, mask = ref.token_logprobs(obs, actions)
    want = -(logp * mask).sum() / mask.sum()
    assert loss == pytest.approx(float(want.detach()), rel=1e-6)
    _sgd_step(list(ref.parameters()), want, lr)
    for a, b in zip(policy.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-7)
    assert float(policy.token_logprobs(obs, actions)[0].detach().sum()) > before


def test_rft_update_first_epoch_descends_and_second_epoch_uses_the_old_policy(small):
    """rft_update with plain SGD and two epochs, against a hand-written GRPO/DAPO: samples and rewards recorded,
    A = (R - mean) / (std + 1e-6) per group; epoch 1 (rho = 1) is a step along the token-averaged policy gradient
    and raises the token-averaged surrogate sum A_i log p_i / sum |o_i|; epoch 2 takes the clipped objective with
    the *old* (pre-update) log-probabilities, so rho != 1 and the returned loss is that of epoch 2."""
    import copy

    world, tasks = small
    rows = task.record_episodes(world, tasks[:4], "phone")
    obs = task.observe(rows)
    policy = task.GUIPolicy(hidden=16, seed=0)
    ref = copy.deepcopy(policy)
    lr, G = 0.5, 4
    seen = {}

    def draw_states():
        return {k: v[:6] for k, v in obs.items()}, np.arange(6)

    def reward(states, actions):
        seen["states"], seen["actions"] = states, actions
        return np.arange(len(states)) % 3 + (actions[:, 0] == task.CLICK)  # mixed within every group

    stats = method.rft_update(policy, torch.optim.SGD(policy.parameters(), lr=lr), draw_states, reward,
                              group_size=G, batch_groups=6, generator=torch.Generator().manual_seed(0), epochs=2)
    assert stats["groups"] == 6 and stats["draws"] == 1
    sub = {k: v[seen["states"]] for k, v in obs.items()}
    r = np.asarray(reward(seen["states"], seen["actions"]), dtype=float).reshape(6, G)
    adv = torch.as_tensor(((r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)).reshape(-1),
                          dtype=torch.float32)
    params = list(ref.parameters())
    old, mask = ref.token_logprobs(sub, seen["actions"])
    old = old.detach()
    logp = ref.token_logprobs(sub, seen["actions"])[0]
    _sgd_step(params, -(adv[:, None] * logp * mask).sum() / mask.sum(), lr)  # epoch 1: rho = 1
    after1 = ref.token_logprobs(sub, seen["actions"])[0].detach()
    # the documented objective (the token-averaged surrogate at rho = 1) rises with the first step
    surrogate = lambda lp: float((adv[:, None] * lp * mask).sum() / mask.sum())  # noqa: E731
    assert surrogate(after1) > surrogate(old) + 1e-3
    new = ref.token_logprobs(sub, seen["actions"])[0]
    assert (torch.exp(new.detach() - old) - 1).abs().max() > 0.05  # the second epoch is off-policy
    loss2 = _hand_dapo(new, old, adv, mask, 0.2, 0.3)
    assert stats["loss"] == pytest.approx(float(loss2.detach()), rel=1e-4)
    _sgd_step(params, loss2, lr)  # epoch 2
    for a, b in zip(policy.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-5)


def test_fine_tune_sft_steps_are_sgd_on_the_seeded_minibatches(small, monkeypatch):
    """fine_tune_sft with plain SGD in place of Adam: two steps, each -lr grad of the token cross-entropy on the
    minibatch of batch_states rows drawn by the seed + 101 generator (the second at the first step's weights);
    the base policy is left as it was."""
    import copy

    monkeypatch.setattr(torch.optim, "Adam", lambda params, lr=1e-3, **kw: torch.optim.SGD(params, lr=lr))
    world, tasks = small
    rows = task.record_episodes(world, tasks[:4], "phone")
    base = task.GUIPolicy(hidden=16, seed=0)
    ref, untouched = copy.deepcopy(base), copy.deepcopy(base)
    cfg = SimpleNamespace(sft_lr=0.05, ft_epochs=1, batch_states=len(rows["step"]) // 2, rft_epochs=2)
    total = experiment.ft_steps(len(rows["step"]), cfg)
    assert total == 2  # one epoch of two half-size minibatches
    policy, log = experiment.fine_tune_sft(base, rows, cfg, seed=3)
    assert log["steps"] == 2
    obs = task.observe(rows)
    gen = torch.Generator().manual_seed(3 + 101)
    losses = []
    for _ in range(total):
        idx = torch.randint(len(rows["step"]), (cfg.batch_states,), generator=gen)
        logp, mask = ref.token_logprobs({k: v[idx] for k, v in obs.items()}, rows["action"][idx.numpy()])
        loss = -(logp * mask).sum() / mask.sum()
        losses.append(float(loss.detach()))
        _sgd_step(list(ref.parameters()), loss, cfg.sft_lr)
    assert log["final_loss"] == pytest.approx(np.mean(losses), rel=1e-6)
    for a, b in zip(policy.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-7)
    for a, b in zip(base.parameters(), untouched.parameters()):
        assert torch.equal(a, b)


# ---- the rework of issue 40: epochs, rates, the unseen family, the fast pieces -------------------

def test_ft_steps_are_fixed_epochs_and_equal_for_both_methods():
    cfg = SimpleNamespace(ft_epochs=8, batch_states=16, rft_epochs=2)
    assert experiment.ft_steps(48, cfg) == 24  # 8 * 48 / 16
    assert experiment.ft_steps(6000, cfg) == 3000
    assert experiment.ft_steps(7, cfg) == 4  # ceil(56 / 16) = 4, even
    assert experiment.ft_steps(5, cfg) == 4  # ceil(40 / 16) = 3, rounded up to an even number
    assert experiment._checkpoints(24, cfg) == {3, 6, 9, 12, 15, 18, 21, 24}


def test_fine_tune_arms_use_their_own_rate_and_the_same_steps(small, monkeypatch):
    world, tasks = small
    rows = task.record_episodes(world, tasks[:4], "phone")
    rates = []
    real_adam = torch.optim.Adam

    def spy(params, lr=1e-3, **kw):
        rates.append(lr)
        return real_adam(params, lr=lr, **kw)

    monkeypatch.setattr(torch.optim, "Adam", spy)
    cfg = SimpleNamespace(sft_lr=0.002, rft_lr=0.0007, ft_epochs=2, batch_states=4, rft_epochs=2, candidate_states=8,
                          group_size=4, max_rounds=2, eps_low=0.2, eps_high=0.3)
    base = task.GUIPolicy(hidden=16, seed=0)
    val = task.record_episodes(world, tasks[4:6], "phone")
    _, sft_log = experiment.fine_tune_sft(base, rows, cfg, seed=0, val_rows=val)
    _, rft_log = experiment.fine_tune_rft(base, rows, cfg, seed=0, val_rows=val)
    assert rates == [0.002, 0.0007]
    assert sft_log["steps"] == rft_log["steps"] == experiment.ft_steps(len(rows["step"]), cfg)
    assert len(sft_log["val_curve"]) == len(rft_log["val_curve"]) == cfg.ft_epochs


def test_fast_reward_equals_the_kit_form_reward(small):
    world, tasks = small
    rows = task.record_episodes(world, tasks, "phone")
    rng = np.random.default_rng(0)
    n = len(rows["step"])
    actions = rows["action"].copy()
    # perturb: random types, random clicks near and far, wrong words, wrong letters, wrong directions
    sizes = {task.OPEN: (16, 16), task.CLICK: (task.N_BINS, task.N_BINS), task.SCROLL: (4, 0), task.TYPE: (16, 0)}
    for j in range(n):  # keep the reference, change its arguments, or draw a random action of a random type
        u = rng.random()
        if u < 0.3:
            continue
        kind = int(actions[j, 0]) if u < 0.65 else int(rng.integers(0, 5))
        if kind == task.STOP:
            actions[j] = [kind, -1, -1]
            continue
        a, b = sizes[kind]
        actions[j] = [kind, rng.integers(0, a), rng.integers(0, b) if b else -1]
    want = method.action_reward(task.to_kit(actions), task.gt_kit(rows))
    got = experiment.fast_reward(actions, rows["action"], rows["box"])
    assert np.array_equal(got, want)
    assert set(np.unique(want)) == {0.0, 1.0, 2.0}


def test_mixture_sampling_matches_the_click_table(small):
    """The non-greedy click draw (element, then x, then y) has the distribution of the full table
    p(x, y) = sum_k a_k q_k(x) q_k(y), and every head is drawn from its own distribution."""
    world, tasks = small
    rows = task.record_episodes(world, tasks, "phone")
    i = int(np.flatnonzero(rows["action"][:, 0] == task.CLICK)[0])
    reps = 20000
    obs = {k: v[[i] * reps] for k, v in task.observe(rows).items()}
    policy = task.GUIPolicy(seed=2)
    with torch.no_grad():
        table = policy(task.observe(rows, idx=[i]))
    actions = policy.sample(obs, torch.Generator().manual_seed(0))
    kind_freq = np.bincount(actions[:, 0], minlength=5) / reps
    assert np.abs(kind_freq - table["kind"][0].exp().numpy()).max() < 0.015
    clicks = actions[actions[:, 0] == task.CLICK]
    x_freq = np.bincount(clicks[:, 1], minlength=task.N_BINS) / len(clicks)
    x_want = table["point"][0].exp().reshape(task.N_BINS, task.N_BINS).sum(1).numpy()
    assert np.abs(x_freq - x_want).max() < 0.03
    pair = clicks[:, 1] * task.N_BINS + clicks[:, 2]
    top = int(table["point"][0].argmax())
    assert abs(np.mean(pair == top) - float(table["point"][0, top].exp())) < 0.03


def test_unseen_family_shifts_only_the_unseen_apps():
    plain, shifted = task.make_world(3), task.make_world(3, unseen_shift=1.5)
    unseen = plain.pool == "unseen"
    assert np.array_equal(plain.style[~unseen], shifted.style[~unseen])
    assert np.array_equal(plain.names, shifted.names) and np.array_equal(plain.buttons, shifted.buttons)
    family = np.linalg.solve(plain.style[unseen][0], shifted.style[unseen][0])
    for a, b in zip(plain.style[unseen], shifted.style[unseen]):  # one shared matrix for every unseen app
        assert np.allclose(a @ family, b)
    assert np.abs(family - np.eye(task.APPEARANCE)).max() > 0.1


# ---- the kit's geometry at its edges (issue 44) --------------------------------------------------


def test_enlarge_box_scales_only_width_and_height_and_takes_integer_boxes():
    """GUIEvalKit's enlargement keeps the centre and multiplies w and h by the factor, for integer boxes too, and
    leaves its input alone."""
    box = np.array([[1, 2, 3, 4], [0, 0, 10, 1]])
    out = method.enlarge_box(box, 1.5)
    assert out.tolist() == [[1.0, 2.0, 4.5, 6.0], [0.0, 0.0, 15.0, 1.5]]
    assert box.tolist() == [[1, 2, 3, 4], [0, 0, 10, 1]]
    assert np.allclose(method.enlarge_box([[0.5, 0.5, 0.2, 0.1]]), [[0.5, 0.5, 0.24, 0.12]])  # default 1.2


def test_inside_box_includes_edges_and_uses_each_axis_half_extent():
    """|x - cx| <= w / 2 and |y - cy| <= h / 2 (edges included, up to 1e-12), with the width for x and the height
    for y; a missing point (None, read as nan) is outside, and the answer is a boolean array whatever the input's
    dtype (object arrays, as the kit's tables hold, included)."""
    box = [0.5, 0.5, 0.5, 0.5]  # edges at 0.25 and 0.75, exact in binary
    on_edges = method.inside_box([[0.75, 0.5], [0.5, 0.75], [0.25, 0.25], [0.75, 0.75]], [box] * 4)
    assert on_edges.tolist() == [True] * 4
    unit = [0.0, 0.0, 1.0, 1.0]  # the tolerance: 1e-12 past the edge is still inside, 3e-12 is not
    tol = method.inside_box([[0.5 + 1e-12, 0.0], [0.0, 0.5 + 1e-12], [0.5 + 3e-12, 0.0], [0.0, 0.5 + 3e-12]], [unit] * 4)
    assert tol.tolist() == [True, True, False, False]
    flat = [0.5, 0.5, 0.2, 0.12]  # half width 0.1, half height 0.06
    pts = [[0.59, 0.5], [0.61, 0.5], [0.5, 0.555], [0.5, 0.565], [0.5, 0.445], [0.59, 0.555]]
    assert method.inside_box(pts, [flat] * 6).tolist() == [True, False, True, False, True, True]
    pts = np.array([[None, None], [0.5, 0.5], [0.7, 0.5]], dtype=object)
    got = method.inside_box(pts, np.array([flat] * 3, dtype=object))
    assert got.dtype == bool and got.tolist() == [False, True, False]


def test_step_match_needs_the_type_and_checks_every_parameter_kind():
    """EM = type match and right parameters: a wrong TYPE/OPEN text fails even with the right type; a scroll or
    type predicted with a point inside a click's box is not a click; text_match fails when neither text contains
    the other; no pairs give an empty boolean array."""
    box = [0.5, 0.5, 0.2, 0.1]
    gt = kit(["type", "open", "click", "click", "type", "open"], boxes=[[0] * 4] * 2 + [box] * 2 + [[0] * 4] * 2,
             texts=["party", "ab", "", "", "party", "ab"])
    pred = kit(["type", "open", "scroll", "type", "type", "open"],
               points=[[np.nan] * 2] * 2 + [[0.5, 0.5]] * 2 + [[np.nan] * 2] * 2, directions=["", "", "up", "", "", ""],
               texts=["xyz", "zz", "", "", "art", "b"])
    tm, em = method.step_match(pred, gt)
    assert tm.tolist() == [True, True, False, True, True, True]
    assert em.tolist() == [False, False, False, False, True, True]
    assert method.text_match(["x", "party", "PARTY"], ["party", "x", " party"]).tolist() == [False, False, True]
    empty = method.text_match([], [])
    assert empty.dtype == bool and empty.shape == (0,)


def test_step_match_click_rule_per_step_with_its_own_factor_and_distance():
    """A click is judged step by step: a missing (nan) point fails only its own step; the box is enlarged by the
    given factor, not the default; without a box (width 0, whatever the height) the point must lie within the
    given distance of the GT centre, the distance itself included; inputs held as object arrays work the same."""
    box = [0.5, 0.5, 0.2, 0.1]
    gt = kit(["click"] * 3, boxes=[box] * 3)
    pred = kit(["click"] * 3, points=[[np.nan, np.nan], [0.5, 0.5], [0.65, 0.5]])
    assert method.step_match(pred, gt)[1].tolist() == [False, True, False]  # 0.65 is outside the 1.2x box
    assert method.step_match(pred, gt, box_factor=2.0)[1].tolist() == [False, True, True]  # inside the 2x box
    no_box = kit(["click"] * 4, boxes=[[0.5, 0.5, 0.0, 0.5]] * 4)  # width 0: no box, the distance rule
    pts = kit(["click"] * 4, points=[[0.75, 0.5], [0.5, 0.25], [0.76, 0.5], [0.5, 0.7]])
    assert method.step_match(pts, no_box, distance=0.25)[1].tolist() == [True, True, False, True]
    flat = kit(["click"] * 2, boxes=[[0.5, 0.5, 0.2, 0.0]] * 2)  # width > 0, height 0: a box, a line in y
    on_line = kit(["click"] * 2, points=[[0.55, 0.5], [0.5, 0.52]])
    assert method.step_match(on_line, flat, box_factor=1.0)[1].tolist() == [True, False]
    as_objects = {k: np.asarray(v, dtype=object) for k, v in pred.items()}
    gt_objects = {k: np.asarray(v, dtype=object) for k, v in gt.items()}
    as_objects["point"][0] = [None, None]
    tm, em = method.step_match(as_objects, gt_objects)
    assert em.tolist() == [False, True, False] and tm.all()


def test_episode_metrics_take_em_as_zero_one_integers():
    """Success and goal progress from EM written as 0/1 integers equal those from booleans."""
    out = method.episode_metrics(np.array([1, 1, 0, 1, 1]), [0, 0, 0, 1, 1])
    assert out["success"].tolist() == [0.0, 1.0]
    assert np.allclose(out["goal_progress"], [2 / 3, 1.0])


def test_losses_keep_the_policy_dtype_with_float64_numpy_inputs():
    """The SFT and DAPO losses are computed in the log-probabilities' dtype when the mask, the old log-probabilities
    and the advantages come as float64 numpy arrays (as group advantages and recorded masks do), with the values of
    the hand-written formulas."""
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.8, 1.0]], dtype=torch.float32))
    mask = np.array([[1.0, 1.0], [1.0, 0.0]])
    sft = method.sft_loss(logp, mask)
    assert sft.dtype == torch.float32 and float(sft) == pytest.approx((np.log(2) + np.log(4) - np.log(0.8)) / 3, rel=1e-6)
    old = np.log(np.array([[0.4, 0.25], [1.0, 1.0]]))  # ratios 1.25, 1.0 | 0.8
    dapo = method.dapo_loss(logp, old, np.array([1.0, -2.0]), mask)
    assert dapo.dtype == torch.float32
    assert float(dapo) == pytest.approx(-(1.25 + 1.0 - 1.6) / 3, rel=1e-5)


def test_dapo_loss_defaults_clip_at_0_8_and_1_3():
    """With the default clip range (eps_low 0.2, eps_high 0.3) a ratio of 1.5 with A > 0 counts as 1.3 and a ratio of
    0.5 with A < 0 as 0.8; ratios inside the range are left alone."""
    old = torch.zeros(1, 4, dtype=torch.float64)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.9]], dtype=torch.float64))
    for adv, want in ((1.0, 1.3 + 0.5 + 1.1 + 0.9), (-1.0, -1.5 - 0.8 - 1.1 - 0.9)):
        loss = method.dapo_loss(new, old, torch.tensor([adv], dtype=torch.float64), torch.ones(1, 4))
        assert float(loss) == pytest.approx(-want / 4)


def test_rft_update_defaults_and_reward_statistics(small, monkeypatch):
    """rft_update's defaults: two DAPO epochs with clip range (0.2, 0.3), at most 8 draws when no group has mixed
    rewards; mean_reward is the mean over every sampled reward, the dropped groups' included."""
    world, tasks = small
    obs = task.observe(task.record_episodes(world, tasks[:2], "phone"))
    policy = task.GUIPolicy(hidden=16, seed=0)
    optimiser = torch.optim.SGD(policy.parameters(), lr=0.01)
    calls, real = [], method.dapo_loss

    def spy(new, old, adv, mask, eps_low, eps_high):
        calls.append((eps_low, eps_high))
        return real(new, old, adv, mask, eps_low, eps_high)

    monkeypatch.setattr(method, "dapo_loss", spy)

    def draw_states():
        return {k: v[:4] for k, v in obs.items()}, np.arange(4)

    def reward(states, actions):  # states 1 and 3 mixed (0, 1, 0, 1), states 0 and 2 all 1: mean 12 / 16
        return np.where(states % 2 == 1, np.arange(len(states)) % 2, 1.0)

    gen = torch.Generator().manual_seed(0)
    stats = method.rft_update(policy, optimiser, draw_states, reward, 4, 2, gen)
    assert calls == [(0.2, 0.3)] * 2
    assert stats["mean_reward"] == pytest.approx(0.75) and stats["draws"] == 1 and stats["groups"] == 2
    stats = method.rft_update(policy, optimiser, draw_states, lambda s, a: 2.0 * np.ones(len(s)), 4, 2, gen)
    assert stats["draws"] == 8 and stats["groups"] == 0 and stats["share_kept"] == 0.0
    assert stats["mean_reward"] == pytest.approx(2.0) and len(calls) == 2


def test_rft_update_draws_its_samples_from_the_given_generator(small):
    """The G actions per state come from the generator passed in, not torch's global one: the same seed gives the
    same samples whatever the global state, another seed other samples."""
    import copy

    world, tasks = small
    obs = task.observe(task.record_episodes(world, tasks[:2], "phone"))
    base = task.GUIPolicy(hidden=16, seed=0)

    def sampled(seed):
        seen = []
        policy = copy.deepcopy(base)
        torch.rand(7)  # move the global generator between runs
        method.rft_update(policy, torch.optim.SGD(policy.parameters(), lr=0.0), lambda: ({k: v[:3] for k, v in obs.items()},
                          np.arange(3)), lambda s, a: seen.append(a.copy()) or np.arange(len(s)) % 2, 4, 3,
                          torch.Generator().manual_seed(seed), epochs=1)
        return seen[0]

    first = sampled(0)
    assert np.array_equal(first, sampled(0)) and not np.array_equal(first, sampled(1))
