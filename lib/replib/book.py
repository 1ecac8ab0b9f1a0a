"""Building and testing the book: `make book` and `make test` are thin calls into these functions."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from . import browser_check
from .core.ledger import write_text_atomic
from .core.paths import require_repo_root
from .core.profiles import PROFILES
from .core.results import missing_smoke_values

ENV_FILES = ("pyproject.toml", "environment.yml", "requirements-lock.txt")
STAMP = "replib-stamp.txt"


def _bin(name: str) -> str:
    """An executable of this environment (jupyter-book, pytest), next to the running Python."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


def environment_stamp(root: Path) -> str:
    """Hash of lib/ and the environment files: a change drops the execution cache."""
    digest = hashlib.sha256()
    files = sorted((root / "lib").rglob("*.py")) + [root / f for f in ENV_FILES if (root / f).is_file()]
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def refresh_cache(root: Path) -> bool:
    """Drop _build/.jupyter_cache when lib/ or the environment changed (jupyter-cache hashes only
    the notebook's code cells, so it would otherwise serve outputs made by old library code)."""
    cache = root / "_build" / ".jupyter_cache"
    stamp = environment_stamp(root)
    stamp_file = root / "_build" / STAMP
    if stamp_file.is_file() and stamp_file.read_text() == stamp:
        return False
    shutil.rmtree(cache, ignore_errors=True)
    stamp_file.parent.mkdir(parents=True, exist_ok=True)
    stamp_file.write_text(stamp)
    return True


def profile_config(root: Path, profile: str) -> Path:
    """_config.yml with the execution cache of `profile` (_build/.jupyter_cache/<profile>), written to
    _build/_config.<profile>.yml. jupyter-cache keys its entries on the code cells alone, so one
    shared cache would serve a smoke run's outputs to the book build; one cache per profile cannot."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config["execute"]["cache"] = f"_build/.jupyter_cache/{profile}"
    path = root / "_build" / f"_config.{profile}.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, yaml.safe_dump(config, sort_keys=False))
    return path


def unattended_env(**settings) -> dict:
    """The environment of notebooks that run with nobody watching (the book build, the smoke run,
    batch runs): progress bars off, and tqdm's notice that ipywidgets is missing silenced (``datasets``
    imports ``tqdm.auto``; in a kernel without ipywidgets that prints a warning with the environment's
    path, which would reach the page). Other warnings still show."""
    quiet = "ignore:IProgress not found"
    present = os.environ.get("PYTHONWARNINGS", "")
    warnings = present if quiet in present.split(",") else ",".join(filter(None, [present, quiet]))
    return dict(os.environ, REPLIB_PROGRESS="0", PYTHONWARNINGS=warnings, **settings)


def build_book(profile: str = "book") -> Path:
    """Execute every notebook at `profile` (cached per profile) and build the HTML book into _build/html."""
    root = require_repo_root()
    if refresh_cache(root):
        print("lib/ or the environment changed: the notebook execution cache was dropped")
    env = unattended_env(REPLIB_PROFILE=profile)
    cmd = [_bin("jupyter-book"), "build", str(root), "-W", "-n", "--keep-going",
           "--config", str(profile_config(root, profile))]
    subprocess.run(cmd, check=True, env=env, cwd=root)
    index = root / "_build" / "html" / "index.html"
    print(f"The book is at {index}")
    return index


def _stage(root: Path, stage: Path) -> None:
    """Copy the book's sources to `stage`, with execution switched off in its _config.yml."""
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    for name in ("_toc.yml", "book", "notebooks"):
        src = root / name
        if src.is_dir():
            shutil.copytree(src, stage / name, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
        else:
            shutil.copy2(src, stage / name)
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config["execute"]["execute_notebooks"] = "off"
    (stage / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def smoke_env(root: Path, offline_log: Path) -> dict:
    """The environment of the smoke run's kernels: smoke profile, one thread, the network guard of
    tools/offline loaded through PYTHONPATH (it logs every attempt to `offline_log`)."""
    return unattended_env(REPLIB_PROFILE="smoke", REPLIB_OFFLINE="1",
                          REPLIB_OFFLINE_LOG=str(offline_log), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                          OPENBLAS_NUM_THREADS="1", REPLIB_MAX_THREADS="1",
                          PYTHONPATH=os.pathsep.join(filter(None, [str(root / "tools" / "offline"),
                                                                  os.environ.get("PYTHONPATH")])))


def smoke() -> Path:
    """The notebook half of `make test`: every notebook under nbmake at the smoke profile, two at a
    time, with the network blocked for their kernels; then the book built from those executed
    notebooks (no second execution) with warnings as errors, and every page of it opened in headless
    Chromium with the network blocked (:mod:`replib.browser_check`)."""
    root = require_repo_root()
    stage = root / "runs" / "smoke"
    _stage(root, stage)
    offline_log = stage / "network-attempts.log"
    env = dict(smoke_env(root, offline_log), REPLIB_RESULTS_DIR=str(stage / "results"))
    # Two xdist workers start kernels over TCP at the same time and now and then pick the same port
    # ("Address already in use", then "Kernel didn't respond"): rerun only those start-up failures.
    kernel_start = ["--reruns", "2", "--only-rerun", "ZMQError", "--only-rerun", "Address already in use",
                    "--only-rerun", "Kernel didn't respond"]
    cmd = [_bin("pytest"), "--nbmake", "--nbmake-kernel=python3", "--nbmake-timeout=600", "--overwrite",
           "-n", "2", "-p", "no:cacheprovider", "-o", "addopts=", *kernel_start, "--rootdir", str(stage), "-v",
           str(stage / "notebooks")]
    subprocess.run(cmd, check=True, env=env, cwd=stage)
    if offline_log.is_file() and offline_log.read_text().strip():
        raise SystemExit(f"notebooks tried to reach the network:\n{offline_log.read_text()}")
    gaps = missing_smoke_values(stage / "results")
    if gaps:
        raise SystemExit("judged claims without a value at the smoke profile:\n  " + "\n  ".join(gaps))
    missing = [str(nb.relative_to(stage)) for nb in sorted(stage.glob("notebooks/*/*.ipynb"))
               if "plt.show()" in nb.read_text() and "image/png" not in nb.read_text()]
    if missing:
        raise SystemExit(f"notebooks that plot produced no figure (a non-inline backend?): {missing}")
    subprocess.run([_bin("jupyter-book"), "build", str(stage), "-W", "-n", "--keep-going"],
                   check=True, env=env, cwd=stage)
    browser_check.run(stage / "_build" / "html")
    index = stage / "_build" / "html" / "index.html"
    print(f"Smoke-profile book at {index}")
    return index
