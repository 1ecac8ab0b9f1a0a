"""The experiment: twelve runs per seed on the same client data as one batched federation (clients
trained alone, the pooled-expert oracle, FedAvg, FEDORA, Q-only weights at the scale-free
temperature, the paper's combined weights, combined weights with kept models, with the adaptive pull
and FEDORA's overwrite, and with both (the whole plug-in), and the stress variant of FEDORA, the
Q-only and the combined weights), their learning curves and the claim values.

Contents: :data:`RUNS` (name -> how to build its :class:`~.method.RunSpec`), :func:`make_spec` (a
run's spec with its tuned temperature factor), :func:`pooled_data`, :data:`EXPERIMENT_PROFILES`,
:data:`EXPERIMENT_BOUNDS`, :func:`pack_clients` (client data as padded member tensors),
:func:`run_seed`, :func:`run_experiment` (seeds on one or more processes), :func:`final_return`,
:func:`evaluated_rounds`, :func:`expert_mass` and :func:`claim_values`.
"""

from __future__ import annotations

import multiprocessing
import re
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pandas as pd
import torch

from replib.core.runtime import compute_threads, seed_everything

from .method import Federation, RunSpec
from .task import (
    CLIENT_MIXES,
    client_datasets,
    evaluate_actor,
    initial_states,
    normalised_score,
    reference_returns,
)

__all__ = ["RUNS", "EXPERIMENT_PROFILES", "EXPERIMENT_BOUNDS", "pack_clients", "hyperparameters", "run_seed",
           "run_experiment", "final_return", "evaluated_rounds", "expert_mass", "claim_values", "make_spec",
           "pooled_data"]


def _stress_bc(kinds: list) -> list:
    """The stress variant: medium clients train pure TD3 (no behaviour-cloning term)."""
    return [0.0 if kind == "medium" else 1.0 for kind in kinds]


RUNS = {
    "isolated": lambda kinds: RunSpec("none", keep_own=True),
    "pooled": lambda kinds: RunSpec("none", keep_own=True),
    "uniform": lambda kinds: RunSpec("uniform"),
    "fedora": lambda kinds: RunSpec("q_softmax"),
    "q_std": lambda kinds: RunSpec("q_std"),
    "combined": lambda kinds: RunSpec("combined"),
    "combined_keep": lambda kinds: RunSpec("combined", keep_own=True),
    "combined_adaptive_overwrite": lambda kinds: RunSpec("combined", adaptive=True),
    "combined_adaptive": lambda kinds: RunSpec("combined", keep_own=True, adaptive=True),
    "fedora_stress": lambda kinds: RunSpec("q_softmax", bc=_stress_bc(kinds)),
    "q_std_stress": lambda kinds: RunSpec("q_std", bc=_stress_bc(kinds)),
    "combined_stress": lambda kinds: RunSpec("combined", bc=_stress_bc(kinds)),
}
# the tuned temperature factor of each run comes from the profile key of its aggregator
_TEMP_KEY = {"q_softmax": "temp_fedora", "q_std": "temp_q_std", "combined": "temp_combined"}


def make_spec(name: str, kinds: list, cfg) -> RunSpec:
    """The :class:`RunSpec` of run ``name``: a key of :data:`RUNS`, optionally with ``@factor``
    appended (a tuning variant with that temperature factor); without it the factor is the
    profile's tuned value for the run's aggregator (``temp_fedora``, ``temp_q_std``,
    ``temp_combined``)."""
    base, _, factor = name.partition("@")
    spec = RUNS[base](kinds)
    if factor:
        spec.temp = float(factor)
    elif spec.aggregator in _TEMP_KEY:
        spec.temp = float(getattr(cfg, _TEMP_KEY[spec.aggregator]))
    return spec


def pooled_data(datasets: list) -> dict:
    """The expert clients' data put together: the pooled (centralised) oracle's data set."""
    experts = [d for d in datasets if d["kind"] == "expert"]
    out = {key: np.concatenate([d[key] for d in experts]) for key in ("obs", "action", "reward", "next_obs")}
    out["kind"] = "pooled"
    return out


# temp_*: the tuned temperature factors (chapter.yml, tuning: grid 0.5, 1, 2 for every weighting arm,
# pilot seeds 0-2, highest mean final global return): FEDORA 0.5 (beta = 0.2; -705 against -724 at 1
# and -920 at 2), Q-only 1 (-728; -757 at 0.5, -929 at 2), combined 1 (-712; -728 at 0.5, -1027 at 2)
_COMMON = dict(mix="split", episode_scale=1.0, expert_noise=0.3, hidden=32, lr=3e-3, batch=128, gamma=0.99,
               tau=0.005, policy_noise=0.2, noise_clip=0.5, policy_freq=2, alpha=2.5, alpha0=1.0, alpha2=1.0,
               rho=0.1, temperature=1.0, beta=0.1, eval_every=4, workers=1, temp_fedora=0.5, temp_q_std=1.0, temp_combined=1.0, n_score=1000, eval_episodes=10, last_rounds=3,
               runs=list(RUNS))
EXPERIMENT_PROFILES = {
    "smoke": {**_COMMON, "seeds": [0], "rounds": 8, "local_steps": 10, "eval_episodes": 4, "n_score": 200,
              "episode_scale": 0.2},
    "book": {**_COMMON, "seeds": [1000, 1001, 1002, 1003, 1004], "rounds": 48, "local_steps": 50, "workers": 2},
    "paper": {**_COMMON, "seeds": [0, 1, 2, 3, 4], "workers": 2, "rounds": 120, "local_steps": 95, "hidden": 256, "batch": 256,
              "lr": 3e-4, "eval_episodes": 20, "n_score": 5000},
}
EXPERIMENT_BOUNDS = dict(mix=set(CLIENT_MIXES), episode_scale=(0.01, None), expert_noise=(0.0, None),
                         hidden=(1, None), lr=(0.0, None), batch=(1, None), gamma=(0.0, 1.0), tau=(0.0, 1.0),
                         policy_noise=(0.0, None), noise_clip=(0.0, None), policy_freq=(1, None), alpha=(0.0, None),
                         alpha0=(0.0, None), alpha2=(0.0, None), rho=(0.0, 1.0), temperature=(0.0, None),
                         beta=(0.0, None), temp_fedora=(0.0, None), temp_q_std=(0.0, None),
                         temp_combined=(0.0, None), n_score=(1, None), eval_every=(1, None), workers=(1, None), eval_episodes=(1, None), last_rounds=(1, None),
                         runs=re.compile("(" + "|".join(RUNS) + r")(@[0-9.]+)?"), rounds=(1, None), local_steps=(1, None))
_HP_KEYS = ("hidden", "lr", "batch", "gamma", "tau", "policy_noise", "noise_clip", "policy_freq", "alpha", "alpha0",
            "alpha2", "rho", "temperature", "beta")


def hyperparameters(cfg) -> dict:
    """The local learner's and the server's settings of ``cfg`` as :class:`~.method.Federation` takes them."""
    return {key: getattr(cfg, key) for key in _HP_KEYS}


def pack_clients(datasets: list, n_runs: int, n_score: int, seed: int) -> dict:
    """The client data sets as member tensors of a federation of ``n_runs`` runs, padded to the
    largest client, and a fixed random subset of at most ``n_score`` transitions per client on
    which J_k and PI_k are measured. ``datasets`` is the list of the K clients (every run holds the
    same clients: member r K + k holds client k's data) or a list of ``n_runs`` such lists (run r's
    own clients, e.g. the pooled oracle's K copies of the experts' data)."""
    per_run = datasets if isinstance(datasets[0], list) else [datasets] * n_runs
    flat = [d for run in per_run for d in run]
    n_max = max(len(d["obs"]) for d in flat)

    def pad(x):
        out = np.zeros((n_max, *x.shape[1:]), np.float32)
        out[: len(x)] = x
        return out

    data = {key: torch.tensor(np.stack([pad(d[key]) for d in flat])) for key in ("obs", "action", "reward", "next_obs")}
    width = min(n_score, n_max)
    idx, mask = np.zeros((len(flat), width), np.int64), np.zeros((len(flat), width), np.float32)
    for m, d in enumerate(flat):
        rng = np.random.default_rng([seed, 5, m % len(per_run[0])])  # the same subset for client k in every run
        take = rng.choice(len(d["obs"]), min(len(d["obs"]), width), replace=False)
        idx[m, : len(take)], mask[m, : len(take)] = take, 1.0
    data["size"] = torch.tensor([float(len(d["obs"])) for d in flat])
    data["score_idx"] = torch.tensor(idx)
    data["score_mask"] = torch.tensor(mask)
    return data


def run_seed(cfg, seed: int, progress=None) -> dict:
    """Every run of ``cfg.runs`` for one seed as one batched federation (same client data, same
    initial global model, same evaluation start states): ``rounds`` rows (seed, run, round, global
    return and normalised score), ``clients`` rows (seed, run, round, client, kind, J, PI, weight,
    local return, alpha_0, delta, S_local, S_global), the seed's ``reference`` returns and the
    seconds it took."""
    start = time.perf_counter()
    seed_everything(seed)
    datasets = client_datasets(seed, cfg.mix, cfg.episode_scale, cfg.expert_noise)
    kinds = [d["kind"] for d in datasets]
    names = list(cfg.runs)
    specs = [make_spec(name, kinds, cfg) for name in names]
    starts = initial_states(cfg.eval_episodes, seed)
    reference = reference_returns(starts)
    pooled = pooled_data(datasets)
    per_run = [[pooled] * len(kinds) if name.partition("@")[0] == "pooled" else datasets for name in names]
    fed = Federation(specs, len(kinds), pack_clients(per_run, len(specs), cfg.n_score, seed), hyperparameters(cfg),
                     seed)
    rounds, clients = [], []
    for t in range(cfg.rounds):
        begin = fed.start_round()
        for _ in range(cfg.local_steps):
            fed.local_step()
        end = fed.finish_round()
        evaluated = (t + 1) % cfg.eval_every == 0 or t == cfg.rounds - 1
        if evaluated:
            local = evaluate_actor(fed.act_local, starts, fed.M).mean(1).reshape(fed.R, fed.K)
            glob = evaluate_actor(fed.act_global, starts, fed.R).mean(1)
        else:
            local, glob = np.full((fed.R, fed.K), np.nan), np.full(fed.R, np.nan)
        for r, name in enumerate(names):
            rounds.append({"seed": seed, "run": name, "round": t, "global_return": float(glob[r]),
                           "global_score": float(normalised_score(glob[r], reference)), "c": float(end["c"][r])})
            for k, kind in enumerate(kinds):
                m = r * fed.K + k
                clients.append({"seed": seed, "run": name, "round": t, "client": k,
                                "kind": "pooled" if name.partition("@")[0] == "pooled" else kind,
                                "j": float(end["j"][r, k]), "pi": float(end["pi"][r, k]),
                                "weight": float(end["weights"][r, k]), "local_return": float(local[r, k]),
                                "alpha0": float(begin["alpha0"][m]), "delta": float(fed.delta[m]),
                                "s_local": float(begin["s_local"][m]), "s_global": float(begin["s_global"][m])})
        if progress is not None:
            progress.update(1)
    return {"rounds": rounds, "clients": clients, "reference": {"seed": seed, **reference},
            "seconds": {"seed": seed, "seconds": time.perf_counter() - start}}


def _seed_job(cfg, seed: int, threads: int) -> dict:
    """:func:`run_seed` in a worker process, on ``threads`` threads."""
    with compute_threads(threads):
        return run_seed(cfg, seed)


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed of ``cfg`` on ``threads`` torch threads; with ``cfg.workers``
    > 1 the seeds run on that many spawned processes (each seed is seeded on its own, so the results
    do not depend on it). DataFrames ``rounds``, ``clients``, ``reference`` and ``seconds``."""
    workers = min(int(getattr(cfg, "workers", 1)), len(cfg.seeds))
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_seed_job, cfg, seed, threads) for seed in cfg.seeds]
            runs = []
            for future in futures:
                runs.append(future.result())
                if progress is not None:
                    progress.update(cfg.rounds)
    else:
        with compute_threads(threads):
            runs = [run_seed(cfg, seed, progress) for seed in cfg.seeds]
    return {"rounds": pd.DataFrame([row for run in runs for row in run["rounds"]]),
            "clients": pd.DataFrame([row for run in runs for row in run["clients"]]),
            "reference": pd.DataFrame([run["reference"] for run in runs]),
            "seconds": pd.DataFrame([run["seconds"] for run in runs])}


def final_return(rounds: pd.DataFrame, seed: int, run: str, last: int) -> float:
    """Mean global return of ``run`` over its last ``last`` evaluated rounds (nan if the run is missing)."""
    sel = rounds[(rounds["seed"] == seed) & (rounds["run"] == run)].dropna(subset=["global_return"])
    return float(sel.nlargest(last, "round")["global_return"].mean()) if len(sel) else float("nan")


def evaluated_rounds(rounds: pd.DataFrame, seed: int) -> list:
    """The rounds of ``seed`` whose policies were evaluated, in order."""
    sel = rounds[(rounds["seed"] == seed)].dropna(subset=["global_return"])
    return sorted(sel["round"].unique())


def expert_mass(clients: pd.DataFrame, seed: int, run: str, round_: int) -> float:
    """Server weight on the expert clients of ``run`` in round ``round_`` (nan if missing)."""
    sel = clients[(clients["seed"] == seed) & (clients["run"] == run) & (clients["round"] == round_)]
    return float(sel.loc[sel["kind"] == "expert", "weight"].sum()) if len(sel) else float("nan")


def _client_mean(clients, seed, run, kind, column, rounds_) -> float:
    sel = clients[(clients["seed"] == seed) & (clients["run"] == run) & (clients["kind"] == kind)
                  & clients["round"].isin(list(rounds_))]
    return float(sel[column].mean()) if len(sel) else float("nan")


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of chapter.yml. ``final(run)`` = mean global
    return over the last ``cfg.last_rounds`` evaluated rounds; ``tail`` = those rounds. p1 = normalised
    score of the pooled oracle (mean of its copies) over the tail; p2 = the pooled oracle's return
    minus the best isolated client's, over the tail; p3 = J of the medium client, fedora_stress minus
    fedora, over the tail; h1 = final(combined) - final(fedora); h2 = final(combined_adaptive) -
    final(fedora); m1 = final(combined) - final(q_std); m2 = expert weight mass in round 1, combined -
    q_std; m3 = final(combined_stress) - final(q_std_stress); m4 = the expert clients' mean local
    return over all evaluated rounds, combined_adaptive - combined_keep; x1 = final(fedora) -
    final(uniform); x2 = final(fedora) - the best isolated client over the tail; x3 =
    final(combined_keep) - final(combined); x4 = final(combined_adaptive_overwrite) -
    final(combined); x5 = final(combined_stress) - final(fedora_stress)."""
    rounds, clients = results["rounds"], results["clients"]
    reference = results["reference"].set_index("seed")
    values = {}
    for seed in cfg.seeds:
        done = evaluated_rounds(rounds, seed)
        tail = done[-cfg.last_rounds:]

        def final(run):
            return final_return(rounds, seed, run, cfg.last_rounds)

        alone = clients[(clients["seed"] == seed) & (clients["run"] == "isolated") & clients["round"].isin(tail)]
        best_alone = float(alone.groupby("client")["local_return"].mean().max()) if len(alone) else float("nan")
        pooled = _client_mean(clients, seed, "pooled", "pooled", "local_return", tail)
        values[seed] = {
            "p1_pooled_learns": float(normalised_score(pooled, reference.loc[seed].to_dict())),
            "p2_room_for_federation": pooled - best_alone,
            "p3_stress_inflates_j": (_client_mean(clients, seed, "fedora_stress", "medium", "j", tail)
                                     - _client_mean(clients, seed, "fedora", "medium", "j", tail)),
            "h1_weights_vs_fedora": final("combined") - final("fedora"),
            "h2_plugin_vs_fedora": final("combined_adaptive") - final("fedora"),
            "m1_inconsistency_term": final("combined") - final("q_std"),
            "m2_early_expert_mass": expert_mass(clients, seed, "combined", 1) - expert_mass(clients, seed, "q_std", 1),
            "m3_stress_combined_vs_q_only": final("combined_stress") - final("q_std_stress"),
            "m4_adaptive_protects_experts": (_client_mean(clients, seed, "combined_adaptive", "expert", "local_return",
                                                          done)
                                             - _client_mean(clients, seed, "combined_keep", "expert", "local_return",
                                                            done)),
            "x1_fedora_vs_uniform": final("fedora") - final("uniform"),
            "x2_fedora_vs_best_alone": final("fedora") - best_alone,
            "x3_keep_vs_overwrite": final("combined_keep") - final("combined"),
            "x4_adaptive_with_overwrite": final("combined_adaptive_overwrite") - final("combined"),
            "x5_stress_combined_vs_fedora": final("combined_stress") - final("fedora_stress"),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
