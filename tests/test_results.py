"""Committed results: book profile with its own parameters, declared claims only, verdicts that follow
from the stored per-seed values, sources unchanged, scoreboard regenerated."""

import importlib
import math
from pathlib import Path

import numpy as np
import pytest

from replib.core.ledger import Ledger, _jsonable, clears, validate_claims
from replib.core.paths import chapter_slugs, load_chapter
from replib.core.results import (
    FIGURE,
    committed_results,
    headline_verdict,
    inconsistent_results,
    intro_markdown,
    margin,
    readme_markdown,
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
    """Recompute every claim's mean, sd, interval, seeds clearing and verdicts from its per-seed values
    (independently of the ledger's own summaries: numpy and scipy here)."""
    from scipy import stats

    results = RESULTS[slug]
    ledger = Ledger(slug, "book", results["seeds"])
    for claim in results["claims"]:
        for seed, value in zip(results["seeds"], claim["values"]):
            if value is not None:
                ledger.record(claim["id"], seed, value)
    for stored, again in zip(results["claims"], ledger.judged()):
        for key in ("verdict", "direction_verdict", "label", "seeds_needed", "direction_seeds_needed"):
            assert stored[key] == again[key], (stored["id"], key)
        assert stored["seeds_clearing"] == sum(clears(stored, v) for v in stored["values"])
        values = np.array(stored["values"], dtype=float)
        n = len(values)
        assert stored["mean"] == pytest.approx(values.mean()), stored["id"]
        assert stored["sd"] == pytest.approx(values.std(ddof=1)), stored["id"]
        half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n)
        assert stored["interval"] == pytest.approx([values.mean() - half, values.mean() + half]), stored["id"]


def test_committed_results_are_consistent_and_no_check_is_violated():
    assert inconsistent_results() == []


def test_a_consistent_hand_edit_of_a_verdict_is_caught(monkeypatch):
    """Editing a stored verdict (or dropping it) without the values to back it is named by check."""
    slug = "foam"
    data = RESULTS[slug]
    edited = {**data, "claims": [{**c, "verdict": "holds"} if i == 0 else
                                 {k: v for k, v in c.items() if k != "label"} if i == 1 else c
                                 for i, c in enumerate(data["claims"])]}
    monkeypatch.setattr("replib.core.results.committed_results", lambda **_: {slug: edited})
    problems = inconsistent_results()
    if data["claims"][0]["verdict"] != "holds":
        assert any(data["claims"][0]["id"] in p and "verdict" in p for p in problems)
    assert any(data["claims"][1]["id"] in p and "label" in p for p in problems)


def test_results_match_their_sources():
    assert stale_results() == []


def test_scoreboard_is_regenerated():
    assert (ROOT / "book" / "scoreboard.md").read_text() == scoreboard_markdown(), "run `replib scoreboard`"
    intro = (ROOT / "book" / "intro.md").read_text()
    assert intro == intro_markdown(intro), "the intro's chapter list is stale: run `replib scoreboard`"
    readme = (ROOT / "README.md").read_text()
    assert readme == readme_markdown(readme), "the README's chapter list is stale: run `replib scoreboard`"


@pytest.mark.parametrize("slug", sorted(RESULTS))
def test_each_experiment_opens_with_its_generated_verdict_box(slug):
    """The verdict box (first markdown after the title) and the reproducibility summary follow from the
    committed results, so that the page and the scoreboard cannot disagree."""
    import jupytext

    from replib.core.report import expected_notebook_text

    path = ROOT / "notebooks" / slug / "03_experiment.py"
    assert path.read_text() == expected_notebook_text(slug, RESULTS[slug]), "run `replib scoreboard`"
    cells = jupytext.read(path).cells
    assert cells[1].cell_type == "markdown" and "verdict box: generated" in cells[1].source
    assert f"headline is **{headline_verdict(RESULTS[slug]['claims'])}**" in cells[1].source
    summary = [c for c in cells if "## Reproducibility summary" in c.source]
    assert len(summary) == 1 and summary[0].cell_type == "markdown"
    assert summary[0].source.startswith("## Reproducibility summary")
    assert cells[cells.index(summary[0]) + 1].source.startswith("## Summary")


def test_the_fingerprint_skips_generated_blocks_only(tmp_path):
    from replib.core.fingerprint import GENERATED_BLOCKS, _text

    start, end = GENERATED_BLOCKS["verdict"]
    path = tmp_path / "03_experiment.py"
    path.write_text(f"# %% [markdown]\n# {start}\n# old verdict\n# {end}\nx = 1\n")
    before = _text(path)
    path.write_text(f"# %% [markdown]\n# {start}\n# new verdict, two lines\n# more\n# {end}\nx = 1\n")
    assert _text(path) == before
    path.write_text(f"# %% [markdown]\n# {start}\n# new verdict\n# {end}\nx = 2\n")
    assert _text(path) != before
    assert (ROOT / "book" / FIGURE).is_file()


def test_headline_verdict_rules():
    def claims(*labels):
        return [{"role": "headline", "label": v} for v in labels] + [{"role": "mechanism", "label": None}]

    assert headline_verdict(claims("reproduced", "reproduced")) == "reproduced"
    assert headline_verdict(claims("reproduced", "not reproduced")) == "partly"
    assert headline_verdict(claims("reproduced", "inconclusive")) == "partly"
    assert headline_verdict(claims("direction only", "not reproduced")) == "direction only"
    assert headline_verdict(claims("direction only", "direction only")) == "direction only"
    assert headline_verdict(claims("undecided", "not reproduced")) == "undecided"
    assert headline_verdict(claims("not reproduced", "inconclusive")) == "not reproduced"
    assert headline_verdict(claims("inconclusive", "inconclusive")) == "inconclusive"
    assert headline_verdict(claims("not reproduced")) == "not reproduced"
    assert headline_verdict([{"role": "mechanism", "label": None}]) == "no headline claim"
    assert headline_verdict(claims(None)) == "not judged"


def test_every_chapter_declares_fresh_confirmatory_seeds():
    from replib.core.ledger import validate_seeds

    for slug in chapter_slugs():
        assert len(validate_seeds(load_chapter(slug))) >= 5, slug


def test_margin_signs():
    ge, le = {"direction": ">=", "threshold": 2.0, "values": []}, {"direction": "<=", "threshold": 2.0, "values": []}
    assert margin(ge, 3.0) == pytest.approx(0.5) and margin(ge, 1.0) == pytest.approx(-0.5)
    assert margin(le, 3.0) == pytest.approx(-0.5) and margin(le, 1.0) == pytest.approx(0.5)
    assert margin({**ge, "direction": ">"}, 3.0) > 0 and margin({**le, "direction": "<"}, 3.0) < 0
    zero = {"direction": ">=", "threshold": 0.0, "values": [-4.0, 2.0]}
    assert margin(zero, 2.0) == pytest.approx(0.5)  # scaled by the largest |value|
    assert math.isnan(margin(ge, None))


def test_smoke_values_check_names_judged_claims_without_a_value(tmp_path):
    from replib.core.ledger import write_json_atomic
    from replib.core.results import missing_smoke_values

    for slug in chapter_slugs():
        claims = [{**c, "values": [1.0]} for c in load_chapter(slug)["claims"]]
        if slug == "bidprice_routing":
            by_id = {c["id"]: c for c in claims}
            by_id["c6_throughput"]["values"] = [float("nan")]  # a judged headline claim with no value
            by_id["c2b_preemptions"]["values"] = [None]  # a check: not judged, so not required
        if slug == "me_dlm":
            next(c for c in claims if c["id"] == "c4_minimal_edits")["values"] = [float("nan")]  # a listed gap
        write_json_atomic(tmp_path / f"{slug}.json", {"slug": slug, "profile": "smoke", "seeds": [0],
                                                       "claims": claims, "fingerprint": None})
    (tmp_path / "foam.json").unlink()
    problems = missing_smoke_values(tmp_path)
    assert problems == ["bidprice_routing: c6_throughput has no value on some seed (add what it needs to the "
                        "smoke profile, or list it under smoke_gaps with the reason)",
                        "foam: the smoke run wrote no foam.json"]


def test_the_chapter_template_is_valid():
    """tools/chapter_template.yml, the starting point of every chapter.yml, follows the ledger's rules:
    every role and precondition kind shown, a headline with its null, confirmatory seeds."""
    import yaml

    from replib.core.ledger import PRECONDITION_KINDS, ROLES, validate_seeds

    template = yaml.safe_load((ROOT / "tools" / "chapter_template.yml").read_text())
    claims = validate_claims(template)
    assert {c["role"] for c in claims} == set(ROLES)
    assert {c["kind"] for c in claims if c["role"] == "precondition"} == set(PRECONDITION_KINDS)
    assert validate_seeds(template) == [1000, 1001, 1002, 1003, 1004]
    assert template["history"] and template["tuning"]["grid"]


def test_fingerprints_see_any_text_and_per_file_hashes_see_code_only(tmp_path):
    from replib.core.fingerprint import code_text

    notebook = tmp_path / "notebooks" / "x" / "03_experiment.py"
    notebook.parent.mkdir(parents=True)
    notebook.write_text("# %%\nx = 1\n\n# %% [markdown]\n# Prose $\\alpha$\n\n# %%\ny = 2  # a comment\n")
    assert code_text(notebook) == b"# %%\nx = 1\n\n# %%\ny = 2  # a comment\n"
    notebook.write_text("# %%\n# Colab set-up: installs replib\nimport sys\n\n# %%\nx = 1\n")
    assert code_text(notebook) == b"# %%\nx = 1\n"  # the generated Colab cell does nothing outside Colab
    module = tmp_path / "method.py"
    module.write_text('"""Module docstring."""\n\n\ndef f(x):\n    """Eq. (3)."""\n    return x + 1  # a comment\n')
    before = code_text(module)
    module.write_text('"""Reworded."""\n\n\ndef f(x):\n    """Eq. (3), in other words."""\n    return x + 1\n')
    assert code_text(module) == before  # docstrings and comments are prose
    module.write_text('"""Reworded."""\n\n\ndef f(x):\n    """Eq. (3)."""\n    return x - 1\n')
    assert code_text(module) != before  # a changed sign is code
    module.write_text('def f(x):\n    """Only a docstring."""\n')
    assert b"Pass" in code_text(module)
    other = tmp_path / "chapter.yml"
    other.write_text("claims: []  # kept whole\n")
    assert code_text(other) == other.read_bytes()


def _one_committed(monkeypatch, tmp_path, slug="sgb_ib"):
    import shutil

    shutil.copy(ROOT / "data" / "results" / f"{slug}.json", tmp_path / f"{slug}.json")
    monkeypatch.setattr("replib.core.results.results_dir", lambda: tmp_path)
    return slug


def test_stale_results_tell_prose_from_code(monkeypatch, tmp_path):
    from replib.core.results import rejudge_committed, source_hashes

    slug = _one_committed(monkeypatch, tmp_path)
    monkeypatch.setattr("replib.core.results.fingerprint", lambda s: "the text changed")
    (line,) = stale_results()
    assert "only prose, declarations or the judging code changed" in line and f"replib rejudge {slug}" in line
    assert rejudge_committed(slug).is_file()  # allowed: nothing that measures changed

    hashes = source_hashes(slug)
    code = f"lib/replib/papers/{slug}/method.py"
    monkeypatch.setattr("replib.core.results.source_hashes", lambda s: {**hashes, code: "edited"})
    monkeypatch.setattr("replib.core.results.fingerprint", lambda s: "the code changed too")
    (line,) = stale_results()
    assert f"sources changed since it was produced ({code}; re-run: replib run {slug}" in line
    with pytest.raises(ValueError, match=f"{code} changed since the values were measured"):
        rejudge_committed(slug)


def test_rejudge_keeps_the_values_and_records_that_it_judged_again(monkeypatch, tmp_path):
    from replib.core.ledger import read_json
    from replib.core.results import rejudge_committed

    slug = _one_committed(monkeypatch, tmp_path)
    before = read_json(tmp_path / f"{slug}.json")
    after = read_json(rejudge_committed(slug))
    assert [c["values"] for c in after["claims"]] == [c["values"] for c in before["claims"]]
    assert after["created"] == before["created"] and after["rejudged"]["values_created"] == before["rejudged"]["values_created"]


def test_smoke_gaps_cover_preconditions_too(tmp_path, monkeypatch):
    """A precondition without a value at smoke is flagged like any judged claim, unless listed as a gap."""
    from replib.core.ledger import write_json_atomic
    from replib.core.results import missing_smoke_values

    chapter = {"claims": [{"id": "p1", "role": "precondition"}, {"id": "m1", "role": "measurement"}]}
    monkeypatch.setattr("replib.core.results.chapter_slugs", lambda: ["x"])
    monkeypatch.setattr("replib.core.results.load_chapter", lambda slug: chapter)
    claims = [{"id": "p1", "role": "precondition", "values": [None]},
              {"id": "m1", "role": "measurement", "values": [None]}]
    write_json_atomic(tmp_path / "x.json", {"slug": "x", "profile": "smoke", "seeds": [0], "claims": claims,
                                            "fingerprint": None})
    assert missing_smoke_values(tmp_path) == ["x: p1 has no value on some seed (add what it needs to the smoke "
                                              "profile, or list it under smoke_gaps with the reason)"]
    chapter["smoke_gaps"] = {"p1": "needs the book profile's training"}
    assert missing_smoke_values(tmp_path) == []


def test_a_fingerprint_follows_text_not_how_a_path_is_written(monkeypatch, tmp_path):
    from replib.core import fingerprint as fp

    sources = fp.chapter_sources("sgb_ib")
    before = fp.fingerprint("sgb_ib")
    # the same files reached through a detour ("lib/../lib/...") hash the same
    detour = [p.parent / ".." / p.parent.name / p.name for p in sources]
    monkeypatch.setattr(fp, "chapter_sources", lambda slug: [p.resolve() for p in detour])
    assert fp.fingerprint("sgb_ib") == before
    # a change of one source's text changes it
    copy = tmp_path / "chapter.yml"
    copy.write_text(sources[0].read_text() + "# a comment\n")
    root = fp.require_repo_root()
    monkeypatch.setattr(fp, "require_repo_root", lambda: tmp_path)
    monkeypatch.setattr(fp, "chapter_sources", lambda slug: [copy])
    changed = fp.fingerprint("sgb_ib")
    copy.write_text(sources[0].read_text())
    assert fp.fingerprint("sgb_ib") != changed and root.is_dir()
