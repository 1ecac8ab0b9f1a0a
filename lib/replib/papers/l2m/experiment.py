"""The L2M experiment: profiles, one seed's run (pre-training, policy training, the per-task
baselines with their tuning, evaluation on held-out tasks), the whole experiment and the claim
values of ``chapter.yml``.

Contents: :data:`EXPERIMENT_PROFILES`, :data:`EXPERIMENT_BOUNDS`, :data:`CONTEXT_SIZES`,
:data:`ACQUISITION_CONTEXT`, :func:`as_tensors`, :func:`tune_epochs`, :func:`run_seed`,
:func:`run_experiment`, :func:`claim_values`.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, model_device, seed_everything

from .baselines import fit_gdfs_selector, fit_masked_mlp, mlp_acquisition, mlp_predict
from .method import (
    L2M,
    context_tokens,
    l2m_acquisition,
    query_tokens,
    train_predictor,
    train_selector,
)
from .task import N_FEATURES, gaussian_nll, marginal_nll, sample_tasks

__all__ = [
    "EXPERIMENT_PROFILES",
    "EXPERIMENT_BOUNDS",
    "CONTEXT_SIZES",
    "ACQUISITION_CONTEXT",
    "as_tensors",
    "tune_epochs",
    "run_seed",
    "run_experiment",
    "claim_values",
]

CONTEXT_SIZES = (4, 8, 16, 24)  # test context sizes (training draws 4..24)
ACQUISITION_CONTEXT = 16  # context rows of the acquisition evaluation
_TRAIN_CONTEXT = (4, 24)

_COMMON = dict(p_max=0.5, lr=3e-3, selector_lr=3e-3, head_lr=3e-4, tau=0.1, gdfs_tau=0.5, gdfs_epochs=200,
               mlp_epoch_grid=[10, 30, 100, 200], batch_tasks=8, train_targets=8)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], prior="linear", pretrain_steps=60, policy_steps=20, width=32, n_test_tasks=10,
                  test_targets=8, tune_tasks=10, **_COMMON),
    "book": dict(seeds=[0, 1, 2], prior="linear", pretrain_steps=1200, policy_steps=200, width=32, n_test_tasks=100,
                 test_targets=24, tune_tasks=50, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], prior="tanh", pretrain_steps=20000, policy_steps=5000, width=64,
                  n_test_tasks=200, test_targets=24, tune_tasks=100, **_COMMON),
}

EXPERIMENT_BOUNDS = dict(p_max=(0.0, 0.95), lr=(1e-6, 1.0), selector_lr=(1e-6, 1.0), head_lr=(0.0, 1.0),
                         tau=(0.01, 10.0), gdfs_tau=(0.01, 10.0), gdfs_epochs=(1, None), mlp_epoch_grid=(1, None),
                         batch_tasks=(1, None), train_targets=(1, None), prior={"linear", "tanh"},
                         pretrain_steps=(1, None), policy_steps=(1, None), width=(8, None), n_test_tasks=(2, None),
                         test_targets=(1, None), tune_tasks=(2, None))


def as_tensors(tasks: dict, where="cpu") -> dict:
    """The x, y, r arrays of :func:`sample_tasks` as float32 tensors on device ``where``
    (``informative`` dropped)."""
    return {k: torch.as_tensor(v, dtype=torch.float32, device=where) for k, v in tasks.items() if k != "informative"}


def _split(tensors: dict, n_context: int, n_pool: int):
    """Context rows (the first ``n_context`` of the pool of ``n_pool``) and the targets after the
    pool, whose features are all available (retrospective missingness hits the context only)."""
    context = {k: v[:, :n_context] for k, v in tensors.items()}
    target = {k: v[:, n_pool:] for k, v in tensors.items()}
    target["r"] = torch.ones_like(target["r"])
    return context, target


def tune_epochs(tasks: dict, n_context: int, grid, seed: int) -> dict:
    """The per-task MLP's tuning on prior tasks: trained once to ``max(grid)`` epochs on each task's
    first ``n_context`` rows, its target NLL (all features) read at every epoch of ``grid``. Returns
    {epochs: NLL}; the experiment uses the epochs of the lowest."""
    context, target = _split(tasks, n_context, max(CONTEXT_SIZES))
    scores = {}

    def record(epoch, net):
        if epoch in grid:
            with torch.no_grad():
                nll = gaussian_nll(*mlp_predict(net, target["x"], target["r"]), target["y"]).mean()
            scores[epoch] = float(nll)

    fit_masked_mlp(context["x"], context["y"], context["r"], max(grid), seed, on_epoch=record)
    return scores


def run_seed(cfg, seed: int) -> dict:
    """One seed: pre-train L2M (:func:`train_predictor`), train its selector
    (:func:`train_selector`), then on ``cfg.n_test_tasks`` held-out tasks: NLL with all features
    for L2M, the tuned per-task MLP and the label marginal at every context size of
    :data:`CONTEXT_SIZES`, and at :data:`ACQUISITION_CONTEXT` rows the acquisition curves of L2M
    (selector and random picks) and of the MLP (GDFS selector and random picks) and the first picks.
    The networks and batches live on ``model_device(cfg.profile)`` (a GPU at the paper profile when
    there is one, else the CPU); tasks and random draws come from CPU generators."""
    started = time.perf_counter()
    where = model_device(cfg.profile)
    with compute_threads(1):
        seed_everything(seed)
        model = L2M(N_FEATURES, width=cfg.width, ff=2 * cfg.width, hidden=2 * cfg.width).to(where)

        def draw_batch(rng):
            return as_tensors(sample_tasks(rng, cfg.batch_tasks, _TRAIN_CONTEXT[1] + cfg.train_targets, cfg.p_max,
                                           kind=cfg.prior), where)

        pretrain = train_predictor(model, draw_batch, cfg.pretrain_steps, cfg.lr, seed, _TRAIN_CONTEXT)
        policy = train_selector(model, draw_batch, cfg.policy_steps, cfg.selector_lr, cfg.head_lr, cfg.tau,
                                _TRAIN_CONTEXT, seed)
        n_pool = max(CONTEXT_SIZES)
        rows = n_pool + cfg.test_targets
        test_np = sample_tasks(np.random.default_rng([seed, 10]), cfg.n_test_tasks, rows, cfg.p_max, kind=cfg.prior)
        tune = as_tensors(sample_tasks(np.random.default_rng([seed, 11]), cfg.tune_tasks, rows, cfg.p_max,
                                       kind=cfg.prior), where)
        test = as_tensors(test_np, where)
        context_rows, tuning_rows, curves = [], [], []
        for n_context in CONTEXT_SIZES:
            context, target = _split(test, n_context, n_pool)
            scores = tune_epochs(tune, n_context, cfg.mlp_epoch_grid, seed)
            epochs = min(scores, key=scores.get)
            tuning_rows += [{"seed": seed, "context": n_context, "epochs": e, "nll": v, "chosen": e == epochs}
                            for e, v in scores.items()]
            tokens = context_tokens(context["x"], context["r"], context["y"])
            with torch.no_grad():
                l2m = gaussian_nll(*model.predict(model.encode(tokens, query_tokens(target["x"], target["r"]))),
                                   target["y"])
            mlp = fit_masked_mlp(context["x"], context["y"], context["r"], epochs, seed)
            with torch.no_grad():
                mlp_nll = gaussian_nll(*mlp_predict(mlp, target["x"], target["r"]), target["y"])
            marginal = marginal_nll(test_np["y"][:, :n_context], test_np["y"][:, n_pool:])
            for name, nll in [("l2m", l2m.cpu().numpy()), ("mlp", mlp_nll.cpu().numpy()), ("marginal", marginal)]:
                context_rows.append({"seed": seed, "context": n_context, "model": name, "nll": float(nll.mean()),
                                     "mlp_epochs": epochs})
            if n_context == ACQUISITION_CONTEXT:
                generator = torch.Generator().manual_seed(seed + 20)
                selector = fit_gdfs_selector(mlp, context["x"], context["y"], context["r"], cfg.gdfs_epochs, seed,
                                             tau=cfg.gdfs_tau)
                runs = {"l2m": l2m_acquisition(model, tokens, target["x"], target["y"], "l2m"),
                        "l2m_random": l2m_acquisition(model, tokens, target["x"], target["y"], "random", generator),
                        "mlp_gdfs": mlp_acquisition(mlp, selector, target["x"], target["y"]),
                        "mlp_random": mlp_acquisition(mlp, None, target["x"], target["y"], generator)}
                first = {}
                for name, (nlls, picks) in runs.items():
                    curve = nlls.mean(dim=(0, 1)).cpu().numpy()
                    curves += [{"seed": seed, "method": name, "k": k, "nll": float(v)} for k, v in enumerate(curve)]
                    first[name] = picks[:, 0, 0].cpu().numpy()
    picks = pd.DataFrame([{"seed": seed, "task": t, "method": name, "pick": int(p[t]),
                           "informative": bool(test_np["informative"][t, p[t]]),
                           "n_informative": int(test_np["informative"][t].sum())}
                          for name, p in first.items() for t in range(cfg.n_test_tasks)])
    informativeness = pd.DataFrame({"seed": seed, "task": np.repeat(np.arange(cfg.n_test_tasks), N_FEATURES),
                                    "feature": np.tile(np.arange(N_FEATURES), cfg.n_test_tasks),
                                    "informative": test_np["informative"].ravel()})
    training = pd.DataFrame({"seed": seed, "stage": ["pretrain"] * len(pretrain) + ["policy"] * len(policy),
                             "step": list(range(len(pretrain))) + list(range(len(policy))), "loss": pretrain + policy})
    return {"context": pd.DataFrame(context_rows), "curves": pd.DataFrame(curves), "picks": picks,
            "informativeness": informativeness, "tuning": pd.DataFrame(tuning_rows), "training": training,
            "seconds": pd.DataFrame([{"seed": seed, "seconds": time.perf_counter() - started}])}


def run_experiment(cfg, progress=None) -> dict:
    """:func:`run_seed` for every seed of ``cfg``; the tables of all seeds concatenated."""
    seeds = progress(cfg.seeds) if progress is not None else cfg.seeds
    outs = [run_seed(cfg, seed) for seed in seeds]
    return {key: pd.concat([o[key] for o in outs], ignore_index=True) for key in outs[0]}


def claim_values(results: dict, cfg) -> dict:
    """Per seed the value of every judged claim of ``chapter.yml`` (see each claim's metric)."""
    context = results["context"].pivot_table(index=["seed", "context"], columns="model", values="nll")
    curves = results["curves"]
    budget = curves[(curves.k >= 1) & (curves.k <= N_FEATURES - 1)].groupby(["seed", "method"])["nll"].mean()
    picks = results["picks"]
    first_ok = picks[picks.method == "l2m"].groupby("seed")["informative"].mean()
    values = {}
    for seed in cfg.seeds:
        at = context.loc[seed]
        gain = at["mlp"] - at["l2m"]
        values[seed] = {
            "p1_learns_in_context": float(at.loc[ACQUISITION_CONTEXT, "marginal"] - at.loc[ACQUISITION_CONTEXT, "l2m"]),
            "h1_uq_vs_per_task": float(gain.loc[ACQUISITION_CONTEXT]),
            "h2_acquisition_vs_gdfs": float(budget.loc[(seed, "mlp_gdfs")] - budget.loc[(seed, "l2m")]),
            "m1_policy_vs_random": float(budget.loc[(seed, "l2m_random")] - budget.loc[(seed, "l2m")]),
            "m2_first_pick_informative": float(first_ok.loc[seed]),
            "m3_gain_at_small_context": float(gain.loc[min(CONTEXT_SIZES)] - gain.loc[max(CONTEXT_SIZES)]),
        }
    return values
