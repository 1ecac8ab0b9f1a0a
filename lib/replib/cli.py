"""The `replib` command: run chapters with papermill, regenerate the scoreboard, list and check results.

    replib run bidprice_routing --profile book --seeds 5 6 7 --out runs/x -p arrival_steps=400
    replib scoreboard | replib check | replib list | replib params foam --profile paper
    replib rejudge --all                (judge committed values again after a ledger or declaration change)
    replib replay foam --seed 1         (re-run a committed seed and compare every claim value)
    replib book | replib smoke          (what `make book` and `make test` call)
    replib sync                         (after editing a notebook's .py: Colab cell and .ipynb twin)
    replib student foam --out handout   (notebooks with the exercise answers replaced by stubs)
    replib diff runs/x                  (a run's claims beside the committed ones)
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from . import __version__
from .core.fingerprint import NOTEBOOKS
from .core.ledger import (
    format_interval,
    format_value,
    format_verdict,
    verdict_word,
    violated_checks,
    write_json_atomic,
)
from .core.paths import chapter_slugs, check_slug, load_chapter, repo_root, require_repo_root
from .core.profiles import PROFILES
from .runner import (
    UsageError,
    check_confirmatory,
    experiment_module,
    experiment_parameters,
    parse_assignments,
    plan_run,
    prepare_out,
    profile_seeds,
    run_chapter,
)

EXIT_USAGE = 2


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


def _bar(total: int, desc: str):
    """A progress bar in a terminal; in a log (stderr not a terminal) plain lines, printed by the caller."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="nb", disable=not sys.stderr.isatty())


def _done(slug: str, stem: str) -> None:
    if not sys.stderr.isatty():
        print(f"  {slug}/{stem} done", flush=True)


def _run_here(plans: dict, args) -> tuple[dict, dict]:
    """Every chapter in this machine's processes (`--jobs` at once), all seeds in one experiment run."""
    results, failed = {}, {}
    with _bar(len(plans) * len(NOTEBOOKS), "notebooks") as bar:
        if args.jobs == 1:
            for slug, params in plans.items():
                def step(slug, stem):
                    bar.update()
                    _done(slug, stem)

                try:
                    results[slug] = run_chapter(slug, args.profile, params, args.out, on_notebook=step,
                                                cell_progress=sys.stderr.isatty())
                except Exception as err:  # report every chapter, then fail
                    failed[slug] = err
        else:
            with ProcessPoolExecutor(max_workers=args.jobs) as pool:
                futures = {pool.submit(run_chapter, s, args.profile, p, args.out): s for s, p in plans.items()}
                for future in as_completed(futures):
                    slug = futures[future]
                    try:
                        results[slug] = future.result()
                        _done(slug, "all notebooks")
                    except Exception as err:
                        failed[slug] = err
                    bar.update(len(NOTEBOOKS))
    return results, failed


def _run_on_scheduler(plans: dict, args) -> tuple[dict, dict]:
    """Every chapter over a Dask cluster, the experiment once per seed (see replib.cluster)."""
    from .cluster import run_on_cluster

    tasks = sum(len(NOTEBOOKS) - 1 + len(p.get("seeds") or profile_seeds(s, args.profile)) for s, p in plans.items())
    with _bar(tasks, "notebooks (the experiment once per seed)") as bar:
        return run_on_cluster(plans, args.profile, args.out, args.scheduler, progress=bar.update)


def cmd_run(args) -> int:
    slugs = chapter_slugs() if args.all else args.chapters
    if not slugs:
        raise UsageError("name at least one chapter, or --all; valid chapters: " + ", ".join(chapter_slugs()))
    overrides = parse_assignments(args.param or [])
    plans = {slug: plan_run(slug, args.profile, args.seeds, overrides) for slug in slugs}
    if args.update_results and args.profile != "book":
        raise UsageError("--update-results replaces the committed book-profile results: use --profile book")
    if args.update_results:
        for slug, params in plans.items():
            check_confirmatory(slug, params.get("seeds") or profile_seeds(slug, "book"))
    if args.scheduler:
        from .cluster import parse_scheduler

        try:
            parse_scheduler(args.scheduler)
        except ValueError as err:
            raise UsageError(str(err)) from err
        if args.update_results:
            raise UsageError("--update-results needs a run on this machine (its runtimes are the book's "
                             "budget): drop --scheduler")
    out = prepare_out(args.out, slugs, args.force)
    print(f"writing the executed notebooks and results to {out}/<chapter>/", flush=True)
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
    from .core.profiles import describe_bound

    module = experiment_module(slug)
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
    from .core.results import (
        inconsistent_results,
        stale_results,
        unconfirmed_results,
        unreadable_results,
    )

    problems = unreadable_results() + stale_results() + inconsistent_results()
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
        skipped = sum(r["status"] == "skipped (wall clock)" for r in rows)
        differ = [r for r in rows if r["status"] not in ("same", "skipped (wall clock)")]
        width = max(len(r["claim"]) for r in rows)
        print(f"{slug}: seed {seed} replayed, {len(rows) - skipped - len(differ)} of {len(rows) - skipped} claim "
              f"values as committed" + (f" ({skipped} wall-clock measurements skipped)" if skipped else ""))
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
    """Chapters, their declared claims and the committed verdicts. A results file that cannot be read
    is named in one line and its chapter listed without verdicts; without a clone of the repository
    (an installed wheel) the claims are listed without results."""
    from .core.results import ResultsError, read_results, results_dir

    for slug in chapter_slugs():
        chapter = load_chapter(slug)
        print(f"{slug}: {chapter.get('title', '')}")
        missing = "no result yet"
        claims = []
        if repo_root() is None:
            missing = "no results here (not a clone of the book)"
        elif (results_dir() / f"{slug}.json").is_file():
            try:
                claims = read_results(results_dir() / f"{slug}.json")["claims"]
            except ResultsError as err:
                print(f"  {err}")
                missing = "unreadable result"
        verdicts = {c.get("id"): format_verdict(c.get("verdict", "no verdict stored"), c.get("seeds_needed"))
                    + (f"; {c['label']}" if c.get("label") else "") for c in claims if isinstance(c, dict)}
        for claim in chapter.get("claims", []):
            print(f"  {claim['id']:<22} {verdicts.get(claim['id'], missing):<26} {claim['statement']}")
    return 0


def cmd_sync(args) -> int:
    """Regenerate the notebooks' Colab cells from _config.yml, then their .ipynb from their .py
    (every chapter's, or only the chapters named)."""
    import subprocess

    from .book import _bin
    from .core.colab import write_setup_cells

    for slug in args.chapters:
        try:
            check_slug(slug)
        except ValueError as err:
            raise UsageError(str(err)) from err
    folders = args.chapters or ["*"]
    sources = sorted(p for folder in folders for p in (require_repo_root() / "notebooks").glob(f"{folder}/0*.py"))
    for path in write_setup_cells(sources):
        print(f"updated the Colab cell of {path.name}")
    # --update keeps the cell ids (and the empty outputs) of the existing .ipynb: no churn in git
    subprocess.run([_bin("jupytext"), "--update", "--to", "ipynb", *map(str, sources)], check=True)
    return 0


def cmd_student(args) -> int:
    """Write student copies of chapters' notebooks: exercise answers replaced by stubs. Hand-outs that
    already exist (perhaps edited by a student) are not overwritten without --force."""
    from .core.student import write_student_notebooks

    slugs = chapter_slugs() if args.all else [args.chapter] if args.chapter else []
    if not slugs:
        raise UsageError("name a chapter, or --all; valid chapters: " + ", ".join(chapter_slugs()))
    try:
        for slug in slugs:
            check_slug(slug)
    except ValueError as err:
        raise UsageError(str(err)) from err
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out} is a file, not a folder")
    existing = [p for slug in slugs for p in sorted((out / slug).glob("0*.ipynb"))]
    if existing and not args.force:
        raise UsageError(f"--out {args.out} already holds hand-outs ({existing[0]}"
                         f"{f' and {len(existing) - 1} more' if len(existing) > 1 else ''}): choose another "
                         "folder, or add --force to overwrite them")
    try:
        for slug in slugs:
            for path in write_student_notebooks(require_repo_root() / "notebooks" / slug, out / slug):
                print(path)
    except OSError as err:
        raise UsageError(f"--out {args.out}: cannot write there ({err.strerror or err})") from err
    return 0


def cmd_diff(args) -> int:
    """A run's claims beside the committed ones: values, intervals, verdicts, and which verdicts differ."""
    from .core.results import ResultsError, committed_results, read_results

    folder = Path(args.run)
    files = sorted(folder.glob("*.json")) + sorted(folder.glob("*/*.json"))
    files = [f for f in files if f.stem in chapter_slugs() and f.parent.name in (f.stem, folder.name)]
    if not folder.is_dir() or not files:
        raise UsageError(f"{args.run}: no run results there (a folder written by `replib run --out`, or one "
                         "chapter's folder inside it)")
    committed = committed_results(skip_unreadable=True)
    for path in files:
        try:
            run = read_results(path)
        except ResultsError as err:
            print(err)
            continue
        book = committed.get(run["slug"])
        print(diff_table(run, book))
        print()
    return 0


def diff_table(run: dict, book: dict | None) -> str:
    """One run's claims beside the committed results of the same chapter (plain text)."""
    theirs = {c["id"]: c for c in (book or {}).get("claims", [])}

    def summary(c):
        if c is None:
            return ("", "", "not committed")
        return (format_value(c["mean"], c["sd"]), format_interval(c["interval"]),
                format_verdict(c["verdict"], c.get("seeds_needed")))

    rows = [("claim", "run: value", "run: 95% interval", "run: verdict", "book: value", "book: 95% interval",
             "book: verdict", "")]
    for c in run["claims"]:
        mine, other = summary(c), summary(theirs.get(c["id"]))
        changed = theirs.get(c["id"]) is not None and verdict_word(c["verdict"]) != verdict_word(theirs[c["id"]]["verdict"])
        rows.append((c["id"], *mine, *other, "VERDICT DIFFERS" if changed else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    where = (f"book: profile {book['profile']}, seeds {book['seeds']}" if book else "no committed results")
    header = f"{run['slug']} (run: profile {run['profile']}, seeds {run['seeds']}; {where})"
    return "\n".join([header] + lines)


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
    parser.add_argument("--version", action="version", version=f"replib {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute chapters' notebooks with papermill and judge their claims")
    run.add_argument("chapters", nargs="*", help="chapter slugs (see `replib list`)")
    run.add_argument("--all", action="store_true", help="run every chapter")
    run.add_argument("--profile", default="book", help=f"one of {', '.join(PROFILES)} (default book)")
    run.add_argument("--seeds", type=int, nargs="+", help="seeds for the experiment (default: the profile's)")
    run.add_argument("-p", "--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    run.add_argument("--out", default="runs/latest", help="output folder (default runs/latest)")
    run.add_argument("--force", action="store_true",
                     help="replace a previous run of the same chapters in --out (never mixed with it)")
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
    diff = sub.add_parser("diff", help="a run's claims beside the committed ones, and which verdicts differ")
    diff.add_argument("run", help="a folder written by `replib run --out` (or one chapter's folder in it)")
    diff.set_defaults(func=cmd_diff)
    book = sub.add_parser("book", help="execute (cached) and build the HTML book")
    book.add_argument("--profile", default="book", choices=PROFILES)
    book.set_defaults(func=cmd_book)
    sub.add_parser("smoke", help="nbmake every notebook at smoke, then build the book").set_defaults(func=cmd_smoke)
    sync = sub.add_parser("sync", help="regenerate Colab cells and .ipynb twins from the .py notebooks")
    sync.add_argument("chapters", nargs="*", help="only these chapters (default: every chapter)")
    sync.set_defaults(func=cmd_sync)
    student = sub.add_parser("student", help="student copies of a chapter: exercise answers replaced by stubs")
    student.add_argument("chapter", nargs="?")
    student.add_argument("--all", action="store_true", help="every chapter (a whole course)")
    student.add_argument("--out", default="runs/student", help="output folder (default runs/student)")
    student.add_argument("--force", action="store_true", help="overwrite hand-outs already in --out")
    student.set_defaults(func=cmd_student)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "jobs", 1) < 1:
        print("replib: --jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    from .core.results import ResultsError

    try:
        return args.func(args)
    except UsageError as err:
        print(f"replib: {err}", file=sys.stderr)
        return EXIT_USAGE
    except ResultsError as err:
        print(f"replib: {err}", file=sys.stderr)
        return 1
    except RuntimeError as err:
        if repo_root() is not None:  # the one RuntimeError said in a line: a command that needs a clone
            raise
        print(f"replib: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
