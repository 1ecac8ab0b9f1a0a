"""CA-SOADD, the experiment: profiles, the corpus and feature cache, every variant on every seed,
and the claim values of ``chapter.yml``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from replib import core
from replib.core.runtime import compute_threads

from . import baselines, method, task

__all__ = [
    "EXPERIMENT_PROFILES",
    "EXPERIMENT_BOUNDS",
    "VARIANTS",
    "load_corpus",
    "prepare_features",
    "run_experiment",
    "claim_values",
]

_COMMON = dict(data_seed=0, d=24, dim=32, batch=32, lr=1e-3, margin=1.0, kappa=0.05, alpha=0.05)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_train=60, n_dev=20, n_test=20, steps=30, **_COMMON),
    "book": dict(seeds=[0, 1, 2], n_train=400, n_dev=150, n_test=150, steps=300, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], n_train=1000, n_dev=200, n_test=300, steps=400, **_COMMON),
}

EXPERIMENT_BOUNDS = dict(data_seed=(0, None), d=(2, None), dim=(2, None), batch=(2, None), lr=(1e-6, 1.0),
                         margin=(0.0, 2.0), kappa=(0.0, None), alpha=(0.001, 0.5), n_train=(40, None),
                         n_dev=(10, None), n_test=(10, None), steps=(1, None))

# variant name -> (trainer, overrides of SOADDConfig, probe pool)
VARIANTS = {
    "ca_soadd": ("soadd", {}, task.PROBES_STRUCTURE),
    "ca_soadd + idinv": ("soadd", {}, task.PROBES_WITH_IDINV),
    "without L_cabs": ("soadd", {"boundary": "none"}, task.PROBES_STRUCTURE),
    "BCE on probes": ("soadd", {"boundary": "bce"}, task.PROBES_STRUCTURE),
    "deep_svdd": ("deep_svdd", {}, ()),
    "oc_softmax": ("oc_softmax", {}, ()),
    "oc_svm": ("oc_svm", {}, ()),
}


def load_corpus(cfg):
    """The bona fide and attack clips as a ``datasets.Dataset`` (cached; see :func:`task.build_corpus`)."""
    params = dict(seed=cfg.data_seed, n_train=cfg.n_train, n_dev=cfg.n_dev, n_test=cfg.n_test)
    return core.cached_dataset("ca_soadd_corpus", params, lambda: task.build_corpus(**params),
                               source=task.build_corpus)


def prepare_features(cfg, corpus) -> dict:
    """Front-end features, computed once per experiment (the front-end is frozen): bona fide train
    clips, one benign view and one realisation of every probe operator of each, bona fide dev,
    the test clips by label, and (a diagnostic) the structure probes of the bona fide test clips. The paper draws fresh views and probes every step; we draw once."""
    split = np.array(corpus["split"])
    label = np.array(corpus["label"])
    waves = np.asarray(corpus.with_format("numpy")["wave"], dtype=np.float64)
    train = waves[split == "train"]
    fe = task.FrontEnd(d=cfg.d, seed=cfg.data_seed).fit(train)
    rng = np.random.default_rng(cfg.data_seed + 1)
    feats = {
        "train": fe(train),
        "view": fe(task.benign_view(rng, train, cfg.kappa)),
        "probes": {p: fe(task.probe(rng, train, p)) for p in task.PROBES_WITH_IDINV},
        "dev": fe(waves[split == "dev"]),
        "test": {lab: fe(waves[(split == "test") & (label == lab)]) for lab in ("bona_fide",) + task.ATTACKS},
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
    else:
        enc, w = baselines.train_oc_softmax(feats["train"], scfg, seed)

        def score(x):
            return baselines.oc_softmax_score(enc, w, x)
    return {"dev": score(feats["dev"]), **{lab: score(x) for lab, x in feats["test"].items()}}


def evaluate(scores: dict, alpha: float) -> dict:
    """EER per attack, the mean over the probe-distant attacks, the mean EER against held-out
    structure probes of bona fide test clips (a diagnostic), the bona fide test FNR at the
    threshold calibrated on bona fide dev scores (alpha-quantile) and the bona fide cosine spread."""
    bona = scores["bona_fide"]
    row = {f"eer_{a}": method.eer(bona, scores[a]) for a in task.ATTACKS}
    row["eer_distant"] = float(np.mean([row[f"eer_{a}"] for a in task.PROBE_DISTANT]))
    row["eer_probes"] = float(np.mean([method.eer(bona, scores[f"probe_{p}"]) for p in task.PROBES_STRUCTURE]))
    tau = method.calibrate_threshold(scores["dev"], alpha)
    row["fnr_at_alpha"] = float(np.mean(bona < tau))
    row["fpr_at_alpha"] = float(np.mean(np.concatenate([scores[a] for a in task.ATTACKS]) >= tau))
    row["bona_std"] = float(np.std(bona))
    return row


def run_experiment(cfg, progress=None):
    """Every variant of :data:`VARIANTS` on every seed of ``cfg``, on one corpus and one feature
    cache (``data_seed``); the seeds vary the head's initialisation, the batches and the probe
    operator drawn per batch. Returns (rows, scores of the first seed by variant, features)."""
    with compute_threads(1):
        feats = prepare_features(cfg, load_corpus(cfg))
        jobs = [(seed, v) for seed in cfg.seeds for v in VARIANTS]
        rows, first = [], {}
        for seed, variant in progress(jobs) if progress is not None else jobs:
            core.seed_everything(seed)
            scores = _train_and_score(variant, feats, cfg, seed)
            rows.append(dict(seed=seed, variant=variant, **evaluate(scores, cfg.alpha)))
            if seed == cfg.seeds[0]:
                first[variant] = scores
    return rows, first, feats


def claim_values(runs, cfg=None) -> dict:
    """Per-seed values of the claims of ``chapter.yml`` from the rows of :func:`run_experiment`
    (a list of dicts or a DataFrame). EERs are fractions; "distant" is the mean over the
    probe-distant attacks A1-A3."""
    if hasattr(runs, "to_dict"):
        runs = runs.to_dict("records")
    by_seed: dict = {}
    for row in runs:
        by_seed.setdefault(row["seed"], {})[row["variant"]] = row
    out = {}
    for seed, m in by_seed.items():
        full = m["ca_soadd"]["eer_distant"]
        best_baseline = min(m[b]["eer_distant"] for b in ("oc_svm", "deep_svdd", "oc_softmax"))
        out[seed] = {
            "p1_attacks_detectable": m["oc_svm"]["eer_distant"],
            "h1_beats_one_class": best_baseline - full,
            "h2_cabs_ablation": m["without L_cabs"]["eer_distant"] - full,
            "m1_margin_vs_bce": m["BCE on probes"]["eer_distant"] - full,
            "m2_idinv_sensitivity": abs(m["ca_soadd + idinv"]["eer_distant"] - full),
            "c1_calibration": max(0.02 - m["ca_soadd"]["fnr_at_alpha"], m["ca_soadd"]["fnr_at_alpha"] - 0.10),
            "x1_splice_gain": m["without L_cabs"]["eer_splice"] - m["ca_soadd"]["eer_splice"],
        }
    return out
