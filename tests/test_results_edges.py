"""Edge cases of the results layer that the committed files never exercise: corrupt and foreign
results files, how stored summaries are compared with re-derived ones, margins at a zero threshold,
mixed headline labels, and the messages of a claim set that no longer matches its declaration."""

import contextlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from replib.core import results
from replib.core.results import (
    ResultsError,
    _same,
    committed_results,
    headline_verdict,
    margin,
    read_results,
)

ROOT = Path(__file__).resolve().parents[1]


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_a_corrupt_or_foreign_results_file_is_named_with_its_fault(tmp_path):
    with pytest.raises(ResultsError, match=r"bad\.json: not a readable results file \("):
        read_results(_write(tmp_path / "bad.json", "{not json"))
    with pytest.raises(ResultsError, match=r"list\.json: not a results file \(lacks everything\)$"):
        read_results(_write(tmp_path / "list.json", "[1, 2]"))
    with pytest.raises(ResultsError, match=r"part\.json: not a results file \(lacks claims, fingerprint\)$"):
        read_results(_write(tmp_path / "part.json", json.dumps({"slug": "x", "profile": "book", "seeds": [0]})))


def test_unreadable_files_are_skipped_only_when_asked(tmp_path, monkeypatch):
    whole = {"slug": "z", "profile": "book", "seeds": [0], "claims": [], "fingerprint": None}
    _write(tmp_path / "a.json", "{not json")           # sorts first: a skip must go on to the next file
    _write(tmp_path / "z.json", json.dumps(whole))
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    assert committed_results(skip_unreadable=True) == {"z": whole}
    with pytest.raises(ResultsError, match="a.json"):
        committed_results()


def test_stored_and_rederived_summaries_compare_with_a_tolerance_and_nan_as_missing():
    assert _same([1.0, None], [1.0, math.nan]) and _same(None, math.nan) and _same(math.nan, None)
    assert not _same([1.0], [1.0, 2.0]) and not _same([1.0, 2.0], [1.0, 3.0])
    assert not _same(None, 1.0) and not _same(1.0, None) and not _same(math.nan, 1.0) and not _same(1.0, math.nan)
    assert _same(math.nan, math.nan) and _same(1.0, 1.0 + 1e-10) and not _same(1.0, 1.0 + 1e-6)
    assert _same(0.0, 1e-13) and not _same(0.0, 1e-9) and _same(2, 2.0)
    assert not _same("<missing>", 1.0) and not _same(1.0, "1.0")
    assert _same("holds", "holds") and not _same("holds", "fails") and not _same("ab", ["a", "b"])


def test_margin_scales_by_the_threshold_or_by_the_largest_finite_value():
    claim = {"direction": ">=", "threshold": 0.5, "values": [9.0]}
    assert margin(claim, 0.75) == pytest.approx(0.5) and math.isnan(margin(claim, None))
    assert margin({**claim, "direction": "<"}, 0.75) == pytest.approx(-0.5)
    zero = {"direction": ">", "threshold": 0.0, "values": [2.0, -4.0, None, math.inf]}
    assert margin(zero, 1.0) == pytest.approx(0.25)              # the largest finite |value| is 4
    assert margin({**zero, "values": [None, math.inf]}, 3.0) == 3.0  # nothing finite: unit scale
    assert margin({**zero, "values": [0.0]}, 3.0) == 3.0             # all zero: unit scale


def test_mixed_headline_labels_without_a_judged_one_read_inconclusive():
    claims = [{"role": "headline", "label": "inconclusive"}, {"role": "headline", "label": "no room"}]
    assert headline_verdict(claims) == "inconclusive"


def _chapter(monkeypatch, tmp_path, stored_ids, declared_ids):
    """One chapter 'x' whose results store ``stored_ids`` while chapter.yml declares ``declared_ids``."""
    claim = {"role": "measurement", "statement": "s", "paper": "p", "metric": "m", "direction": ">=",
             "threshold": 0.0}
    record = {"slug": "x", "profile": "book", "seeds": [0], "fingerprint": None,
              "claims": [{"id": cid, "values": [1.0]} for cid in stored_ids]}
    _write(tmp_path / "x.json", json.dumps(record))
    _write(tmp_path / "y.json", json.dumps({**record, "slug": "y"}))
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    monkeypatch.setattr(results, "chapter_slugs", lambda: ["x", "y"])
    monkeypatch.setattr(results, "load_chapter", lambda slug: {"claims": [{**claim, "id": c} for c in declared_ids]})
    return record


def test_a_renamed_claim_is_named_for_every_chapter_it_breaks(monkeypatch, tmp_path):
    _write(tmp_path / "0.json", "{not json")   # unreadable: listed elsewhere, never stops this check
    _chapter(monkeypatch, tmp_path, ["m_old", "m2"], ["m_new", "m2"])
    message = ("the declared claims (m_new, m2) are not the stored ones (m_old, m2): a new or renamed "
               "claim needs a new run")
    assert results.inconsistent_results() == [
        f"x.json: its claims cannot be judged again (ValueError: x: {message})",
        f"y.json: its claims cannot be judged again (ValueError: y: {message})"]


def test_a_stored_field_that_the_values_do_not_give_is_named(monkeypatch, tmp_path):
    record = _chapter(monkeypatch, tmp_path, ["m1"], ["m1"])
    fresh = results.rejudged("x", record)["claims"][0]
    edited = {k: v for k, v in fresh.items() if k != "mean"}   # the mean dropped: compared with '<missing>'
    _write(tmp_path / "x.json", json.dumps({**record, "claims": [edited]}))
    _write(tmp_path / "y.json", json.dumps({**record, "slug": "y", "claims": [fresh]}))   # consistent
    (line,) = results.inconsistent_results()
    assert line == "x.json: m1 stores mean that do not follow from its values and declaration (re-judge: replib rejudge x)"


def test_unreadable_and_unconfirmed_results_are_listed_by_name(monkeypatch, tmp_path):
    """`replib check`'s two notices: a file that cannot be read, and results on development seeds."""
    base = {"profile": "book", "seeds": [0, 1], "claims": [], "fingerprint": None}
    _write(tmp_path / "a.json", "{not json")
    _write(tmp_path / "b.json", json.dumps({**base, "slug": "b"}))                        # development seeds
    _write(tmp_path / "c.json", json.dumps({**base, "slug": "c", "confirmatory": True}))
    _write(tmp_path / "d.json", json.dumps({**base, "slug": "d"}))                        # not a chapter
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    monkeypatch.setattr(results, "chapter_slugs", lambda: ["b", "c"])
    monkeypatch.setattr(results, "load_chapter", lambda slug: {"b": {"confirmatory_seeds": [1000, 1001]}}[slug])
    (line,) = results.unreadable_results()
    assert line.startswith(f"{tmp_path / 'a.json'}: not a readable results file (")
    assert results.unconfirmed_results() == [
        "b.json: seeds 0, 1 are development seeds; the confirmatory run on [1000, 1001] is pending"]


# --- staleness and re-judgement, on a synthetic chapter (no committed file, no real fingerprint) -----

DECLARED = [{"id": "m1", "role": "measurement", "statement": "s", "paper": "p", "metric": "m",
             "direction": ">=", "threshold": 0.0}]
CODE, YML = "lib/replib/papers/x/method.py", "notebooks/x/chapter.yml"
LEDGER = results.REJUDGE_MAY_CHANGE[1]   # the judging code (its path as the package names it)


def _sources(monkeypatch, now: dict[str, dict], fingerprint: str = "fp-now"):
    """Every chapter's fingerprint is ``fingerprint`` and its per-file hashes are ``now[slug]``."""
    monkeypatch.setattr(results, "fingerprint", lambda slug: now[slug] and fingerprint)
    monkeypatch.setattr(results, "source_hashes", lambda slug: dict(now[slug]))


def test_changed_sources_names_added_removed_and_edited_files_only(monkeypatch):
    _sources(monkeypatch, {"x": {"a.py": "1", "b.py": "2", "new.py": "3"}})
    assert results.changed_sources("x", {"fingerprint": "fp-now", "sources": {}}) == []  # same fingerprint
    assert results.changed_sources("x", {"fingerprint": "old"}) == ["(sources not recorded per file)"]
    assert results.changed_sources("x", {"fingerprint": "old", "sources": ["a.py"]}) == [
        "(sources not recorded per file)"]
    stored = {"a.py": "1", "b.py": "edited", "gone.py": "4"}
    assert results.changed_sources("x", {"fingerprint": "old", "sources": stored}) == ["b.py", "gone.py", "new.py"]


def test_stale_results_say_whether_to_re_run_or_re_judge(monkeypatch, tmp_path):
    """One line per stale file, in file order: code that measures changed (re-run), only what a
    re-judgement may follow changed (re-judge), only prose changed, or no such chapter."""
    base = {"profile": "book", "seeds": [0], "claims": [], "fingerprint": "old"}
    assert LEDGER.endswith("core/ledger.py")
    hashes = {CODE: "c", YML: "y", LEDGER: "l"}
    records = {"fresh": {"fingerprint": "fp-now"},
               "judging": {"sources": {**hashes, YML: "y0", LEDGER: "l0"}},
               "measuring": {"sources": {**hashes, CODE: "c0", YML: "y0"}},
               "prose": {"sources": hashes}, "unrecorded": {}, "zgone": {},
               "whole": {"sources": {**hashes, **{f.format(slug="x"): "old" for f in results.REJUDGE_MAY_CHANGE}}}}
    for slug, extra in records.items():
        _write(tmp_path / f"{slug}.json", json.dumps({**base, "slug": slug, **extra}))
    _write(tmp_path / "0bad.json", "{not json")   # unreadable: named by another check, skipped here
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    monkeypatch.setattr(results, "chapter_slugs", lambda: sorted(set(records) - {"zgone"}))
    monkeypatch.setattr(results, "fingerprint", lambda slug: records[slug] and "fp-now")
    monkeypatch.setattr(results, "source_hashes", lambda slug: records[slug] and {
        k.replace("/x/", f"/{slug}/"): v for k, v in {**{f.format(slug="x"): "new" for f in results.REJUDGE_MAY_CHANGE}, **hashes}.items()})
    for slug in records:   # the per-file keys name each chapter's own files
        path = tmp_path / f"{slug}.json"
        if slug in ("judging", "measuring", "prose"):   # these differ from now only where named
            data = json.loads(path.read_text(encoding="utf-8"))
            data["sources"] = {**{f.format(slug="x"): "new" for f in results.REJUDGE_MAY_CHANGE}, **data["sources"]}
            path.write_text(json.dumps(data), encoding="utf-8")
        data = json.loads(path.read_text(encoding="utf-8"))
        if "sources" in data:
            data["sources"] = {k.replace("/x/", f"/{slug}/"): v for k, v in data["sources"].items()}
            path.write_text(json.dumps(data), encoding="utf-8")
    judging = ", ".join(sorted([LEDGER, "notebooks/judging/chapter.yml"]))
    whole = ", ".join(sorted(f.format(slug="whole") for f in results.REJUDGE_MAY_CHANGE))  # all of them, no more
    measuring = ", ".join(sorted([CODE.replace("/x/", "/measuring/"), "notebooks/measuring/chapter.yml"]))
    assert results.stale_results() == [
        f"judging.json: only prose, declarations or the judging code changed ({judging}; "
        "re-judge: replib rejudge judging)",
        f"measuring.json: sources changed since it was produced ({measuring}; "
        "re-run: replib run measuring --profile book --update-results)",
        "prose.json: only prose, declarations or the judging code changed (notebook prose; "
        "re-judge: replib rejudge prose)",
        "unrecorded.json: sources changed since it was produced ((sources not recorded per file); "
        "re-run: replib run unrecorded --profile book --update-results)",
        f"whole.json: only prose, declarations or the judging code changed ({whole}; re-judge: replib rejudge whole)",
        "zgone.json: no chapter named 'zgone'"]


FIVE = (1000, 1001, 1002, 1003, 1004)


def _rejudgeable(monkeypatch, tmp_path, seeds=(1001, 1000, 1004, 1003, 1002), confirmatory_seeds=FIVE, **record):
    """Chapter 'x' measured under fingerprint 'fp-then'; since then only its chapter.yml changed."""
    data = {"slug": "x", "profile": "book", "seeds": list(seeds), "fingerprint": "fp-then",
            "created": "2026-01-01T00:00:00+00:00", "sources": {CODE: "c", YML: "y0"},
            "claims": [{"id": "m1", "values": [2.0, 4.0, 3.0, 3.0, 3.0]}], **record}
    _write(tmp_path / "x.json", json.dumps(data))
    monkeypatch.setattr(results, "results_dir", lambda: tmp_path)
    chapter = {"claims": DECLARED, "confirmatory_seeds": list(confirmatory_seeds)}
    monkeypatch.setattr(results, "load_chapter", lambda slug: {"x": chapter}[slug])
    _sources(monkeypatch, {"x": {CODE: "c", YML: "y1"}})
    return data


def test_a_rejudgement_keeps_the_values_and_records_what_they_were_measured_under(monkeypatch, tmp_path):
    from datetime import datetime

    from replib.core.ledger import INTERVAL_KIND, judge_claims, read_json

    _rejudgeable(monkeypatch, tmp_path)
    after = read_json(results.rejudge_committed("x"))
    assert after["claims"] == judge_claims(DECLARED, {"m1": [2.0, 4.0, 3.0, 3.0, 3.0]}, "book")
    assert after["claims"][0]["values"] == [2.0, 4.0, 3.0, 3.0, 3.0] and after["claims"][0]["mean"] == 3.0
    assert after["fingerprint"] == "fp-now" and after["sources"] == {CODE: "c", YML: "y1"}
    assert after["interval_kind"] == INTERVAL_KIND and after["confirmatory"] is True
    assert after["created"] == "2026-01-01T00:00:00+00:00" and after["seeds"] == [1001, 1000, 1004, 1003, 1002]
    assert set(after["rejudged"]) == {"at", "values_fingerprint", "values_created"}
    assert after["rejudged"]["values_fingerprint"] == "fp-then"
    assert after["rejudged"]["values_created"] == "2026-01-01T00:00:00+00:00"
    assert datetime.fromisoformat(after["rejudged"]["at"]).utcoffset().total_seconds() == 0
    assert after["rejudged"]["at"].endswith("+00:00") and "." not in after["rejudged"]["at"]
    # a second re-judgement still names the run that measured the values, not the first re-judgement
    _sources(monkeypatch, {"x": {CODE: "c", YML: "y2"}}, fingerprint="fp-later")
    again = read_json(results.rejudge_committed("x"))
    assert again["rejudged"]["values_fingerprint"] == "fp-then" and again["fingerprint"] == "fp-later"
    assert again["rejudged"]["values_created"] == "2026-01-01T00:00:00+00:00"
    # a record re-judged before keeps what its first re-judgement recorded, not its own 'created'
    _rejudgeable(monkeypatch, tmp_path, rejudged={"values_fingerprint": "fp-first", "values_created": "2025-06-01"})
    kept = read_json(results.rejudge_committed("x"))["rejudged"]
    assert kept["values_fingerprint"] == "fp-first" and kept["values_created"] == "2025-06-01"


@pytest.mark.parametrize("seeds, declared, confirmatory", [
    ((0, 1, 2, 3, 4), FIVE, False), ((1000, 1001, 1002, 1003, 1005), FIVE, False),
    ((1000, 1001, 1002, 1003), FIVE, False), (FIVE, (1000, 1001, 1002, 1003, 1004, 1005), False)])
def test_a_rejudgement_marks_results_confirmatory_only_on_the_declared_seeds(
        monkeypatch, tmp_path, seeds, declared, confirmatory):
    from replib.core.ledger import read_json

    _rejudgeable(monkeypatch, tmp_path, seeds=seeds, confirmatory_seeds=declared,
                 claims=[{"id": "m1", "values": [1.0] * len(seeds)}])
    assert read_json(results.rejudge_committed("x"))["confirmatory"] is confirmatory


def test_a_rejudgement_is_refused_when_measuring_code_changed(monkeypatch, tmp_path):
    before = _rejudgeable(monkeypatch, tmp_path)
    task = CODE.replace("method.py", "task.py")
    _sources(monkeypatch, {"x": {CODE: "c-edited", YML: "y1", LEDGER: "new", task: "t"}})
    with pytest.raises(ValueError) as err:
        results.rejudge_committed("x")
    assert str(err.value) == (f"x: {CODE}, {task} changed since the values were measured; re-run: "
                              "replib run x --profile book --update-results")
    assert json.loads((tmp_path / "x.json").read_text(encoding="utf-8")) == before   # nothing written
    # a record without per-file hashes cannot tell what changed: its values are judged again
    _rejudgeable(monkeypatch, tmp_path, sources=None)
    _sources(monkeypatch, {"x": {CODE: "c-edited"}})
    assert json.loads(results.rejudge_committed("x").read_text(encoding="utf-8"))["rejudged"]["values_fingerprint"] == "fp-then"


# --- the scoreboard's figure and files, from synthetic results ------------------------------------

def _claim(cid, role, values, threshold, direction=">=", null=None, **extra):
    claim = {"id": cid, "role": role, "statement": f"{cid} statement", "paper": "p", "metric": "m",
             "direction": direction, "threshold": threshold, "unit": "score", **extra}
    if null is not None:
        claim["null"] = null
    return claim, values


def _synthetic_results():
    """Three chapters: 'a' with a headline (null), a mechanism and a measurement; 'b' with a seed
    that gave no value, values past the clip and a precondition it needs; 'c' with measurements only;
    'd' (a second row of panels) with nulls past the clip on both sides and an interval with one
    end unknown."""
    from replib.core.ledger import judge_claims

    chapters = {
        "a": [_claim("h1", "headline", [1.2, 1.4, 1.3, 1.25, 1.35], 1.0, null=0.0),
              _claim("m1", "mechanism", [0.1, -0.2, 0.3, 0.0, 0.05], 0.5, direction="<="),
              _claim("x1", "measurement", [1.0] * 5, 0.0)],
        "b": [_claim("p1", "precondition", [9.0, 9.5, 10.0, 8.5, 9.0], 1.0, kind="competence"),
              _claim("h2", "headline", [None, 0.5, 0.6, 0.4, 5.0], 0.3, null=0.1, requires=["p1"]),
              _claim("c2", "mechanism", [-3.0, -2.5, -4.0, -3.5, -3.0], 1.0, direction=">")],
        "c": [_claim("x2", "measurement", [2.0] * 5, 0.0)],
        "d": [_claim("m3", "mechanism", [1.0, 1.0, 1.0, 1.0, 1.1], 0.5),
              _claim("h3", "headline", [2.0, 2.1, 2.0, 2.2, 2.1], 1.0, null=-5.0),               # null far left
              _claim("h4", "headline", [0.5, 0.4, 0.5, 0.6, 0.5], 1.0, direction="<=", null=-5.0)],  # far right
    }
    out = {}
    for slug, pairs in chapters.items():
        declared = [c for c, _ in pairs]
        claims = judge_claims(declared, {c["id"]: v for c, v in pairs}, "book")
        out[slug] = {"slug": slug, "profile": "book", "seeds": list(range(1000, 1005)), "fingerprint": "f",
                     "confirmatory": slug != "b", "created": "2026-12-01", "claims": claims,
                     "runtime_s": {"01_theory": 2.0, "03_experiment": 100.4 + len(slug)}}
    out["d"]["claims"][0]["interval"] = [math.nan, 1.2]   # no bar unless both ends are known
    return chapters, out


def _describe(fig) -> dict:
    """What the margins figure draws, artist by artist (positions, colours, sizes, texts), rounded."""
    import matplotlib.colors as mcolors

    def r(x):
        return np.round(np.asarray(x, dtype=float), 5).tolist()

    def colours(cs):
        return [mcolors.to_hex(c, keep_alpha=True) for c in cs] if len(cs) else []

    gs = fig.axes[0].get_gridspec()
    params = gs.get_subplot_params(fig)
    axes = []
    for ax in fig.axes:
        axes.append({
            "title": [ax.get_title(loc="left"), ax.get_title(), ax.title.get_fontsize(), ax._left_title.get_fontsize()],
            "xlabel": [ax.get_xlabel(), ax.xaxis.label.get_fontsize()], "xlim": r(ax.get_xlim()),
            "ylim": r(ax.get_ylim()), "yticks": r(ax.get_yticks()),
            "yticklabels": [[t.get_text(), t.get_fontsize()] for t in ax.get_yticklabels()],
            "xticksize": ax.xaxis.get_major_ticks()[0].label1.get_fontsize(),
            "lines": [[r(line.get_xdata()), r(line.get_ydata()), mcolors.to_hex(line.get_color()), line.get_linewidth(),
                       line.get_alpha(), line.get_solid_capstyle(), line.get_zorder()] for line in ax.get_lines()],
            "points": [[r(c.get_offsets()), r(c.get_sizes()), colours(c.get_facecolors()),
                        colours(c.get_edgecolors()), r(c.get_linewidths()), c.get_zorder(),
                        r(np.ptp(c.get_paths()[0].vertices, axis=0))] for c in ax.collections],
        })
    (legend,) = fig.legends
    return {
        "size": r(fig.get_size_inches()), "grid": [gs.nrows, gs.ncols, r(gs.get_height_ratios())],
        "params": r([params.hspace, params.wspace, params.top, params.bottom]), "axes": axes,
        "legend": [[t.get_text() for t in legend.get_texts()], legend._fontsize, legend._ncols,
                   legend.get_frame_on(), legend._loc,
                   [[h.get_marker(), h.get_linestyle(), h.get_linewidth(), mcolors.to_hex(h.get_color()),
                     str(h.get_markerfacecolor())] for h in legend.legend_handles]],
    }


@contextlib.contextmanager
def _matplotlib_colour_codes():
    """matplotlib's own one-letter colours ('k' is black), which seaborn's set_theme remaps globally."""
    import matplotlib.colors as mcolors

    codes = mcolors.colorConverter.colors
    saved = {code: codes[code] for code in mcolors.BASE_COLORS}
    for code, colour in mcolors.BASE_COLORS.items():
        codes[code] = colour          # item by item: each assignment clears matplotlib's colour cache
    try:
        yield
    finally:
        for code, colour in saved.items():
            codes[code] = colour


def test_the_margins_figure_draws_each_judged_claim_where_its_margin_puts_it():
    """Panels for chapters with judged claims only; interval bars and seed dots at margin(), clipped at
    +-MARGIN_CLIP; a diamond at a headline's null; a cross at the left edge for a seed with no value."""
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    _, synthetic = _synthetic_results()
    with mpl.style.context("default"), _matplotlib_colour_codes():   # whatever an earlier test left behind
        fig = results.margins_figure(synthetic)
        described = json.loads(json.dumps(_describe(fig)))
    try:
        assert [ax.get_title(loc="left") for ax in fig.axes] == ["a", "b", "d"]   # 'c' measures only
        a, b, _ = fig.axes
        assert [t.get_text() for t in a.get_yticklabels()] == ["h1", "m1"]
        assert [t.get_text() for t in b.get_yticklabels()] == ["p1", "h2", "c2"]
        h1 = synthetic["a"]["claims"][0]
        bar = a.get_lines()[0]
        assert np.allclose(bar.get_xdata(), [results.margin(h1, x) for x in h1["interval"]])
        assert np.allclose(bar.get_ydata(), [0, 0])
        dots = a.collections[0].get_offsets()
        assert np.allclose(dots[:, 0], [(v - 1.0) / 1.0 for v in h1["values"]]) and np.allclose(dots[:, 1], 0)
        assert np.allclose(a.collections[1].get_offsets(), [[-1.0, 0]])       # null 0 vs threshold 1
        m1_dots = a.collections[2].get_offsets()                              # <= 0.5: 0.1 is 0.8 clear
        assert np.allclose(m1_dots[:, 0], [0.8, 1.4, 0.4, 1.0, 0.9]) and np.allclose(m1_dots[:, 1], 1)
        h2_dots = [c.get_offsets() for c in b.collections if len(c.get_offsets()) and c.get_offsets()[0][1] == 1]
        seeds, null, cross = h2_dots
        assert np.allclose(seeds[:, 0], [2 / 3, 1.0, 1 / 3, 2.0])               # 5.0 clipped at +2
        assert np.allclose(null, [[-2 / 3, 1]]) and np.allclose(cross, [[-results.MARGIN_CLIP, 1]])
        p1_bar, c2_bar, zero = b.get_lines()             # h2 has a seed without a value: no interval bar
        assert np.allclose(c2_bar.get_xdata(), [-2.0, -2.0]) and np.allclose(zero.get_xdata(), [0, 0])
        colour = results.VERDICT_COLOURS
        assert [line.get_color() for line in a.get_lines()[:2]] == [colour["holds"], colour["holds"]]
        assert [p1_bar.get_color(), c2_bar.get_color()] == [colour["holds"], colour["fails"]]
        d = fig.axes[2]
        assert len(d.get_lines()) == 3                    # m3's half-known interval draws no bar
        nulls = [c.get_offsets() for c in d.collections if len(c.get_offsets()) == 1]
        assert np.allclose(nulls, [[[-2.0, 1]], [[2.0, 2]]])   # clipped on both sides
        golden = ROOT / "tests" / "golden" / "margins_figure.json"
        if os.environ.get("REPLIB_UPDATE_GOLDEN"):
            golden.write_text(json.dumps(described, indent=1) + "\n", encoding="utf-8")
        assert described == json.loads(golden.read_text(encoding="utf-8")), (
            "the margins figure draws something else than before: if that is deliberate, regenerate "
            "tests/golden/margins_figure.json with REPLIB_UPDATE_GOLDEN=1 and look at book/scoreboard_margins.png")
    finally:
        plt.close(fig)


def test_write_scoreboard_writes_every_generated_file_from_the_results(monkeypatch, tmp_path, utf8_files):
    """book/scoreboard.md, its figure (a PNG without a Software stamp), the intro's and README's
    chapter lists, and the verdict boxes of the chapters whose box changed (then synced)."""
    from PIL import Image

    from replib.core import report

    chapters, synthetic = _synthetic_results()
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.md").write_text(f"# Intro\n\n{results.INTRO_START}\nold\n{results.INTRO_END}\ntail\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(f"# Read me\n{results.README_START}\nold\n{results.INTRO_END}\nend\n", encoding="utf-8")
    (tmp_path / "_toc.yml").write_text("parts:\n- caption: Part one\n  chapters:\n  - file: notebooks/a/01_theory\n"
                                       "  - file: notebooks/b/01_theory\n- caption: Front\n  chapters:\n"
                                       "  - file: book/scoreboard\n", encoding="utf-8")
    meta = {s: {"title": f"Title {s}", "short_title": f"T{s}", "arxiv": "2601.00001",
                "claims": [c for c, _ in pairs]} for s, pairs in chapters.items()}
    monkeypatch.setattr(results, "require_repo_root", lambda: tmp_path)
    monkeypatch.setattr(results, "committed_results", lambda **_: synthetic)
    monkeypatch.setattr(results, "chapter_slugs", lambda: ["a", "b"])
    monkeypatch.setattr(results, "load_chapter", lambda slug: meta[slug])
    boxes, synced = [], []
    monkeypatch.setattr(report, "write_blocks", lambda slug, r: boxes.append((slug, r)) or slug == "b")
    monkeypatch.setattr(report, "sync_ipynb", lambda paths: synced.append(list(paths)))

    path = results.write_scoreboard()
    assert path == tmp_path / "book" / "scoreboard.md"
    assert path.read_text(encoding="utf-8") == results.scoreboard_markdown()
    png = (tmp_path / "book" / results.FIGURE).read_bytes()
    assert png.startswith(b"\x89PNG") and b"Software" not in png and b"matplotlib" not in png
    with Image.open(tmp_path / "book" / results.FIGURE) as image:
        assert tuple(round(d) for d in image.info["dpi"]) == (150, 150)
        assert image.size[0] < 11 * 150   # bbox "tight" trims the margins
    intro = (tmp_path / "book" / "intro.md").read_text(encoding="utf-8")
    assert intro == f"# Intro\n\n{results.INTRO_START}\n{results.chapter_list_markdown()}\n{results.INTRO_END}\ntail\n"
    assert "- **Part one.** [Title a](../notebooks/a/01_theory.ipynb) (headline: reproduced); " in intro
    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert readme == f"# Read me\n{results.README_START}\n{results.readme_chapters_markdown()}\n{results.INTRO_END}\nend\n"
    assert [slug for slug, _ in boxes] == ["a", "b"] and boxes[0][1] is synthetic["a"]
    assert synced == [[tmp_path / "notebooks" / "b" / "03_experiment.py"]]
    assert list((tmp_path / "book").iterdir()) and not list(tmp_path.glob("book/*.tmp*"))


def test_smoke_values_name_every_chapter_that_wrote_nothing_or_left_a_value_out(tmp_path, monkeypatch):
    """missing_smoke_values goes on after a chapter without a results file."""
    monkeypatch.setattr(results, "chapter_slugs", lambda: ["a", "b", "c"])
    monkeypatch.setattr(results, "load_chapter", lambda slug: {"b": {}, "c": {"smoke_gaps": None}}[slug])
    record = {"profile": "smoke", "seeds": [0], "fingerprint": None,
              "claims": [{"id": "h1", "role": "headline", "values": [math.nan]}]}
    _write(tmp_path / "b.json", json.dumps({**record, "slug": "b"}))
    _write(tmp_path / "c.json", json.dumps({**record, "slug": "c", "claims": [{**record["claims"][0], "values": [1.0]}]}))
    assert results.missing_smoke_values(tmp_path) == [
        "a: the smoke run wrote no a.json",
        "b: h1 has no value on some seed (add what it needs to the smoke profile, or list it under smoke_gaps "
        "with the reason)"]


def test_the_scoreboard_shows_defaults_and_development_seeds(monkeypatch):
    """A chapter without results, one without a short title or declared claims, development seeds."""
    _, synthetic = _synthetic_results()
    monkeypatch.setattr(results, "committed_results", lambda **_: {"b": synthetic["b"]})
    monkeypatch.setattr(results, "chapter_slugs", lambda: ["b", "e"])
    monkeypatch.setattr(results, "load_chapter", lambda slug: {"b": {}, "e": {"short_title": "Te"}}[slug])
    page = results.scoreboard_markdown()
    assert "| [b](#b) | not reproduced | fails | fails | 0 hold, 2 fail, 0 undecided, 0 inconclusive | 1000, 1001, " \
           "1002, 1003, 1004 (development seeds) | 101 s |" in page
    assert "| Te | no results yet | | | | | |" in page
    assert "\n## b\n" in page and "arXiv n/a; profile `book`" in page
    assert "| c2 statement |  |\n" in page   # no declared claims: no paper column text


def test_inconsistent_results_go_on_past_a_file_of_no_chapter_and_name_every_field(monkeypatch, tmp_path):
    record = _chapter(monkeypatch, tmp_path, ["m1"], ["m1"])
    fresh = results.rejudged("x", record)["claims"][0]
    _write(tmp_path / "a.json", json.dumps({**record, "slug": "a"}))         # no chapter 'a': skipped
    _write(tmp_path / "x.json", json.dumps({**record, "claims": [{**fresh, "mean": 9.0, "sd": 9.0}]}))
    _write(tmp_path / "y.json", json.dumps({**record, "slug": "y", "claims": [fresh]}))
    assert results.inconsistent_results() == [
        "x.json: m1 stores mean, sd that do not follow from its values and declaration (re-judge: replib rejudge x)"]
