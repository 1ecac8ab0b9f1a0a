"""SoT, the experiment: profiles, the three variants trained on the same tables, their sampled
test images and the claim values of ``chapter.yml``."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import torch

from replib.core.runtime import compute_threads, model_device

from .method import IMG_LEN, generate, generate_image, train_models
from .task import (
    COUNTS,
    TOK,
    VARIANTS,
    build_sequence,
    count_legs,
    is_connected,
    render_states,
    sample_table,
    tokens_to_image,
    trace_stable,
)

__all__ = ["EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "VARIANTS", "training_tables", "evaluate",
           "teacher_forced_stability", "run_variants", "run_experiment", "claim_values"]

_COMMON = dict(n_train=2000, img_temperature=1.0, batch_size=32)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], steps=20, n_test=8, img_rounds=2, d_model=32, lr=0.01, workers=1, **_COMMON),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], steps=800, n_test=150, img_rounds=8, d_model=32, lr=0.01,
                 workers=2, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9], steps=1500, n_test=300, img_rounds=8, d_model=64,
                  lr=0.003, workers=1, **_COMMON),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
EXPERIMENT_BOUNDS = dict(steps=(1, None), n_test=(2, None), img_rounds=(1, 16), d_model=(8, 512),
                         lr=(1e-6, 1.0), n_train=(1, None), img_temperature=(0.01, None),
                         batch_size=(1, None), workers=(1, 2))


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


def teacher_forced_stability(model, tables, *, img_rounds: int, img_temperature: float, seed: int) -> float:
    """SoT's own mechanism, with its context teacher-forced: for every step n of every trace of
    ``tables`` (``[(k, parts), ...]``), the model draws state n given the prompt, the true rationales
    and the true states up to step n - 1 and the rationale of step n (the parallel image decoder of
    the inference loop, all contexts in one batch). A trace is stable when every drawn state contains
    the true state before it (the empty canvas at step 1) and adds at least one pixel. Returns the
    share of stable traces."""
    contexts, flags, before, owner = [], [], [], []
    for t, (k, parts) in enumerate(tables):
        seq, is_img = build_sequence("sot", k, parts)
        states = [np.zeros_like(render_states(parts)[0])] + render_states(parts)
        for n in range(len(parts)):
            cut = 2 + n * (1 + IMG_LEN) + 1  # prompt, n (rationale, state) pairs, rationale n + 1
            contexts.append(seq[:cut])
            flags.append(is_img[:cut])
            before.append(states[n])
            owner.append(t)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        drawn = generate_image(model, contexts, flags, img_rounds, img_temperature, gen).cpu().numpy()
    ok = np.ones(len(tables), bool)
    for img, prev, t in zip(drawn, before, owner):
        img = tokens_to_image(img)
        ok[t] &= bool((img >= prev).all() and img.sum() > prev.sum())
    return float(ok.mean())


def run_variants(cfg, variants, where: str = "cpu"):
    """Train every seed of ``cfg`` for each of ``variants`` (the seeds of one variant as one stacked
    model, :func:`method.train_models`) and sample them; SoT also gets
    :func:`teacher_forced_stability` on ``n_test`` fresh tables (drawn with the seed + 2000).
    Returns ``(rows, samples, losses)`` as :func:`run_experiment` does, for these variants."""
    ks = [COUNTS[i % len(COUNTS)] for i in range(cfg.n_test)]
    prompts = [[TOK["TABLE"], TOK[f"K{k}"]] for k in ks]
    seeds = list(cfg.seeds)
    rows, samples, losses = [], {}, {}
    with compute_threads(1):
        for variant in variants:
            records = [[build_sequence(variant, k, parts) for k, parts in training_tables(cfg.n_train, seed)]
                       for seed in seeds]
            models, curves = train_models(records, seeds, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr,
                                          d=cfg.d_model, device=where)
            for seed, model in zip(seeds, models):
                out = generate(model, variant, prompts, img_rounds=cfg.img_rounds,
                               img_temperature=cfg.img_temperature, seed=seed + 1000)
                row = dict(seed=seed, variant=variant, n_test=cfg.n_test, **evaluate(out, ks),
                           forced_stability=float("nan"))
                if variant == "sot":
                    rng = np.random.default_rng(seed + 2000)
                    tables = [(k, sample_table(rng, k)) for k in ks]
                    row["forced_stability"] = teacher_forced_stability(
                        model, tables, img_rounds=cfg.img_rounds, img_temperature=cfg.img_temperature,
                        seed=seed + 3000)
                rows.append(row)
                if seed == seeds[0]:
                    samples[variant], losses[variant] = out, curves[0].tolist()
    return rows, samples, losses


def run_experiment(cfg, progress=None):
    """Train and sample every variant of :data:`VARIANTS` on every seed of ``cfg``.

    Per seed: the same ``n_train`` tables for all variants (``training_tables``), a model seeded with
    the seed (on ``model_device(cfg.profile)``: a GPU at the paper profile when there is one),
    ``n_test`` prompts split evenly over the counts, sampled with the seed + 1000. With
    ``cfg.workers`` = 2 (CPU only) SoT runs in one process and the two baselines in another (about
    the same work; every run is seeded by its seed alone, so the numbers are those of one process).
    Returns ``(rows, samples, losses)``: one row per (seed, variant) with :func:`evaluate`'s
    metrics, ``forced_stability`` (SoT) and ``n_test``; the outputs of the first seed per variant
    (with their counts under ``"ks"``) and each first-seed training loss curve."""
    where = model_device(cfg.profile)
    groups = [["sot"], ["direct", "text_cot"]]
    workers = int(getattr(cfg, "workers", 1)) if where == "cpu" else 1
    if workers > 1:
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(run_variants, cfg, group, where) for group in groups]
            parts = [f.result() for f in (progress(futures) if progress is not None else futures)]
    else:
        parts = [run_variants(cfg, group, where) for group in (progress(groups) if progress is not None else groups)]
    rows, samples, losses = [], {}, {}
    for r, s, lo in parts:
        rows += r
        samples.update(s)
        losses.update(lo)
    order = {v: i for i, v in enumerate(VARIANTS)}
    rows.sort(key=lambda row: (row["seed"], order[row["variant"]]))
    samples = {v: samples[v] for v in VARIANTS}
    samples["ks"] = [COUNTS[i % len(COUNTS)] for i in range(cfg.n_test)]
    return rows, {v: samples[v] for v in [*VARIANTS, "ks"]}, {v: losses[v] for v in VARIANTS}


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
            "p2_text_cot_learns": c["numeracy"],
            "p3_sot_converged": s["forced_stability"],
            "h1_count_vs_direct": failures_removed(d["numeracy"], s["numeracy"], n),
            "h2_count_vs_text_cot": failures_removed(c["numeracy"], s["numeracy"], n),
            "h3_attach_vs_direct": failures_removed(d["connectivity"], s["connectivity"], n),
            "h4_attach_vs_text_cot": failures_removed(c["connectivity"], s["connectivity"], n),
            "m1_trace_stability": s["stability"],
        }
    return values
