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
    # the label does not depend on a non-informative feature: regress y on x for one task
    one = task.sample_tasks(np.random.default_rng(1), 1, 2000, kind="linear")
    coef = np.linalg.lstsq(one["x"][0], one["y"][0], rcond=None)[0]
    assert np.all(np.abs(coef[~one["informative"][0]]) < 0.02)


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
            curves += [{"seed": seed, "method": "l2m", "k": k, "nll": 1.0 - 0.1 * k + shift},
                       {"seed": seed, "method": "l2m_random", "k": k, "nll": 1.2 - 0.1 * k},
                       {"seed": seed, "method": "mlp_gdfs", "k": k, "nll": 1.1 - 0.1 * k},
                       {"seed": seed, "method": "mlp_random", "k": k, "nll": 9.0}]
    picks = pd.DataFrame({"seed": [0, 0, 0, 0, 1, 1, 0], "method": ["l2m"] * 6 + ["mlp_gdfs"],
                          "informative": [True, True, False, True, False, True, False]})
    return {"context": pd.DataFrame(context), "curves": pd.DataFrame(curves), "picks": picks}


def test_claim_values_hand_computed():
    values = experiment.claim_values(_hand_made_results(), SimpleNamespace(seeds=[0, 1]))
    expected = {
        0: {"p1_learns_in_context": 1.5 - 0.7, "h1_uq_vs_per_task": 1.1 - 0.7, "h2_acquisition_vs_gdfs": 0.1,
            "m1_policy_vs_random": 0.2, "m2_first_pick_informative": 0.75,
            "m3_gain_at_small_context": (1.6 - 1.5) - (0.8 - 0.5)},
        1: {"p1_learns_in_context": 1.6 - 0.9, "h1_uq_vs_per_task": 1.0 - 0.9, "h2_acquisition_vs_gdfs": 0.0,
            "m1_policy_vs_random": 0.1, "m2_first_pick_informative": 0.5,
            "m3_gain_at_small_context": (2.0 - 1.4) - (0.6 - 0.6)},
    }
    for seed in (0, 1):
        assert values[seed] == pytest.approx(expected[seed])
    declared = yaml.safe_load(open("notebooks/l2m/chapter.yml"))["claims"]
    assert set(values[0]) == {c["id"] for c in declared}


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
