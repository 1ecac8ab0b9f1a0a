"""PrefixRL's experiment: SFT (for SFT-then-RL), the RL loop of each method, the profiles, the runs
and the claim values."""

from __future__ import annotations

import copy
import functools
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, seed_everything
from replib.models.causal_lm import train_lm

from .baselines import iw_offpolicy_step
from .method import draw_prefix_len, rl_step
from .task import (
    PROMPT_LEN,
    _prefix_curve_from_probs,
    _response_mask,
    both_traces,
    correct_step_probs,
    correct_traces,
    noise_floor,
    pass_from_probs,
    rejection_sample,
    rollouts,
    sequences,
    split_problems,
    trace_cost_tokens,
    train_base,
)
from .theory import group_signal_probability

__all__ = [
    "METHODS",
    "TRACE_METHODS",
    "EXPERIMENT_PROFILES",
    "TRAIN_COST",
    "compute_units",
    "rl_lr_of",
    "moderate_cfg",
    "starved_cfg",
    "sft",
    "train_method",
    "run_seed",
    "run_experiment",
    "moderate_comparison",
    "claim_values",
]


# --------------------------------------------------------------------------------------------
# The methods and their RL loop
# --------------------------------------------------------------------------------------------


def sft(model, problems, L: int, *, epochs: int, lr: float, seed: int = 0, strategy: int = 0) -> np.ndarray:
    """Supervised fine-tuning on the correct traces (of ``strategy``) of ``problems`` (in place):
    ``epochs`` full-batch steps of :func:`train_lm` (AdamW, warmup 1, cosine decay), loss on response
    tokens. Returns the losses."""
    ids = sequences(problems, correct_traces(problems, L, strategy))
    mask = _response_mask(len(ids), L)
    return train_lm(model, lambda rng: (ids, mask), steps=epochs, lr=lr, warmup=1, seed=seed)


METHODS = ("prefixrl", "grpo", "sft_rl", "iw_offpolicy")
TRACE_METHODS = ("prefixrl", "sft_rl", "iw_offpolicy")  # the methods that consume the correct traces
_METHOD_INDEX = {m: i for i, m in enumerate(METHODS)}
TRAIN_COST = 3  # a token in a forward and backward pass costs 3 forward passes (FLOPs 6N vs 2N per token)


def compute_units(sampled_tokens, trained_tokens) -> float:
    """Compute in forward-token equivalents, FLOPs / 2N for a model of N parameters: a sampled token
    costs 1 (one forward pass), a token of an update (forward and backward) costs :data:`TRAIN_COST`.
    Rejection sampling, RL rollouts, RL updates and SFT are all charged this way, for every arm."""
    return float(sampled_tokens) + TRAIN_COST * float(trained_tokens)


def rl_lr_of(method: str, cfg) -> float:
    """The RL learning rate of ``method``: ``sft_rl_lr`` for SFT-then-RL, ``iw_lr`` for the
    importance-weighted baseline, ``rl_lr`` for PrefixRL and GRPO (tuned on the same grid, chapter.yml)."""
    return {"sft_rl": cfg.sft_rl_lr, "iw_offpolicy": cfg.iw_lr}.get(method, cfg.rl_lr)


def _eval_steps(cfg) -> set[int]:
    return set(range(0, cfg.rl_steps + 1, max(1, cfg.eval_every))) | {cfg.rl_steps}


def _both_probs(model, problems, L):
    return (correct_step_probs(model, problems, L, strategy=0), correct_step_probs(model, problems, L, strategy=1))


def _pass_split(model, problems, L) -> tuple[float, float]:
    """Mean no-prefix pass@1 (A or B trace) and the part of it that is the B trace."""
    pa, pb = _both_probs(model, problems, L)
    full = pass_from_probs(pa, pb, problems, L)
    _, _, same = both_traces(problems, L)
    return float(full.mean()), float(np.where(same, 0.0, pb.prod(axis=1)).mean())


def train_method(base, method: str, train, heldout, cfg, seed: int, progress=None, *, behaviour_probs=None,
                 regime: str = "starved", offset: float = 0.0) -> dict:
    """Run one method from a deep copy of ``base`` (the base is not changed).

    Every step draws ``batch_problems`` distinct training problems (the stream depends on the seed
    only, so all methods see the same problems), picks h with :func:`draw_prefix_len` and calls
    :func:`rl_step` (prefixes from the trace of strategy ``cfg.trace_strategy``), or, for the
    importance-weighted baseline, :func:`.baselines.iw_offpolicy_step` with the behaviour policy's
    probabilities of the traces (``behaviour_probs``, rows aligned with ``train``); learning rate
    :func:`rl_lr_of`. Evaluations (exact no-prefix pass@1, held-out and train, and the held-out part
    that is the B trace) at step 0, every ``eval_every`` steps and at the end, each with the compute
    spent so far (:func:`compute_units`: ``offset``, the rejection sampling charged by the caller,
    plus SFT and the RL rollouts and updates). Returns the model, the eval rows, the per-step rows, the
    SFT losses, the held-out step probabilities right after SFT and the mean step accuracy on the
    traces SFT imitated (``sft_fit``) (SFT-then-RL only, else None), the SFT compute and the seconds
    spent in SFT, RL and evaluation."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if method == "iw_offpolicy" and behaviour_probs is None:
        raise ValueError("iw_offpolicy needs the behaviour policy's probabilities of the traces")
    strategy = getattr(cfg, "trace_strategy", 0)
    model = copy.deepcopy(base)
    seconds = {"sft": 0.0, "rl": 0.0, "eval": 0.0}
    sft_losses = sft_probs = sft_fit = None
    compute = float(offset)
    sft_compute = 0.0
    if method == "sft_rl":
        start = time.perf_counter()
        sft_losses = sft(model, train, cfg.L, epochs=cfg.sft_epochs, lr=cfg.sft_lr, seed=seed, strategy=strategy)
        sft_compute = compute_units(0, cfg.sft_epochs * len(train) * (PROMPT_LEN + cfg.L))
        compute += sft_compute
        seconds["sft"] = time.perf_counter() - start
        start = time.perf_counter()
        sft_probs = correct_step_probs(model, heldout, cfg.L, strategy=strategy)
        sft_fit = float(correct_step_probs(model, train, cfg.L, strategy=strategy).mean())
        seconds["eval"] += time.perf_counter() - start
    problem_rng = np.random.default_rng([seed, 7])
    prefix_rng = np.random.default_rng([seed, 8, _METHOD_INDEX[method]])
    generator = torch.Generator().manual_seed(1000 * seed + _METHOD_INDEX[method])
    optimiser = torch.optim.Adam(model.parameters(), lr=rl_lr_of(method, cfg))
    sampler = functools.partial(rollouts, strategy=strategy)
    evals, steps, tokens = [], [], 0
    eval_at = _eval_steps(cfg)
    tag = {"seed": seed, "regime": regime, "method": method}

    def evaluate(step):
        start = time.perf_counter()
        held, held_b = _pass_split(model, heldout, cfg.L)
        evals.append({**tag, "step": step, "tokens": tokens, "compute": compute, "heldout_pass": held,
                      "heldout_pass_b": held_b, "train_pass": _pass_split(model, train, cfg.L)[0]})
        seconds["eval"] += time.perf_counter() - start

    evaluate(0)
    for step in (progress(range(1, cfg.rl_steps + 1)) if progress else range(1, cfg.rl_steps + 1)):
        idx = problem_rng.choice(len(train), size=min(cfg.batch_problems, len(train)), replace=False)
        h = draw_prefix_len(method, cfg.L, prefix_rng)
        start = time.perf_counter()
        if method == "iw_offpolicy":
            stats = iw_offpolicy_step(model, optimiser, train[idx], behaviour_probs[idx], cfg, generator)
        else:
            stats = rl_step(model, optimiser, train[idx], h, cfg, generator, rollouts=sampler)
        seconds["rl"] += time.perf_counter() - start
        tokens += stats["sampled_tokens"]
        compute += compute_units(stats["sampled_tokens"], stats["trained_tokens"])
        steps.append({**tag, "step": step, "prefix_len": h, "tokens": tokens, "compute": compute, **stats})
        if step in eval_at:
            evaluate(step)
    return {"model": model, "evals": evals, "steps": steps, "sft_losses": sft_losses,
            "sft_heldout_probs": sft_probs, "sft_fit": sft_fit, "sft_compute": sft_compute, "seconds": seconds}


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------

_COMMON = dict(eps=0.4, q_other=0.1, eps_other=0.25, n_layer=2, n_embd=32, n_head=4, base_batch=128, n_train=256,
               batch_problems=16, group_size=8, rl_lr=1e-3, sft_rl_lr=1e-3, iw_lr=1e-3, sft_epochs=100,
               sft_lr=1e-2, rs_samples=256, iw_clip=1.0, methods=["prefixrl"],
               moderate_methods=["prefixrl", "sft_rl", "iw_offpolicy"])
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], L=8, moderate_L=5, base_steps=60, base_lr=3e-3, rl_steps=5, moderate_rl_steps=5,
                  prefixrl_budget_steps=6,
                  eval_every=5, workers=1, **_COMMON),
    # book: 600 base steps at lr 5e-3, two-strategy answers of 10 tokens; starved runs of 50 steps, two-strategy runs of
    # moderate_rl_steps (chapter.yml, revisions of 2026-12-02 and 2026-12-03, issue 43)
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], L=20, moderate_L=10, base_steps=600, base_lr=5e-3,
                 rl_steps=50, moderate_rl_steps=100, prefixrl_budget_steps=320, eval_every=10, workers=2, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], L=20, moderate_L=10, base_steps=1200, base_lr=3e-3, rl_steps=300,
                  moderate_rl_steps=300, prefixrl_budget_steps=900, eval_every=10, workers=2, **_COMMON),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
# (chains need 3 to 27 steps: the model has 32 positions; iw_offpolicy needs traces, so only the moderate regime)
EXPERIMENT_BOUNDS = dict(L=(3, 27), moderate_L=(3, 27), base_steps=(1, None), base_lr=(1e-8, None),
                         rl_steps=(1, None), moderate_rl_steps=(1, None), prefixrl_budget_steps=(1, None), eval_every=(1, None), eps=(0.0, 1.0),
                         q_other=(0.0, 1.0), eps_other=(0.0, 0.99), n_layer=(1, None),
                         n_embd=(4, None), n_head=(1, None), base_batch=(1, None), n_train=(1, None),
                         batch_problems=(1, None), group_size=(2, None), rl_lr=(1e-8, None),
                         sft_rl_lr=(1e-8, None), iw_lr=(1e-8, None),
                         sft_epochs=(0, None), sft_lr=(1e-8, None), rs_samples=(1, None), iw_clip=(1e-3, None),
                         workers=(1, 16),
                         methods=set(METHODS) - {"iw_offpolicy"}, moderate_methods=set(METHODS))


def moderate_cfg(cfg):
    """The settings of the two-strategy (moderate) regime: ``cfg`` with L = ``moderate_L``, RL runs of
    ``moderate_rl_steps`` (PrefixRL continues to ``prefixrl_budget_steps``, so that m1 can read it at
    SFT-then-RL's total compute) and traces in strategy B (``trace_strategy`` = 1); same base model."""
    return SimpleNamespace(**{**vars(cfg), "L": cfg.moderate_L, "rl_steps": cfg.moderate_rl_steps,
                              "prefixrl_steps": getattr(cfg, "prefixrl_budget_steps", None),
                              "trace_strategy": 1})


def starved_cfg(cfg):
    """The settings of the starved regime: ``cfg`` with traces in strategy A (``trace_strategy`` = 0)."""
    return SimpleNamespace(**{**vars(cfg), "trace_strategy": 0})


def _profile_rows(seed, regime, model_name, probs):
    tag = {"seed": seed, "regime": regime, "model": model_name}
    rows = [{**tag, "position": t + 1, "step_accuracy": float(a)} for t, a in enumerate(probs.mean(axis=0))]
    curve = [{**tag, "prefix_len": h, "pass": float(p)} for h, p in enumerate(_prefix_curve_from_probs(probs))]
    return rows, curve


def _run_regime(base, regime, methods, train, heldout, cfg, seed, progress, behaviour_probs=None,
                offset: float = 0.0) -> dict:
    """Every method of one regime from the same base model: rows of evals, steps, step-accuracy
    profiles and prefix curves along the regime's trace strategy (after SFT and after RL), SFT
    losses, seconds, and the SFT model's pass@1 before RL. ``offset`` (the rejection-sampling
    compute) is charged to every method that uses the traces."""
    out = {"evals": [], "steps": [], "profiles": [], "prefix_curves": [], "losses": [], "seconds": {}, "sft": {}}
    strategy = getattr(cfg, "trace_strategy", 0)
    for method in methods:
        run_cfg = cfg
        if method == "prefixrl" and getattr(cfg, "prefixrl_steps", None):
            run_cfg = SimpleNamespace(**{**vars(cfg), "rl_steps": max(cfg.rl_steps, cfg.prefixrl_steps)})
        run = train_method(base, method, train, heldout, run_cfg, seed, progress, behaviour_probs=behaviour_probs,
                           regime=regime, offset=offset if method in TRACE_METHODS else 0.0)
        out["evals"] += run["evals"]
        out["steps"] += run["steps"]
        out["seconds"][f"{regime}_{method}"] = run["seconds"]["rl"]
        out["seconds"]["sft"] = out["seconds"].get("sft", 0.0) + run["seconds"]["sft"]
        out["seconds"]["eval"] = out["seconds"].get("eval", 0.0) + run["seconds"]["eval"]
        if run["sft_losses"] is not None:
            out["losses"] += [{"seed": seed, "phase": f"sft ({regime})", "step": i + 1, "loss": float(v)}
                              for i, v in enumerate(run["sft_losses"])]
            out["sft"] = {"final_sft_loss": float(run["sft_losses"][-1]), "sft_fit": run["sft_fit"],
                          "sft_compute": run["sft_compute"],
                          "sft_heldout_pass": run["evals"][0]["heldout_pass"],
                          "sft_train_pass": run["evals"][0]["train_pass"]}
            rows, curve = _profile_rows(seed, regime, "sft", run["sft_heldout_probs"])
            out["profiles"] += rows
            out["prefix_curves"] += curve
        start = time.perf_counter()
        rows, curve = _profile_rows(seed, regime, method,
                                    correct_step_probs(run["model"], heldout, cfg.L, strategy=strategy))
        out["seconds"]["eval"] += time.perf_counter() - start
        out["profiles"] += rows
        out["prefix_curves"] += curve
    return out


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: split, base model, then the two regimes; plain data only (no models).

    The base model is pretrained on noisy chains of ``L`` steps, a share ``q_other`` of them in
    strategy B and the rest in strategy A, so it mostly uses A. *Starved* (chains of ``L`` steps,
    base pass@1 about 0.6^L): the methods ``cfg.methods`` on all training problems with the
    generator's strategy-A traces (the base model's own strategy). *Moderate, two strategies*
    (chains of ``moderate_L`` steps, same base model): the traces are strategy-B traces of another
    model family (the B generator with per-step error ``eps_other``), found by rejection sampling it
    (:func:`.task.rejection_sample`, at most ``rs_samples`` per problem, the sampled tokens charged
    to every method that uses the traces); the methods ``cfg.moderate_methods`` train on the problems
    with a trace for ``moderate_rl_steps`` steps.

    Keys: ``base`` (dict: per regime the exact no-prefix pass@1 held-out / train; starved: the
    analytic trace cost in tokens, the final base loss (mean of the last 10 steps), the noise floor,
    the share of GRPO groups with a signal under the base model (exact, ``grpo_signal_share``);
    moderate: the base pass@1 (and its B part), the share of training problems with a trace and the
    rejection-sampling tokens ``rs_tokens``; with SFT-then-RL, the final SFT loss, its step accuracy
    on the imitated traces ``sft_fit``, its compute and the pass@1 right after SFT), ``evals``
    and ``steps`` (lists of row dicts, see :func:`train_method`), ``profiles`` (step accuracy per
    position on held-out problems along the regime's trace strategy; model = "base", "sft" or a
    method after RL), ``prefix_curves`` (held-out pass@1 from a correct prefix of length h, same
    models), ``losses`` (base pretraining and SFT losses per step) and ``seconds``. Every row
    carries its ``regime``."""
    with compute_threads(threads):
        seed_everything(seed)
        train, heldout = split_problems(cfg.n_train, seed)
        start = time.perf_counter()
        base, base_losses = train_base(cfg, seed, progress)
        seconds = {"base": time.perf_counter() - start, "eval": 0.0, "sft": 0.0}
        start = time.perf_counter()
        held_a, held_b = _both_probs(base, heldout, cfg.L)
        train_a, train_b = _both_probs(base, train, cfg.L)
        train_pass = pass_from_probs(train_a, train_b, train, cfg.L)
        seconds["eval"] += time.perf_counter() - start
        base_stats = {
            "seed": seed,
            "heldout_pass": float(pass_from_probs(held_a, held_b, heldout, cfg.L).mean()),
            "train_pass": float(train_pass.mean()),
            "trace_cost_tokens": trace_cost_tokens(train_a.prod(axis=1), cfg.L),
            "final_base_loss": float(np.mean(base_losses[-10:])),
            "noise_floor": noise_floor(cfg.eps, cfg.L, cfg.q_other),
            "grpo_signal_share": float(group_signal_probability(train_pass, cfg.group_size).mean()),
        }
        profiles, curves = _profile_rows(seed, "starved", "base", held_a)
        losses = [{"seed": seed, "phase": "base", "step": i + 1, "loss": float(v)} for i, v in enumerate(base_losses)]
        starved = _run_regime(base, "starved", cfg.methods, train, heldout, starved_cfg(cfg), seed, progress)

        mcfg = moderate_cfg(cfg)
        start = time.perf_counter()
        m_held_a, m_held_b = _both_probs(base, heldout, mcfg.L)
        m_train_a, m_train_b = _both_probs(base, train, mcfg.L)
        p_other = np.full(len(train), (1.0 - cfg.eps_other) ** (mcfg.L - 1))  # its mark is always B
        found, draws = rejection_sample(p_other, cfg.rs_samples, np.random.default_rng([seed, 9]))
        seconds["rejection_sampling"] = time.perf_counter() - start
        _, _, same = both_traces(heldout, mcfg.L)
        rs_tokens = float(draws.sum() * mcfg.L)
        base_stats.update({
            "moderate_heldout_pass": float(pass_from_probs(m_held_a, m_held_b, heldout, mcfg.L).mean()),
            "moderate_heldout_pass_b": float(np.where(same, 0.0, m_held_b.prod(axis=1)).mean()),
            "moderate_train_pass": float(pass_from_probs(m_train_a, m_train_b, train, mcfg.L).mean()),
            "base_b_first_step": float(m_held_b[:, 0][~same].mean()),
            "traces_found": float(found.mean()),
            "rs_tokens": rs_tokens,
            "rs_compute": compute_units(rs_tokens, 0),
        })
        rows, curve = _profile_rows(seed, "moderate", "base", m_held_b)
        methods = cfg.moderate_methods if found.any() else []  # no trace found: nothing to train on
        behaviour = np.full((int(found.sum()), mcfg.L), 1.0 - cfg.eps_other)
        behaviour[:, 0] = 1.0  # the other family always writes the mark of B
        moderate = _run_regime(base, "moderate", methods, train[found], heldout, mcfg, seed, progress,
                               behaviour_probs=behaviour, offset=compute_units(rs_tokens, 0))
        base_stats.update(moderate["sft"] or starved["sft"])
        for part in (starved, moderate):
            for key, value in part["seconds"].items():
                seconds[key] = seconds.get(key, 0.0) + value
    return {"seed": seed, "base": base_stats, "evals": starved["evals"] + moderate["evals"],
            "steps": starved["steps"] + moderate["steps"],
            "profiles": profiles + starved["profiles"] + rows + moderate["profiles"],
            "prefix_curves": curves + starved["prefix_curves"] + curve + moderate["prefix_curves"],
            "losses": losses + starved["losses"] + moderate["losses"], "seconds": {"seed": seed, **seconds}}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed, on ``cfg.workers`` processes when it is above 1 (each seed in
    one process, its numbers the same as in one process; ``progress`` only without workers); the
    rows of all seeds as data frames ``base``, ``evals``, ``steps``, ``profiles``,
    ``prefix_curves``, ``losses``, ``seconds`` (and the raw ``runs``)."""
    workers = min(int(getattr(cfg, "workers", 1)), len(cfg.seeds))
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = list(pool.map(run_seed, [cfg] * len(cfg.seeds), cfg.seeds, [None] * len(cfg.seeds),
                                 [threads] * len(cfg.seeds)))
    else:
        runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    frames = {key: pd.DataFrame([r for run in runs for r in run[key]])
              for key in ("evals", "steps", "profiles", "prefix_curves", "losses")}
    frames["base"] = pd.DataFrame([run["base"] for run in runs])
    frames["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return {"runs": runs, **frames}


def _compute_to_reach(evals: pd.DataFrame, level: float) -> float:
    """Compute (column ``compute``: rejection sampling, SFT, RL rollouts and updates) at the first
    evaluation whose train pass@1 reaches ``level``; inf if none does."""
    hit = evals.loc[evals["train_pass"] >= level, "compute"]
    return float(hit.min()) if len(hit) else float("inf")


def _pass_at_compute(evals: pd.DataFrame, budget: float, fallback: float) -> float:
    """Held-out pass@1 at the last evaluation whose compute is within ``budget``; ``fallback`` (the
    base model's) where the arm had no model yet within it (SFT not finished)."""
    within = evals[evals["compute"] <= budget + 1e-9]
    return float(within.iloc[-1]["heldout_pass"]) if len(within) else float(fallback)


def moderate_comparison(ev: dict, base_pass: float, steps: int | None = None) -> dict:
    """The two-strategy regime's comparison of PrefixRL with SFT-then-RL from their sorted eval rows
    ``ev[method]``: the common compute budget (the lower of the two runs' totals), each arm's
    held-out pass@1 there, m1 (their ratio) and its ceiling 1 / SFT-then-RL's (an oracle has pass@1
    1); the level (half the lower of the two final train pass@1), the compute each needs to reach it,
    m2 (their ratio) and its ceiling (SFT-then-RL's compute over PrefixRL's at its first evaluation
    after step 0, the earliest it could reach the level). The budget uses PrefixRL's whole run (it
    runs on past the common step count ``steps`` so that it can reach SFT-then-RL's total); the
    level, the compute to reach it and the ceiling of m2 use both runs up to ``steps`` (all rows
    when None)."""
    full, sft = ev["prefixrl"], ev["sft_rl"]
    budget = min(float(full["compute"].max()), float(sft["compute"].max()))
    at = {m: _pass_at_compute(ev[m], budget, base_pass) for m in ("prefixrl", "sft_rl")}
    pre = full if steps is None else full[full["step"] <= steps]
    ev = {**ev, "prefixrl": pre}
    level = 0.5 * min(float(pre.iloc[-1]["train_pass"]), float(sft.iloc[-1]["train_pass"]))
    reach = {m: _compute_to_reach(ev[m], level) for m in ("prefixrl", "sft_rl")}
    earliest = float(pre[pre["step"] > 0]["compute"].min())
    return {"budget": budget, "prefixrl_pass": at["prefixrl"], "sft_rl_pass": at["sft_rl"],
            "m1": at["prefixrl"] / at["sft_rl"] if at["sft_rl"] > 0 else float("nan"),
            "m1_ceiling": 1.0 / at["sft_rl"] if at["sft_rl"] > 0 else float("inf"),
            "level": level, "prefixrl_reach": reach["prefixrl"], "sft_rl_reach": reach["sft_rl"],
            "m2": reach["sft_rl"] / reach["prefixrl"], "m2_ceiling": reach["sft_rl"] / earliest}


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml`` (nan where a needed method
    was not run; see the package docstring for the conventions). Starved regime: p1 (base loss minus
    the noise floor), c1a (premise), c2a, c3, m3, and the premise c1b, the share of groups with a
    signal that GRPO's rollouts have under the base model (exact,
    :func:`.theory.group_signal_probability` of each training problem's pass@1, averaged).
    Two-strategy regime (:func:`moderate_comparison`): p2 (mean step accuracy after SFT on the
    strategy-B traces it imitated), p3 (base held-out pass@1), p4 (PrefixRL's mean reward on its
    prefixed problems over the last 10 steps), the headroom preconditions h1 and h2 (the ceilings of
    m1 and m2), c2b (PrefixRL minus the importance-weighted baseline, final held-out pass@1), m1
    (held-out pass@1 at equal compute, PrefixRL / SFT-then-RL), m2 (compute to reach the level,
    SFT-then-RL / PrefixRL; rejection sampling and SFT charged) and m4 (the share of PrefixRL's final
    held-out pass@1 that is the B trace)."""
    nan = float("nan")
    base = results["base"].set_index("seed")
    values = {}
    for seed in cfg.seeds:
        of_seed = {key: results[key][results[key]["seed"] == seed] for key in ("evals", "steps", "profiles")}

        def regime(key, name):
            frame = of_seed[key]
            return frame[frame["regime"] == name] if len(frame) else frame

        ev = {name: {m: g.sort_values("step") for m, g in regime("evals", name).groupby("method")}
              for name in ("starved", "moderate")}
        st = {name: dict(list(regime("steps", name).groupby("method"))) for name in ("starved", "moderate")}
        final = {name: {m: g.iloc[-1] for m, g in by_method.items()} for name, by_method in ev.items()}

        def held(name, method, key="heldout_pass"):
            return float(final[name][method][key]) if method in final[name] else nan

        def early_accuracy(name, model, L):
            acc = regime("profiles", name)
            acc = acc[(acc["model"] == model) & (acc["position"] <= L // 2)].sort_values("position")
            return acc["step_accuracy"].to_numpy()

        pre_acc, base_acc = early_accuracy("starved", "prefixrl", cfg.L), early_accuracy("starved", "base", cfg.L)
        cmp = dict.fromkeys(("m1", "m1_ceiling", "m2", "m2_ceiling"), nan)
        if {"prefixrl", "sft_rl"} <= set(ev["moderate"]):
            cmp = moderate_comparison(ev["moderate"], float(base.loc[seed, "moderate_heldout_pass"]),
                                      getattr(cfg, "moderate_rl_steps", None))
        pre_steps = st["moderate"].get("prefixrl")
        if pre_steps is not None and getattr(cfg, "moderate_rl_steps", None):
            pre_steps = pre_steps[pre_steps["step"] <= cfg.moderate_rl_steps]
        pre_ev = ev["moderate"].get("prefixrl")
        if pre_ev is not None and getattr(cfg, "moderate_rl_steps", None):
            pre_ev = pre_ev[pre_ev["step"] <= cfg.moderate_rl_steps]
            final["moderate"]["prefixrl"] = pre_ev.iloc[-1]  # c2b and m4 read PrefixRL at the common step count
        pre_held = held("moderate", "prefixrl")
        values[seed] = {
            "p1_base_learns_the_toy": float(base.loc[seed, "final_base_loss"] - base.loc[seed, "noise_floor"]),
            "p2_sft_converged_other_strategy": float(base.loc[seed, "sft_fit"]) if "sft_fit" in base else nan,
            "p3_moderate_not_hopeless": float(base.loc[seed, "moderate_heldout_pass"]),
            "p4_prefixrl_learns_prefixed": float(pre_steps.sort_values("step")["mean_reward"].iloc[-10:].mean())
            if pre_steps is not None else nan,
            "h1_headroom_m1": cmp["m1_ceiling"],
            "h2_headroom_m2": cmp["m2_ceiling"],
            "c1a_signal_prefixrl": float(st["starved"]["prefixrl"]["share_nonzero"].mean())
            if "prefixrl" in st["starved"] else nan,
            "c1b_signal_grpo": float(base.loc[seed, "grpo_signal_share"]),
            "c2a_progress": held("starved", "prefixrl"),
            "c2b_vs_offpolicy_iw_other_strategy": pre_held - held("moderate", "iw_offpolicy"),
            "c3_back_generalization": float(np.mean(pre_acc - base_acc)) if len(pre_acc) else nan,
            "m1_equal_compute_ratio_vs_sft_rl": cmp["m1"],
            "m2_speed_vs_sft_rl_other_strategy": cmp["m2"],
            "m3_base_pass1": float(base.loc[seed, "heldout_pass"]),
            "m4_prefixrl_b_share": held("moderate", "prefixrl", "heldout_pass_b") / pre_held
            if pre_held > 0 else nan,
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
