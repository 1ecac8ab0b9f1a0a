"""Each paper is a package with the same files, and its imports run one way (see README, Layout)."""

import ast
from pathlib import Path

import pytest

from replib.core.paths import chapter_slugs

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ROOT / "lib" / "replib" / "papers"
REQUIRED = ("__init__.py", "method.py", "task.py", "experiment.py", "exercises.py")
OPTIONAL = ("baselines.py", "theory.py")
# module -> the sibling modules it may not import
FORBIDDEN = {"method": {"task", "experiment", "baselines", "theory", "exercises"},
             "task": {"experiment", "baselines", "theory", "exercises"},
             "baselines": {"experiment", "theory", "exercises"},
             "theory": {"experiment", "exercises"},
             "exercises": {"experiment"}}


def _imports(path: Path, slug: str) -> tuple[set[str], set[str]]:
    """(sibling modules of the same package, other chapters' packages) that a module imports."""
    siblings, others = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                siblings.update([node.module] if node.module else [a.name for a in node.names])
                continue
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["replib", "papers"] and len(parts) > 2:
                (siblings.add(parts[3]) if parts[2] == slug and len(parts) > 3
                 else others.add(parts[2]) if parts[2] != slug else None)
    return siblings, others


def test_every_chapter_has_a_package_and_no_single_module():
    assert sorted(p.name for p in PAPERS.iterdir() if p.is_dir() and p.name != "__pycache__") == chapter_slugs()
    assert not [p.name for p in PAPERS.glob("*.py") if p.name != "__init__.py"]


@pytest.mark.parametrize("slug", chapter_slugs())
def test_package_files_and_import_direction(slug):
    package = PAPERS / slug
    files = {p.name for p in package.glob("*.py")}
    assert set(REQUIRED) <= files, f"{slug} lacks {sorted(set(REQUIRED) - files)}"
    assert files <= set(REQUIRED + OPTIONAL), f"{slug}: unexpected modules {sorted(files - set(REQUIRED + OPTIONAL))}"
    init = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    assert ast.get_docstring(init) and len(init.body) == 1, f"{slug}/__init__.py: a docstring only"
    for path in sorted(package.glob("*.py")):
        siblings, others = _imports(path, slug)
        assert not others, f"{slug}/{path.name} imports another chapter: {sorted(others)}"
        bad = siblings & FORBIDDEN.get(path.stem, set())
        assert not bad, f"{slug}/{path.name} may not import {sorted(bad)}"


@pytest.mark.parametrize("slug", chapter_slugs())
def test_experiment_declares_the_range_of_every_setting(slug):
    """`replib run -p` checks values against EXPERIMENT_BOUNDS before anything runs: every setting a
    profile defines (but seeds and booleans) has a bound, and every profile's defaults lie inside."""
    import importlib

    from replib.core.profiles import check_bound

    module = importlib.import_module(f"replib.papers.{slug}.experiment")
    bounds = getattr(module, "EXPERIMENT_BOUNDS", None)
    assert isinstance(bounds, dict), f"{slug}: experiment.py declares no EXPERIMENT_BOUNDS"
    for profile, settings in module.EXPERIMENT_PROFILES.items():
        unbounded = [k for k, v in settings.items() if k != "seeds" and not isinstance(v, bool) and k not in bounds]
        assert not unbounded, f"{slug} ({profile}): no bound for {unbounded}"
        assert not set(bounds) - set(settings), f"{slug}: bounds for unknown settings {sorted(set(bounds) - set(settings))}"
        for name, bound in bounds.items():
            check_bound(name, settings[name], bound)


FORMULA_MARKS = ("->", " = ", "^", "exp(", "sum(", "sum_", "sqrt", "\\frac")


@pytest.mark.parametrize("slug", chapter_slugs())
def test_graders_do_not_print_the_answer(slug):
    """help(check_x) in a student hand-out shows the grader's docstring: it says what is checked,
    not the formula of the answer (a heuristic: no arrows, equations or maths operators)."""
    import importlib
    import inspect

    module = importlib.import_module(f"replib.papers.{slug}.exercises")
    graders = [f for name, f in inspect.getmembers(module, inspect.isfunction) if name.startswith("check_")]
    assert len(graders) >= 2, f"{slug}: at least two check_* graders"
    for grader in graders:
        doc = inspect.getdoc(grader) or ""
        assert doc, f"{slug}.{grader.__name__}: say what it checks"
        marks = [m for m in FORMULA_MARKS if m in doc]
        assert not marks, f"{slug}.{grader.__name__}'s docstring shows a formula ({marks}): say what it checks instead"


def test_the_docs_name_exactly_the_chapters_that_use_a_gpu():
    """book/how_to_run.md's "On a GPU" section lists the chapters whose package calls
    core.model_device (their models go to the GPU at the paper profile), no more and no fewer."""
    import re

    docs = (ROOT / "book" / "how_to_run.md").read_text(encoding="utf-8")
    section = docs.split("## On a GPU", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z0-9_]+)`", section)) & set(chapter_slugs())
    using = {slug for slug in chapter_slugs()
             if any("model_device(" in p.read_text(encoding="utf-8") for p in (PAPERS / slug).glob("*.py"))}
    assert listed == using, f"docs list but code does not use: {sorted(listed - using)}; " \
                            f"code uses but docs do not list: {sorted(using - listed)}"


def test_license_and_citation_match_the_package():
    """Instructors hand out copies: the licence is the one pyproject declares, and the citation's
    version and repository are the package's and the book's."""
    import re

    import yaml

    from replib import __version__

    root = Path(__file__).resolve().parents[1]
    pyproject = (root / "pyproject.toml").read_text()
    assert re.search(r'^license = "MIT"$', pyproject, re.M) and (root / "LICENSE").read_text().startswith("MIT License")
    citation = yaml.safe_load((root / "CITATION.cff").read_text())
    config = yaml.safe_load((root / "_config.yml").read_text())
    assert str(citation["version"]) == __version__
    assert re.search(rf'^version = "{re.escape(__version__)}"$', pyproject, re.M)
    assert citation["repository-code"] == config["repository"]["url"] and citation["license"] == "MIT"
