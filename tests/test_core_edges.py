"""Edge cases of the core helpers that the chapters never reach: the Colab set-up cell rewrite, the
verdict box and reproducibility summary inserted into a notebook that has neither, the .ipynb sync
call, the data cache's fallbacks, the notebook display helpers, the grader's comparison, the device
choice."""

import functools
import subprocess
import sys

import numpy as np
import pytest

from replib.core import colab, data, display, exercises, report, runtime
from replib.core.fingerprint import GENERATED_BLOCKS as BLOCKS


def test_the_setup_cell_rewrite_replaces_the_first_code_cell_only(tmp_path, utf8_files):
    """write_setup_cells: the first bare `# %%` cell becomes the set-up cell; a second pass changes
    nothing; a notebook without a code cell is named."""
    nb = tmp_path / "01_theory.py"
    nb.write_text("# %% [markdown]\n# # Title\n\n# %%\nold = 1\n\n# %%\nkept = 2\n", encoding="utf-8")
    assert colab.write_setup_cells([str(nb)]) == [nb]
    assert nb.read_text(encoding="utf-8") == ("# %% [markdown]\n# # Title\n\n# %%\n" + colab.setup_cell_source()
                              + "\n\n# %%\nkept = 2\n")
    assert colab.write_setup_cells([nb]) == []
    bare = tmp_path / "bare.py"
    bare.write_text("# %% [markdown]\n# text only\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bare\.py: no code cell found"):
        colab.write_setup_cells([bare])


def test_the_repository_url_and_ref_come_from_the_config(monkeypatch):
    monkeypatch.setattr(colab, "_repository", lambda: {"url": "https://github.com/o/r/"})
    assert colab.repository_url() == "https://github.com/o/r" and colab.book_ref() == "main"
    monkeypatch.setattr(colab, "_repository", lambda: {"url": "u", "branch": 2026})
    assert colab.book_ref() == "2026"
    cell = colab.setup_cell_source("https://h/o/r", "v1")
    assert cell.startswith(colab.FIRST_LINE + "\n") and '"replib @ git+https://h/o/r.git@v1"' in cell
    assert 'if "google.colab" in sys.modules:' in cell
    compile(cell, "<setup cell>", "exec")


NOTEBOOK = """# %% [markdown]
# # Chapter: the experiment
#
# Goals.

# %%
x = 1

# %% [markdown]
# ## Discussion
# words
#


# ## Summary
# the end
"""


def test_write_blocks_inserts_both_blocks_once_and_then_only_rewrites_them(monkeypatch, tmp_path, utf8_files):
    """A notebook without the generated blocks gets the verdict box as a cell after the opening
    markdown cell and the reproducibility summary as a cell of its own before "## Summary"."""
    (tmp_path / "notebooks" / "x").mkdir(parents=True)
    path = tmp_path / "notebooks" / "x" / "03_experiment.py"
    path.write_text(NOTEBOOK, encoding="utf-8")
    monkeypatch.setattr(report, "require_repo_root", lambda: tmp_path)
    box = {"text": "verdict line 1\n\nverdict line 3"}
    monkeypatch.setattr(report, "verdict_box", lambda slug, results: {"x": box["text"]}[slug] * results["n"])
    monkeypatch.setattr(report, "reproducibility_summary", lambda slug, results: {"x": "| a | b |"}[slug] * results["n"])
    (vs, ve), (ss, se) = BLOCKS["verdict"], BLOCKS["summary"]
    assert report.write_blocks("x", {"n": 1}) is True
    assert path.read_text(encoding="utf-8") == (
        "# %% [markdown]\n# # Chapter: the experiment\n#\n# Goals.\n\n"
        f"# %% [markdown]\n# {vs}\n# verdict line 1\n#\n# verdict line 3\n# {ve}\n\n"
        "# %%\nx = 1\n\n# %% [markdown]\n# ## Discussion\n# words\n\n"
        f"# %% [markdown]\n# ## Reproducibility summary\n#\n# {ss}\n# | a | b |\n# {se}\n\n"
        "# %% [markdown]\n# ## Summary\n# the end\n")
    assert report.write_blocks("x", {"n": 1}) is False          # nothing new: the file is left as it is
    assert report.expected_notebook_text("x", {"n": 1}) == path.read_text(encoding="utf-8")
    box["text"] = "a new verdict"
    assert report.write_blocks("x", {"n": 1}) is True and f"# {vs}\n# a new verdict\n# {ve}\n" in path.read_text(encoding="utf-8")
    assert report.expected_notebook_text("x", {"n": 1}) == path.read_text(encoding="utf-8")


def test_the_summary_cell_takes_the_header_of_a_summary_that_opens_its_cell(monkeypatch, tmp_path, utf8_files):
    (tmp_path / "notebooks" / "x").mkdir(parents=True)
    path = tmp_path / "notebooks" / "x" / "03_experiment.py"
    path.write_text("# %% [markdown]\n# # T\n\n# %%\nx = 1\n\n# %% [markdown]\n# ## Summary\n# end\n", encoding="utf-8")
    monkeypatch.setattr(report, "require_repo_root", lambda: tmp_path)
    monkeypatch.setattr(report, "verdict_box", lambda slug, results: "v" * results["n"])
    monkeypatch.setattr(report, "reproducibility_summary", lambda slug, results: "s" * results["n"])
    (vs, ve), (ss, se) = BLOCKS["verdict"], BLOCKS["summary"]
    report.write_blocks("x", {"n": 1})
    assert path.read_text(encoding="utf-8") == (
        f"# %% [markdown]\n# # T\n\n# %% [markdown]\n# {vs}\n# v\n# {ve}\n\n# %%\nx = 1\n\n"
        f"# %% [markdown]\n# ## Reproducibility summary\n#\n# {ss}\n# s\n# {se}\n\n"
        "# %% [markdown]\n# ## Summary\n# end\n")


def test_sync_runs_jupytext_beside_the_interpreter_and_only_when_something_changed(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda args, check: calls.append((args, check)))
    report.sync_ipynb([])
    assert calls == []
    report.sync_ipynb([tmp_path / "a.py", tmp_path / "b.py"])
    jupytext = str(report.Path(sys.executable).with_name("jupytext"))
    assert calls == [([jupytext, "--quiet", "--update", "--to", "ipynb", str(tmp_path / "a.py"),
                       str(tmp_path / "b.py")], True)]


def _build():
    return {"x": [1, 2]}


def test_a_data_key_sees_through_partials_and_falls_back_to_a_name():
    """_source_of: a partial's function's module; an object with no readable source: its name."""
    module_source = data._source_of(_build)
    assert "def test_a_data_key_sees_through_partials" in module_source
    assert data._source_of(functools.partial(functools.partial(_build))) == module_source
    assert data._source_of(functools.partial(len)) == "len"          # builtins have no source file
    key = data.dataset_key("toy", {"b": 1, "a": [1, 2]}, _build)
    assert key["params"] == {"a": [1, 2], "b": 1} and len(key["digest"]) == 16 and len(key["source"]) == 16
    assert data.dataset_key("toy", {"a": [1, 2], "b": 1}, _build) == key             # order-free
    assert data.dataset_key("toy2", {"a": [1, 2], "b": 1}, _build)["digest"] != key["digest"]
    with pytest.raises(TypeError, match=r"cached_dataset 'toy': params must be plain JSON values"):
        data.dataset_key("toy", {"f": _build}, _build)


def test_a_build_can_return_rows_columns_or_a_dataset_and_nothing_else():
    datasets = data._datasets()
    ds = datasets.Dataset.from_dict({"x": [1]})
    assert data._to_dataset(ds) is ds
    assert data._to_dataset({"x": [1, 2]})["x"] == [1, 2]
    assert data._to_dataset([{"x": 3}, {"x": 4}])["x"] == [3, 4]
    with pytest.raises(TypeError, match=r"got tuple$"):
        data._to_dataset(({"x": 1},))


def test_a_cache_saved_first_by_another_process_is_used_and_the_staging_folder_removed(monkeypatch, tmp_path):
    monkeypatch.setenv(data.CACHE_VAR, str(tmp_path / "cache"))
    first = data.cached_dataset("race", {"n": 1}, _build)
    key = data.dataset_key("race", {"n": 1}, _build)
    folder = tmp_path / "cache" / "race" / key["digest"]
    real_rename = data.Path.rename

    def rename_after_someone_else(self, target):   # the other process wins the race
        if self.name.startswith(f".{key['digest']}-"):
            raise OSError("target exists")
        return real_rename(self, target)

    monkeypatch.setattr(data.Path, "rename", rename_after_someone_else)
    monkeypatch.setattr(data, "_load", lambda folder, key: None)  # force a rebuild over the existing folder
    real_rmtree = data.shutil.rmtree
    monkeypatch.setattr(data.shutil, "rmtree", lambda p, ignore_errors=False: None if p == folder else
                        real_rmtree(p, ignore_errors=ignore_errors))
    again = data.cached_dataset("race", {"n": 1}, _build)
    assert again["x"] == first["x"] == [1, 2]
    assert sorted(p.name for p in folder.parent.iterdir()) == [key["digest"]]   # no staging folder left


def test_an_interrupted_save_leaves_no_staging_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(data.CACHE_VAR, str(tmp_path / "cache"))
    datasets = data._datasets()
    monkeypatch.setattr(datasets.Dataset, "save_to_disk", lambda self, path: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        data.cached_dataset("halt", {"n": 1}, _build)
    assert list((tmp_path / "cache" / "halt").iterdir()) == []


def test_set_style_sets_the_books_figure_defaults():
    import matplotlib as mpl
    import pandas as pd
    import seaborn as sns

    with mpl.rc_context():
        sns.set_context("poster")
        display.set_style()
        assert mpl.rcParams["font.size"] == sns.plotting_context("notebook")["font.size"]
        assert tuple(mpl.rcParams["figure.figsize"]) == (6.4, 3.6) and mpl.rcParams["figure.dpi"] == 100
        assert mpl.rcParams["lines.linewidth"] == 2 and mpl.rcParams["axes.titlesize"] == "medium"
        assert mpl.rcParams["savefig.bbox"] == "tight" and mpl.rcParams["axes.grid"]
        assert pd.get_option("display.max_colwidth") == 200
    pd.reset_option("display.max_colwidth")


def test_progress_bars_are_off_quiet_or_marked_lines(monkeypatch, capsys):
    monkeypatch.setenv("REPLIB_PROGRESS", "0")
    bar = display.progress(range(3))
    assert bar.disable and not bar.leave and list(bar) == [0, 1, 2]
    monkeypatch.setenv("REPLIB_PROGRESS", "1")
    bar = display.progress(range(3), leave=True)
    assert not bar.disable and bar.leave
    bar.close()
    capsys.readouterr()
    monkeypatch.setenv("REPLIB_PROGRESS", "lines")
    assert list(display.progress(range(2), desc="seeds")) == [0, 1]
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith(display.PROGRESS_MARK) for line in err)
    assert err[-1].startswith(display.PROGRESS_MARK + "seeds: 2/2 done (")


def test_show_source_shows_the_function_as_python():
    code = display.show_source(_build)
    assert code.data.startswith("def _build():") and code.language == "python"


def test_the_grader_compares_sequences_by_element_and_shape_and_others_by_equality():
    close = exercises._close
    assert close((1.0, np.array([1.0, 2.0])), [1.0 + 1e-12, np.array([1.0, 2.0])])
    assert not close(1.0, (1.0,)) and not close((1.0,), (1.0, 2.0)) and not close([1.0, 2.0], [1.0, 3.0])
    assert not close(np.ones(3), np.ones((1, 3))) and close(np.nan, np.nan)
    assert close("a", "a") and not close("a", "b") and not close({"a": 1}, {"a": 2})
    from fractions import Fraction

    assert close([Fraction(1, 3)], [1 / 3]) and close(1 / 3, Fraction(1, 3))   # compared as floats


def test_seeding_sets_pythons_numpys_and_torchs_global_generators():
    """seed_everything(s): the same draws as seeding each library by hand with s (numpy with s mod 2^32)."""
    import random

    import torch

    def draws():
        return random.random(), np.random.rand(), float(torch.rand(()))

    rng = runtime.seed_everything(2**32 + 7)
    first = draws()
    random.seed(2**32 + 7)
    np.random.seed(7)
    torch.manual_seed(2**32 + 7)
    assert draws() == first
    assert rng.random() == np.random.default_rng(2**32 + 7).random()
    runtime.seed_everything(3)
    a = draws()
    runtime.seed_everything(3)
    assert draws() == a != first


def test_the_device_is_the_cpu_without_torch(monkeypatch):
    monkeypatch.delenv("REPLIB_DEVICE", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)   # `import torch` raises ImportError
    assert runtime.device() == "cpu"


def test_the_device_is_the_cpu_without_a_gpu_unless_forced(monkeypatch):
    import torch

    monkeypatch.delenv("REPLIB_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.device() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runtime.device() == "cuda"
    monkeypatch.setenv("REPLIB_DEVICE", "mps")
    assert runtime.device() == "mps"
    monkeypatch.setenv("REPLIB_DEVICE", "")
    assert runtime.device() == "cuda"


def test_profiles_resolve_an_empty_name_like_none_and_configure_uses_the_named_profile(monkeypatch):
    from replib.core.profiles import configure, describe_bound, resolve_profile

    monkeypatch.delenv("REPLIB_PROFILE", raising=False)
    assert resolve_profile("") == "book"
    monkeypatch.setenv("REPLIB_PROFILE", "paper")
    assert resolve_profile("") == "paper" and resolve_profile("smoke") == "smoke"
    defaults = {p: {"steps": n, "lr": 0.1, "seeds": [0]} for p, n in (("smoke", 1), ("book", 10), ("paper", 100))}
    cfg = configure(defaults, "smoke", seeds=None, lr=2)          # a None override is skipped, not the rest
    assert (cfg.profile, cfg.steps, cfg.lr, cfg.seeds) == ("smoke", 1, 2.0, [0])
    assert describe_bound(None) == "any" and describe_bound((None, 5)) == "<= 5"
    assert describe_bound((1, None)) == ">= 1" and describe_bound((1, 5)) == "1 to 5"


def test_marked_progress_lines_stay_and_come_at_most_every_interval(monkeypatch):
    monkeypatch.setenv("REPLIB_PROGRESS", "lines")
    bar = display.progress(range(2))
    assert bar.leave is True and bar.mininterval == display.LINES_INTERVAL == 10.0
    assert bar.desc == "" and isinstance(bar.fp._wrapped, display._MarkedLines)
    bar.close()


def test_the_setup_cell_installs_from_the_named_ref_in_colab_and_stops_on_a_failed_install(monkeypatch, capsys):
    """The cell run as Colab runs it (google.colab imported; pip and the installed distribution faked):
    it installs `replib @ git+URL.git@REF`, prints the version and commit; a failed pip stops it."""
    import importlib.metadata
    import json
    import types

    calls = []

    class Installed:
        version = "9.9"

        def read_text(self, name):
            return json.dumps({"vcs_info": {"commit_id": "abcdef1234"}}) if name == "direct_url.json" else None

    def pip(args, capture_output, text):
        calls.append(args)
        return types.SimpleNamespace(returncode=pip.code, stdout="pip says", stderr="why")

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(subprocess, "run", pip)
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: {"replib": Installed()}[name])
    cell = colab.setup_cell_source("https://h/o/r", "v1")
    assert cell.splitlines()[1] == "# Anywhere else (a local clone, the book build, CI) this cell does nothing."
    pip.code = 0
    exec(cell, {})
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", "replib @ git+https://h/o/r.git@v1"]]
    out = capsys.readouterr().out
    assert out.startswith("installing replib from the book's repository at v1 ... done in 0 s: replib 9.9, ")
    assert out.endswith("commit abcdef1\n")
    pip.code = 1
    with pytest.raises(RuntimeError, match="installing replib failed: pip's output is printed above"):
        exec(cell, {})
    assert capsys.readouterr().out.endswith("pip says why\n")
    monkeypatch.delitem(sys.modules, "google.colab")
    calls.clear()
    exec(cell, {})                                      # anywhere else: nothing happens
    assert calls == [] and capsys.readouterr().out == ""


def test_a_repository_url_loses_trailing_slashes_only():
    from unittest import mock

    with mock.patch.object(colab, "_repository", lambda: {"url": "https://h/o/REPOX//"}):
        assert colab.repository_url() == "https://h/o/REPOX"


def test_set_style_uses_the_colorblind_palette_on_a_white_grid():
    import matplotlib as mpl
    import seaborn as sns

    with mpl.rc_context():
        display.set_style()
        colours = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
        assert [mpl.colors.to_hex(c) for c in colours] == sns.color_palette("colorblind").as_hex()
        assert mpl.rcParams["axes.facecolor"] == "white" and mpl.rcParams["axes.grid"]


def test_a_verdict_box_without_runtimes_says_nan_seconds():
    """verdict_box on results that record no runtime (a run that was cut short): nan, not a crash."""
    from replib.core.results import committed_results

    record = dict(committed_results()["mwcp_pruning"])
    record.pop("runtime_s")
    assert "Compute: the experiment took nan s on 2 CPU cores for" in report.verdict_box("mwcp_pruning", record)


def test_the_book_config_is_read_as_utf8(utf8_files):
    assert colab.repository_url().startswith("https://")


def test_a_minimal_chapter_and_record_render_with_their_stated_defaults(monkeypatch):
    """verdict_box and reproducibility_summary for a chapter.yml with only a title and a record with
    no runtimes and no precondition: 'none declared', nan seconds, n/a, none, empty lists."""
    import importlib
    import types

    from replib.core.ledger import judge_claims

    declared = [{"id": "m1", "role": "mechanism", "statement": "s", "paper": "p", "metric": "m",
                 "direction": ">=", "threshold": 0.0, "unit": "score"}]
    record = {"seeds": [3, 4], "claims": judge_claims(declared, {"m1": [1.0, 2.0]}, "book")}
    monkeypatch.setattr(report, "load_chapter", lambda slug: {"x": {"title": "T"}}[slug])
    experiment = types.SimpleNamespace(EXPERIMENT_PROFILES={"smoke": {"seeds": [0, 1]}})
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module",
                        lambda name: experiment if name == "replib.papers.x.experiment" else real(name))
    box = report.verdict_box("x", record)
    assert "seeds 3, 4 (development seeds)" in box
    assert box.endswith("Preconditions: none declared. Headline and mechanism claims: 0 hold, 0 fail, 1 undecided, "
                        "0 inconclusive. Compute: the experiment took nan s on 2 CPU cores for 2 seeds (theory "
                        "nan s, implementation nan s). The scoreboard lists every claim.")
    lines = report.reproducibility_summary("x", record).splitlines()
    assert lines[2] == "| paper | T (, ; arXiv n/a); official code none |"
    assert lines[5] == ("| seeds | committed run: 3, 4 (development seeds); declared confirmatory seeds: ; "
                        "smoke profile: 0, 1 |")
    assert lines[6].startswith("| compute | book profile: 0 s on 2 CPU cores for the three notebooks (); ")


def test_block_markers_are_found_despite_trailing_spaces():
    (start, end) = BLOCKS["verdict"]
    lines = ["# %% [markdown]", f"# {start}   ", "# old", f"# {end} ", "", "# %%"]
    assert report._block(lines, start, end, "new", "# ") == ["# %% [markdown]", f"# {start}", "# new", f"# {end} ",
                                                              "", "# %%"]


def test_the_repository_is_found_only_where_notebooks_and_the_toc_both_are(monkeypatch, tmp_path):
    """repo_root: the folder two levels above the package (lib/replib), when it holds notebooks/ and
    _toc.yml; else None, and commands that need it say why."""
    from replib.core import paths

    package = tmp_path / "clone" / "lib" / "replib"
    package.mkdir(parents=True)
    monkeypatch.setattr(paths, "PACKAGE_DIR", package)
    assert paths.repo_root() is None
    (tmp_path / "clone" / "notebooks").mkdir()
    assert paths.repo_root() is None                       # notebooks/ alone is not a clone
    (tmp_path / "clone" / "_toc.yml").write_text("", encoding="utf-8")
    assert paths.repo_root() == tmp_path / "clone"
    (tmp_path / "clone" / "notebooks").rmdir()
    assert paths.repo_root() is None                       # nor is _toc.yml alone
    with pytest.raises(RuntimeError) as err:
        paths.require_repo_root()
    assert str(err.value) == ("this command needs a clone of the book's repository with replib installed from it "
                              "(`make setup`); the installed package is not inside one")


def test_outside_a_clone_chapters_come_from_the_wheels_copy(monkeypatch):
    import importlib.resources

    from replib.core import paths

    monkeypatch.setattr(paths, "repo_root", lambda: None)
    assert paths._chapters_dir() == importlib.resources.files("replib") / "chapters"


def test_chapters_are_folders_with_a_chapter_yml_and_unknown_ones_are_named(monkeypatch, tmp_path, utf8_files):
    from replib.core import paths

    for name in ("b", "a", "notes"):
        (tmp_path / name).mkdir()
    (tmp_path / "a" / "chapter.yml").write_text("title: A\n", encoding="utf-8")
    (tmp_path / "b" / "chapter.yml").write_text("title: B\n", encoding="utf-8")
    (tmp_path / "chapter.yml").write_text("", encoding="utf-8")   # a file, not a chapter folder
    monkeypatch.setattr(paths, "_chapters_dir", lambda: tmp_path)
    assert paths.chapter_slugs() == ["a", "b"] and paths.load_chapter("b") == {"title": "B"}
    with pytest.raises(ValueError) as err:
        paths.check_slug("notes")
    assert str(err.value) == "unknown chapter 'notes'; valid chapters: a, b"


def test_stubs_keep_docstrings_verbatim_and_are_three_lines_apart():
    import ast

    from replib.core.student import STUB, blank_solution

    stub = ast.unparse(ast.parse(STUB))
    source = 'def f(x):\n    """Sum.\n\n        indented line."""\n    return x\n\n\ndef g():\n    return 1\n'
    assert blank_solution(source) == (f'def f(x):\n    """Sum.\n\n        indented line."""\n    {stub}\n\n\n'
                                      f"def g():\n    {stub}\n")
    with pytest.raises(ValueError) as err:
        blank_solution("import os\n")
    assert str(err.value) == "a solution cell may only define functions"


def test_student_notebooks_are_written_as_ipynb_into_a_new_nested_folder(tmp_path):
    import json

    from replib.core.student import write_student_notebooks

    chapter = tmp_path / "ch"
    chapter.mkdir()
    (chapter / "01_theory.py").write_text(
        '# %% [markdown]\n# Title\n\n# %% tags=["solution", "hide-input"]\ndef f():\n    return 1\n', encoding="utf-8")
    (written,) = write_student_notebooks(chapter, tmp_path / "out" / "nested")
    assert written == tmp_path / "out" / "nested" / "01_theory.ipynb"
    cells = json.loads(written.read_text(encoding="utf-8"))["cells"]
    assert cells[1]["metadata"]["tags"] == ["solution"] and "NotImplementedError" in "".join(cells[1]["source"])


# the fake clone's package folder, spelt in parts: tools/mutants.sh rewrites the literal path in the tests
# of its scratch copy, where the real package lives elsewhere
LIB = "/".join(("lib", "replib"))


def _fake_clone(tmp_path, monkeypatch):
    """A clone with package replib (core.a, core.b, papers.ch.method, papers.ch.experiment) and a
    chapter 'ch' whose experiment notebook imports the chapter's experiment module."""
    from replib.core import fingerprint as fp

    files = {
        f"{LIB}/__init__.py": "", f"{LIB}/core/__init__.py": "", f"{LIB}/core/a.py": "A = 1\n",
        f"{LIB}/core/b.py": "B = 2\n", f"{LIB}/papers/__init__.py": "",
        f"{LIB}/papers/ch/__init__.py": "from .method import f\n",
        f"{LIB}/papers/ch/method.py": '"""Method."""\n\ndef f():\n    return 1\n',
        f"{LIB}/papers/ch/experiment.py": ("from . import method\nfrom ..ch.method import f\n"
                                               "from replib.core import a\nimport replib.core.b\nimport numpy\n"),
        "notebooks/ch/chapter.yml": "title: T\n",
        "notebooks/ch/01_theory.py": "# %%\nimport math\n",
        "notebooks/ch/03_experiment.py": "# %%\nfrom replib.papers.ch import experiment\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(fp, "PACKAGE_DIR", tmp_path / "lib" / "replib")
    monkeypatch.setattr(fp, "require_repo_root", lambda: tmp_path)
    monkeypatch.setattr(fp, "check_slug", lambda slug: {"ch": "ch", "ch2": "ch2"}[slug])
    return fp


def test_imports_are_resolved_relative_to_their_module_with_parent_packages(tmp_path, monkeypatch):
    """_imported_replib_modules: `from . import m`, `from ..ch.m import f`, absolute imports; parent
    packages included; non-replib and non-module names dropped; an __init__ is its own package."""
    fp = _fake_clone(tmp_path, monkeypatch)
    lib = tmp_path / "lib" / "replib"
    assert fp._imported_replib_modules(lib / "papers" / "ch" / "experiment.py") == {
        "replib", "replib.core", "replib.core.a", "replib.core.b", "replib.papers", "replib.papers.ch",
        "replib.papers.ch.method"}
    assert fp._imported_replib_modules(lib / "papers" / "ch" / "__init__.py") == {
        "replib", "replib.papers", "replib.papers.ch", "replib.papers.ch.method"}
    assert fp._imported_replib_modules(tmp_path / "notebooks" / "ch" / "03_experiment.py") == {
        "replib", "replib.papers", "replib.papers.ch", "replib.papers.ch.experiment"}
    assert fp._imported_replib_modules(tmp_path / "notebooks" / "ch" / "01_theory.py") == set()
    (lib / "papers" / "ch" / "deep.py").write_text("from ...core import a\n", encoding="utf-8")   # three levels up
    assert fp._imported_replib_modules(lib / "papers" / "ch" / "deep.py") == {"replib", "replib.core", "replib.core.a"}
    (lib / "papers" / "ch" / "bare.py").write_text("import replib\n", encoding="utf-8")
    assert fp._imported_replib_modules(lib / "papers" / "ch" / "bare.py") == {"replib"}


def test_a_fingerprint_is_the_documented_sha256_over_paths_and_texts(tmp_path, monkeypatch, utf8_files):
    """fingerprint = sha256 over each source in order: its path relative to the clone, then NUL, its
    text (generated blocks cut, CRLF read as LF), NUL; chapter_sources lists what exists, sorted."""
    import hashlib

    fp = _fake_clone(tmp_path, monkeypatch)
    start, end = BLOCKS["verdict"]
    nb = tmp_path / "notebooks" / "ch" / "03_experiment.py"
    nb.write_text(f"# %%\r\nfrom replib.papers.ch import experiment\r\n# {start}\n# 0.93\n# {end}\n", encoding="utf-8")
    sources = fp.chapter_sources("ch")
    names = [p.relative_to(tmp_path).as_posix() for p in sources]
    assert names == sorted(names) and set(names) == {
        "notebooks/ch/chapter.yml", "notebooks/ch/01_theory.py", "notebooks/ch/03_experiment.py",
        f"{LIB}/__init__.py", f"{LIB}/papers/__init__.py", f"{LIB}/papers/ch/__init__.py",
        f"{LIB}/papers/ch/experiment.py", f"{LIB}/papers/ch/method.py", f"{LIB}/core/__init__.py",
        f"{LIB}/core/a.py", f"{LIB}/core/b.py"}
    assert fp._text(nb) == b"# %%\nfrom replib.papers.ch import experiment\n# \n"
    digest = hashlib.sha256()
    for path, name in zip(sources, names):
        text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
        text = text.replace(f"{start}\n# 0.93\n# {end}", "")
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    assert fp.fingerprint("ch") == digest.hexdigest()
    assert fp.source_hashes("ch") == {name: hashlib.sha256(fp.code_text(path)).hexdigest()
                                      for path, name in zip(sources, names)}
    # the same files under another chapter's name: other paths, another fingerprint
    import shutil

    shutil.copytree(tmp_path / "notebooks" / "ch", tmp_path / "notebooks" / "ch2")
    assert fp.fingerprint("ch2") != fp.fingerprint("ch")


def test_code_text_drops_docstrings_only_and_ignores_line_positions(tmp_path):
    from replib.core.fingerprint import code_text

    def code(text, name="m.py"):
        path = tmp_path / "lib" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return code_text(path)

    assert code('"""Doc."""\nx = 1\n') == code("\n\n# moved down\nx = 1\n")          # docstring, lines, comment
    assert code("if x:\n    'a string, not a docstring'\n    y = 1\n") != code("if x:\n    'another'\n    y = 1\n")
    assert code("class C:\n    'doc'\n") == code("class C:\n    pass\n")


def test_the_cache_lives_in_the_clone_else_in_the_home_folder_unless_set(monkeypatch, tmp_path):
    monkeypatch.delenv(data.CACHE_VAR, raising=False)
    monkeypatch.setattr(data, "repo_root", lambda: tmp_path / "clone")
    assert data.cache_dir() == tmp_path / "clone" / "data" / "cache"
    monkeypatch.setattr(data, "repo_root", lambda: None)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data.cache_dir() == tmp_path / "home" / ".cache" / "replib"
    monkeypatch.setenv(data.CACHE_VAR, str(tmp_path / "mine"))
    assert data.cache_dir() == tmp_path / "mine"


def test_marked_lines_turn_every_redraw_and_line_into_one_marked_line():
    import io

    stream = io.StringIO()
    display._MarkedLines(stream).write("\r 1/3 \r2/3\n\n3/3")
    assert stream.getvalue().splitlines() == [display.PROGRESS_MARK + t for t in ("1/3", "2/3", "3/3")]
