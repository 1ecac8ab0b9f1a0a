"""Running chapters: plan a run (every bad input refused before anything executes), execute the
notebooks with papermill, and merge per-seed results. The command line (`replib.cli`) and the Dask
path (`replib.cluster`) both use it; it imports neither.

A run writes ``<out>/<slug>/``: the executed notebooks and the results file. A folder that already
holds a run is refused unless ``force`` (then it is emptied first), so two runs never mix.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import yaml

from .core.fingerprint import NOTEBOOKS
from .core.ledger import Ledger, read_json, validate_seeds, write_json_atomic
from .core.paths import check_slug, load_chapter, repo_root, require_repo_root
from .core.profiles import PROFILES

EXPERIMENT = NOTEBOOKS[-1]
# The kernel process's own log lines ("running over TCP without encryption": kernel and papermill
# talk over loopback; "KeyboardInterrupt caught in kernel" as it shuts down) are not the reader's
# concern. The notebooks' warnings and errors still show, and a failing cell still fails the run.
KERNEL_QUIET = ["--IPKernelApp.log_level=CRITICAL"]
FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


class UsageError(Exception):
    """A bad chapter, profile, parameter or output folder: refused before anything runs (exit 2)."""


class NotebookFailed(RuntimeError):
    """A notebook raised while it ran; the message names the notebook, the cell and the executed copy."""


def parse_assignments(pairs: list[str]) -> dict:
    """-p NAME=VALUE pairs; VALUE is read as YAML (5000 -> int, 0.5 -> float, [1, 2] -> list), and a
    number YAML 1.1 leaves as a string (1e-4) as a float."""
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"-p expects NAME=VALUE, got {pair!r}")
        parsed = yaml.safe_load(value)
        params[name] = float(value) if isinstance(parsed, str) and FLOAT.fullmatch(value.strip()) else parsed
    return params


def notebook_path(slug: str, stem: str) -> Path:
    return require_repo_root() / "notebooks" / slug / f"{stem}.ipynb"


def experiment_module(slug: str):
    return importlib.import_module(f"replib.papers.{check_slug(slug)}.experiment")


def experiment_parameters(slug: str) -> dict:
    """The experiment notebook's parameters (name -> papermill's description: inferred default and the
    comment that explains it). Without a clone (an installed wheel, as in Colab) the notebook is not at
    hand: the names come from the chapter's book profile, without the comments."""
    if repo_root() is None:
        names = ["profile", *experiment_module(slug).EXPERIMENT_PROFILES["book"]]
        return {name: {"help": ""} for name in names}
    import papermill

    return papermill.inspect_notebook(str(notebook_path(slug, EXPERIMENT)))


def plan_run(slug: str, profile: str, seeds: list[int] | None, overrides: dict) -> dict:
    """Check a chapter's run before anything executes; return the parameters to inject."""
    try:
        check_slug(slug)
    except ValueError as err:
        raise UsageError(str(err)) from err
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    if "profile" in overrides and overrides["profile"] != profile:
        raise UsageError(f"-p profile={overrides['profile']} conflicts with --profile {profile}: use --profile")
    if seeds is not None and "seeds" in overrides:
        raise UsageError("seeds given twice (--seeds and -p seeds=...): use --seeds")
    params = dict(overrides, profile=profile)
    if seeds is not None:
        params["seeds"] = list(seeds)
    if "seeds" in params:
        check_seeds(params["seeds"])
    valid = experiment_parameters(slug)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise UsageError(f"{slug}: unknown parameter(s) {', '.join(unknown)}; "
                         f"valid parameters: {', '.join(valid)}")
    check_types(slug, profile, params)
    return params


def check_seeds(seeds) -> None:
    """At least one seed, each a whole number named once: a repeated seed would fake a replication."""
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                            for s in seeds):
        raise UsageError(f"seeds must be a non-empty list of whole numbers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds names a seed twice: {' '.join(map(str, seeds))}")


def check_types(slug: str, profile: str, params: dict) -> None:
    """Refuse a value whose type differs from the profile's default (``-p steps=abc`` where steps is
    an int) or that lies outside the chapter's EXPERIMENT_BOUNDS (``-p steps=-5``), as the
    experiment's own :func:`replib.core.profiles.configure` would, but before any notebook runs."""
    from .core.profiles import configure

    module = experiment_module(slug)
    settings = {k: v for k, v in params.items() if k != "profile"}
    try:
        configure(module.EXPERIMENT_PROFILES, profile, getattr(module, "EXPERIMENT_BOUNDS", None), **settings)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{slug}: {err}") from err


def profile_seeds(slug: str, profile: str) -> list[int]:
    """The seeds a chapter's experiment runs at ``profile`` when none are given."""
    return list(experiment_module(slug).EXPERIMENT_PROFILES[profile]["seeds"])


def check_confirmatory(slug: str, seeds: list[int]) -> None:
    """Committed results come only from the confirmatory seeds the chapter declared before the run."""
    try:
        declared = validate_seeds(load_chapter(slug))
    except ValueError as err:
        raise UsageError(f"{slug}: {err}") from err
    if sorted(seeds) != sorted(declared):
        raise UsageError(f"{slug}: --update-results commits confirmatory results: run the seeds declared in "
                         f"chapter.yml (--seeds {' '.join(map(str, declared))}), not {seeds}")


def prepare_out(out: str, slugs: list[str], force: bool) -> Path:
    """The run's output folder, made and known to be writable; refused (before anything runs) when it
    is a file, cannot be written, or already holds a run of one of ``slugs`` (unless ``force``, which
    empties those chapters' folders: two runs never mix)."""
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as err:
        raise UsageError(f"--out {out}: cannot write there ({err.strerror or err})") from err
    held = [slug for slug in slugs if (root / slug).exists() and any((root / slug).iterdir())]
    if held and not force:
        raise UsageError(f"--out {out} already holds a run of {', '.join(held)}: choose another folder, or "
                         "add --force to replace it")
    for slug in held:
        shutil.rmtree(root / slug)
    return root.resolve()


def cells_seconds(path: Path) -> float:
    """A notebook's own run time: the sum of its cells' execution times, as papermill recorded them."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return round(sum(c.metadata.get("papermill", {}).get("duration") or 0.0 for c in nb.cells), 2)


def execute_notebook(slug: str, stem: str, profile: str, params: dict | None, out_dir: Path,
                     cell_progress: bool = False) -> float:
    """Execute one notebook of a chapter with papermill into ``out_dir/<stem>.ipynb`` at ``profile``
    (the experiment's ledger writes its results JSON into ``out_dir``); return its cells' seconds.
    ``cell_progress`` shows papermill's per-cell progress bar (for runs in a terminal). A failing cell
    raises NotebookFailed naming the notebook, the cell and the executed copy."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from .book import unattended_env

    out_dir.mkdir(parents=True, exist_ok=True)
    env = unattended_env(REPLIB_PROFILE=profile, REPLIB_RESULTS_DIR=str(out_dir))
    env["REPLIB_PROGRESS"] = "lines"  # the notebooks' progress bars as plain lines, echoed by ProgressEcho
    os.environ.update(env)
    executed = out_dir / f"{stem}.ipynb"
    try:
        papermill.execute_notebook(
            str(notebook_path(slug, stem)), str(executed), kernel_name="python3",
            progress_bar={"desc": f"  {slug}/{stem}", "leave": False} if cell_progress else False,
            parameters=params, cwd=str(notebook_path(slug, stem).parent), extra_arguments=KERNEL_QUIET,
            stderr_file=ProgressEcho(f"{slug}/{stem}"))
    except PapermillExecutionError as err:
        raise NotebookFailed(f"{slug}/{stem} failed in cell [{err.exec_count}] with {err.ename}: "
                             f"{str(err.evalue).strip()[:300]} (executed copy: {executed})") from None
    return cells_seconds(executed)


class ProgressEcho:
    """The kernel's stderr as papermill streams it: the notebook's progress lines (marked by
    core.display.progress in REPLIB_PROGRESS=lines mode) are printed on our stderr, prefixed with the
    notebook's name, as they arrive; everything else stays in the executed notebook only."""

    def __init__(self, label: str, stream=None):
        from .core.display import PROGRESS_MARK

        self.label, self.mark, self.stream, self.pending = label, PROGRESS_MARK, stream, ""

    def write(self, text: str) -> None:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.startswith(self.mark):
                print(f"  {self.label}: {line[len(self.mark):]}", file=self.stream or sys.stderr, flush=True)

    def flush(self) -> None:
        pass


def run_chapter(slug: str, profile: str, params: dict, out: str, on_notebook=None,
                cell_progress: bool = False) -> dict:
    """Execute the chapter's three notebooks with papermill into <out>/<slug>/ and return its results.

    The theory and implementation notebooks get the profile only (their parameters cell); the
    experiment gets `params`. The experiment's ledger writes <out>/<slug>/<slug>.json; this adds each
    notebook's run time.
    """
    out_dir = Path(out).resolve() / slug
    results_file = out_dir / f"{slug}.json"
    runtimes = {}
    for stem in NOTEBOOKS:
        runtimes[stem] = execute_notebook(slug, stem, profile,
                                          params if stem == EXPERIMENT else {"profile": profile}, out_dir,
                                          cell_progress)
        if on_notebook:
            on_notebook(slug, stem)
    if not results_file.is_file():
        raise RuntimeError(f"{slug}: the experiment ran but wrote no {results_file.name} (ledger.save())")
    results = read_json(results_file)
    results["runtime_s"] = runtimes
    write_json_atomic(results_file, results)
    return results


def merge_seed_results(slug: str, per_seed: dict[int, dict]) -> dict:
    """One results record from the experiment's per-seed records (seed -> record), judged over all
    seeds by :class:`replib.core.ledger.Ledger`. Fails naming the difference when the records'
    profile, parameters (seeds aside) or source fingerprint differ."""
    seeds = sorted(per_seed)
    first = per_seed[seeds[0]]
    for seed in seeds[1:]:
        other = per_seed[seed]
        for key in ("profile", "fingerprint"):
            if other[key] != first[key]:
                raise ValueError(f"{slug}: seed {seed} has {key} {other[key]!r}, seed {seeds[0]} has {first[key]!r}")
        mine = {k: v for k, v in other["parameters"].items() if k != "seeds"}
        theirs = {k: v for k, v in first["parameters"].items() if k != "seeds"}
        if mine != theirs:
            differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            raise ValueError(f"{slug}: seeds {seeds[0]} and {seed} ran with different parameters: {', '.join(differ)}")
    ledger = Ledger(slug, first["profile"], seeds, parameters={**first["parameters"], "seeds": seeds})
    for seed, record in per_seed.items():
        for claim in record["claims"]:
            value = claim["values"][record["seeds"].index(seed)]
            if value is not None:
                ledger.record(claim["id"], seed, value)
    merged = ledger.results()
    merged["fingerprint"], merged["sources"] = first["fingerprint"], first.get("sources")
    merged["runtime_s"] = {EXPERIMENT: round(sum(r["runtime_s"][EXPERIMENT] for r in per_seed.values()), 2)}
    merged["seed_runtimes_s"] = {str(s): per_seed[s]["runtime_s"][EXPERIMENT] for s in seeds}
    return merged
