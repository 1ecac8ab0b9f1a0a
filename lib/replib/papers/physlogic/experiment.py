"""PhysLogic's experiment: the candidate corpus of each seed (a cached ``datasets.Dataset``), the
data conditions, the reference solutions (the ceiling of F), every seed and condition of the shared
tiny GPT fine-tuned as one batched model (GPT-2's computation on stacked weights, one AdamW per
model, a constant learning rate after warm-up so that the halfway checkpoint is a half-budget arm),
greedy and temperature-1 evaluation, the metric sanity check, the profiles and the claim values."""

from __future__ import annotations

import math
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from replib.core.data import cached_dataset
from replib.core.runtime import compute_threads, seed_everything
from replib.models.causal_lm import tiny_gpt

from . import task
from .method import CONDITIONS, TfidfEncoder, assess, logicality_score, select_traces

__all__ = [
    "EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "TEACHER_RATES", "DEFECT_TARGETS", "split_problems", "encoder_for",
    "candidate_corpus", "defect_effects", "stack_gpts", "unstack_gpt", "batched_forward", "sequences",
    "initial_models", "trace_loss", "StackedAdamW", "train_models", "batched_decode", "solve_all", "prepare_seed",
    "evaluate_models", "run_experiment", "claim_values",
]

# The teacher's defect probabilities (ours: the paper's teacher is not known). About one candidate
# in five is free of defects; shortcut and skip keep the answer right, slip does not.
TEACHER_RATES = {"skip": 0.3, "swap": 0.3, "loop": 0.25, "irrelevant": 0.25, "shortcut": 0.1, "slip": 0.2}
# The defect check (claims p2-p5 of chapter.yml): the metric each defect should lower.
DEFECT_TARGETS = {"skip": "Rec", "swap": "O", "loop": "P", "irrelevant": "Prec"}
LOGICAL_DEFECTS = {"skip", "swap", "loop", "irrelevant", "shortcut"}
TRAIN_STEPS = (2, 3)
MAX_NEW_TOKENS = 45

# Tuned on pilot seeds 0-2 over the declared grid (chapter.yml, `tuning:`): lr in {3e-3, 6e-3} at a
# constant learning rate for 1000 steps, each arm the one with the higher held-out greedy accuracy.
_COMMON = dict(n_candidates=8, n_layer=2, n_head=4, lr=3e-3, lr_baseline=3e-3, batch=32, tau=0.3,
               schedule="constant")
_TWO = ["logicality", "correctness"]
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], n_train=150, n_test=30, n_defect_problems=40, steps=30, n_embd=64, conditions=_TWO,
                  workers=1, **_COMMON),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], n_train=580, n_test=200, n_defect_problems=300, steps=1000,
                 n_embd=64, conditions=_TWO, workers=2, **_COMMON),
    "paper": dict(seeds=[1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009], n_train=580, n_test=200,
                  n_defect_problems=780, steps=4000, n_embd=128, conditions=list(CONDITIONS), workers=2, **_COMMON),
}
EXPERIMENT_BOUNDS = dict(n_candidates=(1, None), n_layer=(1, None), n_embd=(8, None), n_head=(1, None),
                         lr=(1e-6, None), lr_baseline=(0.0, None), batch=(1, None), workers=(1, None),
                         schedule={"constant", "cosine"}, tau=(0.0, 1.0), conditions=set(CONDITIONS),
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
              "rates": TEACHER_RATES, "masked": encoder.masked}

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
# Many tiny GPTs as one batched model
# --------------------------------------------------------------------------------------------


def stack_gpts(models) -> dict[str, torch.Tensor]:
    """The parameters of ``G`` GPT-2 models of one configuration (``replib.models.causal_lm.tiny_gpt``),
    stacked along a new first axis: ``{name: (G, *shape)}``, leaf tensors that require gradients."""
    names = [n for n, _ in models[0].named_parameters()]
    return {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).clone().requires_grad_(True)
            for n in names}


def unstack_gpt(params: dict[str, torch.Tensor], g: int, model):
    """Copy model ``g`` of the stacked ``params`` into ``model`` (a GPT-2 of the same configuration)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(params[n][g])
    return model


def _layer_norm(x, params, name):
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5)
    return y * params[f"{name}.weight"][:, None, None, :] + params[f"{name}.bias"][:, None, None, :]


def _linear(x, params, name):
    """GPT-2's Conv1D, y = x W + b, for every model at once: x (G, B, T, d), W (G, d, e)."""
    G, B, T, d = x.shape
    y = torch.bmm(x.reshape(G, B * T, d), params[f"{name}.weight"]) + params[f"{name}.bias"][:, None, :]
    return y.reshape(G, B, T, -1)


def batched_forward(params: dict, ids: torch.Tensor, n_head: int, cache: list | None = None, start: int = 0):
    """Next-token logits of ``G`` GPT-2 models at once, ``ids`` of shape (G, B, T) (model ``g`` reads
    ``ids[g]``), the same computation as ``GPT2LMHeadModel`` (pre-norm blocks, causal attention,
    tanh-approximated GELU, output layer tied to the token embedding). With ``cache`` (a list, one
    ``(keys, values)`` per layer, filled in place) the tokens sit at positions ``start..start+T-1`` after
    the cached ones. Returns logits (G, B, T, V)."""
    G, B, T = ids.shape
    wte = params["transformer.wte.weight"]
    x = wte[torch.arange(G)[:, None, None], ids] + params["transformer.wpe.weight"][:, None, start:start + T]
    n_layer = sum(1 for n in params if n.endswith("ln_1.weight"))
    d = x.shape[-1]
    for i in range(n_layer):
        h = f"transformer.h.{i}"
        q, k, v = _linear(_layer_norm(x, params, f"{h}.ln_1"), params, f"{h}.attn.c_attn").split(d, dim=-1)
        q, k, v = (t.reshape(G * B, T, n_head, d // n_head).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            if len(cache) > i:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        a = a.transpose(1, 2).reshape(G, B, T, d)
        x = x + _linear(a, params, f"{h}.attn.c_proj")
        m = _linear(_layer_norm(x, params, f"{h}.ln_2"), params, f"{h}.mlp.c_fc")
        x = x + _linear(torch.nn.functional.gelu(m, approximate="tanh"), params, f"{h}.mlp.c_proj")
    x = _layer_norm(x, params, "transformer.ln_f")
    return torch.bmm(x.reshape(G, B * T, d), wte.transpose(1, 2)).reshape(G, B, T, -1)


# --------------------------------------------------------------------------------------------
# The language models: every seed and condition as one batched GPT
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


def lr_factor(step: int, steps: int, warmup: int, schedule: str = "constant") -> float:
    """The learning-rate factor of step ``step`` (from 0): a linear warm-up over ``warmup`` steps, then
    constant (``schedule="constant"``: the model after ``k`` steps is the model a ``k``-step budget
    would give, which makes the halfway checkpoint a fair half-budget arm) or a cosine to zero
    (``"cosine"``, as ``replib.models.causal_lm.train_lm``)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def initial_models(cfg, seeds: list[int]) -> list:
    """One fresh tiny GPT (``replib.models.causal_lm.tiny_gpt``) per entry of ``seeds``, its weights drawn
    from that seed (so every condition of a seed starts from the same weights)."""
    return [tiny_gpt(len(task.VOCAB), n_layer=cfg.n_layer, n_embd=cfg.n_embd, n_head=cfg.n_head,
                     n_positions=_n_positions(cfg), pad_id=task.TOKEN[task.PAD], eos_id=task.TOKEN[task.EOS], seed=s)
            for s in seeds]


def trace_loss(params: dict, ids: torch.Tensor, mask: torch.Tensor, n_head: int) -> torch.Tensor:
    """The SFT objective of every model, shape (G,): the mean over the trace tokens of model ``g``'s
    batch (``mask``, not the question) of -log p(token | tokens before it). Training minimises their
    sum, which gives each model the gradient of its own mean."""
    logp = torch.log_softmax(batched_forward(params, ids[:, :, :-1], n_head), -1)
    nll = -logp.gather(-1, ids[:, :, 1:, None]).squeeze(-1)
    target = mask[:, :, 1:].to(nll.dtype)
    return (nll * target).sum((1, 2)) / target.sum((1, 2))


class StackedAdamW:
    """AdamW (decoupled weight decay, bias-corrected moments, as ``torch.optim.AdamW``) on stacked
    parameters, with one learning rate per model (``lr`` of shape (G,)): elementwise, so it is ``G``
    independent AdamW optimisers."""

    def __init__(self, params: dict, lr, weight_decay: float = 0.01, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.weight_decay, self.betas, self.eps = params, weight_decay, betas, eps
        self.lr = torch.as_tensor(lr, dtype=torch.float32)
        self.state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in params.items()}
        self.t = 0

    @torch.no_grad()
    def step(self, factor: float = 1.0) -> None:
        """One step at learning rate ``factor * lr`` (the schedule's factor)."""
        self.t += 1
        b1, b2 = self.betas
        for n, p in self.params.items():
            m, v = self.state[n]
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            lr = (factor * self.lr).reshape(-1, *[1] * (p.dim() - 1))
            p.mul_(1 - lr * self.weight_decay)
            p.sub_(lr / (1 - b1 ** self.t) * m / ((v / (1 - b2 ** self.t)).sqrt() + self.eps))
            p.grad = None


def train_models(cfg, data: list[tuple[np.ndarray, np.ndarray]], init_seeds: list[int], lrs: list[float],
                 checkpoints=(), on_checkpoint=None, progress=None) -> tuple[dict, np.ndarray]:
    """Fine-tune ``G = len(data)`` tiny GPTs at once: model ``g`` starts from ``tiny_gpt(seed=init_seeds[g])``
    and takes ``cfg.steps`` AdamW steps (learning rate ``lrs[g]``, linear warm-up then a cosine to zero,
    as ``replib.models.causal_lm.train_lm``) on batches of ``cfg.batch`` rows of its own ``data[g] =
    (ids, mask)`` (:func:`sequences`), drawn by ``default_rng(init_seeds[g])``: the conditions of a seed
    see the same rows in the same order. After the steps listed in ``checkpoints``,
    ``on_checkpoint(step, params)`` is called. Returns the stacked parameters and the losses (steps, G)."""
    params = stack_gpts(initial_models(cfg, init_seeds))
    G, n_rows = len(data), max(len(ids) for ids, _ in data)
    width = max(ids.shape[1] for ids, _ in data)
    all_ids = np.full((G, n_rows, width), task.TOKEN[task.PAD], dtype=np.int64)
    all_mask = np.zeros((G, n_rows, width), dtype=bool)
    for g, (ids, mask) in enumerate(data):
        all_ids[g, : len(ids), : ids.shape[1]], all_mask[g, : len(ids), : ids.shape[1]] = ids, mask
    rngs = [np.random.default_rng(s) for s in init_seeds]
    optimiser = StackedAdamW(params, lrs)
    warmup = min(50, cfg.steps // 5 + 1)
    losses = np.empty((cfg.steps, G))
    for step in (progress(range(cfg.steps)) if progress else range(cfg.steps)):
        rows = np.stack([rng.integers(len(d[0]), size=cfg.batch) for rng, d in zip(rngs, data)])
        ids, mask = np.take_along_axis(all_ids, rows[:, :, None], 1), np.take_along_axis(all_mask, rows[:, :, None], 1)
        length = int(np.flatnonzero(mask.any(axis=(0, 1))).max()) + 1
        loss = trace_loss(params, torch.from_numpy(ids[:, :, :length]), torch.from_numpy(mask[:, :, :length]),
                          cfg.n_head)
        loss.sum().backward()
        optimiser.step(lr_factor(step, cfg.steps, warmup, getattr(cfg, "schedule", "constant")))
        losses[step] = loss.detach().numpy()
        if step + 1 in checkpoints and on_checkpoint is not None:
            on_checkpoint(step + 1, params)
    return params, losses


@torch.no_grad()
def batched_decode(params: dict, prompts: torch.Tensor, n_head: int, noise=None) -> torch.Tensor:
    """Complete equal-length prompts (G, B, P) with every model at once, token by token with a key-value
    cache: greedy (``noise`` None) or a draw at temperature 1 by the Gumbel-max trick, ``noise(t)``
    giving Gumbel noise (G, B, V) for new token ``t``. Completions (G, B, MAX_NEW_TOKENS) are padded
    after the end token."""
    G, B, P = prompts.shape
    pad, eos = task.TOKEN[task.PAD], task.TOKEN[task.EOS]
    out = torch.full((G, B, MAX_NEW_TOKENS), pad, dtype=torch.long)
    done = torch.zeros((G, B), dtype=torch.bool)
    cache: list = []
    logits = batched_forward(params, prompts, n_head, cache)[:, :, -1]
    for t in range(MAX_NEW_TOKENS):
        logp = torch.log_softmax(logits, -1)
        token = (logp if noise is None else logp + noise(t)).argmax(-1)
        token = torch.where(done, torch.full_like(token, pad), token)
        out[:, :, t] = token
        done |= token == eos
        if bool(done.all()) or t == MAX_NEW_TOKENS - 1:
            break
        logits = batched_forward(params, token[:, :, None], n_head, cache, start=P + t)[:, :, -1]
    return out


def solve_all(params: dict, n_head: int, problems: list[list[dict]], noise_seeds=None) -> list[list[tuple]]:
    """Solutions of ``problems[g]`` by model ``g`` (grouped by prompt length; groups padded with copies of a
    row): greedy when ``noise_seeds`` is None, else one draw at temperature 1 with Gumbel noise from
    ``torch.Generator().manual_seed(noise_seeds[g])``, one array per problem list (problem k always gets
    row k, whatever the grouping); models with the same noise seed and problems get the same noise
    (common random numbers for the conditions of a seed). The reasoning text and answer of each."""
    G = len(problems)
    prompts = [[task.prompt_tokens(p) for p in group] for group in problems]
    out = [[None] * len(group) for group in problems]
    V = params["transformer.wte.weight"].shape[1]
    gumbel = {}  # one draw per noise seed: (problems, new tokens, vocabulary), whatever the grouping
    for g, s in enumerate(noise_seeds or []):
        if s not in gumbel:
            uniform = torch.rand((len(problems[g]), MAX_NEW_TOKENS, V), generator=torch.Generator().manual_seed(int(s)))
            gumbel[s] = -torch.log(-torch.log(uniform.clamp_min(1e-20)))
    for length in sorted({len(p) for group in prompts for p in group}):
        rows = [[r for r, p in enumerate(group) if len(p) == length] for group in prompts]
        n = max(len(r) for r in rows)
        if n == 0:
            continue
        batch = torch.zeros((G, n, length), dtype=torch.long)
        for g, r in enumerate(rows):
            fill = r + [r[0]] * (n - len(r)) if r else []
            if fill:
                batch[g] = torch.tensor([prompts[g][k] for k in fill])
        noise = None
        if noise_seeds is not None:
            stacked = torch.stack([gumbel[s][r + [r[0]] * (n - len(r)) if r else [0] * n]
                                   for s, r in zip(noise_seeds, rows)])  # (G, n, new tokens, V)
            noise = lambda t: stacked[:, :, t]  # noqa: E731
        completions = batched_decode(params, batch, n_head, noise)
        for g, r in enumerate(rows):
            for j, k in enumerate(r):
                out[g][k] = task.parse_completion(completions[g, j].tolist(), problems[g][k])
    return out


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------


def prepare_seed(cfg, seed: int) -> dict:
    """The data of one seed: problems, encoder, the scored candidate corpus, the defect check, the
    training set of every condition (the same problems for all) and the ceiling: the defect-free
    reference solution of every held-out problem, scored by the same metric code."""
    train, test = split_problems(cfg, seed)
    encoder = encoder_for(train)
    corpus = candidate_corpus(cfg, seed, train, encoder)
    defects = defect_effects(cfg, seed, encoder)
    frame = corpus.select_columns(["problem", "candidate", "correct", "S", "F", "O", "P"]).to_pandas()
    correct = frame["correct"].to_numpy().reshape(cfg.n_train, cfg.n_candidates)
    score = frame["S"].to_numpy().reshape(cfg.n_train, cfg.n_candidates)
    chosen = {c: select_traces(correct, score, c, np.random.default_rng([seed, 4, i])) for i, c in enumerate(CONDITIONS)}
    keep = np.flatnonzero(np.all([chosen[c] >= 0 for c in CONDITIONS], axis=0))  # the same problems for all
    tokens = corpus["tokens"]
    defect_names = np.array(corpus["defects"], dtype=object)
    logical_defect = np.array([bool(set(d.split(",")) & LOGICAL_DEFECTS) for d in defect_names])
    correct_with_defect = float(logical_defect[frame["correct"].to_numpy()].mean())
    prompts = [task.prompt_tokens(train[k]) for k in keep]
    selected, data = [], {}
    for condition in cfg.conditions:
        rows = keep * cfg.n_candidates + chosen[condition][keep]
        picked = frame.iloc[rows]
        selected.append({"seed": seed, "condition": condition, "n": len(rows),
                         "correct": float(picked["correct"].mean()), "S": float(picked["S"].mean()),
                         "F": float(picked["F"].mean()), "O": float(picked["O"].mean()),
                         "P": float(picked["P"].mean()), "defect_free": float((defect_names[rows] == "").mean()),
                         "correct_with_defect": correct_with_defect})
        data[condition] = sequences(prompts, [tokens[int(r)] for r in rows])
    reference = assess(encoder, [_nexus_texts(p) for p in test], [task.nexus_weights(p) for p in test],
                       [task.trace_text(p["steps"], p["target"], p["answer"]) for p in test], cfg.tau)
    ceiling = pd.DataFrame(reference).assign(seed=seed, problem=range(len(test)), correct=1.0)
    return {"seed": seed, "test": test, "encoder": encoder, "selected": selected, "data": data, "defects": defects,
            "ceiling": ceiling}


def _lr(cfg, condition: str) -> float:
    return cfg.lr_baseline if condition != "logicality" and cfg.lr_baseline > 0 else cfg.lr


def evaluate_models(cfg, params: dict, arms: list[tuple[int, str]], preps: dict) -> pd.DataFrame:
    """Greedy and temperature-1 solutions of every model (``arms[g] = (seed, condition)``) on its seed's
    held-out problems, scored: one row per model, decoding and problem (correctness, F, O, P, Rec, Prec)."""
    problems = [preps[s]["test"] for s, _ in arms]
    frames = []
    for decoding, noise_seeds in (("greedy", None), ("sampled", [1000 * s + 5 for s, _ in arms])):
        solved = solve_all(params, cfg.n_head, problems, noise_seeds)
        for (seed, condition), group, test in zip(arms, solved, problems):
            scores = assess(preps[seed]["encoder"], [_nexus_texts(p) for p in test],
                            [task.nexus_weights(p) for p in test], [text for text, _ in group], cfg.tau)
            frames.append(pd.DataFrame([{"problem": k, "correct": float(task.is_correct(answer, p)), "text": text, **s}
                                        for k, (p, (text, answer), s) in enumerate(zip(test, group, scores))]).assign(
                seed=seed, condition=condition, decoding=decoding))
    return pd.concat(frames, ignore_index=True)


def _run_group(cfg, seeds: list[int], threads: int = 1, progress=None) -> dict:
    """:func:`run_experiment` for the seeds ``seeds`` in this process: their data, then every seed x
    condition fine-tuned as one batched model, evaluated at half of the budget and at its end."""
    with compute_threads(threads):
        seconds = {}
        start = time.perf_counter()
        seed_everything(seeds[0])
        preps = {seed: prepare_seed(cfg, seed) for seed in seeds}
        seconds["data"] = time.perf_counter() - start
        arms = [(seed, c) for seed in seeds for c in cfg.conditions]
        halfway = []

        def checkpoint(step, params):
            tick = time.perf_counter()
            halfway.append(evaluate_models(cfg, params, arms, preps).assign(step=step))
            seconds["eval_halfway"] = time.perf_counter() - tick

        start = time.perf_counter()
        params, losses = train_models(cfg, [preps[s]["data"][c] for s, c in arms], [s for s, _ in arms],
                                      [_lr(cfg, c) for _, c in arms], checkpoints=(max(1, cfg.steps // 2),),
                                      on_checkpoint=checkpoint, progress=progress)
        seconds["train"] = time.perf_counter() - start - seconds.get("eval_halfway", 0.0)
        start = time.perf_counter()
        evals = evaluate_models(cfg, params, arms, preps)
        seconds["eval"] = time.perf_counter() - start
    loss_rows = [{"seed": s, "condition": c, "step": i + 1, "loss": float(losses[i, g])}
                 for g, (s, c) in enumerate(arms) for i in range(cfg.steps)]
    return {"selected": pd.DataFrame([r for p in preps.values() for r in p["selected"]]),
            "evals": evals, "halfway": pd.concat(halfway, ignore_index=True),
            "ceiling": pd.concat([p["ceiling"] for p in preps.values()], ignore_index=True),
            "defects": pd.concat([p["defects"] for p in preps.values()], ignore_index=True),
            "losses": pd.DataFrame(loss_rows), "seconds": {**seconds, "seeds": " ".join(map(str, seeds))}}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """Every seed's data (:func:`prepare_seed`), then every seed x condition fine-tuned as one batched
    model (:func:`train_models`), evaluated at half of the fine-tuning budget (the convergence check:
    with a constant learning rate, the model after half the steps is a half-budget arm) and at its
    end. With ``cfg.workers`` > 1 the seeds are split over that many processes, each one batched model
    on one thread; every model is seeded by its seed alone, but the padded width of a batched step
    depends on the other models in the batch, which changes float rounding, so the numbers are
    reproducible for a given ``workers`` (the profile fixes it), not across groupings. Data frames ``selected`` (the training
    sets), ``evals`` (held-out solutions at the end), ``halfway`` (the same at half the budget),
    ``ceiling`` (the reference solutions), ``defects`` (claims p2-p5), ``losses`` and ``seconds``
    (per process and stage)."""
    seeds = list(cfg.seeds)
    workers = max(1, min(int(getattr(cfg, "workers", 1)), len(seeds)))
    groups = [seeds[k::workers] for k in range(workers)]
    if workers == 1:
        parts = [_run_group(cfg, seeds, threads, progress)]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_group, cfg, group, threads) for group in groups]
            parts = [future.result() for future in futures]
    order = {seed: k for k, seed in enumerate(seeds)}

    def merged(key):
        frame = pd.concat([part[key] for part in parts], ignore_index=True)
        return frame.sort_values("seed", key=lambda col: col.map(order), kind="stable").reset_index(drop=True)

    return {**{key: merged(key) for key in ("selected", "evals", "halfway", "ceiling", "defects", "losses")},
            "seconds": pd.DataFrame([part["seconds"] for part in parts]).round(1)}


def _gap(evals: pd.DataFrame, decoding: str, column: str) -> float:
    """Mean ``column``, logicality-guided minus correctness-only, for one decoding (nan if a
    condition is missing)."""
    means = evals[evals["decoding"] == decoding].groupby("condition")[column].mean()
    if not {"logicality", "correctness"} <= set(means.index):
        return float("nan")
    return float(means["logicality"] - means["correctness"])


def _mean(evals: pd.DataFrame, decoding: str, condition: str, column: str) -> float:
    rows = evals[(evals["decoding"] == decoding) & (evals["condition"] == condition)][column]
    return float(rows.mean()) if len(rows) else float("nan")


def _change(end: pd.DataFrame, half: pd.DataFrame, decoding: str, column: str) -> float:
    """The largest absolute change of mean ``column`` between half and the whole fine-tuning budget,
    over the two compared conditions (nan if one is missing)."""
    changes = [abs(_mean(end, decoding, c, column) - _mean(half, decoding, c, column))
               for c in ("logicality", "correctness")]
    return float(np.max(changes))


def _defect_drop(defects: pd.DataFrame, defect: str, metric: str) -> float:
    """Claims p2-p5: mean ``metric`` of the defect-free traces minus that of the ``defect`` traces."""
    means = defects.groupby("defect")[metric].mean()
    return float(means["clean"] - means[defect])


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml``. The gaps are
    logicality-guided minus correctness-only (nan where a condition was not run); p2-p5's drops
    compare defect-free and single-defect traces of the same problems; p6-p7 compare the models at
    half and at the whole fine-tuning budget; the headroom claims p8-p10 compare the baseline with the
    reference solutions (F) and with a perfect score (accuracy); c1 is Spearman's rho between F and
    correctness over the greedy held-out solutions of the two conditions; the premises read the
    teacher's candidates and the selected training traces."""
    nan = float("nan")
    values = {}
    halfway = results["halfway"]
    for seed in cfg.seeds:
        ev = results["evals"][results["evals"]["seed"] == seed]
        hw = halfway[halfway["seed"] == seed]
        de = results["defects"][results["defects"]["seed"] == seed]
        ceiling = float(results["ceiling"][results["ceiling"]["seed"] == seed]["F"].mean())
        sel = results["selected"][results["selected"]["seed"] == seed].set_index("condition")
        greedy = ev[(ev["decoding"] == "greedy") & ev["condition"].isin(["logicality", "correctness"])]
        rho = spearmanr(greedy["F"], greedy["correct"]).statistic if greedy["correct"].nunique() > 1 else nan
        sel_f = sel["F"] if {"logicality", "correctness"} <= set(sel.index) else None
        base_acc = _mean(ev, "greedy", "correctness", "correct")
        base_sampled_f = _mean(ev, "sampled", "correctness", "F")
        sampled_gap = _gap(ev, "sampled", "F")
        values[seed] = {
            "p1_both_arms_learn": np.min([_mean(ev, "greedy", c, "correct") for c in ("logicality", "correctness")]),
            "p2_skip_lowers_recall": _defect_drop(de, "skip", "Rec"),
            "p3_swap_lowers_order": _defect_drop(de, "swap", "O"),
            "p4_loop_lowers_progress": _defect_drop(de, "loop", "P"),
            "p5_irrelevant_lowers_precision": _defect_drop(de, "irrelevant", "Prec"),
            "p6_accuracy_converged": _change(ev, hw, "greedy", "correct") if len(hw) else nan,
            "p7_logicality_converged": _change(ev, hw, "sampled", "F") if len(hw) else nan,
            "p8_room_sampled_logicality": ceiling - base_sampled_f,
            "p9_room_greedy_logicality": ceiling - _mean(ev, "greedy", "correctness", "F"),
            "p10_room_accuracy": 1.0 - base_acc,
            "r1_correct_but_illogical": float(sel["correct_with_defect"].iloc[0]),
            "r2_selected_data_more_logical": float(sel_f["logicality"] - sel_f["correctness"]) if sel_f is not None else nan,
            "h1_logicality_gain": sampled_gap,
            "h2_accuracy_gain": _gap(ev, "greedy", "correct"),
            "c1_logicality_predicts_correctness": float(rho),
            "c2_greedy_logicality_gain": _gap(ev, "greedy", "F"),
            "c3_sampled_accuracy_gain": _gap(ev, "sampled", "correct"),
            "m1_order_gain": _gap(ev, "sampled", "O"),
            "m2_progress_gain": _gap(ev, "sampled", "P"),
            "m3_share_of_room_closed": sampled_gap / (ceiling - base_sampled_f),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
