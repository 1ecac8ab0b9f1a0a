"""Committed results (data/results/<slug>.json): reading them, checking them, the scoreboard page."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from .fingerprint import fingerprint
from .ledger import (
    EVIDENCE_ROLES,
    FAILS,
    FRAGILE,
    HOLDS,
    INCONCLUSIVE,
    JUDGED_ROLES,
    format_value,
    read_json,
    write_bytes_atomic,
    write_text_atomic,
)
from .paths import chapter_slugs, load_chapter, require_repo_root


def results_dir() -> Path:
    return require_repo_root() / "data" / "results"


def read_results(path: Path) -> dict:
    """One results file, parsed; a corrupt or foreign file fails with its path named."""
    try:
        data = read_json(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{path}: not a readable results file ({err})") from err
    missing = [k for k in ("slug", "profile", "seeds", "claims", "fingerprint") if k not in data]
    if missing:
        raise ValueError(f"{path}: not a results file (lacks {', '.join(missing)})")
    return data


def committed_results() -> dict[str, dict]:
    """slug -> results, for every data/results/*.json."""
    return {p.stem: read_results(p) for p in sorted(results_dir().glob("*.json"))}


def stale_results() -> list[str]:
    """Every committed results file whose fingerprint no longer matches its chapter's sources."""
    stale = []
    valid = set(chapter_slugs())
    for slug, data in committed_results().items():
        if slug not in valid:
            stale.append(f"{slug}.json: no chapter named {slug!r}")
        elif data["fingerprint"] != fingerprint(slug):
            stale.append(f"{slug}.json: sources changed since it was produced "
                         f"(re-run: replib run {slug} --profile book --update-results)")
    return stale


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


VERDICT_ORDER = (HOLDS, FRAGILE, FAILS, INCONCLUSIVE)
HEADLINE_ORDER = ["reproduced", "partly", "not reproduced", "inconclusive"]
VERDICT_COLOURS = {HOLDS: "#1b7837", FRAGILE: "#e08214", FAILS: "#b2182b", INCONCLUSIVE: "#878787"}
FIGURE = "scoreboard_margins.png"
MARGIN_CLIP = 2.0


def verdict_word(verdict: str) -> str:
    """The verdict's first word: 'inconclusive (precondition p1 ...)' -> 'inconclusive'."""
    return verdict.split(" (")[0]


def headline_verdict(claims: list[dict]) -> str:
    """The paper's headline as the chapter reproduces it: reproduced (every headline claim holds),
    partly (some hold or are fragile), inconclusive (none holds and a precondition failed),
    not reproduced (none holds)."""
    words = [verdict_word(c["verdict"]) for c in claims if c["role"] == "headline"]
    if not words:
        return "no headline claim"
    if all(w == HOLDS for w in words):
        return "reproduced"
    if any(w in (HOLDS, FRAGILE) for w in words):
        return "partly"
    if any(w == INCONCLUSIVE for w in words):
        return "inconclusive"
    return "not reproduced"


def _evidence_counts(claims: list[dict]) -> str:
    words = [verdict_word(c["verdict"]) for c in claims if c["role"] in EVIDENCE_ROLES]
    plural = {HOLDS: "hold", FRAGILE: "fragile", FAILS: "fail", INCONCLUSIVE: "inconclusive"}
    return ", ".join(f"{words.count(v)} {plural[v]}" for v in VERDICT_ORDER)


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


def scoreboard_markdown() -> str:
    """The scoreboard page, from the committed results only: each paper's headline verdict, then
    every claim of every chapter with its verdict in the second column."""
    results = committed_results()
    lines = [
        "# Scoreboard",
        "",
        "Generated by `replib scoreboard` from `data/results/*.json`; do not edit by hand.",
        "Each claim was declared in its chapter's `chapter.yml`, with its role and threshold, before the",
        "experiment ran; values are per seed of one book-profile run. A claim **holds** when the mean over",
        "seeds and every seed clear the threshold, is **fragile** when the mean clears it but some seed",
        "does not, **fails** when the mean does not, and is **inconclusive** when a precondition it",
        "requires (the rebuild working as the paper assumes) did not hold. Premises (true by construction",
        "of the toy), checks of the code and measurements are shown but never counted as evidence.",
        "",
        "## The papers' headlines",
        "",
        "A paper's headline is *reproduced* when every headline claim holds, *partly* when some hold or",
        "are fragile, *not reproduced* when none does, *inconclusive* when a failed precondition leaves",
        "nothing to judge. The evidence column counts the headline and mechanism claims by verdict.",
        "",
        "| chapter | headline | evidence claims | experiment runtime |",
        "| --- | --- | --- | --- |",
    ]
    for slug in chapter_slugs():
        title = load_chapter(slug).get("short_title", slug)
        if slug in results:
            r = results[slug]
            runtime = r.get("runtime_s", {}).get("03_experiment")
            lines.append(f"| [{title}](#{slug}) | {headline_verdict(r['claims'])} | "
                         f"{_evidence_counts(r['claims'])} | {runtime:.0f} s |")
        else:
            lines.append(f"| {title} | no results yet | | |")
    lines += ["", f"```{{figure}} {FIGURE}", ":name: scoreboard-margins", "",
              "Every judged claim, one row each, grouped by chapter: its value on each seed as a dot, "
              "placed by its signed margin past the declared threshold (in units of the threshold, or of "
              f"the largest value when the threshold is 0; clipped at ±{MARGIN_CLIP:g}). Right of zero "
              "the seed clears the claim; a cross at the left edge marks seeds that gave no value. "
              "Colours give the claim's verdict.", "```"]
    for slug, r in results.items():
        chapter = load_chapter(slug)
        paper = {c["id"]: c.get("paper", "") for c in chapter.get("claims", [])}
        lines += ["", f"({slug})=", f"## {chapter.get('short_title', slug)}", "",
                  f"arXiv {chapter.get('arxiv', 'n/a')}; profile `{r['profile']}`; "
                  f"seeds {', '.join(map(str, r['seeds']))}; created {r.get('created', 'n/a')}; "
                  f"headline **{headline_verdict(r['claims'])}**. "
                  f"[The experiment](../notebooks/{slug}/03_experiment.ipynb) discusses each verdict.", "",
                  "| claim | verdict | role | statement | paper | ours | seeds clearing | threshold |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for c in r["claims"]:
            mean = float("nan") if c["mean"] is None else c["mean"]
            sd = float("nan") if c["sd"] is None else c["sd"]
            lines.append(f"| {c['id']} | {c['verdict']} | {c['role']} | {c['statement']} | "
                         f"{paper.get(c['id'], '')} | {format_value(mean, sd)} | "
                         f"{c['seeds_clearing']}/{len(c['values'])} | {c['direction']} {c['threshold']} |")
    return "\n".join(lines) + "\n"


def margins_figure(results: dict[str, dict]):
    """The figure of every judged claim's per-seed margins (see scoreboard_markdown's caption)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(slug, c) for slug, r in results.items() for c in r["claims"]
            if verdict_word(c["verdict"]) in VERDICT_ORDER]
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(rows) + 1.2))
    for y, (slug, c) in enumerate(rows):
        word = verdict_word(c["verdict"])
        xs = np.array([margin(c, v) for v in c["values"]])
        shown = np.clip(xs[~np.isnan(xs)], -MARGIN_CLIP, MARGIN_CLIP)
        ax.scatter(shown, [y] * len(shown), s=14, color=VERDICT_COLOURS[word], zorder=3)
        if np.isnan(xs).any():  # a seed without a value: a cross at the left edge
            ax.scatter([-MARGIN_CLIP], [y], s=22, marker="x", color=VERDICT_COLOURS[word], zorder=3)
    boundaries = [i for i in range(1, len(rows)) if rows[i][0] != rows[i - 1][0]]
    for b in boundaries:
        ax.axhline(b - 0.5, color="0.85", lw=0.8)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{slug}: {c['id']}" for slug, c in rows], fontsize=6)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(-MARGIN_CLIP * 1.05, MARGIN_CLIP * 1.05)
    ax.set_xlabel("signed margin past the threshold (right: the seed clears)")
    handles = [plt.Line2D([], [], marker="o", ls="", color=VERDICT_COLOURS[v], label=v) for v in VERDICT_ORDER]
    ax.legend(handles=handles, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4,
              frameon=False)
    fig.tight_layout()
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
              + f"; of the {evidence} headline and mechanism claims, {_evidence_counts(claims)}."]
    return "\n".join(lines)


def intro_markdown(text: str) -> str:
    """``text`` (book/intro.md) with the block between its chapter-list markers regenerated."""
    if INTRO_START not in text or INTRO_END not in text:
        raise ValueError(f"book/intro.md lacks the chapter-list markers {INTRO_START!r} and {INTRO_END!r}")
    head, rest = text.split(INTRO_START, 1)
    tail = rest.split(INTRO_END, 1)[1]
    return f"{head}{INTRO_START}\n{chapter_list_markdown()}\n{INTRO_END}{tail}"


def write_scoreboard() -> Path:
    """Write book/scoreboard.md and its figure, and regenerate the chapter list of book/intro.md
    (each atomically)."""
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
    return write_text_atomic(book / "scoreboard.md", scoreboard_markdown())
