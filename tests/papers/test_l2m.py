"""Unit tests of replib.papers.l2m (in-context feature acquisition)."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from replib.papers.l2m import baselines, exercises, experiment, method, task, theory


def test_prior_shapes_informative_sets_and_missingness():
    t = task.sample_tasks(np.random.default_rng(0), 300, 40, p_max=0.5, kind="linear")
    assert t["x"].shape == (300, 40, 6) and t["y"].shape == (300, 40) and t["r"].shape == (300, 40, 6)
    assert set(t["informative"].sum(axis=1)) == {1, 2, 3}
    assert 0.7 < t["r"].mean() < 0.8  # mean missingness rate 0.25
    # the oracle's importance is zero exactly off the informative set
    assert np.all((t["importance"] > 0) == t["informative"])
    # the label does not depend on a non-informative feature: regress y on x for one task
    one = task.sample_tasks(np.random.default_rng(1), 1, 2000, kind="linear")
    coef = np.linalg.lstsq(one["x"][0], one["y"][0], rcond=None)[0]
    assert np.all(np.abs(coef[~one["informative"][0]]) < 0.02)
    # importance is |w| after the unit-variance scaling: the regression recovers it
    assert np.allclose(np.abs(coef), one["importance"][0], atol=0.02)


def test_gaussian_nll_and_marginal():
    assert task.gaussian_nll(np.array(0.0), np.array(1.0), np.array(0.0)) == pytest.approx(0.5 * np.log(2 * np.pi))
    nll = task.marginal_nll(np.array([[1.0, 3.0]]), np.array([[2.0]]))
    assert nll[0, 0] == pytest.approx(0.5 * np.log(2 * np.pi))  # mean 2, sd 1


def test_attention_mask_hand_made():
    allowed = (method.attention_mask(1, 2, autoregressive=True) == 0).int().tolist()
    # order: c, t0, t1, q0, q1
    assert allowed == [[1, 0, 0, 0, 0],
                       [1, 1, 0, 0, 0],
                       [1, 1, 1, 0, 0],
                       [1, 0, 0, 1, 0],
                       [1, 1, 0, 0, 1]]
    assert (method.attention_mask(1, 2, autoregressive=False) == 0).int().tolist() == [[1, 0, 0], [1, 1, 0],
                                                                                       [1, 0, 1]]


def test_no_label_leak_into_queries():
    torch.manual_seed(0)
    model = method.L2M(3, width=16, ff=32, hidden=32)
    ctx = method.context_tokens(torch.randn(2, 4, 3), torch.ones(2, 4, 3), torch.randn(2, 4))
    xt, yt, r = torch.randn(2, 3, 3), torch.randn(2, 3), torch.ones(2, 3, 3)
    q = method.query_tokens(xt, r)
    with torch.no_grad():
        a = model.encode(ctx, q, method.context_tokens(xt, r, yt))
        b = model.encode(ctx, q, method.context_tokens(xt, r, yt + torch.tensor([0.0, 0.0, 5.0])))
    assert torch.allclose(a, b, atol=1e-5)  # the last target's label reaches no query


def test_acquisition_state_inside_availability():
    g = torch.Generator().manual_seed(0)
    r = (torch.rand(500, 6, generator=g) > 0.3).float()
    m = method.acquisition_state(r, g)
    assert (m <= r).all() and (m.sum(1) <= r.sum(1)).all()
    assert (m.sum(1) == 0).any() and (m.sum(1) == r.sum(1)).any()


def test_straight_through_gumbel_blocks_and_passes_gradient():
    logits = torch.tensor([[0.0, -1e8, 0.0]] * 50, requires_grad=True)
    s = method.straight_through_gumbel(logits, 1.0, torch.Generator().manual_seed(0))
    assert torch.allclose(s.sum(1), torch.ones(50)) and torch.all(s[:, 1] == 0)
    s[:, 0].sum().backward()
    assert logits.grad.abs().sum() > 0


def test_greedy_acquisition_follows_the_selector():
    nlls, picks = method.greedy_acquisition(lambda x, m: (torch.zeros(x.shape[:-1]), 1 + m.sum(-1)),
                                            lambda x, m: torch.tensor([0.0, 3.0, 1.0]).expand_as(m),
                                            torch.zeros(4, 3), torch.zeros(4))
    assert picks[0].tolist() == [1, 2, 0]
    assert torch.allclose(nlls[0], torch.log(torch.tensor([1.0, 2.0, 3.0, 4.0])) + 0.5 * np.log(2 * np.pi))


def test_per_task_networks_are_independent():
    g = torch.Generator().manual_seed(0)
    net = baselines.TaskNetworks(2, [3, 4, 1], 0.0, g)
    x = torch.randn(2, 5, 3)
    out = net(x)
    x2 = x.clone()
    x2[1] += 1.0
    assert torch.allclose(net(x2)[0], out[0]) and not torch.allclose(net(x2)[1], out[1])


def test_theory_cmi_and_covert_identity():
    cov = np.diag([1.0, 1.0, 1.0])
    cov[0, 2] = cov[2, 0] = 0.5  # y = last, correlated with x0 only
    assert theory.gaussian_cmi(cov, 0, []) == pytest.approx(-0.5 * np.log(0.75))
    assert theory.gaussian_cmi(cov, 1, []) == pytest.approx(0.0)
    parts = theory.discrete_cmi_and_nll(np.full((2, 2, 2), 1 / 8))
    assert parts["I(Y;X1)"] == pytest.approx(0.0) and parts["NLL after X1"] == pytest.approx(np.log(2))


def test_exercise_graders_accept_reference_and_reject_wrong():
    exercises.check_attention_mask(lambda n, t, a: (method.attention_mask(n, t, a) == 0).numpy())
    with pytest.raises(AssertionError):
        exercises.check_attention_mask(lambda n, t, a: np.ones((n + (2 if a else 1) * t,) * 2, dtype=bool))
    exercises.check_gaussian_cmi(theory.gaussian_cmi)
    with pytest.raises(AssertionError):
        exercises.check_gaussian_cmi(lambda cov, j, g: 2 * theory.gaussian_cmi(cov, j, g))


def _hand_made_results():
    context = []
    nll = {0: {4: (1.5, 1.6, 2.5), 16: (0.7, 1.1, 1.5), 24: (0.5, 0.8, 1.4)},
           1: {4: (1.4, 2.0, 2.4), 16: (0.9, 1.0, 1.6), 24: (0.6, 0.6, 1.3)}}
    for seed, by_context in nll.items():
        for c, (l2m, mlp, marginal) in by_context.items():
            context += [{"seed": seed, "context": c, "model": "l2m", "nll": l2m},
                        {"seed": seed, "context": c, "model": "mlp", "nll": mlp},
                        {"seed": seed, "context": c, "model": "marginal", "nll": marginal}]
    curves = []
    for seed, shift in [(0, 0.0), (1, 0.1)]:
        for k in range(7):
            end = 5.0 if k in (0, 6) else 0.0  # k = 0 and k = 6 do not count
            curves += [{"seed": seed, "method": "l2m", "k": k, "nll": 1.0 - 0.1 * k + shift + end},
                       {"seed": seed, "method": "l2m_random", "k": k, "nll": 1.2 - 0.1 * k},
                       {"seed": seed, "method": "l2m_oracle", "k": k, "nll": 0.7 - 0.1 * k - end},
                       {"seed": seed, "method": "mlp_gdfs", "k": k, "nll": 1.1 - 0.1 * k},
                       {"seed": seed, "method": "mlp_random", "k": k, "nll": 9.0}]
    methods = ["l2m"] * 4 + ["probe"] * 2 + ["l2m_random"] * 2 + ["mlp_gdfs"] * 2
    picks = pd.DataFrame({"seed": [0] * 10 + [1] * 10, "method": methods * 2,
                          "informative": [True, True, False, True, True, False, False, False, True, True,
                                          False, True, False, False, True, True, True, False, False, False]})
    selector = pd.DataFrame({"seed": [0, 0, 0, 1, 1], "arm": ["l2m", "l2m", "gdfs", "l2m", "l2m"],
                             "steps": [5, 10, 10, 5, 10], "score": [1.0, 0.97, 0.5, 1.1, 1.2]})
    return {"context": pd.DataFrame(context), "curves": pd.DataFrame(curves), "picks": picks, "selector": selector}


def test_claim_values_hand_computed():
    values = experiment.claim_values(_hand_made_results(), SimpleNamespace(seeds=[0, 1], policy_steps=10))
    expected = {
        0: {"p1_learns_in_context": 1.5 - 0.7, "p2_mlp_learns": 1.5 - 1.1, "p3_selector_converged": 0.03,
            "p4_state_carries_relevance": 0.5, "p5_acquisition_headroom": 0.4, "p6_selector_headroom": 0.5,
            "h1_uq_vs_per_task": 1.1 - 0.7, "h2_acquisition_vs_gdfs": 0.1,
            "m1_policy_vs_random": 0.2, "m2_first_pick_informative": 0.75,
            "m3_gain_at_small_context": (1.6 - 1.5) - (0.8 - 0.5), "x1_random_first_pick": 0.0,
            "x2_gdfs_first_pick": 1.0},
        1: {"p1_learns_in_context": 1.6 - 0.9, "p2_mlp_learns": 1.6 - 1.0, "p3_selector_converged": -0.1,
            "p4_state_carries_relevance": 1.0, "p5_acquisition_headroom": 0.4, "p6_selector_headroom": 0.5,
            "h1_uq_vs_per_task": 1.0 - 0.9, "h2_acquisition_vs_gdfs": 0.0,
            "m1_policy_vs_random": 0.1, "m2_first_pick_informative": 0.25,
            "m3_gain_at_small_context": (2.0 - 1.4) - (0.6 - 0.6), "x1_random_first_pick": 0.5,
            "x2_gdfs_first_pick": 0.0},
    }
    for seed in (0, 1):
        assert values[seed] == pytest.approx(expected[seed])
    declared = yaml.safe_load(open("notebooks/l2m/chapter.yml"))["claims"]
    assert set(values[0]) == {c["id"] for c in declared}


def test_oracle_order_follows_importance_and_probe_state_ignores_the_target():
    """The oracle arm picks features by decreasing importance; the empty-state hidden state (what the
    selector reads for its first pick) is the same whatever the target row."""
    torch.manual_seed(0)
    model = method.L2M(6, width=16, ff=32, hidden=32).eval()
    t = experiment.as_tensors(task.sample_tasks(np.random.default_rng(0), 3, 12, kind="linear"))
    context = method.context_tokens(t["x"][:, :8], t["r"][:, :8], t["y"][:, :8])
    importance = torch.tensor([[0.0, 3.0, 0.0, 1.0, 2.0, 0.0]] * 3)
    _, picks = method.l2m_acquisition(model, context, t["x"][:, 8:], t["y"][:, 8:], "oracle", importance=importance)
    assert picks[:, :, :3].tolist() == [[[1, 4, 3]] * 4] * 3
    hidden = method.empty_state_hidden(model, context)
    with torch.no_grad():
        direct = model.encode(context, method.query_tokens(t["x"][:, 8:], torch.zeros_like(t["x"][:, 8:])))
    assert torch.allclose(direct, hidden[:, None].expand_as(direct), atol=1e-5)


def test_selector_read_outs_equal_shorter_runs():
    """Reading the selector after s steps (the tuning's read-outs, p3's half-way score) gives the
    model a run of s steps gives: constant learning rates, no schedule."""
    def draw(rng):
        return experiment.as_tensors(task.sample_tasks(rng, 2, 12, kind="linear"))

    torch.manual_seed(0)
    base = method.L2M(6, width=16, ff=32, hidden=32)
    short, long = method.L2M(6, width=16, ff=32, hidden=32), method.L2M(6, width=16, ff=32, hidden=32)
    short.load_state_dict(base.state_dict())
    long.load_state_dict(base.state_dict())
    method.train_selector(short, draw, 3, 1e-2, 1e-3, 0.5, (4, 8), 0)
    seen = {}
    method.train_selector(long, draw, 5, 1e-2, 1e-3, 0.5, (4, 8), 0,
                          on_step=lambda k, m: seen.setdefault(k, [p.detach().clone() for p in m.selector.parameters()]))
    for a, b in zip(short.selector.parameters(), seen[3]):
        assert torch.allclose(a, b)
    assert sorted(seen) == [1, 2, 3, 4, 5]


def test_profiles_share_keys_and_bounds():
    keys = {k for p in experiment.EXPERIMENT_PROFILES.values() for k in p}
    assert all(set(p) == keys for p in experiment.EXPERIMENT_PROFILES.values())
    assert set(experiment.EXPERIMENT_BOUNDS) == keys - {"seeds"}


# Reading a number back from torch's shape-only "meta" device fails with one of these; a tensor left on
# the CPU while the model is elsewhere fails earlier, with "Expected all tensors to be on the same device".
META_READ = r"cannot be called on meta tensors|Cannot copy out of meta tensor"


def test_paper_profile_keeps_tensors_on_the_model_device(monkeypatch):
    monkeypatch.setenv("REPLIB_DEVICE", "meta")  # core.model_device("paper") is then "meta"
    from replib import core

    cfg = core.configure(experiment.EXPERIMENT_PROFILES, "paper", experiment.EXPERIMENT_BOUNDS, seeds=[0],
                         pretrain_steps=2, policy_steps=2, width=16, n_test_tasks=4, tune_tasks=4, gdfs_epochs=2,
                         mlp_epoch_grid=[1, 2])
    with pytest.raises((RuntimeError, NotImplementedError), match=META_READ):
        experiment.run_seed(cfg, 0)
    tasks = experiment.as_tensors(task.sample_tasks(np.random.default_rng(0), 2, 8, kind="linear"), "meta")
    x, y, r = tasks["x"], tasks["y"], tasks["r"]
    g = torch.Generator().manual_seed(0)
    m = method.acquisition_state(r, g)
    assert m.device.type == "meta" and method.straight_through_gumbel(x, 1.0, g).device.type == "meta"
    assert method.attention_mask(2, 3, True, device="meta").device.type == "meta"
    net = baselines.TaskNetworks(2, [12, 4, 2], 0.5, g).to("meta").train()
    assert baselines.mlp_predict(net, x, m, g)[0].device.type == "meta"  # dropout draws moved to the net
    nlls, picks = method.greedy_acquisition(lambda xq, mq: baselines.mlp_predict(net, xq, mq), None, x, y, g)
    assert nlls.device.type == picks.device.type == "meta"
    fitted = baselines.fit_masked_mlp(x, y, r, 2, 0)  # the per-task networks follow x
    assert {p.device.type for p in fitted.parameters()} == {"meta"}


# ---- update steps: estimator, composite losses, descent, second step -----------------------------


def _sgd(monkeypatch, name):
    """Replace torch.optim.<name> (Adam, AdamW) by plain SGD at the same learning rate(s) for one test."""
    monkeypatch.setattr(torch.optim, name, lambda params, lr=1e-3, **kw: torch.optim.SGD(params, lr=lr))


def _nll(mean, std, y):
    return 0.5 * ((y - mean) / std) ** 2 + torch.log(std) + 0.5 * np.log(2 * np.pi)


def _st_pick(logits, tau, g):
    """The straight-through Gumbel one-hot written out: forward the hard argmax, gradient of the soft sample."""
    u = torch.rand(logits.shape, generator=g).clamp(1e-10, 1 - 1e-10)
    soft = torch.softmax((logits - torch.log(-torch.log(u))) / tau, dim=-1)
    hard = torch.nn.functional.one_hot(soft.argmax(-1), logits.shape[-1]).to(soft)
    return hard + soft - soft.detach(), soft


def test_straight_through_gumbel_is_hard_forward_and_soft_backward():
    """The value is the one-hot argmax of softmax((l + g) / tau); the gradient is the soft sample's, same sign."""
    logits = torch.randn(5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    s = method.straight_through_gumbel(logits, 0.7, torch.Generator().manual_seed(3))
    (s * w).sum().backward()
    want, soft = _st_pick(logits, 0.7, torch.Generator().manual_seed(3))
    onehot = torch.nn.functional.one_hot(soft.detach().argmax(-1), 4).double()
    assert torch.allclose(s.detach(), onehot, atol=1e-12) and torch.equal(s.detach(), want.detach())
    grad = torch.autograd.grad((soft * w).sum(), logits)[0]
    assert torch.allclose(logits.grad, grad, atol=1e-12) and grad.abs().sum() > 0


def _tiny_l2m(seed=0, d=task.N_FEATURES):
    torch.manual_seed(seed)
    return method.L2M(d, width=16, n_layers=1, ff=32, hidden=32)


def _hand_selector_loss(model, context, x, y, r, tau, g):
    """selector_loss written out: state m, logits blocked to (1 - m) r, straight-through pick, the NLL at
    max(m, s), averaged over the rows that still have a feature to acquire."""
    m = method.acquisition_state(r, g)
    available = r * (1 - m)
    logits = model.selector(model.encode(context, method.query_tokens(x, m)))
    s, _ = _st_pick(logits.masked_fill(available == 0, -1e8), tau, g)
    m_next = m + (1 - m) * s
    mean, std = model.predict(model.encode(context, method.query_tokens(x, m_next)))
    counted = available.sum(-1) > 0
    return _nll(mean, std, y)[counted].mean(), m, m_next, counted


def test_selector_loss_is_the_nll_after_one_pick_over_counted_rows():
    """selector_loss equals the hand-written objective (value and gradient); a pick adds exactly one available,
    unacquired feature; rows with nothing left to acquire (here a fully missing row) do not count."""
    g = torch.Generator().manual_seed(0)
    model = _tiny_l2m(d=3)
    context = method.context_tokens(torch.randn(2, 5, 3, generator=g), torch.ones(2, 5, 3), torch.randn(2, 5, generator=g))
    x, y = torch.randn(2, 4, 3, generator=g), torch.randn(2, 4, generator=g)
    r = torch.ones(2, 4, 3)
    r[0, 1] = 0.0  # nothing to acquire in this row
    loss = method.selector_loss(model, context, x, y, r, 0.5, torch.Generator().manual_seed(7))
    grads = torch.autograd.grad(loss, list(model.selector.parameters()))
    want, m, m_next, counted = _hand_selector_loss(model, context, x, y, r, 0.5, torch.Generator().manual_seed(7))
    assert not counted[0, 1] and 2 <= counted.sum() < 7
    picked = (m_next - m).detach()
    assert torch.all(picked[counted].sum(-1) == 1) and torch.all(picked[counted] <= (r * (1 - m))[counted])
    assert torch.allclose(loss, want, atol=1e-6)
    for a, b in zip(grads, torch.autograd.grad(want, list(model.selector.parameters()))):
        assert torch.allclose(a, b, atol=1e-7)
    assert sum(float(a.abs().sum()) for a in grads) > 0  # the selector learns through the pick


def _draw(rng):
    return experiment.as_tensors(task.sample_tasks(rng, 2, 10, kind="linear"))


def test_train_selector_steps_are_sgd_on_the_selector_loss(monkeypatch):
    """Two train_selector steps with plain SGD in place of Adam: the selector moves by -lr grad and the predictor
    head by -head_lr grad of the hand-written selector loss on the step's batch (the second step at the
    first step's parameters, a new batch); embedder and encoder stay frozen and are unfrozen afterwards."""
    import copy

    _sgd(monkeypatch, "Adam")
    model = _tiny_l2m(1)
    ref = copy.deepcopy(model)
    lr, head_lr, tau, seed = 0.05, 0.02, 0.5, 3
    losses = method.train_selector(model, _draw, 2, lr, head_lr, tau, (3, 6), seed)
    rng, g = np.random.default_rng([seed, 2]), torch.Generator().manual_seed(seed + 1)
    for step in range(2):
        n_c = int(rng.integers(3, 7))
        b = _draw(rng)
        ctx = method.context_tokens(b["x"][:, :n_c], b["r"][:, :n_c], b["y"][:, :n_c])
        loss = _hand_selector_loss(ref, ctx, b["x"][:, n_c:], b["y"][:, n_c:], b["r"][:, n_c:], tau, g)[0]
        assert losses[step] == pytest.approx(float(loss.detach()), abs=1e-5)
        heads = [(p, lr) for p in ref.selector.parameters()] + [(p, head_lr) for p in ref.predictor.parameters()]
        grads = torch.autograd.grad(loss, [p for p, _ in heads])
        with torch.no_grad():
            for (p, rate), gr in zip(heads, grads):
                p -= rate * gr
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
        assert a.requires_grad
    assert not torch.equal(model.selector[-1].weight, _tiny_l2m(1).selector[-1].weight)


def test_pretraining_schedule_warms_up_then_decays():
    """_schedule: (step + 1) / warmup during warm-up, then (steps - step) / (steps - warmup) down to 0."""
    assert [method._schedule(s, 10, 2) for s in range(10)] == [0.5, 1.0, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8,
                                                               2 / 8, 1 / 8]


def test_train_predictor_steps_are_clipped_sgd_on_the_prequential_nll(monkeypatch):
    """Two train_predictor steps with plain SGD in place of Adam: every non-selector parameter moves by
    -lr_t clip(grad) of the hand-written prequential NLL (context tokens, real targets with labels, queries at a
    random acquisition state), lr_t = lr x the warm-up schedule, the gradient clipped to norm 1; the selector
    head does not move."""
    import copy

    _sgd(monkeypatch, "Adam")
    model = _tiny_l2m(2)
    ref = copy.deepcopy(model)
    lr, seed, steps = 0.05, 4, 3  # warm-up of 1 step: factors 1, 1, 1/2
    losses = method.train_predictor(model, _draw, steps, lr, seed, (3, 6))
    rng, g = np.random.default_rng([seed, 1]), torch.Generator().manual_seed(seed)
    params = [p for name, p in ref.named_parameters() if not name.startswith("selector")]
    for step, factor in enumerate([1.0, 1.0, 0.5]):
        n_c = int(rng.integers(3, 7))
        b = _draw(rng)
        x, y, r = b["x"], b["y"], b["r"]
        ctx = method.context_tokens(x[:, :n_c], r[:, :n_c], y[:, :n_c])
        xt, yt, rt = x[:, n_c:], y[:, n_c:], r[:, n_c:]
        m = method.acquisition_state(rt, g)
        assert torch.all(m <= rt)
        hidden = ref.encode(ctx, method.query_tokens(xt, m), targets=method.context_tokens(xt, rt, yt))
        loss = _nll(*ref.predict(hidden), yt).mean()
        assert losses[step] == pytest.approx(float(loss.detach()), abs=1e-5)
        grads = torch.autograd.grad(loss, params)
        norm = float(torch.sqrt(sum((gr ** 2).sum() for gr in grads)))
        scale = min(1.0, 1.0 / (norm + 1e-6))
        with torch.no_grad():
            for p, gr in zip(params, grads):
                p -= lr * factor * scale * gr
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert torch.equal(model.selector[0].weight, _tiny_l2m(2).selector[0].weight)


def _hand_task_net(net, inputs, dropout, g):
    """TaskNetworks' forward written out: per task h W + b, ReLU and inverted dropout after hidden layers."""
    h = inputs
    for i, (w, b) in enumerate(zip(net.weights, net.biases)):
        h = torch.bmm(h, w) + b
        if i < len(net.weights) - 1:
            h = torch.relu(h)
            if dropout > 0:
                h = h * (torch.rand(h.shape, generator=g) >= dropout).to(h) / (1 - dropout)
    return h


def _hand_mlp_nll(net, x, m, y, dropout, g):
    out = _hand_task_net(net, torch.cat([x * m, m], -1), dropout, g)
    return _nll(out[..., 0], 0.05 + 0.95 * torch.nn.functional.softplus(out[..., 1]), y)


def _tiny_tasks(seed=0):
    t = experiment.as_tensors(task.sample_tasks(np.random.default_rng(seed), 2, 6, kind="linear"))
    return t["x"], t["y"], t["r"]


def test_fit_masked_mlp_epochs_are_sgd_on_the_masked_nll(monkeypatch):
    """Two fit_masked_mlp epochs with plain SGD in place of AdamW: each moves the per-task networks by -lr grad
    of the mean NLL at a fresh acquisition state, with inverted dropout (the second epoch at the first epoch's
    weights, with new states and dropout draws)."""
    _sgd(monkeypatch, "AdamW")
    x, y, r = _tiny_tasks()
    lr, seed, dropout = 0.1, 5, 0.2
    net = baselines.fit_masked_mlp(x, y, r, 2, seed, hidden=8, lr=lr, dropout=dropout)
    g = torch.Generator().manual_seed(seed)
    ref = baselines.TaskNetworks(2, [12, 8, 8, 2], dropout, g)
    for _ in range(2):
        m = method.acquisition_state(r, g)
        loss = _hand_mlp_nll(ref, x, m, y, dropout, g).mean()
        grads = torch.autograd.grad(loss, list(ref.parameters()))
        with torch.no_grad():
            for p, gr in zip(ref.parameters(), grads):
                p -= lr * gr
    for a, b in zip(net.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    assert not net.training


def test_fit_gdfs_selector_epochs_are_sgd_on_the_pick_nll(monkeypatch):
    """Two fit_gdfs_selector epochs with plain SGD in place of Adam: the selector moves by -lr grad of the NLL of
    the frozen masked MLP after a straight-through pick among the available, unacquired features (rows with
    nothing left do not count); the predictor does not move and is trainable again afterwards."""
    import copy

    _sgd(monkeypatch, "Adam")
    x, y, r = _tiny_tasks(1)
    r[0, 0] = 0.0  # a row with nothing to acquire
    predictor = baselines.fit_masked_mlp(x, y, r, 1, 0, hidden=8, dropout=0.0)
    before = copy.deepcopy(predictor)
    lr, seed, tau = 0.1, 2, 0.5
    sel = baselines.fit_gdfs_selector(predictor, x, y, r, 2, seed, hidden=8, lr=lr, tau=tau)
    g = torch.Generator().manual_seed(seed + 7)
    ref = baselines.TaskNetworks(2, [12, 8, 6], 0.0, g)
    for _ in range(2):
        m = method.acquisition_state(r, g)
        available = r * (1 - m)
        logits = _hand_task_net(ref, torch.cat([x * m, m], -1), 0.0, g).masked_fill(available == 0, -1e8)
        s, _ = _st_pick(logits, tau, g)
        counted = available.sum(-1) > 0
        loss = _hand_mlp_nll(predictor, x, m + (1 - m) * s, y, 0.0, None)[counted].mean()
        grads = torch.autograd.grad(loss, list(ref.parameters()))
        with torch.no_grad():
            for p, gr in zip(ref.parameters(), grads):
                p -= lr * gr
    for a, b in zip(sel.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    for a, b in zip(predictor.parameters(), before.parameters()):
        assert torch.equal(a, b) and a.requires_grad


# ---- issue 44: what the mutation run found untested ------------------------------------------------


def test_l2m_default_architecture_has_the_stated_sizes():
    """L2M(d) by default: width 48, 2 post-norm GELU encoder layers of 4 heads and feed-forward 96, no
    dropout, batch first; embedder, predictor and selector MLPs of hidden 96 (2d + 1 inputs, 2 and d outputs)."""
    d = 3
    model = method.L2M(d)
    w, ff, h = 48, 96, 96
    want = {"embed.mlp.0.weight": (h, 2 * d + 1), "embed.mlp.2.weight": (w, h), "embed.skip.weight": (w, 2 * d + 1),
            "embed.norm.weight": (w,), "predictor.0.weight": (h, w), "predictor.2.weight": (2, h),
            "selector.0.weight": (h, w), "selector.2.weight": (d, h)}
    for i in range(2):
        want |= {f"encoder.layers.{i}.self_attn.in_proj_weight": (3 * w, w),
                 f"encoder.layers.{i}.linear1.weight": (ff, w), f"encoder.layers.{i}.linear2.weight": (w, ff)}
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert {n: shapes.get(n) for n in want} == want
    assert not any(n.startswith("encoder.layers.2") for n in shapes)
    for layer in model.encoder.layers:
        assert layer.self_attn.num_heads == 4 and layer.self_attn.batch_first and not layer.norm_first
        assert layer.dropout.p == 0.0 and layer.activation is torch.nn.functional.gelu
    small = method.L2M(2, width=8, n_layers=1, n_heads=2, ff=12, hidden=10)
    assert len(small.encoder.layers) == 1 and small.encoder.layers[0].self_attn.num_heads == 2
    assert tuple(small.encoder.layers[0].linear1.weight.shape) == (12, 8) and tuple(small.selector[0].weight.shape) == (10, 8)


def test_selector_head_starts_orthogonal_small_and_unbiased():
    """The selector's last layer: orthogonal rows scaled by gain 0.01 (W W^T = 1e-4 I), bias 0."""
    torch.manual_seed(0)
    last = method.L2M(4, width=16, ff=32, hidden=32).selector[-1]
    assert torch.allclose(last.weight @ last.weight.T, 1e-4 * torch.eye(4), atol=1e-9)
    assert torch.equal(last.bias, torch.zeros(4))


def test_tokens_embedder_and_predictor_by_hand():
    """Context token [x r, r, y]; query token [x m, m, 0]; embedder LayerNorm(MLP(t) + skip(t)); predictor and
    selector Linear-GELU-Linear; the predictor's mean is its first output, sigma = 0.05 + 0.95 softplus(second)."""
    x = torch.tensor([[[1.0, 2.0, 3.0]]])
    r = torch.tensor([[[1.0, 0.0, 1.0]]])
    y = torch.tensor([[7.0]])
    assert method.context_tokens(x, r, y).tolist() == [[[1.0, 0.0, 3.0, 1.0, 0.0, 1.0, 7.0]]]
    assert method.query_tokens(x, r).tolist() == [[[1.0, 0.0, 3.0, 1.0, 0.0, 1.0, 0.0]]]
    torch.manual_seed(1)
    model = method.L2M(3, width=16, ff=32, hidden=32)
    tokens = torch.randn(2, 5, 7)
    hidden = torch.randn(2, 5, 16)
    with torch.no_grad():
        e = model.embed
        want = torch.nn.functional.layer_norm(e.mlp[2](torch.nn.functional.gelu(e.mlp[0](tokens))) + e.skip(tokens), (16,),
                                              e.norm.weight, e.norm.bias)
        assert torch.allclose(e(tokens), want, atol=1e-6)
        out = model.predictor[-1](torch.nn.functional.gelu(model.predictor[0](hidden)))
        assert torch.allclose(model.predictor(hidden), out, atol=1e-6) and len(model.predictor) == 3
        sel = model.selector[-1](torch.nn.functional.gelu(model.selector[0](hidden)))
        assert torch.allclose(model.selector(hidden), sel, atol=1e-7) and len(model.selector) == 3
        mean, std = model.predict(hidden)
        assert torch.equal(mean, out[..., 0])
        assert torch.allclose(std, 0.05 + 0.95 * torch.log1p(torch.exp(out[..., 1])), atol=1e-6)


def test_gaussian_nll_by_hand_in_numpy_and_torch():
    """0.5 ((y - mu) / sigma)^2 + log sigma + 0.5 log 2 pi, elementwise, for numpy arrays and torch tensors."""
    mu, sd, y = [0.5, -1.0], [2.0, 0.5], [1.5, 0.0]
    want = [0.5 * ((b - a) / s) ** 2 + np.log(s) + 0.5 * np.log(2 * np.pi) for a, s, b in zip(mu, sd, y)]
    got_np = method.gaussian_nll(np.array(mu), np.array(sd), np.array(y))
    got_t = method.gaussian_nll(torch.tensor(mu, dtype=torch.float64), torch.tensor(sd, dtype=torch.float64),
                                torch.tensor(y, dtype=torch.float64))
    assert isinstance(got_np, np.ndarray) and np.allclose(got_np, want, atol=1e-12)
    assert isinstance(got_t, torch.Tensor) and np.allclose(got_t.numpy(), want, atol=1e-12)


def test_acquisition_state_depth_is_uniform_over_the_available_count():
    """Depth k uniform on 0..n_avail (each of 0..3 a quarter of 8000 rows with 3 of 4 features available),
    the k features uniform among the available ones (each acquired half the time), never the missing one; rows
    of a (tasks, rows, d) batch are drawn independently."""
    g = torch.Generator().manual_seed(0)
    r = torch.tensor([1.0, 0.0, 1.0, 1.0]).repeat(2, 4000, 1)  # (tasks, rows, d), as prequential_nll passes it
    m = method.acquisition_state(r, g).reshape(8000, 4)
    assert torch.all(m[:, 1] == 0)
    freq = torch.bincount(m.sum(1).long(), minlength=4).float() / 8000
    assert torch.allclose(freq, torch.full((4,), 0.25), atol=0.025)
    assert torch.allclose(m[:, [0, 2, 3]].mean(0), torch.full((3,), 0.5), atol=0.025)


def test_train_predictor_context_sizes_and_learning_rate_schedule(monkeypatch):
    """Context sizes uniform on 4..32 by default (both ends drawn in 150 steps); the step-s rate is lr x
    (s + 1) / w for s < w, then lr (steps - s) / (steps - w), with w = steps // 10 (2 of 21 steps)."""
    lrs, contexts = [], []

    class Recorder(torch.optim.SGD):
        def step(self, closure=None):
            lrs.append(self.param_groups[0]["lr"])
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "Adam", lambda params, lr: Recorder(params, lr=lr))
    monkeypatch.setattr(method, "prequential_nll",
                        lambda model, batch, n, g: contexts.append(n) or model.predictor[0].bias.sum() * 0.0)
    method.train_predictor(_tiny_l2m(0), lambda rng: None, steps=150, lr=1.0, seed=0)
    assert min(contexts) == 4 and max(contexts) == 32 and set(contexts) <= set(range(4, 33))
    lrs.clear()
    method.train_predictor(_tiny_l2m(0), lambda rng: None, steps=21, lr=2.0, seed=0, context_range=(3, 5))
    assert lrs == pytest.approx([1.0, 2.0] + [2.0 * (21 - s) / 19 for s in range(2, 21)])
    assert [method._schedule(s, 2, 1) for s in range(2)] == [1.0, 1.0]  # one decay step: full rate


def test_selector_loss_with_one_counted_row_is_that_rows_nll():
    """Rows with nothing left to acquire do not count: with one counted row the loss is its NLL after the
    pick (not half of it), with none it is 0."""
    g = torch.Generator().manual_seed(0)
    model = _tiny_l2m(d=3)
    context = method.context_tokens(torch.randn(1, 4, 3, generator=g), torch.ones(1, 4, 3), torch.randn(1, 4, generator=g))
    x, y = torch.randn(1, 3, 3, generator=g), torch.randn(1, 3, generator=g)
    r = torch.zeros(1, 3, 3)
    r[0, 2, 0] = 1.0  # only the last row has a feature to acquire: counted at depth 0, not at depth 1
    m_g = torch.Generator().manual_seed(5)
    losses = [float(method.selector_loss(model, context, x, y, r, 0.5, m_g).detach()) for _ in range(6)]
    assert 0.0 in losses and any(v != 0.0 for v in losses)  # depth 0 (counted alone) or 1 (nothing counts)
    wants = []
    h_g = torch.Generator().manual_seed(5)
    for _ in range(6):
        w_, _, _, c_ = _hand_selector_loss(model, context, x, y, r, 0.5, h_g)
        wants.append(float(w_.detach()) if c_.any() else 0.0)
    assert losses == pytest.approx(wants, abs=1e-6)


def test_train_selector_freezes_embedder_and_encoder_while_it_trains():
    """During policy training no gradient reaches the embedder or the encoder (frozen, requires_grad off at
    every step), and they are trainable again afterwards."""
    model = _tiny_l2m(3)
    flags = []
    method.train_selector(model, _draw, 2, 1e-2, 1e-3, 0.5, (3, 6), 0,
                          on_step=lambda k, m: flags.append([p.requires_grad for p in (*m.embed.parameters(),
                                                                                        *m.encoder.parameters())]))
    assert len(flags) == 2 and not any(any(f) for f in flags)
    assert all(p.grad is None for p in (*model.embed.parameters(), *model.encoder.parameters()))
    assert all(p.requires_grad for p in model.parameters())


def test_greedy_acquisition_random_picks_and_selector_inputs_by_hand():
    """select=None picks, step by step, the argmax of the generator's uniforms over the unacquired features
    (every feature once); the selector sees the features x themselves; NLLs come as (..., d + 1) for a
    (tasks, rows) batch."""
    x = torch.tensor([[[0.3, 2.0, -1.0, 0.7], [5.0, 1.0, 0.0, 2.0]]] * 3)  # (3 tasks, 2 rows, d = 4)
    y = torch.zeros(3, 2)

    def predict(xq, m):
        return torch.zeros(xq.shape[:-1]), 1 + m.sum(-1)

    nlls, picks = method.greedy_acquisition(predict, None, x, y, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    m = torch.zeros_like(x)
    for k in range(4):
        scores = torch.rand(m.shape, generator=g).masked_fill(m == 1, float("-inf"))
        want = scores.argmax(-1)
        assert torch.equal(picks[..., k], want)
        m = m + torch.nn.functional.one_hot(want, 4).float()
    assert torch.all(picks.sort(-1).values == torch.arange(4))
    assert nlls.shape == (3, 2, 5)
    assert torch.allclose(nlls[0, 0], torch.log(torch.arange(1.0, 6.0)) + 0.5 * np.log(2 * np.pi))
    _, by_value = method.greedy_acquisition(predict, lambda xq, mq: xq, x, y)
    assert by_value[0].tolist() == [[1, 3, 0, 2], [0, 3, 1, 2]]  # decreasing x


def test_straight_through_gumbel_noise_stays_finite_at_u_zero(monkeypatch):
    """The uniforms are clamped below at 1e-10: a draw of exactly 0 gives finite Gumbel noise (the same for
    every feature here), so the sample is the one-hot argmax of the logits with a finite gradient."""
    monkeypatch.setattr(torch, "rand", lambda shape, generator=None: torch.zeros(shape))
    logits = torch.tensor([[0.0, 2.0, 1.0]], requires_grad=True)
    s = method.straight_through_gumbel(logits, 0.5, torch.Generator())
    assert s.tolist() == [[0.0, 1.0, 0.0]]
    s[0, 1].backward()
    assert torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0
