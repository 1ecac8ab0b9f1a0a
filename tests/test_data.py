"""The generated-data cache: built once per parameters and source, rebuilt when stale or corrupt."""

import json

import pytest

from replib.core import data


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv(data.CACHE_VAR, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _counting_build(rows):
    calls = []

    def build():
        calls.append(1)
        return rows

    return build, calls


def test_builds_once_then_loads_the_same_rows():
    build, calls = _counting_build([{"x": 1, "text": "a b"}, {"x": 2, "text": "c"}])
    first = data.cached_dataset("toy", {"seed": 0}, build)
    second = data.cached_dataset("toy", {"seed": 0}, build)
    assert len(calls) == 1
    assert first.to_list() == second.to_list() == [{"x": 1, "text": "a b"}, {"x": 2, "text": "c"}]


def test_other_parameters_build_again():
    build, calls = _counting_build({"x": [1, 2, 3]})
    data.cached_dataset("toy", {"seed": 0}, build)
    data.cached_dataset("toy", {"seed": 1}, build)
    assert len(calls) == 2


def test_corrupt_cache_is_rebuilt_with_a_message(cache_in_tmp, capsys):
    build, calls = _counting_build({"x": [1, 2]})
    data.cached_dataset("toy", {"n": 2}, build)
    folder = next((cache_in_tmp / "toy").iterdir())
    for arrow in folder.glob("*.arrow"):
        arrow.write_bytes(b"not arrow")
    again = data.cached_dataset("toy", {"n": 2}, build)
    assert len(calls) == 2 and again["x"] == [1, 2]
    assert "unreadable" in capsys.readouterr().err


def test_stale_key_is_rebuilt_with_a_message(cache_in_tmp, capsys):
    build, calls = _counting_build({"x": [1]})
    data.cached_dataset("toy", {"n": 1}, build)
    key_file = next((cache_in_tmp / "toy").iterdir()) / data.KEY_FILE
    key = json.loads(key_file.read_text())
    key["source"] = "0" * 16
    key_file.write_text(json.dumps(key))
    data.cached_dataset("toy", {"n": 1}, build)
    assert len(calls) == 2 and "stale" in capsys.readouterr().err


def test_failed_build_leaves_nothing_behind(cache_in_tmp):
    def build():
        raise RuntimeError("generator broke")

    with pytest.raises(RuntimeError, match="generator broke"):
        data.cached_dataset("toy", {"n": 1}, build)
    assert not (cache_in_tmp / "toy").exists() or not any((cache_in_tmp / "toy").iterdir())


def test_bad_inputs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="letters, digits"):
        data.cached_dataset("a/b", {}, lambda: {"x": [1]})
    with pytest.raises(TypeError, match="plain JSON"):
        data.cached_dataset("toy", {"rng": object()}, lambda: {"x": [1]})
    with pytest.raises(TypeError, match="must return"):
        data.cached_dataset("toy", {}, lambda: 42, cache=False)


def test_key_depends_on_the_source_of_the_build_module():
    key = data.dataset_key("toy", {"n": 1}, _counting_build)
    assert key["params"] == {"n": 1} and len(key["digest"]) == 16
    assert key != data.dataset_key("toy", {"n": 1}, json.dumps)


def test_stored_stream_replays_the_live_batches():
    import numpy as np

    def draw(rng):
        ids = rng.integers(0, 9, size=(4, 3))
        return ids, ids > 4

    stream = data.cached_batches("stream", {"b": 4}, draw, steps=3, seed=7)
    replay = data.replay_batches(stream, 4)
    live = np.random.default_rng(7)
    for _ in range(3):
        want, got = draw(live), replay(None)
        assert all(np.array_equal(w, g) and w.dtype == g.dtype for w, g in zip(want, got))
    with pytest.raises(RuntimeError, match="only 3 batches of 4"):
        replay(None)
