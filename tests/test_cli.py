"""The `replib` command refuses bad requests before anything runs (exit 2, naming valid choices)."""

import json

import pytest

from replib.cli import UsageError, main, parse_assignments, plan_run
from replib.core.fingerprint import NOTEBOOKS


def test_parse_assignments():
    assert parse_assignments(["steps=5000", "rate=0.5", "seeds=[1, 2]", "name=olp"]) == {
        "steps": 5000, "rate": 0.5, "seeds": [1, 2], "name": "olp"}
    with pytest.raises(UsageError):
        parse_assignments(["steps"])


@pytest.mark.parametrize("argv, message", [
    (["run", "nochapter"], "valid chapters: "),
    (["run", "bidprice_routing", "--profile", "quick"], "valid profiles: smoke, book, paper"),
    (["run", "bidprice_routing", "-p", "stepz=3"], "valid parameters: "),
    (["run", "bidprice_routing", "--profile", "smoke", "--update-results"], "use --profile book"),
    (["run", "bidprice_routing", "-p", "arrival_steps=abc"], "setting 'arrival_steps' expects int like"),
    (["run", "bidprice_routing", "-p", "arrival_steps=2.5"], "setting 'arrival_steps' expects int like"),
    (["run", "bidprice_routing", "--seeds", "1", "1"], "--seeds names a seed twice: 1 1"),
    (["run", "bidprice_routing", "-p", "arrival_steps=-5"], "setting 'arrival_steps' got -5; allowed: >= 1"),
    (["run", "foam", "-p", "configs=[foam, fomo]"], "setting 'configs' got ['foam', 'fomo']; allowed: names"),
    (["run", "bidprice_routing", "--seeds", "-1"], "setting 'seeds' got [-1]; allowed: >= 0"),
    (["run", "bidprice_routing", "--seeds", "0", "1", "2", "3", "4", "--update-results"],
     "--update-results commits confirmatory results: run the seeds declared in chapter.yml (--seeds 1000"),
])
def test_run_refuses_before_running(argv, message, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_plan_injects_profile_and_seeds():
    params = plan_run("bidprice_routing", "smoke", [5, 6], {})
    assert params == {"profile": "smoke", "seeds": [5, 6]}


def test_list_and_check_report_chapters_and_verdicts(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "bidprice_routing:" in out and "c1a_mean_e2e" in out
    assert main(["check"]) == 0
    assert "every results file matches its sources, and its verdicts follow from its values" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["run", "bidprice_routing", "--jobs", "0"], "--jobs must be at least 1"),
    (["run"], "name at least one chapter, or --all; valid chapters: "),
    (["student", "nochapter"], "valid chapters: "),
    (["rejudge", "nochapter"], "valid chapters: "),
    (["rejudge"], "name at least one chapter, or --all"),
    (["run", "bidprice_routing", "-p", "seeds"], "-p expects NAME=VALUE"),
])
def test_bad_requests_exit_2_naming_the_valid_choices(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_check_sees_stale_results_and_exits_1(monkeypatch, capsys):
    monkeypatch.setattr("replib.core.results.fingerprint", lambda slug: "a source changed")
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert "bidprice_routing.json: sources changed since it was produced" in out
    assert "replib run bidprice_routing --profile book --update-results" in out


def test_run_executes_a_chapter_end_to_end(tmp_path, capsys):
    """The fastest chapter at smoke: three executed notebooks, a results file with every notebook's
    runtime, and the claims table on stdout."""
    assert main(["run", "mwcp_pruning", "--profile", "smoke", "--out", str(tmp_path)]) == 0
    out_dir = tmp_path / "mwcp_pruning"
    assert sorted(p.name for p in out_dir.glob("*.ipynb")) == [f"{s}.ipynb" for s in NOTEBOOKS]
    results = json.loads((out_dir / "mwcp_pruning.json").read_text())
    assert results["profile"] == "smoke" and set(results["runtime_s"]) == set(NOTEBOOKS)
    assert all(c["verdict"].startswith("not judged") for c in results["claims"])
    table = capsys.readouterr().out
    assert "mwcp_pruning (profile smoke" in table and "c1a_beats_random_30" in table


def _fake_results(slug, profile):
    return {"slug": slug, "profile": profile, "seeds": [0], "claims": [], "fingerprint": "f",
            "runtime_s": {s: 1.0 for s in NOTEBOOKS}}


def test_update_results_and_jobs_write_atomically(tmp_path, monkeypatch, capsys):
    written = tmp_path / "results"
    monkeypatch.setattr("replib.cli.run_chapter", lambda slug, profile, *a, **k: _fake_results(slug, profile))
    monkeypatch.setattr("replib.core.results.results_dir", lambda: written)
    monkeypatch.setattr("replib.core.results.write_scoreboard", lambda: tmp_path / "scoreboard.md")
    argv = ["run", "foam", "prefixrl", "--profile", "book", "--update-results", "--out", str(tmp_path / "o"),
            "--seeds", "1000", "1001", "1002", "1003", "1004"]
    assert main(argv) == 0
    assert sorted(p.name for p in written.iterdir()) == ["foam.json", "prefixrl.json"]
    assert json.loads((written / "foam.json").read_text())["slug"] == "foam"
    assert "updated data/results/" in capsys.readouterr().out


def test_a_violated_check_fails_the_run_on_its_last_line(tmp_path, monkeypatch, capsys):
    check = {"id": "k1", "role": "check", "verdict": "violated (on 1 of 2 seeds)", "values": [0.0, 1.0],
             "mean": 0.5, "sd": 0.7, "interval": [float("nan")] * 2, "direction": "<=", "threshold": 0.0,
             "seeds_clearing": 1}
    monkeypatch.setattr("replib.cli.run_chapter",
                        lambda slug, profile, *a, **k: {**_fake_results(slug, profile), "claims": [check]})
    assert main(["run", "foam", "--profile", "book", "--out", str(tmp_path)]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("VIOLATED CHECKS") and "foam: check k1: violated (on 1 of 2 seeds)" in last


def test_jobs_run_chapters_in_parallel_and_report_each_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("replib.cli.run_chapter", _run_or_fail)
    argv = ["run", "foam", "prefixrl", "--profile", "smoke", "--jobs", "2", "--out", str(tmp_path)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "foam (profile smoke" in captured.out and "prefixrl: FAILED: boom" in captured.err


def _run_or_fail(slug, profile, params, out, on_notebook=None):
    if slug == "prefixrl":
        raise RuntimeError("boom")
    return _fake_results(slug, profile)


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("not a folder")
    assert main(["run", "bidprice_routing", "--out", str(target)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert target.read_text() == "not a folder"


def test_params_prints_each_parameter_with_its_type_default_and_meaning(capsys):
    assert main(["params", "foam", "--profile", "smoke"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["parameter", "type", "default", "(smoke)", "allowed"]
    steps = next(line for line in lines if line.startswith("steps "))
    assert steps.split()[:5] == ["steps", "int", "60", ">=", "1"] and "training steps" in steps
    assert main(["params", "foam", "--profile", "quick"]) == 2
    assert "valid profiles: smoke, book, paper" in capsys.readouterr().err
