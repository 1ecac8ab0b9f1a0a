"""The experiment: profiles, training the tiny GPT, decoding every task with the method and the
baselines, the per-seed runs, their summaries and the claim values."""

from __future__ import annotations

import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
import torch
from torch.nn import functional as F

from replib.core.data import replay_batches
from replib.core.runtime import compute_threads, model_device, seed_everything
from replib.models.causal_lm import (
    beam_search,
    completion_mask,
    sample,
    sequence_logprob,
    tiny_gpt,
)

from .baselines import mbr_medoid, n_distinct, predictive_entropy, semantic_entropy, string_majority
from .method import TASKS, bayes_response, expected_distance
from .task import (
    EOS,
    MAX_LEN,
    PAD,
    TASK_TOKEN,
    TOKENS,
    answer_tokens,
    aurc,
    auroc,
    heldout_examples,
    interpret,
    max_answer_tokens,
    parse,
    parse_set_named,
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
    "competence",
    "beam_width_losses",
    "run_seed",
    "run_experiment",
    "decoder_losses",
    "uncertainty_quality",
    "sample_size_curve",
    "claim_values",
]

# --- experiment pipeline (model-driven) ---

# num_beams: the beam width per task (sets, ratings, labels), chosen on the pilot seeds from BEAM_GRID
# (the tuning protocol of chapter.yml); workers: processes the seeds are split over (whole seeds each).
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], train_steps=120, batch_size=64, lr=3e-3, n_layer=2, n_embd=64, n_head=4,
                  n_test=20, n_samples=5, temperature=1.0, num_beams=[2, 2, 2], n_grid=[1, 3, 5], n_heldout=50,
                  workers=1),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], train_steps=1500, batch_size=64, lr=3e-3, n_layer=2,
                 n_embd=64, n_head=4, n_test=300, n_samples=20, temperature=1.0, num_beams=[3, 1, 1],
                 n_grid=[1, 3, 5, 10, 20], n_heldout=1000, workers=2),
    "paper": dict(seeds=[1000, 1001, 1002, 1003, 1004], train_steps=6000, batch_size=64, lr=3e-3, n_layer=2,
                  n_embd=64, n_head=4, n_test=1000, n_samples=50, temperature=1.0, num_beams=[3, 1, 1],
                  n_grid=[1, 3, 5, 10, 20, 50], n_heldout=2000, workers=1),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
EXPERIMENT_BOUNDS = dict(train_steps=(1, None), batch_size=(1, None), lr=(1e-8, None), n_layer=(1, None),
                         n_embd=(4, None), n_head=(1, None), n_test=(1, None), n_samples=(1, None),
                         temperature=(1e-3, None), num_beams=(1, None), n_grid=(1, None), n_heldout=(1, None),
                         workers=(1, 16))
DECODERS = ("greedy", "beam", "string majority", "medoid", "bayes")
SINGLE_DECODERS = ("greedy", "beam")  # decode the prompt directly, no samples
BEAM_GRID = (1, 3, 5, 10, 20)  # beam widths (and sample sizes N) of the tuning protocol: at most N = 20
# The readings of an answer: the one the claims judge (sets: a repeated item read once) and, for sets,
# the strict format the chapter judged before the revision of 2026-12-02 (shown, not judged).
READERS = {"judged": interpret, "strict": parse}
SCORES = ("bayesian risk", "predictive entropy", "semantic entropy", "distinct answers", "beam nll")


def train_model(cfg, seed: int, progress=None):
    """The tiny GPT of the experiment, trained from scratch on the mixed training stream (Adam-W,
    cosine schedule; fresh noisy examples every step, stored as the Dataset of
    :func:`.task.training_corpus`), on ``model_device(cfg.profile)`` (a GPU at the paper profile when
    there is one). The objective and optimiser are those of :func:`replib.models.causal_lm.train_lm`
    (mean cross-entropy of the answer tokens of the batch); :func:`train_bucketed` computes it task by
    task on rows cut to their task's length. Returns the model and its loss curve."""
    model = tiny_gpt(len(TOKENS), n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head,
                     n_positions=MAX_LEN + 1, pad_id=PAD, eos_id=EOS, seed=seed).to(model_device(cfg.profile))
    corpus = training_corpus(cfg.train_steps, cfg.batch_size, seed)
    losses = train_bucketed(model, replay_batches(corpus, cfg.batch_size), steps=cfg.train_steps, lr=cfg.lr,
                            seed=seed, progress=progress)
    return model, losses


def bucketed_answer_ce(model, ids: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of the answer tokens of a batch, -(1/|M|) sum_{(r, t) in M} log p(ids[r, t] |
    ids[r, :t]), M the positions ``target_mask`` marks: the objective of
    :func:`replib.models.causal_lm.train_lm`. The rows of each task (their first token) go through the
    model together, cut after the last answer token of the group: a label row is 6 tokens long, a
    rating row 9, a set row up to 23, and with right padding and causal attention the cut changes no
    logit of the kept positions, so the value is the same as on the full batch for about two thirds
    of the compute."""
    first = ids[:, 0]
    total = target_mask[:, 1:].sum()
    loss = ids.new_zeros((), dtype=torch.float32)
    for token in TASK_TOKEN.values():
        rows = first == token
        if not bool(rows.any()):
            continue
        sub, mask = ids[rows], target_mask[rows]
        length = int(mask.any(0).nonzero().max()) + 1
        sub, mask = sub[:, :length], mask[:, 1:length]
        logits = model(sub[:, :-1]).logits
        loss = loss + F.cross_entropy(logits[mask].float(), sub[:, 1:][mask], reduction="sum")
    return loss / total


def _warmup_cosine(step: int, steps: int, warmup: int) -> float:
    """The learning-rate factor of train_lm: linear warm-up, then a cosine to zero."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train_bucketed(model, draw_batch, *, steps: int, lr: float, weight_decay: float = 0.01, warmup: int = 50,
                   seed: int = 0, progress=None) -> np.ndarray:
    """:func:`replib.models.causal_lm.train_lm` (AdamW, linear warm-up for ``warmup`` steps then a cosine
    to zero, the same batches) with the loss computed by :func:`bucketed_answer_ce`. Returns the loss of
    every step."""
    rng = np.random.default_rng(seed)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: _warmup_cosine(s, steps, warmup))
    device = next(model.parameters()).device
    model.train()
    losses = np.empty(steps)
    for step in (progress(range(steps)) if progress else range(steps)):
        ids, target_mask = (torch.as_tensor(a, device=device) for a in draw_batch(rng))
        loss = bucketed_answer_ce(model, ids, target_mask)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        losses[step] = loss.item()
    model.eval()
    return losses


def competence(model, n: int, rng: np.random.Generator) -> dict:
    """How far the trained model is from the generator of its training answers, per task: on ``n``
    fresh examples (:func:`.task.heldout_examples`), the mean negative log-likelihood of the answer
    (nats per answer) minus the mean noise floor (the exact entropy of the generator's answer,
    :func:`.task.answer_entropy`). Its expectation is KL(generator || model) per answer, 0 for a model
    that has learned the data; the estimate has sampling noise and can fall slightly below 0. Also
    returns the floor and the mean number of answer tokens (keys ``{task} kl``, ``{task} floor``,
    ``{task} tokens``)."""
    out = {}
    for task in TASKS:
        held = heldout_examples(task, n, rng)
        ids = torch.as_tensor(held["ids"], device=model.device)
        mask = torch.as_tensor(held["target_mask"], device=model.device)
        with torch.no_grad():
            nll = -sequence_logprob(model, ids, mask).cpu().numpy()
        out[f"{task} kl"] = float(nll.mean() - held["entropy"].mean())
        out[f"{task} floor"] = float(held["entropy"].mean())
        out[f"{task} tokens"] = float(held["target_mask"].sum(1).mean())
    return out


def _width(cfg, task: str) -> int:
    widths = cfg.num_beams if isinstance(cfg.num_beams, (list, tuple)) else [cfg.num_beams] * len(TASKS)
    return int(widths[TASKS.index(task)])


def decode_task(model, task: str, problems: dict, cfg, seed: int) -> tuple[list[dict], dict]:
    """All decoders and uncertainty scores on one task's test prompts (algorithm steps 1-4).

    Step 1 draws ``n_samples`` = N answers per prompt at ``temperature``; step 2 reads them with the
    judged phi (:func:`.task.interpret`) and drops the unreadable ones; step 3 takes the closed-form
    Bayes answer (greedy's answer if no sample is readable); step 4 reports the Bayesian risk. The
    medoid and the string vote use the same samples. Greedy decoding and beam search decode the prompt
    directly; the beam width is the task's entry of ``cfg.num_beams`` (chosen on the pilot seeds from
    :data:`BEAM_GRID`, at most N sequences per step, so never more forward passes than the method).
    Sets are also read with the strict parser (columns ``strict ...``) and with cut-off samples read
    for the items they name (columns ``... with cut-offs``). Returns one row per prompt and the
    seconds spent sampling and in beam search. The model may be on a GPU: the draws come from a CPU
    generator and the decodes are brought back to the CPU before they are read."""
    prompts = torch.as_tensor(problems["prompt"], device=model.device)
    n, N, max_new = len(prompts), cfg.n_samples, max_answer_tokens(task)
    generator = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    samples, sample_logprob = sample(model, prompts.repeat_interleave(N, 0), max_new, eos_id=EOS, pad_id=PAD,
                                     temperature=cfg.temperature, generator=generator)
    seconds_sampling = time.perf_counter() - start
    single = {"greedy": sample(model, prompts, max_new, eos_id=EOS, pad_id=PAD, temperature=0)[0]}
    start = time.perf_counter()
    single["beam"] = beam_search(model, prompts, max_new, num_beams=_width(cfg, task), eos_id=EOS, pad_id=PAD)
    seconds_beam = time.perf_counter() - start
    beam_logprob = _completion_logprob(model, prompts, single["beam"]).cpu()
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
            row.update(_membership(answers, truth))
        rows.append(row)
    return rows, {"sampling": seconds_sampling, "beam": seconds_beam}


def _membership(answers, truth) -> dict:
    """Sets: the model's q_e (share of readable samples naming item e) averaged over the true items and
    over the other items (the generator's answers give 0.75 and 0.25), and the same q_e and the Bayes
    answer's loss when cut-off samples are read for the items they name instead of dropped."""
    truth = np.asarray(truth, dtype=bool)
    dropped, n_dropped = parsed_latents("sets", answers, phi=lambda a: interpret("sets", a))
    named, n_named = parsed_latents("sets", answers, phi=parse_set_named)
    q = dropped.mean(0) if n_dropped else np.full(truth.size, np.nan)
    q_named = named.mean(0) if n_named else np.full(truth.size, np.nan)
    bayes_named = bayes_response("sets", named)[0] if n_named else None
    return {"qe true": float(q[truth].mean()), "qe false": float(q[~truth].mean()),
            "qe shift with cut-offs": float(np.abs(q_named - q).mean()),
            "loss bayes with cut-offs": task_loss("sets", bayes_named, truth) if n_named else np.nan}


def beam_width_losses(model, task: str, problems: dict, widths=BEAM_GRID) -> dict:
    """Mean loss of beam search (judged reading) on one task's prompts at each width in ``widths``
    (width 1 is greedy decoding): the tuning run of the beam baseline on the pilot seeds."""
    prompts = torch.as_tensor(problems["prompt"], device=model.device)
    out = {}
    for width in widths:
        decoded = beam_search(model, prompts, max_answer_tokens(task), num_beams=int(width), eos_id=EOS,
                              pad_id=PAD).cpu().numpy()
        out[int(width)] = float(np.mean([task_loss(task, interpret(task, d), truth_row(task, problems, i))
                                         for i, d in enumerate(decoded)]))
    return out


def _decisions(task: str, answers, decodes: dict, truth, n_grid, reader: str) -> dict:
    """One prompt under one reading (a key of READERS): every decoder's loss (sets: also its size;
    labels: the rank of the class it names), the sample-based scores, the Bayes answer's and the
    medoid's mean distance to the readable samples (the objective of step 3, which the Bayes answer
    minimises over the whole latent space and the medoid over the samples only) and the loss of the
    Bayes answer and of the medoid from the first m samples, m in ``n_grid``."""
    phi = READERS[reader]
    latents, n_parsed = parsed_latents(task, answers, phi=lambda a: phi(task, a))
    decided = {k: phi(task, v) for k, v in decodes.items()}
    majority = string_majority(answers, task, phi=lambda a: phi(task, a))
    fallback = decided["greedy"]
    bayes, risk = bayes_response(task, latents) if n_parsed else (fallback, np.nan)
    medoid = mbr_medoid(task, latents)[0] if n_parsed else fallback
    decided.update({"string majority": None if majority is None else phi(task, majority),
                    "medoid": medoid, "bayes": bayes})
    out = {f"loss {k}": task_loss(task, decided[k], truth) for k in DECODERS}
    if task == "sets":
        out.update({f"size {k}": (np.nan if decided[k] is None else int(np.sum(decided[k]))) for k in DECODERS})
        out["size truth"] = int(np.sum(truth))
    if task == "labels":  # 0 = the most probable class, 1 = the second, ...; NaN = unparsable
        out.update({f"rank {k}": (np.nan if decided[k] is None else int(np.flatnonzero(truth == decided[k])[0]))
                    for k in DECODERS})
    out.update({"bayesian risk": risk,
                "objective bayes": expected_distance(task, bayes, latents) if n_parsed else np.nan,
                "objective medoid": expected_distance(task, medoid, latents) if n_parsed else np.nan,
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
    """Train one model, measure its competence on fresh held-out examples (:func:`competence`) and
    decode fresh test prompts of every task with it (one seed), on one thread with torch's
    deterministic algorithms on (:func:`replib.core.runtime.compute_threads`)."""
    with compute_threads(1):
        seed_everything(seed)
        start = time.process_time()
        model, losses = train_model(cfg, seed, progress)
        cpu = {"training": time.process_time() - start}
        rng = np.random.default_rng(10_000 + seed)
        rows, seconds = [], {"sampling": 0.0, "beam": 0.0}
        problems = {}
        start = time.process_time()
        for k, task in enumerate(TASKS):
            problems[task] = sample_problems(task, cfg.n_test, rng)
            task_rows, task_seconds = decode_task(model, task, problems[task], cfg, seed=100 * seed + k)
            rows += task_rows
            for key in seconds:
                seconds[key] += task_seconds[key]
        skill = competence(model, cfg.n_heldout, np.random.default_rng(20_000 + seed))
        cpu["decoding"] = time.process_time() - start
    table = pd.DataFrame(rows)
    table.insert(0, "seed", seed)
    return {"table": table, "losses": losses, "seconds": seconds, "cpu seconds": cpu, "competence": skill,
            "model": model.cpu(), "problems": problems}


def run_experiment(cfg, progress=None) -> dict:
    """:func:`run_seed` for every seed of the profile; per-prompt rows of all seeds in ``table``.

    With ``cfg.workers`` > 1 the seeds are split over that many processes (each runs whole seeds on one
    thread); every run is seeded by its seed alone, so the numbers are those of a single process."""
    seeds = list(cfg.seeds)
    workers = max(1, min(int(getattr(cfg, "workers", 1)), len(seeds)))
    if workers == 1:
        runs = [run_seed(cfg, seed, progress) for seed in seeds]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(run_seed, cfg, seed) for seed in seeds]
            runs = [f.result() for f in (progress(futures) if progress is not None else futures)]
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
        mine = table[table.seed == seed]
        set_rows = mine[mine.task == "sets"]
        risk_gain = {task: spearman_of[(task, seed, "bayesian risk")] - spearman_of[(task, seed, "predictive entropy")]
                     for task in ("sets", "ratings")}
        beam_parsed = set_rows[set_rows["size beam"].notna()]  # sizes compared on the same prompts
        skill = run["competence"]
        values[seed] = {
            "p1_sets_competence": skill["sets kl"],
            "p2_ratings_competence": skill["ratings kl"],
            "p3_sets_membership": set_rows["qe true"].mean() - set_rows["qe false"].mean(),
            "c1a_sets_vs_beam": sets["bayes"] / sets["beam"],
            "c1b_beam_sets_smaller": beam_parsed["size beam"].mean() - beam_parsed["size truth"].mean(),
            "c1c_sets_vs_greedy": sets["bayes"] / sets["greedy"],
            "c2a_sets_vs_medoid": sets["bayes"] / sets["medoid"],
            "c2b_objective_vs_medoid": (mine["objective bayes"] - mine["objective medoid"]).max(),
            "c3a_ratings_vs_beam": ratings["beam"] - ratings["bayes"],
            "c3b_labels_vs_beam": 100.0 * (labels["beam"] - labels["bayes"]),
            "c3c_ratings_vs_greedy": ratings["greedy"] - ratings["bayes"],
            "c4a_risk_sets": risk_gain["sets"],
            "c4b_risk_ratings": risk_gain["ratings"],
            "c5_more_samples": max(np.diff(curve.loc[(task, seed)].to_numpy()).max() for task in ("sets", "ratings")),
            "m1_beam_seconds": run["seconds"]["beam"],
            "m2_sampling_seconds": run["seconds"]["sampling"],
            "m3_cutoff_share": set_rows["samples cut off"].mean() / cfg.n_samples,
            "m4_cutoff_loss_shift": abs(set_rows["loss bayes with cut-offs"].mean() - set_rows["loss bayes"].mean()),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
