"""The claims ledger: roles, per-seed verdicts, preconditions, edge cases, atomic writes."""

import json
import math

import numpy as np
import pytest

from replib.core import Ledger
from replib.core.fingerprint import fingerprint
from replib.core.ledger import (
    ROLES,
    clears,
    format_value,
    interval,
    read_json,
    summarise,
    validate_claims,
    verdict,
    write_json_atomic,
    write_text_atomic,
)


def _claim(cid, role, direction, threshold, **extra):
    return {"id": cid, "role": role, "statement": f"statement of {cid}", "paper": "the paper's number",
            "metric": "a ratio", "direction": direction, "threshold": threshold, **extra}


# Synthetic ledgers, so that these tests do not change when a chapter re-poses its claims.
CHAPTERS = {
    "bidprice_routing": {"slug": "bidprice_routing", "claims": [
        _claim("c1a_mean_e2e", "headline", "<=", 0.85),
        _claim("c1b_p99_e2e", "headline", "<=", 1.05),
        _claim("c2a_mean_ttft", "mechanism", "<=", 0.6)]},
    "me_dlm": {"slug": "me_dlm", "claims": [
        _claim("p1_mdlm_learns_the_toy", "precondition", ">=", 80.0),
        _claim("c2_edits_repair", "mechanism", ">=", 15.0, requires=["p1_mdlm_learns_the_toy"]),
        _claim("c5_full_vs_substitution", "measurement", ">=", 5.0)]},
}


@pytest.fixture(autouse=True)
def synthetic_chapters(monkeypatch):
    monkeypatch.setattr("replib.core.ledger.load_chapter", lambda slug: CHAPTERS[slug])


LE = {"id": "c", "role": "headline", "direction": "<=", "threshold": 0.85}
GE = {"id": "g", "role": "mechanism", "direction": ">=", "threshold": 1.5}
NAN, INF = float("nan"), float("inf")


def test_holds_fragile_fails_from_every_seed():
    assert verdict(LE, [0.8, 0.84, 0.7], "book") == "holds"
    assert verdict(LE, [0.8, 0.86, 0.7], "book") == "fragile"  # mean 0.787 clears, one seed does not
    assert verdict(LE, [0.8, 0.95], "book") == "fails"  # mean 0.875
    assert verdict(GE, [INF, INF], "book") == "holds"  # +-inf is a value
    assert verdict(LE, [INF, 0.1], "book") == "fails"  # e.g. a target never reached


def test_a_seed_without_a_value_cannot_support_the_claim():
    for values in ([0.8, NAN], [0.8, None], [None, None], [NAN], []):
        assert verdict(LE, values, "book") == "fails", values


def test_thresholds_strict_and_not_strict():
    assert verdict(LE, [0.85, 0.85], "book") == "holds"  # exactly at a <= threshold
    strict = {**LE, "direction": "<"}
    assert verdict(strict, [0.85, 0.85], "book") == "fails"
    assert verdict({**GE, "direction": ">"}, [1.5, 1.5], "book") == "fails"
    assert verdict(GE, [1.5, 1.5], "book") == "holds"
    assert verdict(strict, [-INF, -INF], "book") == "holds"
    assert not clears(LE, None) and not clears(LE, NAN) and clears(LE, -INF)


def test_unjudged_roles_smoke_and_unknown_profiles():
    for role in ("premise", "check", "measurement"):
        assert verdict({**LE, "role": role}, [0.1], "book") == f"not judged ({role})"
    assert verdict(LE, [0.1], "smoke") == "not judged (smoke profile)"
    assert verdict(LE, [0.1], "paper") == "holds"
    with pytest.raises(ValueError, match="valid profiles: smoke, book, paper"):
        verdict(LE, [0.1], "quick")
    with pytest.raises(ValueError, match="valid profiles"):
        Ledger("bidprice_routing", "quick", seeds=[0])


def test_unmet_precondition_makes_the_claim_inconclusive():
    assert verdict(LE, [0.1, 0.1], "book", ("p1",)) == "inconclusive (precondition p1 did not hold)"
    assert verdict(LE, [0.1], "smoke", ("p1",)) == "not judged (smoke profile)"


def _claim(**over):
    return {"id": "a", "role": "headline", "statement": "s", "paper": "p", "metric": "m",
            "direction": "<=", "threshold": 1, **over}


def test_claim_declarations_are_validated():
    good = _claim()
    assert validate_claims({"claims": [good]}) == [good]
    with pytest.raises(ValueError, match="lacks threshold"):
        validate_claims({"claims": [{k: v for k, v in good.items() if k != "threshold"}]})
    with pytest.raises(ValueError, match="lacks role; roles: headline, mechanism"):
        validate_claims({"claims": [{k: v for k, v in good.items() if k != "role"}]})
    with pytest.raises(ValueError, match="unknown role 'main'; valid roles: " + ", ".join(ROLES)):
        validate_claims({"claims": [_claim(role="main")]})
    with pytest.raises(ValueError, match="direction must be one of"):
        validate_claims({"claims": [_claim(direction="=<")]})
    with pytest.raises(ValueError, match="declared twice"):
        validate_claims({"claims": [good, good]})
    with pytest.raises(ValueError, match="requires 'b', which is not a precondition"):
        validate_claims({"claims": [_claim(requires=["b"]), _claim(id="b")]})
    pre = _claim(id="p", role="precondition")
    assert len(validate_claims({"claims": [_claim(requires=["p"]), pre]})) == 2


def test_interval_is_a_t_interval_over_seeds():
    lo, hi = interval([1.0, 2.0, 3.0])
    assert (lo + hi) / 2 == pytest.approx(2.0)
    assert hi - lo == pytest.approx(2 * 4.302653 * 1.0 / math.sqrt(3), rel=1e-5)
    assert all(math.isnan(x) for x in interval([1.0]) + interval([1.0, None]) + interval([1.0, INF]))


def test_ledger_records_judges_and_saves(tmp_path, monkeypatch):
    monkeypatch.delenv("REPLIB_RESULTS_DIR", raising=False)
    ledger = Ledger("bidprice_routing", "book", seeds=[0, 1], parameters={"rate": np.float64(0.5)})
    ledger.record("c1a_mean_e2e", 0, 0.7)
    ledger.record("c1a_mean_e2e", 1, 0.8)
    ledger.record("c1b_p99_e2e", 0, 0.9)
    ledger.record("c1b_p99_e2e", 1, 1.1)
    with pytest.raises(ValueError, match="declared claims: c1a_mean_e2e"):
        ledger.record("c9", 0, 1.0)
    with pytest.raises(ValueError, match="not one of this run's seeds"):
        ledger.record("c1a_mean_e2e", 7, 1.0)
    rows = {r["id"]: r for r in ledger.judged()}
    assert rows["c1a_mean_e2e"]["verdict"] == "holds" and rows["c1a_mean_e2e"]["seeds_clearing"] == 2
    assert rows["c1a_mean_e2e"]["mean"] == pytest.approx(0.75)
    assert rows["c1b_p99_e2e"]["verdict"] == "fragile" and rows["c1b_p99_e2e"]["seeds_clearing"] == 1
    assert rows["c2a_mean_ttft"]["verdict"] == "fails" and rows["c2a_mean_ttft"]["values"] == [None, None]
    assert ledger.save() is None  # no results directory asked for: nothing written
    path = ledger.save(tmp_path)
    data = json.loads(path.read_text())
    assert data["profile"] == "book" and data["seeds"] == [0, 1] and data["parameters"] == {"rate": 0.5}
    assert data["fingerprint"] == fingerprint("bidprice_routing")
    claim = data["claims"][0]
    assert claim["role"] == "headline" and claim["values"] == [0.7, 0.8] and len(claim["interval"]) == 2
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    table = ledger.table()
    assert list(table.columns[:2]) == ["verdict", "role"] and table.loc["c1b_p99_e2e", "seeds clearing"] == "1/2"


def test_a_partial_recording_cannot_hold():
    """Seeds [0, 1, 2] with only seed 0 recorded: the claim fails, it does not hold on one seed."""
    ledger = Ledger("bidprice_routing", "book", seeds=[0, 1, 2])
    ledger.record("c1a_mean_e2e", 0, 0.5)
    row = next(r for r in ledger.judged() if r["id"] == "c1a_mean_e2e")
    assert row["values"] == [0.5, None, None] and row["verdict"] == "fails"


def test_preconditions_gate_the_claims_that_require_them():
    ledger = Ledger("me_dlm", "book", seeds=[0, 1])
    for seed in (0, 1):
        ledger.record("p1_mdlm_learns_the_toy", seed, 30.0)  # the base model did not learn the toy
        ledger.record("c2_edits_repair", seed, 40.0)  # would hold on its own
    rows = {r["id"]: r for r in ledger.judged()}
    assert rows["p1_mdlm_learns_the_toy"]["verdict"] == "fails"
    assert rows["c2_edits_repair"]["verdict"].startswith("inconclusive (precondition p1_mdlm_learns_the_toy")
    assert rows["c5_full_vs_substitution"]["verdict"] == "not judged (measurement)"
    ledger.record("p1_mdlm_learns_the_toy", 0, 70.0)
    ledger.record("p1_mdlm_learns_the_toy", 1, 95.0)  # mean clears, one seed does not: still gated
    rows = {r["id"]: r for r in ledger.judged()}
    assert rows["p1_mdlm_learns_the_toy"]["verdict"] == "fragile"
    assert rows["c2_edits_repair"]["verdict"].startswith("inconclusive")
    ledger.record("p1_mdlm_learns_the_toy", 0, 85.0)
    assert {r["id"]: r for r in ledger.judged()}["c2_edits_repair"]["verdict"] == "holds"


def test_ledger_records_all_and_reports(capsys):
    ledger = Ledger("bidprice_routing", "book", seeds=[0, 1])
    ledger.record_all({0: {"c1a_mean_e2e": 0.7}, 1: {"c1a_mean_e2e": 0.8}})
    ledger.report()
    out = capsys.readouterr().out.splitlines()
    line = next(text for text in out if text.startswith("c1a_mean_e2e"))
    assert "holds" in line and "mean 0.75" in line and "<= 0.85" in line


def test_atomic_writes_leave_the_old_file_when_they_fail(tmp_path, monkeypatch):
    path = write_text_atomic(tmp_path / "page.md", "old\n")
    write_json_atomic(tmp_path / "r.json", {"a": 1})

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("replib.core.ledger.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(path, "new\n")
    with pytest.raises(OSError, match="disk full"):
        write_json_atomic(tmp_path / "r.json", {"a": 2})
    assert path.read_text() == "old\n" and json.loads((tmp_path / "r.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.md", "r.json"]


def test_results_json_is_strict_and_reads_back(tmp_path):
    """NaN is written as null and infinities as "inf"/"-inf" (any JSON parser reads the file);
    read_json gives the claim numbers back as floats."""
    record = {"slug": "x", "parameters": {"rate": INF}, "claims": [
        {"id": "c", "values": [1.0, None, INF, -INF], "mean": NAN, "sd": NAN, "interval": [NAN, INF]}]}
    path = write_json_atomic(tmp_path / "r.json", record)
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard {name}"))
    claim = read_json(path)["claims"][0]
    assert claim["values"] == [1.0, None, INF, -INF]
    assert math.isnan(claim["mean"]) and math.isnan(claim["sd"])
    assert math.isnan(claim["interval"][0]) and claim["interval"][1] == INF


def test_one_seed_prints_without_a_spread():
    mean, sd = summarise([0.5])
    assert mean == 0.5 and math.isnan(sd) and format_value(mean, sd) == "0.5"
    assert format_value(*summarise([0.5, 0.7])) == "0.6 ± 0.14"
