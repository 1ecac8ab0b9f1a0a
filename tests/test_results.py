"""Committed results: book profile, declared claims only, sources unchanged, scoreboard regenerated."""

from pathlib import Path

import pytest

from replib.core.paths import load_chapter
from replib.core.results import committed_results, scoreboard_markdown, stale_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = committed_results()


@pytest.mark.parametrize("slug", sorted(RESULTS))
def test_results_are_book_profile_and_match_the_declared_claims(slug):
    results = RESULTS[slug]
    assert results["profile"] == "book"
    declared = [c["id"] for c in load_chapter(slug)["claims"]]
    assert [c["id"] for c in results["claims"]] == declared
    for claim, spec in zip(results["claims"], load_chapter(slug)["claims"]):
        assert (claim["direction"], claim["threshold"]) == (spec["direction"], spec["threshold"])
        assert len(claim["values"]) == len(results["seeds"])
    assert set(results["runtime_s"]) == {"01_theory", "02_implementation", "03_experiment"}


def test_results_match_their_sources():
    assert stale_results() == []


def test_scoreboard_is_regenerated():
    assert (ROOT / "book" / "scoreboard.md").read_text() == scoreboard_markdown(), "run `replib scoreboard`"
