"""Each paper is a package with the same files, and its imports run one way (see README, Layout)."""

import ast
from pathlib import Path

import pytest

from replib.core.paths import chapter_slugs

PAPERS = Path(__file__).resolve().parents[1] / "lib" / "replib" / "papers"
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
