"""The first code cell of every notebook: install replib from the repository in Colab, nothing elsewhere."""

from __future__ import annotations

import yaml

from .paths import require_repo_root

BRANCH = "main"


def repository_url() -> str:
    """The book's repository URL, set in one place: `repository.url` in _config.yml."""
    config = yaml.safe_load((require_repo_root() / "_config.yml").read_text(encoding="utf-8"))
    return config["repository"]["url"].rstrip("/")


def setup_cell_source(url: str | None = None) -> str:
    """The exact source of the Colab set-up cell for the repository `url`."""
    url = url or repository_url()
    return (
        "# Colab set-up: installs the book's package, replib, from its repository (branch main).\n"
        "# Anywhere else (a local clone, the book build, CI) this cell does nothing.\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import subprocess\n"
        "\n"
        f'    package = "replib @ git+{url}.git@{BRANCH}"\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)'
    )
