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


# ---- the graph, the IB representation and the pipeline, against references written out (issue 44) -------------


def _reference_graph(centre, radius, k):
    """The GB graph from its description, pair by pair: linked when the balls overlap or one is among the other's
    k nearest centres; weight exp(-d^2 / 2 h^2) with h the median distance over the linked pairs."""
    m = len(centre)
    d = np.array([[np.sqrt(((centre[a] - centre[b]) ** 2).sum()) for b in range(m)] for a in range(m)])
    linked = np.zeros((m, m), bool)
    for a in range(m):
        others = sorted((d[a, b], b) for b in range(m) if b != a)
        for _, b in others[:k]:
            linked[a, b] = linked[b, a] = True
        for b in range(m):
            if b != a and d[a, b] <= radius[a] + radius[b]:
                linked[a, b] = True
    if not linked.any():
        return np.zeros((m, m))
    h = np.median([d[a, b] for a in range(m) for b in range(m) if linked[a, b]])
    return np.where(linked, np.exp(-d ** 2 / (2 * h ** 2)), 0.0)


def test_structure_graph_equals_the_pairwise_reference():
    """A_bb' = exp(-d^2 / 2 h^2) on the pairs linked by overlap (touching included) or by the k nearest centres
    (default k = 5, fewer when there are fewer balls), h the median linked distance, zero elsewhere; one ball alone
    has no edge."""
    rng = np.random.default_rng(3)
    centre = rng.random((9, 3))
    radius = rng.random(9) * 0.8 * np.array([1, 0, 0, 1, 0, 0, 0, 0, 1])  # three large balls: overlaps beyond the knn
    for k in (1, 2, 5):
        np.testing.assert_allclose(method.structure_graph(centre, radius, k=k), _reference_graph(centre, radius, k),
                                   rtol=1e-12, atol=0)
    np.testing.assert_allclose(method.structure_graph(centre, np.zeros(9)), _reference_graph(centre, np.zeros(9), 5),
                               rtol=1e-12, atol=0)  # the default k is 5
    assert not np.allclose(_reference_graph(centre, np.zeros(9), 5), _reference_graph(centre, np.zeros(9), 6))
    line = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])  # three balls, k = 5 > m - 1: every pair linked
    A = method.structure_graph(line, np.zeros(3))
    h = 2.0  # median of the distances 1, 3, 2
    np.testing.assert_allclose(A, np.exp(-np.array([[0, 1, 9], [1, 0, 4], [9, 4, 0]]) / (2 * h ** 2)) * (1 - np.eye(3)))
    touching = method.structure_graph(np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 0.0]]), np.array([0.5, 0.5, 0.0]), k=0)
    assert touching[0, 1] == touching[1, 0] == pytest.approx(np.exp(-0.5))  # the only link: h = d = 1
    assert touching[0, 2] == touching[1, 2] == 0.0
    uneven = method.structure_graph(np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([0.9, 0.2]), k=0)
    assert uneven[0, 1] == uneven[1, 0] == pytest.approx(np.exp(-0.5))  # 1 <= 0.9 + 0.2
    np.testing.assert_array_equal(method.structure_graph(np.zeros((1, 2)), np.zeros(1)), np.zeros((1, 1)))


def test_conditional_distributions_normalise_small_rows_quietly():
    """Rows with a sum below 1 are normalised too; an all-zero row becomes uniform without a division warning; the
    result is a float matrix for integer or object input."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P = method.conditional_distributions(np.array([[0.1, 0.3], [0.0, 0.0], [0.5, 0.0]]))
    np.testing.assert_allclose(P, [[0.25, 0.75], [0.5, 0.5], [1.0, 0.0]])
    Q = method.conditional_distributions(np.array([[1, 3], [2, 2]], dtype=object))
    assert Q.dtype == float
    np.testing.assert_allclose(Q, [[0.25, 0.75], [0.5, 0.5]])


def _views_of_groups(seed=39, n=60):
    """Two non-negative views (counts, so the IB representation normalises them) of n samples from three groups."""
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 3, size=n)
    profile1, profile2 = rng.dirichlet(np.ones(6) * 5, size=3), rng.dirichlet(np.ones(4) * 5, size=3)
    return [np.array([rng.multinomial(10, profile1[g]) for g in group], float),
            np.array([rng.multinomial(10, profile2[g]) for g in group], float)]


def _check_pipeline(out, views, K, seed, theta, n_min, beta_inv, lam, restarts, max_sweeps, pseudo, accept):
    """The pipeline's outputs against its pieces called one by one."""
    Ps = [method.conditional_distributions(X) for X in views]
    balls = method.generate_balls(Ps, pseudo, theta, n_min, accept)
    assert [b.tolist() for b in out["balls"]] == [b.tolist() for b in balls] and out["m"] == len(balls)
    stats = method.ball_statistics(Ps, balls)
    np.testing.assert_allclose(out["stats"].weight, stats.weight)
    np.testing.assert_allclose(out["stats"].centre, stats.centre)
    A = method.structure_graph(stats.centre, stats.radius) if lam else None
    assert (out["A"] is None) if A is None else np.allclose(out["A"], A)
    T, F, sweeps = method.ib_restarts(stats.weight, stats.dists, K, stats.centre, seed, restarts, beta_inv, lam, A,
                                      max_sweeps)
    np.testing.assert_array_equal(out["T"], T)
    assert out["F"] == pytest.approx(F) and out["sweeps"] == sweeps == out["restart_sweeps"].sum()
    assert len(out["restart_sweeps"]) == (restarts if len(balls) > K else 0)
    np.testing.assert_array_equal(out["labels"], T[stats.of_sample])
    assert out["t_balls"] >= 0 and out["t_ib"] >= 0


def test_sgb_ib_pipeline_composes_its_pieces_with_its_defaults_and_arguments():
    """sgb_ib = IB representation, K-means pseudo-labels (seeded, one label set per view), granular balls, ball
    statistics, the graph (only with lam > 0), the best of the IB restarts, each sample labelled by its ball's
    cluster; with its defaults (theta 0.9, n_min 8, the literal split rule, beta^-1 0.01, lam 0.05, 5 restarts,
    30 sweeps) and with every argument passed."""
    views = _views_of_groups()
    Ps = [method.conditional_distributions(X) for X in views]
    pseudo = method.pseudo_labels(Ps, 3, seed=4)
    assert [len(p) for p in pseudo] == [60, 60] and all(set(p.tolist()) == {0, 1, 2} for p in pseudo)
    assert all(np.array_equal(p, q) for p, q in zip(pseudo, method.pseudo_labels(Ps, 3, seed=4)))
    from time import perf_counter

    start = perf_counter()
    out = method.sgb_ib(views, 3, seed=4)
    elapsed = perf_counter() - start
    assert out["t_balls"] + out["t_ib"] <= elapsed  # the two phases' wall seconds, within the call's
    assert out["m"] == 5  # n_min 9 or the purity-gain rule would give other balls
    _check_pipeline(out, views, 3, 4, 0.9, 8, 0.01, 0.05, 5, 30, pseudo, False)
    mine = [np.arange(60) % 3, (np.arange(60) // 2) % 3]  # labels that explain little: purity 0.96 >= theta 0.9
    out = method.sgb_ib(views, 3, seed=4, pseudo=mine)
    assert out["m"] == 1 and out["labels"].tolist() == [0] * 60
    _check_pipeline(out, views, 3, 4, 0.9, 8, 0.01, 0.05, 5, 30, mine, False)
    p2 = method.pseudo_labels(Ps, 2, seed=1)
    out = method.sgb_ib(views, 2, seed=1, theta=0.95, n_min=4, beta_inv=0.1, lam=0.0, restarts=2, max_sweeps=1,
                        pseudo=p2, accept=True)
    assert out["m"] == 3 and (out["restart_sweeps"] == 1).all()
    _check_pipeline(out, views, 2, 1, 0.95, 4, 0.1, 0.0, 2, 1, p2, True)


def _sparse_problem(seed=0, m=12):
    """Items whose distributions have exact zeros (one of them one-hot) and a symmetric graph with a non-zero
    diagonal (a ball linked to itself)."""
    rng = np.random.default_rng(seed)
    weight = rng.dirichlet(np.ones(m))
    dists = []
    for d in (4, 3):
        D = rng.dirichlet(np.ones(d) * 0.7, size=m) * (rng.random((m, d)) < 0.7)
        D[0] = np.eye(d)[0]
        D[D.sum(1) == 0, 0] = 1.0
        dists.append(D / D.sum(1, keepdims=True))
    A = rng.random((m, m)) * (rng.random((m, m)) < 0.5)
    return weight, dists, A + A.T


def test_draw_and_merge_matches_sib_on_sparse_rows_with_an_empty_cluster_and_a_self_linked_graph():
    """sIB from scratch is matched, without a numerical warning, when distributions have exact zeros, one cluster
    starts empty (an item moves into it), the graph has a non-zero diagonal and beta^-1 is large; one sweep is one
    sweep; the defaults are beta^-1 0.01 and lam 0 (the graph ignored); float starts are read as labels."""
    import warnings

    w, d, A = _sparse_problem()
    init = np.arange(12) % 3  # cluster 3 empty
    args = dict(beta_inv=0.3, lam=0.4, A=A)
    ref, moved, _ = _reference_sib(w, d, 4, init, np.random.default_rng(7), 2, **args)
    assert (ref == 3).any() and np.diag(A).sum() > 0 and moved[1] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        T, sweeps = method.draw_and_merge(w, d, 4, init, np.random.default_rng(7), max_sweeps=2, tol=0.0, **args)
        np.testing.assert_array_equal(T, ref)
        T1, s1 = method.draw_and_merge(w, d, 4, init, np.random.default_rng(7), max_sweeps=1, tol=0.0, **args)
    one, _, _ = _reference_sib(w, d, 4, init, np.random.default_rng(7), 1, **args)
    np.testing.assert_array_equal(T1, one)
    assert (sweeps, s1) == (2, 1) and not np.array_equal(one, ref)
    plain, _, _ = _reference_sib(w, d, 4, init, np.random.default_rng(7), 2, 0.01, 0.0, None)
    T, _ = method.draw_and_merge(w, d, 4, init.astype(float), np.random.default_rng(7), A=A, max_sweeps=2, tol=0.0)
    np.testing.assert_array_equal(T, plain)
    assert not np.array_equal(plain, ref)
    T, sweeps = method.draw_and_merge_batch(w[None], [D[None] for D in d], 4, init[None], [np.random.default_rng(7)],
                                            A=A[None], max_sweeps=2, tol=0.0)
    np.testing.assert_array_equal(T[0], plain)
    assert sweeps.dtype.kind == "i" and sweeps.tolist() == [2]


def test_draw_and_merge_graph_term_needs_lam_and_a_graph_and_is_scale_free():
    """With lam > 0 but no graph (None, or all zeros) the run is the one with lam = 0; scaling the graph by 1e-3
    changes nothing (link_t is a share of sum A)."""
    w, d, A = _sparse_problem(3)
    init = np.arange(12) % 3
    run = lambda lam, graph: method.draw_and_merge(w, d, 4, init, np.random.default_rng(2), 0.05, lam, graph,  # noqa: E731
                                                   max_sweeps=3, tol=0.0)[0]
    plain = run(0.0, None)
    np.testing.assert_array_equal(run(0.5, None), plain)
    np.testing.assert_array_equal(run(0.5, np.zeros((12, 12))), plain)
    with_graph = run(0.5, A)
    np.testing.assert_array_equal(run(0.5, A * 1e-3), with_graph)
    assert not np.array_equal(with_graph, plain)


def test_draw_and_merge_stops_at_the_first_sweep_moving_fewer_than_tol_m():
    """The stopping rule: the run ends after the first sweep in which fewer than tol * m items moved (strictly
    fewer), counting every move of the sweep; with the default tol (0.005) and m = 16, after the first sweep with
    no move."""
    w, d, _, _ = _batch_problem(20, m=16)
    init = np.arange(16) % 3
    _, moved, _ = _reference_sib(w, d, 3, init, np.random.default_rng(5), 8, 0.05, 0.0, None)
    assert moved[-1] == 0
    first_still = moved.index(0) + 1
    T, sweeps = method.draw_and_merge(w, d, 3, init, np.random.default_rng(5), 0.05)
    assert sweeps == first_still
    j = next(i for i in range(1, len(moved)) if moved[i] > 0)  # a later sweep that still moves items
    tol = moved[j] / 16  # exact in binary: tol * m == moved[j], so sweep j itself does not stop the run
    want = next(i for i in range(len(moved)) if moved[i] < moved[j]) + 1
    assert want > j + 1
    assert method.draw_and_merge(w, d, 3, init, np.random.default_rng(5), 0.05, tol=tol)[1] == want


def _reference_restarts(weight, dists, K, Z, seed, restarts, beta_inv, lam, A, max_sweeps):
    """Optimisation steps 1 and 3 written out: restart r starts at K-means on Z weighted by p(b) (one init, random
    state seed + r), sweeps in the order of default_rng(seed + r); the run of largest F wins."""
    from sklearn.cluster import KMeans

    runs = []
    for r in range(restarts):
        with method.one_openmp_thread():  # the same fit, without waiting on OpenMP threads
            init = KMeans(K, n_init=1, random_state=seed + r).fit_predict(Z, sample_weight=weight)
        T, sweeps = method.draw_and_merge(weight, dists, K, init, np.random.default_rng(seed + r), beta_inv, lam, A,
                                          max_sweeps)
        runs.append((method.ib_objective(weight, dists, T, K, beta_inv, lam, A), T, sweeps))
    best = max(range(restarts), key=lambda r: runs[r][0])
    return runs[best][1], runs[best][0], [s for _, _, s in runs]


def test_ib_restarts_with_the_graph_equals_the_restarts_written_out():
    """ib_restarts with the structure term, uneven weights and a sweep cap: the best of the runs from weighted
    K-means starts (F with the graph), the sweeps of every run added; the defaults are 5 restarts, lam 0 (a graph
    passed alone is ignored); ib_restarts_many gives the same per problem, a problem with no more items than
    clusters (m = K) keeps one item per cluster beside one that is optimised, and problems of different sizes are
    refused."""
    rng = np.random.default_rng(17)
    m, K = 14, 3
    weight = rng.dirichlet(np.ones(m) * 0.3)  # uneven: the weighted K-means start differs from the plain one
    dists = [rng.dirichlet(np.ones(3) * 0.5, size=m), rng.dirichlet(np.ones(4) * 0.5, size=m)]
    Z = np.concatenate(dists, axis=1)
    A = method.structure_graph(Z, np.zeros(m), k=3)
    T, F, sweeps = method.ib_restarts(weight, dists, K, Z, seed=3, restarts=3, beta_inv=0.05, lam=0.5, A=A,
                                      max_sweeps=2)
    want_T, want_F, want_sweeps = _reference_restarts(weight, dists, K, Z, 3, 3, 0.05, 0.5, A, 2)
    np.testing.assert_array_equal(T, want_T)
    assert F == pytest.approx(want_F) and sweeps == sum(want_sweeps) and 2 in want_sweeps
    T0, F0, s0 = method.ib_restarts(weight, dists, K, Z, seed=3, A=A)
    want_T0, want_F0, want_s0 = _reference_restarts(weight, dists, K, Z, 3, 5, 0.01, 0.0, None, 30)
    np.testing.assert_array_equal(T0, want_T0)
    assert F0 == pytest.approx(want_F0) and s0 == sum(want_s0)
    small = (weight[:K] / weight[:K].sum(), [D[:K] for D in dists], Z[:K], A[:K, :K] + np.eye(K), 0)
    many = method.ib_restarts_many([small, (weight, dists, Z, A, 3)], K, restarts=3, beta_inv=0.05, lam=0.5,
                                   max_sweeps=2)
    np.testing.assert_array_equal(many[0]["T"], np.arange(K))
    assert many[0]["sweeps"].dtype.kind == "i" and len(many[0]["sweeps"]) == 0
    assert many[0]["F"] == pytest.approx(method.ib_objective(small[0], small[1], np.arange(K), K, 0.05, 0.5, small[3]))
    np.testing.assert_array_equal(many[1]["T"], want_T)
    assert many[1]["F"] == pytest.approx(want_F) and many[1]["sweeps"].tolist() == want_sweeps
    defaults = method.ib_restarts_many([(weight, dists, Z, A, 3)], K)[0]
    np.testing.assert_array_equal(defaults["T"], want_T0)
    assert defaults["sweeps"].tolist() == want_s0
    with pytest.raises(ValueError, match="^ib_restarts_many steps problems with the same number of items only$"):
        method.ib_restarts_many([(weight, dists, Z, None, 0), (weight[:-1], [D[:-1] for D in dists], Z[:-1], None, 0)],
                                K, restarts=1)


def test_ib_objective_graph_term_needs_lam_and_a_nonzero_graph_and_is_scale_free():
    """Omega enters only with lam > 0 and a graph of positive total: lam defaults to 0, no graph or an all-zero
    graph adds nothing, and Omega is a share of sum A (scaling A changes nothing)."""
    weight, dists, A = _tiny_ib()
    T = np.array([0, 1, 0, 1])
    plain = method.ib_objective(weight, dists, T, 2, beta_inv=0.2)
    assert method.ib_objective(weight, dists, T, 2, beta_inv=0.2, A=A) == pytest.approx(plain)
    assert method.ib_objective(weight, dists, T, 2, 0.2, 0.7, None) == pytest.approx(plain)
    assert method.ib_objective(weight, dists, T, 2, 0.2, 0.7, np.zeros((4, 4))) == pytest.approx(plain)
    full = method.ib_objective(weight, dists, T, 2, 0.2, 0.7, A)
    assert method.ib_objective(weight, dists, T, 2, 0.2, 0.7, A * 1e-3) == pytest.approx(full)
    assert full - plain > 0.1


def test_merge_costs_with_an_empty_cluster_zeros_and_defaults_are_the_exact_drop():
    """The cost is the exact drop of F also for an empty cluster (the item alone there) and rows with exact zeros;
    the defaults are beta^-1 0.01 and lam 0 (a link passed alone is ignored), and with lam > 0 but no link the
    graph term is left out."""
    import warnings

    w, d, A = _sparse_problem(1, m=8)
    A = A * (1 - np.eye(8))
    T = np.array([0, 0, 1, 1, 0, 1, 1, 0])  # cluster 2 empty; item 0 (one-hot) is drawn
    rest = np.arange(1, 8)
    pt = np.bincount(T[rest], weights=w[rest], minlength=3)
    St = [np.stack([np.bincount(T[rest], weights=w[rest] * D[rest, y], minlength=3) for y in range(D.shape[1])], 1)
          for D in d]
    link = 2 * np.bincount(T[rest], weights=A[0, rest], minlength=3) / A.sum()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for beta_inv, lam, kw in ((0.3, 0.4, dict(beta_inv=0.3, lam=0.4, link=link)), (0.01, 0.0, dict(link=link))):
            costs = method.merge_costs(w[0], [D[0] for D in d], pt, St, **kw)
            F = lambda t: method.ib_objective(w, d, np.r_[t, T[1:]], 4, beta_inv, lam, A)  # noqa: E731
            base = F(3)  # item 0 alone in a cluster of its own
            assert costs[2] == pytest.approx(0.0, abs=1e-12)  # alone in the empty cluster: the same partition
            for t in range(3):
                assert costs[t] == pytest.approx(base - F(t), abs=1e-12), (beta_inv, t)
        no_link = method.merge_costs(w[0], [D[0] for D in d], pt, St, 0.3, 0.4, None)
    np.testing.assert_allclose(no_link, method.merge_costs(w[0], [D[0] for D in d], pt, St, 0.3, 0.0))


def test_generate_balls_defaults_edges_and_ties():
    """Ball generation's edges against the split rule written out: the defaults (theta 0.9, n_min 8, the literal
    rule); a ball whose purity equals theta is kept; a ball of exactly 2 n_min members may split into two of n_min;
    with theta above 1 balls split until their pseudo-labels agree; the two largest pseudo-label groups are taken
    in label order among equal counts (20 labels, all tied)."""
    key = lambda balls: [b.tolist() for b in balls]  # noqa: E731
    views = _views_of_groups()
    Ps = [method.conditional_distributions(X) for X in views]
    pseudo = [np.arange(60) % 3, (np.arange(60) // 2) % 3]  # labels that explain little: purity 0.96
    assert len(method.generate_balls(Ps, pseudo)) == 1 and len(method.generate_balls(Ps, pseudo, theta=1.9)) > 1
    labels = method.pseudo_labels(Ps, 3, seed=4)
    got = key(method.generate_balls(Ps, labels))
    assert got == key(_reference_balls(Ps, labels, 0.9, 8, accept=False))
    assert got != key(_reference_balls(Ps, labels, 0.9, 9, accept=False))
    root = 1.0 - method.impurity(Ps, labels, np.arange(60)).mean()
    assert len(method.generate_balls(Ps, labels, theta=root)) == 1 and len(method.generate_balls(Ps, labels, theta=root + 1e-9)) > 1
    rng = np.random.default_rng(1)
    two = np.vstack([rng.dirichlet([20, 1, 1], size=8), rng.dirichlet([1, 1, 20], size=8)])
    assert len(method.generate_balls([two], [np.repeat([0, 1], 8)], n_min=8)) == 2  # 16 = 2 n_min members
    agree = np.repeat([0, 1, 2], 8)
    P = np.array([rng.dirichlet(10 * np.eye(4)[k] + 1) for k in agree])  # rows clustered by label
    got = method.generate_balls([P], [agree], theta=1.5, n_min=2)
    assert key(got) == key(_reference_balls([P], [agree], 1.5, 2, accept=False)) and len(got) >= 3
    tied = np.repeat(np.arange(20), 3)
    P = np.random.default_rng(1).dirichlet(np.ones(5), size=60)
    assert key(method.generate_balls([P], [tied], theta=1.5, n_min=3)) == key(
        _reference_balls([P], [tied], 1.5, 3, accept=False))


def test_impurity_is_capped_at_one_and_zero_for_a_ball_of_identical_rows():
    """iota_v <= 1 exactly even where rounding puts I_b(Y_hat; Y) a hair above I_b(X; Y) (one label per member:
    the two are equal), and iota_v = 0 for a ball whose members share one p(y|x) (I_b(X; Y) = 0) whatever the labels."""
    rng = np.random.default_rng(0)
    iotas = np.concatenate([method.impurity([rng.dirichlet(np.ones(4), size=6)], [np.arange(6)], np.arange(6))
                            for _ in range(20)])
    assert (iotas <= 1.0).all() and np.allclose(iotas, 1.0)
    same = np.tile([0.2, 0.3, 0.5], (4, 1))
    np.testing.assert_array_equal(method.impurity([same, same], [np.array([0, 1, 0, 1])] * 2, np.arange(4)), [0.0, 0.0])


def test_two_means_breaks_ties_to_the_first_centre_and_keeps_one_sided_splits():
    """A row equidistant from both centres goes to the first; when every row is nearest the first centre the mask
    is all True (no split), not an empty or flipped one."""
    Z = np.array([[0.0], [1.0], [2.0]])
    np.testing.assert_array_equal(method.two_means(Z, np.array([[0.0], [2.0]])), [True, True, False])
    one_sided = method.two_means(Z, np.array([[1.0], [10.0]]))
    assert one_sided.dtype == bool and one_sided.tolist() == [True, True, True]


def test_one_openmp_thread_limits_openmp_only_and_restores_it():
    """Inside the context OpenMP runs one thread while BLAS keeps its own count; afterwards the counts are back."""
    from threadpoolctl import threadpool_info

    def counts():
        return {(i["user_api"], i["internal_api"], i["filepath"]): i["num_threads"] for i in threadpool_info()}

    before = counts()
    with method.one_openmp_thread():
        inside = counts()
    assert counts() == before
    for k, n in inside.items():
        assert n == (1 if k[0] == "openmp" else before[k]), k


def test_kl_rows_over_any_leading_axes_and_ball_of_sample_is_an_index():
    """KL(p || q) is taken along the last axis (one row, a matrix of rows or a stack of them), and each sample's
    ball comes as an integer index."""
    P = np.array([[[0.5, 0.5], [1.0, 0.0]], [[0.25, 0.75], [0.5, 0.5]]])
    q = np.array([0.5, 0.5])
    want = np.array([[0.0, np.log(2)], [0.25 * np.log(0.5) + 0.75 * np.log(1.5), 0.0]])
    np.testing.assert_allclose(method.kl_rows(P, q), want, atol=1e-10)
    assert method.kl_rows(P[0, 1], q) == pytest.approx(np.log(2))
    s = method.ball_statistics([np.eye(3)], [np.array([0, 2]), np.array([1])])
    assert s.of_sample.dtype.kind == "i" and s.of_sample.tolist() == [0, 1, 0]


def test_pseudo_labels_are_ten_restart_k_means_per_view():
    """Abstract point 3's pseudo-labels: per view, K-means on p(y_v | x) with 10 restarts seeded by ``seed`` (here
    an eleventh restart would find another partition)."""
    from sklearn.cluster import KMeans

    Ps = [method.conditional_distributions(X) for X in _views_of_groups()]
    for got, P in zip(method.pseudo_labels(Ps, 3, seed=6), Ps):
        with method.one_openmp_thread():
            want = KMeans(3, n_init=10, random_state=6).fit_predict(P)
        np.testing.assert_array_equal(got, want)
