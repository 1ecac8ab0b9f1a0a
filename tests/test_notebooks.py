"""Structure of the book: paired notebooks in sync, no outputs committed, the Colab cell first,
a literal parameters cell with a profile in every notebook, one figure-caption rule, every chapter in
_toc.yml."""

import ast
import json
import re
from pathlib import Path

import jupytext
import pytest
import yaml
from jupytext.compare import compare_notebooks

from replib.core.colab import setup_cell_source
from replib.core.fingerprint import NOTEBOOKS
from replib.core.paths import chapter_slugs

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = chapter_slugs()
PAIRS = [(slug, stem) for slug in CHAPTERS for stem in NOTEBOOKS]


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_every_chapter_folder_is_a_chapter():
    folders = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == CHAPTERS, "every notebooks/<slug>/ needs a chapter.yml"


@pytest.mark.parametrize("slug, stem", PAIRS)
def test_pair_is_in_sync(slug, stem):
    folder = ROOT / "notebooks" / slug
    py, ipynb = folder / f"{stem}.py", folder / f"{stem}.ipynb"
    assert py.is_file() and ipynb.is_file(), f"{slug}/{stem}: both the .py and the .ipynb are committed"
    compare_notebooks(jupytext.read(ipynb), jupytext.read(py), fmt="py:percent")


@pytest.mark.parametrize("slug, stem", PAIRS)
def test_ipynb_carries_no_outputs(slug, stem):
    raw = json.loads((ROOT / "notebooks" / slug / f"{stem}.ipynb").read_text())
    for cell in raw["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{slug}/{stem}: strip outputs"


@pytest.mark.parametrize("slug, stem", PAIRS)
def test_first_code_cell_is_the_colab_setup(slug, stem):
    nb = jupytext.read(ROOT / "notebooks" / slug / f"{stem}.py")
    assert code_cells(nb)[0].source.strip() == setup_cell_source().strip()


@pytest.mark.parametrize("slug", CHAPTERS)
def test_experiment_has_literal_parameters_with_a_profile(slug):
    nb = jupytext.read(ROOT / "notebooks" / slug / "03_experiment.py")
    tagged = [c for c in code_cells(nb) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged parameters"
    names = []
    for node in ast.parse(tagged[0].source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, "parameters: plain NAME = literal"
        ast.literal_eval(node.value)  # raises unless the value is a literal
        names.append(node.targets[0].id)
    assert {"profile", "seeds"} <= set(names)
    import papermill  # the batch runner validates -p names with papermill: it must see every one

    assert list(papermill.inspect_notebook(str(ROOT / "notebooks" / slug / "03_experiment.ipynb"))) == names


@pytest.mark.parametrize("slug, stem", PAIRS)
def test_every_notebook_takes_its_profile_from_a_parameters_cell(slug, stem):
    """papermill (replib run) sets `profile` in all three notebooks, right after the Colab cell."""
    cells = code_cells(jupytext.read(ROOT / "notebooks" / slug / f"{stem}.py"))
    tagged = [i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", [])]
    assert tagged == [1], f"{slug}/{stem}: one cell tagged parameters, right after the Colab cell"
    assert "profile = None" in cells[1].source.splitlines()[0]
    rest = "\n".join(c.source for c in cells[2:])
    resolved = "core.resolve_profile(profile)" in rest or "EXPERIMENT_PROFILES, profile," in rest
    assert resolved, f"{slug}/{stem}: the profile parameter is never resolved"


@pytest.mark.parametrize("slug, stem", PAIRS)
def test_figures_are_captioned_one_way(slug, stem):
    """Figures are captioned by a markdown cell "*Figure N. ...*", numbered from 1 on each page (it
    reads the same in Colab and in the book); no myst-nb figure metadata, which Colab does not show."""
    nb = jupytext.read(ROOT / "notebooks" / slug / f"{stem}.py")
    assert not [c for c in nb.cells if "figure" in c.metadata.get("mystnb", {})], f"{slug}/{stem}: mystnb figure"
    numbers = [int(m.group(1)) for c in nb.cells if c.cell_type == "markdown"
               for m in re.finditer(r"^\*Figure (\d+)\.", c.source, flags=re.M)]
    assert numbers == list(range(1, len(numbers) + 1)), f"{slug}/{stem}: figures numbered {numbers}"


def test_toc_lists_every_chapter_notebook():
    toc = (ROOT / "_toc.yml").read_text()
    files = set()

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.add(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(toc))
    for slug, stem in PAIRS:
        assert f"notebooks/{slug}/{stem}" in files
    for entry in files:  # every page exists; notebook pages as the .ipynb Colab opens
        assert any((ROOT / f"{entry}{ext}").is_file() for ext in (".md", ".ipynb")), entry


def test_each_chapter_sits_in_the_part_of_its_field():
    """The table of contents groups chapters by the `field` their chapter.yml declares."""
    from replib.core.paths import load_chapter

    parts = yaml.safe_load((ROOT / "_toc.yml").read_text())["parts"]
    part_of = {entry["file"].split("/")[1]: part["caption"] for part in parts
               for entry in part["chapters"] if entry["file"].startswith("notebooks/")}
    assert {slug: load_chapter(slug)["field"] for slug in CHAPTERS} == {slug: part_of.get(slug) for slug in CHAPTERS}


def test_launch_buttons_and_the_colab_install_use_one_ref():
    """The launch buttons open each notebook from `repository.branch` (main while the book is being
    written; a published edition sets its release tag) and the set-up cell installs replib from the
    same ref, so a Colab notebook never runs against another version of the package."""
    from replib.core.colab import book_ref

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["branch"] == book_ref() == "main" and config["repository"]["path_to_book"] == ""
    assert f'replib-book.git@{book_ref()}"' in setup_cell_source()
    assert '.git@v0.2.0"' in setup_cell_source(ref="v0.2.0")
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert config["only_build_toc_files"] is True


def test_sync_rewrites_the_colab_cell(tmp_path):
    from replib.core.colab import write_setup_cells

    source = (ROOT / "notebooks" / CHAPTERS[0] / "01_theory.py").read_text()
    stale = tmp_path / "01_theory.py"
    stale.write_text(source.replace("git+https://github.com/", "git+https://example.org/old/"))
    assert write_setup_cells([stale]) == [stale]
    assert code_cells(jupytext.read(stale))[0].source.strip() == setup_cell_source().strip()
    assert write_setup_cells([stale]) == []  # already current: nothing to do


def test_student_copies_blank_every_answer_and_keep_the_graders(tmp_path):
    from replib.core.student import blank_solution, write_student_notebooks

    stub = blank_solution('def f(x, y):\n    """Add."""\n    return x + y\n')
    assert stub.startswith("def f(x, y):") and "NotImplementedError" in stub and "return" not in stub
    for slug in CHAPTERS:
        written = write_student_notebooks(ROOT / "notebooks" / slug, tmp_path / slug)
        nb = jupytext.read(written[1])  # 02_implementation: where the graded exercises are
        answers = [c for c in code_cells(nb) if "solution" in c.metadata.get("tags", [])]
        assert len(answers) >= 2, f"{slug}: at least two graded exercises"
        assert all("NotImplementedError" in c.source for c in answers)
        assert sum("check_" in c.source for c in code_cells(nb)) >= 2
