"""Committed results (data/results/<slug>.json): reading them, checking them, the scoreboard page."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from .fingerprint import fingerprint, source_hashes
from .ledger import (
    EVIDENCE_ROLES,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    JUDGED_ROLES,
    LABELS,
    NO_ROOM,
    UNDECIDED,
    format_interval,
    format_value,
    format_verdict,
    judge_claims,
    read_json,
    validate_claims,
    verdict_word,
    violated_checks,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from .paths import chapter_slugs, load_chapter, require_repo_root


def results_dir() -> Path:
    return require_repo_root() / "data" / "results"


class ResultsError(ValueError):
    """A results file that cannot be read: its message is one line naming the file and the fault."""


def read_results(path: Path) -> dict:
    """One results file, parsed; a corrupt or foreign file fails with its path named."""
    try:
        data = read_json(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ResultsError(f"{path}: not a readable results file ({err})") from None
    missing = [k for k in ("slug", "profile", "seeds", "claims", "fingerprint") if k not in data] \
        if isinstance(data, dict) else ["everything"]
    if missing:
        raise ResultsError(f"{path}: not a results file (lacks {', '.join(missing)})")
    return data


def committed_results(skip_unreadable: bool = False) -> dict[str, dict]:
    """slug -> results, for every data/results/*.json; an unreadable file fails (ResultsError), or is
    left out with ``skip_unreadable`` (see :func:`unreadable_results`)."""
    results = {}
    for path in sorted(results_dir().glob("*.json")):
        try:
            results[path.stem] = read_results(path)
        except ResultsError:
            if not skip_unreadable:
                raise
    return results


def unreadable_results() -> list[str]:
    """One line per data/results/*.json that cannot be read, naming the file and the fault."""
    problems = []
    for path in sorted(results_dir().glob("*.json")):
        try:
            read_results(path)
        except ResultsError as err:
            problems.append(str(err))
    return problems


# What a re-judgement may follow: the declarations and the judging code, never the code that measures
# (a notebook's prose is not hashed per file, so it may change too).
REJUDGE_MAY_CHANGE = ("notebooks/{slug}/chapter.yml", "lib/replib/core/ledger.py", "lib/replib/core/fingerprint.py",
                      # never take part in a measurement: the exercise grader; plot style, progress bars
                      "lib/replib/core/exercises.py", "lib/replib/core/display.py")


def changed_sources(slug: str, data: dict) -> list[str]:
    """The chapter's source files whose code differs from what produced ``data`` (named where the
    record keeps per-file hashes, in which a notebook's prose does not count; else the fingerprint
    alone says that something changed)."""
    if data.get("fingerprint") == fingerprint(slug):
        return []
    stored = data.get("sources")
    if not isinstance(stored, dict):
        return ["(sources not recorded per file)"]
    now = source_hashes(slug)
    return sorted(f for f in set(stored) | set(now) if stored.get(f) != now.get(f))


def stale_results() -> list[str]:
    """Every committed results file whose fingerprint no longer matches its chapter's sources."""
    stale = []
    valid = set(chapter_slugs())
    for slug, data in committed_results(skip_unreadable=True).items():
        if slug not in valid:
            stale.append(f"{slug}.json: no chapter named {slug!r}")
        elif data["fingerprint"] != fingerprint(slug):
            changed = changed_sources(slug, data)
            allowed = {f.format(slug=slug) for f in REJUDGE_MAY_CHANGE}
            if changed and not set(changed) <= allowed:
                stale.append(f"{slug}.json: sources changed since it was produced ({', '.join(changed)}; "
                             f"re-run: replib run {slug} --profile book --update-results)")
            else:
                stale.append(f"{slug}.json: only prose, declarations or the judging code changed "
                             f"({', '.join(changed) or 'notebook prose'}; re-judge: replib rejudge {slug})")
    return stale


def rejudged(slug: str, data: dict) -> dict:
    """``data``'s claims judged again from their stored per-seed values under the chapter's current
    declarations and ledger; fails naming the claims when the declared ids differ from the stored ones."""
    declared = validate_claims(load_chapter(slug))
    stored = {c["id"]: c for c in data["claims"]}
    if [c["id"] for c in declared] != list(stored):
        raise ValueError(f"{slug}: the declared claims ({', '.join(c['id'] for c in declared)}) are not the "
                         f"stored ones ({', '.join(stored)}): a new or renamed claim needs a new run")
    values = {cid: list(c["values"]) for cid, c in stored.items()}
    return {**data, "claims": judge_claims(declared, values, data["profile"])}


def rejudge_committed(slug: str) -> Path:
    """Re-judge data/results/<slug>.json from its stored per-seed values under the chapter's current
    declarations and ledger (no new run), and record that it was. Refused when a source other than the
    declarations and the judging code changed since the values were measured (that needs a re-run)."""
    from datetime import datetime, timezone

    from .ledger import INTERVAL_KIND

    path = results_dir() / f"{slug}.json"
    data = read_results(path)
    allowed = {f.format(slug=slug) for f in REJUDGE_MAY_CHANGE}
    measuring = [f for f in changed_sources(slug, data) if f not in allowed]
    if isinstance(data.get("sources"), dict) and measuring:
        raise ValueError(f"{slug}: {', '.join(measuring)} changed since the values were measured; re-run: "
                         f"replib run {slug} --profile book --update-results")
    fresh = rejudged(slug, data)
    first = data.get("rejudged", {}).get("values_fingerprint", data["fingerprint"])
    fresh.update(
        confirmatory=sorted(data["seeds"]) == sorted(load_chapter(slug).get("confirmatory_seeds") or [None]),
        interval_kind=INTERVAL_KIND, fingerprint=fingerprint(slug), sources=source_hashes(slug),
        rejudged={"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "values_fingerprint": first,
                  "values_created": data.get("rejudged", {}).get("values_created", data.get("created"))})
    return write_json_atomic(path, fresh)


def inconsistent_results() -> list[str]:
    """Committed claims whose stored verdicts, summaries or declarations do not follow from their
    stored per-seed values under the chapter's declarations (a hand edit, or a ledger change not
    re-judged), and checks violated on some seed."""
    problems = []
    for slug, data in committed_results(skip_unreadable=True).items():
        if slug not in chapter_slugs():
            continue
        try:
            again = rejudged(slug, data)["claims"]
        except (ValueError, KeyError, TypeError) as err:
            problems.append(f"{slug}.json: its claims cannot be judged again ({type(err).__name__}: {err})")
            continue
        for stored, fresh in zip(data["claims"], again):
            differ = [k for k in fresh if not _same(stored.get(k, "<missing>"), fresh[k])]
            if differ:
                problems.append(f"{slug}.json: {stored['id']} stores {', '.join(differ)} that do not follow from "
                                f"its values and declaration (re-judge: replib rejudge {slug})")
        problems += [f"{slug}.json: check {line}" for line in violated_checks(data["claims"])]
    return problems


def _same(a, b) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is None and b is None or math.isnan(a if a is not None else b)
        if isinstance(a, str) or isinstance(b, str):  # a stored field that is missing, or not a number
            return False
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


def unconfirmed_results() -> list[str]:
    """Committed results not yet run on the chapter's declared confirmatory seeds (a notice, not an error)."""
    out = []
    for slug, data in committed_results(skip_unreadable=True).items():
        if slug in chapter_slugs() and not data.get("confirmatory"):
            seeds = load_chapter(slug).get("confirmatory_seeds")
            out.append(f"{slug}.json: seeds {', '.join(map(str, data['seeds']))} are development seeds; "
                       f"the confirmatory run on {seeds} is pending")
    return out


def missing_smoke_values(directory: Path) -> list[str]:
    """What a smoke run left unmeasured: every chapter must write its results file, and every judged
    claim must have a value (not NaN) on every seed, unless chapter.yml lists it under
    ``smoke_gaps`` with the reason."""
    problems = []
    for slug in chapter_slugs():
        path = Path(directory) / f"{slug}.json"
        if not path.is_file():
            problems.append(f"{slug}: the smoke run wrote no {path.name}")
            continue
        allowed = load_chapter(slug).get("smoke_gaps") or {}
        for claim in read_results(path)["claims"]:
            if claim["role"] in JUDGED_ROLES and claim["id"] not in allowed and any(
                    v is None or math.isnan(v) for v in claim["values"]):
                problems.append(f"{slug}: {claim['id']} has no value on some seed "
                                "(add what it needs to the smoke profile, or list it under smoke_gaps with the reason)")
    return problems


VERDICT_ORDER = (HOLDS, FAILS, UNDECIDED, INCONCLUSIVE, NO_ROOM)
HEADLINE_ORDER = ["reproduced", "partly", "direction only", "undecided", "not reproduced", "inconclusive"]
VERDICT_COLOURS = {HOLDS: "#1b7837", FAILS: "#b2182b", UNDECIDED: "#e08214", INCONCLUSIVE: "#878787",
                   NO_ROOM: "#5e3c99"}
FIGURE = "scoreboard_margins.png"
MARGIN_CLIP = 2.0
CHAPTER_LABELS = {
    "reproduced": "every headline claim is reproduced",
    "partly": "some headline claims are reproduced and some are not",
    "direction only": "no headline claim is reproduced and at least one holds in direction",
    "undecided": "none of the above, and at least one headline claim is undecided",
    "not reproduced": "no headline claim is reproduced, holds in direction or is undecided, and at least one "
                      "is not reproduced on a fair test",
    "inconclusive": "every headline claim is inconclusive: the rebuild is not yet a fair test",
}


def headline_verdict(claims: list[dict]) -> str:
    """The paper's headline as the chapter reproduces it, from its headline claims' labels (see
    CHAPTER_LABELS): one label when they all agree, else the first of reproduced (as 'partly'),
    direction only, undecided, not reproduced that some claim has."""
    labels = [c.get("label") for c in claims if c["role"] == "headline"]
    if not labels:
        return "no headline claim"
    if None in labels:
        return "not judged"
    if len(set(labels)) == 1:
        return labels[0]
    for label, chapter in (("reproduced", "partly"), ("direction only", "direction only"),
                           ("undecided", "undecided"), ("not reproduced", "not reproduced")):
        if label in labels:
            return chapter
    return "inconclusive"


def evidence_counts(claims: list[dict]) -> dict[str, int]:
    """Headline and mechanism claims by size verdict (holds, fails, undecided, inconclusive, no room)."""
    words = [verdict_word(c["verdict"]) for c in claims if c["role"] in EVIDENCE_ROLES]
    return {v: words.count(v) for v in VERDICT_ORDER}


def counts_text(counts: dict[str, int]) -> str:
    """'4 hold, 1 fail, 1 undecided, 0 inconclusive' (no room only when some claim has it)."""
    plural = {HOLDS: "hold", FAILS: "fail", UNDECIDED: "undecided", INCONCLUSIVE: "inconclusive",
              NO_ROOM: "no room"}
    return ", ".join(f"{counts[v]} {plural[v]}" for v in VERDICT_ORDER if counts[v] or v != NO_ROOM)


def margin(claim: dict, value: float | None) -> float:
    """Signed distance of one value past the threshold, in units of |threshold| (of the largest
    |value| when the threshold is 0): positive means the value clears the claim."""
    if value is None or math.isnan(value):
        return math.nan
    t = float(claim["threshold"])
    sign = 1.0 if claim["direction"] in (">=", ">") else -1.0
    if abs(t) > 0:
        scale = abs(t)
    else:
        finite = [abs(v) for v in claim["values"] if v is not None and math.isfinite(v)]
        scale = max(finite, default=0.0) or 1.0
    return sign * (float(value) - t) / scale


RULES_MARKDOWN = """Each claim was declared in its chapter's `chapter.yml`, with its role, threshold and (for a
headline) its null, before the experiment ran. Verdicts come from the 95% interval of the mean over
seeds (per-seed values are paired comparisons: same seed, same data for every arm):

| verdict | when |
| --- | --- |
| holds | the whole interval clears the threshold |
| fails | the whole interval misses it (or a seed gave no value) |
| undecided | the interval contains the threshold; the table says how many seeds the observed spread would need |
| inconclusive | a competence or convergence precondition the claim requires did not hold |
| no room | a headroom precondition did not hold: the toy cannot show the paper's size; only the direction is judged |

A headline is judged twice: its **size** against the paper's number (the threshold) and its
**direction** against its null (the value at which the method does no better than its comparison;
the interval must lie strictly past it). Its label:

| label | when |
| --- | --- |
""" + "\n".join(f"| {k} | {v} |" for k, v in LABELS.items()) + """

A chapter's headline label:

| label | when |
| --- | --- |
""" + "\n".join(f"| {k} | {v} |" for k, v in CHAPTER_LABELS.items()) + """

A precondition is met only when it holds by the same rule. Premises (true by construction of the
toy) and measurements are shown but never counted; checks (invariants of the code) must pass on
every seed. Judged claims are counted in steps, tokens, evaluations or scores, never seconds. Results
marked *development seeds* were measured on seeds used while developing the chapter; the
confirmatory seeds declared in its `chapter.yml` have not been run yet."""


def _seeds_text(r: dict) -> str:
    seeds = ", ".join(map(str, r["seeds"]))
    return f"{seeds} (confirmatory)" if r.get("confirmatory") else f"{seeds} (development seeds)"


def scoreboard_markdown() -> str:
    """The scoreboard page, from the committed results only: each paper's headline label with its
    size and direction verdicts, then every claim of every chapter with its interval beside its bars."""
    results = committed_results()
    lines = [
        "# Scoreboard",
        "",
        "Generated by `replib scoreboard` from `data/results/*.json`; do not edit by hand.",
        RULES_MARKDOWN,
        "",
        "## The papers' headlines",
        "",
        "The size and direction columns list the headline claims' verdicts in declared order; the evidence",
        "column counts the headline and mechanism claims by size verdict.",
        "",
        "| chapter | headline | size | direction | evidence claims | seeds | experiment runtime |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for slug in chapter_slugs():
        title = load_chapter(slug).get("short_title", slug)
        if slug in results:
            r = results[slug]
            heads = [c for c in r["claims"] if c["role"] == "headline"]
            runtime = r.get("runtime_s", {}).get("03_experiment")
            lines.append(f"| [{title}](#{slug}) | {headline_verdict(r['claims'])} | "
                         f"{', '.join(verdict_word(c['verdict']) for c in heads)} | "
                         f"{', '.join(verdict_word(c['direction_verdict']) for c in heads)} | "
                         f"{counts_text(evidence_counts(r['claims']))} | {_seeds_text(r)} | {runtime:.0f} s |")
        else:
            lines.append(f"| {title} | no results yet | | | | | |")
    lines += ["", f"```{{figure}} {FIGURE}", ":name: scoreboard-margins", "",
              "Every judged claim, one row each, in a panel per chapter: the 95% interval of its mean over seeds "
              "as a bar and each seed's value as a dot, placed by the signed margin past the declared threshold "
              "(in units of the threshold, or of the largest value when the threshold is 0; clipped at "
              f"±{MARGIN_CLIP:g}). Right of zero clears the claim; a diamond marks a headline's null; a cross "
              "at the left edge marks seeds that gave no value. Colours give the claim's verdict.", "```"]
    for slug, r in results.items():
        chapter = load_chapter(slug)
        paper = {c["id"]: c.get("paper", "") for c in chapter.get("claims", [])}
        lines += ["", f"({slug})=", f"## {chapter.get('short_title', slug)}", "",
                  f"arXiv {chapter.get('arxiv', 'n/a')}; profile `{r['profile']}`; seeds {_seeds_text(r)}; "
                  f"created {r.get('created', 'n/a')}; headline **{headline_verdict(r['claims'])}**. "
                  f"[The experiment](../notebooks/{slug}/03_experiment.ipynb) discusses each verdict.", "",
                  "| claim | verdict | vs null | role | ours | 95% interval | threshold | null | seeds clearing "
                  "| statement | paper |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for c in r["claims"]:
            null = "" if c.get("null") is None else c["null"]
            lines.append(f"| {c['id']} | {format_verdict(c['verdict'], c.get('seeds_needed'))} | "
                         f"{format_verdict(c.get('direction_verdict'), c.get('direction_seeds_needed'))} | "
                         f"{c['role']} | {format_value(c['mean'], c['sd'])} | {format_interval(c['interval'])} | "
                         f"{c['direction']} {c['threshold']} | {null} | "
                         f"{c['seeds_clearing']}/{len(c['values'])} | {c['statement']} | {paper.get(c['id'], '')} |")
    return "\n".join(lines) + "\n"


def _margins_panel(ax, slug: str, claims: list[dict]) -> None:
    """One chapter's judged claims: interval bars, seed dots and nulls, in threshold-margin units."""
    for y, c in enumerate(claims):
        colour = VERDICT_COLOURS[verdict_word(c["verdict"])]
        lo, hi = (margin(c, b) for b in c["interval"])
        if not (math.isnan(lo) or math.isnan(hi)):
            ax.plot(np.clip([lo, hi], -MARGIN_CLIP, MARGIN_CLIP), [y, y], color=colour, lw=3.5, alpha=0.45,
                    solid_capstyle="butt", zorder=2)
        xs = np.array([margin(c, v) for v in c["values"]])
        shown = np.clip(xs[~np.isnan(xs)], -MARGIN_CLIP, MARGIN_CLIP)
        ax.scatter(shown, [y] * len(shown), s=9, color=colour, zorder=3)
        if c.get("null") is not None:
            ax.scatter(np.clip([margin(c, c["null"])], -MARGIN_CLIP, MARGIN_CLIP), [y], s=20, marker="D",
                       facecolor="none", edgecolor="k", lw=0.7, zorder=4)
        if np.isnan(xs).any():  # a seed without a value: a cross at the left edge
            ax.scatter([-MARGIN_CLIP], [y], s=20, marker="x", color=colour, zorder=3)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(claims)), [c["id"] for c in claims], fontsize=7)
    ax.set_ylim(len(claims) - 0.5, -0.5)
    ax.set_xlim(-MARGIN_CLIP * 1.05, MARGIN_CLIP * 1.05)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(slug, fontsize=9, loc="left")
    ax.set_xlabel("margin past the threshold (right: clears)", fontsize=7)


def margins_figure(results: dict[str, dict]):
    """The figure of every judged claim, one small panel per chapter (see scoreboard_markdown's caption)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(slug, [c for c in r["claims"] if verdict_word(c["verdict"]) in VERDICT_ORDER])
              for slug, r in results.items()]
    panels = [(slug, claims) for slug, claims in panels if claims]
    cols = 2
    rows = [panels[i:i + cols] for i in range(0, len(panels), cols)]
    heights = [max(len(claims) for _, claims in row) + 3.5 for row in rows]
    height = 0.17 * sum(heights) + 0.6
    fig = plt.figure(figsize=(11, height))
    grid = fig.add_gridspec(len(rows), cols, height_ratios=heights, hspace=0.9, wspace=0.75,
                            top=1 - 0.55 / height, bottom=0.35 / height)
    for r, row in enumerate(rows):
        for col, (slug, claims) in enumerate(row):
            _margins_panel(fig.add_subplot(grid[r, col]), slug, claims)
    handles = [plt.Line2D([], [], marker="o", ls="-", lw=3, color=VERDICT_COLOURS[v], label=v) for v in VERDICT_ORDER]
    handles.append(plt.Line2D([], [], marker="D", ls="", markerfacecolor="none", color="k", label="null"))
    fig.legend(handles=handles, fontsize=8, loc="upper center", ncol=6, frameon=False)
    return fig


INTRO_START = "<!-- chapters: generated by `replib scoreboard` from _toc.yml and data/results; do not edit -->"
INTRO_END = "<!-- end of chapters -->"


def chapter_list_markdown() -> str:
    """The intro page's list of chapters, part by part in the order of _toc.yml, each with its
    headline verdict, then the book-wide totals of headline and claim verdicts."""
    toc = yaml.safe_load((require_repo_root() / "_toc.yml").read_text(encoding="utf-8"))
    results = committed_results()
    lines, headlines = [], []
    for part in toc.get("parts", []):
        slugs = [entry["file"].split("/")[1] for entry in part.get("chapters", [])
                 if entry["file"].startswith("notebooks/")]
        if not slugs:
            continue
        items = []
        for slug in slugs:
            chapter = load_chapter(slug)
            verdict = headline_verdict(results[slug]["claims"]) if slug in results else "no results yet"
            headlines.append(verdict)
            items.append(f"[{chapter['title']}](../notebooks/{slug}/01_theory.ipynb) (headline: {verdict})")
        lines.append(f"- **{part['caption']}.** " + "; ".join(items) + ".")
    claims = [c for r in results.values() for c in r["claims"]]
    evidence = sum(c["role"] in EVIDENCE_ROLES for c in claims)
    lines += ["", f"Across the {len(headlines)} chapters, the papers' headlines are "
              + ", ".join(f"{headlines.count(v)} {v}" for v in dict.fromkeys(HEADLINE_ORDER + headlines)
                          if headlines.count(v))
              + f"; of the {evidence} headline and mechanism claims, {counts_text(evidence_counts(claims))} "
              "(verdicts from the 95% interval over seeds; see the scoreboard)."]
    return "\n".join(lines)


README_START = "<!-- chapters: generated by `replib scoreboard` from the chapters and data/results; do not edit -->"


def readme_chapters_markdown() -> str:
    """The README's list of chapters and the total of the committed runtimes (what `make book` executes)."""
    results = committed_results()
    names = [f"`{slug}` ({load_chapter(slug).get('short_title', slug)})" for slug in chapter_slugs()]
    seconds = sum(sum(r.get("runtime_s", {}).values()) for r in results.values())
    return (f"The {len(names)} chapters: " + ", ".join(names) + ". Their committed book-profile runs took "
            f"{seconds / 60:.0f} min of notebook execution in all (the sum of the runtimes in data/results/, "
            "each measured on 2 CPU cores, several on a loaded machine).")


def replace_block(text: str, start: str, end: str, block: str, where: str) -> str:
    """``text`` with what lies between its ``start`` and ``end`` markers replaced by ``block``."""
    if start not in text or end not in text:
        raise ValueError(f"{where} lacks the generated-block markers {start!r} and {end!r}")
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{block}\n{end}{rest.split(end, 1)[1]}"


def readme_markdown(text: str) -> str:
    """README.md's ``text`` with its generated chapter list regenerated."""
    return replace_block(text, README_START, INTRO_END, readme_chapters_markdown(), "README.md")


def intro_markdown(text: str) -> str:
    """``text`` (book/intro.md) with the block between its chapter-list markers regenerated."""
    return replace_block(text, INTRO_START, INTRO_END, chapter_list_markdown(), "book/intro.md")


def write_scoreboard() -> Path:
    """Write book/scoreboard.md and its figure, regenerate the chapter lists of book/intro.md and
    README.md (each atomically), and each experiment notebook's verdict box and reproducibility summary."""
    import io

    import matplotlib.pyplot as plt

    book = require_repo_root() / "book"
    fig = margins_figure(committed_results())
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=150, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    write_bytes_atomic(book / FIGURE, buffer.getvalue())
    intro = book / "intro.md"
    write_text_atomic(intro, intro_markdown(intro.read_text(encoding="utf-8")))
    readme = book.parent / "README.md"
    write_text_atomic(readme, readme_markdown(readme.read_text(encoding="utf-8")))
    from .report import sync_ipynb, write_blocks

    results = committed_results()
    changed = [book.parent / "notebooks" / slug / "03_experiment.py" for slug in results
               if slug in chapter_slugs() and write_blocks(slug, results[slug])]
    sync_ipynb(changed)
    return write_text_atomic(book / "scoreboard.md", scoreboard_markdown())
