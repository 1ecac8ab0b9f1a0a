"""Unit tests of the SGB-IB chapter: method pieces on hand-made inputs, the task metrics, the
claim values on hand-made run results and the exercise graders."""

import types

import numpy as np
import pytest

from replib.core.paths import load_chapter
from replib.papers.sgb_ib import exercises, experiment, method, task


def test_conditional_distributions_rows_sum_to_one_and_shift_negatives():
    P = method.conditional_distributions(np.array([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0]]))
    np.testing.assert_allclose(P, [[0.25, 0.75], [0.5, 0.5], [0.5, 0.5]])
    Q = method.conditional_distributions(np.array([[-1.0, 3.0], [1.0, 2.0]]))
    np.testing.assert_allclose(Q, [[0.0, 1.0], [1.0, 0.0]])


def test_ball_mi_terms_by_hand_and_data_processing():
    P = np.array([[1.0, 0.0], [0.0, 1.0]])
    i_hat, i_x = method.ball_mi_terms(P, np.array([0, 1]))
    assert i_x == pytest.approx(np.log(2)) and i_hat == pytest.approx(np.log(2))
    i_hat, _ = method.ball_mi_terms(P, np.array([0, 0]))
    assert i_hat == pytest.approx(0.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        P = rng.dirichlet(np.ones(5), size=12)
        i_hat, i_x = method.ball_mi_terms(P, rng.integers(0, 3, size=12))
        assert -1e-12 <= i_hat <= i_x + 1e-12


def test_impurity_one_when_labels_explain_everything_zero_when_one_label():
    P = np.array([[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.1, 0.9]])
    split = np.array([0, 0, 1, 1])
    np.testing.assert_allclose(method.impurity([P, P], [split, split], np.arange(4)), [1.0, 1.0])
    np.testing.assert_allclose(method.impurity([P], [np.zeros(4, int)], np.arange(4)), [0.0])


def test_generate_balls_splits_two_groups_and_stops():
    rng = np.random.default_rng(1)
    a = rng.dirichlet([20, 1, 1], size=10)
    b = rng.dirichlet([1, 1, 20], size=10)
    P = np.vstack([a, b])
    labels = np.repeat([0, 1], 10)
    balls = method.generate_balls([P], [labels], theta=0.9, n_min=4)
    assert sorted(sorted(x.tolist()) for x in balls) == [list(range(10)), list(range(10, 20))]
    assert len(method.generate_balls([P], [np.zeros(20, int)], theta=0.9, n_min=4)) == 1


def test_two_means_separates_points():
    Z = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    np.testing.assert_array_equal(method.two_means(Z, Z[[0, 2]]), [True, True, False, False])


def test_structure_graph_symmetric_zero_diagonal():
    c = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0]])
    A = method.structure_graph(c, np.array([0.6, 0.6, 0.1]), k=1)
    np.testing.assert_allclose(A, A.T)
    assert np.all(np.diag(A) == 0) and A[0, 1] > 0 and A[1, 2] > 0 and A[0, 2] == 0


def test_merge_cost_is_exact_drop_of_objective():
    rng = np.random.default_rng(2)
    m, K = 7, 3
    weight = rng.dirichlet(np.ones(m))
    dists = [rng.dirichlet(np.ones(4), size=m), rng.dirichlet(np.ones(3), size=m)]
    A = rng.random((m, m))
    A = (A + A.T) * (1 - np.eye(m))
    T = np.array([0, 0, 1, 1, 2, 2, 3])  # item 6 alone in cluster 3
    beta_inv, lam = 0.05, 0.3
    base = method.ib_objective(weight, dists, T, K + 1, beta_inv, lam, A)
    pt = np.bincount(T[:6], weights=weight[:6], minlength=K)
    St = [np.stack([np.bincount(T[:6], weights=weight[:6] * D[:6, y], minlength=K) for y in range(D.shape[1])], 1)
          for D in dists]
    link = 2 * np.bincount(T[:6], weights=A[6, :6], minlength=K) / A.sum()
    costs = method.merge_costs(weight[6], [D[6] for D in dists], pt, St, beta_inv, lam, link)
    for t in range(K):
        merged = T.copy()
        merged[6] = t
        assert costs[t] == pytest.approx(base - method.ib_objective(weight, dists, merged, K + 1, beta_inv, lam, A))


def test_draw_and_merge_recovers_two_obvious_clusters():
    rng = np.random.default_rng(4)
    P = np.vstack([rng.dirichlet([30, 1, 1, 1], size=8), rng.dirichlet([1, 1, 1, 30], size=8)])
    w = np.full(16, 1 / 16)
    T, _ = method.draw_and_merge(w, [P], 2, np.tile([0, 1], 8), np.random.default_rng(0))
    assert task.accuracy(np.repeat([0, 1], 8), T) == 1.0


def test_task_metrics():
    y = np.array([0, 0, 1, 1, 2, 2])
    assert task.accuracy(y, np.array([2, 2, 0, 0, 1, 1])) == 1.0
    assert task.accuracy(y, np.array([0, 0, 0, 1, 1, 1])) == pytest.approx(4 / 6)
    assert task.nmi(y, np.array([5, 5, 3, 3, 4, 4])) == pytest.approx(1.0)
    assert task.majority_purity(y, [np.array([0, 1, 2]), np.array([3, 4, 5])]) == pytest.approx(4 / 6)
    views, labels = task.digits_views(n=50, seed=0)
    assert [v.shape for v in views] == [(50, 64), (50, 16), (50, 32)] and labels.shape == (50,)
    assert all((v >= 0).all() for v in views)


def _rows(seed, ours, flat, sib, km, sc, t_ours, t_sib, m):
    rows = []
    for name, (acc, nmi_) in zip(experiment.METHODS, [ours, flat, sib, km, sc]):
        rows.append(dict(seed=seed, method=name, acc=acc, nmi=nmi_, n=1000,
                         t_ib={"sgb_ib": t_ours, "point sib": t_sib}.get(name, np.nan),
                         m={"sgb_ib": m}.get(name, np.nan)))
    return rows


def test_claim_values_by_hand():
    rows = (_rows(0, (0.80, 0.75), (0.70, 0.72), (0.78, 0.70), (0.60, 0.62), (0.79, 0.81), 0.5, 4.0, 100)
            + _rows(1, (0.60, 0.55), (0.65, 0.60), (0.70, 0.71), (0.75, 0.66), (0.72, 0.74), 2.0, 3.0, 40))
    values = experiment.claim_values(rows, types.SimpleNamespace(seeds=[0, 1]))
    want = {
        0: dict(p1_sib_learns=0.70, h1_nmi_vs_sib=0.05, h2_acc_vs_best=0.01, m1_ib_speedup=8.0,
                m2_structure_term=0.03, m3_ball_fraction=0.1),
        1: dict(p1_sib_learns=0.71, h1_nmi_vs_sib=-0.16, h2_acc_vs_best=-0.15, m1_ib_speedup=1.5,
                m2_structure_term=-0.05, m3_ball_fraction=0.04),
    }
    declared = load_chapter("sgb_ib")["claims"]
    for seed in (0, 1):
        assert set(values[seed]) == {c["id"] for c in declared}
        for cid, v in want[seed].items():
            assert values[seed][cid] == pytest.approx(v), (seed, cid)


def test_graders_accept_reference_and_reject_wrong():
    def impurity(P, labels):
        i_hat, i_x = method.ball_mi_terms(np.asarray(P), np.asarray(labels))
        return i_hat / i_x if i_x > 0 else 0.0

    exercises.check_view_impurity(impurity)
    with pytest.raises(AssertionError):
        exercises.check_view_impurity(lambda P, labels: 1.0 - impurity(P, labels))

    def relevance(pb, p, pt, q):
        p, q = np.asarray(p), np.asarray(q)
        m = (pb * p + pt * q) / (pb + pt)
        kl = lambda a, b: np.sum(a * (np.log(a + 1e-12) - np.log(b + 1e-12)))  # noqa: E731
        return pb * kl(p, m) + pt * kl(q, m)

    exercises.check_relevance_cost(relevance)
    with pytest.raises(AssertionError):
        exercises.check_relevance_cost(lambda pb, p, pt, q: relevance(pt, p, pb, q))


def test_ib_restarts_with_no_more_items_than_clusters():
    w = np.array([0.5, 0.3, 0.2])
    P = np.eye(3)
    T, F, sweeps = method.ib_restarts(w, [P], 5, P, seed=0)
    np.testing.assert_array_equal(T, [0, 1, 2])
    assert sweeps == 0 and F == pytest.approx(method.ib_objective(w, [P], T, 5))
