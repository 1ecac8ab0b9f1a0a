"""The claims ledger: chapter.yml declares each claim, the experiment records values, the ledger judges.

Every claim has a role (see ROLES). Evidence (headline, mechanism) and preconditions are judged from
the 95% t-interval of their mean over seeds (per-seed values are paired comparisons: same seed, same
data for the method and what it is compared with), against the threshold declared before the run:

* holds: the whole interval clears the threshold;
* fails: the whole interval misses it (the effect is decisively short of the bar), or some seed gave
  no value;
* undecided: the interval contains the threshold; :func:`seeds_needed` says how many seeds the
  observed spread would need to decide it;
* inconclusive (precondition <id> ...): a competence or convergence precondition it requires did
  not hold;
* no room (precondition <id> ...): a headroom precondition it requires did not hold: the size is
  not judged, the direction still is.

A headline also declares a ``null``, the value at which the method does no better than what it is
compared with; its direction verdict is the same rule against the null, strictly (an interval that
touches the null does not beat it). :func:`claim_label` turns the two verdicts into the headline's
label (reproduced, direction only, not reproduced, undecided, inconclusive). A precondition is met
only when it holds by the same rule. A check (an invariant of the code) passes only when every seed
clears it; a violated check fails the run. Premises and measurements are reported, never judged; at
the smoke profile nothing is judged. Judged claims declare a ``unit`` that is never a time: wall-clock
numbers are measurements.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .paths import load_chapter, repo_root
from .profiles import PROFILES

DIRECTIONS = {"<=": float.__le__, ">=": float.__ge__, "<": float.__lt__, ">": float.__gt__}
STRICT = {"<=": "<", "<": "<", ">=": ">", ">": ">"}  # beating the null: touching it is no effect
ROLES = {
    "headline": "a claim of the paper's abstract or main table, as the paper states it",
    "mechanism": "why the method should work: an ablation or a control",
    "precondition": "the rebuild works as the paper assumes; judged first, gates the claims that require it",
    "premise": "true by construction of the toy; shown, never counted",
    "check": "an invariant of the code; a violated check fails the run",
    "measurement": "a number reported beside the paper's, not judged",
}
PRECONDITION_KINDS = {
    "competence": "each learned model the claim compares learns the toy",
    "convergence": "the method's own mechanism is trained, not just its baseline",
    "headroom": "an oracle or upper-bound arm, scored by the same metric code, clears the size bar; "
                "when it does not, the size reads 'no room' and only the direction is judged",
}
JUDGED_ROLES = ("headline", "mechanism", "precondition")
EVIDENCE_ROLES = ("headline", "mechanism")
CLAIM_KEYS = ("id", "role", "statement", "paper", "metric", "direction", "threshold")
RESULTS_DIR_VAR = "REPLIB_RESULTS_DIR"
HOLDS, FAILS, UNDECIDED, INCONCLUSIVE, NO_ROOM = "holds", "fails", "undecided", "inconclusive", "no room"
PASSES, VIOLATED = "passes", "violated"
LABELS = {
    "reproduced": "the size verdict holds: the interval clears the paper's number",
    "direction only": "the method decisively beats its comparison (the direction holds), but the paper's "
                      "number is decisively missed or out of the toy's reach (no room)",
    "not reproduced": "on a rebuild whose preconditions are met, the paper's number is decisively missed "
                      "and the method does not decisively beat its comparison",
    "undecided": "the seeds do not decide the size, or (with no room) the direction",
    "inconclusive": "a competence or convergence precondition did not hold: not yet a fair test",
}
RESULT_KEYS = ("id", "role", "kind", "requires", "statement", "metric", "unit", "direction", "threshold",
               "null", "values", "seeds_clearing", "mean", "sd", "interval", "verdict", "seeds_needed",
               "direction_verdict", "direction_seeds_needed", "seeds_beating_null", "label")
INTERVAL_KIND = ("95% Student-t interval of the mean over seeds; where some value is infinite, the "
                 "range of the values")
CONFIRMATORY_FLOOR = 1000  # development and pilot seeds stay below it
MIN_CONFIRMATORY_SEEDS = 5
MAX_SEEDS_NEEDED = 1000
TIME_UNIT = re.compile(r"\b(s|secs?|seconds?|ms|milliseconds?|min|minutes?|h|hours?|wall[- ]?clock)\b", re.I)


def validate_claims(chapter: dict) -> list[dict]:
    """Check the declared claims of a chapter.yml (and its seeds); fail naming the first bad field."""
    claims = chapter.get("claims") or []
    seen: dict[str, dict] = {}
    for claim in claims:
        _validate_claim(claim)
        if claim["id"] in seen:
            raise ValueError(f"claim id {claim['id']!r} is declared twice")
        seen[claim["id"]] = claim
    for claim in claims:
        for required in claim.get("requires") or []:
            if seen.get(required, {}).get("role") != "precondition":
                raise ValueError(f"claim {claim['id']!r} requires {required!r}, which is not a "
                                 "precondition of the same chapter")
    for claim in claims:
        _requirement_chain(claim["id"], seen, ())
    if "confirmatory_seeds" in chapter:
        validate_seeds(chapter)
    validate_history(chapter.get("history"))
    validate_tuning(chapter.get("tuning"))
    return claims


HISTORY_KEYS = ("date", "issue", "changed", "why", "previous_verdicts")
TUNING_KEYS = ("protocol", "grid", "seeds")


def validate_history(history) -> None:
    """A re-declared chapter keeps, newest last, what changed from the previous declaration, why, and
    the verdicts the previous declaration got (claim id to verdict, ids that may no longer exist)."""
    if history is None:
        return
    if not isinstance(history, list) or not history:
        raise ValueError("history must be a list of entries (date, issue, changed, why, previous_verdicts)")
    for number, entry in enumerate(history, 1):
        missing = [k for k in HISTORY_KEYS if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise ValueError(f"history entry {number} lacks {', '.join(missing)}")
        for key in ("changed", "why"):
            if not isinstance(entry[key], str) or not entry[key].strip():
                raise ValueError(f"history entry {number}: {key} must say it in words")
        if not isinstance(entry["previous_verdicts"], dict) or not entry["previous_verdicts"]:
            raise ValueError(f"history entry {number}: previous_verdicts must map claim ids to the verdicts "
                             "the previous declaration got")


def validate_tuning(tuning) -> None:
    """The tuning protocol every compared arm shares: in words, the grid (parameter to the values
    tried) and the pilot seeds it is run on, all below CONFIRMATORY_FLOOR."""
    if tuning is None:
        return
    missing = [k for k in TUNING_KEYS if not isinstance(tuning, dict) or k not in tuning]
    if missing:
        raise ValueError(f"tuning lacks {', '.join(missing)}: the protocol in words, the grid "
                         "(parameter: [values]) and the pilot seeds")
    grid = tuning["grid"]
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ValueError("tuning grid must map each tuned parameter to the list of values tried")
    seeds = tuning["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise ValueError("tuning seeds must be a list of integers (pilot seeds)")
    if any(s >= CONFIRMATORY_FLOOR for s in seeds):
        raise ValueError(f"tuning seeds must stay below {CONFIRMATORY_FLOOR}, where confirmatory seeds live")


def _validate_claim(claim: dict) -> None:
    cid = claim.get("id", "?")
    missing = [k for k in CLAIM_KEYS if k not in claim]
    if missing:
        raise ValueError(f"claim {cid!r} lacks {', '.join(missing)}"
                         + (f"; roles: {', '.join(ROLES)}" if "role" in missing else ""))
    role = claim["role"]
    if role not in ROLES:
        raise ValueError(f"claim {cid!r}: unknown role {role!r}; valid roles: {', '.join(ROLES)}")
    if claim["direction"] not in DIRECTIONS:
        raise ValueError(f"claim {cid!r}: direction must be one of {', '.join(DIRECTIONS)}")
    for key in ("threshold", "null"):
        value = claim.get(key, 0)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"claim {cid!r}: {key} must be a number")
    if role == "headline" and "null" not in claim:
        raise ValueError(f"headline claim {cid!r} lacks null: the value at which the method does no better "
                         "than its comparison (0 for a difference, 1 for a ratio)")
    if "null" in claim and role not in EVIDENCE_ROLES:
        raise ValueError(f"claim {cid!r}: only headline and mechanism claims declare a null (role {role!r})")
    if role in JUDGED_ROLES:
        unit = claim.get("unit")
        if not isinstance(unit, str) or not unit.strip():
            raise ValueError(f"judged claim {cid!r} lacks unit: what its metric counts (steps, tokens, "
                             "FLOPs, evaluations, a score, a ratio of such)")
        if TIME_UNIT.search(unit):
            raise ValueError(f"judged claim {cid!r} is declared in {unit!r}: judged claims count steps, "
                             "tokens, FLOPs, evaluations or scores, never seconds; make it a measurement")
    if role == "precondition" and claim.get("kind") not in PRECONDITION_KINDS:
        raise ValueError(f"precondition {cid!r}: kind must be one of {', '.join(PRECONDITION_KINDS)}")
    if "kind" in claim and role != "precondition":
        raise ValueError(f"claim {cid!r}: only preconditions have a kind (role {role!r})")


def _requirement_chain(cid: str, claims: dict, chain: tuple) -> None:
    if cid in chain:
        raise ValueError(f"preconditions require each other in a cycle: {' -> '.join(chain + (cid,))}")
    for required in claims[cid].get("requires") or []:
        _requirement_chain(required, claims, chain + (cid,))


def validate_seeds(chapter: dict) -> list[int]:
    """The chapter's declared confirmatory seeds: at least five distinct integers, none below
    CONFIRMATORY_FLOOR (development and pilots keep below it) and none among its ``pilot_seeds``."""
    seeds = chapter.get("confirmatory_seeds")
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError("confirmatory_seeds must be a list of integers, declared before the run")
    if len(set(seeds)) != len(seeds) or len(seeds) < MIN_CONFIRMATORY_SEEDS:
        raise ValueError(f"confirmatory_seeds must name at least {MIN_CONFIRMATORY_SEEDS} distinct seeds, "
                         f"got {seeds}")
    low = [s for s in seeds if s < CONFIRMATORY_FLOOR]
    if low:
        raise ValueError(f"confirmatory seeds {low} are below {CONFIRMATORY_FLOOR}, where development and "
                         "pilot seeds live; declare seeds never used while developing")
    reused = sorted(set(seeds) & set(chapter.get("pilot_seeds") or []))
    if reused:
        raise ValueError(f"confirmatory seeds {reused} were used as pilot seeds; declare fresh ones")
    return seeds


def _clears(direction: str, bar: float, value: float | None) -> bool:
    if value is None or math.isnan(value):
        return False
    return DIRECTIONS[direction](float(value), float(bar))


def clears(claim: dict, value: float | None) -> bool:
    """Whether one value clears the claim's declared threshold (a missing value never does)."""
    return _clears(claim["direction"], claim["threshold"], value)


def beats_null(claim: dict, value: float | None) -> bool:
    """Whether one value beats the claim's null strictly, in the claim's direction."""
    return _clears(STRICT[claim["direction"]], claim["null"], value)


def _missing(values: list[float | None]) -> list[int]:
    return [i for i, v in enumerate(values) if v is None or math.isnan(v)]


def decide(direction: str, bar: float, values: list[float | None]) -> str:
    """holds, fails or undecided: whether the interval of the mean over seeds lies wholly on the
    clearing side of ``bar``, wholly on the other, or contains it. A seed without a value fails; a
    single seed, which has no interval, is undecided."""
    if not values or _missing(values):
        return FAILS
    lo, hi = interval(values)
    if math.isnan(lo):
        return UNDECIDED
    ok_lo, ok_hi = _clears(direction, bar, lo), _clears(direction, bar, hi)
    if ok_lo and ok_hi:
        return HOLDS
    return UNDECIDED if ok_lo or ok_hi else FAILS


def seeds_needed(values: list[float | None], bar: float) -> int | None:
    """The fewest seeds whose 95% interval, at the observed mean and sd, would exclude ``bar``; None
    where no number up to MAX_SEEDS_NEEDED would (or there is no spread to go on)."""
    from scipy import stats

    mean, sd = summarise(values)
    gap = abs(mean - bar)
    if not (math.isfinite(gap) and sd > 0 and gap > 0):
        return None
    for n in range(max(len(values), 2), MAX_SEEDS_NEEDED + 1):
        if float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) < gap:
            return n
    return None


def verdict(claim: dict, values: list[float | None], profile: str,
            unmet_preconditions: tuple[str, ...] = (), no_room: tuple[str, ...] = ()) -> str:
    """The size verdict of one claim from its value on every seed (None: the seed gave none).

    ``unmet_preconditions`` are the competence or convergence preconditions it requires that did not
    hold; ``no_room`` the headroom preconditions that did not (they gate the size only).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid profiles: {', '.join(PROFILES)}")
    if claim["role"] not in JUDGED_ROLES + ("check",):
        return f"not judged ({claim['role']})"
    if profile == "smoke":
        return "not judged (smoke profile)"
    if claim["role"] == "check":
        bad = sum(not clears(claim, v) for v in values)
        return f"{VIOLATED} (on {bad} of {len(values)} seeds)" if bad or not values else PASSES
    if unmet_preconditions:
        return f"{INCONCLUSIVE} (precondition {', '.join(unmet_preconditions)} did not hold)"
    if no_room:
        return f"{NO_ROOM} (headroom {', '.join(no_room)} did not hold)"
    return decide(claim["direction"], claim["threshold"], values)


def direction_verdict(claim: dict, values: list[float | None], profile: str,
                      unmet_preconditions: tuple[str, ...] = ()) -> str | None:
    """The direction verdict of a claim that declares a null: whether the method decisively beats
    its comparison (the interval lies strictly past the null). None for claims without a null."""
    if "null" not in claim or claim.get("null") is None:
        return None
    if profile == "smoke":
        return "not judged (smoke profile)"
    if unmet_preconditions:
        return f"{INCONCLUSIVE} (precondition {', '.join(unmet_preconditions)} did not hold)"
    return decide(STRICT[claim["direction"]], claim["null"], values)


def verdict_word(verdict: str | None) -> str:
    """The verdict's first words: 'inconclusive (precondition p1 ...)' -> 'inconclusive'."""
    return (verdict or "").split(" (")[0]


def claim_label(size: str, direction: str | None) -> str | None:
    """A headline claim's label from its size and direction verdicts (see LABELS):

    ============  ==============  ===============  ==============
    size          direction holds  undecided        fails
    ============  ==============  ===============  ==============
    holds         reproduced       reproduced       reproduced
    undecided     undecided        undecided        undecided
    fails         direction only   not reproduced   not reproduced
    no room       direction only   undecided        not reproduced
    inconclusive  inconclusive     inconclusive     inconclusive
    ============  ==============  ===============  ==============
    """
    size, direction = verdict_word(size), verdict_word(direction)
    if size.startswith("not judged") or direction.startswith("not judged") or not direction:
        return None
    if size == INCONCLUSIVE:
        return "inconclusive"
    if size == HOLDS:
        return "reproduced"
    if size == UNDECIDED:
        return "undecided"
    if direction == HOLDS:
        return "direction only"
    if direction == UNDECIDED and size == NO_ROOM:
        return "undecided"
    return "not reproduced"


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
    """Student-t interval for the mean over seeds: NaN unless there are two or more values and none
    is missing. Where some value is infinite (a target never reached) the t-interval does not exist;
    the range of the values stands in (a single point when they are all equal)."""
    from scipy import stats

    arr = np.asarray([math.nan if v is None else v for v in values], dtype=float)
    if arr.size < 2 or np.isnan(arr).any():
        return math.nan, math.nan
    if not np.all(np.isfinite(arr)):
        return float(arr.min()), float(arr.max())
    mean, sd = summarise(values)
    half = float(stats.t.ppf(0.5 + level / 2, arr.size - 1)) * sd / math.sqrt(arr.size)
    return mean - half, mean + half


def format_value(mean: float, sd: float) -> str:
    """'mean ± sd' with three significant digits; the mean alone where the sd is NaN (one seed)."""
    if mean is None or math.isnan(mean):
        return "n/a"
    return f"{mean:.3g}" if sd is None or math.isnan(sd) else f"{mean:.3g} ± {sd:.2g}"


def format_interval(bounds) -> str:
    """'[lo, hi]' with three significant digits, or 'n/a'."""
    lo, hi = (math.nan if b is None else b for b in bounds)
    return "n/a" if math.isnan(lo) or math.isnan(hi) else f"[{lo:.3g}, {hi:.3g}]"


def format_verdict(verdict: str | None, needed: int | None) -> str:
    """A verdict as tables show it: an undecided one says how many seeds would decide it."""
    if verdict is None:
        return ""
    if verdict == UNDECIDED:
        return f"undecided (~{needed} seeds)" if needed else "undecided (no seed count at this spread)"
    return verdict


def judge_claims(claims: list[dict], values: dict[str, list[float | None]], profile: str) -> list[dict]:
    """Every claim with its per-seed values, seeds clearing, mean, sd, interval, size and direction
    verdicts (with the seeds an undecided one would need) and, for a headline, its label; in the
    declared order. Preconditions are judged before the claims that require them."""
    by_id = {c["id"]: c for c in claims}
    rows: dict[str, dict] = {}

    def row(cid: str) -> dict:
        if cid not in rows:
            claim, vals = by_id[cid], values[cid]
            required = [row(p) for p in claim.get("requires") or []]
            unmet = tuple(r["id"] for r in required if r["verdict"] != HOLDS and r["kind"] != "headroom")
            no_room = tuple(r["id"] for r in required if r["verdict"] != HOLDS and r["kind"] == "headroom")
            size = verdict(claim, vals, profile, unmet, no_room)
            toward = direction_verdict(claim, vals, profile, unmet)
            has_null = claim.get("null") is not None
            mean, sd = summarise(vals)
            rows[cid] = {
                **{k: claim.get(k) for k in RESULT_KEYS}, "requires": list(claim.get("requires") or []),
                "values": list(vals), "seeds_clearing": sum(clears(claim, v) for v in vals),
                "mean": mean, "sd": sd, "interval": list(interval(vals)), "verdict": size,
                "seeds_needed": seeds_needed(vals, claim["threshold"]) if size == UNDECIDED else None,
                "direction_verdict": toward,
                "direction_seeds_needed": seeds_needed(vals, claim["null"]) if toward == UNDECIDED else None,
                "seeds_beating_null": sum(beats_null(claim, v) for v in vals) if has_null else None,
                "label": claim_label(size, toward) if claim["role"] == "headline" else None,
            }
        return rows[cid]

    return [row(c["id"]) for c in claims]


def violated_checks(claims: list[dict]) -> list[str]:
    """'<id>: <verdict>' for every check a results record says was violated."""
    return [f"{c['id']}: {c['verdict']}" for c in claims
            if c["role"] == "check" and verdict_word(c["verdict"]) == VIOLATED]


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

    @property
    def confirmatory(self) -> bool:
        """Whether this run's seeds are the chapter's declared confirmatory seeds."""
        return sorted(self.seeds) == sorted(self.chapter.get("confirmatory_seeds") or [None])

    def judged(self) -> list[dict]:
        """Every declared claim, judged (see :func:`judge_claims`); None where a seed recorded no value."""
        values = {cid: [self.values[cid].get(s) for s in self.seeds] for cid in self.claims}
        return judge_claims(list(self.claims.values()), values, self.profile)

    def report(self) -> None:
        """Print one line per claim: verdict (and direction for a headline), interval, bars, statement;
        then, last, whether any check was violated."""
        rows = self.judged()
        for row in rows:
            toward = f"; vs null {row['null']}: {row['direction_verdict']}" if row["direction_verdict"] else ""
            print(f"{row['id']:<28} {format_verdict(row['verdict'], row['seeds_needed']):<28} "
                  f"interval {format_interval(row['interval'])} (declared {row['direction']} "
                  f"{row['threshold']}{toward}): {row['statement']}")
        violated = violated_checks(rows)
        if violated:
            print("VIOLATED CHECKS (the code is wrong somewhere): " + "; ".join(violated))

    def table(self):
        """The claims table the experiment notebook shows: verdict first, then role, ours (mean ± sd
        and the interval over seeds), the threshold, and for a headline its null, direction verdict and
        label; how many seeds clear the threshold; the paper's number."""
        import pandas as pd

        n = len(self.seeds)
        rows = [{"claim": r["id"], "verdict": format_verdict(r["verdict"], r["seeds_needed"]),
                 "role": r["role"], "ours (mean ± sd)": format_value(r["mean"], r["sd"]),
                 "95% interval": format_interval(r["interval"]),
                 "threshold": f"{r['direction']} {r['threshold']}", "seeds clearing": f"{r['seeds_clearing']}/{n}",
                 "null": "" if r["null"] is None else r["null"],
                 "vs null": format_verdict(r["direction_verdict"], r["direction_seeds_needed"]),
                 "label": r["label"] or "", "paper": self.claims[r["id"]]["paper"]}
                for r in self.judged()]
        return pd.DataFrame(rows).set_index("claim")

    def results(self) -> dict:
        """The results record: profile, seeds, parameters, judged claims, versions, fingerprint."""
        from .fingerprint import fingerprint, source_hashes

        root = repo_root()
        return {
            "slug": self.slug,
            "profile": self.profile,
            "seeds": self.seeds,
            "confirmatory": self.confirmatory,
            "parameters": _jsonable(self.parameters),
            "interval_kind": INTERVAL_KIND,
            "claims": self.judged(),
            "runtime_s": {"03_experiment": round(time.perf_counter() - self._started, 2)},
            "versions": package_versions(),
            "fingerprint": fingerprint(self.slug) if root is not None else None,
            "sources": source_hashes(self.slug) if root is not None else None,
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
