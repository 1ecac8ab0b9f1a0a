"""Unit tests of replib.core: profiles, configuration, seeding, the claims ledger, fingerprints."""

import json

import numpy as np
import pytest

from replib.core import Ledger, configure, resolve_profile, seed_everything
from replib.core.fingerprint import chapter_sources, fingerprint
from replib.core.ledger import validate_claims, verdict
from replib.core.paths import check_slug, load_chapter

DEFAULTS = {p: {"seeds": [0, 1, 2], "steps": 10, "lr": 0.1, "name": "x"} for p in ("smoke", "book", "paper")}


def test_profile_resolution(monkeypatch):
    monkeypatch.delenv("REPLIB_PROFILE", raising=False)
    assert resolve_profile() == "book"
    monkeypatch.setenv("REPLIB_PROFILE", "smoke")
    assert resolve_profile() == "smoke"
    assert resolve_profile("paper") == "paper"
    with pytest.raises(ValueError, match="valid profiles: smoke, book, paper"):
        resolve_profile("quick")
    monkeypatch.setenv("REPLIB_PROFILE", "fast")
    with pytest.raises(ValueError, match="unknown profile 'fast'"):
        resolve_profile()


def test_configure_overrides_and_refusals():
    cfg = configure(DEFAULTS, "book", steps=20, lr=1, seeds=None)
    assert (cfg.profile, cfg.steps, cfg.lr, cfg.seeds) == ("book", 20, 1.0, [0, 1, 2])
    assert isinstance(cfg.lr, float)
    with pytest.raises(ValueError, match="valid settings: lr, name, seeds, steps"):
        configure(DEFAULTS, "book", stepz=3)
    with pytest.raises(TypeError, match="'steps' expects int"):
        configure(DEFAULTS, "book", steps="many")
    with pytest.raises(TypeError):
        configure(DEFAULTS, "book", steps=True)


def test_seeding_is_deterministic():
    a = seed_everything(3).normal(size=5)
    b = seed_everything(3).normal(size=5)
    c = seed_everything(4).normal(size=5)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_verdicts():
    claim = {"id": "c", "direction": "<=", "threshold": 0.85}
    assert verdict(claim, [0.8, 0.84], "book") == "holds"
    assert verdict(claim, [0.8, 0.95], "book") == "fails"  # mean 0.875
    assert verdict(claim, [0.8, float("nan")], "book") == "fails"
    assert verdict(claim, [], "book") == "not judged (no value)"
    assert verdict(claim, [float("nan")], "book") == "not judged (no value)"
    assert verdict(claim, [float("inf"), 0.1], "book") == "fails"  # e.g. a target never reached
    assert verdict({"id": "g", "direction": ">=", "threshold": 1.5}, [float("inf")] * 2, "book") == "holds"
    assert verdict(claim, [0.1], "smoke") == "not judged (smoke profile)"
    assert verdict({**claim, "judged": False}, [0.1], "book") == "not judged (measurement)"
    assert verdict({**claim, "judged": False, "kind": "check"}, [0], "book") == "not judged (check)"
    assert verdict({"id": "g", "direction": ">=", "threshold": 0.03}, [0.05, 0.02], "book") == "holds"


def test_claim_declarations_are_validated():
    good = {"id": "a", "statement": "s", "paper": "p", "metric": "m", "direction": "<=", "threshold": 1}
    assert validate_claims({"claims": [good]}) == [good]
    with pytest.raises(ValueError, match="lacks threshold"):
        validate_claims({"claims": [{k: v for k, v in good.items() if k != "threshold"}]})
    with pytest.raises(ValueError, match="direction must be one of"):
        validate_claims({"claims": [{**good, "direction": "=<"}]})
    with pytest.raises(ValueError, match="declared twice"):
        validate_claims({"claims": [good, good]})


def test_unknown_chapter_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid chapters: .*bidprice_routing"):
        check_slug("bidprice")


def test_ledger_records_judges_and_saves(tmp_path, monkeypatch):
    monkeypatch.delenv("REPLIB_RESULTS_DIR", raising=False)
    ledger = Ledger("bidprice_routing", "book", seeds=[0, 1], parameters={"rate": np.float64(0.5)})
    ledger.record("c1a_mean_e2e", 0, 0.7)
    ledger.record("c1a_mean_e2e", 1, 0.8)
    with pytest.raises(ValueError, match="declared claims: c1a_mean_e2e"):
        ledger.record("c9", 0, 1.0)
    with pytest.raises(ValueError, match="not one of this run's seeds"):
        ledger.record("c1a_mean_e2e", 7, 1.0)
    rows = {r["id"]: r for r in ledger.judged()}
    assert rows["c1a_mean_e2e"]["verdict"] == "holds"
    assert rows["c1a_mean_e2e"]["mean"] == pytest.approx(0.75)
    assert rows["c2a_mean_ttft"]["verdict"] == "not judged (no value)"
    assert ledger.save() is None  # no results directory asked for: nothing written
    path = ledger.save(tmp_path)
    data = json.loads(path.read_text())
    assert data["profile"] == "book" and data["seeds"] == [0, 1] and data["parameters"] == {"rate": 0.5}
    assert data["fingerprint"] == fingerprint("bidprice_routing")
    assert not list(tmp_path.glob("*.tmp"))
    assert "ours (mean ± sd)" in ledger.table().columns


def test_fingerprint_covers_notebooks_and_imported_lib_modules():
    names = {p.name for p in chapter_sources("bidprice_routing")}
    assert {"chapter.yml", "03_experiment.py", "bidprice_routing.py", "ledger.py", "__init__.py"} <= names
    assert "cli.py" not in names  # not imported by the chapter's notebooks


def test_chapter_declarations_load():
    chapter = load_chapter("bidprice_routing")
    assert chapter["slug"] == "bidprice_routing" and len(chapter["claims"]) >= 4


def test_grade_accepts_matches_and_names_the_first_wrong_case(capsys):
    from replib.core.exercises import grade

    grade(lambda x: x * 2, lambda x: x + x, [(1,), (np.arange(3),)])
    assert "correct" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"expected 4"):
        grade(lambda x: x * 3, lambda x: x + x, [(0,), (2,)])
    with pytest.raises(AssertionError, match="not written yet"):
        grade(lambda x: (_ for _ in ()).throw(NotImplementedError), lambda x: x, [(1,)])


def test_compute_threads_sets_and_restores():
    import torch

    from replib.core.runtime import compute_threads

    before = torch.get_num_threads()
    with compute_threads(1):
        assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
    assert torch.get_num_threads() == before


def test_ledger_records_all_and_reports(capsys):
    ledger = Ledger("bidprice_routing", "book", seeds=[0, 1])
    ledger.record_all({0: {"c1a_mean_e2e": 0.7}, 1: {"c1a_mean_e2e": 0.9}})
    ledger.report()
    out = capsys.readouterr().out.splitlines()
    line = next(text for text in out if text.startswith("c1a_mean_e2e"))
    assert "holds" in line and "mean 0.8" in line and "<= 0.85" in line
