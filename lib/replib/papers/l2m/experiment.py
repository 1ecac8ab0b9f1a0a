"""The L2M experiment: profiles, one seed's run (pre-training, policy training, the per-task
baselines with their tuning, evaluation on held-out tasks), the whole experiment and the claim
values of ``chapter.yml``.

Contents: :data:`EXPERIMENT_PROFILES`, :data:`EXPERIMENT_BOUNDS`, :data:`CONTEXT_SIZES`,
:data:`ACQUISITION_CONTEXT`, :func:`as_tensors`, :func:`tune_epochs`, :func:`budget_nll`,
:func:`tune_selectors`, :func:`run_seed`,
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
    empty_state_hidden,
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
    "budget_nll",
    "tune_selectors",
    "run_seed",
    "run_experiment",
    "claim_values",
]

CONTEXT_SIZES = (4, 8, 16, 24)  # test context sizes (training draws 4..24)
ACQUISITION_CONTEXT = 16  # context rows of the acquisition evaluation
_TRAIN_CONTEXT = (4, 24)

# The selectors' temperatures and step counts are the winners of the tuning declared in chapter.yml
# (grid tau 0.1, 0.5, 1 x steps 300, 1000, 3000, the same for both selectors, pilot seeds 0, 1, 2:
# :func:`tune_selectors`); see the experiment notebook's tuning table.
_COMMON = dict(p_max=0.5, lr=3e-3, selector_lr=3e-3, head_lr=3e-4, tau=0.5, gdfs_tau=0.5,
               mlp_epoch_grid=[10, 30, 100, 200], batch_tasks=8, train_targets=8)
EXPERIMENT_PROFILES = {
    "smoke": dict(seeds=[0], prior="linear", pretrain_steps=60, policy_steps=20, gdfs_epochs=20, width=32,
                  n_test_tasks=10, test_targets=8, tune_tasks=10, probe_tasks=40, workers=1, **_COMMON),
    "book": dict(seeds=[1000, 1001, 1002, 1003, 1004], prior="linear", pretrain_steps=4000, policy_steps=1000,
                 gdfs_epochs=1000, width=32, n_test_tasks=100, test_targets=24, tune_tasks=50, probe_tasks=400,
                 workers=2, **_COMMON),
    "paper": dict(seeds=[0, 1, 2, 3, 4], prior="tanh", pretrain_steps=20000, policy_steps=5000, gdfs_epochs=1000,
                  width=64, n_test_tasks=200, test_targets=24, tune_tasks=100, probe_tasks=1000, workers=1, **_COMMON),
}

EXPERIMENT_BOUNDS = dict(p_max=(0.0, 0.95), lr=(1e-6, 1.0), selector_lr=(1e-6, 1.0), head_lr=(0.0, 1.0),
                         tau=(0.01, 10.0), gdfs_tau=(0.01, 10.0), gdfs_epochs=(2, None), mlp_epoch_grid=(1, None),
                         batch_tasks=(1, None), train_targets=(1, None), prior={"linear", "tanh"},
                         pretrain_steps=(1, None), policy_steps=(2, None), width=(8, None), n_test_tasks=(2, None),
                         test_targets=(1, None), tune_tasks=(2, None), probe_tasks=(10, None), workers=(1, 8))


def as_tensors(tasks: dict, where="cpu") -> dict:
    """The x, y, r arrays of :func:`sample_tasks` as float32 tensors on device ``where``
    (``informative`` and ``importance`` dropped)."""
    return {k: torch.as_tensor(v, dtype=torch.float32, device=where) for k, v in tasks.items()
            if k in ("x", "y", "r")}


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


def budget_nll(nlls: torch.Tensor) -> float:
    """The acquisition score of every selector claim: the NLL averaged over targets, tasks and the
    budgets $k = 1..d-1$ (columns 1 to 5 of a :func:`~replib.papers.l2m.method.greedy_acquisition`
    curve; $k = 0$ and $k = d$ do not depend on the picks)."""
    return float(nlls[..., 1:N_FEATURES].mean())


def _pretrained(cfg, seed: int, where):
    """A seed's pre-trained L2M, its pre-training losses and its batch sampler."""
    seed_everything(seed)
    model = L2M(N_FEATURES, width=cfg.width, ff=2 * cfg.width, hidden=2 * cfg.width).to(where)

    def draw_batch(rng):
        return as_tensors(sample_tasks(rng, cfg.batch_tasks, _TRAIN_CONTEXT[1] + cfg.train_targets, cfg.p_max,
                                       kind=cfg.prior), where)

    losses = train_predictor(model, draw_batch, cfg.pretrain_steps, cfg.lr, seed, _TRAIN_CONTEXT)
    return model, losses, draw_batch


def _train_l2m_selector(cfg, seed, model, draw_batch, tune, tau, reads):
    """Train ``model``'s selector at temperature ``tau`` for ``max(reads)`` steps; at each step count
    in ``reads`` score it on the tuning tasks (:func:`budget_nll` at :data:`ACQUISITION_CONTEXT` rows).
    Returns the losses and {steps: score}."""
    context, target = _split(tune, ACQUISITION_CONTEXT, max(CONTEXT_SIZES))
    tokens = context_tokens(context["x"], context["r"], context["y"])
    scores = {}

    def read(step, net):
        if step in reads:
            scores[step] = budget_nll(l2m_acquisition(net, tokens, target["x"], target["y"], "l2m")[0])

    losses = train_selector(model, draw_batch, max(reads), cfg.selector_lr, cfg.head_lr, tau, _TRAIN_CONTEXT, seed,
                            on_step=read)
    return losses, scores


def _fit_gdfs(cfg, seed, mlp, context, target, tau, reads):
    """Fit the per-task GDFS selector on ``mlp`` and the context rows for ``max(reads)`` epochs at
    temperature ``tau``, scoring it on ``target`` (:func:`budget_nll`) at each epoch count in
    ``reads``. Returns the selector and {epochs: score}."""
    scores = {}

    def read(epoch, net):
        if epoch in reads:
            scores[epoch] = budget_nll(mlp_acquisition(mlp, net, target["x"], target["y"])[0])

    selector = fit_gdfs_selector(mlp, context["x"], context["y"], context["r"], max(reads), seed, tau=tau,
                                 on_epoch=read)
    return selector, scores


def _tuned_mlp(cfg, seed, tune, n_context):
    """The per-task MLP's epochs at ``n_context`` rows (:func:`tune_epochs`) and its tuning rows."""
    scores = tune_epochs(tune, n_context, cfg.mlp_epoch_grid, seed)
    epochs = min(scores, key=scores.get)
    return epochs, [{"seed": seed, "context": n_context, "epochs": e, "nll": v, "chosen": e == epochs}
                    for e, v in scores.items()]


def _tuning_tasks(cfg, seed, where):
    rows = max(CONTEXT_SIZES) + cfg.test_targets
    return as_tensors(sample_tasks(np.random.default_rng([seed, 11]), cfg.tune_tasks, rows, cfg.p_max,
                                   kind=cfg.prior), where)


def tune_selectors(cfg, seed: int, taus, steps) -> pd.DataFrame:
    """The selectors' tuning of ``chapter.yml`` on one pilot seed: for every temperature in ``taus``,
    the L2M selector (on a copy of the seed's pre-trained model) and the GDFS selector (on the MLP
    fitted to the tuning tasks' 16 context rows) trained to ``max(steps)`` and scored at every count in
    ``steps`` on the tuning tasks' targets. Returns rows (seed, arm, tau, steps, score)."""
    import copy

    where = model_device(cfg.profile)
    rows = []
    with compute_threads(1):
        model, _, draw_batch = _pretrained(cfg, seed, where)
        tune = _tuning_tasks(cfg, seed, where)
        epochs, _ = _tuned_mlp(cfg, seed, tune, ACQUISITION_CONTEXT)
        context, target = _split(tune, ACQUISITION_CONTEXT, max(CONTEXT_SIZES))
        mlp = fit_masked_mlp(context["x"], context["y"], context["r"], epochs, seed)
        for tau in taus:
            _, l2m_scores = _train_l2m_selector(cfg, seed, copy.deepcopy(model), draw_batch, tune, tau, set(steps))
            _, gdfs_scores = _fit_gdfs(cfg, seed, mlp, context, target, tau, set(steps))
            rows += [{"seed": seed, "arm": arm, "tau": tau, "steps": k, "score": v}
                     for arm, scores in [("l2m", l2m_scores), ("gdfs", gdfs_scores)] for k, v in scores.items()]
    return pd.DataFrame(rows)


def _probe_first_picks(cfg, seed, model, test_hidden, where) -> np.ndarray:
    """The linear probe of p4: per feature a logistic regression from the empty-state hidden state
    (:func:`~replib.papers.l2m.method.empty_state_hidden`, 16 context rows) to "this feature is
    informative", fitted on ``cfg.probe_tasks`` fresh prior tasks; returns each test task's
    top-scored feature."""
    from sklearn.linear_model import LogisticRegression

    probe_np = sample_tasks(np.random.default_rng([seed, 12]), cfg.probe_tasks, ACQUISITION_CONTEXT, cfg.p_max,
                            kind=cfg.prior)
    probe = as_tensors(probe_np, where)
    hidden = empty_state_hidden(model, context_tokens(probe["x"], probe["r"], probe["y"])).cpu().numpy()
    scores = np.zeros((test_hidden.shape[0], N_FEATURES))
    for j in range(N_FEATURES):
        label = probe_np["informative"][:, j]
        if label.all() or not label.any():
            scores[:, j] = float(label.mean())
            continue
        scores[:, j] = LogisticRegression(C=1.0, max_iter=2000).fit(hidden, label).decision_function(test_hidden)
    return scores.argmax(axis=1)


def run_seed(cfg, seed: int) -> dict:
    """One seed: pre-train L2M (:func:`train_predictor`), train its selector
    (:func:`train_selector`, scored on the tuning tasks after half and all of its steps), then on
    ``cfg.n_test_tasks`` held-out tasks: NLL with all features for L2M, the tuned per-task MLP and
    the label marginal at every context size of :data:`CONTEXT_SIZES`, and at
    :data:`ACQUISITION_CONTEXT` rows the acquisition curves of L2M (selector, random picks and the
    oracle order) and of the MLP (GDFS selector and random picks), the first picks and the linear
    probe's first picks. The networks and batches live on ``model_device(cfg.profile)`` (a GPU at the
    paper profile when there is one, else the CPU); tasks and random draws come from CPU generators."""
    started = time.perf_counter()
    where = model_device(cfg.profile)
    with compute_threads(1):
        model, pretrain, draw_batch = _pretrained(cfg, seed, where)
        tune = _tuning_tasks(cfg, seed, where)
        reads = {cfg.policy_steps // 2, cfg.policy_steps}
        policy, l2m_reads = _train_l2m_selector(cfg, seed, model, draw_batch, tune, cfg.tau, reads)
        n_pool = max(CONTEXT_SIZES)
        rows = n_pool + cfg.test_targets
        test_np = sample_tasks(np.random.default_rng([seed, 10]), cfg.n_test_tasks, rows, cfg.p_max, kind=cfg.prior)
        test = as_tensors(test_np, where)
        importance = torch.as_tensor(test_np["importance"], dtype=torch.float32, device=where)
        context_rows, tuning_rows, curves = [], [], []
        selector_rows = [{"seed": seed, "arm": "l2m", "steps": k, "score": v} for k, v in sorted(l2m_reads.items())]
        for n_context in CONTEXT_SIZES:
            context, target = _split(test, n_context, n_pool)
            epochs, rows_tuned = _tuned_mlp(cfg, seed, tune, n_context)
            tuning_rows += rows_tuned
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
                # GDFS is scored on the tuning tasks (its own MLP fitted there) after half and all its epochs
                tune_context, tune_target = _split(tune, n_context, n_pool)
                tune_mlp = fit_masked_mlp(tune_context["x"], tune_context["y"], tune_context["r"], epochs, seed)
                _, gdfs_reads = _fit_gdfs(cfg, seed, tune_mlp, tune_context, tune_target, cfg.gdfs_tau,
                                          {cfg.gdfs_epochs // 2, cfg.gdfs_epochs})
                selector_rows += [{"seed": seed, "arm": "gdfs", "steps": k, "score": v}
                                  for k, v in sorted(gdfs_reads.items())]
                selector = fit_gdfs_selector(mlp, context["x"], context["y"], context["r"], cfg.gdfs_epochs, seed,
                                             tau=cfg.gdfs_tau)
                runs = {"l2m": l2m_acquisition(model, tokens, target["x"], target["y"], "l2m"),
                        "l2m_random": l2m_acquisition(model, tokens, target["x"], target["y"], "random", generator),
                        "l2m_oracle": l2m_acquisition(model, tokens, target["x"], target["y"], "oracle",
                                                      importance=importance),
                        "mlp_gdfs": mlp_acquisition(mlp, selector, target["x"], target["y"]),
                        "mlp_random": mlp_acquisition(mlp, None, target["x"], target["y"], generator)}
                first = {}
                for name, (nlls, picks) in runs.items():
                    curve = nlls.mean(dim=(0, 1)).cpu().numpy()
                    curves += [{"seed": seed, "method": name, "k": k, "nll": float(v)} for k, v in enumerate(curve)]
                    first[name] = picks[:, 0, 0].cpu().numpy()
                test_hidden = empty_state_hidden(model, tokens).cpu().numpy()
                first["probe"] = _probe_first_picks(cfg, seed, model, test_hidden, where)
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
            "selector": pd.DataFrame(selector_rows),
            "seconds": pd.DataFrame([{"seed": seed, "seconds": time.perf_counter() - started}])}


def run_experiment(cfg, progress=None) -> dict:
    """:func:`run_seed` for every seed of ``cfg``, on ``cfg.workers`` processes (each runs whole
    seeds, each seeded by its seed alone, so the tables are those of one process); the tables of all
    seeds concatenated in seed order."""
    seeds = list(cfg.seeds)
    workers = max(1, min(int(getattr(cfg, "workers", 1)), len(seeds)))
    if workers == 1:
        outs = [run_seed(cfg, seed) for seed in (progress(seeds) if progress is not None else seeds)]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(run_seed, cfg, seed) for seed in seeds]
            outs = [f.result() for f in (progress(futures) if progress is not None else futures)]
    return {key: pd.concat([o[key] for o in outs], ignore_index=True) for key in outs[0]}


def claim_values(results: dict, cfg) -> dict:
    """Per seed the value of every judged claim of ``chapter.yml`` (see each claim's metric)."""
    context = results["context"].pivot_table(index=["seed", "context"], columns="model", values="nll")
    curves = results["curves"]
    budget = curves[(curves.k >= 1) & (curves.k <= N_FEATURES - 1)].groupby(["seed", "method"])["nll"].mean()
    picks = results["picks"]
    first_ok = picks.groupby(["seed", "method"])["informative"].mean()
    selector = results["selector"]
    values = {}
    for seed in cfg.seeds:
        at = context.loc[seed]
        gain = at["mlp"] - at["l2m"]
        reads = selector[(selector.seed == seed) & (selector.arm == "l2m")].set_index("steps")["score"]
        values[seed] = {
            "p1_learns_in_context": float(at.loc[ACQUISITION_CONTEXT, "marginal"] - at.loc[ACQUISITION_CONTEXT, "l2m"]),
            "p2_mlp_learns": float(at.loc[ACQUISITION_CONTEXT, "marginal"] - at.loc[ACQUISITION_CONTEXT, "mlp"]),
            "p3_selector_converged": float(reads.loc[cfg.policy_steps // 2] - reads.loc[cfg.policy_steps]),
            "p4_state_carries_relevance": float(first_ok.loc[(seed, "probe")]),
            "p5_acquisition_headroom": float(budget.loc[(seed, "mlp_gdfs")] - budget.loc[(seed, "l2m_oracle")]),
            "p6_selector_headroom": float(budget.loc[(seed, "l2m_random")] - budget.loc[(seed, "l2m_oracle")]),
            "h1_uq_vs_per_task": float(gain.loc[ACQUISITION_CONTEXT]),
            "h2_acquisition_vs_gdfs": float(budget.loc[(seed, "mlp_gdfs")] - budget.loc[(seed, "l2m")]),
            "m1_policy_vs_random": float(budget.loc[(seed, "l2m_random")] - budget.loc[(seed, "l2m")]),
            "m2_first_pick_informative": float(first_ok.loc[(seed, "l2m")]),
            "m3_gain_at_small_context": float(gain.loc[min(CONTEXT_SIZES)] - gain.loc[max(CONTEXT_SIZES)]),
            "x1_random_first_pick": float(first_ok.loc[(seed, "l2m_random")]),
            "x2_gdfs_first_pick": float(first_ok.loc[(seed, "mlp_gdfs")]),
        }
    return values
