"""Batch re-runs spread over a Dask cluster (`replib run ... --scheduler local:N` or `tcp://HOST:PORT`).

The unit of work is one execution of one notebook: the theory and implementation notebooks once per
chapter, the experiment once per (chapter, seed), each into its own folder under ``<out>/<slug>/``.
The per-seed results are merged by the ledger's own code into the one results file and claims table
that a single-process run writes, judged once over all seeds. Merging refuses per-seed runs whose
profile, parameters or source fingerprint differ. A failed task is reported with its chapter, seed
and executed notebook; the other tasks' outputs are kept, and no merged file is written from a
partial set. Dask is the optional extra ``cluster`` (``pip install -e '.[cluster]'``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from .core.fingerprint import NOTEBOOKS
from .core.ledger import read_json, write_json_atomic
from .runner import EXPERIMENT, execute_notebook, merge_seed_results, profile_seeds


class TaskFailed(RuntimeError):
    """One notebook execution failed on a worker."""


def parse_scheduler(spec: str) -> tuple[str, int | str]:
    """'local' or 'local:N' -> ("local", N) (N worker processes, 2 by default); 'tcp://HOST:PORT' ->
    ("address", spec). Anything else fails naming the accepted forms."""
    if spec == "local" or spec.startswith("local:"):
        count = spec.partition(":")[2] or "2"
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"--scheduler {spec!r}: the worker count must be a whole number >= 1")
        return "local", int(count)
    if spec.startswith("tcp://") and spec.rpartition(":")[2].isdigit():
        return "address", spec
    raise ValueError(f"--scheduler {spec!r}: use local, local:N or tcp://HOST:PORT")


@contextlib.contextmanager
def dask_client(spec: str):
    """A distributed.Client on a loopback LocalCluster (one thread per worker) or on a running
    scheduler's address."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as err:
        raise RuntimeError("--scheduler needs Dask: pip install -e '.[cluster]'") from err
    kind, value = parse_scheduler(spec)
    if kind == "local":
        with LocalCluster(n_workers=value, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as cluster, Client(cluster) as client:
            yield client
    else:
        with Client(value) as client:
            yield client


def notebook_task(slug: str, stem: str, profile: str, params: dict | None, out_dir: str) -> dict:
    """Run on a worker: execute one notebook; return its seconds and, for the experiment, its results.
    A failure raises TaskFailed naming the chapter, the notebook and where the executed copy is."""
    folder = Path(out_dir)
    try:
        seconds = execute_notebook(slug, stem, profile, params, folder)
    except Exception as err:
        raise TaskFailed(f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''} "
                         f"(executed notebook: {folder / (stem + '.ipynb')})") from None
    results = read_json(folder / f"{slug}.json") if stem == EXPERIMENT else None
    return {"seconds": seconds, "results": results}


def run_on_cluster(plans: dict[str, dict], profile: str, out: str, spec: str, progress=None):
    """Run each chapter of ``plans`` (slug -> injected parameters) over the cluster: its theory and
    implementation notebooks once, its experiment once per seed. Returns (results per chapter that
    completed, failure messages per chapter)."""
    from distributed import as_completed

    out_root = Path(out).resolve()
    results, failed = {}, {}
    with dask_client(spec) as client:
        futures = {}
        for slug, params in plans.items():
            seeds = params.get("seeds") or profile_seeds(slug, profile)
            for stem in NOTEBOOKS[:-1]:
                future = client.submit(notebook_task, slug, stem, profile, None, str(out_root / slug),
                                       pure=False)
                futures[future] = (slug, stem, None)
            for seed in seeds:
                future = client.submit(notebook_task, slug, EXPERIMENT, profile, {**params, "seeds": [seed]},
                                       str(out_root / slug / f"seed_{seed}"), pure=False)
                futures[future] = (slug, EXPERIMENT, seed)
        done: dict[str, dict] = {slug: {} for slug in plans}
        for future in as_completed(futures):
            slug, stem, seed = futures[future]
            try:
                done[slug][(stem, seed)] = future.result()
            except Exception as err:
                where = f"seed {seed}" if seed is not None else stem
                failed.setdefault(slug, []).append(((NOTEBOOKS.index(stem), seed or 0), f"{where}: {err}"))
            if progress:
                progress()
    for slug in plans:
        if slug in failed:
            continue
        per_seed = {seed: out["results"] for (stem, seed), out in done[slug].items() if stem == EXPERIMENT}
        merged = merge_seed_results(slug, per_seed)
        merged["runtime_s"] = {**{stem: done[slug][(stem, None)]["seconds"] for stem in NOTEBOOKS[:-1]},
                               **merged["runtime_s"]}
        write_json_atomic(out_root / slug / f"{slug}.json", merged)
        results[slug] = merged
    # in notebook and seed order, not the order the workers happened to finish in
    return results, {slug: "\n  ".join(msg for _, msg in sorted(msgs)) for slug, msgs in failed.items()}
