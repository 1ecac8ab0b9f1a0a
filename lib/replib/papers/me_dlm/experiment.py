"""The ME-DLM experiment on the toy: the training loop of both phases (:func:`train_phase`, reading
the seed's generated training corpus in order), the profiles and their bounds, the evaluation of the
MDLM baseline and of ME-DLM (full and substitution-only editing), the runs and the claim values.

Contents: :func:`train_phase`, :data:`EXPERIMENT_PROFILES`, :data:`EXPERIMENT_BOUNDS`,
:func:`evaluate`, :func:`run_seed`, :func:`run_experiment`, :func:`claim_values`. The MDLM baseline
(the same phase-1 checkpoint continued in mask mode) is a few lines of :func:`run_seed`; the
substitution-only ablation is a flag of :func:`method.edit_passes`.
"""

from __future__ import annotations

import copy
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, model_device, seed_everything, thread_budget

from .baselines import oracle_edit_passes
from .method import (
    CANVAS,
    EOS,
    _draw_t,
    _make_optimiser,
    draft,
    edit_mode_batch,
    edit_mode_loss,
    edit_passes,
    mask_mode_loss,
    new_model,
)
from .task import (
    MODES,
    _response_distance,
    _response_valid,
    corpus_examples,
    draw_prompts,
    edit_targets,
    nearest_mode,
    response_answer,
    training_corpus,
    valid_answers,
)

__all__ = [
    "train_phase",
    "EXPERIMENT_PROFILES",
    "EXPERIMENT_BOUNDS",
    "evaluate",
    "run_seed",
    "run_experiment",
    "claim_values",
    "paired_bootstrap",
]


# --------------------------------------------------------------------------------------------
# Training (both phases)
# --------------------------------------------------------------------------------------------


def curriculum_passes(step: int, steps: int, e_max: int, start: float) -> int:
    """The curriculum of pre-applied edit passes: k = floor(q E_max) with q = (progress - start) /
    (1 - start) clipped at 0, progress = step / steps. ``start`` = 0 is the release's
    k = floor(progress E_max); a later start keeps k = 0 (edit training on the fresh drafts) for the
    first ``start`` of phase 2."""
    q = max(0.0, (step / steps - start) / (1 - start))
    return int(np.floor(q * e_max))


def train_phase(model, opt, sched, cfg, steps: int, edit_prob: float, examples, rng, label: str, progress=None,
                probe=None) -> list[dict]:
    """``steps`` AdamW steps, step s on rows ``s*batch`` to ``(s+1)*batch`` of ``examples`` (prompts,
    answers: a slice of the training corpus). Each batch is in edit mode with probability
    ``edit_prob`` (k = :func:`curriculum_passes` pre-applied edit passes; the labels' reference is
    :func:`task.edit_targets`), else mask mode. ``probe(model, step)``, if given, is called after
    every ``cfg.curve_every`` steps. Returns one row per step (phase label, mode, the two
    cross-entropies, loss)."""
    rows = []
    it = range(steps)
    for step in (progress(it) if progress else it):
        batch = slice(step * cfg.batch, (step + 1) * cfg.batch)
        prompts, answers = examples[0][batch], examples[1][batch]
        t = _draw_t(cfg.batch, rng)
        edit = rng.random() < edit_prob
        if edit:
            k = curriculum_passes(step, steps, cfg.e_max, cfg.curriculum_start)
            _set_mode(model, training=False)
            responses = edit_mode_batch(model, prompts, answers, t, k, rng)
            _set_mode(model, training=True)
            loss, stats = edit_mode_loss(model, prompts, edit_targets(prompts, answers, responses), responses, t)
        else:
            _set_mode(model, training=True)
            loss, stats = mask_mode_loss(model, prompts, answers, t, rng)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # the HF Trainer default the release runs with
        opt.step()
        sched.step()
        rows.append({"phase": label, "step": step, "mode": "edit" if edit else "mask",
                     "loss": float(loss.detach()), **stats})
        if probe is not None and (step + 1) % cfg.curve_every == 0:
            _set_mode(model, training=False)
            probe(model, step + 1)
    model.eval()
    return rows


def _set_mode(model, training: bool) -> None:
    """``model.train(training)``, skipped when the model is already in that mode (the call walks
    every submodule, and the mask-mode steps would otherwise repeat it once per step)."""
    if model.training != training:
        model.train(training)


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------

_COMMON = dict(n_head=4, lr=2e-3, warmup=50, e_max=4, curriculum_start=0.5, mdlm_passes=[1, 2, 3, 4, 5, CANVAS],
               draft_passes=[1, 3], edit_counts=[1, 2, 4], n_traces=4)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_layer=1, n_embd=32, batch=32, steps1=40, steps2=16, n_test=32, curve_every=20,
                  n_curve=16, **_COMMON),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004, 1005], n_layer=3, n_embd=64, batch=64,
                 steps1=1600, steps2=600, n_test=300,
                 curve_every=200, n_curve=100, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], n_layer=3, n_embd=96, batch=64, steps1=3000, steps2=1500, n_test=400,
                  curve_every=250, n_curve=200, **_COMMON),
}


EXPERIMENT_BOUNDS = dict(n_layer=(1, None), n_embd=(4, None), n_head=(1, None), batch=(1, None), steps1=(1, None),
                         steps2=(1, None), n_test=(1, None), curve_every=(1, None), n_curve=(1, None), lr=(1e-8, None),
                         warmup=(1, None), e_max=(1, None), curriculum_start=(0.0, 0.99),
                         mdlm_passes=(1, CANVAS), draft_passes=(1, CANVAS), edit_counts=(1, None), n_traces=(0, None))


def _as_cfg(cfg):
    return SimpleNamespace(**cfg) if isinstance(cfg, dict) else cfg


def evaluate(mdlm, medlm, prompts, cfg, seed: int) -> dict:
    """All evaluation rows of one seed: ``validity`` (model, draft passes, edit passes, mode, total
    forward passes, validity in points, mean distance to the nearest valid answer, mean real edit
    steps), ``samples`` (per prompt and ME-DLM draft: distance before / after each edit count,
    valid before / after, real edit steps), ``traces``."""
    validity, samples, traces, modes = [], [], [], []
    mdlm_valid = {}

    def score(responses):
        valid = np.array([_response_valid(x, r) for x, r in zip(prompts, responses)])
        dist = np.array([_response_distance(x, r) for x, r in zip(prompts, responses)])
        return valid, dist

    def by_mode(model, S, E, responses, valid):
        heading = np.array([nearest_mode(x, response_answer(r)) for x, r in zip(prompts, responses)])
        for k, name in enumerate(MODES):
            share = heading == k
            modes.append({"seed": seed, "model": model, "draft_passes": S, "edit_passes": E, "answer_mode": name,
                          "share": 100 * share.mean(), "validity": 100 * valid[share].mean() if share.any() else np.nan})

    for S in cfg.mdlm_passes:
        responses = draft(mdlm, prompts, S)["responses"]
        valid, dist = score(responses)
        mdlm_valid[S] = valid
        validity.append({"seed": seed, "model": "mdlm", "draft_passes": S, "edit_passes": 0, "mode": "none",
                         "forward_passes": S, "validity": 100 * valid.mean(), "distance": dist.mean(),
                         "real_steps": np.nan})
        if S in (1, CANVAS):
            by_mode("mdlm", S, 0, responses, valid)
    e_max = max(cfg.edit_counts)
    for S in cfg.draft_passes:
        drafted = draft(medlm, prompts, S)["responses"]
        v0, d0 = score(drafted)
        validity.append({"seed": seed, "model": "me_dlm", "draft_passes": S, "edit_passes": 0, "mode": "none",
                         "forward_passes": S, "validity": 100 * v0.mean(), "distance": d0.mean(),
                         "real_steps": np.nan})
        per = {"seed": seed, "draft_passes": S}
        oracle = oracle_edit_passes(prompts, drafted, e_max)
        for E in cfg.edit_counts:
            v, d = score(oracle["states"][E])
            validity.append({"seed": seed, "model": "oracle", "draft_passes": S, "edit_passes": E, "mode": "oracle",
                             "forward_passes": S + E, "validity": 100 * v.mean(), "distance": d.mean(),
                             "real_steps": np.nan})
            if E == 2:
                per["oracle_valid_2"] = v
        for mode in (["full", "substitution"] if S == 1 else ["full"]):
            out = edit_passes(medlm, prompts, drafted, e_max, substitution_only=(mode == "substitution"),
                              keep_trace=cfg.n_traces if mode == "full" else 0)
            for E in cfg.edit_counts:
                v, d = score(out["states"][E])
                validity.append({"seed": seed, "model": "me_dlm", "draft_passes": S, "edit_passes": E,
                                 "mode": mode, "forward_passes": S + E, "validity": 100 * v.mean(),
                                 "distance": d.mean(), "real_steps": float(np.minimum(out["real_steps"], E).mean()),
                                 "valid_drafts": int(v0.sum()), "broken": int((v0 & ~v).sum())})
                if mode == "full":
                    per[f"valid_{E}"], per[f"distance_{E}"] = v, d
                    if S == 1 and E == 2:
                        by_mode("me_dlm", S, E, out["states"][E], v)
            if mode == "full":
                per["real_steps"] = out["real_steps"]
                for i, tr in enumerate(out["traces"]):
                    traces.append({"seed": seed, "draft_passes": S, "prompt": prompts[i], "draft": drafted[i],
                                   "passes": tr})
        for i in range(len(prompts)):
            row = {"seed": seed, "draft_passes": S, "prompt": "".join(map(str, prompts[i])),
                   "valid_0": bool(v0[i]), "distance_0": int(d0[i]), "real_steps": int(per["real_steps"][i]),
                   "oracle_valid_2": bool(per["oracle_valid_2"][i]),
                   "mdlm_valid_matched": bool(mdlm_valid[S + 2][i]) if S + 2 in mdlm_valid else None}
            for E in cfg.edit_counts:
                row[f"valid_{E}"], row[f"distance_{E}"] = bool(per[f"valid_{E}"][i]), int(per[f"distance_{E}"][i])
            samples.append(row)
    return {"validity": validity, "samples": samples, "traces": traces, "modes": modes,
            "copy": copy_check(medlm, prompts, cfg, seed)}


def copy_check(medlm, prompts, cfg, seed: int) -> list[dict]:
    """Precondition p2: ME-DLM's edit passes applied to *valid* answers (one of the three drawn
    uniformly per prompt, then ``<eos>``). Per edit count, the share left unchanged and the share
    still valid."""
    rng = np.random.default_rng([seed, 54321])
    answers = [list(valid_answers(x)[rng.integers(3)]) + [EOS] for x in prompts]
    out = edit_passes(medlm, prompts, answers, max(cfg.edit_counts))
    rows = []
    for E in cfg.edit_counts:
        after = out["states"][E]
        rows.append({"seed": seed, "edit_passes": E,
                     "unchanged": float(np.mean([a == b for a, b in zip(after, answers)])),
                     "valid": float(np.mean([_response_valid(x, r) for x, r in zip(prompts, after)]))})
    return rows


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: phase 1 (mask mode, ``steps1``, with a learning curve of the 1-token-per-pass
    validity every ``curve_every`` steps on ``n_curve`` prompts), then from that checkpoint ME-DLM
    phase 2 (``steps2``, edit mode with probability 0.5) and the compute-matched MDLM (``steps2``
    more mask-mode steps), each with a fresh optimiser and schedule and both on the same next rows
    of the seed's training corpus (:func:`task.training_corpus`, training prompts only); evaluation
    on ``n_test`` held-out prompts (:func:`task.prompt_split`, never in any training corpus) from a
    separate stream. The models live on ``model_device(cfg.profile)`` (a GPU at the paper
    profile when there is one, else the CPU); every random draw stays on the CPU. Plain data only: ``validity``, ``samples``, ``traces``, ``modes``,
    ``copy``, ``curve``, ``train`` rows and ``seconds``."""
    cfg = _as_cfg(cfg)
    n1, n2 = cfg.steps1 * cfg.batch, cfg.steps2 * cfg.batch
    corpus = training_corpus(seed, n1 + n2)
    with compute_threads(threads):
        seed_everything(seed)
        seconds = {"seed": seed}
        model = new_model(cfg, seed, model_device(cfg.profile))
        opt, sched = _make_optimiser(model, cfg, cfg.steps1)
        curve = []
        probe_prompts = draw_prompts(cfg.n_curve, np.random.default_rng([seed, 777]), pool="heldout")

        def probe(m, step):
            responses = draft(m, probe_prompts, CANVAS)["responses"]
            curve.append({"seed": seed, "step": step,
                          "validity": 100 * np.mean([_response_valid(x, r) for x, r in zip(probe_prompts, responses)])})

        start = time.perf_counter()
        train_rows = train_phase(model, opt, sched, cfg, cfg.steps1, 0.0, corpus_examples(corpus, 0, n1),
                                 np.random.default_rng([seed, 1]), "phase1", progress, probe)
        seconds["phase1"] = time.perf_counter() - start
        phase2 = corpus_examples(corpus, n1, n1 + n2)

        def branch(edit_prob, label, stream):
            m = copy.deepcopy(model)
            o, s = _make_optimiser(m, cfg, cfg.steps2)
            start = time.perf_counter()
            rows = train_phase(m, o, s, cfg, cfg.steps2, edit_prob, phase2, np.random.default_rng([seed, stream]),
                               label, progress)
            seconds[label] = time.perf_counter() - start
            return m, rows

        medlm, rows_me = branch(0.5, "me_dlm", 2)
        mdlm, rows_md = branch(0.0, "mdlm", 3)
        start = time.perf_counter()
        prompts = draw_prompts(cfg.n_test, np.random.default_rng([seed, 12345]), pool="heldout")
        ev = evaluate(mdlm, medlm, prompts, cfg, seed)
        seconds["eval"] = time.perf_counter() - start
    train = [{"seed": seed, **r} for r in train_rows + rows_me + rows_md]
    return {**ev, "train": train, "curve": curve, "seconds": seconds}


def run_experiment(cfg, progress=None, threads: int = 1, workers: int = 1) -> dict:
    """:func:`run_seed` for every seed; data frames ``validity``, ``samples``, ``train``, ``modes``
    (validity per answer mode), ``copy`` (precondition p2), ``curve`` (phase-1 learning curve),
    ``seconds`` and the list ``traces``.

    ``workers`` > 1 runs the seeds in that many fresh processes at once (capped by
    $REPLIB_MAX_THREADS, see :func:`replib.core.runtime.thread_budget`). A seed depends on nothing but
    ``cfg`` and its own number, so the results equal the one-process run's; only the progress bars
    are lost."""
    cfg = _as_cfg(cfg)
    workers = min(thread_budget(workers), len(cfg.seeds))
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = list(pool.map(run_seed, [cfg] * len(cfg.seeds), cfg.seeds, [None] * len(cfg.seeds),
                                 [threads] * len(cfg.seeds)))
    else:
        runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    out = {key: pd.DataFrame([r for run in runs for r in run[key]]) for key in ("validity", "samples", "train", "modes", "copy", "curve")}
    out["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    out["traces"] = [t for run in runs for t in run["traces"]]
    return out


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for the claims of ``chapter.yml`` (validity in points; p2 and c4
    are shares; p3 and p4 compare the oracle-edit headroom arm with the MDLM)."""
    cfg = _as_cfg(cfg)
    v = results["validity"]
    nan = float("nan")
    values = {}
    for seed in cfg.seeds:
        vs = v[v["seed"] == seed]

        def pick(model, S, E=0, mode="none"):
            row = vs[(vs["model"] == model) & (vs["draft_passes"] == S) & (vs["edit_passes"] == E)
                     & (vs["mode"] == mode)]
            return row.iloc[0] if len(row) else None

        def val(*a):
            row = pick(*a)
            return float(row["validity"]) if row is not None else nan

        broken = [pick("me_dlm", S, 2, "full") for S in (1, 3)]
        broken = [b for b in broken if b is not None]
        n_valid = sum(int(b["valid_drafts"]) for b in broken)
        copied = results["copy"]
        copied = copied[(copied["seed"] == seed) & (copied["edit_passes"] == 2)]
        values[seed] = {
            "p1_mdlm_learns_the_toy": val("mdlm", CANVAS),
            "p2_edits_keep_valid_answers": float(copied["unchanged"].iloc[0]) if len(copied) else nan,
            "p3_room_at_3": val("oracle", 1, 2, "oracle") - val("mdlm", 3),
            "p4_room_at_5": val("oracle", 3, 2, "oracle") - val("mdlm", 5),
            "c1_parallel_breaks_validity": val("mdlm", 1) - val("mdlm", CANVAS),
            "c2_edits_repair": val("me_dlm", 1, 2, "full") - val("me_dlm", 1),
            "c3a_equal_budget_3": val("me_dlm", 1, 2, "full") - val("mdlm", 3),
            "c3b_equal_budget_5": val("me_dlm", 3, 2, "full") - val("mdlm", 5),
            "c4_minimal_edits": sum(int(b["broken"]) for b in broken) / n_valid if n_valid else nan,
            "c5_full_vs_substitution": val("me_dlm", 1, 2, "full") - val("me_dlm", 1, 2, "substitution"),
        }
    return values


def paired_bootstrap(samples: pd.DataFrame, draft_passes: int, n_boot: int = 2000, seed: int = 0) -> dict:
    """A paired bootstrap over held-out prompts of the equal-budget difference (ME-DLM, a
    ``draft_passes`` draft + 2 edit passes, minus the MDLM at ``draft_passes + 2`` passes, in points):
    prompts are resampled with replacement within each seed, the same prompts for both arms, and the
    difference averaged over seeds. It holds the trained models fixed, so it measures the noise of
    the test prompts only, not the seed-to-seed spread the ledger's interval is about. Returns the
    mean, the 95% percentile interval and the per-seed means."""
    rows = samples[samples["draft_passes"] == draft_passes]
    rng = np.random.default_rng(seed)
    per_seed, boots = {}, []
    for s_, part in rows.groupby("seed"):
        diff = 100 * (part["valid_2"].astype(float).to_numpy() - part["mdlm_valid_matched"].astype(float).to_numpy())
        per_seed[int(s_)] = float(diff.mean())
        boots.append(diff[rng.integers(len(diff), size=(n_boot, len(diff)))].mean(1))
    boot = np.mean(boots, axis=0)
    return {"mean": float(np.mean(list(per_seed.values()))), "interval": [float(np.percentile(boot, 2.5)),
            float(np.percentile(boot, 97.5))], "per_seed": per_seed}
