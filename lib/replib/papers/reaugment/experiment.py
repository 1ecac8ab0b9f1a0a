"""The ReAugment experiment: the profiles, one run per (seed, data set) through stages 0, A, B and C
with every baseline, the runs over seeds, and the claim values.

Contents: :data:`METHODS`, :data:`EXPERIMENT_PROFILES`, :data:`EXPERIMENT_BOUNDS`,
:func:`augmented_sets`, :func:`run_dataset`, :func:`run_seed`, :func:`run_experiment`,
:func:`claim_values`.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, seed_everything

from . import baselines
from .method import (
    VMAE,
    anchor_distance,
    fold_gap,
    generate,
    kfold_assignment,
    rl_finetune,
    select_anchors,
    train_vmae,
    zoo_errors,
    zoo_variance,
)
from .task import (
    DATASETS,
    SEASONAL_PERIOD,
    WEIGHT_DECAY,
    ForecasterBank,
    fit_forecasters,
    forecast_mse,
    load_series,
    make_windows,
    split_window,
)

__all__ = ["METHODS", "EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "augmented_sets", "run_dataset", "run_seed",
           "run_experiment", "claim_values"]

# What each retrained forecaster sees: D alone, or D plus the windows of one augmenter.
METHODS = ("none", "jitter", "vmae", "reaugment", "random_anchors")
CLAIM_DATASETS = ("elnino", "sunspots")  # the judged claims; co2 is a measurement

_COMMON = dict(lookback=36, horizon=12, train_frac=0.7, n_shot=60, zoo_size=5, anchor_fraction=0.5,
               forecaster_lr=3e-3, vmae_lr=4e-3, mask_ratio=0.25, kl_weight=0.1, latent=8, rl_lr=3e-4, lam=0.3,
               rl_samples=4, per_anchor=2, jitter_sigma=0.1, untuned_run=True)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], datasets=list(DATASETS), epochs=20, vmae_steps=30, rl_iterations=10, n_forecasters=1,
                  **{**_COMMON, "untuned_run": False}),  # m3 and m4 (measurements) are left out at smoke
    "book": dict(seeds=[0, 1, 2], datasets=list(DATASETS), epochs=300, vmae_steps=800, rl_iterations=300,
                 n_forecasters=3, **_COMMON),
    "paper": dict(seeds=list(range(10)), datasets=list(DATASETS), epochs=300, vmae_steps=1500, rl_iterations=600,
                  n_forecasters=5, **_COMMON),
}
EXPERIMENT_BOUNDS = {
    "datasets": set(DATASETS), "epochs": (1, None), "vmae_steps": (1, None), "rl_iterations": (0, None),
    "n_forecasters": (1, None), "lookback": (12, None), "horizon": (1, None), "train_frac": (0.3, 0.9),
    "n_shot": (10, None), "zoo_size": (2, None), "anchor_fraction": (0.05, 1.0), "forecaster_lr": (0.0, None),
    "vmae_lr": (0.0, None), "mask_ratio": (0.05, 0.9), "kl_weight": (0.0, None), "latent": (1, None),
    "rl_lr": (0.0, None), "lam": (0.0, None), "rl_samples": (1, None), "per_anchor": (1, None),
    "jitter_sigma": (0.0, None),
}


def augmented_sets(train: np.ndarray, generated: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stage C's training sets, one per method of :data:`METHODS`: D for ``none``, D followed by
    that method's windows otherwise (anchors are augmented, never removed). Returns (windows (5, N,
    T) zero-padded to the longest set, weights (5, N): 1 on real rows, 0 on padding)."""
    sets = [train] + [np.concatenate([train, generated[m]]) for m in METHODS[1:]]
    n = max(len(s) for s in sets)
    windows = np.zeros((len(sets), n, train.shape[1]))
    weights = np.zeros((len(sets), n))
    for i, s in enumerate(sets):
        windows[i, :len(s)], weights[i, :len(s)] = s, 1.0
    return windows, weights


def _generated_rows(zoo, samples, anchors, cfg, key) -> dict:
    variance = zoo_variance(zoo_errors(zoo, samples, cfg.lookback))
    distance = anchor_distance(torch.as_tensor(samples), torch.as_tensor(np.repeat(anchors, cfg.per_anchor, axis=0)))
    return {**key, "zoo_variance": float(variance.mean()), "distance": float(distance.mean()),
            "n_windows": int(len(samples))}


def run_dataset(cfg, seed: int, name: str, weight_decay: float | None = None, vmae_state: dict | None = None) -> dict:
    """Stages 0, A, B and C on one data set for one seed, with every baseline.

    Stage 0: a K-fold zoo of forecasters (K = ``zoo_size``), zoo variances, the top
    ``anchor_fraction`` as anchors and the fold-gap diagnostic. Stage A: the VMAE on D. Stage B:
    REINFORCE from the stage-A VMAE on the anchors (ReAugment) and, as the "where" ablation, from
    the same VMAE on a random set of as many windows (random anchors). Stage C: ``per_anchor``
    windows per anchor from the VMAE before RL, after RL and the random-anchor run (the same masks
    and noise), one jittered copy of D, and ``n_forecasters`` forecasters per method (the same
    initialisations for every method), tested on the test windows. Returns row lists: ``windows``
    (per training window: zoo variance, out-of-fold and in-fold error, anchor flag), ``vmae``
    (stage-A loss every 10 steps), ``rl`` (stage-B batch means per iteration), ``generated`` (zoo
    variance and anchor distance of each augmenter's windows), ``mse`` (test MSE per method and
    forecaster), ``reference`` (test MSE of the look-back mean and seasonal naive forecasts),
    ``examples`` (the top anchor and 5 samples from it before and after RL) and ``seconds``.
    ``weight_decay`` replaces the data set's :data:`task.WEIGHT_DECAY` for every forecaster (zoo
    members and retrained models; m3 and m4 use 0.0, the recipe of our first plan). ``vmae_state``,
    the stage-A VMAE of an earlier run of the same seed and data set (returned as ``vmae_state``), is
    loaded instead of training it again: stage A does not depend on the forecaster."""
    d = DATASETS.index(name)
    key = {"seed": seed, "dataset": name}
    win = make_windows(load_series(name), cfg.lookback, cfg.horizon, cfg.train_frac, cfg.n_shot)
    train, test = win["train"], win["test"]
    rng = np.random.default_rng([seed, d])
    base = 100_000 * seed + 1000 * d
    seconds = {}
    wd = WEIGHT_DECAY[name] if weight_decay is None else weight_decay

    start = time.perf_counter()
    folds = kfold_assignment(len(train), cfg.zoo_size, rng)
    zoo = ForecasterBank([base + k for k in range(cfg.zoo_size)], cfg.lookback, cfg.horizon)
    fit_forecasters(zoo, train, (folds[None, :] != np.arange(cfg.zoo_size)[:, None]).astype(float), cfg.epochs,
                    cfg.forecaster_lr, wd)
    errors = zoo_errors(zoo, train, cfg.lookback)
    variance = zoo_variance(errors).double().numpy()
    anchors = select_anchors(variance, cfg.anchor_fraction)
    out_of_fold, in_fold = fold_gap(errors.numpy(), folds)
    is_anchor = np.isin(np.arange(len(train)), anchors)
    windows = [{**key, "index": i, "fold": int(folds[i]), "zoo_variance": float(variance[i]),
                "out_of_fold": float(out_of_fold[i]), "in_fold": float(in_fold[i]), "anchor": bool(is_anchor[i])}
               for i in range(len(train))]
    seconds["zoo"] = time.perf_counter() - start

    start = time.perf_counter()
    vmae = VMAE(train.shape[1], cfg.latent, seed=base + 100)
    if vmae_state is None:
        history = train_vmae(vmae, train, cfg.vmae_steps, cfg.vmae_lr, cfg.mask_ratio, cfg.kl_weight, seed=base + 101)
        vmae_state = copy.deepcopy(vmae.state_dict())
    else:
        vmae.load_state_dict(vmae_state)
        history = []
    vmae_rows = [{**key, "step": s + 1, **h} for s, h in enumerate(history) if (s + 1) % 10 == 0 or s == 0]
    recon = float(np.mean([h["reconstruction"] for h in history[-50:]])) if history else float("nan")
    seconds["vmae"] = time.perf_counter() - start

    start = time.perf_counter()
    random_idx = np.sort(rng.choice(len(train), size=len(anchors), replace=False))
    generators = {"vmae": vmae, "reaugment": copy.deepcopy(vmae), "random_anchors": copy.deepcopy(vmae)}
    anchor_sets = {"vmae": train[anchors], "reaugment": train[anchors], "random_anchors": train[random_idx]}
    rl_rows = []
    for method in ("reaugment", "random_anchors"):
        curve, d0 = rl_finetune(generators[method], zoo, anchor_sets[method], cfg.lookback, cfg.rl_iterations,
                                cfg.rl_lr, cfg.lam, cfg.rl_samples, cfg.mask_ratio, seed=base + 200)
        rl_rows += [{**key, "method": method, "iteration": i + 1, "d0": d0, **c} for i, c in enumerate(curve)]
    seconds["rl"] = time.perf_counter() - start

    start = time.perf_counter()
    generated = {m: generate(generators[m], anchor_sets[m], cfg.per_anchor, cfg.mask_ratio, seed=base + 300)
                 for m in generators}
    generated["jitter"] = baselines.jitter(train, cfg.jitter_sigma, rng)
    gen_rows = [_generated_rows(zoo, generated[m], anchor_sets[m], cfg, {**key, "method": m}) for m in generators]
    top = train[anchors[:1]]
    examples = [{**key, "method": m, "sample": j, "anchor": top[0].tolist(), "window": w.tolist()}
                for m in ("vmae", "reaugment") for j, w in enumerate(generate(generators[m], top, 5, cfg.mask_ratio,
                                                                             seed=base + 400))]
    sets, weights = augmented_sets(train, generated)
    n_init = cfg.n_forecasters
    bank = ForecasterBank([base + 500 + j for _ in METHODS for j in range(n_init)], cfg.lookback, cfg.horizon)
    fit_forecasters(bank, np.repeat(sets, n_init, axis=0), np.repeat(weights, n_init, axis=0), cfg.epochs,
                    cfg.forecaster_lr, wd)
    mse = forecast_mse(bank, test).reshape(len(METHODS), n_init)
    mse_rows = [{**key, "method": m, "init": j, "mse": float(mse[i, j])} for i, m in enumerate(METHODS)
                for j in range(n_init)]
    x, y = split_window(test, cfg.lookback)
    reference = {**key, "lookback_mean": float(((baselines.lookback_mean_forecast(x, cfg.horizon) - y) ** 2).mean()),
                 "seasonal_naive": float(((baselines.seasonal_naive_forecast(x, cfg.horizon, SEASONAL_PERIOD[name])
                                           - y) ** 2).mean()),
                 "reconstruction": recon, "n_test": int(len(test)), "n_anchors": int(len(anchors))}
    seconds["stage_c"] = time.perf_counter() - start
    return {"windows": windows, "vmae": vmae_rows, "rl": rl_rows, "generated": gen_rows, "mse": mse_rows,
            "reference": [reference], "examples": examples, "seconds": [{**key, **seconds}], "vmae_state": vmae_state}


_ROW_KEYS = ("windows", "vmae", "rl", "generated", "mse", "reference", "examples", "seconds", "untuned_mse")


def run_seed(cfg, seed: int, threads: int = 1) -> dict:
    """:func:`run_dataset` for every data set of ``cfg.datasets``, on ``threads`` torch threads,
    the row lists concatenated; when ``cfg.untuned_run``, also the whole run without weight decay
    on El Nino and sunspots (m3, m4), whose test MSEs are kept as ``untuned_mse``."""
    rows = {k: [] for k in _ROW_KEYS}
    states = {}
    with compute_threads(threads):
        for name in cfg.datasets:
            seed_everything(seed)
            out = run_dataset(cfg, seed, name)
            states[name] = out.pop("vmae_state")
            for k, v in out.items():
                rows[k] += v
        for name in CLAIM_DATASETS if cfg.untuned_run else ():
            seed_everything(seed)
            rows["untuned_mse"] += run_dataset(cfg, seed, name, weight_decay=0.0, vmae_state=states.get(name))["mse"]
    return rows


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed; one data frame per row list of :func:`run_dataset`."""
    seeds = progress(cfg.seeds) if progress else cfg.seeds
    runs = [run_seed(cfg, seed, threads) for seed in seeds]
    return {k: pd.DataFrame([row for run in runs for row in run[k]]) for k in _ROW_KEYS}


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``, from the frames of
    :func:`run_experiment`. Test MSEs are first averaged over forecaster inits, per seed, data set
    and method. p1 = max over El Nino and sunspots of MSE(none) / MSE(look-back mean); p2 = max of
    the VMAE's reconstruction MSE; c1 = min over the two of (mean out-of-fold / mean in-fold error
    of the anchors) / (the same of the other windows); c2a = mean over the two of the zoo variance
    of ReAugment's windows / the VMAE-without-RL's; c2b = max of ReAugment's mean anchor distance;
    h1 = mean of MSE(reaugment) / MSE(none); h2 = max of MSE(reaugment) / MSE(vmae); c3 = mean of
    MSE(reaugment) / MSE(jitter); m1 = mean of MSE(random_anchors) / MSE(reaugment); m2 =
    MSE(reaugment) / MSE(none) on co2; m3 and m4 = h1's and h2's ratios without weight decay. nan
    where a data set (or the run without weight decay) is missing."""
    mse = results["mse"].groupby(["seed", "dataset", "method"])["mse"].mean()
    untuned = results.get("untuned_mse")
    untuned = (untuned.groupby(["seed", "dataset", "method"])["mse"].mean() if untuned is not None and len(untuned)
               else pd.Series(dtype=float))
    ref = results["reference"].set_index(["seed", "dataset"])
    gen = results["generated"].set_index(["seed", "dataset", "method"])
    win = results["windows"]
    nan = float("nan")

    def get(series, index):
        return float(series.loc[index]) if index in series.index else nan

    def over(seed, fn, reduce):
        vals = [fn(seed, name) for name in CLAIM_DATASETS]
        return float(reduce(vals))

    def ratio(a, b, table=mse):
        return lambda seed, name: get(table, (seed, name, a)) / get(table, (seed, name, b))

    def gap(seed, name):
        here = win[(win.seed == seed) & (win.dataset == name)]
        if not len(here):
            return nan
        top, rest = here[here.anchor], here[~here.anchor]
        return (top.out_of_fold.mean() / top.in_fold.mean()) / (rest.out_of_fold.mean() / rest.in_fold.mean())

    values = {}
    for seed in cfg.seeds:
        values[seed] = {
            "p1_forecaster_learns": over(seed, lambda s, n: get(mse, (s, n, "none")) / get(ref["lookback_mean"], (s, n)),
                                         np.max),
            "p2_generator_reconstructs": over(seed, lambda s, n: get(ref["reconstruction"], (s, n)), np.max),
            "c1_variance_flags_overfitting": over(seed, gap, np.min),
            "c2a_rl_raises_zoo_variance": over(seed, lambda s, n: get(gen["zoo_variance"], (s, n, "reaugment"))
                                               / get(gen["zoo_variance"], (s, n, "vmae")), np.mean),
            "c2b_rl_stays_near_anchors": over(seed, lambda s, n: get(gen["distance"], (s, n, "reaugment")), np.max),
            "h1_vs_no_augmentation": over(seed, ratio("reaugment", "none"), np.mean),
            "h2_vs_generator_without_rl": over(seed, ratio("reaugment", "vmae"), np.max),
            "c3_vs_jitter": over(seed, ratio("reaugment", "jitter"), np.mean),
            "m1_random_anchors": over(seed, ratio("random_anchors", "reaugment"), np.mean),
            "m2_co2": ratio("reaugment", "none")(seed, "co2"),
            "m3_untuned_vs_no_augmentation": over(seed, ratio("reaugment", "none", untuned), np.mean),
            "m4_untuned_vs_generator_without_rl": over(seed, ratio("reaugment", "vmae", untuned), np.max),
        }
    return values
