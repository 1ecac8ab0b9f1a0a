"""The text of the notebooks and declarations: no control characters (a LaTeX \\theta once reached the
files as a tab, \\beta as a backspace, \\alpha as a bell), and every formula in markdown well formed."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_FILES = sorted([*ROOT.glob("notebooks/*/0*.py"), *ROOT.glob("notebooks/*/0*.ipynb"),
                     *ROOT.glob("notebooks/*/chapter.yml"), *ROOT.glob("book/*.md"), ROOT / "README.md"])
MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$", re.S)


def control_characters(text: str) -> list[str]:
    """Every control character but the newline (a tab included: the book's files indent with spaces)."""
    return sorted({f"{ord(ch):#04x}" for ch in text if ord(ch) < 32 and ch != "\n"})


def formula_problems(math: str) -> list[str]:
    """What makes one formula fail to typeset, short of a TeX engine: unbalanced braces, unmatched
    \\left/\\right or \\begin/\\end."""
    problems = []
    depth = 0
    for ch in re.sub(r"\\[{}]", "", math):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            break
    if depth:
        problems.append("unbalanced braces")
    if len(re.findall(r"\\left\b", math)) != len(re.findall(r"\\right\b", math)):
        problems.append("\\left without \\right")
    if re.findall(r"\\begin\{(\w+\*?)\}", math) != re.findall(r"\\end\{(\w+\*?)\}", math):
        problems.append("\\begin without its \\end")
    return problems


def markdown_texts(path: Path) -> list[str]:
    """The markdown a reader sees: a notebook's markdown cells (from the .py twin: its comment lines),
    or the whole of a markdown page."""
    if path.suffix == ".md":
        return [path.read_text(encoding="utf-8")]
    cells, current, prose = [], [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# %%"):
            if prose:
                cells.append("\n".join(current))
            current, prose = [], "[markdown]" in line
        elif prose:
            current.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    if prose:
        cells.append("\n".join(current))
    return cells


def file_text(path: Path) -> str:
    """A file's text as a reader gets it: an .ipynb's cells parsed (JSON escapes a tab as \\t)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        return "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
    return text


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_control_characters(path):
    assert control_characters(file_text(path)) == [], "e.g. a LaTeX \\theta written as a tab"


MARKDOWN_FILES = [p for p in TEXT_FILES if p.suffix in (".py", ".md")]


@pytest.mark.parametrize("path", MARKDOWN_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_formula_is_well_formed(path):
    bad = []
    for cell in markdown_texts(path):
        text = re.sub(r"`[^`]*`", "", re.sub(r"```.*?```", "", cell, flags=re.S))  # code is not math
        for match in MATH.finditer(text):
            math = match.group(1) or match.group(2)
            bad += [f"${math}$: {problem}" for problem in formula_problems(math)]
    assert bad == []


def test_the_lint_catches_what_it_is_for():
    assert control_characters("$\x08eta$ and \t") == ["0x08", "0x09"]
    assert formula_problems(r"\frac{a}{b") == ["unbalanced braces"]
    assert formula_problems(r"\left( x") == ["\\left without \\right"]
    assert formula_problems(r"\begin{aligned} x") == ["\\begin without its \\end"]
    assert formula_problems(r"\left\{ x \right\} + \frac{1}{2}") == []



READER_FILES = sorted([*ROOT.glob("notebooks/*/0*.py"), *ROOT.glob("notebooks/*/chapter.yml"), *ROOT.glob("lib/replib/papers/*/*.py"),
                       *ROOT.glob("book/*.md"), *ROOT.glob("instructors/*.md"), ROOT / "README.md"])


@pytest.mark.parametrize("path", READER_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unpublished_source_is_cited(path):
    """The chapters were planned from internal paper digests that readers never get: no page cites
    "the digest"; each chapter says where its numbers come from in its own words."""
    lines = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bdigest'?s?\b", line, re.I)]
    assert not lines, f"{path.relative_to(ROOT)} mentions the digest on lines {lines}"
