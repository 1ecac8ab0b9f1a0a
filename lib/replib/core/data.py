"""Generated data sets: built by code once per generating parameters and source, cached on disk.

A chapter that generates a training corpus calls ``cached_dataset(name, params, build)``. The first
call runs ``build()`` and saves the result as a ``datasets.Dataset`` under ``data/cache/`` (in a
clone; ``~/.cache/replib`` elsewhere, e.g. Colab); later calls with the same name, parameters and
source of ``build``'s module load it from there. Nothing is downloaded: the data is still made by
code, the cache only saves rebuilding it. A reader looks at it with ``ds[0]`` or ``ds.to_pandas()``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from .paths import repo_root

CACHE_VAR = "REPLIB_CACHE_DIR"
KEY_FILE = "replib_key.json"


def cache_dir() -> Path:
    """Where generated data sets live: $REPLIB_CACHE_DIR, else data/cache/ in a clone, else ~/.cache/replib."""
    if os.environ.get(CACHE_VAR):
        return Path(os.environ[CACHE_VAR])
    root = repo_root()
    return root / "data" / "cache" if root is not None else Path.home() / ".cache" / "replib"


def _source_of(build: Callable) -> str:
    """The text of the module that defines ``build`` (its source version), or of ``build`` itself."""
    while isinstance(build, functools.partial):
        build = build.func
    module = sys.modules.get(getattr(build, "__module__", ""), None)
    try:
        return inspect.getsource(module) if module is not None else inspect.getsource(build)
    except (OSError, TypeError):
        return getattr(build, "__qualname__", repr(build))


def dataset_key(name: str, params: dict, build: Callable) -> dict:
    """What identifies a generated data set: its name, its parameters and a hash of the source of the
    module that defines ``build``."""
    try:
        params_text = json.dumps(params, sort_keys=True)
    except TypeError as err:
        raise TypeError(f"cached_dataset {name!r}: params must be plain JSON values ({err})") from err
    source = hashlib.sha256(_source_of(build).encode("utf-8")).hexdigest()[:16]
    digest = hashlib.sha256(f"{name}\n{params_text}\n{source}".encode("utf-8")).hexdigest()[:16]
    return {"name": name, "params": json.loads(params_text), "source": source, "digest": digest}


def _datasets():
    """The datasets library, with its progress bars off (they would clutter the notebooks)."""
    import datasets

    datasets.disable_progress_bars()
    return datasets


def _to_dataset(built):
    datasets = _datasets()

    if isinstance(built, datasets.Dataset):
        return built
    if isinstance(built, dict):
        return datasets.Dataset.from_dict(built)
    if isinstance(built, list):
        return datasets.Dataset.from_list(built)
    raise TypeError(f"build() must return a datasets.Dataset, a dict of columns or a list of rows, "
                    f"got {type(built).__name__}")


def _load(folder: Path, key: dict):
    """The cached data set in ``folder``, or None with a printed reason when it is stale or corrupt."""
    datasets = _datasets()

    try:
        stored = json.loads((folder / KEY_FILE).read_text(encoding="utf-8"))
        if stored != key:
            print(f"cached data set {key['name']!r} at {folder} is stale; rebuilding", file=sys.stderr)
            return None
        return datasets.load_from_disk(str(folder))
    except Exception as err:  # a half-written, truncated or foreign folder: rebuild it
        print(f"cached data set {key['name']!r} at {folder} is unreadable ({type(err).__name__}: {err}); "
              "rebuilding", file=sys.stderr)
        return None


def cached_dataset(name: str, params: dict, build: Callable[[], object], cache: bool = True,
                   source: Callable | None = None):
    """A ``datasets.Dataset`` built by ``build()`` once per (name, params, source of build's module).

    ``params`` are the generating parameters (plain JSON values: seed, sizes, ...); ``build`` takes
    no argument and returns a Dataset, a dict of equal-length columns or a list of row dicts. The
    result is saved atomically (a temporary folder, then a rename), so an interrupted build leaves no
    half-written cache; a stale or unreadable cache is rebuilt with a message saying so.
    ``cache=False`` builds in memory only. ``source``: the function whose module versions the data
    (default ``build``), for a ``build`` written elsewhere than the generator it calls.
    """
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"cached_dataset name {name!r}: use letters, digits, '_' and '-' only")
    key = dataset_key(name, params, source or build)
    if not cache:
        return _to_dataset(build())
    folder = cache_dir() / name / key["digest"]
    if folder.is_dir():
        loaded = _load(folder, key)
        if loaded is not None:
            return loaded
        shutil.rmtree(folder, ignore_errors=True)
    dataset = _to_dataset(build())
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key['digest']}-", dir=folder.parent))
    try:
        dataset.save_to_disk(str(staging))
        (staging / KEY_FILE).write_text(json.dumps(key, sort_keys=True), encoding="utf-8")
        try:
            staging.rename(folder)
        except OSError:  # another process saved the same data set first: theirs is as good
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _datasets().load_from_disk(str(folder))


def cached_batches(name: str, params: dict, draw_batch: Callable, steps: int, seed: int,
                   columns: tuple[str, ...] = ("ids", "target_mask")):
    """A training stream drawn batch by batch, stored as one Dataset (one row per example, in order).

    ``draw_batch(rng)`` returns a tuple of arrays whose first axis is the batch (e.g. token ids and a
    target mask, the protocol of :func:`replib.models.causal_lm.train_lm`); it is called ``steps``
    times with one numpy Generator seeded with ``seed``, exactly as ``train_lm`` calls it, so that
    training on :func:`replay_batches` of the result sees the same batches as drawing them live.
    Versioned by the source of ``draw_batch``'s module.
    """
    import numpy as np

    def build():
        rng = np.random.default_rng(seed)
        parts = [draw_batch(rng) for _ in range(steps)]
        return {column: np.concatenate([part[i] for part in parts]).tolist() for i, column in enumerate(columns)}

    return cached_dataset(name, {**params, "steps": steps, "seed": seed}, build, source=draw_batch)


def replay_batches(dataset, batch_size: int, columns: tuple[str, ...] = ("ids", "target_mask")) -> Callable:
    """A ``draw_batch(rng)`` that returns the stored stream's batches in order (``rng`` unused): the
    inverse of :func:`cached_batches`. Fails once the stream is used up."""
    import numpy as np

    arrays = [np.asarray(dataset.with_format("numpy")[column]) for column in columns]
    n_batches = len(dataset) // batch_size
    position = iter(range(n_batches))

    def draw_batch(_rng=None):
        k = next(position, None)
        if k is None:
            raise RuntimeError(f"the stored training stream has only {n_batches} batches of {batch_size}")
        return tuple(a[k * batch_size:(k + 1) * batch_size] for a in arrays)

    return draw_batch
