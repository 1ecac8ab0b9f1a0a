"""Replay: re-run one seed of a chapter's committed book-profile results and compare every per-seed
claim value with the committed one. The only guard against results that drift from the code: a
committed value edited by hand, or code changed after the run, shows up as a mismatch.

A chapter is replayed exactly (its seeds run on one thread and do not depend on each other), unless
its ``chapter.yml`` declares ``replay_rtol`` with the reason in a comment. A chapter that trains the
models of several seeds as one batched model declares ``replay_batch``: the float rounding of a batched
step depends on the batch-mates, so a replay re-runs the seed's whole batch (see :func:`replay_plan`).
Wall-clock measurements (a metric or unit in seconds) cannot repeat and are skipped, and said to be.
"""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

from .core.ledger import read_json
from .core.paths import check_slug, load_chapter
from .core.results import committed_results, read_results, results_dir
from .runner import execute_notebook

WALL_CLOCK = re.compile(r"wall[- ]?clock|\b(milli)?seconds?\b", re.I)


def is_wall_clock(claim: dict) -> bool:
    """A measurement read off the clock: it cannot repeat, so a replay skips it."""
    return claim["role"] == "measurement" and bool(WALL_CLOCK.search(f"{claim.get('unit') or ''} {claim['metric']}"))


def tolerance(slug: str) -> float:
    """The relative tolerance a replay of the chapter allows: 0 (exact) unless chapter.yml declares one."""
    rtol = load_chapter(slug).get("replay_rtol", 0.0)
    if not isinstance(rtol, (int, float)) or isinstance(rtol, bool) or not 0 <= rtol < 1:
        raise ValueError(f"{slug}: replay_rtol must be a number in [0, 1), got {rtol!r}")
    return float(rtol)


def replay_plan(slug: str, seeds: list[int], seed: int) -> tuple[list[int], dict]:
    """The seeds a replay of ``seed`` runs in one notebook, and the notebook parameters it adds.

    Without ``replay_batch`` in chapter.yml: ``[seed]`` alone. With ``replay_batch: {groups: G,
    parameters: {...}}``: the book profile split its committed ``seeds`` into the batches
    ``seeds[k::G]``, so the replay runs the batch that holds ``seed``, with ``parameters`` making that
    batch one run (e.g. ``workers: 1`` where the profile spreads the batches over processes)."""
    spec = load_chapter(slug).get("replay_batch")
    if spec is None:
        return [seed], {}
    groups, parameters = (spec.get("groups"), spec.get("parameters", {})) if isinstance(spec, dict) else (None, None)
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or not isinstance(parameters, dict):
        raise ValueError(f"{slug}: replay_batch must be {{groups: a whole number >= 1, parameters: a mapping}}, "
                         f"got {spec!r}")
    return next(seeds[k::groups] for k in range(groups) if seed in seeds[k::groups]), dict(parameters)


def same(a: float | None, b: float | None, rtol: float) -> bool:
    """Whether two per-seed values agree: both missing, equal infinities, or within ``rtol``."""
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)) or (isinstance(b, float) and math.isnan(b)):
        return (a is None or math.isnan(a)) and (b is None or math.isnan(b))
    if math.isinf(a) or math.isinf(b):
        return a == b
    return a == b if rtol == 0 else math.isclose(a, b, rel_tol=rtol, abs_tol=0.0)


def compare(committed: dict, replayed: dict, seed: int, rtol: float) -> list[dict]:
    """One row per claim of the committed record: its value at ``seed`` there and in the replay, and
    whether they agree (wall-clock measurements skipped)."""
    again = {c["id"]: c["values"][replayed["seeds"].index(seed)] for c in replayed["claims"]}
    column = committed["seeds"].index(seed)
    rows = []
    for claim in committed["claims"]:
        old, new = claim["values"][column], again.get(claim["id"])
        status = "skipped (wall clock)" if is_wall_clock(claim) else \
            "missing in the replay" if claim["id"] not in again else \
            "same" if same(old, new, rtol) else "DIFFERS"
        rows.append({"claim": claim["id"], "committed": old, "replayed": new, "status": status})
    return rows


def run_replay(slug: str, seed: int | None = None, out: str | None = None) -> tuple[int, list[dict]]:
    """Execute the chapter's experiment at the book profile on one committed seed (the first when
    ``seed`` is None; with its batch-mates, :func:`replay_plan`) and compare at that seed; returns
    (the seed, the rows of :func:`compare`)."""
    check_slug(slug)
    committed = read_results(results_dir() / f"{slug}.json")
    seed = committed["seeds"][0] if seed is None else seed
    if seed not in committed["seeds"]:
        raise ValueError(f"{slug}: seed {seed} is not one of the committed seeds "
                         f"{', '.join(map(str, committed['seeds']))}")
    rtol = tolerance(slug)
    batch, parameters = replay_plan(slug, committed["seeds"], seed)
    with tempfile.TemporaryDirectory(prefix=f"replay-{slug}-") as scratch:
        folder = Path(out or scratch) / slug
        # the committed parameters are the book profile's (a test says so): the seeds are all to inject,
        # with what makes a batched chapter's batch one run
        execute_notebook(slug, "03_experiment", "book", {"profile": "book", "seeds": batch, **parameters}, folder)
        replayed = read_json(folder / f"{slug}.json")
    return seed, compare(committed, replayed, seed, rtol)


def cheapest_chapter() -> str:
    """The chapter whose committed experiment took the least time per seed."""
    results = committed_results()
    return min(results, key=lambda s: results[s]["runtime_s"]["03_experiment"] / len(results[s]["seeds"]))
