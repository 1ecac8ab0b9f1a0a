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
    (["run", "bidprice_routing", "-p", "arrival_steps=-5"], "setting 'arrival_steps' got -5; allowed: >= "),
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
    assert "bidprice_routing:" in out and "c6_throughput" in out
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
    from replib.core.results import source_hashes

    monkeypatch.setattr("replib.core.results.fingerprint", lambda slug: "a source changed")
    monkeypatch.setattr("replib.core.results.source_hashes",
                        lambda slug: {**source_hashes(slug), f"lib/replib/papers/{slug}/method.py": "edited"})
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
    # two chapters declaring the same confirmatory seeds
    argv = ["run", "fdrl_weighting", "prefixrl", "--profile", "book", "--update-results", "--out", str(tmp_path / "o"),
            "--seeds", "1000", "1001", "1002", "1003", "1004"]
    assert main(argv) == 0
    assert sorted(p.name for p in written.iterdir()) == ["fdrl_weighting.json", "prefixrl.json"]
    assert json.loads((written / "fdrl_weighting.json").read_text())["slug"] == "fdrl_weighting"
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


# ---- the batch runner as re-runners expect (issue 45) ----------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["run", "bidprice_routing", "-p", "seeds=[0,0]"], "--seeds names a seed twice: 0 0"),
    (["run", "bidprice_routing", "-p", "seeds=[]"], "seeds must be a non-empty list of whole numbers"),
    (["run", "bidprice_routing", "--seeds", "1", "-p", "seeds=[2]"], "seeds given twice"),
    (["run", "bidprice_routing", "--profile", "smoke", "-p", "profile=paper"],
     "-p profile=paper conflicts with --profile smoke"),
])
def test_seeds_and_profile_given_the_wrong_way_are_refused(argv, message, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_numbers_yaml_reads_as_strings_are_numbers():
    assert parse_assignments(["lr=1e-4", "x=-2.5E3", "name=1e-4x", "n=7"]) == {
        "lr": 1e-4, "x": -2500.0, "name": "1e-4x", "n": 7}


@pytest.mark.parametrize("out", ["/proc/nope", "FILE/sub"])
def test_an_output_folder_that_cannot_be_written_is_refused_first(out, tmp_path, capsys, monkeypatch):
    (tmp_path / "FILE").write_text("a file")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("replib.cli.run_chapter", lambda *a, **k: pytest.fail("nothing may run"))
    assert main(["run", "bidprice_routing", "--profile", "smoke", "--out", out]) == 2
    assert f"--out {out}: cannot write there" in capsys.readouterr().err


def test_a_folder_holding_a_run_is_refused_unless_forced_and_runs_never_mix(tmp_path, monkeypatch, capsys):
    def fake_run(slug, profile, params, out, on_notebook=None, cell_progress=False):
        folder = tmp_path / slug
        folder.mkdir(exist_ok=True)
        (folder / f"{params['seeds'][0]}.marker").write_text("x")
        for stem in NOTEBOOKS:
            on_notebook(slug, stem)
        return _fake_results(slug, profile)

    monkeypatch.setattr("replib.cli.run_chapter", fake_run)
    argv = ["run", "foam", "--profile", "smoke", "--out", str(tmp_path), "--seeds"]
    assert main(argv + ["1"]) == 0
    assert "  foam/03_experiment done" in capsys.readouterr().out  # plain lines when stderr is no terminal
    assert main(argv + ["2"]) == 2
    assert "already holds a run of foam: choose another folder, or add --force" in capsys.readouterr().err
    assert main(argv + ["2", "--force"]) == 0
    assert sorted(p.name for p in (tmp_path / "foam").iterdir()) == ["2.marker"]  # the old run is gone


def test_a_failing_notebook_is_named_with_its_cell_and_executed_copy(tmp_path, monkeypatch):
    import nbformat

    from replib.runner import NotebookFailed, execute_notebook

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("raise ValueError('planted')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = tmp_path / "03_experiment.ipynb"
    nbformat.write(nb, source)
    monkeypatch.setattr("replib.runner.notebook_path", lambda slug, stem: source)
    with pytest.raises(NotebookFailed) as err:
        execute_notebook("foam", "03_experiment", "smoke", {}, tmp_path / "out")
    message = str(err.value)
    assert "foam/03_experiment failed in cell [2] with ValueError: planted" in message
    assert str(tmp_path / "out" / "03_experiment.ipynb") in message


@pytest.fixture
def results_with_a_truncated_file(tmp_path, monkeypatch):
    import shutil

    from replib.core.results import results_dir

    for path in results_dir().glob("*.json"):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "foam.json").write_text((tmp_path / "foam.json").read_text()[:500])
    data = json.loads((tmp_path / "sgb_ib.json").read_text())
    del data["claims"][0]["verdict"]
    (tmp_path / "sgb_ib.json").write_text(json.dumps(data))
    monkeypatch.setattr("replib.core.results.results_dir", lambda: tmp_path)
    return tmp_path


def test_one_unreadable_results_file_is_one_line_and_blocks_nothing_else(results_with_a_truncated_file, capsys):
    folder = results_with_a_truncated_file
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"{folder / 'foam.json'}: not a readable results file" in out and "Traceback" not in out
    assert "mwcp_pruning:" in out and "c1a_beats_random_30" in out  # the other chapters are still listed
    sgb = out[out.index("sgb_ib:"):]
    assert "no verdict stored" in sgb.splitlines()[1]  # a claim without its verdict does not crash list
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert f"{folder / 'foam.json'}: not a readable results file" in out
    assert "sgb_ib.json: p1_sib_learns stores verdict" in out  # check flags the missing verdict
    assert main(["scoreboard"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "foam.json: not a readable results file" in err


def test_list_and_params_work_from_an_installed_package(monkeypatch, capsys):
    """As in Colab: chapter.yml files ship in the wheel, the notebooks and results do not."""
    from replib.core.paths import require_repo_root

    for module in ("replib.cli", "replib.runner"):
        monkeypatch.setattr(f"{module}.repo_root", lambda: None)

    def no_clone():
        with monkeypatch.context() as m:
            m.setattr("replib.core.paths.repo_root", lambda: None)
            return require_repo_root()

    monkeypatch.setattr("replib.core.results.require_repo_root", no_clone)
    assert main(["list"]) == 0
    assert "no results here (not a clone of the book)" in capsys.readouterr().out
    assert main(["params", "foam"]) == 0
    assert "profile" in capsys.readouterr().out
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert "this command needs a clone" in err and err.count("\n") == 1


def test_student_refuses_a_file_and_existing_handouts_unless_forced(tmp_path, capsys):
    (tmp_path / "f.txt").write_text("x")
    assert main(["student", "mwcp_pruning", "--out", str(tmp_path / "f.txt")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    out = tmp_path / "h"
    assert main(["student", "mwcp_pruning", "--out", str(out)]) == 0
    edited = out / "mwcp_pruning" / "02_implementation.ipynb"
    edited.write_text(edited.read_text() + " ")
    assert main(["student", "mwcp_pruning", "--out", str(out)]) == 2
    assert "already holds hand-outs" in capsys.readouterr().err and edited.read_text().endswith(" ")
    assert main(["student", "mwcp_pruning", "--out", str(out), "--force"]) == 0
    assert not edited.read_text().endswith(" ")
    assert main(["student", "--out", str(out)]) == 2


def test_diff_sets_a_run_beside_the_book(tmp_path, capsys):
    from replib.core.ledger import read_json, write_json_atomic
    from replib.core.results import rejudged, results_dir

    run = read_json(results_dir() / "foam.json")
    run["claims"] = [{**c, "values": [v * 10 for v in c["values"]]} for c in run["claims"]]
    run = rejudged("foam", {**run, "seeds": [5, 6, 7]})
    write_json_atomic(tmp_path / "foam" / "foam.json", run)
    assert main(["diff", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    book_seeds = read_json(results_dir() / "foam.json")["seeds"]
    assert f"foam (run: profile book, seeds [5, 6, 7]; book: profile book, seeds {book_seeds})" in out
    assert "VERDICT DIFFERS" in out and "c1a_foam_vs_f10_loss" in out
    assert main(["diff", str(tmp_path / "empty")]) == 2


def test_version(capsys):
    from replib import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"replib {__version__}"


def test_progress_lines_reach_the_runner_and_nothing_else_does(monkeypatch, capsys):
    """In batch runs (REPLIB_PROGRESS=lines) a notebook's progress bar prints marked plain lines,
    the last one with every item done; the runner's echo shows those lines, prefixed with the
    notebook, however the kernel's stream splits them, and drops the notebook's other stderr."""
    import io

    import replib.core.display as display
    from replib.runner import ProgressEcho

    monkeypatch.setenv("REPLIB_PROGRESS", "lines")
    monkeypatch.setattr(display, "LINES_INTERVAL", 0.0)
    assert list(display.progress(range(3), desc="seeds")) == [0, 1, 2]
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith(display.PROGRESS_MARK + "seeds: 0/3 done")
    assert lines[-1].startswith(display.PROGRESS_MARK + "seeds: 3/3 done")

    out = io.StringIO()
    echo = ProgressEcho("foam/03_experiment", out)
    mark = display.PROGRESS_MARK
    for chunk in ("a warning\n" + mark + "seeds: 1/", "3 done\n", "more noise\n", mark + "seeds: 3/3 done"):
        echo.write(chunk)
    assert out.getvalue() == "  foam/03_experiment: seeds: 1/3 done\n"
    echo.write("\n")
    assert out.getvalue().splitlines()[-1] == "  foam/03_experiment: seeds: 3/3 done"

    monkeypatch.setenv("REPLIB_PROGRESS", "0")
    assert display.progress(range(2)).disable
