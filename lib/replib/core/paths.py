"""Where things live: the repository checkout, the chapters and their declarations."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import yaml

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def repo_root() -> Path | None:
    """The repository checkout that holds this package (an editable install), or None (a wheel, Colab)."""
    root = PACKAGE_DIR.parents[1]
    return root if (root / "notebooks").is_dir() and (root / "_toc.yml").is_file() else None


def require_repo_root() -> Path:
    """The repository checkout, or a clear error for commands that need one."""
    root = repo_root()
    if root is None:
        raise RuntimeError(
            "this command needs a clone of the book's repository with replib installed from it "
            "(`make setup`); the installed package is not inside one"
        )
    return root


def _chapters_dir():
    root = repo_root()
    if root is not None:
        return root / "notebooks"
    return importlib.resources.files("replib") / "chapters"  # the wheel carries every chapter.yml


def chapter_slugs() -> list[str]:
    """Every chapter that declares its claims in notebooks/<slug>/chapter.yml, sorted."""
    base = _chapters_dir()
    return sorted(p.name for p in base.iterdir() if p.is_dir() and (p / "chapter.yml").is_file())


def check_slug(slug: str) -> str:
    """Return `slug` if it names a chapter, else fail naming the valid ones."""
    valid = chapter_slugs()
    if slug not in valid:
        raise ValueError(f"unknown chapter {slug!r}; valid chapters: {', '.join(valid)}")
    return slug


def load_chapter(slug: str) -> dict:
    """The parsed chapter.yml of `slug` (title, paper, declared claims)."""
    check_slug(slug)
    text = (_chapters_dir() / slug / "chapter.yml").read_text(encoding="utf-8")
    return yaml.safe_load(text)
