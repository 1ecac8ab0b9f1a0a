"""Batch re-runs over Dask: the scheduler spec, the merge of per-seed results, and the loopback
cluster giving the same per-seed values as a plain run, with failed tasks reported."""

import pytest

from replib.cli import main
from replib.cluster import merge_seed_results, parse_scheduler
from replib.core.ledger import JUDGED_ROLES, read_json

pytest.importorskip("distributed")


def test_scheduler_specs():
    assert parse_scheduler("local") == ("local", 2)
    assert parse_scheduler("local:3") == ("local", 3)
    assert parse_scheduler("tcp://10.0.0.5:8786") == ("address", "tcp://10.0.0.5:8786")
    for bad in ("local:0", "local:x", "slurm", "tcp://host"):
        with pytest.raises(ValueError, match="local|whole number"):
            parse_scheduler(bad)


def _claim(cid, role, direction, threshold, **extra):
    return {"id": cid, "role": role, "statement": cid, "paper": "p", "metric": "m", "direction": direction,
            "threshold": threshold, **extra}


CHAPTER = {"slug": "bidprice_routing", "claims": [
    _claim("p1", "precondition", ">=", 1.0, kind="competence", unit="score"),
    _claim("c1", "headline", "<=", 0.85, null=1.0, unit="ratio", requires=["p1"])]}


def _seed_record(seed, p1, c1, **changes):
    record = {"slug": "bidprice_routing", "profile": "book", "seeds": [seed], "fingerprint": "abc",
              "parameters": {"profile": "book", "seeds": [seed], "rate": 0.5}, "runtime_s": {"03_experiment": 2.0},
              "claims": [{"id": "p1", "values": [p1]}, {"id": "c1", "values": [c1]}]}
    record.update(changes)
    return record


def test_merging_judges_once_over_all_seeds_and_refuses_mismatches(monkeypatch):
    monkeypatch.setattr("replib.core.ledger.load_chapter", lambda slug: CHAPTER)
    merged = merge_seed_results("bidprice_routing", {1: _seed_record(1, 2.0, 0.7), 0: _seed_record(0, 2.0, 0.9)})
    claims = {c["id"]: c for c in merged["claims"]}
    assert merged["seeds"] == [0, 1] and merged["parameters"]["seeds"] == [0, 1]
    assert claims["c1"]["values"] == [0.9, 0.7] and claims["c1"]["verdict"] == "undecided"
    assert merged["fingerprint"] == "abc" and merged["runtime_s"] == {"03_experiment": 4.0}
    unmet = merge_seed_results("bidprice_routing", {0: _seed_record(0, 0.5, 0.7), 1: _seed_record(1, 2.0, 0.7)})
    assert {c["id"]: c for c in unmet["claims"]}["c1"]["verdict"].startswith("inconclusive")
    for change, message in [({"profile": "smoke"}, "profile"), ({"fingerprint": "zzz"}, "fingerprint"),
                            ({"parameters": {"profile": "book", "seeds": [1], "rate": 0.9}}, "parameters: rate")]:
        with pytest.raises(ValueError, match=message):
            merge_seed_results("bidprice_routing", {0: _seed_record(0, 2.0, 0.7), 1: _seed_record(1, 2.0, 0.7, **change)})


def test_a_loopback_cluster_gives_the_plain_runs_values(tmp_path, capsys):
    plain, spread = tmp_path / "plain", tmp_path / "spread"
    argv = ["run", "bidprice_routing", "--profile", "smoke", "--seeds", "0", "1"]
    assert main(argv + ["--out", str(plain)]) == 0
    assert main(argv + ["--out", str(spread), "--scheduler", "local:2"]) == 0
    one = read_json(plain / "bidprice_routing" / "bidprice_routing.json")
    two = read_json(spread / "bidprice_routing" / "bidprice_routing.json")
    assert two["seeds"] == [0, 1] and two["parameters"] == one["parameters"]
    # the judged claims, on which the verdicts rest (a measurement may be wall clock, never equal twice)
    def judged(record):
        return [(c["id"], c["values"]) for c in record["claims"] if c["role"] in JUDGED_ROLES]

    assert judged(two) == judged(one) and len(judged(one)) >= 3
    assert (spread / "bidprice_routing" / "seed_1" / "03_experiment.ipynb").is_file()
    assert "bidprice_routing (profile smoke, seeds [0, 1]" in capsys.readouterr().out


def test_a_failed_task_is_named_and_no_partial_results_are_merged(tmp_path, capsys, monkeypatch):
    # a bad value that reaches the workers (here by switching off the check that refuses it up front)
    monkeypatch.setattr("replib.runner.check_types", lambda *args: None)
    argv = ["run", "bidprice_routing", "--profile", "smoke", "--seeds", "0", "1", "-p", "arrival_steps=-5",
            "--out", str(tmp_path), "--scheduler", "local:2"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "bidprice_routing: FAILED: seed 0:" in err and "seed 1:" in err
    assert str(tmp_path / "bidprice_routing" / "seed_0" / "03_experiment.ipynb") in err
    assert not (tmp_path / "bidprice_routing" / "bidprice_routing.json").exists()
    assert (tmp_path / "bidprice_routing" / "01_theory.ipynb").is_file()  # the other tasks' outputs are kept


def test_update_results_is_refused_on_a_cluster(capsys):
    from replib.core.paths import load_chapter

    seeds = ["--seeds", *map(str, load_chapter("bidprice_routing")["confirmatory_seeds"])]
    assert main(["run", "bidprice_routing", "--scheduler", "local:2", "--update-results"] + seeds) == 2
    assert "drop --scheduler" in capsys.readouterr().err
