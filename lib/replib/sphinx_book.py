"""A Sphinx extension for the book build (named in _config.yml): the reader's page, not the notebook.

- The Colab set-up cell (the first code cell of every notebook, see :mod:`replib.core.colab`) is
  removed from the HTML page; it stays in every ``.ipynb``, where Colab needs it. One rule for all
  pages: the cell is recognised by its first line, so no notebook carries a tag for it.
- MathJax is served from the book itself when the environment has it (``make setup`` installs the
  pinned npm package into ``.venv/mathjax``), so that formulas render with no network; without it the
  page loads MathJax from its CDN and the build prints a warning saying so.
- Wide outputs (tables, long lines of text) scroll sideways instead of being cut at the right.
- Each page loads each script once, and the theme's colour mode has a valid default ("auto"), so that
  a page opens with no script or console error (see :func:`_on_page_context`).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from .core.colab import FIRST_LINE

MATHJAX_ENV_DIR = Path(sys.prefix) / "mathjax" / "node_modules" / "mathjax" / "es5"
MATHJAX_SCRIPT = "tex-mml-chtml.js"
CSS_FILE = "replib.css"
CSS = """\
/* replib: wide outputs and tables scroll sideways instead of being cut at the right */
div.cell_output pre, div.output pre { overflow-x: auto; white-space: pre; }
div.cell_output table, article table.table { display: block; overflow-x: auto; max-width: 100%; }
"""


def remove_colab_cell(notebook: dict) -> bool:
    """Tag the notebook's Colab set-up cell ``remove-cell`` (in place); whether there was one."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", []))
        if not source.startswith(FIRST_LINE):
            return False
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "remove-cell" not in tags:
            tags.append("remove-cell")
        return True
    return False


def _on_source_read(app, docname: str, source: list[str]) -> None:
    if not str(app.env.doc2path(docname)).endswith(".ipynb"):
        return
    notebook = json.loads(source[0])
    if remove_colab_cell(notebook):
        source[0] = json.dumps(notebook)


def _on_page_context(app, pagename, templatename, context, doctree) -> None:
    """Drop repeated script tags (Jupyter Book registers sphinx-thebe's and sphinx-togglebutton's
    inline configuration twice, and a second ``const THEBE_JS_URL`` is a script error in the page);
    give the theme's colour mode a valid default."""
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = (str(getattr(script, "filename", script) or ""),  # one extension says None, the other ""
               tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique
    # the theme's colour mode defaults to "", which its script logs as an error on a first visit
    context["default_mode"] = context.get("default_mode") or "auto"


def _on_config_inited(app, config) -> None:
    if (MATHJAX_ENV_DIR / MATHJAX_SCRIPT).is_file():
        config.mathjax_path = f"mathjax/{MATHJAX_SCRIPT}"
    else:
        print(f"warning: MathJax is not installed in this environment ({MATHJAX_ENV_DIR} is missing; "
              "`make setup` installs it with npm): the book loads it from its CDN, so formulas need "
              "the network", file=sys.stderr)


def _on_build_finished(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    (static / CSS_FILE).write_text(CSS, encoding="utf-8")
    if (MATHJAX_ENV_DIR / MATHJAX_SCRIPT).is_file():
        shutil.copytree(MATHJAX_ENV_DIR, static / "mathjax", dirs_exist_ok=True)


def setup(app):
    app.connect("config-inited", _on_config_inited)
    app.connect("source-read", _on_source_read)
    app.connect("html-page-context", _on_page_context, priority=900)  # after the themes add theirs
    app.connect("build-finished", _on_build_finished)
    app.add_css_file(CSS_FILE)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
