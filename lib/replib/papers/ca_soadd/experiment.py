"""CA-SOADD, the experiment: profiles, the per-seed corpus and feature cache, every variant on every
seed, and the claim values of ``chapter.yml``."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from replib import core
from replib.core.runtime import compute_threads, thread_budget

from . import baselines, method, task

__all__ = [
    "EXPERIMENT_PROFILES",
    "EXPERIMENT_BOUNDS",
    "VARIANTS",
    "ONE_CLASS_BASELINES",
    "load_corpus",
    "prepare_features",
    "evaluate",
    "run_seed",
    "run_experiment",
    "claim_values",
]

_COMMON = dict(d=64, hop=80, n_mels=40, dim=32, batch=32, lr=1e-3, margin=1.0, kappa=0.05, alpha=0.05)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_train=48, n_dev=16, n_test=16, n_sup=8, steps=24, **_COMMON),
    "book": dict(seeds=list(range(1000, 1010)), n_train=800, n_dev=100, n_test=100, n_sup=60, steps=300,
                 **_COMMON),
    "paper": dict(seeds=[1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009], n_train=1000, n_dev=200,
                  n_test=300, n_sup=100, steps=400, **_COMMON),
}

EXPERIMENT_BOUNDS = dict(d=(2, None), hop=(16, 256), n_mels=(8, 64), dim=(2, None), batch=(4, None),
                         lr=(1e-6, 1.0), margin=(0.0, 2.0), kappa=(0.0, None), alpha=(0.001, 0.5),
                         n_train=(40, None), n_dev=(10, None), n_test=(10, None), n_sup=(4, None),
                         steps=(1, None))

# variant name -> (trainer, overrides of SOADDConfig, probe pool)
VARIANTS = {
    "ca_soadd": ("soadd", {}, task.PROBES_STRUCTURE),
    "ca_soadd + idinv": ("soadd", {}, task.PROBES_WITH_IDINV),
    "without L_cabs": ("soadd", {"boundary": "none"}, task.PROBES_STRUCTURE),
    "BCE on probes": ("soadd", {"boundary": "bce"}, task.PROBES_STRUCTURE),
    "without OS": ("soadd", {"standardise": False}, task.PROBES_STRUCTURE),
    "deep_svdd": ("deep_svdd", {}, ()),
    "oc_softmax": ("oc_softmax", {}, ()),
    "oc_svm": ("oc_svm", {}, ()),
    "supervised (reference)": ("supervised", {}, ()),
}
ONE_CLASS_BASELINES = ("oc_svm", "deep_svdd", "oc_softmax")


def load_corpus(cfg):
    """The bona fide and attack clips of corpus seed ``cfg.data_seed`` as a ``datasets.Dataset``
    (cached; see :func:`task.build_corpus`)."""
    params = dict(seed=cfg.data_seed, n_train=cfg.n_train, n_dev=cfg.n_dev, n_test=cfg.n_test,
                  n_sup=getattr(cfg, "n_sup", 0))
    return core.cached_dataset("ca_soadd_corpus", params, lambda: task.build_corpus(**params),
                               source=task.build_corpus)


def prepare_features(cfg, corpus) -> dict:
    """Front-end features, computed once per corpus (the front-end is frozen): bona fide train
    clips, one benign view and one realisation of every probe operator of each, bona fide dev, the
    test clips by label, the structure probes of the bona fide test clips (a diagnostic) and the
    spoof clips of the supervised reference. The paper draws fresh views and probes every step; we
    draw once."""
    split = np.array(corpus["split"])
    label = np.array(corpus["label"])
    waves = np.asarray(corpus.with_format("numpy")["wave"], dtype=np.float64)
    train = waves[split == "train"]
    fe = task.FrontEnd(d=cfg.d, seed=cfg.data_seed, hop=cfg.hop, n_mels=cfg.n_mels).fit(train)
    rng = np.random.default_rng(cfg.data_seed + 1)
    feats = {
        "train": fe(train),
        "view": fe(task.benign_view(rng, train, cfg.kappa)),
        "probes": {p: fe(task.probe(rng, train, p)) for p in task.PROBES_WITH_IDINV},
        "dev": fe(waves[split == "dev"]),
        "test": {lab: fe(waves[(split == "test") & (label == lab)]) for lab in ("bona_fide",) + task.ATTACKS},
        "sup": fe(waves[split == "sup"]),
    }
    test_bona = waves[(split == "test") & (label == "bona_fide")]
    feats["test"].update({f"probe_{p}": fe(task.probe(rng, test_bona, p)) for p in task.PROBES_STRUCTURE})
    return feats


def _train_and_score(variant, feats, cfg, seed):
    """Train one variant and return its scores on dev and on every test label."""
    kind, overrides, pool = VARIANTS[variant]
    scfg = replace(method.SOADDConfig(steps=cfg.steps, batch=cfg.batch, lr=cfg.lr, margin=cfg.margin,
                                      dim=cfg.dim, warmup=cfg.steps // 4), **overrides)
    if kind == "soadd":
        enc, c = method.train_soadd(feats["train"], feats["view"], {p: feats["probes"][p] for p in pool},
                                    scfg, seed)

        def score(x):
            return method.cosine_score(method.embed(enc, x), c).numpy()
    elif kind == "deep_svdd":
        enc, c0 = baselines.train_deep_svdd(feats["train"], scfg, seed)

        def score(x):
            return baselines.deep_svdd_score(enc, c0, x)
    elif kind == "oc_svm":
        score = baselines.OCSVMBaseline(feats["train"]).score
    elif kind == "supervised":
        enc, out = baselines.train_supervised(feats["train"], feats["sup"], scfg, seed)

        def score(x):
            return baselines.supervised_score(enc, out, x)
    else:
        enc, w = baselines.train_oc_softmax(feats["train"], scfg, seed)

        def score(x):
            return baselines.oc_softmax_score(enc, w, x)
    return {"dev": score(feats["dev"]), **{lab: score(x) for lab, x in feats["test"].items()}}


def evaluate(scores: dict, alpha: float) -> dict:
    """EER per attack, the mean over the probe-distant attacks, the mean EER against held-out
    structure probes of bona fide test clips (a diagnostic), the bona fide test FNR at the
    threshold calibrated on bona fide dev scores (alpha-quantile) and the bona fide score spread."""
    bona = scores["bona_fide"]
    row = {f"eer_{a}": method.eer(bona, scores[a]) for a in task.ATTACKS}
    row["eer_distant"] = float(np.mean([row[f"eer_{a}"] for a in task.PROBE_DISTANT]))
    row["eer_probes"] = float(np.mean([method.eer(bona, scores[f"probe_{p}"]) for p in task.PROBES_STRUCTURE]))
    tau = method.calibrate_threshold(scores["dev"], alpha)
    row["fnr_at_alpha"] = float(np.mean(bona < tau))
    row["fpr_at_alpha"] = float(np.mean(np.concatenate([scores[a] for a in task.ATTACKS]) >= tau))
    row["bona_std"] = float(np.std(bona))
    return row


def run_seed(cfg, seed: int, keep_scores: bool = False, progress=None):
    """One seed: its own corpus (corpus seed = ``seed``: speakers, utterances, attacks, probes,
    views and the front-end's random maps), then every variant of :data:`VARIANTS` with training
    seed ``seed``. Returns (rows, scores by variant or None)."""
    cfg = SimpleNamespace(**{**vars(cfg), "data_seed": seed})
    with compute_threads(1):
        feats = prepare_features(cfg, load_corpus(cfg))
        rows, kept = [], {}
        for variant in progress(list(VARIANTS)) if progress is not None else VARIANTS:
            core.seed_everything(seed)
            scores = _train_and_score(variant, feats, cfg, seed)
            rows.append(dict(seed=seed, variant=variant, **evaluate(scores, cfg.alpha)))
            if keep_scores:
                kept[variant] = scores
    return rows, (kept if keep_scores else None)


def run_experiment(cfg, progress=None, workers: int = 2):
    """:func:`run_seed` for every seed of ``cfg``: every variant on a corpus of its own per seed.
    ``workers`` > 1 runs the seeds in that many fresh processes (capped by $REPLIB_MAX_THREADS); a
    seed depends only on ``cfg`` and its number, so the results equal a one-process run's.
    Returns (rows, scores of the first seed by variant)."""
    cfg = SimpleNamespace(**vars(cfg))
    workers = min(thread_budget(workers), len(cfg.seeds))
    keep = [s == cfg.seeds[0] for s in cfg.seeds]
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = list(pool.map(run_seed, [cfg] * len(cfg.seeds), cfg.seeds, keep))
    else:
        runs = [run_seed(cfg, s, k, progress) for s, k in zip(cfg.seeds, keep)]
    rows = [r for run, _ in runs for r in run]
    return rows, runs[0][1]


def claim_values(runs, cfg=None) -> dict:
    """Per-seed values of the claims of ``chapter.yml`` from the rows of :func:`run_experiment`
    (a list of dicts or a DataFrame). EERs are fractions; "distant" is the mean over the
    probe-distant attacks A1 Griffin-Lim, A2 LPC-buzz, A3 oversmoothed and A5 harmonic."""
    if hasattr(runs, "to_dict"):
        runs = runs.to_dict("records")
    by_seed: dict = {}
    for row in runs:
        by_seed.setdefault(row["seed"], {})[row["variant"]] = row
    out = {}
    for seed, m in by_seed.items():
        dist = {v: r["eer_distant"] for v, r in m.items()}
        full = dist["ca_soadd"]
        best_baseline = min(dist[b] for b in ONE_CLASS_BASELINES)
        fnr = m["ca_soadd"]["fnr_at_alpha"]
        out[seed] = {
            "p1_one_class_competent": max(dist["deep_svdd"], dist["oc_softmax"]),
            "p2_encoder_competent": dist["supervised (reference)"],
            "p3_headroom": min(best_baseline, dist["without L_cabs"]) - dist["supervised (reference)"],
            "p4_boundary_trained": m["without L_cabs"]["eer_probes"] - m["ca_soadd"]["eer_probes"],
            "h1_beats_one_class": best_baseline - full,
            "h2_cabs_ablation": dist["without L_cabs"] - full,
            "m1_margin_vs_bce": dist["BCE on probes"] - full,
            "m2_idinv_sensitivity": abs(dist["ca_soadd + idinv"] - full),
            "m3_os_ablation": dist["without OS"] - full,
            "c1_calibration": max(0.02 - fnr, fnr - 0.10),
            "x1_splice_gain": m["without L_cabs"]["eer_splice"] - m["ca_soadd"]["eer_splice"],
            "x2_ocsvm_calibration": dist["oc_svm"],
        }
    return out
