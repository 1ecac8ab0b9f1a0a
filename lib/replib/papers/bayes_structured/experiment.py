"""The experiment: profiles, training the tiny GPT, decoding every task with the method and the
baselines, the per-seed runs, their summaries and the claim values."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from replib.core.data import replay_batches
from replib.core.runtime import compute_threads, model_device, seed_everything
from replib.models.causal_lm import (
    beam_search,
    completion_mask,
    sample,
    sequence_logprob,
    tiny_gpt,
    train_lm,
)

from .baselines import mbr_medoid, n_distinct, predictive_entropy, semantic_entropy, string_majority
from .method import TASKS, bayes_response
from .task import (
    EOS,
    MAX_LEN,
    PAD,
    TOKENS,
    answer_tokens,
    aurc,
    auroc,
    interpret,
    max_answer_tokens,
    parse,
    parsed_latents,
    sample_problems,
    spearman,
    task_loss,
    training_corpus,
    truth_row,
)

__all__ = [
    "EXPERIMENT_PROFILES",
    "DECODERS",
    "SCORES",
    "train_model",
    "decode_task",
    "run_seed",
    "run_experiment",
    "decoder_losses",
    "uncertainty_quality",
    "sample_size_curve",
    "claim_values",
]

# --- experiment pipeline (model-driven) ---

EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], train_steps=120, batch_size=64, lr=3e-3, n_layer=2, n_embd=64, n_head=4,
                  n_test=20, n_samples=5, temperature=1.0, num_beams=2, n_grid=[1, 3, 5]),
    "book": dict(seeds=[0, 1, 2], train_steps=600, batch_size=64, lr=6e-3, n_layer=2, n_embd=64, n_head=4,
                 n_test=300, n_samples=20, temperature=1.0, num_beams=5, n_grid=[1, 3, 5, 10, 20]),
    "paper": dict(seeds=[0, 1, 2, 3, 4], train_steps=3000, batch_size=64, lr=3e-3, n_layer=2, n_embd=64,
                  n_head=4, n_test=1000, n_samples=50, temperature=1.0, num_beams=5,
                  n_grid=[1, 3, 5, 10, 20, 50]),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
EXPERIMENT_BOUNDS = dict(train_steps=(1, None), batch_size=(1, None), lr=(1e-8, None), n_layer=(1, None),
                         n_embd=(4, None), n_head=(1, None), n_test=(1, None), n_samples=(1, None),
                         temperature=(1e-3, None), num_beams=(1, None), n_grid=(1, None))
DECODERS = ("greedy", "beam", "equal beam", "string majority", "medoid", "bayes")
SINGLE_DECODERS = ("greedy", "beam", "equal beam")  # decode the prompt directly, no samples
# The readings of an answer: the one the claims judge (sets: a repeated item read once) and, for sets,
# the strict format the chapter judged before the revision of 2026-12-02 (shown, not judged).
READERS = {"judged": interpret, "strict": parse}
SCORES = ("bayesian risk", "predictive entropy", "semantic entropy", "distinct answers", "beam nll")


def train_model(cfg, seed: int, progress=None):
    """The tiny GPT of the experiment, trained from scratch on the mixed training stream (Adam-W,
    cosine schedule; fresh noisy examples every step, stored as the Dataset of
    :func:`.task.training_corpus`), on ``model_device(cfg.profile)`` (a GPU at the paper profile when
    there is one). Returns the model and its loss curve."""
    model = tiny_gpt(len(TOKENS), n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head,
                     n_positions=MAX_LEN + 1, pad_id=PAD, eos_id=EOS, seed=seed).to(model_device(cfg.profile))
    corpus = training_corpus(cfg.train_steps, cfg.batch_size, seed)
    losses = train_lm(model, replay_batches(corpus, cfg.batch_size), steps=cfg.train_steps,
                      lr=cfg.lr, seed=seed, progress=progress)
    return model, losses


def decode_task(model, task: str, problems: dict, cfg, seed: int) -> tuple[list[dict], dict]:
    """All decoders and uncertainty scores on one task's test prompts (algorithm steps 1-4).

    Step 1 draws ``n_samples`` = N answers per prompt at ``temperature``; step 2 reads them with the
    judged phi (:func:`.task.interpret`) and drops the unreadable ones; step 3 takes the closed-form
    Bayes answer (greedy's answer if no sample is readable); step 4 reports the Bayesian risk. The
    medoid and the string vote use the same samples. Greedy decoding, beam search with ``num_beams``
    beams and beam search with N beams ("equal beam": as many sequences per decoding step as the N
    samples, so the same number of forward passes) decode the prompt directly. Sets are also read
    with the strict parser (columns ``strict ...``). Returns one row per prompt and the seconds spent
    sampling and in the equal-compute beam search. The model may be on a GPU: the draws come from a
    CPU generator and the decodes are brought back to the CPU before they are read."""
    prompts = torch.as_tensor(problems["prompt"], device=model.device)
    n, N, max_new = len(prompts), cfg.n_samples, max_answer_tokens(task)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    samples, sample_logprob = sample(model, prompts.repeat_interleave(N, 0), max_new, eos_id=EOS, pad_id=PAD,
                                     temperature=cfg.temperature, generator=generator)
    seconds_sampling = time.perf_counter() - start
    single = {"greedy": sample(model, prompts, max_new, eos_id=EOS, pad_id=PAD, temperature=0)[0],
              "beam": beam_search(model, prompts, max_new, num_beams=cfg.num_beams, eos_id=EOS, pad_id=PAD)}
    start = time.perf_counter()
    single["equal beam"] = beam_search(model, prompts, max_new, num_beams=N, eos_id=EOS, pad_id=PAD)
    seconds_beam = time.perf_counter() - start
    beam_logprob = _completion_logprob(model, prompts, single["equal beam"]).cpu()
    samples, sample_logprob, single = samples.cpu(), sample_logprob.cpu(), {k: v.cpu() for k, v in single.items()}
    rows = []
    for i in range(n):
        answers = samples[i * N:(i + 1) * N].numpy()
        decodes = {k: v[i].numpy() for k, v in single.items()}
        truth = truth_row(task, problems, i)
        row = {"task": task, "prompt": i, **_decisions(task, answers, decodes, truth, cfg.n_grid, "judged")}
        row.update({"predictive entropy": float(predictive_entropy(sample_logprob[i * N:(i + 1) * N].numpy())),
                    "beam nll": -float(beam_logprob[i])})
        if task == "sets":
            strict = _decisions(task, answers, decodes, truth, [], "strict")
            row.update({f"strict {k}": v for k, v in strict.items() if k.startswith("loss ") or k == "parsed samples"})
            row["samples cut off"] = sum(answer_tokens(a) is None for a in answers)
            row["samples repeating an item"] = row["parsed samples"] - row["strict parsed samples"]
        rows.append(row)
    return rows, {"sampling": seconds_sampling, "beam": seconds_beam}


def _decisions(task: str, answers, decodes: dict, truth, n_grid, reader: str) -> dict:
    """One prompt under one reading (a key of READERS): every decoder's loss (sets: also its size;
    labels: the rank of the class it names), the sample-based scores and the loss of the Bayes answer
    and of the medoid from the first m samples, m in ``n_grid``."""
    phi = READERS[reader]
    latents, n_parsed = parsed_latents(task, answers, phi=lambda a: phi(task, a))
    decided = {k: phi(task, v) for k, v in decodes.items()}
    majority = string_majority(answers, task, phi=lambda a: phi(task, a))
    fallback = decided["greedy"]
    bayes, risk = bayes_response(task, latents) if n_parsed else (fallback, np.nan)
    decided.update({"string majority": None if majority is None else phi(task, majority),
                    "medoid": mbr_medoid(task, latents)[0] if n_parsed else fallback, "bayes": bayes})
    out = {f"loss {k}": task_loss(task, decided[k], truth) for k in DECODERS}
    if task == "sets":
        out.update({f"size {k}": (np.nan if decided[k] is None else int(np.sum(decided[k]))) for k in DECODERS})
        out["size truth"] = int(np.sum(truth))
    if task == "labels":  # 0 = the most probable class, 1 = the second, ...; NaN = unparsable
        out.update({f"rank {k}": (np.nan if decided[k] is None else int(np.flatnonzero(truth == decided[k])[0]))
                    for k in DECODERS})
    out.update({"bayesian risk": risk,
                "semantic entropy": semantic_entropy(task, latents) if n_parsed else np.nan,
                "distinct answers": n_distinct(task, latents) if n_parsed else np.nan,
                "parsed samples": n_parsed})
    for m in n_grid:
        first, n_first = parsed_latents(task, answers[:m], phi=lambda a: phi(task, a))
        for name, rule in (("bayes", bayes_response), ("medoid", mbr_medoid)):
            out[f"loss {name} N={m}"] = task_loss(task, rule(task, first)[0] if n_first else fallback, truth)
    return out


def _completion_logprob(model, prompts, completions):
    ids = torch.cat([prompts, completions], 1)
    mask = torch.cat([torch.zeros_like(prompts, dtype=torch.bool), completion_mask(completions, EOS)], 1)
    with torch.no_grad():
        return sequence_logprob(model, ids, mask)


def run_seed(cfg, seed: int, progress=None) -> dict:
    """Train one model and decode fresh test prompts of every task with it (one seed), on one thread
    with torch's deterministic algorithms on (:func:`replib.core.runtime.compute_threads`)."""
    with compute_threads(1):
        seed_everything(seed)
        model, losses = train_model(cfg, seed, progress)
        rng = np.random.default_rng(10_000 + seed)
        rows, seconds = [], {"sampling": 0.0, "beam": 0.0}
        problems = {}
        for k, task in enumerate(TASKS):
            problems[task] = sample_problems(task, cfg.n_test, rng)
            task_rows, task_seconds = decode_task(model, task, problems[task], cfg, seed=100 * seed + k)
            rows += task_rows
            for key in seconds:
                seconds[key] += task_seconds[key]
    table = pd.DataFrame(rows)
    table.insert(0, "seed", seed)
    return {"table": table, "losses": losses, "seconds": seconds, "model": model, "problems": problems}


def run_experiment(cfg, progress=None) -> dict:
    """:func:`run_seed` for every seed of the profile; per-prompt rows of all seeds in ``table``."""
    runs = [run_seed(cfg, seed, progress) for seed in cfg.seeds]
    return {"runs": runs, "table": pd.concat([r["table"] for r in runs], ignore_index=True)}


def decoder_losses(table: pd.DataFrame, reader: str = "judged") -> pd.DataFrame:
    """Mean loss of every decoder per task and seed (sets: Hamming, ratings: expected absolute loss,
    labels: error rate), under the judged reading or (``reader="strict"``, sets only) the strict one."""
    prefix = "strict loss " if reader == "strict" else "loss "
    out = table.groupby(["task", "seed"])[[prefix + d for d in DECODERS]].mean()
    return out.rename(columns=lambda c: c.removeprefix(prefix))


def uncertainty_quality(table: pd.DataFrame) -> pd.DataFrame:
    """Per task and seed, for every uncertainty score: Spearman correlation with the Bayes answer's
    realised loss, AUROC for detecting a non-zero loss, and the area under the risk-coverage curve."""
    rows = []
    for (task, seed), group in table.groupby(["task", "seed"]):
        loss = group["loss bayes"].to_numpy()
        for score in SCORES:
            s = group[score].fillna(np.inf).to_numpy()
            rows.append({"task": task, "seed": seed, "score": score, "spearman": spearman(s, loss),
                         "auroc": auroc(s, loss > 0), "aurc": aurc(s, loss)})
    return pd.DataFrame(rows)


def sample_size_curve(table: pd.DataFrame, n_grid, decoder: str = "bayes") -> pd.DataFrame:
    """Mean loss of the Bayes answer (or the medoid) from the first N samples, per task, seed and N."""
    columns = [f"loss {decoder} N={m}" for m in n_grid]
    out = table.groupby(["task", "seed"])[columns].mean()
    return out.rename(columns=lambda c: int(c.split("=")[1]))


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``."""
    table = results["table"]
    losses = decoder_losses(table)
    spearman_of = uncertainty_quality(table).set_index(["task", "seed", "score"])["spearman"]
    curve = sample_size_curve(table, cfg.n_grid)
    values = {}
    for run, seed in zip(results["runs"], cfg.seeds):
        sets, ratings, labels = (losses.loc[(t, seed)] for t in TASKS)
        set_rows = table[(table.seed == seed) & (table.task == "sets")]
        risk_gain = {task: spearman_of[(task, seed, "bayesian risk")] - spearman_of[(task, seed, "predictive entropy")]
                     for task in ("sets", "ratings")}
        beam_parsed = set_rows[set_rows["size equal beam"].notna()]  # sizes compared on the same prompts
        values[seed] = {
            "c1a_sets_vs_equal_beam": sets["bayes"] / sets["equal beam"],
            "c1b_beam_sets_smaller": beam_parsed["size equal beam"].mean() - beam_parsed["size truth"].mean(),
            "c1c_sets_vs_greedy": sets["bayes"] / sets["greedy"],
            "c2a_sets_vs_medoid": sets["bayes"] / sets["medoid"],
            "c2b_ratings_vs_medoid": ratings["bayes"] - ratings["medoid"],
            "c3a_ratings_vs_equal_beam": ratings["equal beam"] - ratings["bayes"],
            "c3b_labels_vs_beam": 100.0 * (labels["equal beam"] - labels["bayes"]),
            "c3c_ratings_vs_greedy": ratings["greedy"] - ratings["bayes"],
            "c4a_risk_sets": risk_gain["sets"],
            "c4b_risk_ratings": risk_gain["ratings"],
            "c5_more_samples": max(np.diff(curve.loc[(task, seed)].to_numpy()).max() for task in ("sets", "ratings")),
            "m1_beam_seconds": run["seconds"]["beam"],
            "m2_sampling_seconds": run["seconds"]["sampling"],
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
