"""LM, the experiment: profiles, training one network per objective, the runs (samples, NLL bound,
Hessian error for every method and grid) and the claim values of ``chapter.yml``."""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from replib.core.runtime import compute_threads

from .method import (
    METHODS,
    OBJECTIVE_OF,
    LMNet,
    _t,
    alpha_bar,
    model_reverse_fn,
    posterior_variance,
    sample,
    training_loss,
    transition,
    tweedie_moments,
)
from .task import (
    _gauss_terms,
    hessian_error,
    hessian_pt,
    nll_bound,
    ring_mixture,
    sample_mixture,
    score_pt,
    sliced_w2,
)

__all__ = [
    "METHOD_LABELS", "EXPERIMENT_PROFILES", "train_model", "run_experiment", "claim_values",
]

METHOD_LABELS = {
    "LM": "LM (score + Hessian)",
    "B1": "DSM + DDPM, beta_k",
    "B2": "DSM + DDPM, beta-tilde_k",
    "B3": "LM mean only (C = I)",
    "B4": "LM diagonal (r = 0)",
    "LMsg": "LM, decoupled gradients (ours)",
}

EXPERIMENT_PROFILES = {
    # N = 20 and 200 are the grid points of claims c2 and c3 (N = 10 is c1's)
    "smoke": dict(seeds=[0], train_steps=150, batch_size=256, lr=2e-3, n_samples=500, n_nll=200,
                  n_steps_grid=[5, 10, 20, 200], methods=["LM", "B1", "B2", "B3"], rank=1,
                  hess_ts=[0.1, 0.3, 0.6], n_hess=200, ellipse_t=0.3),
    "book": dict(seeds=[0, 1, 2], train_steps=1500, batch_size=256, lr=2e-3, n_samples=4000, n_nll=2000,
                 n_steps_grid=[5, 10, 20, 50, 200], methods=["LM", "B1", "B2", "B3", "B4", "LMsg"], rank=1,
                 hess_ts=[0.1, 0.3, 0.6], n_hess=1000, ellipse_t=0.3),
    "paper": dict(seeds=[0, 1, 2, 3, 4], train_steps=3000, batch_size=256, lr=2e-3, n_samples=4000, n_nll=2000,
                  n_steps_grid=[5, 10, 20, 50, 200], methods=["LM", "B1", "B2", "B3", "B4", "LMsg"], rank=1,
                  hess_ts=[0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8], n_hess=1000, ellipse_t=0.3),
}


def train_model(objective: str, seed: int = 0, steps: int = 1500, batch_size: int = 256, lr: float = 2e-3,
                n_steps_grid=(5, 10, 20, 50, 200), rank: int = 1, warmup_frac: float = 0.1,
                mix: dict | None = None) -> tuple[LMNet, dict]:
    """Train one :class:`LMNet` with ``objective`` (``dsm``, ``lm``, ``lm_mean``, ``lm_diag``): Adam,
    cosine-decayed lr, fresh mixture samples each step; t ~ U(0, 1], Delta = 1/N with N uniform over
    ``n_steps_grid``, s = max(t - Delta, 0) (proposed). The data stream depends on ``seed`` only, so
    every objective sees the same (x0, t, Delta, eps). C = I for the first ``warmup_frac`` of the
    steps for ``lm``/``lm_diag`` (the digest's proposed warm start). Returns (net, info) with info
    dict(seconds, final_loss)."""
    mix = ring_mixture() if mix is None else mix
    net = LMNet(d=mix["means"].shape[1], rank=rank, seed=seed)
    gen = torch.Generator().manual_seed(10_000 + int(seed))
    grid = torch.as_tensor([1.0 / n for n in n_steps_grid], dtype=torch.float32)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(int(steps), 1))
    warm = int(round(warmup_frac * steps)) if objective in ("lm", "lm_diag", "lm_sg") else 0
    start = time.perf_counter()
    losses = []
    for k in range(int(steps)):
        x0 = sample_mixture(mix, batch_size, generator=gen)
        t = 1.0 - torch.rand(batch_size, generator=gen)  # U(0, 1]
        delta = grid[torch.randint(len(grid), (batch_size,), generator=gen)]
        s = (t - delta).clamp_min(0.0)
        eps = torch.randn(batch_size, x0.shape[1], generator=gen)
        loss = training_loss(net, x0, t, s, eps, objective, identity_cov=k < warm)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    net.eval()
    tail = losses[-max(1, len(losses) // 10):]
    return net, dict(seconds=time.perf_counter() - start, final_loss=float(np.mean(tail)) if tail else float("nan"))


def _ellipses(net: LMNet, mix: dict, t: float, n_steps: int = 10, n_points: int = 6, seed: int = 0) -> list[dict]:
    """For a few x_t points (one draw near each mixture mean, pushed to time t) the true
    reverse-transition covariance (section 3 with the analytic Hessian), LM's, and B1's/B2's isotropic
    ones, for the step s = t - 1/n_steps."""
    s = max(t - 1.0 / n_steps, 0.0)
    ab = float(alpha_bar(t))
    rng = np.random.default_rng(50_000 + seed)
    x0 = sample_mixture(mix, n_points, rng)
    xt = math.sqrt(ab) * x0 + math.sqrt(1 - ab) * rng.standard_normal(x0.shape)
    a, sig2 = transition(t, s)
    H = hessian_pt(mix, xt, t)
    mean_true, V_true = tweedie_moments(xt, score_pt(mix, xt, t), H, a, sig2)
    m, g, D, W = model_reverse_fn(net, "LM")(_t(xt), t, s)
    V_lm = _gauss_terms(g, D, W).numpy()
    out = []
    for i in range(n_points):
        out.append(dict(xt=xt[i], t=t, s=s, mean_true=mean_true[i], cov_true=V_true[i], mean_lm=m[i].numpy(),
                        cov_lm=V_lm[i], cov_b1=sig2 * np.eye(2), cov_b2=float(posterior_variance(t, s)) * np.eye(2)))
    return out


def run_experiment(cfg, progress=None, threads: int = 1):
    """Every method of ``cfg.methods`` on every seed (``cfg``: a profile namespace with seeds,
    train_steps, batch_size, lr, n_samples, n_nll, n_steps_grid, methods, rank, hess_ts, n_hess,
    ellipse_t). Per seed: one network per objective needed (DSM shared by B1/B2), trained by
    :func:`train_model`; then for every method and N in ``n_steps_grid``: ``n_samples`` samples
    (:func:`sample`) against ``n_samples`` fresh target draws (SW2, 64 fixed projections) and the NLL
    bound on ``n_nll`` held-out points; then Hessian error and score MSE at ``hess_ts`` for each
    method's network. Runs inside :func:`compute_threads` (``threads``).

    Returns ``(rows, extras)``. rows: dicts with ``kind`` "sampling" (seed, method, n_steps, sw2, nll,
    sample_seconds) or "hessian" (seed, method, t, rel_error, score_mse; rel_error NaN for B1-B3,
    whose covariance heads are untrained). extras: ``mixture``, ``target`` (first seed's target
    draws), ``samples`` ({(method, N): array}, first seed), ``ellipses`` (first seed, LM network),
    ``train`` (list of dicts seed, objective, seconds, final_loss)."""
    methods = list(cfg.methods)
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}")
    mix = ring_mixture()
    rows: list[dict] = []
    extras: dict = dict(mixture=mix, samples={}, target=None, ellipses=[], train=[])
    grid = [int(n) for n in cfg.n_steps_grid]
    with compute_threads(threads):
        jobs = list(cfg.seeds)
        it = progress(jobs, total=len(jobs)) if progress is not None else jobs
        for seed in it:
            nets = {}
            for obj in dict.fromkeys(OBJECTIVE_OF[m] for m in methods):
                net, info = train_model(obj, seed, cfg.train_steps, cfg.batch_size, cfg.lr, grid, cfg.rank, mix=mix)
                nets[obj] = net
                extras["train"].append(dict(seed=seed, objective=obj, **info))
            target = sample_mixture(mix, cfg.n_samples, np.random.default_rng(60_000 + seed))
            test = sample_mixture(mix, cfg.n_nll, np.random.default_rng(70_000 + seed))
            if seed == cfg.seeds[0]:
                extras["target"] = target
                if "lm" in nets:
                    extras["ellipses"] = _ellipses(nets["lm"], mix, cfg.ellipse_t, seed=seed)
            for m in methods:
                fn = model_reverse_fn(nets[OBJECTIVE_OF[m]], m)
                for N in grid:
                    t0 = time.perf_counter()
                    X = sample(fn, cfg.n_samples, N, seed=seed)
                    sec = time.perf_counter() - t0
                    rows.append(dict(kind="sampling", seed=seed, method=m, n_steps=N, sw2=sliced_w2(X, target),
                                     nll=nll_bound(fn, test, N, seed=seed), sample_seconds=sec))
                    if seed == cfg.seeds[0]:
                        extras["samples"][(m, N)] = X
                rank = {"LM": None, "LMsg": None, "B4": 0}.get(m)
                for t in cfg.hess_ts:
                    he = hessian_error(nets[OBJECTIVE_OF[m]], mix, t, cfg.n_hess, seed, rank=rank)
                    if m not in ("LM", "LMsg", "B4"):
                        he["rel_error"] = float("nan")
                    rows.append(dict(kind="hessian", seed=seed, method=m, t=float(t), **he))
    return rows, extras


def _records(obj) -> list[dict]:
    """A list of dicts from a list of dicts or a DataFrame."""
    return obj.to_dict("records") if hasattr(obj, "to_dict") else list(obj)


def claim_values(rows, method: str = "LM") -> dict:
    """Per-seed values of the claims of ``chapter.yml`` from :func:`run_experiment`'s rows (list of
    dicts or DataFrame); NaN where a needed method / N / t is absent. Returns {seed: {claim_id: value}}:
    c1_few_steps_sw2 = SW2(LM, 10) / min(SW2(B1, 10), SW2(B2, 10));
    c2_nll_bound = min(NLL(B1, 20), NLL(B3, 20)) - NLL(LM, 20);
    c3_convergence = |SW2(LM, 200) - SW2(B2, 200)| / SW2(B2, 200);
    c4_hessian_learned = LM's mean relative Frobenius error at t = 0.3.
    ``method`` replaces LM by another method in every formula (e.g. the exploratory "LMsg")."""
    nan = float("nan")
    samp: dict = {}
    hess: dict = {}
    seeds = []
    for r in _records(rows):
        if r["seed"] not in seeds:
            seeds.append(r["seed"])
        if r.get("kind", "sampling") == "hessian":
            hess[(r["seed"], r["method"], round(float(r["t"]), 6))] = float(r["rel_error"])
        else:
            samp[(r["seed"], r["method"], int(r["n_steps"]))] = r
    out = {}
    for seed in seeds:

        def g(m, n, key, seed=seed):
            r = samp.get((seed, m, n))
            return float(r[key]) if r is not None else nan

        b = min(g("B1", 10, "sw2"), g("B2", 10, "sw2")) if not (math.isnan(g("B1", 10, "sw2")) or math.isnan(g("B2", 10, "sw2"))) else nan
        c1 = g(method, 10, "sw2") / b if b == b and b != 0 else nan
        c2 = min(g("B1", 20, "nll"), g("B3", 20, "nll")) - g(method, 20, "nll")
        if math.isnan(g("B1", 20, "nll")) or math.isnan(g("B3", 20, "nll")):
            c2 = nan
        b2 = g("B2", 200, "sw2")
        c3 = abs(g(method, 200, "sw2") - b2) / b2 if b2 == b2 and b2 != 0 else nan
        out[seed] = {
            "c1_few_steps_sw2": float(c1),
            "c2_nll_bound": float(c2),
            "c3_convergence": float(c3),
            "c4_hessian_learned": hess.get((seed, method, 0.3), nan),
        }
    return out
