"""The reader's pages: the Sphinx extension of the book build, and the browser check of a build."""

from pathlib import Path

import pytest

from replib import browser_check
from replib.core.colab import setup_cell_source
from replib.sphinx_book import _on_page_context, remove_colab_cell


def _notebook(first_code: str) -> dict:
    return {"cells": [{"cell_type": "markdown", "source": ["# Title"], "metadata": {}},
                      {"cell_type": "code", "source": [first_code], "metadata": {}},
                      {"cell_type": "code", "source": ["x = 1"], "metadata": {}}]}


def test_the_colab_cell_is_removed_from_pages_and_nothing_else():
    notebook = _notebook(setup_cell_source("https://example.invalid/book"))
    assert remove_colab_cell(notebook)
    assert notebook["cells"][1]["metadata"]["tags"] == ["remove-cell"]
    assert "tags" not in notebook["cells"][2]["metadata"]
    plain = _notebook("import numpy as np")  # a first code cell that is not the set-up cell stays
    assert not remove_colab_cell(plain) and "tags" not in plain["cells"][1]["metadata"]


def test_repeated_scripts_are_dropped_and_the_colour_mode_is_valid():
    from sphinx.builders.html._assets import _JavaScript

    body = 'const THEBE_JS_URL = "x"'
    context = {"script_files": [_JavaScript(None, body=body), _JavaScript("a.js"), _JavaScript("", body=body)],
               "default_mode": ""}
    _on_page_context(None, "page", "page.html", context, None)
    assert [js.filename for js in context["script_files"]] == [None, "a.js"]
    assert context["default_mode"] == "auto"


BROKEN = """<html><head><script>console.error("boom")</script></head><body>
<img src="missing.png"><span class="math">\\(x^2\\)</span>
<mjx-merror data-mjx-error="Undefined control sequence \\thta">\\thta</mjx-merror>
<p># Colab set-up: installs the book's package, replib, from its repository, at the book's version.</p>
<pre>%s/lib/x.py:3: UserWarning: leaked</pre>
</body></html>""" % Path(__file__).resolve().parents[1]
SCOREBOARD = """<html><body><table style="width: 3000px"><thead><tr><th style="width: 2000px">claim</th>
<th>verdict</th></tr></thead><tbody><tr><td>c1</td><td>holds</td></tr></tbody></table></body></html>"""
GOOD = """<html><body><p>fine</p>
<a href="https://colab.research.google.com/github/o/r/blob/main/notebooks/ch/01_theory.ipynb">colab</a>
</body></html>"""


@pytest.mark.skipif(browser_check.missing_requirement() is not None,
                    reason=f"browser check unavailable: {browser_check.missing_requirement()}")
def test_the_browser_check_names_each_fault(tmp_path):
    (tmp_path / "notebooks" / "ch").mkdir(parents=True)
    (tmp_path / "notebooks" / "ch" / "02_implementation.html").write_text(BROKEN)
    (tmp_path / "notebooks" / "ch" / "01_theory.html").write_text(GOOD)
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "scoreboard.html").write_text(SCOREBOARD)
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=book/scoreboard.html" />')
    report = browser_check.check_book(tmp_path)
    assert sorted(report) == ["book/scoreboard.html", "notebooks/ch/01_theory.html",
                              "notebooks/ch/02_implementation.html"]  # the redirect page is skipped
    assert report["notebooks/ch/01_theory.html"] == []
    broken = "\n".join(report["notebooks/ch/02_implementation.html"])
    for fault in ("console error: boom", "image not loaded: missing.png", "1 of 1 formulas not typeset",
                  "the Colab set-up cell is shown", "no Colab launch link to /notebooks/ch/02_implementation.ipynb",
                  "HTTP 404", "a machine's path reaches the page: ",
                  "a formula does not parse: Undefined control sequence \\thta"):
        assert fault in broken, fault
    assert any("the verdict column ends at" in p for p in report["book/scoreboard.html"])
    with pytest.raises(SystemExit, match="2 of 3 pages have problems"):
        browser_check.run(tmp_path)


def test_without_chromium_the_check_says_why_and_checks_nothing(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(browser_check, "missing_requirement", lambda: "Chromium is not installed")
    browser_check.run(tmp_path)
    assert "browser check skipped: Chromium is not installed" in capsys.readouterr().out


def test_each_profile_has_its_own_execution_cache(tmp_path, monkeypatch):
    import shutil

    import yaml

    from replib.book import profile_config
    from replib.core.paths import require_repo_root

    shutil.copy(require_repo_root() / "_config.yml", tmp_path / "_config.yml")
    caches = {p: yaml.safe_load(profile_config(tmp_path, p).read_text())["execute"]["cache"]
              for p in ("smoke", "book")}
    assert caches == {"smoke": "_build/.jupyter_cache/smoke", "book": "_build/.jupyter_cache/book"}
    assert yaml.safe_load((tmp_path / "_build" / "_config.book.yml").read_text())["title"]
    with pytest.raises(ValueError, match="valid profiles: smoke, book, paper"):
        profile_config(tmp_path, "quick")


def test_unattended_runs_silence_only_the_missing_widgets_notice(monkeypatch):
    from replib.book import unattended_env

    monkeypatch.setenv("PYTHONWARNINGS", "error::ResourceWarning")
    env = unattended_env(REPLIB_PROFILE="smoke")
    assert env["PYTHONWARNINGS"] == "error::ResourceWarning,ignore:IProgress not found"
    assert env["REPLIB_PROGRESS"] == "0" and env["REPLIB_PROFILE"] == "smoke"
    monkeypatch.setenv("PYTHONWARNINGS", env["PYTHONWARNINGS"])
    assert unattended_env()["PYTHONWARNINGS"] == env["PYTHONWARNINGS"]  # not added twice
