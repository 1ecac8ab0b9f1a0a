"""The experiment: seven federations per seed on the same client data (clients trained alone, FedAvg,
FEDORA, the paper's combined weights, combined weights with the adaptive pull, and the stress
variant of FEDORA and of the combined weights), their learning curves and the claim values.

Contents: :data:`RUNS` (name -> how to build its :class:`~.method.RunSpec`), :data:`EXPERIMENT_PROFILES`,
:data:`EXPERIMENT_BOUNDS`, :func:`pack_clients` (client data as padded member tensors),
:func:`run_seed`, :func:`run_experiment`, :func:`final_return`, :func:`expert_mass` and
:func:`claim_values`.
"""

from __future__ import annotations

import time

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
           "run_experiment", "final_return", "expert_mass", "claim_values"]


def _stress_bc(kinds: list) -> list:
    """The stress variant: medium clients train pure TD3 (no behaviour-cloning term)."""
    return [0.0 if kind == "medium" else 1.0 for kind in kinds]


RUNS = {
    "isolated": lambda kinds: RunSpec("none", keep_own=True),
    "uniform": lambda kinds: RunSpec("uniform"),
    "fedora": lambda kinds: RunSpec("q_softmax"),
    "combined": lambda kinds: RunSpec("combined"),
    "combined_adaptive": lambda kinds: RunSpec("combined", keep_own=True, adaptive=True),
    "fedora_stress": lambda kinds: RunSpec("q_softmax", bc=_stress_bc(kinds)),
    "combined_stress": lambda kinds: RunSpec("combined", bc=_stress_bc(kinds)),
}

_COMMON = dict(mix="mixed", episode_scale=1.0, expert_noise=0.3, hidden=32, lr=3e-3, batch=128, gamma=0.99,
               tau=0.005, policy_noise=0.2, noise_clip=0.5, policy_freq=2, alpha=2.5, alpha0=1.0, alpha2=1.0,
               rho=0.1, temperature=1.0, beta=0.1, n_score=1000, eval_episodes=10, last_rounds=3,
               runs=list(RUNS))
EXPERIMENT_PROFILES = {
    "smoke": {**_COMMON, "seeds": [0], "rounds": 4, "local_steps": 20, "eval_episodes": 4, "n_score": 200,
              "episode_scale": 0.2},
    "book": {**_COMMON, "seeds": [0, 1, 2], "rounds": 12, "local_steps": 200},
    "paper": {**_COMMON, "seeds": [0, 1, 2, 3, 4], "rounds": 30, "local_steps": 380, "hidden": 256, "batch": 256,
              "lr": 3e-4, "eval_episodes": 20, "n_score": 5000},
}
EXPERIMENT_BOUNDS = dict(mix=set(CLIENT_MIXES), episode_scale=(0.01, None), expert_noise=(0.0, None),
                         hidden=(1, None), lr=(0.0, None), batch=(1, None), gamma=(0.0, 1.0), tau=(0.0, 1.0),
                         policy_noise=(0.0, None), noise_clip=(0.0, None), policy_freq=(1, None), alpha=(0.0, None),
                         alpha0=(0.0, None), alpha2=(0.0, None), rho=(0.0, 1.0), temperature=(0.0, None),
                         beta=(0.0, None), n_score=(1, None), eval_episodes=(1, None), last_rounds=(1, None),
                         runs=set(RUNS), rounds=(1, None), local_steps=(1, None))
_HP_KEYS = ("hidden", "lr", "batch", "gamma", "tau", "policy_noise", "noise_clip", "policy_freq", "alpha", "alpha0",
            "alpha2", "rho", "temperature", "beta")


def hyperparameters(cfg) -> dict:
    """The local learner's and the server's settings of ``cfg`` as :class:`~.method.Federation` takes them."""
    return {key: getattr(cfg, key) for key in _HP_KEYS}


def pack_clients(datasets: list, n_runs: int, n_score: int, seed: int) -> dict:
    """The K client data sets as member tensors of a federation of ``n_runs`` runs (member r K + k
    holds client k's data), padded to the largest client, and a fixed random subset of at most
    ``n_score`` transitions per client on which J_k and PI_k are measured."""
    n_max = max(len(d["obs"]) for d in datasets)

    def pad(x):
        out = np.zeros((n_max, *x.shape[1:]), np.float32)
        out[: len(x)] = x
        return out

    per = {key: torch.tensor(np.stack([pad(d[key]) for d in datasets])) for key in ("obs", "action", "reward", "next_obs")}
    rng = np.random.default_rng([seed, 5])
    width = min(n_score, n_max)
    idx, mask = np.zeros((len(datasets), width), np.int64), np.zeros((len(datasets), width), np.float32)
    for k, d in enumerate(datasets):
        take = rng.choice(len(d["obs"]), min(len(d["obs"]), width), replace=False)
        idx[k, : len(take)], mask[k, : len(take)] = take, 1.0
    data = {key: value.repeat(n_runs, *[1] * (value.dim() - 1)) for key, value in per.items()}
    data["size"] = torch.tensor([float(len(d["obs"])) for d in datasets]).repeat(n_runs)
    data["score_idx"] = torch.tensor(idx).repeat(n_runs, 1)
    data["score_mask"] = torch.tensor(mask).repeat(n_runs, 1)
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
    specs = [RUNS[name](kinds) for name in names]
    starts = initial_states(cfg.eval_episodes, seed)
    reference = reference_returns(starts)
    fed = Federation(specs, len(kinds), pack_clients(datasets, len(specs), cfg.n_score, seed), hyperparameters(cfg),
                     seed)
    rounds, clients = [], []
    for t in range(cfg.rounds):
        begin = fed.start_round()
        for _ in range(cfg.local_steps):
            fed.local_step()
        end = fed.finish_round()
        local = evaluate_actor(fed.act_local, starts, fed.M).mean(1).reshape(fed.R, fed.K)
        glob = evaluate_actor(fed.act_global, starts, fed.R).mean(1)
        for r, name in enumerate(names):
            rounds.append({"seed": seed, "run": name, "round": t, "global_return": float(glob[r]),
                           "global_score": float(normalised_score(glob[r], reference)), "c": float(end["c"][r])})
            for k, kind in enumerate(kinds):
                m = r * fed.K + k
                clients.append({"seed": seed, "run": name, "round": t, "client": k, "kind": kind,
                                "j": float(end["j"][r, k]), "pi": float(end["pi"][r, k]),
                                "weight": float(end["weights"][r, k]), "local_return": float(local[r, k]),
                                "alpha0": float(begin["alpha0"][m]), "delta": float(fed.delta[m]),
                                "s_local": float(begin["s_local"][m]), "s_global": float(begin["s_global"][m])})
        if progress is not None:
            progress.update(1)
    return {"rounds": rounds, "clients": clients, "reference": {"seed": seed, **reference},
            "seconds": {"seed": seed, "seconds": time.perf_counter() - start}}


def run_experiment(cfg, progress=None, threads: int = 1) -> dict:
    """:func:`run_seed` for every seed of ``cfg`` on ``threads`` torch threads; DataFrames ``rounds``,
    ``clients``, ``reference`` and ``seconds``."""
    with compute_threads(threads):
        runs = [run_seed(cfg, seed, progress) for seed in cfg.seeds]
    return {"rounds": pd.DataFrame([row for run in runs for row in run["rounds"]]),
            "clients": pd.DataFrame([row for run in runs for row in run["clients"]]),
            "reference": pd.DataFrame([run["reference"] for run in runs]),
            "seconds": pd.DataFrame([run["seconds"] for run in runs])}


def final_return(rounds: pd.DataFrame, seed: int, run: str, last: int) -> float:
    """Mean global return of ``run`` over its last ``last`` rounds (nan if the run is missing)."""
    sel = rounds[(rounds["seed"] == seed) & (rounds["run"] == run)]
    return float(sel.nlargest(last, "round")["global_return"].mean()) if len(sel) else float("nan")


def expert_mass(clients: pd.DataFrame, seed: int, run: str, round_: int) -> float:
    """Server weight on the expert clients of ``run`` in round ``round_`` (nan if missing)."""
    sel = clients[(clients["seed"] == seed) & (clients["run"] == run) & (clients["round"] == round_)]
    return float(sel.loc[sel["kind"] == "expert", "weight"].sum()) if len(sel) else float("nan")


def _client_mean(clients, seed, run, kind, column, rounds_) -> float:
    sel = clients[(clients["seed"] == seed) & (clients["run"] == run) & (clients["kind"] == kind)
                  & clients["round"].isin(list(rounds_))]
    return float(sel[column].mean()) if len(sel) else float("nan")


def claim_values(results: dict, cfg) -> dict[int, dict[str, float]]:
    """``{seed: {claim_id: value}}`` for every claim of chapter.yml. ``final`` = mean global return
    over the last ``cfg.last_rounds`` rounds. p1 = normalised score of the expert clients trained
    alone over the last rounds; p2 = J of the pure-TD3 (medium) clients minus J of the expert clients,
    last round of fedora_stress; h1 = final(combined) - final(uniform); h2 = final(combined_adaptive)
    - final(fedora); m1 = final(combined) - final(fedora); m2 = expert weight mass in round 1,
    combined - fedora; m3 = final(combined_stress) - final(fedora_stress); m4 = the expert clients'
    mean local return over rounds 1-3, combined_adaptive - combined; x1 = final(fedora) -
    final(uniform)."""
    rounds, clients = results["rounds"], results["clients"]
    reference = results["reference"].set_index("seed")
    last = cfg.last_rounds
    values = {}
    for seed in cfg.seeds:
        n_rounds = int(rounds.loc[rounds["seed"] == seed, "round"].max()) + 1
        tail = range(n_rounds - last, n_rounds)

        def final(run):
            return final_return(rounds, seed, run, last)

        alone = _client_mean(clients, seed, "isolated", "expert", "local_return", tail)
        values[seed] = {
            "p1_td3bc_learns_alone": float(normalised_score(alone, reference.loc[seed].to_dict())),
            "p2_stress_q_looks_good": (_client_mean(clients, seed, "fedora_stress", "medium", "j", [n_rounds - 1])
                                       - _client_mean(clients, seed, "fedora_stress", "expert", "j", [n_rounds - 1])),
            "h1_combined_vs_uniform": final("combined") - final("uniform"),
            "h2_plugin_vs_fedora": final("combined_adaptive") - final("fedora"),
            "m1_combined_vs_fedora": final("combined") - final("fedora"),
            "m2_early_expert_mass": expert_mass(clients, seed, "combined", 1) - expert_mass(clients, seed, "fedora", 1),
            "m3_stress_combined_vs_fedora": final("combined_stress") - final("fedora_stress"),
            "m4_adaptive_protects_experts": (_client_mean(clients, seed, "combined_adaptive", "expert", "local_return",
                                                          range(1, 4))
                                             - _client_mean(clients, seed, "combined", "expert", "local_return",
                                                            range(1, 4))),
            "x1_fedora_vs_uniform": final("fedora") - final("uniform"),
        }
    return {seed: {k: float(v) for k, v in claims.items()} for seed, claims in values.items()}
