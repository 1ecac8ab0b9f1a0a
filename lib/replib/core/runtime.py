"""Seeding and device choice: the same seed gives the same numbers, on CPU here and on CUDA when present."""

from __future__ import annotations

import contextlib
import os
import random
import sys

import numpy as np


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python's, NumPy's and (when it is loaded) PyTorch's generators; return a NumPy Generator.

    Torch is seeded only if the notebook already imported it, so numpy-only chapters never pay
    for importing torch.
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)
    return np.random.default_rng(seed)


def device() -> str:
    """"cuda" when PyTorch sees a GPU, else "cpu". $REPLIB_DEVICE overrides."""
    forced = os.environ.get("REPLIB_DEVICE")
    if forced:
        return forced
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def model_device(profile: str) -> str:
    """Where a chapter puts its torch models and batches: :func:`device` at the paper profile (a GPU
    when there is one), the CPU at the book and smoke profiles, so that their committed numbers are
    CPU numbers on every machine. Random draws stay on CPU generators whatever the device.

    On CUDA, torch's deterministic algorithms (which :func:`compute_threads` turns on) need cuBLAS's
    fixed workspace, so it is requested here, before CUDA starts."""
    if profile != "paper":
        return "cpu"
    chosen = device()
    if chosen.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return chosen


MAX_THREADS_VAR = "REPLIB_MAX_THREADS"


def thread_budget(threads: int) -> int:
    """``threads``, capped by $REPLIB_MAX_THREADS when it is set (the smoke run sets 1: two notebooks
    run at once on two cores, and oversubscribed torch thread pools are many times slower)."""
    cap = os.environ.get(MAX_THREADS_VAR)
    return min(int(threads), int(cap)) if cap else int(threads)


@contextlib.contextmanager
def compute_threads(threads: int = 1):
    """Temporarily run torch and numpy's BLAS on ``threads`` threads, with torch's deterministic
    algorithms on (an op that has no deterministic CUDA kernel warns instead of failing a GPU run);
    everything is restored on exit. Small models are fastest on one thread, and a
    fixed thread count keeps results and timings comparable between runs. $REPLIB_MAX_THREADS caps
    the count (see thread_budget)."""
    import torch
    from threadpoolctl import threadpool_limits

    old_threads = torch.get_num_threads()
    old_deterministic = torch.are_deterministic_algorithms_enabled()
    old_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    threads = thread_budget(threads)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with threadpool_limits(limits=threads, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_deterministic, warn_only=old_warn_only)
