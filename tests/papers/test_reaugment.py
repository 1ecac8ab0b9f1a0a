"""Unit tests of replib.papers.reaugment (model-zoo anchors, VMAE, REINFORCE stage, claim values)."""

import copy
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from replib.core import configure, load_chapter
from replib.models.mlp import MLP
from replib.papers.reaugment import baselines, exercises, experiment, method, task, theory

# ---- the task ---------------------------------------------------------------------------------


def test_series_lengths_and_first_values():
    assert len(task.load_series("elnino")) == 732 and task.load_series("elnino")[:2].tolist() == [23.11, 24.2]
    assert len(task.load_series("sunspots")) == 309 and task.load_series("sunspots")[:3].tolist() == [5, 11, 16]
    co2 = task.load_series("co2")
    assert len(co2) == 525 and co2[0] == pytest.approx(317.2 - 316.1)
    with pytest.raises(ValueError, match="valid"):
        task.load_series("airline")


def test_windows_standardise_on_training_period_and_never_leak():
    series = np.arange(100.0)
    win = task.make_windows(series, lookback=4, horizon=2, train_frac=0.7, n_shot=10)
    z = (series - series[:70].mean()) / series[:70].std()
    assert win["train"].shape == (10, 6) and np.allclose(win["train"][3], z[3:9])
    assert win["n_train_total"] == 65 and win["test"].shape == (25, 6)
    assert np.allclose(win["test"][0], z[70:76])  # test windows start after the training period
    assert win["extra"].shape == (10, 6) and np.allclose(win["extra"][0], z[10:16])  # the next n_shot windows
    # validation: the training windows that share no value with D (start >= 10 + 6 - 1), the last n_val of them
    assert win["val"].shape == (50, 6) and np.allclose(win["val"][0], z[15:21]) and np.allclose(win["val"][-1], z[64:70])
    assert task.make_windows(series, 4, 2, 0.7, 10, n_val=5)["val"].shape == (5, 6)
    x, y = task.split_window(win["train"], 4)
    assert x.shape == (10, 4) and y.shape == (10, 2)
    with pytest.raises(ValueError, match="fewer than n_shot"):
        task.make_windows(series, lookback=4, horizon=2, n_shot=70)


def test_forecaster_bank_matches_the_shared_mlp_and_trains_members_independently():
    bank = task.ForecasterBank([3, 7], lookback=5, horizon=2, hidden=8)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(bank(x)[0], MLP([5, 8, 2], seed=3)(x), atol=1e-6)
        assert bank(x).shape == (2, 4, 2)
    w = np.random.default_rng(0).standard_normal((6, 7))
    alone = task.ForecasterBank([7], 5, 2, 8)
    task.fit_forecasters(alone, w[:4], epochs=15)
    both = task.ForecasterBank([3, 7], 5, 2, 8)
    weights = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], dtype=float)  # member 1 sees the first 4
    task.fit_forecasters(both, w, weights, epochs=15)
    assert torch.allclose(both.w1[1], alone.w1[0], atol=1e-5) and torch.allclose(both.b2[1], alone.b2[0], atol=1e-5)
    assert task.forecast_mse(both, w).shape == (2,)


# ---- stage 0 ------------------------------------------------------------------------------------


def test_kfold_zoo_variance_anchors_and_fold_gap_by_hand():
    folds = method.kfold_assignment(10, 3, np.random.default_rng(1))
    assert sorted(np.bincount(folds).tolist()) == [3, 3, 4]
    errors = torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 0.0]])
    assert torch.allclose(method.zoo_variance(errors), torch.tensor([1.0, 0.0, 2.25]))
    assert method.select_anchors([0.5, 3.0, 1.0, 2.0], 0.5).tolist() == [1, 3]
    assert method.select_anchors([0.5, 3.0, 1.0], 0.1).tolist() == [1]  # at least one
    e = np.array([[1.0, 4.0, 2.0], [3.0, 6.0, 2.0], [5.0, 8.0, 8.0]])
    oof, inf = method.fold_gap(e, np.array([2, 0, 1]))
    assert oof.tolist() == [5.0, 4.0, 2.0] and inf.tolist() == [2.0, 7.0, 5.0]


def test_zoo_errors_use_forward_passes_of_any_callable():
    def zoo(x):
        return torch.stack([x[:, :1].repeat(1, 2), torch.zeros(len(x), 2)])

    w = np.array([[1.0, 1.0, 3.0], [2.0, 0.0, 0.0]])
    e = method.zoo_errors(zoo, w, lookback=1)
    assert torch.allclose(e, torch.tensor([[2.0, 4.0], [5.0, 0.0]]))


# ---- stage A ------------------------------------------------------------------------------------


def test_contiguous_mask_and_gaussian_kl():
    m = method.contiguous_mask(300, 20, 0.25, torch.Generator().manual_seed(0))
    assert torch.all(m.sum(1) == 5) and torch.all((m.diff(dim=1) != 0).sum(1) <= 2)
    assert m[:, 0].any() and m[:, -1].any()
    z = torch.zeros(1, 2)
    assert float(method.gaussian_kl(z, z, z, z)) == 0.0
    # one dimension: q = N(1, e^0), p = N(0, e^1): 0.5 (1 - 0 + (1 + 1) / e - 1) = 1 / e
    kl = method.gaussian_kl(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[0.0]]), torch.tensor([[1.0]]))
    assert float(kl) == pytest.approx(1 / np.e, rel=1e-6)


def test_vmae_trains_generates_deterministically_and_clamps_the_prior():
    w = np.sin(np.linspace(0, 20, 30 * 12)).reshape(30, 12)
    model = method.VMAE(12, latent=3, hidden=16, seed=0)
    hist = method.train_vmae(model, w, steps=150, lr=5e-3, seed=1)
    assert hist[-1]["reconstruction"] < 0.3 * hist[0]["reconstruction"]
    a = method.generate(model, w[:3], 2, seed=4)
    assert a.shape == (6, 12) and np.array_equal(a, method.generate(model, w[:3], 2, seed=4))
    big = torch.full((2, 12), 1e3)
    _, logvar = model.prior_params(big, torch.zeros(2, 12))
    assert float(logvar.detach().min()) >= -6.0 and float(logvar.detach().max()) <= 2.0


# ---- stage B ------------------------------------------------------------------------------------


def _constant_zoo(x):
    return torch.stack([torch.zeros(len(x), 2), torch.ones(len(x), 2)])


def test_zoo_reward_by_hand():
    anchor = torch.tensor([[5.0, 0.0, 0.0]])
    moved = torch.tensor([[5.0, 1.0, 1.0]])  # member errors 1 and 0 -> variance 0.25; distance 2/3
    r = method.zoo_reward(_constant_zoo, moved, anchor, lookback=1, lam=0.3, d0=0.5, eps=1e-4)
    assert float(r["variance"]) == pytest.approx(0.25)
    assert float(r["distance"]) == pytest.approx(2 / 3)
    assert float(r["reward"]) == pytest.approx(np.log(0.25 + 1e-4) - 0.3 * (2 / 3) / 0.5)
    v1 = method.zoo_reward(_constant_zoo, moved, anchor, lookback=1, lam=0.3, d0=0.5, eps=1e-4, direction=-1.0)
    assert float(v1["reward"]) == pytest.approx(-np.log(0.25 + 1e-4) - 0.3 * (2 / 3) / 0.5)  # the first version's sign


def test_rl_finetune_moves_only_the_prior_and_is_deterministic():
    w = np.cos(np.linspace(0, 15, 20 * 6)).reshape(20, 6)
    model = method.VMAE(6, latent=2, hidden=8, seed=0)
    method.train_vmae(model, w, steps=30, seed=1)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    other = method.VMAE(6, latent=2, hidden=8, seed=0)
    other.load_state_dict(state)
    zoo = task.ForecasterBank([0, 1, 2], lookback=4, horizon=2, hidden=8)
    h1, d0 = method.rl_finetune(model, zoo, w[:5], 4, iterations=5, samples_per_anchor=3, seed=2)
    h2, _ = method.rl_finetune(other, zoo, w[:5], 4, iterations=5, samples_per_anchor=3, seed=2)
    assert h1 == h2 and d0 > 0 and len(h1) == 5
    after = model.state_dict()
    assert all(torch.equal(after[k], state[k]) for k in state if not k.startswith("prior."))
    assert any(not torch.equal(after[k], state[k]) for k in state if k.startswith("prior."))
    assert all(p.grad is None for p in zoo.parameters())


# ---- baselines and stage C ----------------------------------------------------------------------


def test_baselines_by_hand():
    x = np.array([[1.0, 2.0, 3.0, 6.0]])
    assert baselines.lookback_mean_forecast(x, 3).tolist() == [[3.0, 3.0, 3.0]]
    assert baselines.seasonal_naive_forecast(x, 5, 2).tolist() == [[3.0, 6.0, 3.0, 6.0, 3.0]]
    w = np.zeros((2000, 10))
    assert abs(baselines.jitter(w, 0.1, np.random.default_rng(0)).std() - 0.1) < 0.002


def test_augmented_sets_pad_and_weight():
    train = np.ones((3, 4))
    additions = [(train[:0], 1.0), (np.full((2, 4), 2.0), 0.5), (np.full((5, 4), 3.0), 0.25)]
    sets, weights = experiment.augmented_sets(train, additions)
    assert sets.shape == (3, 8, 4) and weights.sum(1).tolist() == [3, 4, 3 + 1.25]
    assert np.all(sets[0, 3:] == 0) and np.all(sets[1, 3:5] == 2.0) and np.all(sets[:, :3] == 1.0)
    assert weights[1].tolist() == [1, 1, 1, 0.5, 0.5, 0, 0, 0] and np.all(weights[2, 3:] == 0.25)


def test_first_per_anchor_nests_the_doses_and_chosen_points_follow_the_protocol():
    samples = np.arange(3 * 4 * 2, dtype=float).reshape(12, 2)  # 3 anchors x 4 windows, anchor by anchor
    one = experiment._first_per_anchor(samples, 4, 1)
    two = experiment._first_per_anchor(samples, 4, 2)
    assert one.tolist() == [samples[0].tolist(), samples[4].tolist(), samples[8].tolist()]
    assert two.shape == (6, 2) and two[1].tolist() == samples[1].tolist() and two[2].tolist() == samples[4].tolist()
    cfg = configure(experiment.EXPERIMENT_PROFILES, "book", experiment.EXPERIMENT_BOUNDS)
    assert experiment.chosen_point(cfg, "random_anchors") == experiment.chosen_point(cfg, "reaugment")
    assert experiment.chosen_point(cfg, "reward_v1") == experiment.chosen_point(cfg, "reaugment")
    assert experiment.chosen_point(cfg, "none") == experiment.chosen_point(cfg, "real") == (0, 1.0)
    for arm in experiment.TUNED_ARMS:  # every chosen point lies on the declared grid
        k, w = experiment.chosen_point(cfg, arm)
        assert k in cfg.dose_grid and w in cfg.weight_grid
    tuning = load_chapter("reaugment")["tuning"]
    assert tuning["grid"] == {"per_anchor": cfg.dose_grid, "synthetic_weight": cfg.weight_grid}


# ---- theory ---------------------------------------------------------------------------------------


def test_theory_helpers():
    x = np.linspace(-1, 1, 20)
    zoo = theory.polynomial_zoo(x, x**2, k=4, degree=2, ridge=1e-8, rng=np.random.default_rng(0))
    assert zoo["errors"].shape == (4, 20) and zoo["errors"].max() < 1e-10  # exact fit of a quadratic
    est = theory.gradient_estimates(0.0, 1.0, lambda z: z, n=8, batches=4000, rng=np.random.default_rng(1),
                                    reward_grad=np.ones_like)
    assert abs(est["score"].mean() - 1.0) < 0.05 and np.all(est["reparam"] == 1.0)
    assert abs(est["baseline"].mean() - 7 / 8) < 0.05  # the self-inclusive batch mean: (n - 1) / n
    anchor = np.zeros(2)
    assert theory.shaped_reward(np.array([[1.0, 0.0]]), anchor, "unbounded", 0.3)[0] == pytest.approx(0.51 - 0.3)
    assert theory.shaped_reward(np.array([[1.0, 0.0]]), anchor, "log", 0.3, d0=2.0, eps=0.0)[0] == pytest.approx(
        np.log(0.51) - 0.15)
    with pytest.raises(ValueError):
        theory.shaped_reward(anchor, anchor, "square", 0.3)


# ---- exercises ------------------------------------------------------------------------------------


def test_graders_accept_the_reference_and_reject_a_wrong_answer():
    exercises.check_fold_gap(method.fold_gap)
    exercises.check_gaussian_kl(method.gaussian_kl)
    with pytest.raises(AssertionError, match="case"):
        exercises.check_fold_gap(lambda e, f: (np.asarray(e).max(0), np.asarray(e).mean(0)))
    with pytest.raises(AssertionError, match="case"):
        exercises.check_gaussian_kl(lambda mq, lq, mp, lp: 0.5 * ((mq - mp) ** 2).sum(-1))


# ---- profiles and claim values -------------------------------------------------------------------


def test_profiles_share_keys_and_bounds_refuse_bad_values():
    keys = {k: set(v) for k, v in experiment.EXPERIMENT_PROFILES.items()}
    assert keys["smoke"] == keys["book"] == keys["paper"]
    with pytest.raises(ValueError, match="allowed"):
        configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS, epochs=-5)
    with pytest.raises(ValueError, match="allowed"):
        configure(experiment.EXPERIMENT_PROFILES, "smoke", experiment.EXPERIMENT_BOUNDS, datasets=["airline"])


def _hand_results():
    """Two seeds with different numbers; every quantity a claim reads, chosen for hand arithmetic.
    Methods at their chosen points; ReAugment also at one more grid point (4, 1.0), 0.9 x none."""
    mse, ref, gen, win = [], [], [], []
    base = {"none": 1.0, "real": 0.7, "jitter": 0.9, "vmae": 1.25, "reaugment": 1.2, "random_anchors": 0.96,
            "reward_v1": 1.08}
    for seed, scale in [(0, 1.0), (1, 2.0)]:
        for d, name in enumerate(("elnino", "sunspots", "co2")):
            rows = [(m, 1, 0.25, True, v) for m, v in base.items()] + [("reaugment", 4, 1.0, False, 0.9)]
            for method_name, k, w, chosen, value in rows:
                v = value * (1 + 0.5 * d) * scale
                if seed == 1 and name == "co2" and method_name == "reaugment" and chosen:
                    v = 0.8 * 2.0 * 2.0  # reaugment below none on this one
                for init, delta in [(0, -0.1), (1, 0.1)]:  # mean over inits = v
                    mse.append({"seed": seed, "dataset": name, "method": method_name, "per_anchor": k, "weight": w,
                                "chosen": chosen, "init": init, "mse": v + delta, "val_mse": v})
            ref.append({"seed": seed, "dataset": name, "lookback_mean": 2.0 * (1 + 0.5 * d) * scale,
                        "reconstruction": 0.01 * (d + 1) * scale})
            for method_name, var, dist in [("vmae", 1.0, 0.01), ("reaugment", 1.5 + d + seed, 0.02 * (d + 1)),
                                           ("random_anchors", 0.5, 0.03), ("reward_v1", 0.7, 0.02)]:
                gen.append({"seed": seed, "dataset": name, "method": method_name, "zoo_variance": var,
                            "distance": dist})
            # anchors: out/in = (12 + 4 seed) / 4; others: 2 / 1 (d = 0) or 3 / 1 (d > 0)
            for i, (anchor, oof, inf) in enumerate([(True, 4.0 + 2 * seed, 1.0), (True, 8.0 + 2 * seed, 3.0),
                                                    (False, 2.0 if d == 0 else 3.0, 1.0), (False, 2.0 if d == 0 else 3.0, 1.0)]):
                win.append({"seed": seed, "dataset": name, "index": i, "anchor": anchor, "out_of_fold": oof,
                            "in_fold": inf})
    return {"mse": pd.DataFrame(mse), "reference": pd.DataFrame(ref), "generated": pd.DataFrame(gen),
            "windows": pd.DataFrame(win)}


def test_claim_values_by_hand_and_ids_match_chapter_yml():
    values = experiment.claim_values(_hand_results(), SimpleNamespace(seeds=[0, 1]))
    ids = {c["id"] for c in load_chapter("reaugment")["claims"]}
    assert set(values) == {0, 1} and all(set(v) == ids for v in values.values())
    s0, s1 = values[0], values[1]
    # p1: none / look-back mean = 1 / 2 on both data sets, both seeds
    assert s0["p1_forecaster_learns"] == pytest.approx(0.5) and s1["p1_forecaster_learns"] == pytest.approx(0.5)
    # p2: max reconstruction over elnino (0.01 scale) and co2 (0.03 scale)
    assert s0["p2_generator_reconstructs"] == pytest.approx(0.03) and s1["p2_generator_reconstructs"] == pytest.approx(0.06)
    # p3: real / none; p4: min over elnino, co2 of all windows' mean out / mean in:
    # elnino (4 + 2s + 8 + 2s + 4) / 6, co2 (4 + 2s + 8 + 2s + 6) / 6
    assert s0["p3_real_data_headroom"] == pytest.approx(0.7)
    assert s0["p4_forecaster_overfits"] == pytest.approx(16 / 6) and s1["p4_forecaster_overfits"] == pytest.approx(20 / 6)
    # c1: anchors' out/in = (12 + 4 seed) / 4; others 2 (elnino) or 3 (co2); min over the two
    assert s0["c1_variance_flags_overfitting"] == pytest.approx(3.0 / 3.0)
    assert s1["c1_variance_flags_overfitting"] == pytest.approx(4.0 / 3.0)
    # c2a: mean over elnino (d = 0), co2 (d = 2) of (1.5 + d + seed) / 1
    assert s0["c2a_rl_raises_zoo_variance"] == pytest.approx(2.5) and s1["c2a_rl_raises_zoo_variance"] == pytest.approx(3.5)
    assert s0["c2b_rl_stays_near_anchors"] == pytest.approx(0.06)
    # h1: seed 0 1.2 on both; seed 1 mean(1.2, 0.8)
    assert s0["h1_vs_no_augmentation"] == pytest.approx(1.2) and s1["h1_vs_no_augmentation"] == pytest.approx(1.0)
    # h2: max over the two of reaugment / vmae: seed 0 1.2 / 1.25; seed 1 max(0.96, 0.8 / 1.25)
    assert s0["h2_vs_generator_without_rl"] == pytest.approx(0.96) and s1["h2_vs_generator_without_rl"] == pytest.approx(0.96)
    # c3: reaugment / jitter
    assert s0["c3_vs_jitter"] == pytest.approx(1.2 / 0.9) and s1["c3_vs_jitter"] == pytest.approx((1.2 / 0.9 + 0.8 / 0.9) / 2)
    # m1: random / reaugment; m2: reward_v1 / reaugment
    assert s0["m1_random_anchors"] == pytest.approx(0.8) and s1["m1_random_anchors"] == pytest.approx((0.8 + 1.2) / 2)
    assert s0["m2_v1_reward_direction"] == pytest.approx(0.9)
    # m3: the grid point best in hindsight is (4, 1.0) at 0.9 on every seed and data set
    assert s0["m3_best_grid_point_in_hindsight"] == pytest.approx(0.9) and s1["m3_best_grid_point_in_hindsight"] == pytest.approx(0.9)
    # m4, m5: sunspots
    assert s0["m4_sunspots_headroom"] == pytest.approx(0.7) and s1["m5_sunspots"] == pytest.approx(1.2)


def test_claim_values_without_a_data_set_give_nan_only_where_it_is_read():
    results = _hand_results()
    for key in ("mse", "reference", "generated", "windows"):
        results[key] = results[key][results[key].dataset != "sunspots"]
    values = experiment.claim_values(results, SimpleNamespace(seeds=[0]))[0]
    assert np.isnan(values["m4_sunspots_headroom"]) and np.isnan(values["m5_sunspots"])
    assert not np.isnan(values["h1_vs_no_augmentation"])


# ---- update steps: direction, parts, second step ---------------------------------------------------


@pytest.fixture
def one_torch_thread():
    """The update-step tests below run on one torch thread (tiny tensors; fast and deterministic)."""
    from replib.core.runtime import compute_threads

    with compute_threads(1):
        yield


def _hand_gaussian_logprob(z, mu, logvar):
    return torch.distributions.Normal(mu, (0.5 * logvar).exp()).log_prob(z).sum(-1)


def _vmae_terms_by_hand(model, w, mask, noise):
    """The VMAE objective's parts written out from the three MLPs: the reconstruction (per-step MSE)
    and KL(q || p) of diagonal Gaussians (torch.distributions), per window."""
    mu_q, logvar_q = model.posterior(w).chunk(2, -1)
    mu_p, logvar_p = model.prior(torch.cat([w * (1 - mask), mask], -1)).chunk(2, -1)
    logvar_p = logvar_p.clamp(-6.0, 2.0)
    z = mu_q + (0.5 * logvar_q).exp() * noise
    w_hat = model.decoder(torch.cat([z, w * (1 - mask), mask], -1))
    recon = ((w_hat - w) ** 2).mean(-1)
    kl = torch.distributions.kl_divergence(torch.distributions.Normal(mu_q, (0.5 * logvar_q).exp()),
                                           torch.distributions.Normal(mu_p, (0.5 * logvar_p).exp())).sum(-1)
    return recon, kl


def test_vmae_loss_is_reconstruction_plus_beta_kl_over_T_and_trains_the_prior(one_torch_thread):
    """vmae_loss = mean(recon + beta KL / T), each part recomputed by hand with the same noise; the KL
    term is what reaches the prior (its gradient there equals that of beta mean KL / T, nonzero), and
    changing beta changes the loss by the KL part."""
    model = method.VMAE(6, latent=2, hidden=8, seed=3)
    w = torch.as_tensor(np.sin(np.linspace(0, 5, 4 * 6)).reshape(4, 6), dtype=torch.float32)
    mask = method.contiguous_mask(4, 6, 0.34, torch.Generator().manual_seed(0))
    torch.manual_seed(11)
    loss, terms = method.vmae_loss(model, w, mask, beta=0.7)
    torch.manual_seed(11)
    recon, kl = _vmae_terms_by_hand(model, w, mask, torch.randn(4, 2))
    assert kl.min().item() > 0
    assert loss.item() == pytest.approx((recon + 0.7 * kl / 6).mean().item(), rel=1e-5)
    assert terms["reconstruction"] == pytest.approx(recon.mean().item(), rel=1e-5)
    assert terms["kl"] == pytest.approx(kl.mean().item(), rel=1e-5)
    prior = list(model.prior.parameters())
    got = torch.autograd.grad(loss, prior)
    want = torch.autograd.grad((0.7 * kl / 6).mean(), prior)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-8) for a, b in zip(got, want))
    assert sum(float(g.abs().sum()) for g in got) > 1e-4
    torch.manual_seed(11)
    loss0, _ = method.vmae_loss(model, w, mask, beta=0.0)
    assert loss.item() - loss0.item() == pytest.approx(0.7 * kl.mean().item() / 6, rel=1e-4)


def test_train_vmae_first_step_is_adam_on_the_hand_written_objective(one_torch_thread):
    """One train_vmae step (full batch, Adam): the recorded loss is the hand-written objective with
    the step's mask and noise, every parameter moves by -lr g / (|g| + eps) (against the sign of the
    hand gradient), and the prior moves too (it is trained through the KL term)."""
    w = np.cos(np.linspace(0, 7, 5 * 6)).reshape(5, 6)
    model = method.VMAE(6, latent=2, hidden=8, seed=4)
    wt = torch.as_tensor(w, dtype=torch.float32)
    mask = method.contiguous_mask(5, 6, 0.25, torch.Generator().manual_seed(7))
    torch.manual_seed(7)
    recon, kl = _vmae_terms_by_hand(model, wt, mask, torch.randn(5, 2))
    loss = (recon + 0.3 * kl / 6).mean()
    params = list(model.parameters())
    grads = torch.autograd.grad(loss, params)
    before = [p.detach().clone() for p in params]
    lr = 1e-2
    hist = method.train_vmae(model, w, steps=1, lr=lr, mask_ratio=0.25, beta=0.3, seed=7)
    assert hist[0]["loss"] == pytest.approx(loss.item(), rel=1e-5)
    for b, p, g in zip(before, params, grads):
        step = (p.detach() - b) / -lr
        big = g.abs() > 1e-5
        assert torch.allclose(step[big], torch.sign(g[big]), atol=1e-2)
    names = [n for n, _ in model.named_parameters()]
    prior_moved = [not torch.equal(b, p.detach()) for n, b, p in zip(names, before, params) if n.startswith("prior.")]
    assert len(prior_moved) == 4 and all(prior_moved)


def _zoo_for(lookback, horizon):
    return task.ForecasterBank([0, 1, 2], lookback=lookback, horizon=horizon, hidden=8)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_reinforce_step_is_one_sgd_step_on_the_hand_written_reinforce_loss(one_torch_thread, sign):
    """reinforce_step with plain SGD on the prior: -lr x grad of -mean(A log N(z; mu, sigma)) with z
    drawn (then fixed) from the prior, the reward s log(Var_k e_k + eps) - lam d / d0 (s = +1, the
    later versions; s = -1, the first version) and A the batch's standardised reward, all written out
    by hand; a larger step raises the log-probability of the best-rewarded sample."""
    w = torch.as_tensor(np.sin(np.linspace(0, 9, 8 * 6)).reshape(8, 6) * 1.5, dtype=torch.float32)
    model = method.VMAE(6, latent=2, hidden=8, seed=5)
    zoo = _zoo_for(4, 2)
    lam, d0, ratio, lr = 0.3, 0.5, 0.34, 0.05
    gen = torch.Generator().manual_seed(3)
    mask = method.contiguous_mask(8, 6, ratio, gen)
    mu, logvar = model.prior(torch.cat([w * (1 - mask), mask], -1)).chunk(2, -1)
    logvar = logvar.clamp(-6.0, 2.0)
    z = (mu + (0.5 * logvar).exp() * torch.randn(mu.shape, generator=gen)).detach()
    with torch.no_grad():
        generated = model.decoder(torch.cat([z, w * (1 - mask), mask], -1))
        errors = ((zoo(generated[:, :4]) - generated[None, :, 4:]) ** 2).mean(-1).double()
        r = sign * torch.log(errors.var(0, unbiased=False) + 1e-4) - lam * ((generated - w) ** 2).mean(-1).double() / d0
        adv = ((r - r.mean()) / (r.std(unbiased=False) + 1e-6)).float()
    loss = -(adv * _hand_gaussian_logprob(z, mu, logvar)).mean()
    prior = list(model.prior.parameters())
    grads = torch.autograd.grad(loss, prior)
    before = [p.detach().clone() for p in prior]
    opt = torch.optim.SGD(prior, lr=lr)
    stats = method.reinforce_step(model, opt, zoo, w, 4, lam, d0, ratio, torch.Generator().manual_seed(3), sign)
    assert stats["reward"] == pytest.approx(float(r.mean()), rel=1e-5)
    for b, p, g in zip(before, prior, grads):
        assert torch.allclose(p.detach() - b, -lr * g, rtol=1e-4, atol=1e-8)
    # the step descends the REINFORCE loss (fixed z and advantages)
    with torch.no_grad():
        mu1, logvar1 = model.prior_params(w, mask)
        assert -(adv * _hand_gaussian_logprob(z, mu1, logvar1)).mean() < loss.detach()
    if sign < 0:
        return
    # a bigger step: the best sample's log-probability under the prior rises, the worst one's falls
    for p, b, g in zip(prior, before, grads):
        with torch.no_grad():
            p.copy_(b - 0.5 * g)
    with torch.no_grad():
        mu2, logvar2 = model.prior_params(w, mask)
        new = _hand_gaussian_logprob(z, mu2, logvar2)
        old = _hand_gaussian_logprob(z, mu.detach(), logvar.detach())
    best, worst = int(r.argmax()), int(r.argmin())
    assert new[best] > old[best] and new[worst] < old[worst]


def test_rl_finetune_second_iteration_draws_a_fresh_mask_and_keeps_adam_state(one_torch_thread):
    """rl_finetune = d0 from one pre-RL batch, then REINFORCE steps that share one generator (the
    second iteration draws new masks and noise) and one Adam optimiser over the prior: replayed by
    hand with reinforce_step, the two-iteration run ends at the same parameters."""
    w = np.cos(np.linspace(0, 11, 3 * 6)).reshape(3, 6)
    zoo = _zoo_for(4, 2)
    model = method.VMAE(6, latent=2, hidden=8, seed=6)
    replay = copy.deepcopy(model)
    hist, d0 = method.rl_finetune(model, zoo, w, 4, iterations=2, lr=1e-2, samples_per_anchor=2, seed=9)
    anchors = torch.as_tensor(np.repeat(w, 2, axis=0), dtype=torch.float32)
    gen = torch.Generator().manual_seed(9)
    with torch.no_grad():
        m0 = method.contiguous_mask(6, 6, 0.25, gen)
        mu, logvar = replay.prior_params(anchors, m0)
        z = mu + (0.5 * logvar).exp() * torch.randn(mu.shape, generator=gen)
        want_d0 = float(((replay.decode(z, anchors, m0) - anchors) ** 2).mean())
    assert d0 == pytest.approx(want_d0, rel=1e-6)
    opt = torch.optim.Adam(replay.prior.parameters(), lr=1e-2)
    state = gen.get_state()
    first = method.reinforce_step(replay, opt, zoo, anchors, 4, 0.3, d0, 0.25, gen)
    assert not torch.equal(gen.get_state(), state)
    second = method.reinforce_step(replay, opt, zoo, anchors, 4, 0.3, d0, 0.25, gen)
    assert hist == [first, second] and first != second
    for a, b in zip(model.parameters(), replay.parameters()):
        assert torch.allclose(a, b, atol=1e-7)


def test_fit_forecasters_first_step_is_adam_on_the_weighted_member_losses(one_torch_thread):
    """fit_forecasters, one epoch: the recorded loss is the mean over members of
    sum_n w_mn ||f_m(x_n) - y_n||^2 / (H sum_n w_mn) (hand-written, uneven weights), and Adam's first
    step moves every weight against the sign of that loss's gradient."""
    w = np.random.default_rng(4).standard_normal((5, 6))
    weights = np.array([[1.0, 2.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 3.0, 1.0]])
    bank = task.ForecasterBank([1, 2], lookback=4, horizon=2, hidden=8)
    x, y = (torch.as_tensor(a, dtype=torch.float32) for a in (w[:, :4], w[:, 4:]))
    wt = torch.as_tensor(weights, dtype=torch.float32)
    per = ((bank(x) - y[None]) ** 2).mean(-1)
    member = (wt * per).sum(1) / wt.sum(1)
    params = list(bank.parameters())
    grads = torch.autograd.grad(member.sum(), params)
    before = [p.detach().clone() for p in params]
    lr = 1e-2
    losses = task.fit_forecasters(bank, w, weights, epochs=1, lr=lr)
    assert losses[0] == pytest.approx(member.mean().item(), rel=1e-6)
    for b, p, g in zip(before, params, grads):
        step = (p.detach() - b) / -lr
        big = g.abs() > 1e-5
        assert torch.allclose(step[big], torch.sign(g[big]), atol=1e-2)
        assert bool((step[~big].abs() <= 1 + 1e-3).all())


# ---- issue 44: what the mutation run found untested ------------------------------------------------


def test_select_anchors_default_half_ties_by_window_order_and_unsigned_variances():
    """A = the top half by zoo variance by default (4 windows -> 2); tied variances keep window order
    (a stable sort: 200 windows, every third tied at the top); integer (unsigned) variances rank as numbers."""
    assert method.select_anchors([0.5, 3.0, 1.0, 2.0]).tolist() == [1, 3]
    v = np.zeros(200)
    v[::3] = 1.0
    assert method.select_anchors(v, 0.2).tolist() == list(range(0, 120, 3))
    assert method.select_anchors(np.array([0, 3, 1, 2], dtype=np.uint8), 0.5).tolist() == [1, 3]


def test_fold_gap_is_double_precision_for_float32_errors():
    """The in-fold mean of float32 errors equals the float64 mean of those same entries (by hand)."""
    e32 = np.array([[0.1, 0.7, 0.3], [0.2, 0.9, 0.6], [0.4, 0.8, 0.5]], dtype=np.float32)
    oof, inf = method.fold_gap(e32, np.array([2, 0, 1]))
    e = [[float(x) for x in row] for row in e32]
    assert oof.tolist() == [e[2][0], e[0][1], e[1][2]]
    assert inf.tolist() == [(e[0][0] + e[1][0]) / 2, (e[1][1] + e[2][1]) / 2, (e[0][2] + e[2][2]) / 2]


def test_vmae_networks_are_the_seeded_mlps_of_the_stated_sizes():
    """VMAE(T) by default: latent d = 8, hidden h = 64; posterior MLP T-h-2d (seed s), prior MLP 2T-h-2d
    (seed s + 1), decoder MLP (d + 2T)-h-h-T (seed s + 2), weight for weight."""
    for model, (T, d, h, s) in ((method.VMAE(5), (5, 8, 64, 0)), (method.VMAE(4, latent=3, hidden=7, seed=4), (4, 3, 7, 4))):
        assert (model.length, model.latent) == (T, d)
        want = {"posterior": MLP([T, h, 2 * d], seed=s), "prior": MLP([2 * T, h, 2 * d], seed=s + 1),
                "decoder": MLP([d + 2 * T, h, h, T], seed=s + 2)}
        for name, mlp in want.items():
            got = getattr(model, name).state_dict()
            assert set(got) == set(mlp.state_dict())
            assert all(torch.equal(got[k], v) for k, v in mlp.state_dict().items()), name


def test_vmae_heads_split_clamp_and_decode_by_hand():
    """posterior_params = (first d, last d) outputs of the posterior MLP on w; prior_params the same for the
    prior MLP on [w (1 - m), m] with the log-variance clamped to exactly [-6, 2]; decode = decoder([z, w (1 - m), m])."""
    model = method.VMAE(4, latent=3, hidden=8, seed=1)
    with torch.no_grad():
        model.prior.layers[-1].bias.copy_(torch.tensor([0.0, 0.0, 0.0, 40.0, -40.0, 0.0]))
    w = torch.tensor([[0.5, -1.0, 2.0, 0.3], [1.5, 0.2, -0.7, 1.1]])
    m = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    z = torch.tensor([[0.1, -0.2, 0.3], [1.0, 0.0, -1.0]])
    with torch.no_grad():
        post = model.posterior(w)
        mu_q, lv_q = model.posterior_params(w)
        assert torch.equal(mu_q, post[:, :3]) and torch.equal(lv_q, post[:, 3:])
        raw = model.prior(torch.cat([w * (1 - m), m], -1))
        mu_p, lv_p = model.prior_params(w, m)
        assert torch.equal(mu_p, raw[:, :3])
        assert (lv_p[:, 0] == 2.0).all() and (lv_p[:, 1] == -6.0).all() and torch.equal(lv_p[:, 2], raw[:, 5])
        assert -6.0 < float(raw[:, 5].min()) and float(raw[:, 5].max()) < 2.0  # the unclamped one is inside
        visible = torch.tensor([[0.5, 0.0, 0.0, 0.3], [0.0, 0.2, -0.7, 1.1]])
        assert torch.equal(model.decode(z, w, m), model.decoder(torch.cat([z, visible, m], -1)))


def test_gaussian_kl_sums_over_the_last_axis_only():
    """KL of diagonal Gaussians on (2, 2, 3) inputs: each entry the sum over the last axis of three 1-D KLs,
    each by hand 0.5 (lv_p - lv_q + (e^lv_q + (mu_q - mu_p)^2) / e^lv_p - 1)."""
    g = torch.Generator().manual_seed(0)
    mu_q, lv_q, mu_p, lv_p = (torch.randn(2, 2, 3, generator=g, dtype=torch.float64) for _ in range(4))
    want = torch.zeros(2, 2, dtype=torch.float64)
    for i in range(2):
        for j in range(2):
            want[i, j] = sum(0.5 * (b - a + (np.exp(a) + (m - n) ** 2) / np.exp(b) - 1)
                             for m, a, n, b in zip(*(t[i, j].tolist() for t in (mu_q, lv_q, mu_p, lv_p))))
    kl = method.gaussian_kl(mu_q, lv_q, mu_p, lv_p)
    assert kl.shape == (2, 2) and torch.allclose(kl, want, atol=1e-12)


def test_contiguous_mask_spans_at_least_one_step_and_starts_anywhere_it_fits():
    """span = max(1, round(ratio T)): 1 step at ratio 0.01 (T = 6) and at ratio 0; round(0.5 x 6) = 3; the
    start is uniform over the T - span + 1 places (all of them seen in 600 draws, the span never cut)."""
    g = torch.Generator().manual_seed(1)
    for ratio, span in ((0.01, 1), (0.0, 1), (0.5, 3)):
        m = method.contiguous_mask(600, 6, ratio, g)
        assert m.shape == (600, 6) and torch.all(m.sum(1) == span)
        starts = m.argmax(1)
        assert sorted(set(starts.tolist())) == list(range(6 - span + 1))


def test_generate_is_the_decoded_prior_sample_anchor_by_anchor(one_torch_thread):
    """generate = decoder(z, w_vis, m) with, from one generator seeded with ``seed``, first a contiguous mask
    per window (ratio 0.25 by default, seed 0 by default) then z = mu_p + e^(lv_p / 2) eps; the anchors are
    repeated n_per_anchor times in a row (anchor by anchor)."""
    model = method.VMAE(8, latent=2, hidden=8, seed=2)
    anchors = np.sin(np.linspace(0, 4, 3 * 8)).reshape(3, 8)
    w = torch.as_tensor(np.repeat(anchors, 2, axis=0), dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    mask = method.contiguous_mask(6, 8, 0.25, g)
    with torch.no_grad():
        mu, lv = model.prior_params(w, mask)
        z = mu + (0.5 * lv).exp() * torch.randn(mu.shape, generator=g)
        want = model.decode(z, w, mask).double().numpy()
    got = method.generate(model, anchors, 2)
    assert got.dtype == np.float64 and got.shape == (6, 8) and np.allclose(got, want, atol=1e-7)
    assert not np.allclose(method.generate(model, anchors, 2, seed=1), want)


def test_vmae_defaults_are_the_stated_ones(one_torch_thread):
    """vmae_loss's beta is 0.1 by default; train_vmae's lr 2e-3, mask ratio 0.25, beta 0.1 and seed 0: the
    default call and the explicit one give the same losses and the same weights."""
    model = method.VMAE(6, latent=2, hidden=8, seed=3)
    w = torch.as_tensor(np.sin(np.linspace(0, 5, 4 * 6)).reshape(4, 6), dtype=torch.float32)
    mask = method.contiguous_mask(4, 6, 0.34, torch.Generator().manual_seed(0))
    torch.manual_seed(5)
    default, _ = method.vmae_loss(model, w, mask)
    torch.manual_seed(5)
    explicit, _ = method.vmae_loss(model, w, mask, beta=0.1)
    torch.manual_seed(5)
    other, _ = method.vmae_loss(model, w, mask, beta=1.1)
    assert default.item() == explicit.item() != other.item()
    a, b = method.VMAE(6, latent=2, hidden=8, seed=3), method.VMAE(6, latent=2, hidden=8, seed=3)
    ha = method.train_vmae(a, w.numpy(), steps=2)
    hb = method.train_vmae(b, w.numpy(), steps=2, lr=2e-3, mask_ratio=0.25, beta=0.1, seed=0)
    assert ha == hb and all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    c = method.VMAE(6, latent=2, hidden=8, seed=3)
    assert method.train_vmae(c, w.numpy(), steps=2, lr=3e-3)[1] != ha[1]


def test_leading_axes_are_batch_axes(one_torch_thread):
    """The VMAE heads, decoder and loss, the anchor distance and the Gaussian log-density treat every axis
    but the last as a batch axis: a (2, 3, T) batch gives the values of the (6, T) batch, reshaped."""
    model = method.VMAE(5, latent=2, hidden=8, seed=1)
    g = torch.Generator().manual_seed(2)
    w, z = torch.randn(6, 5, generator=g), torch.randn(6, 2, generator=g)
    mask = method.contiguous_mask(6, 5, 0.4, g)
    w3, z3, m3 = w.reshape(2, 3, 5), z.reshape(2, 3, 2), mask.reshape(2, 3, 5)
    with torch.no_grad():
        for flat, deep in ((model.posterior_params(w), model.posterior_params(w3)),
                           (model.prior_params(w, mask), model.prior_params(w3, m3))):
            assert all(torch.allclose(a.reshape(2, 3, 2), b, atol=1e-6) for a, b in zip(flat, deep))
        assert torch.allclose(model.decode(z, w, mask).reshape(2, 3, 5), model.decode(z3, w3, m3), atol=1e-6)
        torch.manual_seed(3)
        flat_loss, flat_terms = method.vmae_loss(model, w, mask)
        torch.manual_seed(3)
        deep_loss, deep_terms = method.vmae_loss(model, w3, m3)
        assert deep_loss.item() == pytest.approx(flat_loss.item(), rel=1e-6)
        assert deep_terms == pytest.approx(flat_terms, rel=1e-6)
        a = torch.randn(6, 5, generator=g)
        assert torch.allclose(method.anchor_distance(w3, a.reshape(2, 3, 5)), method.anchor_distance(w, a).reshape(2, 3))
        mu, lv = model.prior_params(w, mask)
        assert torch.allclose(method._gaussian_logprob(z3, mu.reshape(2, 3, 2), lv.reshape(2, 3, 2)),
                              method._gaussian_logprob(z, mu, lv).reshape(2, 3), atol=1e-6)


def test_rl_finetune_defaults_and_the_reward_sign_reach_every_step(one_torch_thread):
    """rl_finetune's defaults (lr 3e-4, lam 0.3, 4 samples per anchor, ratio 0.25, seed 0, s = +1) give the
    explicit run; with s = -1 the first step scores the same samples, so the two mean rewards add up to
    -2 lam mean(distance) / d0 (the log-variance terms cancel)."""
    w = np.cos(np.linspace(0, 11, 3 * 6)).reshape(3, 6)
    zoo = _zoo_for(4, 2)
    base = method.VMAE(6, latent=2, hidden=8, seed=6)
    runs = {}
    for name, kwargs in (("default", {}), ("explicit", dict(lr=3e-4, lam=0.3, samples_per_anchor=4, mask_ratio=0.25,
                                                            seed=0, direction=1.0)),
                         ("minus", dict(direction=-1.0))):
        model = copy.deepcopy(base)
        runs[name] = (*method.rl_finetune(model, zoo, w, 4, iterations=2, **kwargs), model)
    (h_d, d0, m_d), (h_e, _, m_e), (h_m, d0_m, _) = runs["default"], runs["explicit"], runs["minus"]
    assert h_d == h_e and all(torch.equal(a, b) for a, b in zip(m_d.parameters(), m_e.parameters()))
    assert d0_m == d0 and h_m[0]["variance"] == h_d[0]["variance"] and h_m[0]["distance"] == h_d[0]["distance"]
    assert h_m[0]["reward"] + h_d[0]["reward"] == pytest.approx(-2 * 0.3 * h_d[0]["distance"] / d0, rel=1e-6)
    assert h_m[1] != h_d[1]
