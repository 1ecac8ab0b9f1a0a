"""The first code cell of every notebook: install replib from the repository in Colab, nothing elsewhere."""

from __future__ import annotations

import yaml

from .paths import require_repo_root

FIRST_LINE = "# Colab set-up: installs the book's package, replib, from its repository, at the book's version."


def _repository() -> dict:
    config = yaml.safe_load((require_repo_root() / "_config.yml").read_text(encoding="utf-8"))
    return config["repository"]


def repository_url() -> str:
    """The book's repository URL, set in one place: `repository.url` in _config.yml."""
    return _repository()["url"].rstrip("/")


def book_ref() -> str:
    """The book's version: `repository.branch` in _config.yml, the git ref (branch or release tag) from
    which the launch buttons open each notebook in Colab; the set-up cell installs replib from the
    same ref, so that a notebook and the package it runs always come from one version."""
    return str(_repository().get("branch") or "main")


def setup_cell_source(url: str | None = None, ref: str | None = None) -> str:
    """The exact source of the Colab set-up cell for the repository `url` at the git ref `ref`."""
    url, ref = url or repository_url(), ref or book_ref()
    return (
        f"{FIRST_LINE}\n"
        "# Anywhere else (a local clone, the book build, CI) this cell does nothing.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import json\n"
        "    import subprocess\n"
        "    import time\n"
        "    from importlib.metadata import distribution\n"
        "\n"
        f'    package = "replib @ git+{url}.git@{ref}"\n'
        f'    print("installing replib from the book\'s repository at {ref} ...", end=" ", flush=True)\n'
        "    started = time.time()\n"
        '    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package],\n'
        "                         capture_output=True, text=True)\n"
        "    if pip.returncode != 0:  # show pip's own words, then stop\n"
        "        print(pip.stdout, pip.stderr)\n"
        '        raise RuntimeError("installing replib failed: pip\'s output is printed above")\n'
        '    origin = json.loads(distribution("replib").read_text("direct_url.json") or "{}")\n'
        '    commit = origin.get("vcs_info", {}).get("commit_id", "unknown")[:7]\n'
        '    print(f"done in {time.time() - started:.0f} s: replib {distribution(\'replib\').version}, commit {commit}")'
    )


def write_setup_cells(paths) -> list:
    """Rewrite the first code cell of each py:percent notebook in `paths` to the current set-up cell;
    return the paths that changed (after a change of `repository.url`, run `make sync`)."""
    import re
    from pathlib import Path

    cell = setup_cell_source()
    changed = []
    for path in map(Path, paths):
        text = path.read_text(encoding="utf-8")
        # the first code cell: a bare "# %%" line, up to the next cell marker
        match = re.search(r"^# %%\n(.*?)(?=^# %%)", text, flags=re.S | re.M)
        if match is None:
            raise ValueError(f"{path}: no code cell found")
        new = text[: match.start(1)] + cell + "\n\n" + text[match.end(1):]
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed
