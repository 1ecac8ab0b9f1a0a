"""SGB-IB, the method: IB representation of multi-view data, mutual-information purity of a
granular ball, recursive ball splitting, the structure-aware IB objective over balls and its
sequential draw-and-merge optimiser. Everything past the abstract's five points is our
proposed reading (the paper's equations could not be read)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

__all__ = [
    "EPS",
    "one_openmp_thread",
    "conditional_distributions",
    "kl_rows",
    "ball_mi_terms",
    "impurity",
    "two_means",
    "generate_balls",
    "Balls",
    "ball_statistics",
    "structure_graph",
    "ib_objective",
    "merge_costs",
    "draw_and_merge",
    "pseudo_labels",
    "ib_restarts",
    "ib_restarts_many",
    "draw_and_merge_batch",
    "sgb_ib",
]

EPS = 1e-12


def one_openmp_thread():
    """scikit-learn's K-means and spectral clustering on one OpenMP thread. On a shared, loaded
    machine their OpenMP threads wait for each other: a 300-sample K-means fit took 0.2-0.3 s on two
    threads and 2 ms on one (same result)."""
    return threadpool_limits(limits=1, user_api="openmp")


def conditional_distributions(X: np.ndarray) -> np.ndarray:
    """IB representation: p(y_v | x) = X_{x,y} / sum_y' X_{x,y'}, after shifting each column by its
    minimum when a value is negative; an all-zero row becomes uniform."""
    X = np.asarray(X, dtype=float)
    if (X < 0).any():
        X = X - X.min(axis=0)
    s = X.sum(axis=1, keepdims=True)
    return np.where(s > 0, X / np.where(s > 0, s, 1.0), 1.0 / X.shape[1])


def kl_rows(P: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(p_i || q) for every row p_i of P (natural log, EPS inside the logs)."""
    return np.sum(P * (np.log(P + EPS) - np.log(q + EPS)), axis=-1)


def ball_mi_terms(P: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Within one ball and one view: (I_b(Y_hat; Y), I_b(X; Y)) with uniform weights on members.
    I_b(Y_hat;Y) = sum_k p_b(k) KL(p(y|b,k) || p(y|b)); I_b(X;Y) = mean_x KL(p(y|x) || p(y|b))."""
    centre = P.mean(axis=0)
    i_x = float(kl_rows(P, centre).mean())
    i_hat = 0.0
    for k in np.unique(labels):
        members = labels == k
        i_hat += members.mean() * float(kl_rows(P[members].mean(axis=0, keepdims=True), centre)[0])
    return i_hat, i_x


def impurity(Ps: list[np.ndarray], pseudo: list[np.ndarray], idx: np.ndarray) -> np.ndarray:
    """Per-view impurity iota_v(b) = I_b(Y_hat_v; Y_v) / I_b(X; Y_v) of the ball with members
    ``idx`` (reading B of the MI purity; 0 when I_b(X; Y_v) = 0). The purity is
    P(b) = 1 - mean_v iota_v(b) (abstract point 3: an average over modalities)."""
    out = []
    for P, lab in zip(Ps, pseudo):
        i_hat, i_x = ball_mi_terms(P[idx], lab[idx])
        out.append(min(i_hat / i_x, 1.0) if i_x > EPS else 0.0)
    return np.array(out)


def two_means(Z: np.ndarray, init: np.ndarray, iters: int = 20) -> np.ndarray:
    """Split step: Lloyd's 2-means on the rows of Z from the two centres ``init``; returns a
    boolean mask of the rows assigned to the first centre."""
    c = np.array(init, dtype=float)
    first = None
    for _ in range(iters):
        d = ((Z[:, None, :] - c[None]) ** 2).sum(axis=2)
        new = d[:, 0] <= d[:, 1]
        if first is not None and np.array_equal(new, first):
            break
        first = new
        if first.all() or not first.any():
            break
        c = np.stack([Z[first].mean(axis=0), Z[~first].mean(axis=0)])
    return first


def generate_balls(Ps: list[np.ndarray], pseudo: list[np.ndarray], theta: float = 0.9,
                   n_min: int = 8, accept: bool = False) -> list[np.ndarray]:
    """Granular-ball generation (abstract points 1-2: start from one ball, split recursively by the
    purity; the split step is proposed). Start from one ball holding every sample; pop a ball b; if
    P(b) < theta and |b| >= 2 n_min, split it by 2-means on the concatenated p(y_v|x), started at the
    centroids of the two largest pseudo-label groups of the view with the highest iota_v(b); keep the
    split when both children have >= n_min members (and, with ``accept``, the purity-gain rule of our
    first plan, when their size-weighted purity also exceeds P(b)), else keep b. Returns the member
    index arrays of the balls."""
    Z = np.concatenate(Ps, axis=1)
    queue, balls = [np.arange(len(Z))], []
    while queue:
        idx = queue.pop(0)
        iota = impurity(Ps, pseudo, idx)
        purity = 1.0 - iota.mean()
        if purity >= theta or len(idx) < 2 * n_min:
            balls.append(idx)
            continue
        lab = pseudo[int(np.argmax(iota))][idx]
        ks, counts = np.unique(lab, return_counts=True)
        if len(ks) < 2:
            balls.append(idx)
            continue
        top = ks[np.argsort(-counts, kind="stable")[:2]]
        init = np.stack([Z[idx[lab == k]].mean(axis=0) for k in top])
        first = two_means(Z[idx], init)
        a, b = idx[first], idx[~first]
        if min(len(a), len(b)) < n_min:
            balls.append(idx)
            continue
        if not accept or (len(a) * (1 - impurity(Ps, pseudo, a).mean())
                          + len(b) * (1 - impurity(Ps, pseudo, b).mean())) / len(idx) > purity:
            queue += [a, b]
        else:
            balls.append(idx)
    return balls


@dataclass
class Balls:
    """The IB statistics of m granular balls: weights p(b) (m,), per-view distributions
    p(y_v|b) (list of (m, d_v)), centres c_b (m, sum d_v), radii rho_b (m,), and each sample's ball."""

    weight: np.ndarray
    dists: list
    centre: np.ndarray
    radius: np.ndarray
    of_sample: np.ndarray


def ball_statistics(Ps: list[np.ndarray], balls: list[np.ndarray]) -> Balls:
    """p(b) = |S_b|/n, p(y_v|b) = mean of p(y_v|x) over members, centre = mean of the concatenated
    p(y_v|x), radius = mean distance of members to the centre (Xia's average radius)."""
    n = len(Ps[0])
    Z = np.concatenate(Ps, axis=1)
    of_sample = np.empty(n, dtype=int)
    for j, idx in enumerate(balls):
        of_sample[idx] = j
    centre = np.stack([Z[idx].mean(axis=0) for idx in balls])
    radius = np.array([np.linalg.norm(Z[idx] - centre[j], axis=1).mean() for j, idx in enumerate(balls)])
    return Balls(weight=np.array([len(idx) / n for idx in balls]),
                 dists=[np.stack([P[idx].mean(axis=0) for idx in balls]) for P in Ps],
                 centre=centre, radius=radius, of_sample=of_sample)


def structure_graph(centre: np.ndarray, radius: np.ndarray, k: int = 5) -> np.ndarray:
    """GB graph: A_bb' = exp(-||c_b - c_b'||^2 / 2h^2) when the balls overlap
    (||c_b - c_b'|| <= rho_b + rho_b') or b' is among the k nearest centres of b (symmetrised),
    else 0; h = the median distance over the nonzero pairs. Zero diagonal."""
    d = np.linalg.norm(centre[:, None] - centre[None], axis=2)
    m = len(centre)
    np.fill_diagonal(d, np.inf)
    linked = d <= radius[:, None] + radius[None]
    nearest = np.argsort(d, axis=1)[:, :min(k, m - 1)]
    knn = np.zeros_like(linked)
    knn[np.repeat(np.arange(m), nearest.shape[1]), nearest.ravel()] = True
    linked |= knn | knn.T
    np.fill_diagonal(linked, False)
    if not linked.any():
        return np.zeros((m, m))
    h = np.median(d[linked])
    return np.where(linked, np.exp(-d ** 2 / (2 * h ** 2)), 0.0)


def ib_objective(weight, dists, T, K, beta_inv=0.01, lam=0.0, A=None) -> float:
    """Structure-aware IB functional F(T) = sum_v w_v I(T;Y_v) - beta^-1 H(T) + lam Omega(T),
    w_v = 1/V, I(T;Y_v) = sum_t p(t) KL(p(y_v|t) || p(y_v)), Omega(T) = sum_{b != b'} A_bb'
    [t_b = t_b'] / sum A (abstract point 4, form proposed)."""
    pt = np.bincount(T, weights=weight, minlength=K)
    relevance = 0.0
    for D in dists:
        py = weight @ D
        S = np.stack([np.bincount(T, weights=weight * D[:, y], minlength=K) for y in range(D.shape[1])], axis=1)
        live = pt > 0
        relevance += float(pt[live] @ kl_rows(S[live] / pt[live, None], py)) / len(dists)
    h = -float(np.sum(pt[pt > 0] * np.log(pt[pt > 0])))
    omega = 0.0
    if lam and A is not None and A.sum() > 0:
        omega = float(A[T[:, None] == T[None]].sum() / A.sum())
    return relevance - beta_inv * h + lam * omega


def merge_costs(pb, Db, pt, St, beta_inv=0.01, lam=0.0, link=None) -> np.ndarray:
    """Draw-and-merge cost of putting ball b (weight pb, per-view rows Db) into each cluster t
    (weights pt (K,), per-view unnormalised sums St (K, d_v)): Delta(b,t) = (pb + pt)
    [sum_v w_v JS_pi(p(y_v|b), p(y_v|t)) - beta^-1 H(pi)] - lam * link_t, with pi = (pb, pt)/(pb + pt)
    and link_t = 2 sum_{b' in t} A_bb' / sum A (``link``, None for lam = 0). The bracket times (pb+pt)
    is the exact drop of the IB functional when b is merged into t."""
    tot = pb + pt
    cost = np.zeros_like(pt)
    for d, S in zip(Db, St):
        M = (pb * d[None] + S) / tot[:, None]
        Q = S / np.where(pt > 0, pt, 1.0)[:, None]
        cost += (pb * np.sum(d * (np.log(d + EPS) - np.log(M + EPS)), axis=1)
                 + np.sum(S * (np.log(Q + EPS) - np.log(M + EPS)), axis=1)) / len(Db)
    ent = -(pb * np.log(pb / tot) + pt * np.log(np.where(pt > 0, pt / tot, 1.0)))
    cost -= beta_inv * ent
    if lam and link is not None:
        cost -= lam * link
    return cost


def draw_and_merge(weight, dists, K, init, rng, beta_inv=0.01, lam=0.0, A=None, max_sweeps=30,
                   tol=0.005) -> tuple[np.ndarray, int]:
    """Sequential IB (sIB) draw-and-merge from the assignment ``init``: sweep the items in a random
    order, draw each from its cluster (unless it is alone there), and merge it into the cluster of
    least :func:`merge_costs`. Stop when under ``tol`` of the items move in a sweep or after
    ``max_sweeps``. Returns (T, sweeps run). One run of :func:`draw_and_merge_batch`."""
    T, sweeps = draw_and_merge_batch(weight, dists, K, np.asarray(init)[None], [rng], beta_inv, lam, A, max_sweeps,
                                     tol)
    return T[0], int(sweeps[0])


def draw_and_merge_batch(weight, dists, K, inits, rngs, beta_inv=0.01, lam=0.0, A=None, max_sweeps=30,
                         tol=0.005) -> tuple[np.ndarray, np.ndarray]:
    """R independent draw-and-merge runs on items of the same count m, stepped together: run r starts
    at ``inits[r]`` and sweeps in the orders of ``rngs[r]``; at step i every run still sweeping draws
    and merges its own i-th item, so each run gives exactly what it gives alone, and a run stops
    (by the rule of :func:`draw_and_merge`) independently of the others. ``weight`` (m,) or (R, m),
    each view of ``dists`` (m, d_v) or (R, m, d_v), ``A`` (m, m), (R, m, m) or None. Returns T (R, m)
    and the sweeps each run made (R,).

    The cost of :func:`merge_costs`, rewritten for speed (same value): the views are concatenated with
    column weights w_j = 1/V and Delta(b,t) = pb sum_j w_j d_j log d_j + g_t - sum_j w_j N_tj
    log(N_tj / (pb + pt)) - beta^-1 H(pi) - lam link_t, with N_t = pb d + S_t, g_t = sum_j w_j S_tj
    log(S_tj / pt) cached per cluster and link_t = 2 sum_{b' in t} A_bb' / sum A kept per (item,
    cluster); a move refreshes only the two clusters it touches."""
    inits = np.atleast_2d(np.asarray(inits, dtype=int))
    R, m = inits.shape
    rows = np.arange(R)
    D = np.concatenate([np.broadcast_to(X, (R,) + np.shape(X)[-2:]) for X in dists], axis=2).astype(float)
    w = np.concatenate([np.full(np.shape(X)[-1], 1.0 / len(dists)) for X in dists])
    W = np.broadcast_to(np.asarray(weight, dtype=float), (R, m))
    self_term = W * ((D * np.log(D + EPS)) @ w)  # pb sum_j w_j d_j log d_j, per run and item
    T = inits.copy()
    onehot = np.zeros((R, m, K))
    onehot[rows[:, None], np.arange(m)[None], T] = 1.0
    pt = np.einsum("rm,rmk->rk", W, onehot)
    S = np.einsum("rmk,rmd->rkd", onehot, W[..., None] * D)
    size = onehot.sum(axis=1).astype(int)

    def cached(r, t):  # g_t = sum_j w_j S_tj log(S_tj / pt + EPS) for the pairs (r, t); 0 for an empty cluster
        St = np.maximum(S[r, t], 0.0)
        p = pt[r, t]
        return np.where(p > 0, (St * np.log(St / np.where(p > 0, p, 1.0)[:, None] + EPS)) @ w, 0.0)

    g = np.zeros((R, K))
    for t in range(K):
        g[:, t] = cached(rows, np.full(R, t))
    use_graph = bool(lam) and A is not None and np.sum(A) > 0
    if use_graph:
        Ab = np.broadcast_to(np.asarray(A, dtype=float), (R, m, m))
        link = 2 * np.einsum("rij,rjk->rik", Ab, onehot) / Ab.sum(axis=(1, 2))[:, None, None]
        link_unit = 2 * Ab / Ab.sum(axis=(1, 2))[:, None, None]
    active = np.ones(R, dtype=bool)
    sweeps = np.zeros(R, dtype=int)
    for sweep in range(1, max_sweeps + 1):
        live = np.flatnonzero(active)
        order = np.stack([rngs[r].permutation(m) for r in live])
        moved = np.zeros(len(live), dtype=int)
        for i in range(m):
            b = order[:, i]
            t0 = T[live, b]
            keep = size[live, t0] > 1
            if not keep.all():
                r, b, t0, mv = live[keep], b[keep], t0[keep], np.flatnonzero(keep)
            else:
                r, mv = live, slice(None)
            if len(r) == 0:
                continue
            pb, db = W[r, b], D[r, b]
            pt[r, t0] -= pb
            S[r, t0] -= pb[:, None] * db
            size[r, t0] -= 1
            g[r, t0] = cached(r, t0)
            tot = pb[:, None] + pt[r]
            N = np.maximum(pb[:, None, None] * db[:, None, :] + S[r], 0.0)
            cost = self_term[r, b][:, None] + g[r] - (N * np.log(N / tot[..., None] + EPS)) @ w
            p = pt[r]
            cost += beta_inv * (pb[:, None] * np.log(pb[:, None] / tot) + p * np.log(np.where(p > 0, p / tot, 1.0)))
            if use_graph:
                cost -= lam * (link[r, b] - link_unit[r, b, b][:, None] * (np.arange(K)[None] == t0[:, None]))
            t1 = np.argmin(cost, axis=1)
            pt[r, t1] += pb
            S[r, t1] += pb[:, None] * db
            size[r, t1] += 1
            g[r, t1] = cached(r, t1)
            T[r, b] = t1
            if use_graph:
                change = t1 != t0
                if change.any():
                    rc, bc = r[change], b[change]
                    link[rc, :, t0[change]] -= link_unit[rc, :, bc]
                    link[rc, :, t1[change]] += link_unit[rc, :, bc]
            moved[mv] += t1 != t0
        sweeps[live] = sweep
        active[live[moved < tol * m]] = False
        if not active.any():
            break
    return T, sweeps


def pseudo_labels(Ps: list[np.ndarray], K: int, seed: int, n_init: int = 10) -> list[np.ndarray]:
    """Abstract point 3's K-means pseudo-labels: K-means (K clusters, ``n_init`` restarts) on
    each view's p(y_v|x), once on the whole data set."""
    with one_openmp_thread():
        return [KMeans(K, n_init=n_init, random_state=seed).fit_predict(P) for P in Ps]


def ib_restarts(weight, dists, K, Z, seed, restarts=5, beta_inv=0.01, lam=0.0, A=None, max_sweeps=30):
    """Optimisation steps 1 and 3: ``restarts`` draw-and-merge runs, each initialised by K-means on
    the item centres ``Z`` weighted by p(b) (random_state seed + r) with its own sweep order; keep the
    run of largest F(T) (an unsupervised choice); with no more items than K, each item is its own
    cluster. Returns (T, F, total sweeps). One problem of :func:`ib_restarts_many`."""
    out = ib_restarts_many([(weight, dists, Z, A, seed)], K, restarts, beta_inv, lam, max_sweeps)[0]
    return out["T"], out["F"], int(out["sweeps"].sum())


def ib_restarts_many(problems, K, restarts=5, beta_inv=0.01, lam=0.0, max_sweeps=30) -> list[dict]:
    """:func:`ib_restarts` on several problems (weight, dists, Z, A, seed) with the same number of
    items, all restarts of all problems stepped together by :func:`draw_and_merge_batch` (each run
    gives what it gives alone). Returns per problem a dict with the best run's T and F, and the sweeps
    of every restart (``sweeps``, for the convergence check)."""
    out, batch = [None] * len(problems), []
    for i, (weight, dists, Z, A, seed) in enumerate(problems):
        if len(weight) <= K:  # no more items than clusters: each item is its own cluster
            T = np.arange(len(weight))
            out[i] = dict(T=T, F=ib_objective(weight, dists, T, K, beta_inv, lam, A), sweeps=np.zeros(0, int))
            continue
        for r in range(restarts):
            with one_openmp_thread():
                init = KMeans(K, n_init=1, random_state=seed + r).fit_predict(Z, sample_weight=weight)
            batch.append((i, init, np.random.default_rng(seed + r)))
    if batch:
        sizes = {len(problems[i][0]) for i, _, _ in batch}
        if len(sizes) > 1:
            raise ValueError("ib_restarts_many steps problems with the same number of items only")
        idx = [i for i, _, _ in batch]
        stack = lambda xs: np.stack([np.asarray(x, dtype=float) for x in xs])  # noqa: E731
        weight = stack([problems[i][0] for i in idx])
        dists = [stack([problems[i][1][v] for i in idx]) for v in range(len(problems[idx[0]][1]))]
        As = [problems[i][3] for i in idx]
        A = stack(As) if lam and all(a is not None for a in As) else None
        T, sweeps = draw_and_merge_batch(weight, dists, K, np.stack([init for _, init, _ in batch]),
                                         [rng for _, _, rng in batch], beta_inv, lam, A, max_sweeps)
        for i in sorted(set(idx)):
            weight, dists, _, A, _ = problems[i]
            runs = [j for j, k in enumerate(idx) if k == i]
            Fs = [ib_objective(weight, dists, T[j], K, beta_inv, lam, A) for j in runs]
            best = runs[int(np.argmax(Fs))]
            out[i] = dict(T=T[best], F=float(max(Fs)), sweeps=sweeps[runs])
    return out


def sgb_ib(views, K, seed, theta=0.9, n_min=8, beta_inv=0.01, lam=0.05, restarts=5, max_sweeps=30,
           pseudo=None, accept=False):
    """The whole pipeline: p(y_v|x) per view, K-means pseudo-labels (or ``pseudo``), granular balls
    by MI purity (``accept``: the purity-gain split rule of :func:`generate_balls`), ball statistics
    and graph, the structure-aware IB over balls; every sample takes its ball's cluster. Returns a
    dict with the sample labels, the balls, their statistics and graph A, the ball-level assignment T,
    its F, the sweeps of every restart ("restart_sweeps") and the wall seconds of ball generation
    ("t_balls") and of the IB phase ("t_ib")."""
    from time import perf_counter

    Ps = [conditional_distributions(X) for X in views]
    t0 = perf_counter()
    pseudo = pseudo_labels(Ps, K, seed) if pseudo is None else pseudo
    balls = generate_balls(Ps, pseudo, theta, n_min, accept)
    stats = ball_statistics(Ps, balls)
    A = structure_graph(stats.centre, stats.radius) if lam else None
    t1 = perf_counter()
    run = ib_restarts_many([(stats.weight, stats.dists, stats.centre, A, seed)], K, restarts, beta_inv, lam,
                           max_sweeps)[0]
    t2 = perf_counter()
    return dict(labels=run["T"][stats.of_sample], T=run["T"], balls=balls, stats=stats, A=A, F=run["F"],
                sweeps=int(run["sweeps"].sum()), restart_sweeps=run["sweeps"], t_balls=t1 - t0, t_ib=t2 - t1,
                m=len(balls))
