"""The experiment: the pretrained stand-in (backbone), the synthetic-ratio sweep (Synthetic
Erosion, Table 1), DGSA against SFT and Standard DPO at alpha = 0.8 (Table 3), the data-level
mixture-entropy premise, the profiles and the claim values.

Contents: :data:`EXPERIMENT_PROFILES`, :data:`EXPERIMENT_BOUNDS`, :func:`pretrain`,
:func:`seed_data`, :func:`sft`, :func:`n_synthetic`, :func:`training_rows`,
:func:`token_distribution`, :func:`style_switch_generations` (DGSA stage 2),
:func:`preference_sets` (T_stab and T_expr), :func:`evaluate_model`, :func:`alpha_grid`, :func:`run_seed`,
:func:`run_experiment`, :func:`data_entropy_peak`, :func:`claim_values`.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from replib.core.runtime import compute_threads, seed_everything

from . import task
from .method import PreferenceSet, align, dgsa_weights, mixture_entropy

__all__ = ["EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "pretrain", "n_synthetic", "seed_data", "training_rows",
           "token_distribution", "sft", "style_switch_generations", "preference_sets", "evaluate_model",
           "alpha_grid", "run_seed", "run_experiment", "data_entropy_peak", "claim_values"]

_COMMON = dict(world_seed=0, backbone_lr=3e-3, batch_size=16, sft_lr=3e-3, label_noise=0.1,
               prompt_share=0.5, align_alpha=0.8, alpha_star=0.5, beta=0.1, align_lr=1e-4, batch_pairs=16,
               temperature=1.0)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_backbone=300, backbone_steps=30, sft_steps=15, n_real=40, n_syn_only=60, n_test=30,
                  alphas=[0.0, 0.5, 0.8, 1.0], align_steps=5, sensitivity_lrs=[1e-5], sensitivity_seeds=1,
                  **_COMMON),
    "book": dict(seeds=[0, 1, 2], n_backbone=2000, backbone_steps=500, sft_steps=200, n_real=300, n_syn_only=1500,
                 n_test=200, alphas=[0.0, 0.25, 0.5, 0.8, 1.0], align_steps=60, sensitivity_lrs=[1e-5], sensitivity_seeds=1,
                 **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], n_backbone=2000, backbone_steps=1500, sft_steps=400, n_real=300,
                  n_syn_only=1500, n_test=500, alphas=[0.0, 0.1, 0.25, 0.4, 0.5, 0.6, 0.67, 0.8, 1.0], align_steps=150,
                  sensitivity_lrs=[3e-5, 1e-5], sensitivity_seeds=5, **_COMMON),
}
EXPERIMENT_BOUNDS = dict(world_seed=(0, None), n_backbone=(1, None), backbone_lr=(1e-8, None), batch_size=(1, None),
                         sft_lr=(1e-8, None), label_noise=(0.0, 1.0), prompt_share=(0.0, 1.0),
                         align_alpha=(0.5, 0.95), alpha_star=(0.0, 0.95), beta=(1e-6, None), align_lr=(1e-8, None),
                         batch_pairs=(1, None), temperature=(1e-3, None), backbone_steps=(1, None),
                         sft_steps=(1, None), n_real=(2, None), n_syn_only=(2, None), n_test=(1, None),
                         alphas=(0.0, 1.0), align_steps=(1, None), sensitivity_lrs=(1e-8, None),
                         sensitivity_seeds=(0, None))


def pretrain(cfg, progress=None) -> task.SpeechLM:
    """The stand-in for the pretrained CosyVoice 2 LM (proposed): ``backbone_steps`` SFT steps on
    real-prosody speech of a related language (phonemes 0-7), no prompts; one model shared by all
    seeds, as every fine-tuning run of the paper starts from the same checkpoint."""
    from replib.models import causal_lm  # transformers loads only when a model is trained

    world = task.make_world(cfg.world_seed)
    rng = np.random.default_rng([cfg.world_seed, 1])
    rows = task.make_corpus("real", cfg.n_backbone, world, rng, phonemes=task.BACKBONE_PHONEMES, prompt_share=0.0)
    model = task.make_lm(cfg.world_seed)
    causal_lm.train_lm(model, task.batches(rows, cfg.batch_size), steps=cfg.backbone_steps, lr=cfg.backbone_lr,
                       warmup=30, seed=cfg.world_seed, progress=progress)
    return model


def n_synthetic(alpha: float, n_real: int, n_syn_only: int) -> int:
    """|D_syn| for synthetic ratio alpha = |D_syn| / |D| with |D_real| fixed (the paper's scaling
    design: total data grows with alpha); alpha = 1 is ``n_syn_only`` synthetic utterances and no
    real ones (Table 1's last row)."""
    return n_syn_only if alpha >= 1 else int(round(n_real * alpha / (1 - alpha)))


def seed_data(cfg, seed: int) -> dict:
    """One seed's corpora: the real set (transcripts without phonemes 12-15, label noise), a pool
    of synthetic utterances (all phonemes), test texts (all phonemes) and held-out real speech of
    those texts (the reference of the JS divergence)."""
    world = task.make_world(cfg.world_seed)
    rng = np.random.default_rng([seed, 2])
    n_pool = max(cfg.n_syn_only, *(n_synthetic(a, cfg.n_real, cfg.n_syn_only) for a in cfg.alphas))
    test_texts = task.sample_texts(cfg.n_test, world["chain"], rng)
    speakers = rng.integers(task.N_SPEAKERS, size=cfg.n_test)
    return {
        "world": world,
        "real": task.make_corpus("real", cfg.n_real, world, rng, phonemes=task.REAL_PHONEMES,
                                 label_noise=cfg.label_noise, prompt_share=cfg.prompt_share),
        "synthetic": task.make_corpus("synthetic", n_pool, world, rng, prompt_share=cfg.prompt_share),
        "test_texts": test_texts,
        "reference": [task.real_speech(t, world["registers"][s], world["sigmas"][s], rng)
                      for t, s in zip(test_texts, speakers)],
    }


def training_rows(data: dict, alpha: float, cfg) -> list[dict]:
    """D = D_real and D_syn at synthetic ratio alpha."""
    real = [] if alpha >= 1 else data["real"]
    return real + data["synthetic"][: n_synthetic(alpha, cfg.n_real, cfg.n_syn_only)]


def token_distribution(rows: list[dict]) -> np.ndarray:
    """The empirical frequency of each speech token (and SIL) in a corpus: p_real or p_syn of Sec. 2."""
    tokens = np.concatenate([r["speech"] for r in rows])
    return np.bincount(tokens, minlength=task.VOCAB)[task.SIL:] / tokens.size


def sft(backbone, rows: list[dict], cfg, seed: int) -> task.SpeechLM:
    """Stage 1, SFT: a copy of the backbone fine-tuned on ``rows`` by maximum likelihood."""
    from replib.models import causal_lm

    model = copy.deepcopy(backbone)
    causal_lm.train_lm(model, task.batches(rows, cfg.batch_size), steps=cfg.sft_steps, lr=cfg.sft_lr, warmup=10,
                       seed=seed)
    return model


def style_switch_generations(model, data: dict, cfg, seed: int) -> dict:
    """DGSA stage 2 with the SFT model frozen: for every real pair, y_expr from the text with a
    style prompt z_style (the first 8 tokens of another utterance of the same speaker: the
    zero-shot prompt, our reading) and y_stab from the text alone, at the same temperature. The
    speaker (the toy's timbre) is the same in both, so the pairs are identity-consistent."""
    rng = np.random.default_rng([seed, 4])
    real = data["real"]
    by_speaker = {}
    for i, row in enumerate(real):
        by_speaker.setdefault(row["speaker"], []).append(i)
    prompts = []
    for i, row in enumerate(real):
        others = [j for j in by_speaker[row["speaker"]] if j != i] or [i]
        prompts.append(task.style_prompt(real[rng.choice(others)]["speech"]))
    expr = task.generate(model, [task.prefix(r["text"], p) for r, p in zip(real, prompts)],
                         temperature=cfg.temperature, seed=seed * 1000 + 1)
    stab = task.generate(model, [task.prefix(r["text"]) for r in real], temperature=cfg.temperature,
                         seed=seed * 1000 + 2)
    return {"prompts": prompts, "expr": expr, "stab": stab}


def preference_sets(data: dict, generations: dict) -> dict[str, PreferenceSet]:
    """T_stab = {(x, y+ = y_real, y- = y_expr)} scored with the style prompt, and T_expr = {(x, y+ =
    y_real, y- = y_stab)} scored without it: each pair in the context its negative was generated in
    (proposed; the paper does not say)."""
    real = data["real"]

    def pairs(losers, prompts):
        winners = task.pad_batch([task.training_sequence(r["text"], r["speech"], p) for r, p in zip(real, prompts)])
        lose = task.pad_batch([task.training_sequence(r["text"], y, p) for r, y, p in zip(real, losers, prompts)])
        return PreferenceSet(winners[0], winners[1], lose[0], lose[1])

    return {"stab": pairs(generations["expr"], generations["prompts"]),
            "expr": pairs(generations["stab"], [None] * len(real))}


def evaluate_model(model, data: dict, cfg, seed: int) -> dict:
    """The metrics of :func:`task.evaluate` on the seed's test texts, no prompt, temperature
    ``cfg.temperature``; every model of a seed is sampled with the same random stream."""
    generations = task.generate(model, [task.prefix(t) for t in data["test_texts"]], temperature=cfg.temperature,
                                seed=seed * 1000 + 7)
    return task.evaluate(generations, data["test_texts"], data["reference"]) | {"generations": generations}


def _align_and_evaluate(sft_model, sets, method, weights, lr, data, cfg, seed) -> tuple[dict, list]:
    """Stage 3 for one method (DGSA or Standard DPO) at learning rate ``lr``: its metrics row and
    its test generations."""
    used = {name: sets[name] for name in weights}
    model, losses = align(sft_model, used, weights, steps=cfg.align_steps, batch_pairs=cfg.batch_pairs, lr=lr,
                          beta=cfg.beta, seed=seed * 10 + ("dpo", "dgsa").index(method))
    result = evaluate_model(model, data, cfg, seed)
    generations = result.pop("generations")
    return {"seed": seed, "method": method, "align_lr": lr, **result, "final_loss": float(losses[-10:].mean())}, generations


def alpha_grid(cfg) -> list[float]:
    """The sweep's synthetic ratios: ``cfg.alphas`` with 0, 1 and ``align_alpha`` always included
    (the claims compare them)."""
    return sorted(set(cfg.alphas) | {0.0, 1.0, cfg.align_alpha})


def run_seed(backbone, cfg, seed: int) -> dict:
    """One seed: the alpha sweep (SFT from the backbone at every alpha, evaluated on the test texts
    without a prompt at temperature 1), then at ``align_alpha`` DGSA and Standard DPO from that SFT
    model; on the first ``sensitivity_seeds`` seeds both again at each of ``sensitivity_lrs`` (an
    exploration added after the declared runs, not judged). Returns rows ``sweep``, ``aligned`` and
    ``sensitivity``, statistics of the preference pairs, the token distributions and samples."""
    seed_everything(seed)
    data = seed_data(cfg, seed)
    p_real, p_syn = token_distribution(data["real"]), token_distribution(data["synthetic"])
    sweep, samples, models, results = [], {}, {}, {}
    for k, alpha in enumerate(alpha_grid(cfg)):
        start = time.perf_counter()
        model = sft(backbone, training_rows(data, alpha, cfg), cfg, seed * 100 + k)
        result = evaluate_model(model, data, cfg, seed)
        samples[f"sft@{alpha:g}"] = result.pop("generations")
        results[alpha] = result
        sweep.append({"seed": seed, "alpha": alpha, "n_syn": n_synthetic(alpha, cfg.n_real, cfg.n_syn_only),
                      "data_entropy": mixture_entropy(p_real, p_syn, alpha), **result,
                      "seconds": time.perf_counter() - start})
        models[alpha] = model
    sft_model = models[cfg.align_alpha]
    start = time.perf_counter()
    generations = style_switch_generations(sft_model, data, cfg, seed)
    sets = preference_sets(data, generations)
    lambda_s, lambda_e = dgsa_weights(cfg.align_alpha, cfg.alpha_star)
    weights = {"dpo": {"expr": 1.0}, "dgsa": {"stab": lambda_s, "expr": lambda_e}}
    sensitivity = []
    aligned = [{"seed": seed, "method": "sft", **results[cfg.align_alpha]}]
    samples["sft"] = samples[f"sft@{cfg.align_alpha:g}"]
    for method in ("dpo", "dgsa"):
        row, samples[method] = _align_and_evaluate(sft_model, sets, method, weights[method], cfg.align_lr, data,
                                                   cfg, seed)
        aligned.append(row)
    if seed in cfg.seeds[: cfg.sensitivity_seeds]:
        for lr in cfg.sensitivity_lrs:
            for method in ("dpo", "dgsa"):
                sensitivity.append(_align_and_evaluate(sft_model, sets, method, weights[method], lr, data, cfg,
                                                       seed)[0])
    pairs = {"expr_per": float(np.mean([task.per(y, r["spoken"]) for y, r in zip(generations["expr"], data["real"])])),
             "stab_per": float(np.mean([task.per(y, r["spoken"]) for y, r in zip(generations["stab"], data["real"])])),
             "expr_hp": task.prosodic_entropy(generations["expr"]),
             "stab_hp": task.prosodic_entropy(generations["stab"]),
             "real_hp": task.prosodic_entropy([r["speech"] for r in data["real"]]),
             "real_length": float(np.mean([len(r["speech"]) for r in data["real"]])),
             "expr_length": float(np.mean([len(y) for y in generations["expr"]])),
             "stab_length": float(np.mean([len(y) for y in generations["stab"]])),
             "seconds": time.perf_counter() - start}
    return {"sweep": sweep, "aligned": aligned, "sensitivity": sensitivity, "pairs": {"seed": seed, **pairs},
            "samples": samples, "p_real": p_real, "p_syn": p_syn}


def run_experiment(cfg, progress=None) -> dict:
    """The backbone once, then :func:`run_seed` for every seed, on one thread. Returns data frames
    ``sweep``, ``aligned``, ``pairs``, per-seed ``samples`` and token distributions, and timings."""
    with compute_threads(1):
        start = time.perf_counter()
        backbone = pretrain(cfg)
        backbone_seconds = time.perf_counter() - start
        runs = [run_seed(backbone, cfg, seed) for seed in (progress(cfg.seeds) if progress else cfg.seeds)]
    return {"sweep": pd.DataFrame([row for r in runs for row in r["sweep"]]),
            "aligned": pd.DataFrame([row for r in runs for row in r["aligned"]]),
            "sensitivity": pd.DataFrame([row for r in runs for row in r["sensitivity"]]),
            "pairs": pd.DataFrame([r["pairs"] for r in runs]),
            "samples": {seed: r["samples"] for seed, r in zip(cfg.seeds, runs)},
            "distributions": {seed: (r["p_real"], r["p_syn"]) for seed, r in zip(cfg.seeds, runs)},
            "backbone": backbone, "backbone_seconds": backbone_seconds}


def data_entropy_peak(p_real: np.ndarray, p_syn: np.ndarray, points: int = 101) -> tuple[float, float]:
    """(alpha at the maximum of H(p_alpha) on a grid of ``points``, that maximum minus the larger
    end value), bits: the premise d1."""
    alphas = np.linspace(0.0, 1.0, points)
    h = np.array([mixture_entropy(p_real, p_syn, a) for a in alphas])
    return float(alphas[h.argmax()]), float(h.max() - max(h[0], h[-1]))


def claim_values(results: dict, cfg) -> dict:
    """{seed: {claim_id: value}} for every claim of chapter.yml, from the ``sweep`` and ``aligned``
    frames and the token ``distributions`` of :func:`run_experiment`. The erosion peak is the
    larger H_p of alpha = 0.25 and 0.5 (those of them on the grid)."""
    values = {}
    for seed in cfg.seeds:
        sweep = results["sweep"][results["sweep"].seed == seed].set_index("alpha").sort_index()
        aligned = results["aligned"][results["aligned"].seed == seed].set_index("method")
        hp = sweep["hp"]
        peak = hp[[a for a in (0.25, 0.5) if a in hp.index]].max()
        sft_row, dpo, dgsa = aligned.loc["sft"], aligned.loc["dpo"], aligned.loc["dgsa"]
        values[seed] = {
            "p1_sft_learns": float(sweep.loc[cfg.align_alpha, "per"]),
            "d1_data_entropy_peak": data_entropy_peak(*results["distributions"][seed])[1],
            "h1_per_falls": float(spearmanr(sweep.index, sweep["per"]).statistic),
            "h2_hp_rises": float(peak - hp.loc[0.0]),
            "h3_hp_falls_at_one": float(peak - hp.loc[1.0]),
            "h4_hp_falls_at_80": float(peak - hp.loc[0.8]),
            "h5_dgsa_keeps_per": float(dgsa["per"] - sft_row["per"]),
            "h6_dgsa_raises_hp": float(dgsa["hp"] - sft_row["hp"]),
            "m1_dpo_loses_per": float(dpo["per"] - dgsa["per"]),
            "m2_dpo_raises_hp": float(dpo["hp"] - sft_row["hp"]),
            "m3_dgsa_closer_to_real": float(dgsa["js"] - sft_row["js"]),
            "x1_dgsa_repetition": float(100 * (dgsa["rep"] - sft_row["rep"])),
            "x2_peak_alpha": float(hp.idxmax()),
        }
    return values
