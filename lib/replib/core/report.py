"""The blocks of each experiment notebook generated from its committed results, so that the page and
the scoreboard cannot disagree: the verdict box that opens the notebook and the reproducibility
summary (scope, results, seeds, compute) before its summary. Both are markdown between markers, in
the .py twin and the .ipynb alike; `replib scoreboard` rewrites them, and a source fingerprint skips
them (they follow from the results, not the other way round)."""

from __future__ import annotations

from pathlib import Path

from .fingerprint import GENERATED_BLOCKS as BLOCKS
from .ledger import format_interval, format_verdict, verdict_word
from .paths import load_chapter, require_repo_root


def _seeds(results: dict) -> str:
    kind = "confirmatory seeds" if results.get("confirmatory") else "development seeds"
    return f"{', '.join(map(str, results['seeds']))} ({kind})"


def verdict_box(slug: str, results: dict) -> str:
    """The markdown that opens the experiment notebook: the headline label, each headline claim's
    size and direction verdicts, the preconditions, the seeds and the compute of the committed run."""
    from .results import counts_text, evidence_counts, headline_verdict

    claims = results["claims"]
    heads = [c for c in claims if c["role"] == "headline"]
    pre = [c for c in claims if c["role"] == "precondition"]
    seconds = results.get("runtime_s", {})
    counts = evidence_counts(claims)
    lines = [f"**Verdict of the committed run** (book profile, seeds {_seeds(results)}): the paper's headline is "
             f"**{headline_verdict(claims)}** here. The notebook below recomputes every number at the profile "
             "you choose; its claims table judges your run.", "",
             "| headline claim | ours: mean [95% interval] | paper's number (size) | size | no effect | direction "
             "| label |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in heads:
        lines.append(f"| `{c['id']}` | {c['mean']:.3g} {format_interval(c['interval'])} | "
                     f"{c['direction']} {c['threshold']} | {format_verdict(verdict_word(c['verdict']), c.get('seeds_needed'))} | "
                     f"{c.get('null')} | {format_verdict(verdict_word(c.get('direction_verdict')), c.get('direction_seeds_needed'))} "
                     f"| {c.get('label')} |")
    met = "; ".join(f"`{c['id']}` ({c.get('kind')}) {verdict_word(c['verdict'])}" for c in pre) or "none declared"
    lines += ["", f"Preconditions: {met}. Headline and mechanism claims: {counts_text(counts)}. "
              + f"Compute: the experiment took {seconds.get('03_experiment', float('nan')):.0f} s on 2 CPU cores for "
              f"{len(results['seeds'])} seeds (theory {seconds.get('01_theory', float('nan')):.0f} s, implementation "
              f"{seconds.get('02_implementation', float('nan')):.0f} s). The scoreboard lists every claim."]
    return "\n".join(lines)


def reproducibility_summary(slug: str, results: dict) -> str:
    """The generated part of the chapter's reproducibility summary (the form of replication reports):
    the paper, the scope of the claims tested, the results, the seeds and the compute per profile."""
    from importlib import import_module

    from .results import counts_text, evidence_counts, headline_verdict

    chapter = load_chapter(slug)
    claims = results["claims"]
    roles = {}
    for c in claims:
        roles[c["role"]] = roles.get(c["role"], 0) + 1
    profiles = import_module(f"replib.papers.{slug}.experiment").EXPERIMENT_PROFILES
    seconds = results.get("runtime_s", {})
    total = sum(seconds.values())
    heads = [c for c in claims if c["role"] == "headline"]
    return "\n".join([
        "| | |", "| --- | --- |",
        f"| paper | {chapter['title']} ({', '.join(chapter.get('authors', []))}, {chapter.get('venue', '')}; "
        f"arXiv {chapter.get('arxiv', 'n/a')}); official code {chapter.get('official_code', 'none')} |",
        f"| scope | {len(claims)} claims declared in `chapter.yml` before the run: "
        + ", ".join(f"{n} {role}" for role, n in roles.items()) + " |",
        f"| results | headline **{headline_verdict(claims)}** (size: "
        + ", ".join(verdict_word(c["verdict"]) for c in heads) + "; direction: "
        + ", ".join(verdict_word(c.get("direction_verdict")) for c in heads) + "); headline and mechanism claims: "
        + counts_text(evidence_counts(claims)) + " |",
        f"| seeds | committed run: {_seeds(results)}; declared confirmatory seeds: "
        f"{', '.join(map(str, chapter.get('confirmatory_seeds', [])))}; smoke profile: "
        f"{', '.join(map(str, profiles['smoke']['seeds']))} |",
        f"| compute | book profile: {total:.0f} s on 2 CPU cores for the three notebooks ("
        + ", ".join(f"{stem} {s:.0f} s" for stem, s in seconds.items())
        + "); smoke: under 15 s a notebook; paper: unbounded, nearer the paper's scale |",
    ])


def _block(text_lines: list[str], start: str, end: str, body: str, prefix: str) -> list[str]:
    """``text_lines`` with the block between the marker lines replaced by ``body`` (each line with ``prefix``)."""
    first = next(i for i, line in enumerate(text_lines) if line.rstrip() == f"{prefix}{start}".rstrip())
    last = next(i for i in range(first, len(text_lines)) if text_lines[i].rstrip() == f"{prefix}{end}".rstrip())
    new = [f"{prefix}{start}"] + [(f"{prefix}{line}" if line else prefix.rstrip()) for line in body.splitlines()]
    return text_lines[:first] + new + text_lines[last:]


def _insert_cell(lines: list[str], index: int, start: str, end: str) -> list[str]:
    return lines[:index] + ["# %% [markdown]", f"# {start}", f"# {end}", ""] + lines[index:]


def _cell_starts(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if line.startswith("# %%")]


def write_blocks(slug: str, results: dict) -> bool:
    """Write (or first insert) the verdict box after the opening markdown cell of the chapter's
    03_experiment.py, and the reproducibility summary in its own cell before its "## Summary"; return
    whether the file changed (its .ipynb twin then needs `replib sync`)."""
    path = require_repo_root() / "notebooks" / slug / "03_experiment.py"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if BLOCKS["verdict"][0] not in text:
        starts = _cell_starts(lines)
        lines = _insert_cell(lines, starts[1], *BLOCKS["verdict"])
    if BLOCKS["summary"][0] not in text:  # a cell of its own, right before the "## Summary" heading
        summary = next(i for i, line in enumerate(lines) if line.startswith("# ## Summary"))
        end = summary
        while end > 0 and lines[end - 1] in ("#", ""):
            end -= 1
        opens_cell = lines[end - 1].startswith("# %%")  # then the new cell takes that cell's header
        lines = (lines[:end] + ([] if opens_cell else ["", "# %% [markdown]"])
                 + ["# ## Reproducibility summary", "#", f"# {BLOCKS['summary'][0]}", f"# {BLOCKS['summary'][1]}",
                    "", "# %% [markdown]"] + lines[summary:])
    lines = _block(lines, *BLOCKS["verdict"], verdict_box(slug, results), "# ")
    lines = _block(lines, *BLOCKS["summary"], reproducibility_summary(slug, results), "# ")
    new = "\n".join(lines) + "\n"
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def expected_notebook_text(slug: str, results: dict) -> str:
    """What 03_experiment.py holds once its blocks are regenerated (for the test that they are)."""
    path = require_repo_root() / "notebooks" / slug / "03_experiment.py"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines = _block(lines, *BLOCKS["verdict"], verdict_box(slug, results), "# ")
    lines = _block(lines, *BLOCKS["summary"], reproducibility_summary(slug, results), "# ")
    return "\n".join(lines) + "\n"


def sync_ipynb(paths: list[Path]) -> None:
    """Regenerate the .ipynb twins of ``paths`` (keeping their cell ids), as `replib sync` does."""
    import subprocess
    import sys

    if paths:
        jupytext = Path(sys.executable).with_name("jupytext")
        subprocess.run([str(jupytext), "--quiet", "--update", "--to", "ipynb", *map(str, paths)], check=True)
