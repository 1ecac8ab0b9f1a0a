"""Grading of notebook exercises: a student's function against the reference, case by case."""

from __future__ import annotations

import reprlib

import numpy as np

_SHORT = reprlib.Repr()  # cases and answers may be large arrays: keep the message short
_SHORT.maxstring = _SHORT.maxother = 60


def _show(value) -> str:
    """A short repr of a case or an answer, numpy scalars as plain numbers (0.5, not np.float64(0.5))."""
    def plain(x):
        if isinstance(x, np.generic):
            return x.item()
        if isinstance(x, (tuple, list)):
            return type(x)(plain(v) for v in x)
        return x

    return _SHORT.repr(plain(value))


def grade(answer, reference, cases: list[tuple], name: str = "your function") -> None:
    """Call `answer(*case)` and `reference(*case)` on every case; raise AssertionError naming the
    first case that raises or differs from the reference (arrays and floats compared with
    np.allclose), else print a confirmation."""
    for number, case in enumerate(cases, start=1):
        where = f"case {number} of {len(cases)}, {name}{_show(tuple(case))}"
        try:
            got = answer(*case)
        except NotImplementedError:
            raise AssertionError(f"{name} is not written yet (it raises NotImplementedError)") from None
        except Exception as err:
            raise AssertionError(f"{where} raised {type(err).__name__}: {err}") from err
        want = reference(*case)
        if not _close(got, want):
            raise AssertionError(f"{where} returned {_show(got)}; expected {_show(want)}")
    print(f"correct: {name} matches the reference on {len(cases)} cases")


def _close(got, want) -> bool:
    if isinstance(want, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(want) and all(map(_close, got, want))
    try:
        return bool(np.allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), equal_nan=True)) \
            and np.shape(got) == np.shape(want)
    except (TypeError, ValueError):
        return got == want
