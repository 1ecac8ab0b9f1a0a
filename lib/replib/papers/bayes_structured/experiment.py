"""The experiment: profiles, training the tiny GPT, decoding every task with the method and the
baselines, the per-seed runs, their summaries and the claim values."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import seed_everything
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
    hamming_loss,
    max_answer_tokens,
    parse,
    parse_set_lenient,
    parsed_latents,
    sample_problems,
    spearman,
    task_loss,
    training_batch,
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
    "book": dict(seeds=[0, 1, 2], train_steps=1400, batch_size=64, lr=3e-3, n_layer=2, n_embd=64, n_head=4,
                 n_test=300, n_samples=20, temperature=1.0, num_beams=5, n_grid=[1, 3, 5, 10, 20]),
    "paper": dict(seeds=[0, 1, 2, 3, 4], train_steps=3000, batch_size=64, lr=3e-3, n_layer=2, n_embd=64,
                  n_head=4, n_test=1000, n_samples=50, temperature=1.0, num_beams=5,
                  n_grid=[1, 3, 5, 10, 20, 50]),
}
DECODERS = ("greedy", "beam", "string majority", "medoid", "bayes")
SCORES = ("bayesian risk", "predictive entropy", "semantic entropy", "distinct answers", "beam nll")


def train_model(cfg, seed: int, progress=None):
    """The tiny GPT of the experiment, trained from scratch on the mixed training stream (Adam-W,
    cosine schedule; fresh noisy examples every step). Returns the model and its loss curve."""
    model = tiny_gpt(len(TOKENS), n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head,
                     n_positions=MAX_LEN + 1, pad_id=PAD, eos_id=EOS, seed=seed)
    losses = train_lm(model, lambda rng: training_batch(cfg.batch_size, rng), steps=cfg.train_steps,
                      lr=cfg.lr, seed=seed, progress=progress)
    return model, losses


def decode_task(model, task: str, problems: dict, cfg, seed: int) -> tuple[list[dict], dict]:
    """All decoders and uncertainty scores on one task's test prompts (algorithm steps 1-4).

    Step 1 draws ``n_samples`` answers per prompt at ``temperature``; step 2 parses them and drops the
    unparsable ones; step 3 takes the closed-form Bayes answer (greedy's answer if no sample parses);
    step 4 reports the Bayesian risk. The medoid and the string vote use the same samples; greedy
    and beam search decode the prompt directly. Returns one row per prompt and the seconds spent
    sampling and in beam search."""
    prompts = torch.as_tensor(problems["prompt"])
    n, N, max_new = len(prompts), cfg.n_samples, max_answer_tokens(task)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    samples, sample_logprob = sample(model, prompts.repeat_interleave(N, 0), max_new, eos_id=EOS, pad_id=PAD,
                                     temperature=cfg.temperature, generator=generator)
    seconds_sampling = time.perf_counter() - start
    greedy, _ = sample(model, prompts, max_new, eos_id=EOS, pad_id=PAD, temperature=0)
    start = time.perf_counter()
    beam = beam_search(model, prompts, max_new, num_beams=cfg.num_beams, eos_id=EOS, pad_id=PAD)
    seconds_beam = time.perf_counter() - start
    beam_logprob = _completion_logprob(model, prompts, beam)
    rows = []
    for i in range(n):
        answers = samples[i * N:(i + 1) * N].numpy()
        truth = truth_row(task, problems, i)
        latents, _ = parsed_latents(task, answers)
        greedy_answer = parse(task, greedy[i].numpy())
        majority = string_majority(answers, task)
        bayes, risk = bayes_response(task, latents) if len(latents) else (greedy_answer, np.nan)
        medoid = mbr_medoid(task, latents)[0] if len(latents) else greedy_answer
        decoded = {"greedy": greedy_answer, "beam": parse(task, beam[i].numpy()),
                   "string majority": None if majority is None else parse(task, majority),
                   "medoid": medoid, "bayes": bayes}
        row = {"task": task, "prompt": i, **{f"loss {k}": task_loss(task, v, truth) for k, v in decoded.items()}}
        if task == "sets":
            row.update({f"size {k}": (np.nan if v is None else int(np.sum(v))) for k, v in decoded.items()})
            row["size truth"] = int(np.sum(truth))
        if task == "labels":  # 0 = the most probable class, 1 = the second, ...; NaN = unparsable
            row.update({f"rank {k}": (np.nan if v is None else int(np.flatnonzero(truth == v)[0]))
                        for k, v in decoded.items()})
        row.update({"bayesian risk": risk,
                    "predictive entropy": float(predictive_entropy(sample_logprob[i * N:(i + 1) * N].numpy())),
                    "semantic entropy": semantic_entropy(task, latents) if len(latents) else np.nan,
                    "distinct answers": n_distinct(task, latents) if len(latents) else np.nan,
                    "beam nll": -float(beam_logprob[i]),
                    "parsed samples": len(latents)})
        if task == "sets":
            row.update(_lenient_set_losses(answers, greedy[i].numpy(), beam[i].numpy(), truth))
        for m in cfg.n_grid:
            first, _ = parsed_latents(task, answers[:m])
            for name, rule in (("bayes", bayes_response), ("medoid", mbr_medoid)):
                answer = rule(task, first)[0] if len(first) else greedy_answer
                row[f"loss {name} N={m}"] = task_loss(task, answer, truth)
        rows.append(row)
    return rows, {"sampling": seconds_sampling, "beam": seconds_beam}


def _lenient_set_losses(answers, greedy, beam, truth) -> dict:
    """The exploratory variant: the same samples and decodes read with :func:`parse_set_lenient`."""
    latents, n_parsed = parsed_latents("sets", answers, phi=parse_set_lenient)
    greedy_answer = parse_set_lenient(greedy)
    decoded = {"greedy": greedy_answer, "beam": parse_set_lenient(beam),
               "medoid": mbr_medoid("sets", latents)[0] if n_parsed else greedy_answer,
               "bayes": bayes_response("sets", latents)[0] if n_parsed else greedy_answer}
    out = {f"lenient loss {k}": hamming_loss(v, truth) for k, v in decoded.items()}
    out["lenient parsed samples"] = n_parsed
    out["samples repeating an item"] = n_parsed - parsed_latents("sets", answers)[1]
    out["samples cut off"] = sum(answer_tokens(a) is None for a in answers)
    return out


def _completion_logprob(model, prompts, completions):
    ids = torch.cat([prompts, completions], 1)
    mask = torch.cat([torch.zeros_like(prompts, dtype=torch.bool), completion_mask(completions, EOS)], 1)
    with torch.no_grad():
        return sequence_logprob(model, ids, mask)


def run_seed(cfg, seed: int, progress=None) -> dict:
    """Train one model and decode fresh test prompts of every task with it (one seed)."""
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


def decoder_losses(table: pd.DataFrame) -> pd.DataFrame:
    """Mean loss of every decoder per task and seed (sets: Hamming, ratings: expected absolute loss,
    labels: error rate)."""
    columns = [f"loss {d}" for d in DECODERS]
    out = table.groupby(["task", "seed"])[columns].mean()
    return out.rename(columns=lambda c: c.removeprefix("loss "))


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
        beam_parsed = set_rows[set_rows["size beam"].notna()]  # sizes compared on the same prompts
        values[seed] = {
            "c1a_sets_vs_beam": sets["bayes"] / sets["beam"],
            "c1b_beam_sets_smaller": beam_parsed["size beam"].mean() - beam_parsed["size truth"].mean(),
            "c2a_sets_vs_medoid": sets["bayes"] / sets["medoid"],
            "c2b_ratings_vs_medoid": ratings["bayes"] - ratings["medoid"],
            "c3a_ratings_vs_beam": ratings["beam"] - ratings["bayes"],
            "c3b_labels_vs_beam": 100.0 * (labels["beam"] - labels["bayes"]),
            "c4a_risk_sets": risk_gain["sets"],
            "c4b_risk_ratings": risk_gain["ratings"],
            "c5_more_samples": max(np.diff(curve.loc[(task, seed)].to_numpy()).max() for task in ("sets", "ratings")),
            "m1_beam_seconds": run["seconds"]["beam"],
            "m2_sampling_seconds": run["seconds"]["sampling"],
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
