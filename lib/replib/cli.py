"""The `replib` command: run chapters with papermill, regenerate the scoreboard, list and check results.

    replib run bidprice_routing --profile book --seeds 5 6 7 --out runs/x -p arrival_steps=400
    replib scoreboard | replib check | replib list | replib params foam --profile paper
    replib rejudge --all                (judge committed values again after a ledger or declaration change)
    replib replay foam --seed 1         (re-run a committed seed and compare every claim value)
    replib book | replib smoke          (what `make book` and `make test` call)
    replib sync                         (after editing a notebook's .py: Colab cell and .ipynb twin)
    replib student foam --out handout   (notebooks with the exercise answers replaced by stubs)
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import yaml

from .core.fingerprint import NOTEBOOKS
from .core.ledger import (
    format_interval,
    format_value,
    format_verdict,
    read_json,
    validate_seeds,
    violated_checks,
    write_json_atomic,
)
from .core.paths import chapter_slugs, check_slug, load_chapter, require_repo_root
from .core.profiles import PROFILES

EXIT_USAGE = 2
# The kernel process's own log lines ("running over TCP without encryption": kernel and papermill
# talk over loopback; "KeyboardInterrupt caught in kernel" as it shuts down) are not the reader's
# concern. The notebooks' warnings and errors still show, and a failing cell still fails the run.
KERNEL_QUIET = ["--IPKernelApp.log_level=CRITICAL"]


class UsageError(Exception):
    """A bad chapter, profile or parameter: refused before anything runs (exit 2)."""


def parse_assignments(pairs: list[str]) -> dict:
    """-p NAME=VALUE pairs; VALUE is read as YAML (5000 -> int, 0.5 -> float, [1, 2] -> list)."""
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"-p expects NAME=VALUE, got {pair!r}")
        params[name] = yaml.safe_load(value)
    return params


def notebook_path(slug: str, stem: str) -> Path:
    return require_repo_root() / "notebooks" / slug / f"{stem}.ipynb"


def experiment_parameters(slug: str) -> dict:
    """The experiment notebook's parameters (name -> inferred default), as papermill reads them."""
    import papermill

    return papermill.inspect_notebook(str(notebook_path(slug, "03_experiment")))


def plan_run(slug: str, profile: str, seeds: list[int] | None, overrides: dict) -> dict:
    """Check a chapter's run before anything executes; return the parameters to inject."""
    try:
        check_slug(slug)
    except ValueError as err:
        raise UsageError(str(err)) from err
    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    params = dict(overrides, profile=profile)
    if seeds is not None:
        if len(set(seeds)) != len(seeds):
            raise UsageError(f"--seeds names a seed twice: {' '.join(map(str, seeds))}")
        params["seeds"] = list(seeds)
    valid = experiment_parameters(slug)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise UsageError(f"{slug}: unknown parameter(s) {', '.join(unknown)}; "
                         f"valid parameters: {', '.join(valid)}")
    check_types(slug, profile, params)
    return params


def check_types(slug: str, profile: str, params: dict) -> None:
    """Refuse a value whose type differs from the profile's default (``-p steps=abc`` where steps is
    an int) or that lies outside the chapter's EXPERIMENT_BOUNDS (``-p steps=-5``), as the
    experiment's own :func:`replib.core.profiles.configure` would, but before any notebook runs."""
    import importlib

    from .core.profiles import configure

    module = importlib.import_module(f"replib.papers.{slug}.experiment")
    settings = {k: v for k, v in params.items() if k != "profile"}
    try:
        configure(module.EXPERIMENT_PROFILES, profile, getattr(module, "EXPERIMENT_BOUNDS", None), **settings)
    except (TypeError, ValueError) as err:
        raise UsageError(f"{slug}: {err}") from err


def book_seeds(slug: str) -> list[int]:
    """The seeds the chapter's book profile runs by default."""
    import importlib

    return list(importlib.import_module(f"replib.papers.{slug}.experiment").EXPERIMENT_PROFILES["book"]["seeds"])


def check_confirmatory(slug: str, seeds: list[int]) -> None:
    """Committed results come only from the confirmatory seeds the chapter declared before the run."""
    try:
        declared = validate_seeds(load_chapter(slug))
    except ValueError as err:
        raise UsageError(f"{slug}: {err}") from err
    if sorted(seeds) != sorted(declared):
        raise UsageError(f"{slug}: --update-results commits confirmatory results: run the seeds declared in "
                         f"chapter.yml (--seeds {' '.join(map(str, declared))}), not {seeds}")


def _cells_seconds(path: Path) -> float:
    """A notebook's own run time: the sum of its cells' execution times, as papermill recorded them."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return round(sum(c.metadata.get("papermill", {}).get("duration") or 0.0 for c in nb.cells), 2)


def execute_notebook(slug: str, stem: str, profile: str, params: dict | None, out_dir: Path,
                     cell_progress: bool = False) -> float:
    """Execute one notebook of a chapter with papermill into ``out_dir/<stem>.ipynb`` at ``profile``
    (the experiment's ledger writes its results JSON into ``out_dir``); return its cells' seconds.
    ``cell_progress`` shows papermill's per-cell progress bar (for runs in this terminal)."""
    import papermill

    out_dir.mkdir(parents=True, exist_ok=True)
    from .book import unattended_env

    os.environ.update(unattended_env(REPLIB_PROFILE=profile, REPLIB_RESULTS_DIR=str(out_dir)))
    executed = out_dir / f"{stem}.ipynb"
    papermill.execute_notebook(
        str(notebook_path(slug, stem)), str(executed), kernel_name="python3",
        progress_bar={"desc": f"  {slug}/{stem}", "leave": False} if cell_progress else False,
        parameters=params, cwd=str(notebook_path(slug, stem).parent), extra_arguments=KERNEL_QUIET)
    return _cells_seconds(executed)


def run_chapter(slug: str, profile: str, params: dict, out: str, on_notebook=None,
                cell_progress: bool = False) -> dict:
    """Execute the chapter's three notebooks with papermill into <out>/<slug>/ and return its results.

    The theory and implementation notebooks get the profile only (their parameters cell); the
    experiment gets `params`.
    The experiment's ledger writes <out>/<slug>/<slug>.json; this adds each notebook's run time.
    """
    out_dir = Path(out).resolve() / slug
    results_file = out_dir / f"{slug}.json"
    results_file.unlink(missing_ok=True)
    runtimes = {}
    for stem in NOTEBOOKS:
        runtimes[stem] = execute_notebook(slug, stem, profile,
                                          params if stem == "03_experiment" else {"profile": profile}, out_dir,
                                          cell_progress)
        if on_notebook:
            on_notebook(slug, stem)
    if not results_file.is_file():
        raise RuntimeError(f"{slug}: the experiment ran but wrote no {results_file.name} (ledger.save())")
    results = read_json(results_file)
    results["runtime_s"] = runtimes
    write_json_atomic(results_file, results)
    return results


def claims_table(results: dict) -> str:
    """A plain-text table of one run's claims: verdict, role, value mean ± sd over seeds, its 95%
    interval, threshold, how many seeds clear it, and for a headline its null, direction verdict and
    label."""
    rows = [("claim", "verdict", "role", "value (mean ± sd)", "95% interval", "threshold", "seeds clearing",
             "vs null", "label")]
    rows += [(c["id"], format_verdict(c["verdict"], c.get("seeds_needed")), c["role"],
              format_value(c["mean"], c["sd"]), format_interval(c["interval"]),
              f"{c['direction']} {c['threshold']}", f"{c['seeds_clearing']}/{len(c['values'])}",
              "" if c.get("null") is None else
              f"{c['null']}: {format_verdict(c.get('direction_verdict'), c.get('direction_seeds_needed'))}",
              c.get("label") or "")
             for c in results["claims"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    seconds = ", ".join(f"{k} {v:.1f} s" for k, v in results.get("runtime_s", {}).items())
    header = f"{results['slug']} (profile {results['profile']}, seeds {results['seeds']}; {seconds})"
    return "\n".join([header] + lines)


def _run_here(plans: dict, args) -> tuple[dict, dict]:
    """Every chapter in this machine's processes (`--jobs` at once), all seeds in one experiment run."""
    from tqdm import tqdm

    results, failed = {}, {}
    with tqdm(total=len(plans) * len(NOTEBOOKS), desc="notebooks", unit="nb") as bar:
        if args.jobs == 1:
            for slug, params in plans.items():
                try:
                    results[slug] = run_chapter(slug, args.profile, params, args.out,
                                                on_notebook=lambda *_: bar.update(), cell_progress=True)
                except Exception as err:  # report every chapter, then fail
                    failed[slug] = err
        else:
            with ProcessPoolExecutor(max_workers=args.jobs) as pool:
                futures = {pool.submit(run_chapter, s, args.profile, p, args.out): s for s, p in plans.items()}
                for future in as_completed(futures):
                    slug = futures[future]
                    try:
                        results[slug] = future.result()
                    except Exception as err:
                        failed[slug] = err
                    bar.update(len(NOTEBOOKS))
    return results, failed


def _run_on_scheduler(plans: dict, args) -> tuple[dict, dict]:
    """Every chapter over a Dask cluster, the experiment once per seed (see replib.cluster)."""
    from tqdm import tqdm

    from .cluster import profile_seeds, run_on_cluster

    tasks = sum(len(NOTEBOOKS) - 1 + len(p.get("seeds") or profile_seeds(s, args.profile)) for s, p in plans.items())
    with tqdm(total=tasks, desc="notebooks (the experiment once per seed)", unit="nb") as bar:
        return run_on_cluster(plans, args.profile, args.out, args.scheduler, progress=bar.update)


def cmd_run(args) -> int:
    slugs = chapter_slugs() if args.all else args.chapters
    if not slugs:
        raise UsageError("name at least one chapter, or --all; valid chapters: " + ", ".join(chapter_slugs()))
    overrides = parse_assignments(args.param or [])
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a file, not a folder")
    plans = {slug: plan_run(slug, args.profile, args.seeds, overrides) for slug in slugs}
    if args.update_results and args.profile != "book":
        raise UsageError("--update-results replaces the committed book-profile results: use --profile book")
    if args.update_results:
        for slug, params in plans.items():
            check_confirmatory(slug, params.get("seeds") or book_seeds(slug))
    if args.scheduler:
        from .cluster import parse_scheduler

        try:
            parse_scheduler(args.scheduler)
        except ValueError as err:
            raise UsageError(str(err)) from err
        if args.update_results:
            raise UsageError("--update-results needs a run on this machine (its runtimes are the book's "
                             "budget): drop --scheduler")
    print(f"writing the executed notebooks and results to {Path(args.out).resolve()}/<chapter>/")
    if args.scheduler:
        results, failed = _run_on_scheduler(plans, args)
    else:
        results, failed = _run_here(plans, args)
    for slug in slugs:
        if slug in results:
            print(claims_table(results[slug]) + "\n")
    if args.update_results:
        from .core.results import results_dir, write_scoreboard

        for slug, res in results.items():
            write_json_atomic(results_dir() / f"{slug}.json", res)

        print(f"updated data/results/ and {write_scoreboard()}")
    for slug, err in failed.items():
        print(f"{slug}: FAILED: {err}", file=sys.stderr)
    violated = [f"{slug}: check {line}" for slug, res in results.items() for line in violated_checks(res["claims"])]
    if violated:
        print("VIOLATED CHECKS (an invariant of the code does not hold): " + "; ".join(violated), file=sys.stderr)
    return 1 if failed or violated else 0


def parameter_table(slug: str, profile: str) -> list[tuple[str, str, str, str, str]]:
    """(name, type, default under ``profile``, allowed values, meaning) for each parameter of the
    chapter's experiment notebook: types and defaults from the chapter's EXPERIMENT_PROFILES, ranges
    from its EXPERIMENT_BOUNDS, meanings from the comments of the notebook's parameters cell."""
    import importlib

    from .core.profiles import describe_bound

    module = importlib.import_module(f"replib.papers.{check_slug(slug)}.experiment")
    defaults = module.EXPERIMENT_PROFILES[profile]
    bounds = {"seeds": (0, None), **getattr(module, "EXPERIMENT_BOUNDS", {})}
    rows = []
    for name, info in experiment_parameters(slug).items():
        if name == "profile":
            rows.append((name, "str", profile, ", ".join(PROFILES), info.get("help") or ""))
            continue
        default = defaults.get(name)
        allowed = "True, False" if isinstance(default, bool) else describe_bound(bounds.get(name))
        rows.append((name, type(default).__name__, repr(default), allowed, info.get("help") or ""))
    return rows


def cmd_params(args) -> int:
    try:
        check_slug(args.chapter)
    except ValueError as err:
        raise UsageError(str(err)) from err
    if args.profile not in PROFILES:
        raise UsageError(f"unknown profile {args.profile!r}; valid profiles: {', '.join(PROFILES)}")
    header = ("parameter", "type", f"default ({args.profile})", "allowed", "meaning")
    rows = [header] + parameter_table(args.chapter, args.profile)
    widths = [min(max(len(r[i]) for r in rows), 40) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4])
    return 0


def cmd_scoreboard(args) -> int:
    from .core.results import write_scoreboard

    print(write_scoreboard())
    return 0


def cmd_check(args) -> int:
    from .core.results import inconsistent_results, stale_results, unconfirmed_results

    problems = stale_results() + inconsistent_results()
    for line in problems:
        print(line)
    if not problems:
        print("every results file matches its sources, and its verdicts follow from its values")
    for line in unconfirmed_results():
        print(f"note: {line}")
    return 1 if problems else 0


def cmd_replay(args) -> int:
    """Re-run one committed seed of each chapter named and compare every per-seed claim value."""
    from .replay import cheapest_chapter, run_replay

    slugs = chapter_slugs() if args.all else [cheapest_chapter()] if args.cheapest else args.chapters
    if not slugs:
        raise UsageError("name at least one chapter, --cheapest or --all; valid chapters: " + ", ".join(chapter_slugs()))
    if args.seed is not None and len(slugs) > 1:
        raise UsageError("--seed names a seed of one chapter: name one chapter")
    try:
        for slug in slugs:
            check_slug(slug)
    except ValueError as err:
        raise UsageError(str(err)) from err
    failed = []
    for slug in slugs:
        try:
            seed, rows = run_replay(slug, args.seed, args.out)
        except ValueError as err:
            raise UsageError(str(err)) from err
        differ = [r for r in rows if r["status"] not in ("same", "skipped (wall clock)")]
        width = max(len(r["claim"]) for r in rows)
        print(f"{slug}: seed {seed} replayed, {len(rows) - len(differ)} of {len(rows)} claim values as committed")
        for r in rows:
            if r["status"] != "same":
                print(f"  {r['claim']:<{width}}  committed {r['committed']!r}  replayed {r['replayed']!r}  {r['status']}")
        if differ:
            failed.append(slug)
    if failed:
        print(f"replay: committed results differ from what the code gives in {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def cmd_rejudge(args) -> int:
    """Judge committed results again from their stored values (after a change of declarations or of
    the ledger), then regenerate the scoreboard."""
    from .core.results import rejudge_committed, write_scoreboard

    slugs = chapter_slugs() if args.all else args.chapters
    if not slugs:
        raise UsageError("name at least one chapter, or --all; valid chapters: " + ", ".join(chapter_slugs()))
    try:
        for slug in slugs:
            check_slug(slug)
        paths = [rejudge_committed(slug) for slug in slugs]
    except ValueError as err:
        raise UsageError(str(err)) from err
    for path in paths:
        print(f"re-judged {path}")
    print(f"updated {write_scoreboard()}")
    return 0


def cmd_list(args) -> int:
    from .core.results import committed_results

    results = committed_results()
    for slug in chapter_slugs():
        chapter = load_chapter(slug)
        verdicts = {c["id"]: format_verdict(c["verdict"], c.get("seeds_needed"))
                    + (f"; {c['label']}" if c.get("label") else "")
                    for c in results.get(slug, {}).get("claims", [])}
        print(f"{slug}: {chapter.get('title', '')}")
        for claim in chapter.get("claims", []):
            print(f"  {claim['id']:<22} {verdicts.get(claim['id'], 'no result yet'):<26} {claim['statement']}")
    return 0


def cmd_sync(args) -> int:
    """Regenerate every notebook's Colab cell from _config.yml, then its .ipynb from its .py."""
    import subprocess

    from .book import _bin
    from .core.colab import write_setup_cells

    sources = sorted((require_repo_root() / "notebooks").glob("*/0*.py"))
    for path in write_setup_cells(sources):
        print(f"updated the Colab cell of {path.name}")
    # --update keeps the cell ids (and the empty outputs) of the existing .ipynb: no churn in git
    subprocess.run([_bin("jupytext"), "--update", "--to", "ipynb", *map(str, sources)], check=True)
    return 0


def cmd_student(args) -> int:
    """Write student copies of a chapter's notebooks: exercise answers replaced by stubs."""
    from .core.student import write_student_notebooks

    try:
        slug = check_slug(args.chapter)
    except ValueError as err:
        raise UsageError(str(err)) from err
    for path in write_student_notebooks(require_repo_root() / "notebooks" / slug, Path(args.out) / slug):
        print(path)
    return 0


def cmd_book(args) -> int:
    from .book import build_book

    build_book(args.profile)
    return 0


def cmd_smoke(args) -> int:
    from .book import smoke

    smoke()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute chapters' notebooks with papermill and judge their claims")
    run.add_argument("chapters", nargs="*", help="chapter slugs (see `replib list`)")
    run.add_argument("--all", action="store_true", help="run every chapter")
    run.add_argument("--profile", default="book", help=f"one of {', '.join(PROFILES)} (default book)")
    run.add_argument("--seeds", type=int, nargs="+", help="seeds for the experiment (default: the profile's)")
    run.add_argument("-p", "--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    run.add_argument("--out", default="runs/latest", help="output folder (default runs/latest)")
    run.add_argument("--jobs", type=int, default=1, help="chapters run at once (default 1)")
    run.add_argument("--scheduler", metavar="SPEC",
                     help="spread the run over Dask: local[:N] (N loopback workers) or tcp://HOST:PORT; "
                          "one task per notebook, the experiment once per seed")
    run.add_argument("--update-results", action="store_true",
                     help="also replace data/results/<slug>.json and the scoreboard (book profile only)")
    run.set_defaults(func=cmd_run)
    params = sub.add_parser("params", help="a chapter's experiment parameters: type, default, meaning")
    params.add_argument("chapter")
    params.add_argument("--profile", default="book", help=f"one of {', '.join(PROFILES)} (default book)")
    params.set_defaults(func=cmd_params)
    sub.add_parser("scoreboard", help="regenerate book/scoreboard.md").set_defaults(func=cmd_scoreboard)
    sub.add_parser("check", help="name results whose sources changed, whose verdicts do not follow from their "
                   "values, or whose checks were violated").set_defaults(func=cmd_check)
    rejudge = sub.add_parser("rejudge", help="judge committed results again from their stored values (after a "
                             "change of declarations or of the ledger; no new run)")
    rejudge.add_argument("chapters", nargs="*", help="chapter slugs (see `replib list`)")
    rejudge.add_argument("--all", action="store_true", help="every chapter")
    rejudge.set_defaults(func=cmd_rejudge)
    replay = sub.add_parser("replay", help="re-run one committed seed at the book profile and compare every "
                            "per-seed claim value with the committed one (exit 1 on a difference)")
    replay.add_argument("chapters", nargs="*", help="chapter slugs (see `replib list`)")
    replay.add_argument("--all", action="store_true", help="every chapter")
    replay.add_argument("--cheapest", action="store_true", help="the chapter with the cheapest seed")
    replay.add_argument("--seed", type=int, help="the committed seed to replay (default: the first)")
    replay.add_argument("--out", help="keep the executed notebook and results here (default: a scratch folder)")
    replay.set_defaults(func=cmd_replay)
    sub.add_parser("list", help="chapters, claims and verdicts").set_defaults(func=cmd_list)
    book = sub.add_parser("book", help="execute (cached) and build the HTML book")
    book.add_argument("--profile", default="book", choices=PROFILES)
    book.set_defaults(func=cmd_book)
    sub.add_parser("smoke", help="nbmake every notebook at smoke, then build the book").set_defaults(func=cmd_smoke)
    sub.add_parser("sync", help="regenerate Colab cells and .ipynb twins from the .py notebooks").set_defaults(
        func=cmd_sync)
    student = sub.add_parser("student", help="student copies of a chapter: exercise answers replaced by stubs")
    student.add_argument("chapter")
    student.add_argument("--out", default="runs/student", help="output folder (default runs/student)")
    student.set_defaults(func=cmd_student)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "jobs", 1) < 1:
        print("replib: --jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except UsageError as err:
        print(f"replib: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
