"""Edge cases of the results layer that the committed files never exercise: corrupt and foreign
results files, how stored summaries are compared with re-derived ones, margins at a zero threshold,
mixed headline labels, and the messages of a claim set that no longer matches its declaration."""

import json
import math

import pytest

from replib.core import results
from replib.core.results import (
    ResultsError,
    _same,
    committed_results,
    headline_verdict,
    margin,
    read_results,
)


def _write(path, text):
    path.write_text(text)
    return path


def test_a_corrupt_or_foreign_results_file_is_named_with_its_fault(tmp_path):
    with pytest.raises(ResultsError, match=r"bad\.json: not a readable results file \("):
        read_results(_write(tmp_path / "bad.json", "{not json"))
    with pytest.raises(ResultsError, match=r"list\.json: not a results file \(lacks everything\)$"):
        read_results(_write(tmp_path / "list.json", "[1, 2]"))
    with pytest.raises(ResultsError, match=r"part\.json: not a results file \(lacks claims, fingerprint\)$"):
        read_results(_write(tmp_path / "part.json", json.dumps({"slug": "x", "profile": "book", "seeds": [0]})))


def test_unreadable_files_are_skipped_only_when_asked(tmp_path, monkeypatch):
    whole = {"slug": "z", "profile": "book", "seeds": [0], "claims": [], "fingerprint": None}
    _write(tmp_path / "a.json", "{not json")           # sorts first: a skip must go on to the next file
    _write(tmp_path / "z.json", json.dumps(whole))
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    assert committed_results(skip_unreadable=True) == {"z": whole}
    with pytest.raises(ResultsError, match="a.json"):
        committed_results()


def test_stored_and_rederived_summaries_compare_with_a_tolerance_and_nan_as_missing():
    assert _same([1.0, None], [1.0, math.nan]) and _same(None, math.nan) and _same(math.nan, None)
    assert not _same([1.0], [1.0, 2.0]) and not _same([1.0, 2.0], [1.0, 3.0])
    assert not _same(None, 1.0) and not _same(1.0, None) and not _same(math.nan, 1.0) and not _same(1.0, math.nan)
    assert _same(math.nan, math.nan) and _same(1.0, 1.0 + 1e-10) and not _same(1.0, 1.0 + 1e-6)
    assert _same(0.0, 1e-13) and not _same(0.0, 1e-9) and _same(2, 2.0)
    assert not _same("<missing>", 1.0) and not _same(1.0, "1.0")
    assert _same("holds", "holds") and not _same("holds", "fails") and not _same("ab", ["a", "b"])


def test_margin_scales_by_the_threshold_or_by_the_largest_finite_value():
    claim = {"direction": ">=", "threshold": 0.5, "values": [9.0]}
    assert margin(claim, 0.75) == pytest.approx(0.5) and math.isnan(margin(claim, None))
    assert margin({**claim, "direction": "<"}, 0.75) == pytest.approx(-0.5)
    zero = {"direction": ">", "threshold": 0.0, "values": [2.0, -4.0, None, math.inf]}
    assert margin(zero, 1.0) == pytest.approx(0.25)              # the largest finite |value| is 4
    assert margin({**zero, "values": [None, math.inf]}, 3.0) == 3.0  # nothing finite: unit scale
    assert margin({**zero, "values": [0.0]}, 3.0) == 3.0             # all zero: unit scale


def test_mixed_headline_labels_without_a_judged_one_read_inconclusive():
    claims = [{"role": "headline", "label": "inconclusive"}, {"role": "headline", "label": "no room"}]
    assert headline_verdict(claims) == "inconclusive"


def _chapter(monkeypatch, tmp_path, stored_ids, declared_ids):
    """One chapter 'x' whose results store ``stored_ids`` while chapter.yml declares ``declared_ids``."""
    claim = {"role": "measurement", "statement": "s", "paper": "p", "metric": "m", "direction": ">=",
             "threshold": 0.0}
    record = {"slug": "x", "profile": "book", "seeds": [0], "fingerprint": None,
              "claims": [{"id": cid, "values": [1.0]} for cid in stored_ids]}
    _write(tmp_path / "x.json", json.dumps(record))
    _write(tmp_path / "y.json", json.dumps({**record, "slug": "y"}))
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    monkeypatch.setattr(results, "chapter_slugs", lambda: ["x", "y"])
    monkeypatch.setattr(results, "load_chapter", lambda slug: {"claims": [{**claim, "id": c} for c in declared_ids]})
    return record


def test_a_renamed_claim_is_named_for_every_chapter_it_breaks(monkeypatch, tmp_path):
    _write(tmp_path / "0.json", "{not json")   # unreadable: listed elsewhere, never stops this check
    _chapter(monkeypatch, tmp_path, ["m_old", "m2"], ["m_new", "m2"])
    message = ("the declared claims (m_new, m2) are not the stored ones (m_old, m2): a new or renamed "
               "claim needs a new run")
    assert results.inconsistent_results() == [
        f"x.json: its claims cannot be judged again (ValueError: x: {message})",
        f"y.json: its claims cannot be judged again (ValueError: y: {message})"]


def test_a_stored_field_that_the_values_do_not_give_is_named(monkeypatch, tmp_path):
    record = _chapter(monkeypatch, tmp_path, ["m1"], ["m1"])
    fresh = results.rejudged("x", record)["claims"][0]
    edited = {k: v for k, v in fresh.items() if k != "mean"}   # the mean dropped: compared with '<missing>'
    _write(tmp_path / "x.json", json.dumps({**record, "claims": [edited]}))
    _write(tmp_path / "y.json", json.dumps({**record, "slug": "y", "claims": [fresh]}))   # consistent
    (line,) = results.inconsistent_results()
    assert line == "x.json: m1 stores mean that do not follow from its values and declaration (re-judge: replib rejudge x)"


def test_unreadable_and_unconfirmed_results_are_listed_by_name(monkeypatch, tmp_path):
    """`replib check`'s two notices: a file that cannot be read, and results on development seeds."""
    base = {"profile": "book", "seeds": [0, 1], "claims": [], "fingerprint": None}
    _write(tmp_path / "a.json", "{not json")
    _write(tmp_path / "b.json", json.dumps({**base, "slug": "b"}))                        # development seeds
    _write(tmp_path / "c.json", json.dumps({**base, "slug": "c", "confirmatory": True}))
    _write(tmp_path / "d.json", json.dumps({**base, "slug": "d"}))                        # not a chapter
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    monkeypatch.setattr(results, "chapter_slugs", lambda: ["b", "c"])
    monkeypatch.setattr(results, "load_chapter", lambda slug: {"confirmatory_seeds": [1000, 1001]})
    (line,) = results.unreadable_results()
    assert line.startswith(f"{tmp_path / 'a.json'}: not a readable results file (")
    assert results.unconfirmed_results() == [
        "b.json: seeds 0, 1 are development seeds; the confirmatory run on [1000, 1001] is pending"]
