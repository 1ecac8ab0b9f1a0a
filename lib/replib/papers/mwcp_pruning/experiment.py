"""The experiment: profiles, every method at every pruning ratio on every seed, the selection timing
at n = 20,000, and the claim values."""

from __future__ import annotations

import time

import numpy as np

from replib.core.runtime import compute_threads

from .baselines import select_kcenter, select_random, select_top_entropy
from .method import greedy_select, neighbourhoods, select_mwcp
from .task import (
    HIDDEN,
    N_CLASSES,
    N_TEST,
    accuracy_noise_floor,
    fit_digit_generator,
    load_digits_with_redundancy,
    subset_stats,
    synthetic_graph,
    train_proxy,
    train_target,
)

__all__ = [
    "EXPERIMENT_PROFILES",
    "variant_name",
    "run_experiment",
    "selection_seconds",
    "claim_values",
]

EXPERIMENT_PROFILES = {
    "smoke": dict(
        seeds=[0], ratios=[0.3, 0.5, 0.7], alphas=[1.0], epochs=5, proxy_steps=150,
        clusters_per_class=5, n_test=10_000,
    ),
    "book": dict(
        seeds=[0, 1, 2], ratios=[0.3, 0.5, 0.7, 0.9], alphas=[0.0, 0.3, 1.0, 3.0], epochs=15,
        proxy_steps=150, clusters_per_class=5, n_test=N_TEST,
    ),
    "paper": dict(
        seeds=[0, 1, 2, 3, 4], ratios=[0.3, 0.5, 0.7, 0.9], alphas=[0.0, 0.3, 1.0, 3.0], epochs=30,
        proxy_steps=150, clusters_per_class=5, n_test=N_TEST,
    ),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
EXPERIMENT_BOUNDS = dict(ratios=(0.01, 0.99), alphas=(0.0, None), epochs=(1, None), proxy_steps=(1, None),
                         clusters_per_class=(1, None), n_test=(1, None))

FIGURE_RATIO = 0.7  # ratio whose kept sets go to the extras (PCA figure)


def variant_name(method: str, alpha: float | None = None) -> str:
    """Row label: "random", "entropy", "kcenter", "full", "proxy" or "mwcp(alpha=1)"."""
    return f"mwcp(alpha={alpha:g})" if method == "mwcp" else method


def _pca2(z) -> np.ndarray:
    """First two principal components of the rows of z."""
    zc = np.asarray(z, dtype=float) - np.mean(z, axis=0)
    _, _, vt = np.linalg.svd(zc, full_matrices=False)
    return zc @ vt[:2].T


def run_experiment(cfg, progress=None, threads: int = 1):
    """Every method at every pruning ratio on every seed of ``cfg`` (a resolved profile namespace with
    seeds, ratios, alphas, epochs, proxy_steps, clusters_per_class, n_test).

    Per seed: the pool (:func:`load_digits_with_redundancy` with ``default_rng(seed)``, from one
    :func:`fit_digit_generator` shared by every seed, so the test set is the same), the proxy
    (:func:`train_proxy`), the class-wise k-means neighbourhoods, the full-data model, and for each
    ratio p (b = round((1 - p) N)) the subsets of random, top-b entropy, k-center and MWCP at each
    alpha, each trained from scratch for ``epochs`` epochs with model seed = the seed (common random
    numbers across methods; the random and k-center draws use ``default_rng([seed, round(1000 p)])``,
    k-means ``random_state = seed``). Torch runs with ``threads`` thread(s) and deterministic algorithms;
    one-off import and first-step costs are paid before any timing starts.

    Returns ``(rows, extras)``. ``rows``: dicts with seed, method, variant, alpha (NaN for the
    baselines), ratio (0 for the full data and the proxy), size, accuracy (percent), train_seconds,
    select_seconds, dup_fraction, redundant_fraction, clusters_covered, objective; one "proxy" row per
    seed (its accuracy and training + scoring seconds; select_seconds = the k-means time). ``extras``
    (first seed): pool, entropy, embeddings, pca (N x 2), cluster, and ``kept`` = {variant: indices}
    at the ratio closest to 0.7 (``kept_ratio``). ``progress`` is an optional tqdm-like wrapper.
    """
    jobs = [(seed, p) for seed in cfg.seeds for p in [0.0, *cfg.ratios]]
    it = progress(jobs, total=len(jobs)) if progress is not None else jobs
    rows: list[dict] = []
    extras: dict = {}
    state: dict = {}
    ratios = list(cfg.ratios)
    kept_ratio = min(ratios, key=lambda r: abs(r - FIGURE_RATIO)) if ratios else None
    with compute_threads(threads):
        _warm_up()
        generator = fit_digit_generator()
        for seed, p in it:
            if state.get("seed") != seed:
                state = _prepare_seed(cfg, seed, rows, generator)
                if seed == cfg.seeds[0]:
                    extras = dict(
                        pool=state["pool"],
                        entropy=state["H"],
                        embeddings=state["z"],
                        pca=_pca2(state["z"]),
                        cluster=state["cluster"],
                        kept={},
                        kept_ratio=kept_ratio,
                    )
            if p == 0.0:
                continue
            for variant, method, alpha, S, sel_s in _selections(cfg, state, seed, p):
                rows.append(_evaluate(cfg, state, seed, method, variant, alpha, p, S, sel_s))
                if seed == cfg.seeds[0] and p == kept_ratio:
                    extras["kept"][variant] = np.asarray(S)
    return rows, extras


def _warm_up() -> None:
    """Pay one-off costs (scikit-learn's k-means import and first fit, torch's first steps) before
    anything is timed, so that no method's seconds include them."""
    from replib.models.mlp import MLP, train_classifier

    neighbourhoods(np.random.default_rng(0).random((20, 4)), np.zeros(20, np.int64), 2, rng=0)
    x = np.zeros((8, 64), np.float32)
    train_classifier(MLP([64, HIDDEN, N_CLASSES], seed=0), x, np.arange(8) % N_CLASSES, steps=4,
                     batch_size=4)


def _prepare_seed(cfg, seed: int, rows: list, generator) -> dict:
    """Pool, proxy scores, neighbourhoods and the full-data row of one seed (appends two rows)."""
    rng = np.random.default_rng(seed)
    pool = load_digits_with_redundancy(rng, generator, n_test=cfg.n_test)
    proxy = train_proxy(
        pool.X, pool.y, steps=cfg.proxy_steps, seed=seed, X_test=pool.X_test, y_test=pool.y_test
    )
    t0 = time.perf_counter()
    cluster = neighbourhoods(proxy.embeddings, pool.y, cfg.clusters_per_class, rng=seed)
    graph_s = time.perf_counter() - t0
    state = dict(seed=seed, rng=rng, pool=pool, H=proxy.entropy, z=proxy.embeddings,
                 cluster=cluster, graph_seconds=graph_s)
    nan = float("nan")
    rows.append(dict(seed=seed, method="proxy", variant="proxy", alpha=nan, ratio=0.0, size=pool.n,
                     accuracy=proxy.test_accuracy, train_seconds=proxy.seconds,
                     select_seconds=graph_s, dup_fraction=nan, redundant_fraction=nan,
                     clusters_covered=nan, objective=nan))
    rows.append(_evaluate(cfg, state, seed, "full", "full", nan, 0.0, np.arange(pool.n), 0.0))
    return state


def _selections(cfg, state: dict, seed: int, p: float):
    """(variant, method, alpha, kept indices, selection seconds) of every method at ratio p."""
    pool, H, z, cluster = state["pool"], state["H"], state["z"], state["cluster"]
    b = int(round((1.0 - p) * pool.n))
    nan = float("nan")
    rng = np.random.default_rng([seed, int(round(1000 * p))])
    t0 = time.perf_counter()
    S = select_random(rng, pool.n, b)
    yield "random", "random", nan, S, time.perf_counter() - t0
    t0 = time.perf_counter()
    S = select_top_entropy(H, b)
    yield "entropy", "entropy", nan, S, time.perf_counter() - t0
    t0 = time.perf_counter()
    S = select_kcenter(z, b, rng)
    yield "kcenter", "kcenter", nan, S, time.perf_counter() - t0
    for alpha in cfg.alphas:
        res = select_mwcp(H, z, cluster, b, alpha)
        yield variant_name("mwcp", alpha), "mwcp", float(alpha), res.order, (
            state["graph_seconds"] + res.seconds
        )


def _evaluate(cfg, state, seed, method, variant, alpha, p, S, select_s) -> dict:
    """Train the target on subset S and collect the row."""
    pool = state["pool"]
    S = np.asarray(S, dtype=np.int64)
    res = train_target(pool.X[S], pool.y[S], pool.X_test, pool.y_test, cfg.epochs, seed)
    return dict(seed=seed, method=method, variant=variant, alpha=alpha, ratio=float(p), size=int(S.size),
                accuracy=res["accuracy"], train_seconds=res["train_seconds"],
                select_seconds=float(select_s),
                **subset_stats(S, pool, state["cluster"], state["H"], state["z"]))


def selection_seconds(
    n: int = 20000, b: int = 10000, rng: np.random.Generator | None = None, alpha: float = 1.0
) -> float:
    """Wall-clock seconds of :func:`greedy_select` choosing b = 10,000 of n = 20,000 synthetic points
    (20 classes x 10 clusters, :func:`synthetic_graph`), alpha = 1; the greedy loop only (the clusters
    are given, as k-means is a separate, one-off step)."""
    rng = np.random.default_rng(0) if rng is None else rng
    I_in, z, cluster = synthetic_graph(rng, n)
    return greedy_select(alpha * I_in, b, z=z, cluster=cluster).seconds


def _per_seed(value, seed):
    """``value[seed]`` for a mapping, else ``value``."""
    return value[seed] if isinstance(value, dict) and seed in value else value


def claim_values(rows, guarantee, selection_seconds, n_test: int = N_TEST) -> dict:
    """Per-seed values of the claims declared in the chapter's ``chapter.yml``.

    ``rows``: the rows of :func:`run_experiment` (list of dicts or a DataFrame). ``guarantee``: the
    dict of :func:`greedy_guarantee_check` for each seed (``{seed: dict}``, instances drawn per seed;
    a single dict is repeated for every seed); ``selection_seconds``: the seconds of
    :func:`selection_seconds` (or ``{seed: seconds}``); ``n_test``: the size of the test set, for the
    noise floor m3 (:func:`accuracy_noise_floor` at the full-data accuracy). Values that need a ratio the
    profile did not run are NaN. Returns ``{seed: {claim_id: value}}``.
    """
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    by_seed: dict = {}
    for row in rows:
        key = (row["variant"], round(float(row["ratio"]), 6))
        by_seed.setdefault(row["seed"], {})[key] = row
    nan = float("nan")
    out = {}
    for seed, m in by_seed.items():

        def get(variant, p, field="accuracy", m=m):
            """One field of one row, NaN when absent."""
            row = m.get((variant, round(p, 6)))
            return float(row[field]) if row is not None else nan

        mw = variant_name("mwcp", 1.0)
        full, full_t = get("full", 0.0), get("full", 0.0, "train_seconds")
        pipeline = (get("proxy", 0.0, "train_seconds") + get(mw, 0.3, "select_seconds")
                    + get(mw, 0.3, "train_seconds"))
        g = _per_seed(guarantee, seed)
        out[seed] = {
            "c1a_beats_random_30": get(mw, 0.3) - get("random", 0.3),
            "c1b_beats_random_50": get(mw, 0.5) - get("random", 0.5),
            "p1_random_lossy_30": get("random", 0.3) - full,
            "p2_random_lossy_50": get("random", 0.5) - full,
            "h1_lossless_30": get(mw, 0.3) - full,
            "h2_lossless_50": get(mw, 0.5) - full,
            "k1_vs_kcenter_30": get(mw, 0.3) - get("kcenter", 0.3),
            "k2_vs_kcenter_50": get(mw, 0.5) - get("kcenter", 0.5),
            "k3_vs_kcenter_70": get(mw, 0.7) - get("kcenter", 0.7),
            "c3_unified_vs_intrinsic_70": get(mw, 0.7) - get("entropy", 0.7),
            "c4a_greedy_ratio": float(g["min_ratio"]),
            "c4b_greedy_gap": float(g["mean_gap"]),
            "c5_time_end_to_end": pipeline / full_t,
            "m1_training_time_ratio": get(mw, 0.3, "train_seconds") / full_t,
            "m2_selection_seconds_20k": float(_per_seed(selection_seconds, seed)),
            "m3_test_noise_floor": accuracy_noise_floor(full, n_test),
        }
    return out
