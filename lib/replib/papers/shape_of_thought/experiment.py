"""SoT, the experiment: profiles, the three variants trained on the same tables, their sampled
test images and the claim values of ``chapter.yml``."""

from __future__ import annotations

import numpy as np

from replib.core.runtime import compute_threads, model_device

from .method import generate, train_model
from .task import (
    COUNTS,
    TOK,
    VARIANTS,
    build_sequence,
    count_legs,
    is_connected,
    sample_table,
    tokens_to_image,
    trace_stable,
)

__all__ = ["EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "VARIANTS", "training_tables", "evaluate",
           "run_experiment", "claim_values"]

_COMMON = dict(n_train=2000, img_temperature=1.0, batch_size=32)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], steps=20, n_test=8, img_rounds=2, d_model=32, lr=0.01, **_COMMON),
    "book": dict(seeds=[0, 1, 2], steps=300, n_test=150, img_rounds=8, d_model=32, lr=0.01, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], steps=1500, n_test=300, img_rounds=8, d_model=64, lr=0.003,
                  **_COMMON),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
EXPERIMENT_BOUNDS = dict(steps=(1, None), n_test=(2, None), img_rounds=(1, 16), d_model=(8, 512),
                         lr=(1e-6, 1.0), n_train=(1, None), img_temperature=(0.01, None),
                         batch_size=(1, None))


def training_tables(n: int, seed: int) -> list[tuple[int, list]]:
    """The seed's training tables ``[(k, parts), ...]`` (k uniform over the counts); every variant
    is trained on these same instances."""
    rng = np.random.default_rng(seed)
    tables = []
    for _ in range(n):
        k = int(rng.choice(COUNTS))
        tables.append((k, sample_table(rng, k)))
    return tables


def evaluate(outputs, ks) -> dict:
    """The metric parsers over generated outputs: component numeracy, connectivity, trace stability
    (SoT only; NaN for variants without states) and the share of plans with k + 1 steps."""
    finals = [tokens_to_image(o["final"]) for o in outputs]
    stable = [trace_stable([tokens_to_image(s) for s in o["states"]]) for o in outputs if o["states"]]
    return dict(
        numeracy=float(np.mean([count_legs(f) == k for f, k in zip(finals, ks)])),
        connectivity=float(np.mean([is_connected(f) for f in finals])),
        stability=float(np.mean(stable)) if stable else float("nan"),
        plan_length_ok=float(np.mean([len(o["rationales"]) == k + 1 for o, k in zip(outputs, ks)])),
    )


def run_experiment(cfg, progress=None):
    """Train and sample every variant of :data:`VARIANTS` on every seed of ``cfg``.

    Per seed: the same ``n_train`` tables for all variants (``training_tables``), a model seeded with
    the seed (on ``model_device(cfg.profile)``: a GPU at the paper profile when there is one),
    ``n_test`` prompts split evenly over the counts, sampled with the seed + 1000.
    Returns ``(rows, samples, losses)``: one row per (seed, variant) with :func:`evaluate`'s
    metrics and ``n_test``; the outputs of the first seed per variant (with their counts under
    ``"ks"``) and each first-seed training loss curve."""
    jobs = [(seed, v) for seed in cfg.seeds for v in VARIANTS]
    rows, samples, losses = [], {}, {}
    ks = [COUNTS[i % len(COUNTS)] for i in range(cfg.n_test)]
    prompts = [[TOK["TABLE"], TOK[f"K{k}"]] for k in ks]
    where = model_device(cfg.profile)
    with compute_threads(1):
        for seed, variant in progress(jobs) if progress is not None else jobs:
            records = [build_sequence(variant, k, parts) for k, parts in training_tables(cfg.n_train, seed)]
            model, curve = train_model(records, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr,
                                       d=cfg.d_model, seed=seed, device=where)
            out = generate(model, variant, prompts, img_rounds=cfg.img_rounds,
                           img_temperature=cfg.img_temperature, seed=seed + 1000)
            rows.append(dict(seed=seed, variant=variant, n_test=cfg.n_test, **evaluate(out, ks)))
            if seed == cfg.seeds[0]:
                samples[variant], losses[variant] = out, curve
    samples["ks"] = ks
    return rows, samples, losses


def failures_removed(base: float, sot: float, n_test: int) -> float:
    """(failures of the baseline - failures of SoT) / failures of the baseline, for success rates
    ``base`` and ``sot``; a baseline without failures counts as one failure in ``n_test`` (so the
    ratio stays finite)."""
    fail_base = max(1.0 - base, 1.0 / n_test)
    return ((1.0 - base) - (1.0 - sot)) / fail_base


def claim_values(rows) -> dict:
    """Per-seed values of the claims of ``chapter.yml`` from the rows of :func:`run_experiment`
    (a list of dicts or a DataFrame). Returns ``{seed: {claim_id: value}}``."""
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    by_seed: dict = {}
    for row in rows:
        by_seed.setdefault(int(row["seed"]), {})[row["variant"]] = row
    values = {}
    for seed, v in by_seed.items():
        d, c, s, n = v["direct"], v["text_cot"], v["sot"], int(v["sot"]["n_test"])
        values[seed] = {
            "p1_direct_learns": d["numeracy"],
            "h1_count_vs_direct": failures_removed(d["numeracy"], s["numeracy"], n),
            "h2_count_vs_text_cot": failures_removed(c["numeracy"], s["numeracy"], n),
            "h3_attach_vs_direct": failures_removed(d["connectivity"], s["connectivity"], n),
            "h4_attach_vs_text_cot": failures_removed(c["connectivity"], s["connectivity"], n),
            "m1_trace_stability": s["stability"],
        }
    return values
