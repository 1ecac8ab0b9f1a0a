"""PhysLogic's experiment: the candidate corpus of each seed (a cached ``datasets.Dataset``), the
three SFT data conditions, training the shared tiny GPT on each, evaluating accuracy and
logicality of its greedy solutions, the metric sanity check, the profiles and the claim values."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from replib.core.data import cached_dataset
from replib.core.runtime import compute_threads, model_device, seed_everything
from replib.models.causal_lm import sample, tiny_gpt, train_lm

from . import task
from .method import CONDITIONS, TfidfEncoder, assess, logicality_score, select_traces

__all__ = [
    "EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "TEACHER_RATES", "DEFECT_TARGETS", "split_problems", "encoder_for",
    "candidate_corpus", "defect_effects", "sequences", "train_condition", "solve", "evaluate", "run_seed",
    "run_experiment", "claim_values",
]

# The teacher's defect probabilities (ours: the paper's teacher is not known). About one candidate
# in five is free of defects; shortcut and skip keep the answer right, slip does not.
TEACHER_RATES = {"skip": 0.3, "swap": 0.3, "loop": 0.25, "irrelevant": 0.25, "shortcut": 0.1, "slip": 0.2}
# The defect check (claims p2-p5 of chapter.yml): the metric each defect should lower.
DEFECT_TARGETS = {"skip": "Rec", "swap": "O", "loop": "P", "irrelevant": "Prec"}
LOGICAL_DEFECTS = {"skip", "swap", "loop", "irrelevant", "shortcut"}
TRAIN_STEPS = (2, 3)
MAX_NEW_TOKENS = 45

_COMMON = dict(n_candidates=8, n_layer=2, n_head=4, lr=5e-3, batch=32, tau=0.3)
_TWO = ["logicality", "correctness"]
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_train=150, n_test=30, n_defect_problems=40, steps=30, n_embd=64, conditions=_TWO,
                  **_COMMON),
    "book": dict(seeds=[0, 1, 2], n_train=580, n_test=200, n_defect_problems=300, steps=250, n_embd=64,
                 conditions=_TWO, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], n_train=580, n_test=200, n_defect_problems=780, steps=2000, n_embd=128,
                  conditions=list(CONDITIONS), **_COMMON),
}
EXPERIMENT_BOUNDS = dict(n_candidates=(1, None), n_layer=(1, None), n_embd=(8, None), n_head=(1, None),
                         lr=(1e-6, None), batch=(1, None), tau=(0.0, 1.0), conditions=set(CONDITIONS),
                         n_train=(10, 770), n_test=(10, 770), n_defect_problems=(1, 780), steps=(1, None))


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


def split_problems(cfg, seed: int) -> tuple[list[dict], list[dict]]:
    """Held-out test problems (``n_test``) and training problems (``n_train``, disjoint from them) of
    one seed: a seeded shuffle of every problem with 2 or 3 nexuses. Test questions are new
    combinations of values and laws, never seen in training."""
    pool = task.all_problems(TRAIN_STEPS)
    order = np.random.default_rng([seed, 0]).permutation(len(pool))
    if cfg.n_test + cfg.n_train > len(pool):
        raise ValueError(f"n_test + n_train = {cfg.n_test + cfg.n_train} exceeds the {len(pool)} problems there are")
    test = [pool[k] for k in order[: cfg.n_test]]
    train = [pool[k] for k in order[cfg.n_test: cfg.n_test + cfg.n_train]]
    return train, test


def encoder_for(problems: list[dict]) -> TfidfEncoder:
    """The TF-IDF encoder of a seed, fitted on the nexus and answer sentences of its training problems."""
    return TfidfEncoder(task.reference_sentences(problems))


def _nexus_texts(problem: dict) -> list[str]:
    return [task.step_sentence(s) for s in task.nexus_steps(problem)]


def candidate_corpus(cfg, seed: int, train: list[dict], encoder: TfidfEncoder):
    """The teacher's ``n_candidates`` candidate solutions for every training problem, scored: a
    ``datasets.Dataset`` with one row per candidate (problem, candidate, question, nexuses, the
    candidate's text and tokens, its defects, correctness, F, O, P, Rec, Prec and S), cached."""
    params = {"seed": seed, "n_train": cfg.n_train, "n_candidates": cfg.n_candidates, "tau": cfg.tau,
              "rates": TEACHER_RATES}

    def build():
        rng = np.random.default_rng([seed, 1])
        rows = []
        for k, problem in enumerate(train):
            for c in range(cfg.n_candidates):
                cand = task.teacher_candidate(problem, TEACHER_RATES, rng)
                rows.append({"problem": k, "candidate": c,
                             "question": " ".join(task.VOCAB[t] for t in task.prompt_tokens(problem)),
                             "nexuses": " ".join(_nexus_texts(problem)),
                             "text": task.trace_text(cand["steps"], problem["target"], cand["answer"]),
                             "tokens": task.trace_tokens(cand["steps"], cand["answer"]),
                             "defects": ",".join(cand["defects"]),
                             "correct": task.is_correct(cand["answer"], problem)})
        scores = assess(encoder, [_nexus_texts(train[r["problem"]]) for r in rows],
                        [task.nexus_weights(train[r["problem"]]) for r in rows], [r["text"] for r in rows], cfg.tau)
        for row, s in zip(rows, scores):
            row.update(s, S=logicality_score(s))
        return rows

    return cached_dataset("physlogic_candidates", params, build)


def defect_effects(cfg, seed: int, encoder: TfidfEncoder) -> pd.DataFrame:
    """The defect check (claims p2-p5), no training: for ``n_defect_problems`` fresh problems, the metrics of the
    defect-free trace and of each single-defect trace (one row per problem and defect, ``clean``
    included), on the same problems."""
    rng = np.random.default_rng([seed, 3])
    problems = task.sample_problems(cfg.n_defect_problems, TRAIN_STEPS, rng)  # any problems: no training here
    rows, texts, nexus, weights = [], [], [], []
    for k, problem in enumerate(problems):
        for defect in ("clean", *task.DEFECTS):
            steps, answer = ((problem["steps"], problem["answer"]) if defect == "clean"
                             else task.defective_trace(problem, defect, rng))
            rows.append({"seed": seed, "problem": k, "defect": defect})
            texts.append(task.trace_text(steps, problem["target"], answer))
            nexus.append(_nexus_texts(problem))
            weights.append(task.nexus_weights(problem))
    scores = assess(encoder, nexus, weights, texts, cfg.tau)
    return pd.DataFrame([{**r, **s} for r, s in zip(rows, scores)])


# --------------------------------------------------------------------------------------------
# The language model
# --------------------------------------------------------------------------------------------


def sequences(prompts: list[list[int]], traces: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Prompt + trace token ids padded to a common length, and the mask of the trace tokens (the
    loss is taken on the solution, not on the question)."""
    length = max(len(p) + len(t) for p, t in zip(prompts, traces))
    ids = np.full((len(prompts), length), task.TOKEN[task.PAD], dtype=np.int64)
    mask = np.zeros((len(prompts), length), dtype=bool)
    for r, (p, t) in enumerate(zip(prompts, traces)):
        ids[r, : len(p) + len(t)] = p + t
        mask[r, len(p): len(p) + len(t)] = True
    return ids, mask


def _n_positions(cfg) -> int:
    return 16 + MAX_NEW_TOKENS + 3


def train_condition(cfg, seed: int, prompts, traces, progress=None, device: str = "cpu"):
    """A fresh tiny GPT (the same initial weights for every condition of a seed) moved to ``device`` and
    fine-tuned with :func:`replib.models.causal_lm.train_lm` on one trace per problem; returns the
    model and losses."""
    model = tiny_gpt(len(task.VOCAB), n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head,
                     n_positions=_n_positions(cfg), pad_id=task.TOKEN[task.PAD], eos_id=task.TOKEN[task.EOS],
                     seed=seed).to(device)
    ids, mask = sequences(prompts, traces)
    used = mask.any(axis=0)
    width = int(np.flatnonzero(used).max()) + 1

    def draw_batch(rng):
        rows = rng.integers(len(ids), size=cfg.batch)
        length = int(np.flatnonzero(mask[rows].any(axis=0)).max()) + 1
        return ids[rows, :length], mask[rows, :length]

    losses = train_lm(model, draw_batch, steps=cfg.steps, lr=cfg.lr, warmup=min(50, cfg.steps // 5 + 1), seed=seed,
                      progress=progress)
    assert width <= _n_positions(cfg)
    return model, losses


def solve(model, problems: list[dict], temperature: float = 0.0, generator=None) -> list[tuple[str, int | None]]:
    """Solutions of ``problems`` (grouped by prompt length), greedy at ``temperature`` 0, else
    drawn (with ``generator``, a CPU generator whatever the model's device): the reasoning text and
    the answer of each."""
    out = [None] * len(problems)
    prompts = [task.prompt_tokens(p) for p in problems]
    for length in sorted({len(p) for p in prompts}):
        rows = [r for r, p in enumerate(prompts) if len(p) == length]
        completions, _ = sample(model, torch.tensor([prompts[r] for r in rows], device=model.device), MAX_NEW_TOKENS,
                                eos_id=task.TOKEN[task.EOS], pad_id=task.TOKEN[task.PAD], temperature=temperature,
                                generator=generator)
        for r, tokens in zip(rows, completions.tolist()):
            out[r] = task.parse_completion(tokens, problems[r])
    return out


def evaluate(model, problems: list[dict], encoder: TfidfEncoder, tau: float, temperature: float = 0.0,
             generator=None) -> pd.DataFrame:
    """One row per problem: correctness of the model's answer and the logicality of its reasoning."""
    solved = solve(model, problems, temperature, generator)
    scores = assess(encoder, [_nexus_texts(p) for p in problems], [task.nexus_weights(p) for p in problems],
                    [text for text, _ in solved], tau)
    return pd.DataFrame([{"problem": k, "correct": float(task.is_correct(answer, p)), "text": text, **s}
                         for k, (p, (text, answer), s) in enumerate(zip(problems, solved, scores))])


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: problems, encoder, the scored candidate corpus, the defect check, then for
    every condition of ``cfg.conditions`` the selected traces, a fine-tuned model and its held-out
    evaluation. Plain data only (no models). The models run on ``model_device(cfg.profile)`` (a GPU
    at the paper profile when there is one)."""
    where = model_device(cfg.profile)
    with compute_threads(threads):
        seed_everything(seed)
        seconds = {"seed": seed}
        start = time.perf_counter()
        train, test = split_problems(cfg, seed)
        encoder = encoder_for(train)
        corpus = candidate_corpus(cfg, seed, train, encoder)
        defects = defect_effects(cfg, seed, encoder)
        seconds["data"] = time.perf_counter() - start
        frame = corpus.select_columns(["problem", "candidate", "correct", "S", "F", "O", "P"]).to_pandas()
        correct = frame["correct"].to_numpy().reshape(cfg.n_train, cfg.n_candidates)
        score = frame["S"].to_numpy().reshape(cfg.n_train, cfg.n_candidates)
        chosen = {c: select_traces(correct, score, c, np.random.default_rng([seed, 4, i]))
                  for i, c in enumerate(CONDITIONS)}
        keep = np.flatnonzero(np.all([chosen[c] >= 0 for c in CONDITIONS], axis=0))  # the same problems for all
        tokens = corpus["tokens"]
        defect_names = np.array(corpus["defects"], dtype=object)
        logical_defect = np.array([bool(set(d.split(",")) & LOGICAL_DEFECTS) for d in defect_names])
        correct_with_defect = float(logical_defect[frame["correct"].to_numpy()].mean())
        prompts = [task.prompt_tokens(train[k]) for k in keep]
        selected, evals, losses = [], [], []
        for condition in cfg.conditions:
            rows = keep * cfg.n_candidates + chosen[condition][keep]
            picked = frame.iloc[rows]
            selected.append({"seed": seed, "condition": condition, "n": len(rows),
                             "correct": float(picked["correct"].mean()), "S": float(picked["S"].mean()),
                             "F": float(picked["F"].mean()), "O": float(picked["O"].mean()),
                             "P": float(picked["P"].mean()),
                             "defect_free": float((defect_names[rows] == "").mean()),
                             "correct_with_defect": correct_with_defect})
            start = time.perf_counter()
            model, loss = train_condition(cfg, seed, prompts, [tokens[int(r)] for r in rows], progress, where)
            seconds[f"train_{condition}"] = time.perf_counter() - start
            start = time.perf_counter()
            generator = torch.Generator().manual_seed(1000 * seed + 5)  # the same draws for every condition
            for decoding, temperature in (("greedy", 0.0), ("sampled", 1.0)):
                evals.append(evaluate(model, test, encoder, cfg.tau, temperature, generator).assign(
                    seed=seed, condition=condition, decoding=decoding))
            seconds[f"eval_{condition}"] = time.perf_counter() - start
            losses += [{"seed": seed, "condition": condition, "step": i + 1, "loss": float(v)}
                       for i, v in enumerate(loss)]
    return {"seed": seed, "selected": selected, "evals": pd.concat(evals, ignore_index=True),
            "defects": defects, "losses": losses, "seconds": seconds}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed; data frames ``selected`` (the training sets), ``evals``
    (held-out solutions), ``defects`` (claims p2-p5), ``losses`` and ``seconds``."""
    runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    return {"selected": pd.DataFrame([r for run in runs for r in run["selected"]]),
            "evals": pd.concat([run["evals"] for run in runs], ignore_index=True),
            "defects": pd.concat([run["defects"] for run in runs], ignore_index=True),
            "losses": pd.DataFrame([r for run in runs for r in run["losses"]]),
            "seconds": pd.DataFrame([run["seconds"] for run in runs])}


def _gap(evals: pd.DataFrame, decoding: str, column: str) -> float:
    """Mean ``column``, logicality-guided minus correctness-only, for one decoding (nan if a
    condition is missing)."""
    means = evals[evals["decoding"] == decoding].groupby("condition")[column].mean()
    if not {"logicality", "correctness"} <= set(means.index):
        return float("nan")
    return float(means["logicality"] - means["correctness"])


def _defect_drop(defects: pd.DataFrame, defect: str, metric: str) -> float:
    """Claims p2-p5: mean ``metric`` of the defect-free traces minus that of the ``defect`` traces."""
    means = defects.groupby("defect")[metric].mean()
    return float(means["clean"] - means[defect])


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``. The gaps are
    logicality-guided minus correctness-only (nan where a condition was not run); p2-p5's drops
    compare defect-free and single-defect traces of the same problems; c1 is Spearman's rho between
    F and correctness over the greedy held-out solutions of the two conditions; the premises read
    the teacher's candidates (``selected`` rows) and the selected training traces."""
    nan = float("nan")
    values = {}
    for seed in cfg.seeds:
        ev = results["evals"][results["evals"]["seed"] == seed]
        de = results["defects"][results["defects"]["seed"] == seed]
        sel = results["selected"][results["selected"]["seed"] == seed].set_index("condition")
        greedy = ev[(ev["decoding"] == "greedy") & ev["condition"].isin(["logicality", "correctness"])]
        base = greedy[greedy["condition"] == "correctness"]["correct"]
        rho = spearmanr(greedy["F"], greedy["correct"]).statistic if greedy["correct"].nunique() > 1 else nan
        sel_f = sel["F"] if {"logicality", "correctness"} <= set(sel.index) else None
        values[seed] = {
            "p1_baseline_learns": float(base.mean()) if len(base) else nan,
            "p2_skip_lowers_recall": _defect_drop(de, "skip", "Rec"),
            "p3_swap_lowers_order": _defect_drop(de, "swap", "O"),
            "p4_loop_lowers_progress": _defect_drop(de, "loop", "P"),
            "p5_irrelevant_lowers_precision": _defect_drop(de, "irrelevant", "Prec"),
            "r1_correct_but_illogical": float(sel["correct_with_defect"].iloc[0]),
            "r2_selected_data_more_logical": float(sel_f["logicality"] - sel_f["correctness"]) if sel_f is not None else nan,
            "h1_logicality_gain": _gap(ev, "greedy", "F"),
            "h2_accuracy_gain": _gap(ev, "greedy", "correct"),
            "c1_logicality_predicts_correctness": float(rho),
            "c2_sampled_logicality_gain": _gap(ev, "sampled", "F"),
            "c3_sampled_accuracy_gain": _gap(ev, "sampled", "correct"),
            "m1_order_gain": _gap(ev, "greedy", "O"),
            "m2_progress_gain": _gap(ev, "greedy", "P"),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
