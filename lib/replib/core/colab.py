"""The first code cell of every notebook: install replib from the repository in Colab, nothing elsewhere."""

from __future__ import annotations

import yaml

from .paths import require_repo_root

BRANCH = "main"
FIRST_LINE = "# Colab set-up: installs the book's package, replib, from its repository (branch main)."


def repository_url() -> str:
    """The book's repository URL, set in one place: `repository.url` in _config.yml."""
    config = yaml.safe_load((require_repo_root() / "_config.yml").read_text(encoding="utf-8"))
    return config["repository"]["url"].rstrip("/")


def setup_cell_source(url: str | None = None) -> str:
    """The exact source of the Colab set-up cell for the repository `url`."""
    url = url or repository_url()
    return (
        f"{FIRST_LINE}\n"
        "# Anywhere else (a local clone, the book build, CI) this cell does nothing.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import subprocess\n"
        "    import time\n"
        "    from importlib.metadata import version\n"
        "\n"
        f'    package = "replib @ git+{url}.git@{BRANCH}"\n'
        f'    print("installing replib from the book\'s repository (branch {BRANCH}) ...", end=" ", flush=True)\n'
        "    started = time.time()\n"
        '    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", package],\n'
        "                         capture_output=True, text=True)\n"
        "    if pip.returncode != 0:  # show pip's own words, then stop\n"
        "        print(pip.stdout, pip.stderr)\n"
        '        raise RuntimeError("installing replib failed: pip\'s output is printed above")\n'
        '    print(f"done in {time.time() - started:.0f} s, replib {version(\'replib\')}")'
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
