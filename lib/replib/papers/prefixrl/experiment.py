"""PrefixRL's experiment: SFT (for SFT-then-RL), the RL loop of each method, the profiles, the runs
and the claim values."""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, seed_everything
from replib.models.causal_lm import train_lm

from .method import draw_prefix_len, rl_step
from .task import (
    _prefix_curve_from_probs,
    _response_mask,
    correct_step_probs,
    correct_traces,
    noise_floor,
    pass_at_1,
    rollouts,
    sequences,
    split_problems,
    trace_cost_tokens,
    train_base,
)

__all__ = [
    "METHODS",
    "EXPERIMENT_PROFILES",
    "sft",
    "train_method",
    "run_seed",
    "run_experiment",
    "claim_values",
]


# --------------------------------------------------------------------------------------------
# The methods and their RL loop
# --------------------------------------------------------------------------------------------


def sft(model, problems, L: int, *, epochs: int, lr: float, seed: int = 0) -> np.ndarray:
    """Supervised fine-tuning on the correct traces of ``problems`` (in place): ``epochs``
    full-batch steps of :func:`train_lm` (AdamW, warmup 1, cosine decay), loss on response tokens.
    Returns the losses."""
    ids = sequences(problems, correct_traces(problems, L))
    mask = _response_mask(len(ids), L)
    return train_lm(model, lambda rng: (ids, mask), steps=epochs, lr=lr, warmup=1, seed=seed)


METHODS = ("prefixrl", "grpo", "sft_rl")
_METHOD_INDEX = {m: i for i, m in enumerate(METHODS)}


def _eval_steps(cfg) -> set[int]:
    return set(range(0, cfg.rl_steps + 1, max(1, cfg.eval_every))) | {cfg.rl_steps}


def train_method(base, method: str, train, heldout, cfg, seed: int, progress=None) -> dict:
    """Run one method from a deep copy of ``base`` (the base is not changed).

    Every step draws ``batch_problems`` distinct training problems (the stream depends on the seed
    only, so all methods see the same problems), picks h with :func:`draw_prefix_len` and calls
    :func:`rl_step`. Evaluations (exact no-prefix pass@1, held-out and train) at step 0, every
    ``eval_every`` steps and at the end. Returns the model, the eval rows, the per-step rows, the
    SFT losses and the held-out step probabilities right after SFT (SFT-then-RL only, else None)
    and the seconds spent in SFT, RL and evaluation."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    model = copy.deepcopy(base)
    seconds = {"sft": 0.0, "rl": 0.0, "eval": 0.0}
    sft_losses = sft_probs = None
    if method == "sft_rl":
        start = time.perf_counter()
        sft_losses = sft(model, train, cfg.L, epochs=cfg.sft_epochs, lr=cfg.sft_lr, seed=seed)
        seconds["sft"] = time.perf_counter() - start
        start = time.perf_counter()
        sft_probs = correct_step_probs(model, heldout, cfg.L)
        seconds["eval"] += time.perf_counter() - start
    problem_rng = np.random.default_rng([seed, 7])
    prefix_rng = np.random.default_rng([seed, 8, _METHOD_INDEX[method]])
    generator = torch.Generator().manual_seed(1000 * seed + _METHOD_INDEX[method])
    optimiser = torch.optim.Adam(model.parameters(), lr=cfg.rl_lr)
    evals, steps, tokens = [], [], 0
    eval_at = _eval_steps(cfg)

    def evaluate(step):
        start = time.perf_counter()
        evals.append({"seed": seed, "method": method, "step": step, "tokens": tokens,
                      "heldout_pass": float(pass_at_1(model, heldout, cfg.L).mean()),
                      "train_pass": float(pass_at_1(model, train, cfg.L).mean())})
        seconds["eval"] += time.perf_counter() - start

    evaluate(0)
    for step in (progress(range(1, cfg.rl_steps + 1)) if progress else range(1, cfg.rl_steps + 1)):
        batch = train[problem_rng.choice(len(train), size=min(cfg.batch_problems, len(train)), replace=False)]
        h = draw_prefix_len(method, cfg.L, prefix_rng)
        start = time.perf_counter()
        stats = rl_step(model, optimiser, batch, h, cfg, generator, rollouts=rollouts)
        seconds["rl"] += time.perf_counter() - start
        tokens += stats["sampled_tokens"]
        steps.append({"seed": seed, "method": method, "step": step, "prefix_len": h, "tokens": tokens, **stats})
        if step in eval_at:
            evaluate(step)
    return {"model": model, "evals": evals, "steps": steps, "sft_losses": sft_losses,
            "sft_heldout_probs": sft_probs, "seconds": seconds}


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------

_COMMON = dict(eps=0.4, n_layer=2, n_embd=32, n_head=4, base_batch=128, base_lr=3e-3, n_train=256,
               batch_problems=16, group_size=8, rl_lr=1e-3, sft_epochs=100, sft_lr=3e-3,
               methods=["prefixrl", "grpo", "sft_rl"])
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], L=8, base_steps=60, rl_steps=5, eval_every=5, **_COMMON),
    "book": dict(seeds=[0, 1, 2], L=20, base_steps=600, rl_steps=100, eval_every=20, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], L=20, base_steps=600, rl_steps=300, eval_every=10, **_COMMON),
}


def _profile_rows(seed, model_name, probs):
    rows = [{"seed": seed, "model": model_name, "position": t + 1, "step_accuracy": float(a)}
            for t, a in enumerate(probs.mean(axis=0))]
    curve = [{"seed": seed, "model": model_name, "prefix_len": h, "pass": float(p)}
             for h, p in enumerate(_prefix_curve_from_probs(probs))]
    return rows, curve


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: split, base model, every method of ``cfg.methods``; plain data only (no models).

    Keys: ``base`` (dict: exact no-prefix pass@1 held-out / train, trace cost in tokens, final base
    loss (mean of the last 10 steps), the noise floor and, with SFT-then-RL, the final SFT loss and
    the pass@1 right after SFT), ``evals`` and ``steps`` (lists of row
    dicts, see :func:`train_method`), ``profiles`` (step accuracy per position on held-out problems;
    model = "base", "sft" (after SFT, before RL) or a method after RL), ``prefix_curves`` (held-out
    pass@1 from a correct prefix of length h, same models), ``losses`` (base pretraining and SFT
    losses per step) and ``seconds`` (per phase: base, sft, each method's RL, eval)."""
    with compute_threads(threads):
        seed_everything(seed)
        train, heldout = split_problems(cfg.n_train, seed)
        start = time.perf_counter()
        base, base_losses = train_base(cfg, seed, progress)
        seconds = {"base": time.perf_counter() - start, "sft": 0.0, "eval": 0.0}
        start = time.perf_counter()
        held_probs = correct_step_probs(base, heldout, cfg.L)
        train_probs = correct_step_probs(base, train, cfg.L)
        seconds["eval"] += time.perf_counter() - start
        base_stats = {
            "seed": seed,
            "heldout_pass": float(held_probs.prod(axis=1).mean()),
            "train_pass": float(train_probs.prod(axis=1).mean()),
            "trace_cost_tokens": trace_cost_tokens(train_probs.prod(axis=1), cfg.L),
            "final_base_loss": float(np.mean(base_losses[-10:])),
            "noise_floor": noise_floor(cfg.eps),
        }
        profiles, curves = _profile_rows(seed, "base", held_probs)
        losses = [{"seed": seed, "phase": "base", "step": i + 1, "loss": float(v)} for i, v in enumerate(base_losses)]
        evals, steps = [], []
        for method in cfg.methods:
            out = train_method(base, method, train, heldout, cfg, seed, progress)
            evals += out["evals"]
            steps += out["steps"]
            seconds[method] = out["seconds"]["rl"]
            seconds["sft"] += out["seconds"]["sft"]
            seconds["eval"] += out["seconds"]["eval"]
            if out["sft_losses"] is not None:
                losses += [{"seed": seed, "phase": "sft", "step": i + 1, "loss": float(v)}
                           for i, v in enumerate(out["sft_losses"])]
                base_stats["final_sft_loss"] = float(out["sft_losses"][-1])
                base_stats["sft_heldout_pass"] = out["evals"][0]["heldout_pass"]
                base_stats["sft_train_pass"] = out["evals"][0]["train_pass"]
                rows, curve = _profile_rows(seed, "sft", out["sft_heldout_probs"])
                profiles += rows
                curves += curve
            start = time.perf_counter()
            probs = correct_step_probs(out["model"], heldout, cfg.L)
            seconds["eval"] += time.perf_counter() - start
            rows, curve = _profile_rows(seed, method, probs)
            profiles += rows
            curves += curve
    return {"seed": seed, "base": base_stats, "evals": evals, "steps": steps, "profiles": profiles,
            "prefix_curves": curves, "losses": losses, "seconds": {"seed": seed, **seconds}}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed; the rows of all seeds as data frames ``base``, ``evals``,
    ``steps``, ``profiles``, ``prefix_curves``, ``losses``, ``seconds`` (and the raw ``runs``)."""
    runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    frames = {key: pd.DataFrame([r for run in runs for r in run[key]])
              for key in ("evals", "steps", "profiles", "prefix_curves", "losses")}
    frames["base"] = pd.DataFrame([run["base"] for run in runs])
    frames["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return {"runs": runs, **frames}


def _first_step_reaching(evals: pd.DataFrame, level: float) -> float:
    hit = evals.loc[evals["train_pass"] >= level, "step"]
    return float(hit.min()) if len(hit) else float("nan")


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml`` (nan where a needed method
    was not run; see the package docstring for the m1/m2 conventions). The preconditions: p1, the
    base model's final training loss minus the noise floor of its data (nats per step); p2, the
    mean step accuracy after SFT at positions 1 to L/2 on held-out problems."""
    nan = float("nan")
    evals, steps, profiles = results["evals"], results["steps"], results["profiles"]
    base = results["base"].set_index("seed")
    values = {}
    for seed in cfg.seeds:
        ev = {m: g.sort_values("step") for m, g in evals[evals["seed"] == seed].groupby("method")}
        st = dict(list(steps[steps["seed"] == seed].groupby("method"))) if len(steps) else {}
        final = {m: g.iloc[-1] for m, g in ev.items()}

        def share(method):
            return float(st[method]["share_nonzero"].mean()) if method in st else nan

        def held(method):
            return float(final[method]["heldout_pass"]) if method in final else nan

        acc = profiles[(profiles["seed"] == seed) & (profiles["position"] <= cfg.L // 2)]
        base_acc = acc[acc["model"] == "base"].sort_values("position")["step_accuracy"].to_numpy()
        pre_acc = acc[acc["model"] == "prefixrl"].sort_values("position")["step_accuracy"].to_numpy()
        c3 = float(np.mean(pre_acc - base_acc)) if len(pre_acc) else nan
        sft_acc = acc[acc["model"] == "sft"]["step_accuracy"]

        m1 = nan
        if "prefixrl" in final and "sft_rl" in final and held("sft_rl") > 0:
            m1 = held("prefixrl") / held("sft_rl")
        m2 = nan
        if "prefixrl" in final and "sft_rl" in final:
            level = 0.5 * min(final["prefixrl"]["train_pass"], final["sft_rl"]["train_pass"])
            s_pre, s_sft = _first_step_reaching(ev["prefixrl"], level), _first_step_reaching(ev["sft_rl"], level)
            if s_pre > 0 and s_sft > 0:  # a method already at the level at step 0 has no speed to compare
                m2 = s_sft / s_pre
        values[seed] = {
            "p1_base_learns_the_toy": float(base.loc[seed, "final_base_loss"] - base.loc[seed, "noise_floor"]),
            "p2_sft_converged": float(sft_acc.mean()) if len(sft_acc) else nan,
            "c1a_signal_prefixrl": share("prefixrl"),
            "c1b_signal_grpo": share("grpo"),
            "c2a_progress": held("prefixrl"),
            "c2b_progress_vs_grpo": held("prefixrl") - held("grpo"),
            "c3_back_generalization": c3,
            "m1_final_ratio_vs_sft_rl": m1,
            "m2_speed_vs_sft_rl": m2,
            "m3_base_pass1": float(base.loc[seed, "heldout_pass"]),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
