"""Unit tests of the replib.papers.mwcp_pruning package (MWCP dataset pruning) and replib.models.mlp."""

import itertools
import math
import time

import numpy as np
import pandas as pd
import pytest

from replib.core.paths import load_chapter
from replib.models import mlp
from replib.papers.mwcp_pruning import baselines, exercises, experiment, method, task, theory


def clustered_points(seed=0, n=40, dim=6, clusters=4):
    rng = np.random.default_rng(seed)
    centres = method.normalise(rng.normal(size=(clusters, dim)))
    cluster = rng.integers(clusters, size=n)
    z = centres[cluster] + 0.3 * rng.normal(size=(n, dim))
    return rng.uniform(0, 2, size=n), z, cluster


def subsets(n):
    for k in range(n + 1):
        yield from itertools.combinations(range(n), k)


# ---- edge weight, objective, marginal gain ---------------------------------------------------


def test_redundancy_weight_range_and_sign():
    D = np.linspace(0.0, 2.0, 201)
    g = method.redundancy_weight(D)
    assert g[0] == pytest.approx(-0.5)
    assert g[-1] == pytest.approx(1 / (1 + math.exp(-2)) - 1)  # sigmoid(2) - 1 = -0.119
    assert np.all(g < 0) and np.all(g >= -0.5)
    assert np.all(np.diff(g) > 0)  # closer pairs are penalised more
    # cosine distance is in [0, 2], zero for identical directions
    z = np.array([[1.0, 0.0], [2.0, 0.0], [-1.0, 0.0], [0.0, 3.0]])
    D = method.cosine_distance(z)
    assert D[0, 1] == pytest.approx(0) and D[0, 2] == pytest.approx(2) and D[0, 3] == pytest.approx(1)


def test_objective_counts_each_pair_once():
    w = np.array([1.0, 2.0, 3.0])
    A = np.array([[0.0, -0.1, -0.2], [-0.1, 0.0, -0.3], [-0.2, -0.3, 0.0]])
    assert method.objective([0, 1, 2], w, A) == pytest.approx(6.0 - 0.6)  # not 6 - 1.2 (Eqs. 4-5)
    assert method.objective([2, 0], w, A) == pytest.approx(4.0 - 0.2)
    assert method.objective([], w, A) == 0.0
    assert method.marginal_gain(1, [0, 2], w, A) == pytest.approx(2.0 - 0.1 - 0.3)
    # Eq. 6: removal losses, and b = N - 1 is solved by deleting the smallest
    loss = method.removal_loss([0, 1, 2], w, A)
    assert np.allclose(loss, [1 - 0.3, 2 - 0.4, 3 - 0.5])
    drop = int(np.argmin(loss))
    best = max(itertools.combinations(range(3), 2), key=lambda S: method.objective(S, w, A))
    assert set(best) == set(range(3)) - {drop}


def test_graph_objective_matches_dense_sparsified_graph():
    w, z, cluster = clustered_points(1)
    A = method.edge_matrix(z, cluster)
    assert np.all(A <= 0) and np.allclose(A, A.T) and np.all(np.diag(A) == 0)
    assert np.all(A[cluster[:, None] != cluster[None, :]] == 0)  # missing edges weigh 0
    S = np.random.default_rng(2).choice(w.size, 15, replace=False)
    assert method.graph_objective(S, w, z, cluster) == pytest.approx(method.objective(S, w, A))
    full = method.edge_matrix(z)
    assert method.graph_objective(S, w, z, None) == pytest.approx(method.objective(S, w, full))


# ---- greedy ---------------------------------------------------------------------------------


def test_greedy_without_pairwise_term_is_exhaustive_top_b():
    rng = np.random.default_rng(3)
    w = rng.uniform(0, 2, size=9)
    A = np.zeros((9, 9))
    res = method.greedy_select(w, 4, A=A)
    S_star, F_star = theory.exhaustive_optimum(w, A, 4)
    assert set(res.order) == set(S_star) == set(np.argsort(-w)[:4])
    assert method.objective(res.order, w, A) == pytest.approx(F_star)
    assert np.array_equal(baselines.select_top_entropy(w, 4), np.argsort(-w)[:4])


def test_greedy_gains_equal_recomputed_marginals():
    w, z, cluster = clustered_points(4)
    A = method.edge_matrix(z, cluster)
    b = 12
    sparse = method.greedy_select(w, b, z=z, cluster=cluster)
    dense = method.greedy_select(w, b, A=A)
    assert np.array_equal(sparse.order, dense.order)
    assert len(set(sparse.order.tolist())) == b
    for t in range(b):
        S, x = sparse.order[:t], sparse.order[t]
        recomputed = method.objective(np.append(S, x), w, A) - method.objective(S, w, A)
        assert sparse.gains[t] == pytest.approx(recomputed)
        # the pick is the arg-max of Eq. 7 over the unselected samples
        best = max(method.marginal_gain(y, S, w, A) for y in range(w.size) if y not in set(S))
        assert sparse.gains[t] == pytest.approx(best)
    rest = np.setdiff1d(np.arange(w.size), sparse.order)
    want = [method.marginal_gain(y, sparse.order, w, A) for y in rest]
    assert np.allclose(sparse.final_gain[rest], want)
    assert np.all(np.isneginf(sparse.final_gain[sparse.order]))
    # the full graph (cluster=None) matches the dense complete graph
    full = method.greedy_select(w, b, z=z)
    assert np.array_equal(full.order, method.greedy_select(w, b, A=method.edge_matrix(z)).order)


def test_shift_makes_marginals_nonnegative_and_keeps_submodularity():
    rng = np.random.default_rng(5)
    w, A = task.random_instance(rng, n=7)
    c = theory.monotone_shift(w, A)
    raw, shifted = [], []
    for S in subsets(7):
        for x in set(range(7)) - set(S):
            m = method.marginal_gain(x, S, w, A)
            raw.append(m)
            shifted.append(theory.shifted_objective(S + (x,), w, A, c) - theory.shifted_objective(S, w, A, c))
            assert shifted[-1] == pytest.approx(m + c)
    assert min(raw) < 0  # the unshifted objective is not monotone here
    assert min(shifted) >= -1e-12
    # diminishing returns with g <= 0: Delta(x | A) >= Delta(x | B) for A subset of B
    for B in itertools.combinations(range(7), 3):
        for k in range(len(B)):
            for Asub in itertools.combinations(B, k):
                for x in set(range(7)) - set(B):
                    assert method.marginal_gain(x, Asub, w, A) >= method.marginal_gain(x, B, w, A) - 1e-12
    assert theory.shifted_objective((), w, A, c) == 0.0  # normalised


def test_exhaustive_optimum_and_guarantee_check():
    rng = np.random.default_rng(6)
    w, A = task.random_instance(rng, n=8)
    S_star, F_star = theory.exhaustive_optimum(w, A, 3)
    assert F_star == pytest.approx(max(method.objective(S, w, A) for S in itertools.combinations(range(8), 3)))
    assert method.objective(S_star, w, A) == pytest.approx(F_star)
    g = theory.greedy_guarantee_check(np.random.default_rng(0), instances=20, n=8, b=3)
    assert g["ratio"].shape == (20,) and g["min_ratio"] >= 1 - 1 / math.e
    assert np.all(g["ratio"] <= 1 + 1e-12) and np.all(g["gap"] >= -1e-12)
    assert np.all(g["f_greedy"] <= g["f_opt"] + 1e-12)


def test_greedy_selection_is_valid():
    rng = np.random.default_rng(0)
    I_in, z, cluster = task.synthetic_graph(rng, n=2000)
    res = method.select_mwcp(I_in, z, cluster, 1000, alpha=1.0)
    assert np.unique(res.order).size == 1000 and np.all((res.order >= 0) & (res.order < 2000))
    seconds = experiment.selection_seconds(n=2000, b=1000, rng=np.random.default_rng(1))
    assert math.isfinite(seconds) and seconds >= 0.0  # a duration; how long it takes is not asserted
    # the penalty spreads picks over the clusters
    counts = np.bincount(cluster[res.order], minlength=200)
    assert counts.min() >= 1


# ---- data, baselines ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generator():
    return task.fit_digit_generator()


def test_digit_generator_draws_learnable_digits(generator):
    assert generator.means.shape == (10, 5, 64) and generator.chol.shape == (10, 5, 64, 64)
    assert np.allclose(generator.weights.sum(axis=1), 1.0)
    X, y = generator.sample(np.random.default_rng(0), 2000)
    X2, y2 = generator.sample(np.random.default_rng(0), 2000)
    assert np.array_equal(X, X2) and np.array_equal(y, y2)  # seeded
    assert X.dtype == np.float32 and X.min() >= 0 and X.max() <= 1
    assert np.all(np.bincount(y, minlength=10) > 150)
    # the class means of the drawn images resemble those of the real digits
    from sklearn.datasets import load_digits

    digits = load_digits()
    real = np.stack([digits.data[digits.target == c].mean(axis=0) / 16.0 for c in range(10)])
    drawn = np.stack([X[y == c].mean(axis=0) for c in range(10)])
    assert np.abs(drawn - real).max() < 0.1
    # nearest real class mean classifies most drawn images correctly (labels carry the class)
    nearest = np.argmin(((X[:, None, :] - real[None]) ** 2).sum(axis=-1), axis=1)
    assert np.mean(nearest == y) > 0.8


def test_redundancy_injection(generator):
    pool = task.load_digits_with_redundancy(np.random.default_rng(0), generator, n_test=3000)
    assert pool.n == 2853 and pool.n_original == 1297
    assert pool.X_test.shape == (3000, 64) and pool.y_test.shape == (3000,)
    assert pool.is_dup.sum() == 4 * 389 and not pool.is_dup[: pool.n_original].any()
    assert pool.X.min() >= 0 and pool.X.max() <= 1 and pool.X.dtype == np.float32
    dup = np.flatnonzero(pool.is_dup)
    src = pool.origin[dup]
    assert np.all(src < pool.n_original) and np.all(pool.y[dup] == pool.y[src])
    assert np.array_equal(np.bincount(src)[np.unique(src)], np.full(389, 4))
    assert np.array_equal(pool.origin[: pool.n_original], np.arange(pool.n_original))
    diff = np.abs(pool.X[dup] - pool.X[src])
    assert 0.01 < diff.mean() < 0.04 and diff.max() < 0.25  # jitter sd 0.03
    other = task.load_digits_with_redundancy(np.random.default_rng(1), generator, n_test=3000)
    assert np.array_equal(other.X_test, pool.X_test)  # fixed test set
    assert not np.array_equal(other.X[:10], pool.X[:10])  # originals drawn per seed
    assert not np.array_equal(other.origin, pool.origin)


def test_accuracy_noise_floor():
    # 100 sqrt(2 a (1 - a) / n): at 96% and n = 100,000 about 0.088 points; it shrinks as 1 / sqrt(n)
    assert task.accuracy_noise_floor(96.0, 100_000) == pytest.approx(100 * math.sqrt(2 * 0.96 * 0.04 / 1e5))
    assert task.accuracy_noise_floor(96.0, 500) == pytest.approx(1.2394, abs=1e-4)
    assert task.accuracy_noise_floor(96.0, 400) == pytest.approx(2 * task.accuracy_noise_floor(96.0, 1600))
    assert task.accuracy_noise_floor(100.0, 500) == 0.0


def test_kcenter_picks_spread_out_points():
    rng = np.random.default_rng(0)
    dirs = np.eye(3)
    z = np.repeat(dirs, 10, axis=0) + 0.01 * rng.normal(size=(30, 3))
    S = baselines.select_kcenter(z, 3, np.random.default_rng(1))
    assert sorted(S // 10) == [0, 1, 2]  # one point per direction
    assert np.unique(baselines.select_kcenter(z, 30, np.random.default_rng(2))).size == 30
    S = baselines.select_random(np.random.default_rng(0), 30, 10)
    assert np.unique(S).size == 10


def test_neighbourhoods_are_classwise_clusters():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 30)
    z = rng.normal(size=(90, 5))
    c = method.neighbourhoods(z, y, clusters_per_class=4, rng=0)
    assert np.array_equal(c // 4, y)  # same id implies same label
    assert all(np.unique(c[y == k]).size == 4 for k in range(3))
    assert np.array_equal(c, method.neighbourhoods(z, y, clusters_per_class=4, rng=0))


def test_subset_stats(generator):
    pool = task.load_digits_with_redundancy(np.random.default_rng(0), generator, n_test=10)
    first_dup = int(np.flatnonzero(pool.is_dup)[0])
    S = np.array([pool.origin[first_dup], first_dup, 0 if pool.origin[first_dup] != 0 else 1])
    cluster = pool.y.copy()
    z = np.random.default_rng(0).random((pool.n, 4))
    st = task.subset_stats(S, pool, cluster, np.ones(pool.n), z)
    assert st["dup_fraction"] == pytest.approx(1 / 3)
    assert st["redundant_fraction"] == pytest.approx(1 / 3)
    assert st["clusters_covered"] == np.unique(pool.y[S]).size


# ---- MLP ------------------------------------------------------------------------------------


def test_mlp_training_is_deterministic_and_learns():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int)

    def run(seed):
        m = mlp.MLP([5, 16, 2], seed=seed)
        info = mlp.train_classifier(m, X, y, epochs=10, batch_size=32, lr=0.1, seed=seed)
        return m, info

    m1, i1 = run(0)
    m2, _ = run(0)
    m3, _ = run(1)
    assert i1["steps"] == 10 * 7
    assert all(np.array_equal(a.detach(), b.detach()) for a, b in zip(m1.parameters(), m2.parameters()))
    assert not np.array_equal(mlp.predict_proba(m1, X), mlp.predict_proba(m3, X))
    assert mlp.accuracy(m1, X, y) > 0.9
    assert mlp.embed(m1, X).shape == (200, 16) and np.all(mlp.embed(m1, X) >= 0)
    p = mlp.predict_proba(m1, X)
    assert np.allclose(p.sum(1), 1.0)
    m4 = mlp.MLP([5, 16, 2], seed=0)
    assert mlp.train_classifier(m4, X, y, steps=5, batch_size=32, seed=0)["steps"] == 5


def test_predictive_entropy():
    p = np.array([[1.0, 0.0], [0.5, 0.5], [0.25, 0.75]])
    H = method.predictive_entropy(p)
    assert H == pytest.approx([0.0, math.log(2), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))])


# ---- chapter helpers ------------------------------------------------------------------------


def _claim_rows():
    """Hand-made rows for two seeds and both pools, with distractors (other ratios, other selectors,
    alpha = 0) that a swapped ratio, baseline, pool or alpha would pick up instead."""
    mw0, mw1 = "mwcp(alpha=0)", "mwcp(alpha=1)"  # the row labels of run_experiment
    table = {  # seed: [(variant, ratio, accuracy)], redundant pool; the clean pool adds 1 + ratio
        0: [("proxy", 0.0, 90.0), ("full", 0.0, 96.0),
            ("random", 0.3, 95.0), ("random", 0.5, 94.0), ("random", 0.7, 88.0),
            ("entropy", 0.3, 93.0), ("entropy", 0.5, 91.0), ("entropy", 0.7, 90.0),
            ("kcenter", 0.3, 95.5), ("kcenter", 0.5, 94.8), ("kcenter", 0.7, 92.5),
            (mw0, 0.3, 99.0), (mw0, 0.5, 99.0),
            (mw1, 0.3, 96.5), (mw1, 0.5, 95.0), (mw1, 0.7, 93.0)],
        5: [("proxy", 0.0, 80.0), ("full", 0.0, 97.0),
            ("random", 0.3, 97.5), ("random", 0.5, 92.0), ("random", 0.7, 85.0),
            ("entropy", 0.3, 90.0), ("entropy", 0.5, 88.0), ("entropy", 0.7, 89.0),
            ("kcenter", 0.3, 96.2), ("kcenter", 0.5, 93.0), ("kcenter", 0.7, 91.0),
            (mw0, 0.3, 50.0), (mw0, 0.5, 50.0),
            (mw1, 0.3, 96.0), (mw1, 0.5, 93.5), (mw1, 0.7, 84.0)],
    }
    rows = []
    for seed, entries in table.items():
        for pool, shift in (("redundant", 0.0), ("clean", 1.0)):
            for variant, p, acc in entries:
                method_name = "mwcp" if variant.startswith("mwcp") else variant
                alpha = 0.0 if variant == mw0 else 1.0 if variant == mw1 else np.nan
                size = 1000 if p == 0 else round((1 - p) * 1000)
                rows.append(dict(pool=pool, seed=seed, variant=variant, method=method_name, alpha=alpha,
                                 ratio=p, accuracy=acc + shift * (1 + p),
                                 init_sd=0.1 + 0.01 * seed + p if method_name in ("mwcp", "random") else 9.0,
                                 train_flops=(7.0 if variant == "proxy" else 30.0 * size),
                                 select_flops=(2.0 if variant == "proxy" else 100.0 * p if variant == mw1 else 1e6),
                                 train_seconds=(1.0 + seed if variant == "proxy" else 10.0 if variant == "full"
                                                else 4.0 + seed if (variant == mw1 and p == 0.5) else np.nan),
                                 select_seconds=0.5 if variant == mw1 else 0.01))
    return rows


def test_claim_values_cover_chapter_yml():
    rows = _claim_rows()
    guarantee = {0: {"min_ratio": 0.9, "mean_gap": 0.01}, 5: {"min_ratio": 0.8, "mean_gap": 0.03}}
    cv = experiment.claim_values(rows, guarantee, {0: 0.4, 5: 0.7}, n_test=500)
    ids = [c["id"] for c in load_chapter("mwcp_pruning")["claims"]]
    assert set(cv) == {0, 5} and set(cv[0]) == set(cv[5]) == set(ids)
    want = {
        0: {"q1_target_competent": 96.0, "q2_proxy_trained": 90.0,
            "c1a_beats_random_30": 96.5 - 95.0, "c1b_beats_random_50": 95.0 - 94.0,
            "p1_random_lossy_30": 95.0 - 96.0, "p2_random_lossy_50": 94.0 - 96.0,
            "r1_room_random_30": 96.0 - 95.0, "r2_room_random_50": 96.0 - 94.0,
            "r3_room_kcenter_30": 96.0 - 95.5, "r4_room_kcenter_50": 96.0 - 94.8,
            "r5_room_kcenter_70": 96.0 - 92.5, "r6_room_entropy_70": 96.0 - 90.0,
            "h1_lossless_30": 96.5 - 96.0, "h2_lossless_50": 95.0 - 96.0,
            "k1_vs_kcenter_30": 96.5 - 95.5, "k2_vs_kcenter_50": 95.0 - 94.8,
            "k3_vs_kcenter_70": 93.0 - 92.5, "c3_unified_vs_intrinsic_70": 93.0 - 90.0,
            # clean pool: every accuracy at ratio p is 1 + p higher
            "q1_target_competent_clean": 97.0, "q2_proxy_trained_clean": 91.0,
            "c1a_beats_random_30_clean": 96.5 - 95.0, "h1_lossless_30_clean": 96.5 + 1.3 - 97.0,
            "h2_lossless_50_clean": 95.0 + 1.5 - 97.0, "p1_random_lossy_30_clean": 95.0 + 1.3 - 97.0,
            "r3_room_kcenter_30_clean": 97.0 - 95.5 - 1.3, "k3_vs_kcenter_70_clean": 93.0 - 92.5,
            "c4a_greedy_ratio": 0.9, "c4b_greedy_gap": 0.01,
            # FLOPs: (proxy 7 + selection 100 p + training 30 b) / (30 x 1000), at p = 0.5 and 0.3
            "c5_compute_end_to_end_50": (7.0 + 50.0 + 30.0 * 500) / 30_000.0,
            "m5_compute_end_to_end_30": (7.0 + 30.0 + 30.0 * 700) / 30_000.0,
            "m1_training_time_ratio": 4.0 / 10.0, "m2_selection_seconds_20k": 0.4,
            "m4_seconds_end_to_end_50": (1.0 + 0.5 + 4.0) / 10.0,
            "m3_test_noise_floor": 100 * math.sqrt(2 * 0.96 * 0.04 / 500),  # full-data accuracy
            "m6_init_spread": 0.1 + (0.3 + 0.5 + 0.3 + 0.5) / 4},
        5: {"c1a_beats_random_30": 96.0 - 97.5, "c1b_beats_random_50": 93.5 - 92.0,
            "p1_random_lossy_30": 97.5 - 97.0, "h2_lossless_50": 93.5 - 97.0,
            "k3_vs_kcenter_70": 84.0 - 91.0, "c3_unified_vs_intrinsic_70": 84.0 - 89.0,
            "c4a_greedy_ratio": 0.8, "c4b_greedy_gap": 0.03, "m1_training_time_ratio": 9.0 / 10.0,
            "m4_seconds_end_to_end_50": (6.0 + 0.5 + 9.0) / 10.0, "m2_selection_seconds_20k": 0.7,
            "m6_init_spread": 0.15 + 0.4},
    }
    for seed, claims in want.items():
        for claim, value in claims.items():
            assert cv[seed][claim] == pytest.approx(value), (seed, claim)
    # a DataFrame works too, and single (seed-independent) values are repeated for every seed
    again = experiment.claim_values(pd.DataFrame(rows), {"min_ratio": 0.7, "mean_gap": 0.05}, 0.3)
    for seed in (0, 5):
        assert again[seed]["c1a_beats_random_30"] == pytest.approx(cv[seed]["c1a_beats_random_30"])
        assert (again[seed]["c4a_greedy_ratio"], again[seed]["c4b_greedy_gap"],
                again[seed]["m2_selection_seconds_20k"]) == (0.7, 0.05, 0.3)
    # a ratio or a pool the profile did not run gives NaN, not another ratio's or pool's value
    no_half = [r for r in rows if r["ratio"] != 0.5]
    partial = experiment.claim_values(no_half, guarantee, 0.4)
    assert math.isnan(partial[0]["c1b_beats_random_50"]) and math.isnan(partial[0]["k2_vs_kcenter_50"])
    assert math.isnan(partial[0]["h2_lossless_50"]) and math.isnan(partial[0]["c5_compute_end_to_end_50"])
    assert partial[0]["c1a_beats_random_30"] == pytest.approx(1.5)
    redundant_only = experiment.claim_values([r for r in rows if r["pool"] == "redundant"], guarantee, 0.4)
    assert math.isnan(redundant_only[0]["h1_lossless_30_clean"])
    assert redundant_only[0]["h1_lossless_30"] == pytest.approx(0.5)


def test_profiles_have_the_documented_keys():
    keys = {"seeds", "ratios", "alphas", "epochs", "proxy_steps", "clusters_per_class", "n_test", "inits"}
    assert all(set(p) == keys for p in experiment.EXPERIMENT_PROFILES.values())
    book = experiment.EXPERIMENT_PROFILES["book"]
    assert book["ratios"] == [0.3, 0.5, 0.7, 0.9] and 1.0 in book["alphas"] and 0.0 in book["alphas"]
    assert book["n_test"] == 50_000 and book["inits"] == 4
    assert book["seeds"] == load_chapter("mwcp_pruning")["confirmatory_seeds"]
    smoke = experiment.EXPERIMENT_PROFILES["smoke"]
    assert {0.3, 0.5, 0.7} <= set(smoke["ratios"]) and 1.0 in smoke["alphas"]


def test_graders_accept_reference_and_reject_wrong():
    exercises.check_redundancy_weight(method.redundancy_weight)
    exercises.check_marginal_gain(method.marginal_gain)
    with pytest.raises(AssertionError):
        exercises.check_redundancy_weight(lambda D: 1.0 / (1.0 + np.exp(-np.asarray(D))))  # sigmoid, no -1
    with pytest.raises(AssertionError):  # Eqs. 4-5 read literally: pairs counted twice
        exercises.check_marginal_gain(lambda x, S, w, A: w[x] + 2 * A[x, list(S)].sum())

    def todo(*args):
        raise NotImplementedError

    with pytest.raises(AssertionError, match="not written"):
        exercises.check_marginal_gain(todo)


def test_run_experiment_rows_and_determinism():
    from types import SimpleNamespace

    cfg = SimpleNamespace(seeds=[0], ratios=[0.7], alphas=[0.0, 1.0], epochs=1, proxy_steps=20,
                          clusters_per_class=2, n_test=1000, inits=2)
    rows, extras = experiment.run_experiment(cfg)
    again, _ = experiment.run_experiment(cfg)
    labels = [(r["pool"], r["variant"]) for r in rows]
    assert labels == [("redundant", v) for v in ("proxy", "full", "random", "entropy", "kcenter",
                                                   "mwcp(alpha=0)", "mwcp(alpha=1)")] + [
        ("clean", v) for v in ("proxy", "full", "random", "entropy", "kcenter", "mwcp(alpha=1)")]
    assert [r["accuracy"] for r in rows] == [r["accuracy"] for r in again]
    assert [r["objective"] for r in rows if r["method"] != "proxy"] == [
        r["objective"] for r in again if r["method"] != "proxy"]
    b = round(0.3 * 2853)
    assert all(r["size"] == b for r in rows if r["ratio"] > 0)
    assert all(r["size"] == 2853 for r in rows if r["variant"] == "full")
    clean = [r for r in rows if r["pool"] == "clean" and r["variant"] == "full"][0]
    assert clean["dup_fraction"] == 0.0 and clean["redundant_fraction"] == 0.0  # no copies at all
    assert all(r["init_sd"] >= 0 for r in rows if r["method"] != "proxy")  # two inits per subset
    assert set(extras["kept"]) == {"random", "entropy", "kcenter", "mwcp(alpha=0)", "mwcp(alpha=1)"}
    assert extras["kept_ratio"] == 0.7
    assert extras["pca"].shape == (2853, 2) and extras["embeddings"].shape == (2853, 128)
    assert all(r["clusters_covered"] <= 20 for r in rows[1:] if r["method"] != "proxy")
    # costs: training FLOPs scale with the kept set, and the timed rows are MWCP and full only
    full = [r for r in rows if r["variant"] == "full"][0]
    mw = [r for r in rows if r["variant"] == "mwcp(alpha=1)"][0]
    assert mw["train_flops"] == pytest.approx(full["train_flops"] * b / 2853)
    assert mw["select_flops"] > 0 and rows[0]["train_flops"] == task.proxy_flops(20, 64, 2853)
    assert all(math.isnan(r["train_seconds"]) for r in rows if r["method"] in ("random", "entropy", "kcenter"))


def test_kcenter_prefix_is_kcenter_at_the_smaller_budget():
    """Farthest-first traversal is nested: its first b picks are the traversal run with budget b from
    the same first centre (what the experiment relies on to run it once per pool)."""
    _, z, _ = clustered_points(6, n=60)
    long = baselines.select_kcenter(z, 40, np.random.default_rng(3))
    for b in (1, 7, 25):
        assert np.array_equal(baselines.select_kcenter(z, b, np.random.default_rng(3)), long[:b])


def test_clean_pool_has_no_copies_and_the_same_size(generator):
    pool = experiment.make_pool("clean", 3, generator, n_test=100)
    dup = experiment.make_pool("redundant", 3, generator, n_test=100)
    assert pool.n == dup.n == 2853 and not pool.is_dup.any() and np.array_equal(pool.origin, np.arange(2853))
    assert np.array_equal(pool.X_test, dup.X_test)  # the same test set
    with pytest.raises(ValueError, match="valid"):
        experiment.make_pool("noisy", 3, generator, n_test=100)


def test_flop_counts():
    assert task.MLP_FLOPS == 2 * (64 * 128 + 128 * 10)
    assert task.training_flops(10) == 30 * task.MLP_FLOPS
    # 3 steps on 130 images in batches of 64: 64 + 64 + 2, then one scoring pass of 130
    assert task.proxy_flops(3, 64, 130) == task.training_flops(130) + 130 * task.MLP_FLOPS
    assert task.proxy_flops(5, 64, 130) == task.training_flops(130 + 128) + 130 * task.MLP_FLOPS
    # the greedy counts an arg-max over n per pick and 2d + 4 per neighbour it updates
    I_in, z, cluster = clustered_points(5, n=30, dim=6)
    res = method.greedy_select(I_in, 5, z=z, cluster=cluster)
    touched = sum(int(np.sum(cluster == cluster[i])) for i in res.order)
    assert res.flops == 5 * 30 + touched * (2 * 6 + 4)
    assert method.greedy_select(I_in, 5, A=method.edge_matrix(z, cluster)).flops == 2 * 5 * 30
    cost = {}
    method.neighbourhoods(z, np.zeros(30, int), 3, rng=0, cost=cost)
    assert cost["flops"] > 2 * 30 * 3 * 6  # at least one k-means iteration


# ---- training steps: the proxy's and the target's SGD, its second step, the method's weighted objective -----


def _hand_ce(params, X, y):
    """Cross-entropy of the ReLU MLP written out: mean_i -log softmax(W1 relu(W0 x_i + b0) + b1)_{y_i}."""
    import torch

    h = X
    for i in range(0, len(params), 2):
        h = h @ params[i].T + params[i + 1]
        if i + 2 < len(params):
            h = torch.relu(h)
    return -torch.log_softmax(h, 1)[torch.arange(len(y)), y].mean()


def _one_cycle_lr(k, total, peak):
    """OneCycleLR (30% warm-up, cosine both ways, div 25, final div 1e4) at step k, written out."""
    start, low = peak / 25, peak / 25 / 1e4
    up = 0.3 * total - 1
    if k <= up:
        return peak + (start - peak) / 2 * (math.cos(math.pi * k / up) + 1)
    return low + (peak - low) / 2 * (math.cos(math.pi * (k - up) / (total - 1 - up)) + 1)


def _hand_sgd(params, X, y, total, batch, peak, momentum, wd, seed):
    """The documented loop by hand: a fresh permutation of the rows per epoch, minibatches in order,
    buf <- momentum buf + (g + wd p), p <- p - lr_k buf, lr_k the one-cycle schedule."""
    import torch

    params = [p.detach().clone() for p in params]
    bufs = [None] * len(params)
    gen = torch.Generator().manual_seed(seed)
    done = 0
    while done < total:
        perm = torch.randperm(len(y), generator=gen)
        for k in range(0, len(y), batch):
            if done >= total:
                break
            idx = perm[k:k + batch]
            ps = [p.clone().requires_grad_(True) for p in params]
            grads = torch.autograd.grad(_hand_ce(ps, X[idx], y[idx]), ps)
            lr = _one_cycle_lr(done, max(total, 2), peak)
            for i, (p, g) in enumerate(zip(params, grads)):
                d = g + wd * p
                bufs[i] = d if bufs[i] is None else momentum * bufs[i] + d
                params[i] = p - lr * bufs[i]
            done += 1
    return params


def _toy_classification(n=10, d=5, classes=3, seed=0):
    import torch

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(classes, size=n)
    return X, y, torch.tensor(X), torch.tensor(y)


def test_train_classifier_first_step_is_sgd_on_cross_entropy():
    """One step: p <- p - lr_0 (grad CE(first minibatch of randperm(seed)) + wd p), lr_0 the one-cycle rate at
    step 0 (of a 2-step cycle: a 1-step budget is stretched to 2)."""
    import torch

    X, y, Xt, yt = _toy_classification()
    model = mlp.MLP([5, 4, 3], seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    mlp.train_classifier(model, X, y, steps=1, batch_size=4, lr=0.2, momentum=0.9, weight_decay=0.01, seed=3)
    idx = torch.randperm(10, generator=torch.Generator().manual_seed(3))[:4]
    ps = [p.clone().requires_grad_(True) for p in before]
    grads = torch.autograd.grad(_hand_ce(ps, Xt[idx], yt[idx]), ps)
    lr0 = _one_cycle_lr(0, 2, 0.2)
    for p, p0, g in zip(model.parameters(), before, grads):
        assert torch.allclose(p.detach(), p0 - lr0 * (g + 0.01 * p0), atol=1e-6)
    assert max(float(g.abs().max()) for g in grads) * lr0 > 1e-2
    loss_before = float(_hand_ce(before, Xt[idx], yt[idx]))
    after = [p.detach() for p in model.parameters()]
    assert float(_hand_ce(after, Xt[idx], yt[idx])) < loss_before  # the batch's loss fell


def test_train_classifier_momentum_schedule_and_epochs_over_ten_steps():
    """Ten steps over 10 rows in minibatches of 4 (three epochs, a new permutation each): momentum buffers,
    weight decay and the one-cycle learning rate carried from step to step, as written out by hand."""
    import torch

    X, y, Xt, yt = _toy_classification()
    model = mlp.MLP([5, 4, 3], seed=1)
    before = [p.detach().clone() for p in model.parameters()]
    info = mlp.train_classifier(model, X, y, steps=10, batch_size=4, lr=0.5, momentum=0.9, weight_decay=0.01, seed=7)
    want = _hand_sgd(before, Xt, yt, 10, 4, 0.5, 0.9, 0.01, 7)
    assert info["steps"] == 10
    for p, w in zip(model.parameters(), want):
        assert torch.allclose(p.detach(), w, atol=1e-5)
    plain = _hand_sgd(before, Xt, yt, 10, 4, 0.5, 0.0, 0.01, 7)  # the same without momentum is far off
    assert max(float((a - b).abs().max()) for a, b in zip(want, plain)) > 1e-2


def test_train_proxy_scores_the_model_it_trained():
    """Algorithm 1 step 1: entropy, probabilities and embeddings are those of the proxy after its SGD step
    (model and minibatch seed 10_000 + seed), not of the initial or another model."""
    import torch

    rng = np.random.default_rng(0)
    X = rng.random((12, 6)).astype(np.float32)
    y = np.arange(12) % 10
    out = task.train_proxy(X, y, steps=1, seed=2, hidden=5, batch_size=8, lr=1.0)
    init = mlp.MLP([6, 5, 10], seed=10_002)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    p0 = [p.detach().clone() for p in init.parameters()]
    idx = torch.randperm(12, generator=torch.Generator().manual_seed(10_002))[:8]
    ps = [p.clone().requires_grad_(True) for p in p0]
    grads = torch.autograd.grad(_hand_ce(ps, Xt[idx], yt[idx]), ps)
    lr0 = _one_cycle_lr(0, 2, 1.0)
    w0, b0, w1, b1 = [p - lr0 * (g + 5e-4 * p) for p, g in zip(p0, grads)]
    z = torch.relu(Xt @ w0.T + b0)
    probs = torch.softmax((z @ w1.T + b1).double(), 1).numpy()
    assert np.allclose(out.embeddings, z.numpy(), atol=1e-6)
    assert np.allclose(out.probs, probs, atol=1e-6)
    assert np.allclose(out.entropy, -(probs * np.log(probs)).sum(1), atol=1e-6)
    untrained = torch.softmax(init(Xt).double(), 1).detach().numpy()
    assert np.abs(out.probs - untrained).max() > 1e-3  # the step moved the scores


def test_train_target_trains_a_seeded_model_on_the_subset(monkeypatch):
    """The target: MLP 64-128-10 with model seed = seed, one epoch of 64-row minibatches on the kept
    subset (one step here, wd 5e-4), scored on the test split."""
    import torch

    from replib.models import mlp as mlp_module

    seen = {}
    real = mlp_module.accuracy

    def spy(model, X, y):
        seen["model"], seen["X"] = model, X
        return real(model, X, y)

    monkeypatch.setattr(mlp_module, "accuracy", spy)
    rng = np.random.default_rng(1)
    X, y = rng.random((20, 64)).astype(np.float32), np.arange(20) % 10
    X_test, y_test = rng.random((30, 64)).astype(np.float32), np.arange(30) % 10
    res = task.train_target(X, y, X_test, y_test, epochs=1, seed=4)
    assert seen["X"] is X_test
    p0 = [p.detach().clone() for p in mlp.MLP([64, 128, 10], seed=4).parameters()]
    want = _hand_sgd(p0, torch.tensor(X), torch.tensor(y), 1, 64, 0.05, 0.9, 5e-4, 4)
    for p, w in zip(seen["model"].parameters(), want):
        assert torch.allclose(p.detach(), w, atol=1e-7)
    assert res["accuracy"] == pytest.approx(100 * real(seen["model"], X_test, y_test))


def test_select_mwcp_weights_the_intrinsic_score_by_alpha():
    """w = alpha I_in enters every gain: select_mwcp(alpha) is the greedy on the sparsified graph with
    w = alpha I_in (dense edges written out), and a different alpha changes the picks."""
    I_in, z, cluster = clustered_points(4, n=30)
    A = method.edge_matrix(z, cluster)
    orders = {}
    for alpha in (0.3, 3.0):
        res = method.select_mwcp(I_in, z, cluster, 12, alpha)
        dense = method.greedy_select(alpha * I_in, 12, A=A)
        assert np.array_equal(res.order, dense.order) and np.allclose(res.gains, dense.gains)
        assert res.gains[0] == pytest.approx(alpha * I_in.max())
        orders[alpha] = set(res.order.tolist())
    assert orders[0.3] != orders[3.0]


def test_train_targets_first_step_is_each_models_own_sgd_step():
    """Batched training, one step: every model (subset s, seed k) moves by -lr_0 (grad of ITS OWN mean
    cross-entropy on its own first minibatch + wd p) from the initial weights of MLP(seed k); its
    minibatch's loss falls. A loss averaged over all models, a shared minibatch or a detached weight
    would fail it."""
    import torch

    rng = np.random.default_rng(2)
    X = rng.random((40, 64)).astype(np.float32)
    y = np.arange(40) % 10
    subsets = [rng.choice(40, 12, replace=False) for _ in range(2)]
    out = task.train_targets(X, y, subsets, X[:5], y[:5], epochs=1, seeds=[3, 8], batch_size=8, lr=0.5)
    assert out["steps"] == 2  # 12 rows in batches of 8: one epoch = two steps
    one = task.train_targets(X, y, subsets, X[:5], y[:5], epochs=1, seeds=[3, 8], batch_size=12, lr=0.5)
    assert one["steps"] == 1
    lr0 = _one_cycle_lr(0, 2, 0.5)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    for s, S in enumerate(subsets):
        for k, seed in enumerate([3, 8]):
            p0 = [p.detach().clone() for p in mlp.MLP([64, 128, 10], seed=seed).parameters()]
            idx = torch.as_tensor(S)[torch.randperm(12, generator=torch.Generator().manual_seed(seed))]
            ps = [p.clone().requires_grad_(True) for p in p0]
            grads = torch.autograd.grad(_hand_ce(ps, Xt[idx], yt[idx]), ps)
            got = [t[s, k] for t in one["params"]]
            for p, q, g in zip(got, p0, grads):
                assert torch.allclose(p, q - lr0 * (g + 5e-4 * q), atol=1e-6)
            assert float(_hand_ce(got, Xt[idx], yt[idx])) < float(_hand_ce(p0, Xt[idx], yt[idx]))


def test_train_targets_equals_training_each_model_alone():
    """Several steps and epochs: each batched model equals the hand-written loop (momentum, weight decay,
    one-cycle rate, a new permutation of its own subset per epoch) and train_target with its seed."""
    import torch

    rng = np.random.default_rng(4)
    X = rng.random((50, 64)).astype(np.float32)
    y = np.arange(50) % 10
    X_test, y_test = rng.random((300, 64)).astype(np.float32), np.arange(300) % 10
    subsets = [rng.choice(50, 20, replace=False) for _ in range(3)]
    out = task.train_targets(X, y, subsets, X_test, y_test, epochs=3, seeds=[1, 2], batch_size=8)
    assert out["accuracy"].shape == (3, 2) and out["steps"] == 9
    for s, S in enumerate(subsets):
        for k, seed in enumerate([1, 2]):
            p0 = [p.detach().clone() for p in mlp.MLP([64, 128, 10], seed=seed).parameters()]
            want = _hand_sgd(p0, torch.tensor(X[S]), torch.tensor(y[S]), 9, 8, 0.05, 0.9, 5e-4, seed)
            for p, w in zip([t[s, k] for t in out["params"]], want):
                assert torch.allclose(p, w, atol=1e-5)
    alone = task.train_target(X[subsets[1]], y[subsets[1]], X_test, y_test, epochs=15, seed=2)
    batched = task.train_targets(X, y, subsets, X_test, y_test, epochs=15, seeds=[2])
    assert batched["accuracy"][1, 0] == pytest.approx(alone["accuracy"], abs=0.34)  # one of 300 images
    with pytest.raises(ValueError, match="one size"):
        task.train_targets(X, y, [subsets[0], subsets[0][:5]], X_test, y_test, epochs=1, seeds=[0])


# ---- edge cases that pin the method's arithmetic (issue 44) ----------------------------------

# a direction whose normalised copy and its negation round to 1 - cos = 2 + 4e-16, and to 1 - cos < 0 against
# 3 times itself: the [0, 2] clip of the distance is visible in every g(D) computed from it
_ROUNDING_DIRECTION = np.array([-1.0298044380114637, -1.0430010800715654, 0.26841707970891465])
_G2 = -1.0 / (1.0 + math.exp(2.0))  # g(2), antiparallel


def test_cosine_distance_is_clipped_to_zero_two_and_takes_a_second_set_of_rows():
    """D = 1 - cos in [0, 2] exactly (clipped against rounding); D(a, b) between two different sets of rows."""
    v = _ROUNDING_DIRECTION
    D = method.cosine_distance(np.stack([v, -v, 3 * v]))
    assert D.max() == 2.0 and D.min() == 0.0
    assert D[0, 1] == 2.0 and D[0, 2] == 0.0 and D[0, 0] == 0.0
    a = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([[3.0, 3.0], [-1.0, 0.0], [0.0, -5.0]])
    want = np.array([[1 - 1 / math.sqrt(2), 2.0, 1.0], [1 - 1 / math.sqrt(2), 1.0, 2.0]])
    assert np.allclose(method.cosine_distance(a, b), want)
    # unit rows, a zero row stays zero, a row just above the 1e-12 floor is still scaled to unit length
    n = method.normalise(np.array([[3.0, 4.0], [0.0, 0.0], [1.5e-12, 0.0], [0.0, -2e-9]]))
    assert np.allclose(n, [[0.6, 0.8], [0.0, 0.0], [1.0, 0.0], [0.0, -1.0]])
    assert method.normalise([[1, 1]]).dtype == np.float64
    assert np.allclose(method.normalise([3.0, -4.0]), [0.6, -0.8])  # one vector


def test_graph_objective_edge_cases_match_hand_values():
    """Eq. 3 on tiny sets: F(empty) = 0, a single pair adds g(D) exactly (g(2) for antiparallel rows, g(0) for
    parallel), clusters of size two are counted, and unsorted cluster ids group correctly."""
    v = _ROUNDING_DIRECTION
    z = np.stack([v, -v, 3 * v])
    w = np.zeros(3)
    assert method.graph_objective([], w, z) == 0.0
    assert method.graph_objective(np.array([], dtype=int), np.ones(3), z, np.zeros(3, int)) == 0.0
    assert method.graph_objective([0, 1], w, z) == _G2
    assert method.graph_objective([0, 2], w, z) == -0.5
    assert method.graph_objective([0, 1, 2], w, z, cluster=[7, 3, 7]) == -0.5  # only the pair (0, 2) is joined
    # four points in two interleaved clusters of two: pairs (0, 2) and (1, 3)
    z4 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, -1.0]])
    w4 = np.array([0.5, 1.0, 2.0, 4.0])
    g = lambda D: -1.0 / (1.0 + math.exp(D))  # noqa: E731
    want = 7.5 + g(1 - 1 / math.sqrt(2)) + g(2.0)
    assert method.graph_objective([0, 1, 2, 3], w4, z4, cluster=[5, 1, 5, 1]) == pytest.approx(want)
    assert method.graph_objective([3, 1], w4, z4, cluster=[5, 1, 5, 1]) == pytest.approx(5.0 + g(2.0))
    assert method.graph_objective([2], w4, z4) == 2.0 and method.graph_objective([2], w4, z4, [0, 0, 0, 0]) == 2.0
    # the groups of equal ids, each with its positions in increasing order (also past insertion-sort sizes)
    ids = np.random.default_rng(3).integers(0, 3, 200)
    groups = method._groups(ids)
    assert [int(ids[g[0]]) for g in groups] == [0, 1, 2]
    assert all(np.all(ids[g] == ids[g[0]]) and np.all(np.diff(g) > 0) for g in groups)
    assert sum(g.size for g in groups) == 200
    # the dense edge matrix from a given D: g(D) off the diagonal, 0 on it
    D = np.array([[0.3, 1.0, 2.0], [1.0, 0.0, 0.5], [2.0, 0.5, 0.7]])
    A = method.edge_matrix(D=D)
    assert np.allclose(A, [[0.0, g(1.0), g(2.0)], [g(1.0), 0.0, g(0.5)], [g(2.0), g(0.5), 0.0]])
    assert np.allclose(method.edge_matrix(D=D, cluster=[0, 1, 0]), [[0, 0, g(2.0)], [0, 0, 0], [g(2.0), 0, 0]])


def test_objective_marginal_and_removal_ignore_the_diagonal():
    """Eqs. 3, 6, 7 use only off-diagonal a_ij: a non-zero diagonal changes none of F, Delta, Delta^-."""
    w = np.array([1.0, 2.0, 3.0])
    A = np.array([[9.0, -0.1, -0.2], [-0.1, 7.0, -0.3], [-0.2, -0.3, 5.0]])
    assert method.objective([0, 1, 2], w, A) == pytest.approx(6.0 - 0.6)
    assert method.objective([1], w, A) == pytest.approx(2.0)
    assert method.marginal_gain(1, [0, 1, 2], w, A) == pytest.approx(2.0 - 0.4)  # j != x
    assert method.marginal_gain(2, [], w, A) == pytest.approx(3.0)
    assert np.allclose(method.removal_loss([2, 0], w, A), [3.0 - 0.2, 1.0 - 0.2])
    assert np.allclose(method.removal_loss([0, 1, 2], [1, 2, 3], A.tolist()), [0.7, 1.6, 2.5])
    assert np.allclose(A.diagonal(), [9.0, 7.0, 5.0])  # the caller's matrix is not modified


def test_greedy_select_budget_edges_ties_and_wall_clock():
    """Algorithm 1 with b = 0 (nothing picked, final gains = w) and b = n (every sample, all -inf); b outside
    [0, n] is refused; ties go to the lowest index; integer weights work; the time is the loop's own."""
    w = np.array([1, 3, 3, 0])
    A = np.zeros((4, 4))
    z = np.eye(4)
    for kw in (dict(A=A), dict(z=z), dict(z=z, cluster=[0, 0, 1, 1])):
        zero = method.greedy_select(w, 0, **kw)
        assert zero.order.size == 0 and zero.gains.size == 0 and np.array_equal(zero.final_gain, w)
        tic = time.perf_counter()
        res = method.greedy_select(w, 4, **kw)
        elapsed = time.perf_counter() - tic
        assert res.order.tolist() == [1, 2, 0, 3] and np.all(np.isneginf(res.final_gain))
        assert res.order.dtype == np.int64
        assert 0.0 <= res.seconds <= elapsed
        for b in (-1, 5):
            with pytest.raises(ValueError, match="between 0 and n = 4"):
                method.greedy_select(w, b, **kw)
    # the sparse update adds g(D) exactly, clipped to [0, 2] against rounding: g(2) antiparallel, g(0) parallel
    v = _ROUNDING_DIRECTION
    res = method.greedy_select([1.0, 0.0, 0.0], 1, z=np.stack([v, -v, 2 * v]))  # 1 - cos(v, 2v) rounds below 0 here
    assert res.final_gain[1] == _G2 and res.final_gain[2] == -0.5
    res = method.greedy_select([1.0, 0.0, 0.0], 1, z=np.stack([v, -v, 2 * v]), cluster=[4, 4, 9])
    assert res.final_gain[1] == _G2 and res.final_gain[2] == 0.0


def test_select_mwcp_default_alpha_is_one():
    """The method with the default alpha = 1 is the greedy with w = I_in."""
    I_in, z, cluster = clustered_points(8, n=20)
    res = method.select_mwcp(I_in, z, cluster, 6)
    ref = method.greedy_select(I_in, 6, A=method.edge_matrix(z, cluster))
    assert np.array_equal(res.order, ref.order) and np.allclose(res.gains, ref.gains)
    assert res.gains[0] == pytest.approx(I_in.max())


def test_neighbourhoods_runs_the_documented_kmeans_per_class_and_counts_its_flops(monkeypatch):
    """Step 2 of Algorithm 1: k-means++ (n_init 1, max_iter 25, min(K, class size) clusters, the given or
    first-drawn random_state) on the normalised rows of each class; ids label K + cluster; a one-sample class
    is its own cluster and costs nothing; the FLOPs follow the docstring's count."""
    import sklearn.cluster

    fits = []

    class Spy(sklearn.cluster.KMeans):
        def fit(self, X, y=None, sample_weight=None):
            super().fit(X)
            fits.append((self.get_params(), np.array(X), self.labels_.copy(), self.n_iter_))
            return self

    monkeypatch.setattr(sklearn.cluster, "KMeans", Spy)
    rng = np.random.default_rng(3)
    y = np.array([2, 0, 2, 1, 2, 2, 2, 0, 2, 2, 0])  # class 2: 7 rows, class 0: 3 rows, class 1: one row
    z = rng.normal(size=(11, 3)) * np.arange(1, 12)[:, None]  # rows of very different norms
    cost = {"flops": 10.0}
    ids = method.neighbourhoods(z, y, clusters_per_class=4, rng=np.random.default_rng(0), cost=cost)
    state = int(np.random.default_rng(0).integers(2**31 - 1))  # one draw from the generator
    assert [f[0]["n_clusters"] for f in fits] == [3, 4]  # class 0 (3 rows -> 3 clusters), class 2
    for params, _, _, _ in fits:
        assert (params["n_init"], params["max_iter"], params["random_state"]) == (1, 25, state)
        assert params["init"] == "k-means++"
    zn = z / np.linalg.norm(z, axis=1, keepdims=True)
    assert np.allclose(fits[0][1], zn[y == 0]) and np.allclose(fits[1][1], zn[y == 2])
    assert np.array_equal(ids[y == 0], 0 + fits[0][2]) and np.array_equal(ids[y == 2], 8 + fits[1][2])
    assert ids[3] == 4 and ids.dtype == np.int64
    # FLOPs: seeding k (2 + ln k) 2 n_c d, then per iteration 2 n_c k d + n_c d
    n0, n2 = fits[0][3], fits[1][3]
    want = 10.0 + 3 * (2 + math.log(3)) * 2 * 3 * 3 + n0 * (2 * 3 * 3 * 3 + 3 * 3)
    want += 4 * (2 + math.log(4)) * 2 * 7 * 3 + n2 * (2 * 7 * 4 * 3 + 7 * 3)
    assert cost["flops"] == pytest.approx(want)
    # an integer rng is the random_state itself; the default is 5 clusters per class and max_iter 25
    fits.clear()
    fresh = {}
    ids5 = method.neighbourhoods(z, y, rng=17, cost=fresh)
    assert [(f[0]["n_clusters"], f[0]["random_state"], f[0]["max_iter"]) for f in fits] == [(3, 17, 25), (5, 17, 25)]
    assert np.array_equal(ids5 // 5, y) and ids5[3] == 5
    assert fresh["flops"] == pytest.approx(3 * (2 + math.log(3)) * 2 * 3 * 3 + fits[0][3] * (2 * 3 * 3 * 3 + 3 * 3)
                                           + 5 * (2 + math.log(5)) * 2 * 7 * 3 + fits[1][3] * (2 * 7 * 5 * 3 + 7 * 3))
    fits.clear()
    method.neighbourhoods(z, y, clusters_per_class=2)  # the default random_state is 0
    assert [f[0]["random_state"] for f in fits] == [0, 0]
    # one cluster per class: no fit, no FLOPs, ids = label K
    fits.clear()
    one = {}
    assert np.array_equal(method.neighbourhoods(z, y, clusters_per_class=1, cost=one), y)
    assert fits == [] and one == {}


def test_predictive_entropy_zero_probabilities_silently_and_on_the_last_axis():
    """Eq. 2 with 0 log 0 = 0 (no divide or invalid warning), summed over the classes (the last axis) of one
    distribution or of a batch."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        H = method.predictive_entropy([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0], [0.2, 0.3, 0.5]])
    assert H == pytest.approx([math.log(2), 0.0, -(0.2 * math.log(0.2) + 0.3 * math.log(0.3) + 0.5 * math.log(0.5))])
    assert method.predictive_entropy([0.25, 0.25, 0.5]) == pytest.approx(1.5 * math.log(2))
    assert method.predictive_entropy([[1, 0], [0, 1]]).tolist() == [0.0, 0.0]


def test_scores_and_objectives_are_computed_in_double_precision_with_integer_indices():
    """Eqs. 2, 3, 6, 7 and the greedy take float32 inputs and float-typed index arrays, and compute in float64:
    the results equal those of the same values cast to float64 first (exactly), indices cast to integers."""
    rng = np.random.default_rng(11)
    w32 = rng.uniform(0, 2, 6).astype(np.float32)
    z32 = rng.normal(size=(6, 3)).astype(np.float32)
    A32 = method.edge_matrix(z32.astype(float)).astype(np.float32)
    w64, z64, A64 = w32.astype(float), z32.astype(float), A32.astype(float)
    S, Sf = [0, 2, 3, 5], np.array([0.0, 2.0, 3.0, 5.0])
    assert method.objective(Sf, w32, A32) == method.objective(S, w64, A64)
    assert method.graph_objective(Sf, w32, z32, [1, 0, 1, 0, 1, 1]) == method.graph_objective(S, w64, z64, [1, 0, 1, 0, 1, 1])
    assert method.marginal_gain(4, Sf, w32, A32) == method.marginal_gain(4, S, w64, A64)
    assert method.marginal_gain(2, Sf, w32, A32) == method.marginal_gain(2, S, w64, A64)  # x in S: left out
    assert np.array_equal(method.removal_loss(Sf, w32, A32), method.removal_loss(S, w64, A64))
    assert method.removal_loss([], w64, A64).size == 0
    p32 = np.array([[0.3, 0.7], [0.1, 0.9]], dtype=np.float32)
    assert np.array_equal(method.predictive_entropy(p32), method.predictive_entropy(p32.astype(float)))
    assert method.normalise(z32).dtype == np.float64
    assert np.array_equal(method.normalise(z32), method.normalise(z64))
    D32 = np.array([0.1, 0.7, 1.9], dtype=np.float32)
    assert np.array_equal(method.redundancy_weight(D32), method.redundancy_weight(D32.astype(float)))
    cluster = np.array([0, 1, 0, 1, 0, 0])
    got = method.select_mwcp(w32, z32, cluster, 4, alpha=0.3)
    want = method.greedy_select(0.3 * w64, 4, z=z64, cluster=cluster)
    assert np.array_equal(got.order, want.order) and np.array_equal(got.gains, want.gains)
