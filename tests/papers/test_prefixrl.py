"""Unit tests of the replib.papers.prefixrl package (RL from prefixes of correct off-policy traces)."""

import copy
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from replib.models.causal_lm import sample, tiny_gpt, token_logprobs
from replib.papers.prefixrl import baselines, exercises, experiment, method, task, theory
from replib.rl import group_advantages, policy_gradient_loss


@pytest.fixture(autouse=True)
def one_thread():
    from replib.core.runtime import compute_threads

    with compute_threads(1):
        yield


def tiny_model(seed=0):
    return tiny_gpt(task.VOCAB, n_layer=1, n_embd=16, n_head=2, n_positions=32, pad_id=task.SEP,
                    eos_id=task.BOS, seed=seed)


def rl_cfg(L, G=8, iw_clip=1.0):
    return SimpleNamespace(L=L, group_size=G, iw_clip=iw_clip)


# ---- the task ---------------------------------------------------------------------------------


def test_problems_split_and_prompts():
    problems = task.all_problems()
    assert problems.shape == (1000, 3) and problems.dtype == np.int64
    assert len({tuple(p) for p in problems}) == 1000 and problems.min() == 0 and problems.max() == 9
    train, held = task.split_problems(256, seed=3)
    assert train.shape == (256, 3) and held.shape == (744, 3)
    both = {tuple(p) for p in train} | {tuple(p) for p in held}
    assert len(both) == 1000 and not ({tuple(p) for p in train} & {tuple(p) for p in held})
    assert np.array_equal(task.split_problems(256, seed=3)[0], train)
    assert not np.array_equal(task.split_problems(256, seed=4)[0], train)
    p = task.prompts(problems[:4])
    assert p.shape == (4, 5) and p.dtype == np.int64
    assert np.all(p[:, 0] == task.BOS) and np.all(p[:, 4] == task.SEP) and np.array_equal(p[:, 1:4], problems[:4])
    seq = task.sequences(problems[:4], np.zeros((4, 6), dtype=np.int64))
    assert seq.shape == (4, 11) and np.array_equal(seq[:, :5], p)


def test_correct_traces_follow_the_rule():
    T = task.STEP_TABLE
    A, B = task.MARKS
    y1 = T[3, 5]
    y2 = T[y1, 4]
    y3 = T[y2, 5]
    assert task.correct_traces(np.array([[3, 4, 5]]), 4).tolist() == [[A, y1, y2, y3]]  # mark, then d1, d0, d1
    z1 = T[4, 5]  # strategy B starts from d0
    assert task.correct_traces(np.array([[3, 4, 5]]), 3, strategy=1).tolist() == [[B, z1, T[z1, 4]]]
    problems = task.all_problems()
    for strategy, start in ((0, 0), (1, 1)):
        y = task.correct_traces(problems, 9, strategy)
        assert (y[:, 0] == task.MARKS[strategy]).all()
        prev = problems[:, start]
        for t in range(1, 9):
            assert np.array_equal(y[:, t], task.STEP_TABLE[prev, problems[:, 1 + t % 2]])
            prev = y[:, t]
    a, b, same = task.both_traces(problems, 9)
    assert not same.any() and np.array_equal(a, task.correct_traces(problems, 9)) and np.array_equal(
        b, task.correct_traces(problems, 9, 1))


def test_noisy_traces_corrupt_at_rate_eps_and_continue_from_the_corruption():
    rng = np.random.default_rng(0)
    problems = task.all_problems()[rng.integers(0, 1000, size=4000)]
    eps = 0.4
    strategies = (rng.random(4000) < 0.3).astype(int)
    y = task.noisy_traces(problems, 11, eps, rng, strategies)
    assert np.array_equal(y[:, 0], np.asarray(task.MARKS)[strategies])  # the mark is never corrupted
    start = problems[np.arange(4000), strategies][:, None]  # A from v0, B from d0
    prev = np.concatenate([start, y[:, 1:-1]], axis=1)
    y = y[:, 1:]
    rule = task.STEP_TABLE[prev, problems[:, [1 + t % 2 for t in range(1, 11)]]]
    corrupted = y != rule
    assert corrupted.mean() == pytest.approx(eps, abs=0.01)
    assert y.min() >= 0 and y.max() <= 9
    # a corruption is a uniformly random *other* digit: offsets 1..9 equally often
    offsets = ((y - rule) % 10)[corrupted]
    counts = np.bincount(offsets, minlength=10)
    assert counts[0] == 0 and np.all(np.abs(counts[1:] / corrupted.sum() - 1 / 9) < 0.01)
    assert np.array_equal(task.noisy_traces(problems[:5], 10, 0.0, rng), task.correct_traces(problems[:5], 10))
    step = -(0.6 * math.log(0.6) + 0.4 * math.log(0.4 / 9))
    assert task.noise_floor(0.0) == 0.0 and task.noise_floor(0.4) == pytest.approx(step)
    mark = -(0.1 * math.log(0.1) + 0.9 * math.log(0.9))
    assert task.noise_floor(0.4, 20, 0.1) == pytest.approx((19 * step + mark) / 20)
    assert task.noise_floor(0.4, 20, 0.0) == pytest.approx(19 * step / 20)


# ---- exact evaluation -------------------------------------------------------------------------


def test_stored_batches_are_the_replayed_stream(tmp_path, monkeypatch):
    from replib.core.data import replay_batches

    monkeypatch.setenv("REPLIB_CACHE_DIR", str(tmp_path))
    corpus = task.pretraining_corpus(3, 4, L=6, eps=0.4, seed=5)
    fast, slow = task._stored_batches(corpus, 4), replay_batches(corpus, 4)
    ids = []
    for _ in range(3):
        batch = fast(None)
        for a, b in zip(batch, slow(None), strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
        ids.append(batch[0])
    assert not np.array_equal(ids[0], ids[1])  # each call hands out the next batch


def test_exact_pass_at_1_matches_sampling():
    model = tiny_model(1)
    problems = task.all_problems()[::50]  # 20 problems
    L = 2
    exact = task.pass_at_1(model, problems, L)
    assert exact.shape == (20,) and np.all((exact > 0) & (exact < 1))
    n = 1000
    start = torch.as_tensor(task.prompts(problems)).repeat_interleave(n, 0)
    out, logprob = sample(model, start, L, eos_id=task.NO_EOS, pad_id=task.SEP,
                          generator=torch.Generator().manual_seed(0))
    hits = [(out == torch.as_tensor(task.correct_traces(problems, L, s)).repeat_interleave(n, 0)).all(1)
            for s in task.STRATEGIES]
    hit = hits[0] | hits[1]  # either strategy's trace is correct
    mc = hit.float().reshape(20, n).mean(1).numpy()
    se = math.sqrt(exact.mean() / (20 * n))
    assert abs(mc.mean() - exact.mean()) < 4 * se
    # a sampled correct completion has exactly the log-probability of its strategy's trace
    for s, h in zip(task.STRATEGIES, hits):
        rows = torch.nonzero(h).squeeze(1)
        assert len(rows) > 0
        own = task.correct_step_probs(model, problems, L, strategy=s).prod(1)
        assert np.allclose(logprob[rows].numpy(), np.log(own[rows.numpy() // n]), atol=1e-4)


def test_pass_at_1_with_prefix_uses_only_later_steps():
    model = tiny_model(2)
    problems = task.all_problems()[:30]
    L = 6
    probs = task.correct_step_probs(model, problems, L)
    probs_b = task.correct_step_probs(model, problems, L, strategy=1)
    assert probs.shape == (30, L) and np.all((probs > 0) & (probs < 1))
    # no prefix: either trace; a prefix holds the mark, so only its own strategy's trace completes it
    assert np.allclose(task.pass_at_1(model, problems, L), probs.prod(1) + probs_b.prod(1))
    for h in range(1, L):
        assert np.allclose(task.pass_at_1(model, problems, L, prefix_len=h), probs[:, h:].prod(1))
        assert np.allclose(task.pass_at_1(model, problems, L, prefix_len=h, prefix_strategy=1), probs_b[:, h:].prod(1))
    assert np.allclose(task.step_accuracy(model, problems, L), probs.mean(0))
    curve = task.prefix_curve(model, problems, L)
    assert curve.shape == (L,) and curve[0] == pytest.approx(probs.prod(1).mean())
    assert np.all(np.diff(curve) > 0)  # fewer steps left, higher success
    # teacher forcing: step t's probability does not depend on the steps after t
    ids = torch.as_tensor(task.sequences(problems, task.correct_traces(problems, L)))
    with torch.no_grad():
        short = torch.exp(token_logprobs(model, ids[:, : 5 + 3])[:, 4:]).double().numpy()
    assert np.allclose(short, probs[:, :3], atol=1e-6)
    assert task.trace_cost_tokens(np.array([0.5, 0.25]), 4) == pytest.approx(4 / 0.5 + 4 / 0.25)


# ---- the RL loop ------------------------------------------------------------------------------


def test_rollouts_sample_exactly_the_completion():
    model = tiny_model(3)
    problems = task.all_problems()[[7, 123, 999]]
    L, h, G = 6, 2, 5
    ids, mask, rewards = task.rollouts(model, problems, h, G, L, torch.Generator().manual_seed(0), strategy=1)
    assert ids.shape == (15, 5 + L) and mask.shape == ids.shape and rewards.shape == (3, G)
    truth = task.correct_traces(problems, L, 1)
    expected_prefix = np.repeat(task.sequences(problems, truth[:, :h]), G, axis=0)
    assert np.array_equal(ids[:, : 5 + h].numpy(), expected_prefix)
    assert not mask[:, : 5 + h].any() and mask[:, 5 + h:].all()
    reward = (ids[:, 5 + h:].numpy() == np.repeat(truth[:, h:], G, axis=0)).all(1)
    assert np.array_equal(rewards.reshape(-1).numpy(), reward.astype(float))
    # a prefix of length L - 1 leaves one token; h outside 0..L-1 is refused
    ids, mask, _ = task.rollouts(model, problems, L - 1, 2, L, torch.Generator().manual_seed(1))
    assert mask.sum().item() == 3 * 2
    # no prefix: a sample equal to either strategy's trace is rewarded
    ids, _, rewards = task.rollouts(model, problems, 0, 300, 2, torch.Generator().manual_seed(3))
    both = [np.repeat(task.correct_traces(problems, 2, s), 300, axis=0) for s in task.STRATEGIES]
    expected = (ids[:, 5:].numpy() == both[0]).all(1) | (ids[:, 5:].numpy() == both[1]).all(1)
    assert np.array_equal(rewards.reshape(-1).numpy(), expected.astype(float))
    assert all(((ids[:, 5:].numpy() == b).all(1)).any() for b in both)  # both strategies were hit
    with pytest.raises(ValueError):
        task.rollouts(model, problems, L, 2, L, torch.Generator().manual_seed(2))


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def test_rl_step_moves_the_model_only_when_some_group_has_signal():
    problems = task.all_problems()[::60][:16]
    model = tiny_model(4)
    before = _params(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    # untrained model, 8 steps to guess: every reward is 0 -> every advantage is 0
    stats = method.rl_step(model, opt, problems, 0, rl_cfg(8), torch.Generator().manual_seed(0),
                           rollouts=task.rollouts)
    assert stats["share_nonzero"] == 0.0 and stats["mean_reward"] == 0.0 and stats["loss"] == 0.0
    assert stats["sampled_tokens"] == 16 * 8 * 8 and stats["trained_tokens"] == 16 * 8 * (5 + 8)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # one step left to guess: some groups are mixed
    stats = method.rl_step(model, opt, problems, 7, rl_cfg(8), torch.Generator().manual_seed(0),
                           rollouts=task.rollouts)
    assert stats["share_nonzero"] > 0 and stats["sampled_tokens"] == 16 * 8 * 1
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_rl_step_samples_its_rollouts_from_the_given_generator_only():
    """Algorithm step 3 is reproducible from the step's generator: rl_step's rewards and loss are those
    of task.rollouts drawn (before the update) with an equally seeded generator, whatever the global
    torch seed, and two runs from the same model and generator seed give the same parameters."""
    problems = task.all_problems()[::60][:16]
    L, h, G = 8, 7, 8
    ref_model = tiny_model(4)
    ids, mask, rewards = task.rollouts(ref_model, problems, h, G, L, torch.Generator().manual_seed(5))
    assert 0 < float(rewards.mean()) < 1
    expected_loss = float(_hand_pg_loss(ref_model, ids, mask, rewards))
    finals = []
    for global_seed in (123, 321):
        torch.manual_seed(global_seed)
        model = tiny_model(4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        stats = method.rl_step(model, opt, problems, h, rl_cfg(L, G), torch.Generator().manual_seed(5),
                               rollouts=task.rollouts)
        assert stats["mean_reward"] == pytest.approx(float(rewards.mean()))
        assert stats["loss"] == pytest.approx(expected_loss, rel=1e-5, abs=1e-7)
        finals.append(_params(model))
    assert all(torch.equal(a, b) for a, b in zip(*finals))


def test_prefix_tokens_get_no_gradient():
    model = tiny_model(5)
    problems = task.all_problems()[::100]
    L, h = 6, 5
    ids, mask, rewards = task.rollouts(model, problems, h, 8, L, torch.Generator().manual_seed(1))
    assert (rewards.std(1) > 0).any()
    logprobs = token_logprobs(model, ids)
    logprobs.retain_grad()
    loss = policy_gradient_loss((logprobs * mask[:, 1:]).sum(1), group_advantages(rewards).reshape(-1))
    loss.backward()
    grad = logprobs.grad  # position j predicts token j + 1
    assert torch.all(grad[:, : 4 + h] == 0)
    assert grad[:, 4 + h:].abs().sum() > 0


def test_prefix_length_distribution():
    rng = np.random.default_rng(0)
    hs = [method.draw_prefix_len("prefixrl", 20, rng) for _ in range(2000)]
    assert set(hs) == set(range(10, 19))
    assert all(method.draw_prefix_len(m, 20, rng) == 0 for m in ("grpo", "sft_rl", "iw_offpolicy"))


def test_sft_imitates_the_correct_traces():
    model = tiny_model(6)
    problems = task.all_problems()[:64]
    before = task.pass_at_1(model, problems, 3).mean()
    losses = experiment.sft(model, problems, 3, epochs=30, lr=1e-2, seed=0)
    assert losses.shape == (30,) and losses[-1] < losses[0]
    assert task.pass_at_1(model, problems, 3).mean() > before


def test_rejection_sampling_is_geometric_and_capped():
    rng = np.random.default_rng(0)
    p = np.array([1.0, 0.0, 0.01, 0.5])
    found, draws = task.rejection_sample(np.repeat(p, 5000), 50, rng)
    found, draws = found.reshape(4, -1), draws.reshape(4, -1)
    assert found[0].all() and (draws[0] == 1).all()  # a sure success on the first sample
    assert not found[1].any() and (draws[1] == 50).all()  # never: all K samples spent
    assert found[2].mean() == pytest.approx(1 - 0.99 ** 50, abs=0.02)
    assert draws[3].mean() == pytest.approx((1 - 0.5 ** 50) / 0.5, abs=0.05)  # E min(geometric, K)
    assert (draws >= 1).all() and (draws <= 50).all() and (draws[~found] == 50).all()


def test_truncated_importance_weights():
    logprob = torch.log(torch.tensor([[0.2, 0.6, 0.9]], requires_grad=True))
    w = baselines.truncated_importance_weights(logprob, np.array([[0.4, 0.3, 0.9]]), clip=1.0)
    assert torch.allclose(w, torch.tensor([[0.5, 1.0, 1.0]])) and not w.requires_grad
    w = baselines.truncated_importance_weights(logprob, np.array([[0.4, 0.3, 0.9]]), clip=1.5)
    assert torch.allclose(w, torch.tensor([[0.5, 1.5, 1.0]]))


def test_iw_offpolicy_step_learns_from_the_trace_when_every_rollout_fails():
    problems = task.all_problems()[::60][:16]
    L = 8
    model = tiny_model(4)
    truth = torch.as_tensor(task.sequences(problems, task.correct_traces(problems, L)))
    before = float(token_logprobs(model, truth)[:, task.PROMPT_LEN - 1:].sum().detach())
    behaviour = task.correct_step_probs(model, problems, L)  # mu = the model itself: weights 1 at first
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    # untrained model, 8 steps to guess: its 7 rollouts fail, the trace (reward 1) gives every group a signal
    stats = baselines.iw_offpolicy_step(model, opt, problems, behaviour, rl_cfg(L), torch.Generator().manual_seed(0))
    assert stats["share_nonzero"] == 1.0 and stats["mean_reward"] == 0.0
    assert stats["sampled_tokens"] == 16 * 7 * L  # the trace is not sampled
    assert stats["trained_tokens"] == 16 * 8 * (5 + L)  # but it is trained on
    after = float(token_logprobs(model, truth)[:, task.PROMPT_LEN - 1:].sum().detach())
    assert after > before  # the update pushes the trace up
    # with the trace's weights at 0 (mu huge) the trace contributes nothing: only rollouts push down
    frozen = tiny_model(4)
    opt = torch.optim.Adam(frozen.parameters(), lr=1e-2)
    params = _params(frozen)
    baselines.iw_offpolicy_step(frozen, opt, problems, np.full_like(behaviour, 1e12), rl_cfg(L),
                                torch.Generator().manual_seed(0))
    assert any(not torch.equal(a, b) for a, b in zip(params, frozen.parameters()))
    assert float(token_logprobs(frozen, truth)[:, task.PROMPT_LEN - 1:].sum().detach()) < after


# ---- the pipeline -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run():
    from replib import core

    # the smoke base model (60 steps), so that rejection sampling finds traces for the moderate regime
    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "smoke", rl_steps=2, moderate_rl_steps=2, eval_every=1,
                         sft_epochs=2)
    return cfg, experiment.run_experiment(cfg), experiment.run_experiment(cfg)


def test_pipeline_gives_every_declared_claim_and_is_deterministic(tiny_run):
    from replib import core

    cfg, first, again = tiny_run
    values = experiment.claim_values(first, cfg)
    ids = {c["id"] for c in core.load_chapter("prefixrl")["claims"]}
    assert set(values) == set(cfg.seeds) and set(values[0]) == ids
    assert all(isinstance(v, float) and not math.isnan(v) for v in values[0].values())
    for key in ("evals", "steps", "profiles", "prefix_curves", "losses", "base"):
        pd.testing.assert_frame_equal(first[key], again[key])
    evals = first["evals"]
    assert list(evals.columns) == ["seed", "regime", "method", "step", "tokens", "compute", "heldout_pass",
                                   "heldout_pass_b", "train_pass"]
    assert set(evals[evals.regime == "starved"].method) == set(cfg.methods)
    assert set(evals[evals.regime == "moderate"].method) == set(cfg.moderate_methods)
    assert sorted(evals[evals.method == "sft_rl"].step) == [0, 1, 2]
    steps = first["steps"]
    assert {"share_nonzero", "mean_reward", "prefix_len", "regime"} <= set(steps.columns)
    for regime, L in [("starved", cfg.L), ("moderate", cfg.moderate_L)]:
        pre = steps[(steps.method == "prefixrl") & (steps.regime == regime)]
        assert pre.prefix_len.between(L // 2, L - 2).all()
        prof = first["profiles"][first["profiles"].regime == regime]
        assert prof.position.max() == L
    assert (steps[steps.method != "prefixrl"].prefix_len == 0).all()
    assert set(first["profiles"].model) == {"base", "sft", *cfg.methods, *cfg.moderate_methods}
    assert len(first["prefix_curves"]) == sum(
        first["prefix_curves"][first["prefix_curves"].regime == r].model.nunique() * L
        for r, L in [("starved", cfg.L), ("moderate", cfg.moderate_L)])
    assert {"base", "sft", "eval", "rejection_sampling", "starved_prefixrl", "moderate_iw_offpolicy"} <= set(
        first["seconds"].columns)
    base = first["base"].iloc[0]
    # the moderate methods start where the base model (or the SFT model) is, on the problems with a trace
    start = evals[(evals.step == 0) & (evals.regime == "moderate")].set_index("method").heldout_pass
    assert start["prefixrl"] == pytest.approx(base.moderate_heldout_pass) == start["iw_offpolicy"]
    assert start["sft_rl"] == pytest.approx(base.sft_heldout_pass)
    assert 0 < base.traces_found <= 1 and base.rs_tokens >= cfg.n_train * cfg.moderate_L
    # compute: rejection sampling charged to every trace method, SFT to SFT-then-RL, then every RL step
    start = evals[(evals.step == 0) & (evals.regime == "moderate")].set_index("method").compute
    assert start["prefixrl"] == base.rs_compute == start["iw_offpolicy"] == base.rs_tokens
    assert start["sft_rl"] == pytest.approx(base.rs_compute + base.sft_compute)
    assert base.sft_compute == experiment.TRAIN_COST * cfg.sft_epochs * (base.traces_found * cfg.n_train) * (
        5 + cfg.moderate_L)
    st = steps[(steps.regime == "moderate")]
    assert (st.compute.diff()[st.step > 1] > 0).all()
    row = st[(st.method == "prefixrl") & (st.step == 1)].iloc[0]
    assert row.compute == base.rs_compute + row.sampled_tokens + experiment.TRAIN_COST * row.trained_tokens
    assert values[0]["m3_base_pass1"] == pytest.approx(base.heldout_pass)
    assert values[0]["p3_moderate_not_hopeless"] == pytest.approx(base.moderate_heldout_pass)
    # the premise c1b is the exact group-signal share of the base model, a small number on hard problems
    assert 0 <= values[0]["c1b_signal_grpo"] < 1


def test_claims_of_missing_methods_are_nan(tiny_run):
    cfg, first, _ = tiny_run
    cfg = copy.copy(cfg)
    cfg.moderate_methods = ["prefixrl"]
    keep = ((first["evals"].regime == "starved") | (first["evals"].method == "prefixrl"))
    only = {key: df for key, df in first.items() if key != "runs"}
    only["evals"] = first["evals"][keep]
    only["base"] = first["base"].drop(columns=["sft_fit"])
    values = experiment.claim_values(only, cfg)[0]
    for key in ("p2_sft_converged_other_strategy", "c2b_vs_offpolicy_iw_other_strategy",
                "m1_equal_compute_ratio_vs_sft_rl", "m2_speed_vs_sft_rl_other_strategy", "h1_headroom_m1",
                "h2_headroom_m2"):
        assert math.isnan(values[key])
    assert not math.isnan(values["c1a_signal_prefixrl"]) and not math.isnan(values["c3_back_generalization"])


def hand_made_results():
    """Run results in run_experiment's shape (the frames claim_values reads), two seeds with
    different numbers, starved L = 4 (c3 reads positions 1-2), moderate L = 3. Rows outside a claim
    (the moderate regime's profiles, a starved grpo run) are there as distractors."""
    cfg = SimpleNamespace(seeds=[0, 1], L=4, moderate_L=3, methods=["prefixrl", "grpo"],
                          moderate_methods=["prefixrl", "sft_rl", "iw_offpolicy"])
    ev = {  # seed: {(regime, method): [(step, compute, heldout_pass, heldout_pass_b, train_pass)]}
        0: {("starved", "prefixrl"): [(0, 0, 0.0, 0.0, 0.0), (10, 100, 0.02, 0.0, 0.1), (20, 200, 0.06, 0.0, 0.4)],
            ("starved", "grpo"): [(0, 0, 0.0, 0.0, 0.0), (20, 400, 0.5, 0.0, 0.5)],
            ("moderate", "prefixrl"): [(0, 1000, 0.01, 0.0, 0.01), (10, 1100, 0.05, 0.01, 0.1),
                                       (20, 1200, 0.09, 0.03, 0.4)],
            ("moderate", "sft_rl"): [(0, 1150, 0.02, 0.02, 0.1), (10, 1300, 0.025, 0.02, 0.16),
                                     (20, 1450, 0.03, 0.03, 0.3)],
            ("moderate", "iw_offpolicy"): [(0, 1000, 0.01, 0.0, 0.01), (10, 1140, 0.02, 0.0, 0.02),
                                           (20, 1280, 0.04, 0.0, 0.05)]},
        1: {("starved", "prefixrl"): [(30, 300, 0.12, 0.0, 0.5), (0, 0, 0.001, 0.0, 0.002), (10, 100, 0.03, 0.0, 0.05),
                                      (20, 200, 0.08, 0.0, 0.2)],  # unsorted
            ("moderate", "prefixrl"): [(0, 50, 0.01, 0.0, 0.01), (10, 150, 0.02, 0.02, 0.02), (20, 250, 0.03, 0.0, 0.04)],
            ("moderate", "sft_rl"): [(0, 500, 0.2, 0.1, 0.3), (10, 650, 0.3, 0.1, 0.4), (20, 800, 0.4, 0.1, 0.5)],
            ("moderate", "iw_offpolicy"): [(0, 50, 0.01, 0.0, 0.01), (10, 190, 0.01, 0.0, 0.01),
                                           (20, 330, 0.01, 0.0, 0.01)]},
    }
    evals = pd.DataFrame([dict(seed=seed, regime=r, method=m, step=s, tokens=c, compute=c, heldout_pass=hp,
                               heldout_pass_b=hb, train_pass=tp)
                          for seed, by_method in ev.items() for (r, m), rows in by_method.items()
                          for s, c, hp, hb, tp in rows])
    shares = {0: {("starved", "prefixrl"): [(0.5, 0.9), (0.3, 0.9)], ("starved", "grpo"): [(0.9, 0.9), (0.9, 0.9)],
                  ("moderate", "prefixrl"): [(1.0, 0.2), (1.0, 0.6)]},
              1: {("starved", "prefixrl"): [(0.6, 0.9), (0.8, 0.9), (1.0, 0.9)],
                  ("moderate", "prefixrl"): [(0.0, 0.0), (0.0, 1.0), (0.0, 0.5)]}}
    steps = pd.DataFrame([dict(seed=seed, regime=r, method=m, step=i + 1, share_nonzero=v, mean_reward=mr,
                               prefix_len=0)
                          for seed, by_method in shares.items() for (r, m), vs in by_method.items()
                          for i, (v, mr) in enumerate(vs)])
    acc = {0: {("starved", "base"): [0.5, 0.6, 0.9, 0.9], ("starved", "prefixrl"): [0.7, 0.9, 0.5, 0.5],
               ("moderate", "base"): [0.1, 0.1, 0.1], ("moderate", "prefixrl"): [0.9, 0.9, 0.9]},
           1: {("starved", "base"): [0.4, 0.5, 0.6, 0.7], ("starved", "prefixrl"): [0.45, 0.65, 0.9, 0.9],
               ("moderate", "base"): [0.9, 0.9, 0.9], ("moderate", "prefixrl"): [0.1, 0.1, 0.1]}}
    profiles = pd.DataFrame([dict(seed=seed, regime=r, model=m, position=t + 1, step_accuracy=a)
                             for seed, by_model in acc.items() for (r, m), a_t in by_model.items()
                             for t, a in enumerate(a_t)])
    base = pd.DataFrame([dict(seed=0, heldout_pass=1e-5, final_base_loss=1.60, noise_floor=1.55, grpo_signal_share=2e-4,
                              moderate_heldout_pass=2e-3, rs_tokens=1000.0, sft_fit=0.97),
                         dict(seed=1, heldout_pass=2e-6, final_base_loss=1.50, noise_floor=1.55, grpo_signal_share=0.0,
                              moderate_heldout_pass=5e-4, rs_tokens=50.0, sft_fit=0.9)])
    return cfg, dict(evals=evals, steps=steps, profiles=profiles, base=base)


def test_claim_values_on_hand_made_results():
    from replib import core

    cfg, results = hand_made_results()
    v = experiment.claim_values(results, cfg)
    assert set(v) == {0, 1}
    ids = {c["id"] for c in core.load_chapter("prefixrl")["claims"]}
    want = {
        0: {
            "p1_base_learns_the_toy": 0.05,  # 1.60 - 1.55
            "p2_sft_converged_other_strategy": 0.97,
            "p3_moderate_not_hopeless": 2e-3,
            "p4_prefixrl_learns_prefixed": 0.4,  # moderate prefixrl's mean reward, mean(0.2, 0.6)
            # common budget min(1200, 1450): sft_rl's last evaluation within it is step 0 (0.02)
            "h1_headroom_m1": 1 / 0.02,
            # level 0.5 * min(0.4, 0.3) = 0.15: sft_rl first at 1300; prefixrl's first evaluation 1100
            "h2_headroom_m2": 1300 / 1100,
            "c1a_signal_prefixrl": 0.4,  # starved prefixrl only: mean(0.5, 0.3)
            "c1b_signal_grpo": 2e-4,  # the exact share, not the (distractor) grpo run
            "c2a_progress": 0.06,  # starved prefixrl's final held-out pass
            "c2b_vs_offpolicy_iw_other_strategy": 0.05,  # moderate: 0.09 - 0.04
            "c3_back_generalization": 0.25,  # mean(0.7 - 0.5, 0.9 - 0.6); all 4 positions: -0.075
            "m1_equal_compute_ratio_vs_sft_rl": 0.09 / 0.02,
            "m2_speed_vs_sft_rl_other_strategy": 1300 / 1200,  # prefixrl reaches 0.15 at 1200
            "m3_base_pass1": 1e-5,
            "m4_prefixrl_b_share": 0.03 / 0.09,
        },
        1: {
            "p1_base_learns_the_toy": -0.05,  # 1.50 - 1.55: a minibatch loss can dip below the floor
            "p2_sft_converged_other_strategy": 0.9,
            "p3_moderate_not_hopeless": 5e-4,
            "p4_prefixrl_learns_prefixed": 0.5,  # mean(0, 1, 0.5)
            # budget min(250, 800): SFT-then-RL has no model within it, so the base model's 5e-4 counts
            "h1_headroom_m1": 1 / 5e-4,
            "h2_headroom_m2": 500 / 150,  # level 0.02: sft_rl at step 0 (500); prefixrl's first evaluation 150
            "c1a_signal_prefixrl": 0.8,  # mean(0.6, 0.8, 1.0)
            "c1b_signal_grpo": 0.0,
            "c2a_progress": 0.12,  # the step-30 row, listed first
            "c2b_vs_offpolicy_iw_other_strategy": 0.02,  # 0.03 - 0.01
            "c3_back_generalization": 0.1,  # mean(0.05, 0.15)
            "m1_equal_compute_ratio_vs_sft_rl": 0.03 / 5e-4,
            "m2_speed_vs_sft_rl_other_strategy": 500 / 150,  # prefixrl reaches 0.02 at 150
            "m3_base_pass1": 2e-6,
            "m4_prefixrl_b_share": 0.0,
        },
    }
    for seed, claims in want.items():
        assert set(v[seed]) == ids == set(claims)
        for cid, value in claims.items():
            assert v[seed][cid] == pytest.approx(value, rel=1e-9, abs=1e-12), (seed, cid)
    # SFT-then-RL's pass@1 is 0 at the budget -> m1 nan, its ceiling infinite
    evals = results["evals"]
    evals.loc[(evals.seed == 0) & (evals.method == "sft_rl"), "heldout_pass"] = 0.0
    v = experiment.claim_values(results, cfg)
    assert math.isnan(v[0]["m1_equal_compute_ratio_vs_sft_rl"]) and v[0]["h1_headroom_m1"] == math.inf
    assert v[1]["m1_equal_compute_ratio_vs_sft_rl"] == pytest.approx(60.0)
    # PrefixRL running past the common step count: c2b, m4 and m2's level read it at that step, m1 its whole run
    cfg.moderate_rl_steps = 10
    v = experiment.claim_values(results, cfg)
    assert v[0]["c2b_vs_offpolicy_iw_other_strategy"] == pytest.approx(0.05 - 0.04)
    assert v[0]["m4_prefixrl_b_share"] == pytest.approx(0.01 / 0.05)
    # level 0.5 * min(0.1, 0.3) = 0.05: prefixrl reaches it at step 10 (1100), sft_rl at step 0 (1150)
    assert v[0]["m2_speed_vs_sft_rl_other_strategy"] == pytest.approx(1150 / 1100)
    assert math.isnan(v[0]["m1_equal_compute_ratio_vs_sft_rl"])  # still over the whole run


def test_compute_units_charge_updates_three_times_a_sample():
    assert experiment.compute_units(10, 0) == 10.0 and experiment.compute_units(0, 10) == 30.0
    assert experiment.compute_units(5, 2) == 5 + experiment.TRAIN_COST * 2
    cfg = SimpleNamespace(rl_lr=1.0, sft_rl_lr=2.0, iw_lr=3.0)
    assert [experiment.rl_lr_of(m, cfg) for m in experiment.METHODS] == [1.0, 1.0, 2.0, 3.0]


# ---- theory -----------------------------------------------------------------------------------


def test_group_signal_probability_matches_sampling():
    rng = np.random.default_rng(0)
    for p, G in [(0.1, 8), (0.5, 4), (0.02, 16)]:
        groups = rng.random((200_000, G)) < p
        mc = (groups.any(1) & ~groups.all(1)).mean()
        assert theory.group_signal_probability(p, G) == pytest.approx(mc, abs=0.005)
    assert theory.group_signal_probability(np.array([0.0, 1.0]), 8).tolist() == [0.0, 0.0]
    assert theory.lock_success(0.5, 6, 2) == pytest.approx(0.5**4)
    assert np.allclose(theory.lock_success(0.6, 20, np.arange(20)), 0.6 ** (20 - np.arange(20)))


def test_softmax_pg_lock_is_exponential_from_the_start_and_polynomial_with_resets():
    start = [theory.softmax_pg_lock(H, 4, "start", lr=1.0) for H in (2, 4, 6)]
    resets = [theory.softmax_pg_lock(H, 4, "resets", lr=1.0) for H in (2, 4, 6)]
    assert start == sorted(start) and resets == sorted(resets)
    assert start[2] / start[0] > 3 * resets[2] / resets[0]
    assert start[2] > 2 * resets[2]
    assert theory.softmax_pg_lock(6, 4, "start", max_iters=10) == 10
    with pytest.raises(ValueError):
        theory.softmax_pg_lock(3, 2, "nowhere")


def test_consistency_check():
    out = theory.consistency_check(n_trees=8, iters=200)
    trees = out["trees"].set_index("rho")
    assert trees.all_pi_star.all() and (trees.min_max_j_pre == 1.0).all()
    assert (trees.loc[trees.rho0 > 0, "min_share_optimal_for_j"] == 1.0).all()
    assert trees.loc[trees.rho0 == 0, "mean_share_optimal_for_j"].item() < 1.0
    tab, shared = out["tabular"], out["shared"]
    assert np.allclose(tab["p_start"], 0.25)  # no gradient ever reaches the start state
    assert shared["p_start"][-1] > 0.9 and shared["v_start"][-1] > tab["v_start"][-1]
    assert tab["v_prefix"][-1] > tab["v_prefix"][0]
    frame = theory.back_generalization_check(iters=200)
    assert len(frame) == 2 * 201 and set(frame.policy) == {"tabular", "shared"}
    assert np.allclose(frame[frame.policy == "shared"].p_start.to_numpy(), shared["p_start"])


# ---- graders ----------------------------------------------------------------------------------


def test_graders_accept_the_reference_and_reject_wrong_answers(capsys):
    def ours(r):
        r = np.asarray(r, dtype=float)
        return (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)

    exercises.check_group_advantages(ours)
    exercises.check_group_advantages(lambda r: group_advantages(torch.as_tensor(r)))
    assert "correct" in capsys.readouterr().out
    with pytest.raises(AssertionError):  # unbiased std
        exercises.check_group_advantages(lambda r: (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-6))
    with pytest.raises(AssertionError):  # no baseline
        exercises.check_group_advantages(lambda r: r / (r.std(1, keepdims=True) + 1e-6))
    exercises.check_group_signal_probability(lambda p, G: 1 - (1 - np.asarray(p)) ** G - np.asarray(p) ** G)
    with pytest.raises(AssertionError):
        exercises.check_group_signal_probability(lambda p, G: 1 - (1 - np.asarray(p)) ** G)


# ---- update steps: direction, parts, second step ---------------------------------------------------


def _fixed_batch(problems, L, h, G, seed):
    """A fixed rollout batch (ids, mask, rewards) for a fake ``rollouts``: random completions after the
    correct prefix of length h, mixed 0/1 rewards (no group all-equal)."""
    gen = np.random.default_rng(seed)
    n = len(problems)
    truth = task.correct_traces(problems, L)
    completions = gen.integers(0, 10, size=(n * G, L - h))
    ids = np.concatenate([np.repeat(task.sequences(problems, truth[:, :h]), G, axis=0), completions], axis=1)
    mask = np.zeros_like(ids, dtype=bool)
    mask[:, task.PROMPT_LEN + h:] = True
    rewards = np.zeros((n, G))
    rewards[:, 0] = 1.0
    rewards[:, 1:] = gen.random((n, G - 1)) < 0.4
    return torch.as_tensor(ids), torch.as_tensor(mask), torch.as_tensor(rewards, dtype=torch.float32)


def _hand_pg_loss(model, ids, mask, rewards):
    """-mean(A sum_t mask log p) with A = (r - mean_g) / (pop. std_g + 1e-6), written out."""
    logp = torch.log_softmax(model(ids[:, :-1]).logits.float(), -1)
    tok = logp.gather(-1, ids[:, 1:, None])[..., 0]  # token t + 1 predicted at position t
    seq = (tok * mask[:, 1:].float()).sum(1)
    r = rewards.double()
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + 1e-6)).reshape(-1).float()
    return -(adv * seq).mean()


def _grads(model, loss):
    return [g.detach().clone() for g in torch.autograd.grad(loss, list(model.parameters()), allow_unused=False)]


def test_rl_step_is_one_sgd_step_on_the_hand_written_policy_gradient():
    """rl_step with plain SGD changes every parameter by -lr x grad of -mean(A log pi(completion)),
    the loss written out independently (log-softmax, next-token gather, group advantages)."""
    model = tiny_model(7)
    problems = task.all_problems()[[3, 517]]
    L, h, G, lr = 6, 2, 4, 0.05
    ids, mask, rewards = _fixed_batch(problems, L, h, G, seed=0)
    calls = []

    def fake_rollouts(m, probs, prefix_len, g, length, generator):
        calls.append((prefix_len, g, length))
        return ids, mask, rewards

    grads = _grads(model, _hand_pg_loss(model, ids, mask, rewards))
    before = _params(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    stats = method.rl_step(model, opt, problems, h, rl_cfg(L, G), rollouts=fake_rollouts)
    assert calls == [(h, G, L)]
    assert stats["sampled_tokens"] == 2 * G * (L - h) and stats["mean_reward"] == pytest.approx(float(rewards.mean()))
    moved = 0.0
    for b, a, g in zip(before, model.parameters(), grads):
        assert torch.allclose(a.detach() - b, -lr * g, rtol=1e-3, atol=1e-7)
        moved += float((a.detach() - b).abs().sum())
    assert moved > 1e-3
    # the rewarded first sample of each group gains log-probability
    with torch.no_grad():
        lp = (token_logprobs(model, ids) * mask[:, 1:]).sum(1)
        lp_before = copy.deepcopy(model)
        for p, b in zip(lp_before.parameters(), before):
            p.copy_(b)
        lp0 = (token_logprobs(lp_before, ids) * mask[:, 1:]).sum(1)
    assert lp[0] > lp0[0] and lp[G] > lp0[G]


def test_rl_step_second_step_uses_fresh_gradients_and_the_optimiser_state():
    """Two rl_step calls with SGD + momentum 0.9 on different batches: step 2 moves by
    -lr (0.9 g1 + g2), g2 the hand gradient of batch 2 at the parameters after step 1 (gradients are
    zeroed between steps, the momentum buffer is kept)."""
    model = tiny_model(8)
    problems = task.all_problems()[[11, 402]]
    L, h, G, lr = 5, 1, 4, 0.05
    batches = [_fixed_batch(problems, L, h, G, seed=s) for s in (1, 2)]
    it = iter(batches)

    def fake_rollouts(m, probs, prefix_len, g, length, generator):
        return next(it)

    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    g1 = _grads(model, _hand_pg_loss(model, *batches[0]))
    method.rl_step(model, opt, problems, h, rl_cfg(L, G), rollouts=fake_rollouts)
    mid = _params(model)
    g2 = _grads(model, _hand_pg_loss(model, *batches[1]))
    method.rl_step(model, opt, problems, h, rl_cfg(L, G), rollouts=fake_rollouts)
    for b, a, x, y in zip(mid, model.parameters(), g1, g2):
        assert torch.allclose(a.detach() - b, -lr * (0.9 * x + y), rtol=1e-3, atol=1e-7)
    assert any(not torch.allclose(x, y) for x, y in zip(g1, g2))


def test_iw_offpolicy_step_is_one_sgd_step_on_the_hand_written_weighted_loss(monkeypatch):
    """iw_offpolicy_step with plain SGD: -lr x grad of -mean_i A_i sum_t w_it log pi(y_it), the G - 1
    on-policy rollouts (fixed here) with w = 1 and the correct trace (reward 1) with the detached
    truncated weight min(pi / mu, clip), written out by hand; weights both below and at the clip."""
    model = tiny_model(9)
    problems = task.all_problems()[[5, 733]]
    L, G, lr, clip = 5, 4, 0.05, 1.5
    ids, mask, on_rewards = _fixed_batch(problems, L, 0, G - 1, seed=3)
    on_rewards[:, 0] = 0.0  # one group with every rollout failing, one mixed
    on_rewards[1] = torch.tensor([1.0, 0.0, 0.0])
    monkeypatch.setattr(baselines, "rollouts", lambda m, probs, h, g, length, generator: (ids, mask, on_rewards))
    probs = task.correct_step_probs(model, problems, L)
    behaviour = probs * np.array([[0.5, 2.0, 1.0, 4.0, 0.25]])  # pi / mu = 2 (clipped to 1.5), 0.5, 1, 0.25, 4
    truth = torch.as_tensor(task.sequences(problems, task.correct_traces(problems, L)))

    tok = torch.log_softmax(model(truth[:, :-1]).logits.float(), -1).gather(-1, truth[:, 1:, None])[..., 0]
    trace_tok = tok[:, task.PROMPT_LEN - 1:]
    w = torch.clamp(torch.exp(trace_tok.detach()) / torch.as_tensor(behaviour, dtype=torch.float32), max=clip)
    assert torch.allclose(w[:, 0], torch.full((2,), clip)) and torch.allclose(w[:, 1], torch.full((2,), 0.5), atol=1e-5)
    on = torch.log_softmax(model(ids[:, :-1]).logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    on_seq = (on * mask[:, 1:].float()).sum(1).reshape(2, G - 1)
    r = torch.cat([on_rewards, torch.ones(2, 1)], 1).double()
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + 1e-6)).float()
    loss = -(adv * torch.cat([on_seq, (w * trace_tok).sum(1, keepdim=True)], 1)).mean()
    grads = _grads(model, loss)

    before = _params(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    stats = baselines.iw_offpolicy_step(model, opt, problems, behaviour, rl_cfg(L, G, iw_clip=clip))
    assert stats["loss"] == pytest.approx(loss.item(), rel=1e-4)
    for b, a, g in zip(before, model.parameters(), grads):
        assert torch.allclose(a.detach() - b, -lr * g, rtol=1e-3, atol=1e-7)


def test_sft_first_step_is_adamw_on_the_response_cross_entropy():
    """sft with one epoch: its loss is the mean next-token cross-entropy of the response tokens
    (written out by hand), and the first AdamW step (warmup 1: full lr) moves every parameter by
    -lr (wd p + g / (|g| + eps)), i.e. against the sign of the hand gradient."""
    model = tiny_model(10)
    problems = task.all_problems()[[2, 99, 640]]
    L, lr = 4, 1e-3
    ids = torch.as_tensor(task.sequences(problems, task.correct_traces(problems, L)))
    logits = model(ids[:, :-1]).logits.float()
    targets = ids[:, 1:]
    resp = torch.zeros_like(targets, dtype=torch.bool)
    resp[:, task.PROMPT_LEN - 1:] = True  # position t predicts token t + 1: the response starts at t = 4
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    loss = nll[resp].mean()
    grads = _grads(model, loss)
    before = _params(model)
    losses = experiment.sft(model, problems, L, epochs=1, lr=lr, seed=0)
    assert losses[0] == pytest.approx(loss.item(), rel=1e-5)
    for b, a, g in zip(before, model.parameters(), grads):
        step = (a.detach() - b * (1 - lr * 0.01)) / -lr  # remove the decoupled weight decay
        big = g.abs() > 1e-4
        assert torch.allclose(step[big], torch.sign(g[big]), atol=0.02)
        assert bool((step.abs() <= 1 + 1e-3).all())
