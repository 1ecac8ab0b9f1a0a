"""The claims ledger: roles, per-seed verdicts, preconditions, edge cases, atomic writes."""

import json
import math

import numpy as np
import pytest

from replib.core import Ledger
from replib.core.fingerprint import fingerprint
from replib.core.ledger import (
    JUDGED_ROLES,
    ROLES,
    beats_null,
    claim_label,
    clears,
    direction_verdict,
    format_value,
    format_verdict,
    interval,
    read_json,
    seeds_needed,
    summarise,
    validate_claims,
    validate_seeds,
    verdict,
    violated_checks,
    write_json_atomic,
    write_text_atomic,
)


def _claim(cid, role, direction, threshold, **extra):
    base = {"id": cid, "role": role, "statement": f"statement of {cid}", "paper": "the paper's number",
            "metric": "a ratio", "direction": direction, "threshold": threshold}
    if role in JUDGED_ROLES:
        base["unit"] = "ratio of counts"
    if role == "headline":
        base["null"] = 1.0
    if role == "precondition":
        base["kind"] = "competence"
    return {**base, **extra}


# Synthetic ledgers, so that these tests do not change when a chapter re-poses its claims.
CHAPTERS = {
    "bidprice_routing": {"slug": "bidprice_routing", "claims": [
        _claim("c1a_mean_e2e", "headline", "<=", 0.85),
        _claim("c1b_p99_e2e", "headline", "<=", 1.05),
        _claim("c2a_mean_ttft", "mechanism", "<=", 0.6),
        _claim("k1_invariant", "check", "<=", 0.0)]},
    "me_dlm": {"slug": "me_dlm", "claims": [
        _claim("p1_mdlm_learns_the_toy", "precondition", ">=", 80.0),
        _claim("p2_oracle_room", "precondition", ">=", 15.0, kind="headroom"),
        _claim("c2_edits_repair", "mechanism", ">=", 15.0, requires=["p1_mdlm_learns_the_toy"]),
        _claim("h1_edits_headline", "headline", ">=", 15.0, null=0.0,
               requires=["p1_mdlm_learns_the_toy", "p2_oracle_room"]),
        _claim("c5_full_vs_substitution", "measurement", ">=", 5.0)]},
}


@pytest.fixture(autouse=True)
def synthetic_chapters(monkeypatch):
    monkeypatch.setattr("replib.core.ledger.load_chapter", lambda slug: CHAPTERS[slug])


LE = {"id": "c", "role": "headline", "direction": "<=", "threshold": 0.85, "null": 1.0}
GE = {"id": "g", "role": "mechanism", "direction": ">=", "threshold": 1.5}
NAN, INF = float("nan"), float("inf")


def test_an_interval_straddling_the_threshold_is_undecided():
    """Mean 0.787 clears 0.85 and so do two seeds of three, but the interval [0.63, 0.94] contains it."""
    assert verdict(LE, [0.8, 0.86, 0.7], "book") == "undecided"
    lo, hi = interval([0.8, 0.86, 0.7])
    assert lo < 0.85 < hi
    # a mean that misses the bar with an interval that contains it is undecided too, not "fails"
    assert verdict(LE, [0.8, 0.95, 0.9], "book") == "undecided"


def test_a_decisive_miss_fails_and_a_decisive_clear_holds():
    assert verdict(LE, [0.95, 0.97, 0.96, 0.94, 0.98], "book") == "fails"  # interval [0.94, 0.98]
    assert verdict(LE, [0.70, 0.72, 0.71, 0.69, 0.73], "book") == "holds"
    assert verdict(GE, [1.2, 1.3, 1.25], "book") == "fails"
    assert verdict(GE, [INF, INF], "book") == "holds"  # +-inf is a value: all seeds agree
    assert verdict(LE, [INF, INF, INF], "book") == "fails"  # e.g. a target never reached on any seed
    assert verdict(LE, [INF, 0.1, 0.2], "book") == "undecided"  # the range stands in for the interval
    assert verdict(LE, [INF, 0.9, 1.2], "book") == "fails"  # no value in the range clears


def test_seeds_needed_at_the_observed_spread():
    values = [0.8, 0.86, 0.7]  # mean 0.7867, sd 0.0808, gap 0.0633 to the bar
    n = seeds_needed(values, 0.85)
    assert n == 9
    from scipy import stats
    for k, decided in ((n, True), (n - 1, False)):
        half = stats.t.ppf(0.975, k - 1) * 0.0808290376865476 / math.sqrt(k)
        assert bool(half < 0.85 - np.mean(values)) is decided
    assert seeds_needed([0.85, 0.85], 0.85) is None  # no spread, no gap: no number of seeds decides
    assert seeds_needed([0.84, 0.86], 0.85) is None  # the mean sits on the bar
    row = {r["id"]: r for r in _judge("bidprice_routing", {"c1a_mean_e2e": values})}["c1a_mean_e2e"]
    assert row["verdict"] == "undecided" and row["seeds_needed"] == 9
    assert format_verdict(row["verdict"], row["seeds_needed"]) == "undecided (~9 seeds)"


def test_a_seed_without_a_value_cannot_support_the_claim():
    for values in ([0.8, NAN], [0.8, None], [None, None], [NAN], []):
        assert verdict(LE, values, "book") == "fails", values
    assert verdict(LE, [0.5], "book") == "undecided"  # one seed has no interval


def test_thresholds_strict_and_not_strict():
    assert verdict(LE, [0.85, 0.85], "book") == "holds"  # exactly at a <= threshold, no spread
    strict = {**LE, "direction": "<"}
    assert verdict(strict, [0.85, 0.85], "book") == "fails"
    assert verdict({**GE, "direction": ">"}, [1.5, 1.5], "book") == "fails"
    assert verdict(GE, [1.5, 1.5], "book") == "holds"
    assert verdict(strict, [-INF, -INF], "book") == "holds"
    assert not clears(LE, None) and not clears(LE, NAN) and clears(LE, -INF)


def test_the_direction_is_judged_against_the_null_strictly():
    assert direction_verdict(LE, [0.9, 0.92, 0.91, 0.93, 0.9], "book") == "holds"  # decisively below 1
    assert direction_verdict(LE, [1.0, 1.0, 1.0], "book") == "fails"  # touching the null is no effect
    assert direction_verdict(LE, [0.8, 1.1, 0.95], "book") == "undecided"
    assert direction_verdict(GE, [0.8, 0.9], "book") is None  # no null declared
    assert direction_verdict(LE, [0.5], "smoke") == "not judged (smoke profile)"
    assert beats_null(LE, 0.99) and not beats_null(LE, 1.0)


def test_the_label_of_a_headline():
    """Direction holding with the size failing gives 'direction only'; see claim_label's table."""
    assert claim_label("holds", "holds") == "reproduced"
    assert claim_label("holds", "fails") == "reproduced"  # a non-inferiority claim: the paper's size holds
    assert claim_label("fails", "holds") == "direction only"
    assert claim_label("fails", "undecided") == "not reproduced"
    assert claim_label("fails", "fails") == "not reproduced"
    assert claim_label("undecided", "holds") == "undecided"
    assert claim_label("no room (headroom p2 did not hold)", "holds") == "direction only"
    assert claim_label("no room (headroom p2 did not hold)", "undecided") == "undecided"
    assert claim_label("no room (headroom p2 did not hold)", "fails") == "not reproduced"
    assert claim_label("inconclusive (precondition p1 did not hold)", "inconclusive (...)") == "inconclusive"
    assert claim_label("not judged (smoke profile)", "not judged (smoke profile)") is None
    rows = {r["id"]: r for r in _judge("bidprice_routing", {"c1a_mean_e2e": [0.9, 0.91, 0.92, 0.9, 0.91]})}
    assert (rows["c1a_mean_e2e"]["verdict"], rows["c1a_mean_e2e"]["direction_verdict"]) == ("fails", "holds")
    assert rows["c1a_mean_e2e"]["label"] == "direction only" and rows["c2a_mean_ttft"]["label"] is None


def test_unjudged_roles_smoke_and_unknown_profiles():
    for role in ("premise", "measurement"):
        assert verdict({**LE, "role": role}, [0.1], "book") == f"not judged ({role})"
    assert verdict(LE, [0.1], "smoke") == "not judged (smoke profile)"
    assert verdict({**LE, "role": "check"}, [5.0], "smoke") == "not judged (smoke profile)"
    assert verdict(LE, [0.1, 0.1], "paper") == "holds"
    with pytest.raises(ValueError, match="valid profiles: smoke, book, paper"):
        verdict(LE, [0.1], "quick")
    with pytest.raises(ValueError, match="valid profiles"):
        Ledger("bidprice_routing", "quick", seeds=[0])


def test_a_violated_check_is_named_and_fails_the_run(capsys):
    check = {**LE, "role": "check", "threshold": 0.0}
    assert verdict(check, [0.0, -1.0, 0.0], "book") == "passes"
    assert verdict(check, [0.0, 1e-9, 0.0], "book") == "violated (on 1 of 3 seeds)"  # one seed is enough
    assert verdict(check, [0.0, None], "book") == "violated (on 1 of 2 seeds)"
    ledger = Ledger("bidprice_routing", "book", seeds=[0, 1])
    ledger.record_all({0: {"k1_invariant": 0.0}, 1: {"k1_invariant": 0.5}})
    assert violated_checks(ledger.judged()) == ["k1_invariant: violated (on 1 of 2 seeds)"]
    ledger.report()
    assert capsys.readouterr().out.splitlines()[-1].startswith("VIOLATED CHECKS")


def test_unmet_precondition_makes_the_claim_inconclusive():
    assert verdict(LE, [0.1, 0.1], "book", ("p1",)) == "inconclusive (precondition p1 did not hold)"
    assert verdict(LE, [0.1], "smoke", ("p1",)) == "not judged (smoke profile)"
    assert verdict(LE, [0.1, 0.1], "book", (), ("p2",)) == "no room (headroom p2 did not hold)"


def _judge(slug, values):
    ledger = Ledger(slug, "book", seeds=list(range(max(len(v) for v in values.values()))))
    for cid, per_seed in values.items():
        for seed, value in enumerate(per_seed):
            ledger.record(cid, seed, value)
    return ledger.judged()


def test_a_precondition_met_on_four_seeds_of_five_gates_its_claims():
    good = [40.0] * 5
    rows = {r["id"]: r for r in _judge("me_dlm", {"p1_mdlm_learns_the_toy": [90, 91, 92, 93, 70],
                                                  "p2_oracle_room": [30] * 5, "c2_edits_repair": good,
                                                  "h1_edits_headline": good})}
    assert rows["p1_mdlm_learns_the_toy"]["seeds_clearing"] == 4
    assert rows["p1_mdlm_learns_the_toy"]["verdict"] == "undecided"  # not met
    assert rows["c2_edits_repair"]["verdict"] == "inconclusive (precondition p1_mdlm_learns_the_toy did not hold)"
    assert rows["h1_edits_headline"]["direction_verdict"].startswith("inconclusive")
    assert rows["h1_edits_headline"]["label"] == "inconclusive"
    assert rows["c5_full_vs_substitution"]["verdict"] == "not judged (measurement)"
    rows = {r["id"]: r for r in _judge("me_dlm", {"p1_mdlm_learns_the_toy": [90, 91, 92, 93, 94],
                                                  "p2_oracle_room": [30] * 5, "c2_edits_repair": good,
                                                  "h1_edits_headline": good})}
    assert rows["c2_edits_repair"]["verdict"] == "holds" and rows["h1_edits_headline"]["label"] == "reproduced"


def test_a_headroom_precondition_gates_the_size_only():
    rows = {r["id"]: r for r in _judge("me_dlm", {"p1_mdlm_learns_the_toy": [90] * 5,
                                                  "p2_oracle_room": [5, 6, 7, 5, 6],  # the oracle gains < 15
                                                  "c2_edits_repair": [3.0] * 5,
                                                  "h1_edits_headline": [3.0, 3.5, 2.5, 3.2, 2.8]})}
    head = rows["h1_edits_headline"]
    assert head["verdict"] == "no room (headroom p2_oracle_room did not hold)"
    assert head["direction_verdict"] == "holds" and head["label"] == "direction only"
    assert rows["c2_edits_repair"]["verdict"] == "fails"  # it does not require the headroom


def test_claim_declarations_are_validated():
    good = _claim("a", "headline", "<=", 1)
    assert validate_claims({"claims": [good]}) == [good]
    with pytest.raises(ValueError, match="lacks threshold"):
        validate_claims({"claims": [{k: v for k, v in good.items() if k != "threshold"}]})
    with pytest.raises(ValueError, match="lacks role; roles: headline, mechanism"):
        validate_claims({"claims": [{k: v for k, v in good.items() if k != "role"}]})
    with pytest.raises(ValueError, match="unknown role 'main'; valid roles: " + ", ".join(ROLES)):
        validate_claims({"claims": [{**good, "role": "main"}]})
    with pytest.raises(ValueError, match="direction must be one of"):
        validate_claims({"claims": [{**good, "direction": "=<"}]})
    with pytest.raises(ValueError, match="declared twice"):
        validate_claims({"claims": [good, good]})
    with pytest.raises(ValueError, match="requires 'b', which is not a precondition"):
        validate_claims({"claims": [{**good, "requires": ["b"]}, {**good, "id": "b"}]})
    pre = _claim("p", "precondition", ">=", 1)
    assert len(validate_claims({"claims": [{**good, "requires": ["p"]}, pre]})) == 2
    with pytest.raises(ValueError, match="headline claim 'a' lacks null"):
        validate_claims({"claims": [{k: v for k, v in good.items() if k != "null"}]})
    with pytest.raises(ValueError, match="only headline and mechanism claims declare a null"):
        validate_claims({"claims": [{**pre, "null": 0}]})
    with pytest.raises(ValueError, match="kind must be one of competence, convergence, headroom"):
        validate_claims({"claims": [{**pre, "kind": "oracle"}]})
    with pytest.raises(ValueError, match="judged claim 'a' lacks unit"):
        validate_claims({"claims": [{k: v for k, v in good.items() if k != "unit"}]})
    with pytest.raises(ValueError, match="cycle: p -> q -> p"):
        validate_claims({"claims": [{**pre, "requires": ["q"]}, {**pre, "id": "q", "requires": ["p"]}]})


@pytest.mark.parametrize("unit", ["seconds", "ratio of optimizer seconds", "s", "wall-clock speed-up",
                                  "ms per step", "minutes"])
def test_a_judged_claim_in_seconds_is_refused(unit):
    with pytest.raises(ValueError, match="never seconds; make it a measurement"):
        validate_claims({"claims": [_claim("a", "headline", "<=", 1, unit=unit)]})
    # the same metric as a measurement is fine, and so are counts
    assert validate_claims({"claims": [_claim("a", "measurement", "<=", 1, unit=unit)]})
    for fine in ("steps", "ratio of eigendecomposition counts", "tokens", "pass@1 points", "FLOPs"):
        assert validate_claims({"claims": [_claim("a", "headline", "<=", 1, unit=fine)]})


def test_confirmatory_seeds_are_fresh():
    ok = {"claims": [], "confirmatory_seeds": [1000, 1001, 1002, 1003, 1004], "pilot_seeds": [0, 1, 5000]}
    assert validate_seeds(ok) == [1000, 1001, 1002, 1003, 1004]
    with pytest.raises(ValueError, match=r"confirmatory seeds \[1002\] were used as pilot seeds"):
        validate_claims({**ok, "pilot_seeds": [0, 1002]})
    with pytest.raises(ValueError, match=r"confirmatory seeds \[3\] are below 1000"):
        validate_seeds({"confirmatory_seeds": [1000, 1001, 1002, 1003, 3]})
    with pytest.raises(ValueError, match="at least 5 distinct seeds"):
        validate_seeds({"confirmatory_seeds": [1000, 1001, 1002, 1003]})
    with pytest.raises(ValueError, match="at least 5 distinct seeds"):
        validate_seeds({"confirmatory_seeds": [1000, 1001, 1002, 1003, 1003]})
    with pytest.raises(ValueError, match="list of integers"):
        validate_seeds({"confirmatory_seeds": "1000-1004"})


def test_history_and_tuning_declarations_are_complete():
    entry = {"date": "2026-12-03", "issue": 39, "changed": "a headroom arm", "why": "a review",
             "previous_verdicts": {"h1": "fails"}}
    tuning = {"protocol": "the same grid for every arm; best mean on the pilot seeds", "grid": {"lr": [1e-3, 1e-2]},
              "seeds": [0, 1, 2]}
    assert validate_claims({"claims": [], "history": [entry], "tuning": tuning}) == []
    with pytest.raises(ValueError, match="history entry 1 lacks why"):
        validate_claims({"claims": [], "history": [{k: v for k, v in entry.items() if k != "why"}]})
    with pytest.raises(ValueError, match="history must be a list"):
        validate_claims({"claims": [], "history": entry})
    with pytest.raises(ValueError, match="changed must say it in words"):
        validate_claims({"claims": [], "history": [{**entry, "changed": " "}]})
    with pytest.raises(ValueError, match="previous_verdicts must map"):
        validate_claims({"claims": [], "history": [{**entry, "previous_verdicts": {}}]})
    with pytest.raises(ValueError, match="tuning lacks seeds"):
        validate_claims({"claims": [], "tuning": {"protocol": "p", "grid": {"lr": [1]}}})
    with pytest.raises(ValueError, match="grid must map"):
        validate_claims({"claims": [], "tuning": {**tuning, "grid": {"lr": []}}})
    with pytest.raises(ValueError, match="below 1000"):
        validate_claims({"claims": [], "tuning": {**tuning, "seeds": [0, 1000]}})
    with pytest.raises(ValueError, match="list of integers"):
        validate_claims({"claims": [], "tuning": {**tuning, "seeds": [True]}})


def test_interval_is_a_t_interval_over_seeds():
    lo, hi = interval([1.0, 2.0, 3.0])
    assert (lo + hi) / 2 == pytest.approx(2.0)
    assert hi - lo == pytest.approx(2 * 4.302653 * 1.0 / math.sqrt(3), rel=1e-5)
    assert all(math.isnan(x) for x in interval([1.0]) + interval([1.0, None]) + interval([]))
    assert interval([1.0, INF]) == (1.0, INF) and interval([INF, INF]) == (INF, INF)


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
    assert rows["c1a_mean_e2e"]["verdict"] == "undecided" and rows["c1a_mean_e2e"]["seeds_clearing"] == 2
    assert rows["c1a_mean_e2e"]["mean"] == pytest.approx(0.75)
    assert rows["c1b_p99_e2e"]["verdict"] == "undecided" and rows["c1b_p99_e2e"]["seeds_clearing"] == 1
    assert rows["c2a_mean_ttft"]["verdict"] == "fails" and rows["c2a_mean_ttft"]["values"] == [None, None]
    assert ledger.save() is None  # no results directory asked for: nothing written
    path = ledger.save(tmp_path)
    data = json.loads(path.read_text())
    assert data["profile"] == "book" and data["seeds"] == [0, 1] and data["parameters"] == {"rate": 0.5}
    assert data["fingerprint"] == fingerprint("bidprice_routing") and data["confirmatory"] is False
    assert set(data["sources"]) >= {"notebooks/bidprice_routing/chapter.yml", "lib/replib/core/ledger.py"}
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


def test_ledger_records_all_and_reports(capsys):
    ledger = Ledger("bidprice_routing", "book", seeds=[0, 1, 2])
    ledger.record_all({0: {"c1a_mean_e2e": 0.7}, 1: {"c1a_mean_e2e": 0.8}, 2: {"c1a_mean_e2e": 0.75}})
    ledger.report()
    out = capsys.readouterr().out.splitlines()
    line = next(text for text in out if text.startswith("c1a_mean_e2e"))
    assert "undecided (~4 seeds)" in line and "interval [0.626, 0.874]" in line and "<= 0.85" in line
    assert "vs null 1.0: holds" in line


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


def test_seeds_needed_has_no_answer_without_spread_or_a_finite_gap():
    assert seeds_needed([0.5, 0.5, 0.5], 0.85) is None  # no spread: already decided, nothing to add
    assert seeds_needed([INF, 0.7, 0.8], 0.85) is None  # an infinite value: no t-interval to grow
    assert seeds_needed([0.5], 0.85) is None  # one seed: no spread to go on
    # the search stops at MAX_SEEDS_NEEDED: a gap too small for 1000 seeds has no answer
    from replib.core.ledger import MAX_SEEDS_NEEDED

    assert seeds_needed([0.0, 2.0], 1.0 + 1e-9) is None and MAX_SEEDS_NEEDED == 1000


def test_a_null_declared_as_none_judges_no_direction_and_every_unmet_precondition_is_named():
    assert direction_verdict({**LE, "null": None}, [0.5, 0.6], "book") is None
    assert verdict(LE, [0.1, 0.1], "book", ("p1", "p2")) == "inconclusive (precondition p1, p2 did not hold)"
    assert direction_verdict(LE, [0.1, 0.1], "book", ("p1", "p2")) == "inconclusive (precondition p1, p2 did not hold)"
    assert verdict(LE, [0.1, 0.1], "book", (), ("h1", "h2")) == "no room (headroom h1, h2 did not hold)"


def test_judged_rows_count_seeds_beating_the_null_and_label_headlines_only():
    CHAPTERS["bidprice_routing"]["claims"].append(
        _claim("m9_with_null", "mechanism", "<=", 0.9, null=1.0))
    try:
        rows = {r["id"]: r for r in _judge("bidprice_routing", {
            "c1a_mean_e2e": [0.9, 0.95, 1.05, 0.8], "m9_with_null": [0.5, 0.6, 0.55, 0.52],
            "c2a_mean_ttft": [0.1] * 4, "k1_invariant": [0.0] * 4, "c1b_p99_e2e": [1.0] * 4})}
    finally:
        CHAPTERS["bidprice_routing"]["claims"].pop()
    assert rows["c1a_mean_e2e"]["seeds_beating_null"] == 3  # 1.05 does not beat 1.0
    assert rows["c1b_p99_e2e"]["seeds_beating_null"] == 0  # touching the null is no effect
    assert rows["m9_with_null"]["seeds_beating_null"] == 4 and rows["m9_with_null"]["direction_verdict"] == "holds"
    assert rows["m9_with_null"]["label"] is None  # only headlines are labelled
    assert rows["c2a_mean_ttft"]["seeds_beating_null"] is None and rows["c2a_mean_ttft"]["null"] is None
    assert rows["k1_invariant"]["verdict"] == "passes" and rows["k1_invariant"]["requires"] == []


def test_the_results_record_and_the_table_carry_what_readers_need(monkeypatch):
    import re
    import sys

    ledger = Ledger("me_dlm", "book", seeds=[1000, 1001], parameters={"steps": np.int64(5), "f": (1, 2)})
    ledger.record_all({s: {"p1_mdlm_learns_the_toy": 90.0, "p2_oracle_room": 20.0, "c2_edits_repair": 20.0,
                           "h1_edits_headline": 16.0 + i} for i, s in enumerate([1000, 1001])})
    record = ledger.results()
    assert record["slug"] == "me_dlm" and record["profile"] == "book" and record["seeds"] == [1000, 1001]
    assert record["parameters"] == {"steps": 5, "f": [1, 2]} and record["confirmatory"] is False
    assert record["interval_kind"].startswith("95% Student-t interval")
    assert set(record["runtime_s"]) == {"03_experiment"} and record["runtime_s"]["03_experiment"] >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", record["created"])
    versions = record["versions"]
    assert versions["python"] == ".".join(map(str, sys.version_info[:3])) and versions["numpy"] == np.__version__
    assert versions["platform"] and "cuda_device" not in versions
    assert [c["id"] for c in record["claims"]] == [c["id"] for c in CHAPTERS["me_dlm"]["claims"]]
    table = ledger.table()
    assert list(table.columns) == ["verdict", "role", "ours (mean ± sd)", "95% interval", "threshold",
                                   "seeds clearing", "null", "vs null", "label", "paper"]
    row = table.loc["h1_edits_headline"]
    assert row["verdict"] == "undecided (~4 seeds)" and row["ours (mean ± sd)"] == "16.5 ± 0.71"
    assert row["threshold"] == ">= 15.0" and row["seeds clearing"] == "2/2" and row["null"] == 0.0
    assert row["95% interval"] == "[10.1, 22.9]" and row["label"] == "undecided" and row["vs null"] == "holds"
    CHAPTERS["me_dlm"]["confirmatory_seeds"] = [1000, 1001, 1002, 1003, 1004]
    try:
        assert not Ledger("me_dlm", "book", seeds=[1000, 1001]).confirmatory
        assert Ledger("me_dlm", "book", seeds=[1004, 1003, 1002, 1001, 1000]).confirmatory
    finally:
        del CHAPTERS["me_dlm"]["confirmatory_seeds"]


def test_formatting_of_values_intervals_and_verdicts():
    assert format_value(NAN, NAN) == "n/a" and format_value(None, None) == "n/a"
    assert format_value(1234.5678, 0.01234) == "1.23e+03 ± 0.012"
    from replib.core.ledger import format_interval

    assert format_interval([0.12345, 6.789]) == "[0.123, 6.79]"
    assert format_interval([None, 1.0]) == "n/a" and format_interval([NAN, NAN]) == "n/a"
    assert format_verdict("undecided", None) == "undecided (no seed count at this spread)"
    assert format_verdict("holds", 7) == "holds" and format_verdict(None, None) == ""


def test_declarations_with_the_wrong_types_are_refused():
    good = _claim("a", "headline", "<=", 1)
    for key, bad in (("threshold", "0.85"), ("threshold", True), ("null", "one"), ("null", False)):
        with pytest.raises(ValueError, match=f"claim 'a': {key} must be a number"):
            validate_claims({"claims": [{**good, key: bad}]})
    with pytest.raises(ValueError, match="only preconditions have a kind"):
        validate_claims({"claims": [{**good, "kind": "competence"}]})
    with pytest.raises(ValueError, match="list of integers"):
        validate_seeds({"confirmatory_seeds": [1000, 1001, 1002, 1003, True]})
    with pytest.raises(ValueError, match="list of integers"):
        validate_seeds({"confirmatory_seeds": [1000, 1001, 1002, 1003, 1004.0]})


def test_the_versions_record_names_every_numeric_package_loaded():
    import platform

    import pandas
    import scipy
    import sklearn
    import torch
    import transformers

    import replib
    from replib.core.ledger import package_versions

    versions = package_versions()
    assert versions["platform"] == platform.platform(terse=True)
    for module in (replib, np, scipy, pandas, torch, transformers, sklearn):
        assert versions[module.__name__] == module.__version__
    assert versions["matplotlib"] == __import__("matplotlib").__version__


def test_the_versions_record_names_a_gpu_and_a_package_without_a_version(monkeypatch):
    import sys
    from types import SimpleNamespace

    from replib.core.ledger import package_versions

    cuda = SimpleNamespace(is_initialized=lambda: True, get_device_name=lambda: "NVIDIA H200")
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(__version__="9.9", cuda=cuda))
    monkeypatch.setitem(sys.modules, "sklearn", SimpleNamespace())
    versions = package_versions()
    assert versions["cuda_device"] == "NVIDIA H200" and versions["torch"] == "9.9"
    assert versions["sklearn"] == "unknown"


def test_runtime_is_the_time_since_the_ledger_started(monkeypatch):
    clock = iter([100.0, 112.3456])
    monkeypatch.setattr("replib.core.ledger.time.perf_counter", lambda: next(clock))
    ledger = Ledger("bidprice_routing", "book", seeds=[0])
    assert ledger.results()["runtime_s"] == {"03_experiment": 12.35}


def test_results_files_are_indented_and_read_back_as_written(tmp_path):
    path = write_json_atomic(tmp_path / "r.json", {"claims": [{"id": "c", "values": ["inf", "-inf", "odd", 1.0]},
                                                              {"id": "d"}]})
    assert path.read_text().startswith('{\n "claims": [\n  {\n   "id": "c"')
    claims = read_json(path)["claims"]
    assert claims[0]["values"] == [INF, -INF, "odd", 1.0] and claims[1]["values"] == []


def test_the_report_prints_one_line_per_claim_then_every_violated_check(capsys, monkeypatch):
    """Ledger.report: id, verdict, interval, declared bar (with the null only for a headline), statement;
    then one line naming every violated check, joined by '; '."""
    chapter = {"slug": "x", "claims": [
        _claim("h1", "headline", "<=", 0.85), _claim("m1", "mechanism", ">=", 0.5),
        _claim("k1", "check", "<=", 0.0), _claim("k2", "check", ">=", 1.0)]}
    monkeypatch.setattr("replib.core.ledger.load_chapter", lambda slug: chapter)
    ledger = Ledger("x", "book", seeds=[0, 1])
    ledger.record_all({0: {"h1": 0.5, "m1": 1.0, "k1": 0.0, "k2": 0.0}, 1: {"h1": 0.5, "m1": 1.0, "k1": 1.0, "k2": 2.0}})
    ledger.report()
    h1, m1, k1, k2, violated = capsys.readouterr().out.splitlines()
    assert h1 == (f"{'h1':<28} {'holds':<28} interval [0.5, 0.5] (declared <= 0.85; vs null 1.0: holds): "
                  "statement of h1")
    assert m1 == f"{'m1':<28} {'holds':<28} interval [1, 1] (declared >= 0.5): statement of m1"
    assert violated == ("VIOLATED CHECKS (the code is wrong somewhere): k1: violated (on 1 of 2 seeds); "
                        "k2: violated (on 1 of 2 seeds)")
