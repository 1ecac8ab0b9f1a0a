"""Committed results: book profile with its own parameters, declared claims only, verdicts that follow
from the stored per-seed values, sources unchanged, scoreboard regenerated."""

import importlib
import math
from pathlib import Path

import pytest

from replib.core.ledger import Ledger, _jsonable, clears, summarise, validate_claims
from replib.core.paths import chapter_slugs, load_chapter
from replib.core.results import (
    FIGURE,
    committed_results,
    headline_verdict,
    intro_markdown,
    scoreboard_markdown,
    stale_results,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = committed_results()


def test_every_chapter_has_results_and_a_judged_headline():
    assert sorted(RESULTS) == chapter_slugs()
    for slug in chapter_slugs():
        assert any(c["role"] == "headline" for c in validate_claims(load_chapter(slug))), slug


@pytest.mark.parametrize("slug", sorted(RESULTS))
def test_results_are_book_profile_and_match_the_declared_claims(slug):
    results = RESULTS[slug]
    assert results["profile"] == "book"
    declared = load_chapter(slug)["claims"]
    assert [c["id"] for c in results["claims"]] == [c["id"] for c in declared]
    for claim, spec in zip(results["claims"], declared):
        assert (claim["role"], claim["direction"], claim["threshold"]) == (
            spec["role"], spec["direction"], spec["threshold"])
        assert claim["requires"] == spec.get("requires", [])
        assert len(claim["values"]) == len(results["seeds"])
    assert set(results["runtime_s"]) == {"01_theory", "02_implementation", "03_experiment"}


@pytest.mark.parametrize("slug", sorted(RESULTS))
def test_stored_parameters_are_the_book_profiles(slug):
    """No committed result comes from a run with a -p override or other seeds."""
    experiment = importlib.import_module(f"replib.papers.{slug}.experiment")
    book = _jsonable(experiment.EXPERIMENT_PROFILES["book"])
    assert RESULTS[slug]["parameters"] == {"profile": "book", **book}
    assert RESULTS[slug]["seeds"] == book["seeds"]


@pytest.mark.parametrize("slug", sorted(RESULTS))
def test_stored_verdicts_follow_from_the_stored_values(slug):
    """Recompute every claim's mean, seeds clearing and verdict from its per-seed values."""
    results = RESULTS[slug]
    ledger = Ledger(slug, "book", results["seeds"])
    for claim in results["claims"]:
        for seed, value in zip(results["seeds"], claim["values"]):
            if value is not None:
                ledger.record(claim["id"], seed, value)
    for stored, again in zip(results["claims"], ledger.judged()):
        assert stored["verdict"] == again["verdict"], stored["id"]
        assert stored["seeds_clearing"] == sum(clears(stored, v) for v in stored["values"])
        mean, _ = summarise(stored["values"])
        stored_mean = math.nan if stored["mean"] is None else stored["mean"]
        assert stored_mean == pytest.approx(mean, nan_ok=True), stored["id"]


def test_results_match_their_sources():
    assert stale_results() == []


def test_scoreboard_is_regenerated():
    assert (ROOT / "book" / "scoreboard.md").read_text() == scoreboard_markdown(), "run `replib scoreboard`"
    intro = (ROOT / "book" / "intro.md").read_text()
    assert intro == intro_markdown(intro), "the intro's chapter list is stale: run `replib scoreboard`"
    assert (ROOT / "book" / FIGURE).is_file()


def test_headline_verdict_rules():
    def claims(*verdicts):
        return [{"role": "headline", "verdict": v} for v in verdicts] + [{"role": "mechanism", "verdict": "fails"}]

    assert headline_verdict(claims("holds", "holds")) == "reproduced"
    assert headline_verdict(claims("holds", "fails")) == "partly"
    assert headline_verdict(claims("fragile", "fails")) == "partly"
    assert headline_verdict(claims("fails", "inconclusive (precondition p1 did not hold)")) == "inconclusive"
    assert headline_verdict(claims("fails", "fails")) == "not reproduced"


def test_smoke_values_check_names_judged_claims_without_a_value(tmp_path):
    from replib.core.ledger import write_json_atomic
    from replib.core.results import missing_smoke_values

    for slug in chapter_slugs():
        claims = [{**c, "values": [1.0]} for c in load_chapter(slug)["claims"]]
        if slug == "bidprice_routing":
            claims[0]["values"] = [float("nan")]  # a judged headline claim with no value
            claims[3]["values"] = [None]  # c2b, a check: not judged, so not required
        if slug == "me_dlm":
            next(c for c in claims if c["id"] == "c4_minimal_edits")["values"] = [float("nan")]  # a listed gap
        write_json_atomic(tmp_path / f"{slug}.json", {"slug": slug, "profile": "smoke", "seeds": [0],
                                                       "claims": claims, "fingerprint": None})
    (tmp_path / "foam.json").unlink()
    problems = missing_smoke_values(tmp_path)
    assert problems == ["bidprice_routing: c1a_mean_e2e has no value on some seed (add what it needs to the "
                        "smoke profile, or list it under smoke_gaps with the reason)",
                        "foam: the smoke run wrote no foam.json"]
