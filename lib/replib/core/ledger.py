"""The claims ledger: chapter.yml declares each claim, the experiment records values, the ledger judges.

A claim is judged on the mean over seeds against the threshold declared before the experiment ran.
At the smoke profile values are computed but never judged. A claim declared with `judged: false`
is reported but not judged: a measurement (the default `kind`) or a `kind: check` of the code.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .paths import load_chapter, repo_root

DIRECTIONS = {"<=": float.__le__, ">=": float.__ge__, "<": float.__lt__, ">": float.__gt__}
CLAIM_KEYS = ("id", "statement", "paper", "metric", "direction", "threshold")
RESULTS_DIR_VAR = "REPLIB_RESULTS_DIR"
HOLDS, FAILS = "holds", "fails"


def validate_claims(chapter: dict) -> list[dict]:
    """Check the declared claims of a chapter.yml; fail naming the first missing or bad field."""
    claims = chapter.get("claims") or []
    seen = set()
    for claim in claims:
        missing = [k for k in CLAIM_KEYS if k not in claim]
        if missing:
            raise ValueError(f"claim {claim.get('id', '?')!r} lacks {', '.join(missing)}")
        if claim["direction"] not in DIRECTIONS:
            raise ValueError(f"claim {claim['id']!r}: direction must be one of {', '.join(DIRECTIONS)}")
        if not isinstance(claim["threshold"], (int, float)) or isinstance(claim["threshold"], bool):
            raise ValueError(f"claim {claim['id']!r}: threshold must be a number")
        if claim["id"] in seen:
            raise ValueError(f"claim id {claim['id']!r} is declared twice")
        seen.add(claim["id"])
    return claims


def verdict(claim: dict, values: list[float], profile: str) -> str:
    """holds / fails / not judged, from the mean of the per-seed values and the declared threshold."""
    if not claim.get("judged", True):
        return f"not judged ({claim.get('kind', 'measurement')})"
    if profile == "smoke":
        return "not judged (smoke profile)"
    present = [v for v in values if v is not None and not math.isnan(v)]
    if not present:
        return "not judged (no value)"
    if len(present) < len(values):  # a seed that produced no value cannot support the claim
        return FAILS
    mean = float(np.mean(present))  # +-inf is a value: e.g. a target never reached
    return HOLDS if DIRECTIONS[claim["direction"]](mean, float(claim["threshold"])) else FAILS


def summarise(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single seed) of the recorded values."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return math.nan, math.nan
    if not np.all(np.isfinite(arr)):  # an infinite or missing value: no meaningful spread
        return float(arr.mean()), math.nan
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def format_value(mean: float, sd: float) -> str:
    """'mean ± sd' with three significant digits."""
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.3g}" if math.isnan(sd) else f"{mean:.3g} ± {sd:.2g}"


class Ledger:
    """Records each claim's value per seed for one experiment run, judges them and writes the results."""

    def __init__(self, slug: str, profile: str, seeds: list[int], parameters: dict | None = None):
        self.slug = slug
        self.chapter = load_chapter(slug)
        self.claims = {c["id"]: c for c in validate_claims(self.chapter)}
        self.profile = profile
        self.seeds = [int(s) for s in seeds]
        self.parameters = dict(parameters or {})
        self.values: dict[str, dict[int, float]] = {cid: {} for cid in self.claims}
        self._started = time.perf_counter()

    def record(self, claim_id: str, seed: int, value: float) -> None:
        """Record the measured value of one claim for one seed."""
        if claim_id not in self.claims:
            raise ValueError(f"unknown claim {claim_id!r}; declared claims: {', '.join(self.claims)}")
        if seed not in self.seeds:
            raise ValueError(f"seed {seed} is not one of this run's seeds {self.seeds}")
        self.values[claim_id][seed] = float(value)

    def record_all(self, values: dict) -> None:
        """Record ``{seed: {claim_id: value}}``, e.g. what a chapter's ``claim_values`` returns."""
        for seed, claims in values.items():
            for claim_id, value in claims.items():
                self.record(claim_id, seed, value)

    def report(self) -> None:
        """Print one line per claim: verdict, mean over seeds, declared threshold, statement."""
        for row in self.judged():
            print(f"{row['id']:<28} {row['verdict']:<26} mean {row['mean']:.3g} "
                  f"(declared {row['direction']} {row['threshold']}): {row['statement']}")

    def judged(self) -> list[dict]:
        """Every declared claim with its per-seed values, mean, sd and verdict."""
        rows = []
        for cid, claim in self.claims.items():
            values = [self.values[cid][s] for s in self.seeds if s in self.values[cid]]
            mean, sd = summarise(values)
            rows.append({**claim, "values": values, "mean": mean, "sd": sd,
                         "verdict": verdict(claim, values, self.profile)})
        return rows

    def table(self):
        """The claims table the experiment notebook shows: paper's number, ours, threshold, verdict."""
        import pandas as pd

        rows = [{"claim": r["id"], "paper": r["paper"], "ours (mean ± sd)": format_value(r["mean"], r["sd"]),
                 "threshold": f"{r['direction']} {r['threshold']}", "verdict": r["verdict"]}
                for r in self.judged()]
        return pd.DataFrame(rows).set_index("claim")

    def results(self) -> dict:
        """The results record: profile, seeds, parameters, judged claims, versions, fingerprint."""
        from .fingerprint import fingerprint

        root = repo_root()
        return {
            "slug": self.slug,
            "profile": self.profile,
            "seeds": self.seeds,
            "parameters": _jsonable(self.parameters),
            "claims": [{k: r[k] for k in ("id", "statement", "metric", "direction", "threshold",
                                           "values", "mean", "sd", "verdict")}
                       | {"judged": r.get("judged", True)} for r in self.judged()],
            "runtime_s": {"03_experiment": round(time.perf_counter() - self._started, 2)},
            "versions": package_versions(),
            "fingerprint": fingerprint(self.slug) if root is not None else None,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    def save(self, directory: str | os.PathLike | None = None) -> Path | None:
        """Write <directory>/<slug>.json ($REPLIB_RESULTS_DIR when not given); None when neither is set."""
        directory = directory or os.environ.get(RESULTS_DIR_VAR)
        if not directory:
            return None
        return write_json_atomic(Path(directory) / f"{self.slug}.json", self.results())


def write_json_atomic(path: Path, data: dict) -> Path:
    """Write JSON through a temporary file and a rename, so no half-written file is ever left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def package_versions() -> dict[str, str]:
    """Python, platform and the versions of the numeric packages this process has loaded."""
    versions = {"python": platform.python_version(), "platform": platform.platform(terse=True)}
    for name in ("replib", "numpy", "scipy", "pandas", "matplotlib", "torch", "transformers", "sklearn"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", "unknown")
    return versions


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)
