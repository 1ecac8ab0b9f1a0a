"""The claims ledger: chapter.yml declares each claim, the experiment records values, the ledger judges.

Every claim has a role (see ROLES). Evidence (headline, mechanism) and preconditions are judged from
their per-seed values against the threshold declared before the experiment ran:

* holds: the mean clears the threshold and so does every seed;
* fragile: the mean clears it but at least one seed does not;
* fails: the mean does not clear it, or some seed of the run produced no value;
* inconclusive (precondition <id> ...): a precondition listed in ``requires`` did not hold.

Premises (true by construction of the toy), checks (invariants of the code) and measurements are
reported, never judged; at the smoke profile nothing is judged.
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
from .profiles import PROFILES

DIRECTIONS = {"<=": float.__le__, ">=": float.__ge__, "<": float.__lt__, ">": float.__gt__}
ROLES = {
    "headline": "a claim of the paper's abstract or main table, as the paper states it",
    "mechanism": "why the method should work: an ablation or a control",
    "precondition": "the rebuild works as the paper assumes; judged first, gates the claims that require it",
    "premise": "true by construction of the toy; shown, never counted",
    "check": "an invariant of the code",
    "measurement": "a number reported beside the paper's, not judged",
}
JUDGED_ROLES = ("headline", "mechanism", "precondition")
EVIDENCE_ROLES = ("headline", "mechanism")
CLAIM_KEYS = ("id", "role", "statement", "paper", "metric", "direction", "threshold")
RESULTS_DIR_VAR = "REPLIB_RESULTS_DIR"
HOLDS, FRAGILE, FAILS, INCONCLUSIVE = "holds", "fragile", "fails", "inconclusive"
RESULT_KEYS = ("id", "role", "requires", "statement", "metric", "direction", "threshold", "values",
               "seeds_clearing", "mean", "sd", "interval", "verdict")
INTERVAL_KIND = "95% t-interval over seeds (rough with three seeds)"


def validate_claims(chapter: dict) -> list[dict]:
    """Check the declared claims of a chapter.yml; fail naming the first missing or bad field."""
    claims = chapter.get("claims") or []
    seen: dict[str, dict] = {}
    for claim in claims:
        cid = claim.get("id", "?")
        missing = [k for k in CLAIM_KEYS if k not in claim]
        if missing:
            raise ValueError(f"claim {cid!r} lacks {', '.join(missing)}"
                             + (f"; roles: {', '.join(ROLES)}" if "role" in missing else ""))
        if claim["role"] not in ROLES:
            raise ValueError(f"claim {cid!r}: unknown role {claim['role']!r}; valid roles: {', '.join(ROLES)}")
        if claim["direction"] not in DIRECTIONS:
            raise ValueError(f"claim {cid!r}: direction must be one of {', '.join(DIRECTIONS)}")
        if not isinstance(claim["threshold"], (int, float)) or isinstance(claim["threshold"], bool):
            raise ValueError(f"claim {cid!r}: threshold must be a number")
        if cid in seen:
            raise ValueError(f"claim id {cid!r} is declared twice")
        seen[cid] = claim
    for claim in claims:
        for required in claim.get("requires") or []:
            if seen.get(required, {}).get("role") != "precondition":
                raise ValueError(f"claim {claim['id']!r} requires {required!r}, which is not a "
                                 "precondition of the same chapter")
    return claims


def is_judged(claim: dict) -> bool:
    """Whether the claim's role is judged (headline, mechanism, precondition)."""
    return claim["role"] in JUDGED_ROLES


def clears(claim: dict, value: float | None) -> bool:
    """Whether one value clears the claim's declared threshold (a missing value never does)."""
    if value is None or math.isnan(value):
        return False
    return DIRECTIONS[claim["direction"]](float(value), float(claim["threshold"]))


def verdict(claim: dict, values: list[float | None], profile: str,
            unmet_preconditions: tuple[str, ...] = ()) -> str:
    """The verdict of one claim from its value for every seed of the run (None: the seed gave none).

    `unmet_preconditions` are the ids of required preconditions that did not hold.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    if not is_judged(claim):
        return f"not judged ({claim['role']})"
    if profile == "smoke":
        return "not judged (smoke profile)"
    if unmet_preconditions:
        return f"{INCONCLUSIVE} (precondition {', '.join(unmet_preconditions)} did not hold)"
    if not values or not all(v is not None and not math.isnan(v) for v in values):
        return FAILS  # a seed that produced no value cannot support the claim
    mean = float(np.mean(values))  # +-inf is a value: e.g. a target never reached
    if not clears(claim, mean):
        return FAILS
    return HOLDS if all(clears(claim, v) for v in values) else FRAGILE


def summarise(values: list[float | None]) -> tuple[float, float]:
    """Mean and sample standard deviation over seeds. The sd is NaN for a single seed (a sample of
    one has no spread to estimate) or an infinite value; both are NaN where a value is missing."""
    arr = np.asarray([math.nan if v is None else v for v in values], dtype=float)
    if arr.size == 0 or np.isnan(arr).any():
        return math.nan, math.nan
    if arr.size == 1 or not np.all(np.isfinite(arr)):
        return float(arr.mean()), math.nan
    return float(arr.mean()), float(arr.std(ddof=1))


def interval(values: list[float | None], level: float = 0.95) -> tuple[float, float]:
    """Student-t interval for the mean over seeds (NaN unless there are two or more values, all finite)."""
    from scipy import stats

    arr = np.asarray([math.nan if v is None else v for v in values], dtype=float)
    if arr.size < 2 or not np.all(np.isfinite(arr)):
        return math.nan, math.nan
    mean, sd = summarise(values)
    half = float(stats.t.ppf(0.5 + level / 2, arr.size - 1)) * sd / math.sqrt(arr.size)
    return mean - half, mean + half


def format_value(mean: float, sd: float) -> str:
    """'mean ± sd' with three significant digits; the mean alone where the sd is NaN (one seed)."""
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.3g}" if math.isnan(sd) else f"{mean:.3g} ± {sd:.2g}"


class Ledger:
    """Records each claim's value per seed for one experiment run, judges them and writes the results."""

    def __init__(self, slug: str, profile: str, seeds: list[int], parameters: dict | None = None):
        self.slug = slug
        self.chapter = load_chapter(slug)
        self.claims = {c["id"]: c for c in validate_claims(self.chapter)}
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
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
        """Every declared claim with its value per seed of the run (None where a seed recorded none),
        how many seeds clear the threshold, mean, sd, interval and verdict; preconditions first."""
        order = sorted(self.claims.values(), key=lambda c: c["role"] != "precondition")
        rows: dict[str, dict] = {}
        for claim in order:
            values = [self.values[claim["id"]].get(s) for s in self.seeds]
            unmet = tuple(p for p in claim.get("requires") or [] if rows[p]["verdict"] != HOLDS)
            mean, sd = summarise(values)
            rows[claim["id"]] = {**claim, "requires": list(claim.get("requires") or []), "values": values,
                                 "seeds_clearing": sum(clears(claim, v) for v in values),
                                 "mean": mean, "sd": sd, "interval": list(interval(values)),
                                 "verdict": verdict(claim, values, self.profile, unmet)}
        return [rows[cid] for cid in self.claims]

    def table(self):
        """The claims table the experiment notebook shows: verdict first, then role, the paper's number,
        ours (mean ± sd over seeds), the threshold and how many seeds clear it."""
        import pandas as pd

        rows = [{"claim": r["id"], "verdict": r["verdict"], "role": r["role"], "paper": r["paper"],
                 "ours (mean ± sd)": format_value(r["mean"], r["sd"]),
                 "threshold": f"{r['direction']} {r['threshold']}",
                 "seeds clearing": f"{r['seeds_clearing']}/{len(self.seeds)}"}
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
            "interval_kind": INTERVAL_KIND,
            "claims": [{k: r[k] for k in RESULT_KEYS} for r in self.judged()],
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


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write through a temporary file and a rename: on any failure the old file stays intact and no
    half-written file is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """Write UTF-8 text atomically (see write_bytes_atomic)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data: dict) -> Path:
    """Write strict JSON atomically (see write_text_atomic): NaN becomes null and +-infinity the
    strings "inf" and "-inf" (:func:`strict_json`), so that any JSON parser reads the file;
    :func:`read_json` reverses the encoding."""
    return write_text_atomic(path, json.dumps(strict_json(data), indent=1, allow_nan=False) + "\n")


INFINITIES = {"inf": math.inf, "-inf": -math.inf}


def strict_json(obj):
    """``obj`` with every float NaN replaced by None and every infinity by "inf" or "-inf"."""
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def read_json(path: str | os.PathLike) -> dict:
    """Read a file written by :func:`write_json_atomic`. In each claim of a results record, the
    numbers (``values``, ``mean``, ``sd``, ``interval``) get their floats back: "inf" and "-inf"
    become infinities, and a null mean, sd or interval bound becomes NaN (a null in ``values`` stays
    None: that seed gave no value). Everything else is returned as parsed."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    for claim in data.get("claims", []) if isinstance(data, dict) else []:
        claim["values"] = [INFINITIES.get(v, v) if isinstance(v, str) else v for v in claim.get("values", [])]
        for key in ("mean", "sd"):
            if key in claim:
                claim[key] = _number(claim[key])
        if "interval" in claim:
            claim["interval"] = [_number(v) for v in claim["interval"]]
    return data


def _number(value) -> float:
    """A stored summary number: null is NaN, "inf"/"-inf" are infinities."""
    if value is None:
        return math.nan
    return INFINITIES[value] if isinstance(value, str) else float(value)


def package_versions() -> dict[str, str]:
    """Python, platform and the versions of the numeric packages this process has loaded, and the GPU
    when the run used one."""
    versions = {"python": platform.python_version(), "platform": platform.platform(terse=True)}
    for name in ("replib", "numpy", "scipy", "pandas", "matplotlib", "torch", "transformers", "sklearn"):
        module = sys.modules.get(name)
        if module is not None:
            versions[name] = getattr(module, "__version__", "unknown")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # the run put something on a GPU
        versions["cuda_device"] = torch.cuda.get_device_name()
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
