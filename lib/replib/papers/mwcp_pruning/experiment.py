"""The experiment: profiles, every selector at every pruning ratio on two pools (with and without
injected near-copies) and every seed, several initialisations per kept subset, the costs in FLOPs,
the selection timing at n = 20,000, and the claim values."""

from __future__ import annotations

import time

import numpy as np

from replib.core.runtime import compute_threads

from .baselines import select_kcenter, select_random, select_top_entropy
from .method import greedy_select, neighbourhoods, select_mwcp
from .task import (
    HIDDEN,
    N_CLASSES,
    N_ORIGINAL,
    N_TEST,
    accuracy_noise_floor,
    fit_digit_generator,
    init_seeds,
    load_digits_with_redundancy,
    proxy_flops,
    subset_stats,
    synthetic_graph,
    train_proxy,
    train_target,
    train_targets,
    training_flops,
)

__all__ = [
    "EXPERIMENT_PROFILES",
    "POOLS",
    "make_pool",
    "variant_name",
    "run_experiment",
    "selection_seconds",
    "claim_values",
]

POOLS = ("redundant", "clean")  # the pool with injected near-copies, and one without any

EXPERIMENT_PROFILES = {
    "smoke": dict(
        seeds=[0], ratios=[0.3, 0.5, 0.7], alphas=[1.0], epochs=3, proxy_steps=60,
        clusters_per_class=5, n_test=5_000, inits=1,
    ),
    "book": dict(
        seeds=[1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009], ratios=[0.3, 0.5, 0.7, 0.9],
        alphas=[0.0, 1.0], epochs=15, proxy_steps=150, clusters_per_class=5, n_test=50_000, inits=4,
    ),
    "paper": dict(
        seeds=list(range(1000, 1020)), ratios=[0.3, 0.5, 0.7, 0.9], alphas=[0.0, 0.3, 1.0, 3.0],
        epochs=30, proxy_steps=150, clusters_per_class=5, n_test=N_TEST, inits=8,
    ),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
EXPERIMENT_BOUNDS = dict(ratios=(0.01, 0.99), alphas=(0.0, None), epochs=(1, None), proxy_steps=(1, None),
                         clusters_per_class=(1, None), n_test=(1, None), inits=(1, None))

FIGURE_RATIO = 0.7  # ratio whose kept sets go to the extras (PCA figure)
BATCH = 64  # minibatch of the proxy and of the target model


def variant_name(method: str, alpha: float | None = None) -> str:
    """Row label: "random", "entropy", "kcenter", "full", "proxy" or "mwcp(alpha=1)"."""
    return f"mwcp(alpha={alpha:g})" if method == "mwcp" else method


def _pca2(z) -> np.ndarray:
    """First two principal components of the rows of z."""
    zc = np.asarray(z, dtype=float) - np.mean(z, axis=0)
    _, _, vt = np.linalg.svd(zc, full_matrices=False)
    return zc @ vt[:2].T


def make_pool(kind: str, seed: int, generator, n_test: int):
    """The pool of one seed. ``"redundant"``: :func:`load_digits_with_redundancy` with
    ``default_rng(seed)`` (1,297 originals, 389 of them copied 4 times: N = 2,853). ``"clean"``: 2,853
    distinct images drawn with ``default_rng([seed, 1])`` and no copies (same N, so the same budgets b)."""
    if kind == "redundant":
        return load_digits_with_redundancy(np.random.default_rng(seed), generator, n_test=n_test)
    if kind == "clean":
        n = N_ORIGINAL + 4 * int(round(0.3 * N_ORIGINAL))
        return load_digits_with_redundancy(np.random.default_rng([seed, 1]), generator, n_original=n,
                                           n_test=n_test, dup_fraction=0.0)
    raise ValueError(f"unknown pool {kind!r}; valid: {', '.join(POOLS)}")


def run_experiment(cfg, progress=None, threads: int = 1):
    """Every selector at every pruning ratio on both pools and every seed of ``cfg`` (a resolved
    profile namespace with seeds, ratios, alphas, epochs, proxy_steps, clusters_per_class, n_test,
    inits).

    Per seed and pool (:func:`make_pool`; one :func:`fit_digit_generator` shared by every seed, so the
    test set is the same): the proxy (:func:`train_proxy`), the class-wise k-means neighbourhoods, the
    full data, and for each ratio p (b = round((1 - p) N)) the subsets of random, top-b entropy,
    k-center and MWCP at each alpha (the clean pool: alpha = 1 only). Each subset trains ``inits``
    models from scratch for ``epochs`` epochs, with the model seeds :func:`init_seeds` (the same for
    every selector: paired), all subsets of a ratio at once (:func:`train_targets`). The random and
    draws use ``default_rng([seed, round(1000 p)])``, k-center's first centre ``default_rng([seed, 7])``, k-means ``random_state = seed``.

    Costs are counted in FLOPs (deterministic): the proxy (:func:`proxy_flops`), k-means and the greedy
    (counted by the code that runs them), k-center, and training (:func:`training_flops`, per model).
    Wall-clock seconds (measurements only): on the redundant pool the full data and the MWCP subset at
    p = 0.5 are also trained once more alone (first init seed, :func:`train_target`) to time them.

    Returns ``(rows, extras)``. ``rows``: dicts with pool, seed, method, variant, alpha (NaN for the
    baselines), ratio (0 for the full data and the proxy), size, accuracy (percent, mean over the
    inits), init_sd (sd over the inits), train_flops (one model), select_flops, train_seconds and
    select_seconds (NaN where not timed), dup_fraction, redundant_fraction, clusters_covered,
    objective; one "proxy" row per pool and seed (its test accuracy, training + scoring FLOPs and
    seconds; select_flops and select_seconds = the k-means'). ``extras`` (first seed, redundant pool):
    pool, entropy, embeddings, pca (N x 2), cluster, and ``kept`` = {variant: indices} at the ratio
    closest to 0.7 (``kept_ratio``). ``progress`` is an optional tqdm-like wrapper.
    """
    jobs = [(seed, kind) for seed in cfg.seeds for kind in POOLS]
    it = progress(jobs, total=len(jobs)) if progress is not None else jobs
    rows: list[dict] = []
    extras: dict = {}
    ratios = list(cfg.ratios)
    kept_ratio = min(ratios, key=lambda r: abs(r - FIGURE_RATIO)) if ratios else None
    with compute_threads(threads):
        _warm_up()
        generator = fit_digit_generator()
        for seed, kind in it:
            state = _prepare(cfg, kind, seed, rows, generator)
            first = seed == cfg.seeds[0] and kind == POOLS[0]
            if first:
                extras = dict(pool=state["pool"], entropy=state["H"], embeddings=state["z"],
                              pca=_pca2(state["z"]), cluster=state["cluster"], kept={},
                              kept_ratio=kept_ratio)
            alphas = list(cfg.alphas) if kind == "redundant" else [1.0]
            for p in ratios:
                chosen = list(_selections(state, seed, p, alphas, ratios))
                res = train_targets(state["pool"].X, state["pool"].y, [c[3] for c in chosen],
                                    state["pool"].X_test, state["pool"].y_test, cfg.epochs,
                                    init_seeds(seed, cfg.inits))
                for (variant, method_name, alpha, S, sel_flops, sel_s), acc in zip(chosen, res["accuracy"]):
                    rows.append(_row(state, kind, seed, method_name, variant, alpha, p, S, acc, cfg.epochs,
                                     sel_flops, sel_s))
                    if first and p == kept_ratio:
                        extras["kept"][variant] = np.asarray(S)
                if kind == "redundant" and np.isclose(p, 0.5):
                    _time_mwcp(cfg, state, seed, chosen, rows)
    return rows, extras


def _warm_up() -> None:
    """Pay one-off costs (scikit-learn's k-means import and first fit, torch's first steps) before
    anything is timed, so that no method's seconds include them."""
    from replib.models.mlp import MLP, train_classifier

    neighbourhoods(np.random.default_rng(0).random((20, 4)), np.zeros(20, np.int64), 2, rng=0)
    x = np.zeros((8, 64), np.float32)
    train_classifier(MLP([64, HIDDEN, N_CLASSES], seed=0), x, np.arange(8) % N_CLASSES, steps=4,
                     batch_size=4)


def _prepare(cfg, kind: str, seed: int, rows: list, generator) -> dict:
    """Pool, proxy scores, neighbourhoods and the proxy and full-data rows of one pool and seed."""
    pool = make_pool(kind, seed, generator, cfg.n_test)
    proxy = train_proxy(pool.X, pool.y, steps=cfg.proxy_steps, seed=seed, batch_size=BATCH,
                        X_test=pool.X_test, y_test=pool.y_test)
    cost: dict = {}
    t0 = time.perf_counter()
    cluster = neighbourhoods(proxy.embeddings, pool.y, cfg.clusters_per_class, rng=seed, cost=cost)
    graph_s = time.perf_counter() - t0
    state = dict(seed=seed, pool=pool, H=proxy.entropy, z=proxy.embeddings, cluster=cluster,
                 graph_seconds=graph_s, graph_flops=float(cost.get("flops", 0.0)))
    nan = float("nan")
    rows.append(dict(pool=kind, seed=seed, method="proxy", variant="proxy", alpha=nan, ratio=0.0,
                     size=pool.n, accuracy=proxy.test_accuracy, init_sd=nan,
                     train_flops=proxy_flops(cfg.proxy_steps, BATCH, pool.n),
                     select_flops=state["graph_flops"], train_seconds=proxy.seconds,
                     select_seconds=graph_s, dup_fraction=nan, redundant_fraction=nan,
                     clusters_covered=nan, objective=nan))
    everything = np.arange(pool.n)
    res = train_targets(pool.X, pool.y, [everything], pool.X_test, pool.y_test, cfg.epochs,
                        init_seeds(seed, cfg.inits))
    rows.append(_row(state, kind, seed, "full", "full", nan, 0.0, everything, res["accuracy"][0],
                     cfg.epochs, 0.0, nan))
    return state


def _selections(state: dict, seed: int, p: float, alphas, ratios):
    """(variant, method, alpha, kept indices, selection FLOPs, selection seconds) of every selector
    at ratio p: random, top-b entropy, k-center, then MWCP at each alpha (its FLOPs and seconds
    include the k-means neighbourhoods). Farthest-first traversal is nested (its first b picks do not
    depend on the budget), so k-center runs once per pool and seed, to the largest budget of
    ``ratios``, from a first centre drawn with ``default_rng([seed, 7])``; each ratio takes a prefix
    (its seconds: the traversal's, pro rata)."""
    pool, H, z, cluster = state["pool"], state["H"], state["z"], state["cluster"]
    n = pool.n
    b = int(round((1.0 - p) * n))
    nan = float("nan")
    rng = np.random.default_rng([seed, int(round(1000 * p))])
    t0 = time.perf_counter()
    S = select_random(rng, n, b)
    yield "random", "random", nan, S, 0.0, time.perf_counter() - t0
    t0 = time.perf_counter()
    S = select_top_entropy(H, b)
    yield "entropy", "entropy", nan, S, float(n * np.log2(max(n, 2))), time.perf_counter() - t0
    if "kcenter" not in state:  # one traversal per pool and seed; its first b picks are k-center at b
        t0 = time.perf_counter()
        b_max = int(round((1.0 - min(ratios)) * n))
        state["kcenter"] = select_kcenter(z, b_max, np.random.default_rng([seed, 7]))
        state["kcenter_seconds"] = time.perf_counter() - t0
    S = state["kcenter"][:b]
    yield ("kcenter", "kcenter", nan, S, float(b) * n * (2.0 * z.shape[1] + 2.0),
           state["kcenter_seconds"] * b / state["kcenter"].size)
    for alpha in alphas:
        res = select_mwcp(H, z, cluster, b, alpha)
        yield (variant_name("mwcp", alpha), "mwcp", float(alpha), res.order,
               state["graph_flops"] + res.flops, state["graph_seconds"] + res.seconds)


def _row(state, kind, seed, method_name, variant, alpha, p, S, acc, epochs, select_flops, select_s) -> dict:
    """The row of one kept subset S (accuracy: one value per init)."""
    pool = state["pool"]
    S = np.asarray(S, dtype=np.int64)
    acc = np.asarray(acc, dtype=float)
    return dict(pool=kind, seed=seed, method=method_name, variant=variant, alpha=alpha, ratio=float(p),
                size=int(S.size), accuracy=float(acc.mean()),
                init_sd=float(acc.std(ddof=1)) if acc.size > 1 else float("nan"),
                train_flops=training_flops(int(epochs) * S.size), select_flops=float(select_flops),
                train_seconds=float("nan"), select_seconds=float(select_s),
                **subset_stats(S, pool, state["cluster"], state["H"], state["z"]))


def _time_mwcp(cfg, state, seed, chosen, rows) -> None:
    """Wall-clock seconds (measurements) of training one model alone on all data and on the MWCP
    (alpha = 1) subset at p = 0.5, written into those rows' ``train_seconds``."""
    pool = state["pool"]
    s0 = init_seeds(seed, 1)[0]
    mw = variant_name("mwcp", 1.0)
    S = next((c[3] for c in chosen if c[0] == mw), None)
    if S is None:
        return
    for variant, ratio, idx in (("full", 0.0, np.arange(pool.n)), (mw, 0.5, np.asarray(S))):
        res = train_target(pool.X[idx], pool.y[idx], pool.X_test[:1], pool.y_test[:1], cfg.epochs, s0)
        for row in rows:
            if (row["pool"], row["seed"], row["variant"]) == ("redundant", seed, variant) and np.isclose(
                    row["ratio"], ratio):
                row["train_seconds"] = res["train_seconds"]


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


PAPER_COMPUTE_RATIO = 1.0 - 0.432  # ImageNet-1k at 50% pruning: 7.9 h against 13.9 h


def claim_values(rows, guarantee, selection_seconds, n_test: int = N_TEST) -> dict:
    """Per-seed values of the claims declared in the chapter's ``chapter.yml``.

    ``rows``: the rows of :func:`run_experiment` (list of dicts or a DataFrame; rows without a
    ``pool`` are read as the redundant pool). ``guarantee``: the dict of :func:`greedy_guarantee_check`
    for each seed (``{seed: dict}``, instances drawn per seed; a single dict is repeated for every
    seed); ``selection_seconds``: the seconds of :func:`selection_seconds` (or ``{seed: seconds}``);
    ``n_test``: the size of the test set, for the noise floor m3 (:func:`accuracy_noise_floor` at the
    full-data accuracy). Claims on the clean pool end in ``_clean``. Values that need a ratio or a pool
    the profile did not run are NaN. Returns ``{seed: {claim_id: value}}``.
    """
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    by_seed: dict = {}
    for row in rows:
        kind = row.get("pool", "redundant")
        kind = "redundant" if not isinstance(kind, str) else kind
        key = (kind, row["variant"], round(float(row["ratio"]), 6))
        by_seed.setdefault(row["seed"], {})[key] = row
    nan = float("nan")
    mw = variant_name("mwcp", 1.0)
    out = {}
    for seed, m in by_seed.items():

        def get(variant, p, field="accuracy", pool="redundant", m=m):
            """One field of one row, NaN when absent."""
            row = m.get((pool, variant, round(p, 6)))
            return float(row[field]) if row is not None and field in row else nan

        def compute_ratio(p, field="flops"):
            """(proxy + selection + training on the MWCP subset at p) / training on all data, in FLOPs
            (one model each) or in seconds."""
            train, select = f"train_{field}", f"select_{field}"
            pipeline = get("proxy", 0.0, train) + get(mw, p, select) + get(mw, p, train)
            return pipeline / get("full", 0.0, train)

        values = {}
        for pool, tag in (("redundant", ""), ("clean", "_clean")):

            def acc(variant, p, pool=pool):
                return get(variant, p, pool=pool)

            full = acc("full", 0.0)
            values.update({
                f"q1_target_competent{tag}": full,
                f"q2_proxy_trained{tag}": acc("proxy", 0.0),
                f"p1_random_lossy_30{tag}": acc("random", 0.3) - full,
                f"p2_random_lossy_50{tag}": acc("random", 0.5) - full,
                f"r1_room_random_30{tag}": full - acc("random", 0.3),
                f"r2_room_random_50{tag}": full - acc("random", 0.5),
                f"r3_room_kcenter_30{tag}": full - acc("kcenter", 0.3),
                f"r4_room_kcenter_50{tag}": full - acc("kcenter", 0.5),
                f"r5_room_kcenter_70{tag}": full - acc("kcenter", 0.7),
                f"c1a_beats_random_30{tag}": acc(mw, 0.3) - acc("random", 0.3),
                f"c1b_beats_random_50{tag}": acc(mw, 0.5) - acc("random", 0.5),
                f"h1_lossless_30{tag}": acc(mw, 0.3) - full,
                f"h2_lossless_50{tag}": acc(mw, 0.5) - full,
                f"k1_vs_kcenter_30{tag}": acc(mw, 0.3) - acc("kcenter", 0.3),
                f"k2_vs_kcenter_50{tag}": acc(mw, 0.5) - acc("kcenter", 0.5),
                f"k3_vs_kcenter_70{tag}": acc(mw, 0.7) - acc("kcenter", 0.7),
            })
        full = get("full", 0.0)
        g = _per_seed(guarantee, seed)
        inits = [get(mw, p, "init_sd") for p in (0.3, 0.5)] + [get("random", p, "init_sd") for p in (0.3, 0.5)]
        values.update({
            "r6_room_entropy_70": full - get("entropy", 0.7),
            "c3_unified_vs_intrinsic_70": get(mw, 0.7) - get("entropy", 0.7),
            "c4a_greedy_ratio": float(g["min_ratio"]),
            "c4b_greedy_gap": float(g["mean_gap"]),
            "c5_compute_end_to_end_50": compute_ratio(0.5),
            "m1_training_time_ratio": get(mw, 0.5, "train_seconds") / get("full", 0.0, "train_seconds"),
            "m2_selection_seconds_20k": float(_per_seed(selection_seconds, seed)),
            "m3_test_noise_floor": accuracy_noise_floor(full, n_test),
            "m4_seconds_end_to_end_50": compute_ratio(0.5, "seconds"),
            "m5_compute_end_to_end_30": compute_ratio(0.3),
            "m6_init_spread": float(np.nanmean(inits)) if not np.all(np.isnan(inits)) else nan,
        })
        out[seed] = values
    return out
