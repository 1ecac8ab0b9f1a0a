"""PrefixRL's experiment: SFT (for SFT-then-RL), the RL loop of each method, the profiles, the runs
and the claim values."""

from __future__ import annotations

import copy
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, seed_everything
from replib.models.causal_lm import train_lm

from .baselines import iw_offpolicy_step
from .method import draw_prefix_len, rl_step
from .task import (
    _prefix_curve_from_probs,
    _response_mask,
    correct_step_probs,
    correct_traces,
    noise_floor,
    pass_at_1,
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
    "moderate_cfg",
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


METHODS = ("prefixrl", "grpo", "sft_rl", "iw_offpolicy")
TRACE_METHODS = ("prefixrl", "sft_rl", "iw_offpolicy")  # the methods that consume the correct traces
_METHOD_INDEX = {m: i for i, m in enumerate(METHODS)}


def _eval_steps(cfg) -> set[int]:
    return set(range(0, cfg.rl_steps + 1, max(1, cfg.eval_every))) | {cfg.rl_steps}


def train_method(base, method: str, train, heldout, cfg, seed: int, progress=None, *, behaviour_probs=None,
                 regime: str = "starved") -> dict:
    """Run one method from a deep copy of ``base`` (the base is not changed).

    Every step draws ``batch_problems`` distinct training problems (the stream depends on the seed
    only, so all methods see the same problems), picks h with :func:`draw_prefix_len` and calls
    :func:`rl_step`, or, for the importance-weighted baseline, :func:`.baselines.iw_offpolicy_step`
    with the behaviour policy's probabilities of the traces (``behaviour_probs``, rows aligned with
    ``train``). Evaluations (exact no-prefix pass@1, held-out and train) at step 0, every
    ``eval_every`` steps and at the end. Returns the model, the eval rows, the per-step rows, the
    SFT losses, the held-out step probabilities right after SFT and the mean step accuracy on
    the traces SFT imitated (``sft_fit``) (SFT-then-RL only, else None) and the seconds spent in SFT, RL and evaluation."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if method == "iw_offpolicy" and behaviour_probs is None:
        raise ValueError("iw_offpolicy needs the behaviour policy's probabilities of the traces")
    model = copy.deepcopy(base)
    seconds = {"sft": 0.0, "rl": 0.0, "eval": 0.0}
    sft_losses = sft_probs = sft_fit = None
    if method == "sft_rl":
        start = time.perf_counter()
        sft_losses = sft(model, train, cfg.L, epochs=cfg.sft_epochs, lr=cfg.sft_lr, seed=seed)
        seconds["sft"] = time.perf_counter() - start
        start = time.perf_counter()
        sft_probs = correct_step_probs(model, heldout, cfg.L)
        sft_fit = float(correct_step_probs(model, train, cfg.L).mean())
        seconds["eval"] += time.perf_counter() - start
    problem_rng = np.random.default_rng([seed, 7])
    prefix_rng = np.random.default_rng([seed, 8, _METHOD_INDEX[method]])
    generator = torch.Generator().manual_seed(1000 * seed + _METHOD_INDEX[method])
    optimiser = torch.optim.Adam(model.parameters(), lr=cfg.rl_lr)
    evals, steps, tokens = [], [], 0
    eval_at = _eval_steps(cfg)
    tag = {"seed": seed, "regime": regime, "method": method}

    def evaluate(step):
        start = time.perf_counter()
        evals.append({**tag, "step": step, "tokens": tokens,
                      "heldout_pass": float(pass_at_1(model, heldout, cfg.L).mean()),
                      "train_pass": float(pass_at_1(model, train, cfg.L).mean())})
        seconds["eval"] += time.perf_counter() - start

    evaluate(0)
    for step in (progress(range(1, cfg.rl_steps + 1)) if progress else range(1, cfg.rl_steps + 1)):
        idx = problem_rng.choice(len(train), size=min(cfg.batch_problems, len(train)), replace=False)
        h = draw_prefix_len(method, cfg.L, prefix_rng)
        start = time.perf_counter()
        if method == "iw_offpolicy":
            stats = iw_offpolicy_step(model, optimiser, train[idx], behaviour_probs[idx], cfg, generator)
        else:
            stats = rl_step(model, optimiser, train[idx], h, cfg, generator, rollouts=rollouts)
        seconds["rl"] += time.perf_counter() - start
        tokens += stats["sampled_tokens"]
        steps.append({**tag, "step": step, "prefix_len": h, "tokens": tokens, **stats})
        if step in eval_at:
            evaluate(step)
    return {"model": model, "evals": evals, "steps": steps, "sft_losses": sft_losses,
            "sft_heldout_probs": sft_probs, "sft_fit": sft_fit, "seconds": seconds}


# --------------------------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------------------------

_COMMON = dict(eps=0.4, n_layer=2, n_embd=32, n_head=4, base_batch=128, n_train=256,
               batch_problems=16, group_size=8, rl_lr=1e-3, sft_epochs=100, sft_lr=3e-3,
               rs_samples=256, iw_clip=1.0, methods=["prefixrl"],
               moderate_methods=["prefixrl", "sft_rl", "iw_offpolicy"])
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], L=8, moderate_L=5, base_steps=60, base_lr=3e-3, rl_steps=5, eval_every=5, **_COMMON),
    # book: 400 base steps at lr 5e-3 instead of 600 at 3e-3, and RL runs of 50 steps instead of 100
    # (evaluated every 10), so that both regimes fit the budget (chapter.yml, revisions of 2026-12-02)
    "book": dict(seeds=[0, 1, 2], L=20, moderate_L=12, base_steps=400, base_lr=5e-3, rl_steps=50, eval_every=10,
                 **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], L=20, moderate_L=12, base_steps=600, base_lr=3e-3, rl_steps=300,
                  eval_every=10, **_COMMON),
}

# What a re-runner may set (replib run refuses anything else before a notebook starts)
# (chains need 3 to 27 steps: the model has 32 positions; iw_offpolicy needs traces, so only the moderate regime)
EXPERIMENT_BOUNDS = dict(L=(3, 27), moderate_L=(3, 27), base_steps=(1, None), base_lr=(1e-8, None),
                         rl_steps=(1, None), eval_every=(1, None), eps=(0.0, 1.0), n_layer=(1, None),
                         n_embd=(4, None), n_head=(1, None), base_batch=(1, None), n_train=(1, None),
                         batch_problems=(1, None), group_size=(2, None), rl_lr=(1e-8, None),
                         sft_epochs=(0, None), sft_lr=(1e-8, None), rs_samples=(1, None), iw_clip=(1e-3, None),
                         methods=set(METHODS) - {"iw_offpolicy"}, moderate_methods=set(METHODS))


def moderate_cfg(cfg):
    """The settings of the moderate regime: ``cfg`` with L = ``moderate_L`` (same base model)."""
    return SimpleNamespace(**{**vars(cfg), "L": cfg.moderate_L})


def _profile_rows(seed, regime, model_name, probs):
    tag = {"seed": seed, "regime": regime, "model": model_name}
    rows = [{**tag, "position": t + 1, "step_accuracy": float(a)} for t, a in enumerate(probs.mean(axis=0))]
    curve = [{**tag, "prefix_len": h, "pass": float(p)} for h, p in enumerate(_prefix_curve_from_probs(probs))]
    return rows, curve


def _run_regime(base, regime, methods, train, heldout, cfg, seed, progress, behaviour_probs=None) -> dict:
    """Every method of one regime from the same base model: rows of evals, steps, step-accuracy
    profiles and prefix curves (after SFT and after RL), SFT losses, seconds, and the SFT model's
    pass@1 before RL."""
    out = {"evals": [], "steps": [], "profiles": [], "prefix_curves": [], "losses": [], "seconds": {}, "sft": {}}
    for method in methods:
        run = train_method(base, method, train, heldout, cfg, seed, progress, behaviour_probs=behaviour_probs,
                           regime=regime)
        out["evals"] += run["evals"]
        out["steps"] += run["steps"]
        out["seconds"][f"{regime}_{method}"] = run["seconds"]["rl"]
        out["seconds"]["sft"] = out["seconds"].get("sft", 0.0) + run["seconds"]["sft"]
        out["seconds"]["eval"] = out["seconds"].get("eval", 0.0) + run["seconds"]["eval"]
        if run["sft_losses"] is not None:
            out["losses"] += [{"seed": seed, "phase": f"sft ({regime})", "step": i + 1, "loss": float(v)}
                              for i, v in enumerate(run["sft_losses"])]
            out["sft"] = {"final_sft_loss": float(run["sft_losses"][-1]), "sft_fit": run["sft_fit"],
                          "sft_heldout_pass": run["evals"][0]["heldout_pass"],
                          "sft_train_pass": run["evals"][0]["train_pass"]}
            rows, curve = _profile_rows(seed, regime, "sft", run["sft_heldout_probs"])
            out["profiles"] += rows
            out["prefix_curves"] += curve
        start = time.perf_counter()
        rows, curve = _profile_rows(seed, regime, method, correct_step_probs(run["model"], heldout, cfg.L))
        out["seconds"]["eval"] += time.perf_counter() - start
        out["profiles"] += rows
        out["prefix_curves"] += curve
    return out


def run_seed(cfg, seed: int, progress=None, threads: int = 1) -> dict:
    """One seed: split, base model, then the two regimes; plain data only (no models).

    *Starved* (chains of ``L`` steps, base pass@1 about 0.6^L): the methods ``cfg.methods`` on all
    training problems with their oracle traces. *Moderate* (chains of ``moderate_L`` steps, same
    base model, which solves them now and then): the traces are found by rejection sampling the base
    model (:func:`.task.rejection_sample`, ``rs_samples`` per problem), and the methods
    ``cfg.moderate_methods`` train on the problems with a trace (none run if no trace was found).

    Keys: ``base`` (dict: per regime the exact no-prefix pass@1 held-out / train; starved: the
    analytic trace cost in tokens, the final base loss (mean of the last 10 steps), the noise floor,
    the share of GRPO groups with a signal under the base model (exact, ``grpo_signal_share``);
    moderate: the base pass@1, the share of training problems with a trace and the
    rejection-sampling tokens ``rs_tokens``; with SFT-then-RL, the final SFT loss, its step accuracy
    on the imitated traces ``sft_fit`` and the pass@1 right after SFT), ``evals``
    and ``steps`` (lists of row dicts, see :func:`train_method`), ``profiles`` (step accuracy per
    position on held-out problems; model = "base", "sft" (after SFT, before RL) or a method after
    RL), ``prefix_curves`` (held-out pass@1 from a correct prefix of length h, same models),
    ``losses`` (base pretraining and SFT losses per step) and ``seconds`` (per phase: base,
    rejection sampling, sft, each regime's methods, eval). Every row carries its ``regime``."""
    with compute_threads(threads):
        seed_everything(seed)
        train, heldout = split_problems(cfg.n_train, seed)
        start = time.perf_counter()
        base, base_losses = train_base(cfg, seed, progress)
        seconds = {"base": time.perf_counter() - start, "eval": 0.0, "sft": 0.0}
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
            "grpo_signal_share": float(group_signal_probability(train_probs.prod(axis=1), cfg.group_size).mean()),
        }
        profiles, curves = _profile_rows(seed, "starved", "base", held_probs)
        losses = [{"seed": seed, "phase": "base", "step": i + 1, "loss": float(v)} for i, v in enumerate(base_losses)]
        starved = _run_regime(base, "starved", cfg.methods, train, heldout, cfg, seed, progress)

        mcfg = moderate_cfg(cfg)
        start = time.perf_counter()
        m_train_probs = correct_step_probs(base, train, mcfg.L)
        m_held_probs = correct_step_probs(base, heldout, mcfg.L)
        found, draws = rejection_sample(m_train_probs.prod(axis=1), cfg.rs_samples, np.random.default_rng([seed, 9]))
        seconds["rejection_sampling"] = time.perf_counter() - start
        base_stats.update({
            "moderate_heldout_pass": float(m_held_probs.prod(axis=1).mean()),
            "moderate_train_pass": float(m_train_probs.prod(axis=1).mean()),
            "traces_found": float(found.mean()),
            "rs_tokens": float(draws.sum() * mcfg.L),
        })
        rows, curve = _profile_rows(seed, "moderate", "base", m_held_probs)
        methods = cfg.moderate_methods if found.any() else []  # no trace found: nothing to train on
        moderate = _run_regime(base, "moderate", methods, train[found], heldout, mcfg, seed, progress,
                               behaviour_probs=m_train_probs[found])
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
    """:func:`run_seed` for every seed; the rows of all seeds as data frames ``base``, ``evals``,
    ``steps``, ``profiles``, ``prefix_curves``, ``losses``, ``seconds`` (and the raw ``runs``)."""
    runs = [run_seed(cfg, seed, progress, threads) for seed in cfg.seeds]
    frames = {key: pd.DataFrame([r for run in runs for r in run[key]])
              for key in ("evals", "steps", "profiles", "prefix_curves", "losses")}
    frames["base"] = pd.DataFrame([run["base"] for run in runs])
    frames["seconds"] = pd.DataFrame([run["seconds"] for run in runs])
    return {"runs": runs, **frames}


def _compute_to_reach(evals: pd.DataFrame, level: float, offset: float) -> float:
    """Compute (``offset`` + RL sampled tokens) at the first evaluation whose train pass@1 reaches
    ``level``; inf if none does."""
    hit = evals.loc[evals["train_pass"] >= level, "tokens"]
    return offset + float(hit.min()) if len(hit) else float("inf")


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of ``chapter.yml`` (nan where a needed method
    was not run; see the package docstring for the conventions). Starved regime: p1 (base loss minus
    the noise floor), c1a, c2a, c3, m3, and the premise c1b, the share of groups with a signal that
    GRPO's rollouts have under the base model (exact, :func:`.theory.group_signal_probability` of
    each training problem's pass@1, averaged). Moderate regime: p2 (mean step accuracy after SFT
    on the traces it imitated), p3 (base held-out pass@1), c2b (PrefixRL minus the importance-weighted baseline, final held-out pass@1), m1 (final
    held-out pass@1, PrefixRL / SFT-then-RL) and m2 (the compute SFT-then-RL needs to first reach
    half the lower of the two final training rewards, over PrefixRL's; both charged the
    rejection-sampling tokens that found their traces)."""
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
        st = dict(list(regime("steps", "starved").groupby("method")))
        final = {name: {m: g.iloc[-1] for m, g in by_method.items()} for name, by_method in ev.items()}

        def held(name, method):
            return float(final[name][method]["heldout_pass"]) if method in final[name] else nan

        def early_accuracy(name, model, L):
            acc = regime("profiles", name)
            acc = acc[(acc["model"] == model) & (acc["position"] <= L // 2)].sort_values("position")
            return acc["step_accuracy"].to_numpy()

        pre_acc, base_acc = early_accuracy("starved", "prefixrl", cfg.L), early_accuracy("starved", "base", cfg.L)
        m2 = nan
        if {"prefixrl", "sft_rl"} <= set(final["moderate"]):
            fm = final["moderate"]
            level = 0.5 * min(fm["prefixrl"]["train_pass"], fm["sft_rl"]["train_pass"])
            rs = float(base.loc[seed, "rs_tokens"])
            m2 = (_compute_to_reach(ev["moderate"]["sft_rl"], level, rs)
                  / _compute_to_reach(ev["moderate"]["prefixrl"], level, rs))
        values[seed] = {
            "p1_base_learns_the_toy": float(base.loc[seed, "final_base_loss"] - base.loc[seed, "noise_floor"]),
            "p2_sft_converged_moderate": float(base.loc[seed, "sft_fit"]) if "sft_fit" in base else nan,
            "p3_moderate_not_hopeless": float(base.loc[seed, "moderate_heldout_pass"]),
            "c1a_signal_prefixrl": float(st["prefixrl"]["share_nonzero"].mean()) if "prefixrl" in st else nan,
            "c1b_signal_grpo": float(base.loc[seed, "grpo_signal_share"]),
            "c2a_progress": held("starved", "prefixrl"),
            "c2b_vs_offpolicy_iw": held("moderate", "prefixrl") - held("moderate", "iw_offpolicy"),
            "c3_back_generalization": float(np.mean(pre_acc - base_acc)) if len(pre_acc) else nan,
            "m1_final_ratio_vs_sft_rl_moderate": held("moderate", "prefixrl") / held("moderate", "sft_rl")
            if held("moderate", "sft_rl") > 0 else nan,
            "m2_speed_vs_sft_rl_moderate": m2,
            "m3_base_pass1": float(base.loc[seed, "heldout_pass"]),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
