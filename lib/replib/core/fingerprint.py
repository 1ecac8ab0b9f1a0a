"""Source fingerprints: which notebook text and lib modules produced a results file."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from .paths import PACKAGE_DIR, check_slug, require_repo_root

NOTEBOOKS = ("01_theory", "02_implementation", "03_experiment")


def _module_file(name: str) -> Path | None:
    """The file of replib module `name` (a package's __init__.py), or None if it is not a module."""
    parts = name.split(".")[1:]
    base = PACKAGE_DIR.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_replib_modules(path: Path) -> set[str]:
    """The replib modules a Python file imports, relative imports resolved, parent packages included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path) if path.is_relative_to(PACKAGE_DIR) else ""
    if path.name != "__init__.py" and package:
        package = package.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    modules = set()
    for name in found:
        if name == "replib" or name.startswith("replib."):
            parts = name.split(".")
            modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {m for m in modules if _module_file(m) is not None}


def chapter_sources(slug: str) -> list[Path]:
    """The chapter's three notebooks (.py twins), its chapter.yml and every replib module they import."""
    root = require_repo_root()
    folder = root / "notebooks" / check_slug(slug)
    sources = [folder / "chapter.yml"] + [folder / f"{stem}.py" for stem in NOTEBOOKS]
    pending = [p for p in sources if p.suffix == ".py" and p.is_file()]
    modules: set[str] = set()
    while pending:
        for name in _imported_replib_modules(pending.pop()) - modules:
            modules.add(name)
            pending.append(_module_file(name))
    return sorted({p for p in sources if p.is_file()} | {_module_file(m) for m in modules})


def _text(path: Path) -> bytes:
    return path.read_text(encoding="utf-8").replace("\r\n", "\n").encode()


def fingerprint(slug: str) -> str:
    """sha256 over the chapter's sources (paths relative to the repository, contents as text)."""
    root = require_repo_root()
    digest = hashlib.sha256()
    for path in chapter_sources(slug):
        digest.update(str(path.relative_to(root).as_posix()).encode())
        digest.update(b"\0" + _text(path) + b"\0")
    return digest.hexdigest()


def code_text(path: Path) -> bytes:
    """What of a source can change a number: a notebook's py:percent twin without its markdown cells
    (prose); any other file whole."""
    text = _text(path)
    if path.suffix != ".py" or path.parent.parent.name != "notebooks":
        return text
    kept, prose = [], False
    for line in text.decode().splitlines(keepends=True):
        if line.startswith("# %%"):
            prose = "[markdown]" in line or "[md]" in line
        if not prose:
            kept.append(line)
    return "".join(kept).encode()


def source_hashes(slug: str) -> dict[str, str]:
    """Each of the chapter's sources (path relative to the repository) -> sha256 of its code
    (:func:`code_text`): kept in a results record so that a stale result names the files whose code
    changed, and a change of prose alone can be told apart (it needs no re-run)."""
    root = require_repo_root()
    return {path.relative_to(root).as_posix(): hashlib.sha256(code_text(path)).hexdigest()
            for path in chapter_sources(slug)}
