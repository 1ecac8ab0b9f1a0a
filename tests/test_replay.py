"""`replib replay`: one committed seed re-run and compared claim by claim (the executor is faked here;
`make test` replays the cheapest chapter for real)."""

import json
import math

import pytest

from replib.cli import main
from replib.core.ledger import read_json, write_json_atomic
from replib.replay import cheapest_chapter, compare, is_wall_clock, replay_plan, same

SLUG = "sgb_ib"


def _claim(cid, values, role="headline", metric="a ratio", unit=None):
    return {"id": cid, "role": role, "metric": metric, "unit": unit, "values": values}


def test_values_agree_exactly_unless_a_tolerance_is_declared():
    assert same(0.5, 0.5, 0.0) and not same(0.5, 0.5 + 1e-15, 0.0) and same(0.5, 0.5 + 1e-15, 1e-9)
    assert same(None, float("nan"), 0.0) and not same(None, 0.5, 0.0) and not same(0.5, None, 1e-3)
    assert same(math.inf, math.inf, 0.0) and not same(math.inf, -math.inf, 0.5) and not same(math.inf, 1e300, 0.5)


def test_wall_clock_measurements_are_skipped_and_nothing_else():
    assert is_wall_clock(_claim("x", [], role="measurement", metric="wall-clock seconds per seed"))
    assert is_wall_clock(_claim("x", [], role="measurement", unit="ratio of IB-phase wall seconds"))
    assert not is_wall_clock(_claim("x", [], role="measurement", metric="m / n"))
    assert not is_wall_clock(_claim("x", [], role="headline", metric="wall-clock seconds"))  # never judged anyway


def test_compare_reads_the_replayed_seeds_column():
    committed = {"seeds": [0, 1, 2], "claims": [_claim("a", [1.0, 2.0, 3.0]), _claim("b", [4.0, 5.0, 6.0]),
                                                 _claim("t", [9.0, 9.5, 9.9], role="measurement", metric="seconds")]}
    replayed = {"seeds": [1], "claims": [_claim("a", [2.0]), _claim("b", [5.5]), _claim("t", [1.0])]}
    rows = {r["claim"]: r["status"] for r in compare(committed, replayed, 1, 0.0)}
    assert rows == {"a": "same", "b": "DIFFERS", "t": "skipped (wall clock)"}
    assert compare(committed, {"seeds": [1], "claims": []}, 1, 0.0)[0]["status"] == "missing in the replay"


def test_a_batched_chapter_replays_the_seeds_whole_batch(monkeypatch):
    """Seeds trained as one batched model are replayed together, as the book profile grouped them."""
    seeds = [1000, 1001, 1002, 1003, 1004]
    chapters = {"solo": {}, "batched": {"replay_batch": {"groups": 2, "parameters": {"workers": 1}}},
                "one": {"replay_batch": {"groups": 1}}, "bad": {"replay_batch": {"groups": 0}}}
    monkeypatch.setattr("replib.replay.load_chapter", chapters.__getitem__)
    assert replay_plan("solo", seeds, 1003) == ([1003], {})
    assert replay_plan("batched", seeds, 1003) == ([1001, 1003], {"workers": 1})
    assert replay_plan("batched", seeds, 1004) == ([1000, 1002, 1004], {"workers": 1})
    assert replay_plan("one", seeds, 1001) == (seeds, {})
    with pytest.raises(ValueError, match="bad: replay_batch must be"):
        replay_plan("bad", seeds, 1000)


@pytest.fixture
def committed_copy(tmp_path, monkeypatch):
    """The chapter's committed results in a scratch results folder, and an executor that 'replays' by
    writing the pristine committed values of the seed asked for."""
    from replib.core.results import results_dir

    pristine = read_json(results_dir() / f"{SLUG}.json")
    write_json_atomic(tmp_path / f"{SLUG}.json", pristine)
    monkeypatch.setattr("replib.replay.results_dir", lambda: tmp_path)

    def fake_execute(slug, stem, profile, params, out_dir):
        columns = [pristine["seeds"].index(seed) for seed in params["seeds"]]
        record = {**pristine, "seeds": params["seeds"],
                  "claims": [{**c, "values": [c["values"][k] for k in columns]} for c in pristine["claims"]]}
        write_json_atomic(out_dir / f"{slug}.json", record)
        return 1.0

    monkeypatch.setattr("replib.replay.execute_notebook", fake_execute)
    return tmp_path / f"{SLUG}.json"


def test_an_untouched_result_replays(committed_copy, capsys):
    seed = read_json(committed_copy)["seeds"][1]
    assert main(["replay", SLUG, "--seed", str(seed)]) == 0
    assert f"{SLUG}: seed {seed} replayed" in capsys.readouterr().out


def test_a_consistent_edit_of_committed_values_is_caught(committed_copy, capsys):
    """Values, mean and verdict edited together pass every consistency test; the replay still sees it."""
    data = json.loads(committed_copy.read_text())
    claim = data["claims"][1]
    claim["values"] = [v + 0.05 for v in claim["values"]]
    claim["mean"] += 0.05
    claim["interval"] = [b + 0.05 for b in claim["interval"]]
    committed_copy.write_text(json.dumps(data))
    assert main(["replay", SLUG]) == 1
    captured = capsys.readouterr()
    assert f"{claim['id']}" in captured.out and "DIFFERS" in captured.out
    assert f"differ from what the code gives in {SLUG}" in captured.err


@pytest.mark.parametrize("argv, message", [
    (["replay", SLUG, "--seed", "77"], "seed 77 is not one of the committed seeds 1000, 1001, "),
    (["replay"], "name at least one chapter, --cheapest or --all"),
    (["replay", "nochapter"], "valid chapters: "),
    (["replay", SLUG, "foam", "--seed", "1"], "--seed names a seed of one chapter"),
])
def test_bad_replays_are_refused(committed_copy, argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_the_cheapest_chapter_is_the_cheapest_per_seed():
    from replib.core.results import committed_results

    results = committed_results()
    per_seed = {s: r["runtime_s"]["03_experiment"] / len(r["seeds"]) for s, r in results.items()}
    assert per_seed[cheapest_chapter()] == min(per_seed.values())
