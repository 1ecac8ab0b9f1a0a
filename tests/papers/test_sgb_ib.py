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


def _rows(seed, table):
    """Hand-made rows: table maps (data, method) to a dict of the fields claim_values reads."""
    base = dict(seed=seed, n=1000, t_ib=np.nan, m=np.nan, converged=np.nan, F=np.nan, F_oracle=np.nan,
                F_point=np.nan, F_point_truth=np.nan)
    return [dict(base, data=d, method=name, **table[(d, name)]) for d, name in experiment.METHODS]


def _table(shift):
    c = {"sgb_ib": dict(acc=0.70, nmi=0.66, t_ib=0.5, m=50, converged=1.0, F=0.09, F_oracle=0.08),
         "sgb_ib lambda=0": dict(acc=0.71, nmi=0.68), "sgb_ib purity-gain rule": dict(acc=0.69, nmi=0.65),
         "ball oracle": dict(acc=0.87, nmi=0.77), "oracle start": dict(acc=0.68, nmi=0.65),
         "point sib": dict(acc=0.80, nmi=0.80 + shift, t_ib=4.0, F_point=0.097, F_point_truth=0.086),
         "kmeans": dict(acc=0.68, nmi=0.69), "spectral": dict(acc=0.79, nmi=0.84)}
    z = {"sgb_ib": dict(acc=0.61, nmi=0.64, converged=0.5), "ball oracle": dict(acc=0.88, nmi=0.78),
         "point sib": dict(acc=0.79, nmi=0.78)}
    return {**{("clean", k): v for k, v in c.items()}, **{("noisy", k): v for k, v in z.items()}}


def test_claim_values_by_hand():
    rows = _rows(0, _table(0.0)) + _rows(1, _table(0.01))
    values = experiment.claim_values(rows, types.SimpleNamespace(seeds=[0, 1]))
    want = {
        0: dict(p1_sib_learns=0.80, p2_sib_learns_noisy=0.78, c1_ball_ib_converges=0.75, p3_room_nmi=-0.03,
                p4_room_acc=0.07, p5_room_nmi_noisy=0.0, p6_noise_hurts=0.02, h1_nmi_vs_sib=-0.14,
                h2_acc_vs_best=-0.10, h3_nmi_vs_sib_noisy=-0.14, m2_structure_term=-0.02,
                m4_noise_suppression=0.5 * 0.02 - 0.02, m5_objective_ranks_oracle=-0.01, m1_ib_speedup=8.0,
                m3_ball_fraction=0.05, x1_split_rule=0.01, x2_objective_vs_digits=-0.011,
                x3_descent_from_oracle=-0.19),
        1: dict(p1_sib_learns=0.81, p3_room_nmi=-0.04, p6_noise_hurts=0.03, h1_nmi_vs_sib=-0.15,
                m4_noise_suppression=0.5 * 0.03 - 0.02),
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


# ---- the objective's parts, the draw-and-merge updates and the restarts, by hand ---------------------------


def _tiny_ib(seed=0, m=4):
    rng = np.random.default_rng(seed)
    weight = rng.dirichlet(np.ones(m))
    dists = [rng.dirichlet(np.ones(2), size=m), rng.dirichlet(np.ones(3), size=m)]
    A = rng.random((m, m))
    return weight, dists, (A + A.T) * (1 - np.eye(m))


def test_ib_objective_is_the_weighted_sum_of_hand_computed_parts():
    """F(T) = mean_v I(T; Y_v) - beta^-1 H(T) + lam Omega(T), each part from its definition: I from the joint
    p(t, y) = sum_b p(b) [T_b = t] p(y | b), H(T) from p(t), Omega the share of graph weight inside clusters."""
    weight, dists, A = _tiny_ib()
    T = np.array([0, 1, 0, 1])
    pt = np.array([weight[T == t].sum() for t in (0, 1)])
    mi = []
    for D in dists:
        joint = np.array([(weight[T == t, None] * D[T == t]).sum(0) for t in (0, 1)])
        mi.append(float((joint * np.log(joint / (pt[:, None] * joint.sum(0)[None]))).sum()))
    H = -float((pt * np.log(pt)).sum())
    omega = (2 * A[0, 2] + 2 * A[1, 3]) / A.sum()
    assert method.ib_objective(weight, dists, T, 2) == pytest.approx(np.mean(mi) - 0.01 * H, abs=1e-9)
    F = method.ib_objective(weight, dists, T, 2, beta_inv=0.2, lam=0.7, A=A)
    assert F == pytest.approx(np.mean(mi) - 0.2 * H + 0.7 * omega, abs=1e-9)
    assert method.ib_objective(weight, dists, T, 2, beta_inv=0.2, lam=0.0, A=A) == pytest.approx(F - 0.7 * omega)
    assert 0.7 * omega > 0.1 and 0.2 * H > 0.1 and abs(mi[0] - mi[1]) > 1e-3  # every term moves the total


def _reference_sib(weight, dists, K, T, rng, sweeps, beta_inv, lam, A):
    """sIB written from its definition: in each sweep's random order, every item not alone in its cluster goes to
    the cluster whose F after the move is largest (F recomputed from scratch each time)."""
    T, moved, objective = T.copy(), [], []
    for _ in range(sweeps):
        n_moved = 0
        for b in rng.permutation(len(weight)):
            if (T == T[b]).sum() == 1:
                continue
            scores = []
            for t in range(K):
                trial = T.copy()
                trial[b] = t
                scores.append(method.ib_objective(weight, dists, trial, K, beta_inv, lam, A))
            n_moved += int(np.argmax(scores)) != T[b]
            T[b] = int(np.argmax(scores))
        moved.append(n_moved)
        objective.append(method.ib_objective(weight, dists, T, K, beta_inv, lam, A))
    return T, moved, objective


def test_draw_and_merge_second_sweep_matches_sib_from_scratch_and_never_lowers_the_objective():
    """Two sweeps of ``draw_and_merge`` (with the structure term) give the assignment of sIB recomputed from
    scratch, with the cluster statistics carried over from sweep 1 (items move in both sweeps); F rises."""
    weight, dists, A = _tiny_ib(seed=3, m=12)
    init = np.array([0, 1, 2] * 4)
    args = dict(beta_inv=0.05, lam=0.2, A=A)
    T, sweeps = method.draw_and_merge(weight, dists, 3, init, np.random.default_rng(7), max_sweeps=2, tol=0.0, **args)
    want, moved, objective = _reference_sib(weight, dists, 3, init, np.random.default_rng(7), 2, **args)
    assert sweeps == 2 and moved[0] > 0 and moved[1] > 0
    np.testing.assert_array_equal(T, want)
    start = method.ib_objective(weight, dists, init, 3, **args)
    assert start < objective[0] < objective[1]


def test_ib_restarts_keeps_the_run_with_the_largest_objective():
    """Restart r is the run of ``seed + r`` alone; the result is the one of largest F and the sweeps add up."""
    rng = np.random.default_rng(9)
    weight = rng.dirichlet(np.ones(14))
    dists = [rng.dirichlet(np.ones(3) * 0.5, size=14), rng.dirichlet(np.ones(4) * 0.5, size=14)]
    Z = np.concatenate(dists, axis=1)
    runs = [method.ib_restarts(weight, dists, 3, Z, seed=5 + r, restarts=1, max_sweeps=1) for r in range(4)]
    T, F, sweeps = method.ib_restarts(weight, dists, 3, Z, seed=5, restarts=4, max_sweeps=1)
    Fs = [run[1] for run in runs]
    assert max(Fs) - min(Fs) > 1e-6  # the restarts differ
    best = int(np.argmax(Fs))
    assert F == max(Fs) and np.array_equal(T, runs[best][0]) and sweeps == sum(run[2] for run in runs)


def test_ball_statistics_by_hand():
    """p(b) = |S_b| / n, p(y_v | b) = the members' mean, centre = mean of the concatenated rows, radius = mean
    distance of the members to the centre; every sample knows its ball."""
    P1 = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.2, 0.8]])
    P2 = np.array([[0.1, 0.9], [0.3, 0.7], [0.6, 0.4], [0.6, 0.4]])
    s = method.ball_statistics([P1, P2], [np.array([0, 1, 3]), np.array([2])])
    np.testing.assert_allclose(s.weight, [0.75, 0.25])
    np.testing.assert_allclose(s.dists[0], [[0.4, 0.6], [0.5, 0.5]])
    np.testing.assert_allclose(s.dists[1], [[1 / 3, 2 / 3], [0.6, 0.4]])
    np.testing.assert_allclose(s.centre, [[0.4, 0.6, 1 / 3, 2 / 3], [0.5, 0.5, 0.6, 0.4]])
    Z = np.concatenate([P1, P2], axis=1)[[0, 1, 3]]
    np.testing.assert_allclose(s.radius, [np.linalg.norm(Z - s.centre[0], axis=1).mean(), 0.0])
    np.testing.assert_array_equal(s.of_sample, [0, 0, 1, 0])


def _reference_balls(Ps, pseudo, theta, n_min, accept=True):
    """Ball generation from its description: a ball of purity 1 - mean_v iota_v below theta with at least 2 n_min
    members is split by 2-means from the centroids of the two largest pseudo-label groups of its most impure view,
    and the split is kept when both children have n_min members and their size-weighted purity beats the ball's."""
    Z = np.concatenate(Ps, axis=1)
    purity = lambda idx: 1.0 - method.impurity(Ps, pseudo, idx).mean()  # noqa: E731
    queue, balls = [np.arange(len(Z))], []
    while queue:
        idx = queue.pop(0)
        lab = pseudo[int(np.argmax(method.impurity(Ps, pseudo, idx)))][idx]
        ks, counts = np.unique(lab, return_counts=True)
        if purity(idx) >= theta or len(idx) < 2 * n_min or len(ks) < 2:
            balls.append(idx)
            continue
        top = [ks[j] for j in np.argsort(-counts, kind="stable")[:2]]
        first = method.two_means(Z[idx], np.stack([Z[idx[lab == k]].mean(axis=0) for k in top]))
        a, b = idx[first], idx[~first]
        ok = min(len(a), len(b)) >= n_min and (not accept or (len(a) * purity(a) + len(b) * purity(b)) / len(idx)
                                                > purity(idx))
        queue += [a, b] if ok else []
        balls += [] if ok else [idx]
    return balls


def test_generate_balls_follows_the_split_rule_on_random_views():
    """On random two-view data with noisy pseudo-labels (five balls) the balls are those of the split rule written
    out; a view whose pseudo-labels say nothing (one label) is not the one that picks the split."""
    rng = np.random.default_rng(13)
    centres = rng.dirichlet(np.ones(6), size=4)
    member = rng.integers(0, 4, size=80)
    P1 = np.array([rng.dirichlet(10 * centres[k] + 0.5) for k in member])
    P2 = np.array([rng.dirichlet(10 * centres[k, :3] + 0.5) for k in member])
    pseudo = [np.where(rng.random(80) < 0.9, member, rng.integers(0, 4, size=80)),
              np.where(rng.random(80) < 0.9, member % 3, rng.integers(0, 3, size=80))]
    balls = method.generate_balls([P1, P2], pseudo, theta=0.9, n_min=5, accept=True)
    want = _reference_balls([P1, P2], pseudo, 0.9, 5)
    assert len(balls) == 5
    assert [b.tolist() for b in balls] == [b.tolist() for b in want]
    flat = np.zeros(80, int)
    two = method.generate_balls([P1, P1], [flat, pseudo[0]], theta=0.9, n_min=5, accept=True)  # view 1 is pure
    assert len(two) > 1


def _random_views(seed=13, n=80):
    rng = np.random.default_rng(seed)
    centres = rng.dirichlet(np.ones(6), size=4)
    member = rng.integers(0, 4, size=n)
    P1 = np.array([rng.dirichlet(10 * centres[k] + 0.5) for k in member])
    P2 = np.array([rng.dirichlet(10 * centres[k, :3] + 0.5) for k in member])
    pseudo = [np.where(rng.random(n) < 0.9, member, rng.integers(0, 4, size=n)),
              np.where(rng.random(n) < 0.9, member % 3, rng.integers(0, 3, size=n))]
    return [P1, P2], pseudo


def test_literal_split_rule_splits_while_impure_and_refines_the_purity_gain_rule():
    """The literal rule (the default) gives the balls of the split rule written out without the purity-gain test,
    at least as many as with it, and every ball it keeps is pure, too small to split, or would leave a child under
    n_min."""
    Ps, pseudo = _random_views()
    literal = method.generate_balls(Ps, pseudo, theta=0.9, n_min=5)
    want = _reference_balls(Ps, pseudo, 0.9, 5, accept=False)
    assert [b.tolist() for b in literal] == [b.tolist() for b in want]
    gain = method.generate_balls(Ps, pseudo, theta=0.9, n_min=5, accept=True)
    assert len(literal) > len(gain)
    assert sorted(np.concatenate(literal).tolist()) == list(range(80))


def _batch_problem(seed, m=15, K=3):
    rng = np.random.default_rng(seed)
    weight = rng.dirichlet(np.ones(m))
    dists = [rng.dirichlet(np.ones(4) * 0.5, size=m), rng.dirichlet(np.ones(3) * 0.5, size=m)]
    A = rng.random((m, m)) * (rng.random((m, m)) < 0.4)
    A = (A + A.T) * (1 - np.eye(m))
    return weight, dists, A, rng.integers(0, K, size=m)


@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_draw_and_merge_batch_rows_equal_their_runs_alone(lam):
    """Runs stepped together (each with its own items, graph, start and sweep order, stopping at different sweeps)
    give exactly what each gives alone, and what sIB from scratch gives."""
    K, probs = 3, [_batch_problem(s) for s in range(4)]
    alone = [method.draw_and_merge(w, d, K, init, np.random.default_rng(20 + i), 0.05, lam, A, max_sweeps=20)
             for i, (w, d, A, init) in enumerate(probs)]
    T, sweeps = method.draw_and_merge_batch(np.stack([p[0] for p in probs]),
                                            [np.stack([p[1][v] for p in probs]) for v in range(2)], K,
                                            np.stack([p[3] for p in probs]),
                                            [np.random.default_rng(20 + i) for i in range(4)], 0.05, lam,
                                            np.stack([p[2] for p in probs]), max_sweeps=20)
    for i, (Ti, si) in enumerate(alone):
        np.testing.assert_array_equal(T[i], Ti)
        assert sweeps[i] == si
    assert len(set(sweeps.tolist())) > 1  # the rows stop at different sweeps
    w, d, A, init = probs[0]
    ref, _, _ = _reference_sib(w, d, K, init, np.random.default_rng(20), int(sweeps[0]), 0.05, lam, A)
    np.testing.assert_array_equal(T[0], ref)


def test_draw_and_merge_move_is_a_descent_step_of_minus_F():
    """One optimiser step (one item drawn and merged) raises F by exactly the cost it saves, never lowers it; a
    sign error or a dropped term in the cost would break the equality."""
    w, d, A, init = _batch_problem(5, m=10)
    args = dict(beta_inv=0.05, lam=0.3, A=A)
    T = init.copy()
    for b in range(10):
        if (T == T[b]).sum() == 1:
            continue
        before = method.ib_objective(w, d, T, 3, **args)
        rest = np.delete(np.arange(10), b)
        pt = np.bincount(T[rest], weights=w[rest], minlength=3)
        St = [np.stack([np.bincount(T[rest], weights=w[rest] * D[rest, y], minlength=3) for y in range(D.shape[1])],
                       1) for D in d]
        link = 2 * np.bincount(T, weights=A[b], minlength=3) / A.sum()
        cost = method.merge_costs(w[b], [D[b] for D in d], pt, St, 0.05, 0.3, link)
        t1 = int(np.argmin(cost))
        after_T = T.copy()
        after_T[b] = t1
        after = method.ib_objective(w, d, after_T, 3, **args)
        assert after - before == pytest.approx(cost[T[b]] - cost[t1], abs=1e-12) and after >= before - 1e-12
        T = after_T


def test_ib_restarts_many_equals_ib_restarts_per_problem():
    rng = np.random.default_rng(9)
    probs = []
    for s in range(3):
        w = rng.dirichlet(np.ones(14))
        d = [rng.dirichlet(np.ones(3) * 0.5, size=14), rng.dirichlet(np.ones(4) * 0.5, size=14)]
        probs.append((w, d, np.concatenate(d, axis=1), None, 5 + s))
    many = method.ib_restarts_many(probs, 3, restarts=3, max_sweeps=10)
    for (w, d, Z, _, seed), out in zip(probs, many):
        T, F, sweeps = method.ib_restarts(w, d, 3, Z, seed, restarts=3, max_sweeps=10)
        np.testing.assert_array_equal(out["T"], T)
        assert out["F"] == pytest.approx(F) and out["sweeps"].sum() == sweeps and len(out["sweeps"]) == 3


def test_corrupt_views_mixes_one_view_of_a_fifth_of_the_samples_with_noise():
    views, _ = task.digits_views(n=200, seed=0)
    noisy, which = task.corrupt_views(views, seed=3)
    assert (which >= 0).sum() == 40 and set(np.unique(which[which >= 0])) <= {0, 1, 2}
    for v, (X, Xn) in enumerate(zip(views, noisy)):
        hit, clean = which == v, which != v
        np.testing.assert_array_equal(Xn[clean], X[clean])
        assert hit.any()
        P, Pn = method.conditional_distributions(X[hit]), method.conditional_distributions(Xn[hit])
        q = (Pn - 0.5 * P) / 0.5  # the noise profile: a distribution, not the sample's own
        assert (q >= -1e-12).all() and np.allclose(q.sum(axis=1), 1.0) and not np.allclose(q, P)
        np.testing.assert_allclose(Xn[hit].sum(axis=1), X[hit].sum(axis=1))
    again, which2 = task.corrupt_views(views, seed=3)
    assert np.array_equal(which, which2) and all(np.array_equal(a, b) for a, b in zip(again, noisy))
    assert not np.array_equal(task.corrupt_views(views, seed=4)[1], which)


def test_oracle_labels_and_point_objective():
    y = np.array([0, 0, 1, 1, 1, 2])
    balls = [np.array([0, 1, 2]), np.array([3, 4, 5])]
    np.testing.assert_array_equal(experiment.oracle_labels(y, balls), [0, 1])
    P = np.random.default_rng(0).dirichlet(np.ones(4), size=6)
    labels = np.array([7, 7, 3, 3, 3, 9])  # any label values: relabelled to 0..K-1
    want = method.ib_objective(np.full(6, 1 / 6), [P], np.array([1, 1, 0, 0, 0, 2]), 3, 0.01)
    assert experiment.point_objective([P], labels, 3, 0.01) == pytest.approx(want)
