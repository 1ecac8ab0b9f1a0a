"""Unit tests of replib.core: profiles, configuration, seeding, the claims ledger, fingerprints."""

import os

import numpy as np
import pytest

from replib.core import configure, resolve_profile, seed_everything
from replib.core.fingerprint import chapter_sources
from replib.core.paths import check_slug, load_chapter

DEFAULTS = {p: {"seeds": [0, 1, 2], "steps": 10, "lr": 0.1, "name": "x"} for p in ("smoke", "book", "paper")}


def test_profile_resolution(monkeypatch):
    monkeypatch.delenv("REPLIB_PROFILE", raising=False)
    assert resolve_profile() == "book"
    monkeypatch.setenv("REPLIB_PROFILE", "smoke")
    assert resolve_profile() == "smoke"
    assert resolve_profile("paper") == "paper"
    with pytest.raises(ValueError, match="valid profiles: smoke, book, paper"):
        resolve_profile("quick")
    monkeypatch.setenv("REPLIB_PROFILE", "fast")
    with pytest.raises(ValueError, match="unknown profile 'fast'"):
        resolve_profile()


def test_configure_overrides_and_refusals():
    cfg = configure(DEFAULTS, "book", steps=20, lr=1, seeds=None)
    assert (cfg.profile, cfg.steps, cfg.lr, cfg.seeds) == ("book", 20, 1.0, [0, 1, 2])
    assert isinstance(cfg.lr, float)
    with pytest.raises(ValueError, match="valid settings: lr, name, seeds, steps"):
        configure(DEFAULTS, "book", stepz=3)
    with pytest.raises(TypeError, match="'steps' expects int"):
        configure(DEFAULTS, "book", steps="many")
    with pytest.raises(TypeError):
        configure(DEFAULTS, "book", steps=True)


def test_configure_refuses_values_outside_their_bounds():
    import re

    bounds = {"steps": (1, 100), "lr": (0.0, None), "name": {"x", "y"}}
    assert configure(DEFAULTS, "book", bounds, steps=100, lr=0.0, name="y").steps == 100
    with pytest.raises(ValueError, match="'steps' got -5; allowed: 1 to 100"):
        configure(DEFAULTS, "book", bounds, steps=-5)
    with pytest.raises(ValueError, match="'lr' got -0.1; allowed: >= 0.0"):
        configure(DEFAULTS, "book", bounds, lr=-0.1)
    with pytest.raises(ValueError, match="allowed: one or more of x, y"):
        configure(DEFAULTS, "book", bounds, name="z")
    with pytest.raises(ValueError, match="'seeds' got \\[-1\\]; allowed: >= 0"):
        configure(DEFAULTS, "book", bounds, seeds=[-1])
    with pytest.raises(ValueError, match="names matching"):
        configure(DEFAULTS, "book", {"name": re.compile(r"x\d+")}, name="x1y")
    assert configure(DEFAULTS, "book", {"name": re.compile(r"x\d+")}, name="x12").name == "x12"


def test_seeding_is_deterministic():
    a = seed_everything(3).normal(size=5)
    b = seed_everything(3).normal(size=5)
    c = seed_everything(4).normal(size=5)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_unknown_chapter_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid chapters: .*bidprice_routing"):
        check_slug("bidprice")


def test_fingerprint_covers_notebooks_and_imported_lib_modules():
    names = {p.name for p in chapter_sources("bidprice_routing")}
    assert {"chapter.yml", "03_experiment.py", "method.py", "task.py", "experiment.py", "ledger.py",
            "__init__.py"} <= names
    assert "cli.py" not in names  # not imported by the chapter's notebooks


def test_chapter_declarations_load():
    chapter = load_chapter("bidprice_routing")
    assert chapter["slug"] == "bidprice_routing" and len(chapter["claims"]) >= 4


def test_grade_accepts_matches_and_names_the_first_wrong_case(capsys):
    from replib.core.exercises import grade

    grade(lambda x: x * 2, lambda x: x + x, [(1,), (np.arange(3),)])
    assert "correct" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"expected 4"):
        grade(lambda x: x * 3, lambda x: x + x, [(0,), (2,)])
    with pytest.raises(AssertionError, match="not written yet"):
        grade(lambda x: (_ for _ in ()).throw(NotImplementedError), lambda x: x, [(1,)])
    with pytest.raises(AssertionError, match=r"case 2 of 2, f\(2,\) returned 6; expected 4"):
        grade(lambda x: x * 3, lambda x: x + x, [(0,), (2,)], name="f")


def test_grade_prints_numpy_scalars_as_numbers():
    from replib.core.exercises import grade

    with pytest.raises(AssertionError, match=r"f\(0\.5,\) returned 1\.5; expected 1\.0$"):
        grade(lambda x: np.float64(x) * 3, lambda x: np.float64(x) * 2, [(np.float64(0.5),)], name="f")


def test_grade_names_the_case_where_the_answer_raises():
    from replib.core.exercises import grade

    with pytest.raises(AssertionError, match=r"case 2 of 3, f\(0\.0,\) raised ZeroDivisionError: float division"):
        grade(lambda x: 1 / x, lambda x: x, [(1.0,), (0.0,), (2.0,)], name="f")


def test_compute_threads_sets_and_restores():
    import torch

    from replib.core.runtime import compute_threads

    before = torch.get_num_threads()
    with compute_threads(1):
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
    assert torch.get_num_threads() == before


def test_model_device_is_the_gpu_at_the_paper_profile_only(monkeypatch):
    """Book and smoke numbers are CPU numbers on every machine; the paper profile takes the GPU."""
    from replib.core.runtime import model_device

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv("REPLIB_DEVICE", "cuda:1")
    assert model_device("book") == "cpu" and model_device("smoke") == "cpu"
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    assert model_device("paper") == "cuda:1"
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"  # deterministic cuBLAS
    monkeypatch.setenv("REPLIB_DEVICE", "cpu")
    assert model_device("paper") == "cpu"


def test_every_package_of_lib_is_installed_by_pyproject():
    """A wheel (what Colab installs) contains only the packages pyproject.toml lists."""
    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    lib = root / "lib"
    found = {".".join(p.parent.relative_to(lib).parts) for p in lib.rglob("__init__.py")}
    assert found <= listed, f"add to pyproject.toml's packages: {sorted(found - listed)}"


def test_thread_budget_caps_with_the_environment(monkeypatch):
    from replib.core.runtime import compute_threads, thread_budget

    monkeypatch.delenv("REPLIB_MAX_THREADS", raising=False)
    assert thread_budget(2) == 2
    monkeypatch.setenv("REPLIB_MAX_THREADS", "1")
    assert thread_budget(2) == 1 and thread_budget(1) == 1
    import torch

    with compute_threads(2):
        assert torch.get_num_threads() == 1
