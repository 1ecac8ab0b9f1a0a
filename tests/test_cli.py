"""The `replib` command refuses bad requests before anything runs (exit 2, naming valid choices)."""

import pytest

from replib.cli import UsageError, main, parse_assignments, plan_run


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
    assert "every results file matches its sources" in capsys.readouterr().out
