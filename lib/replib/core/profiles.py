"""Run profiles (smoke, book, paper) and the experiment configuration they resolve to."""

from __future__ import annotations

import os
import re
from types import SimpleNamespace

PROFILES = ("smoke", "book", "paper")
ENV_VAR = "REPLIB_PROFILE"


def resolve_profile(name: str | None = None) -> str:
    """The profile to use: `name` if given, else $REPLIB_PROFILE, else "book"; unknown names fail."""
    chosen = name if name not in (None, "") else os.environ.get(ENV_VAR) or "book"
    if chosen not in PROFILES:
        raise ValueError(f"unknown profile {chosen!r}; valid profiles: {', '.join(PROFILES)}")
    return chosen


def configure(defaults: dict[str, dict], profile: str | None = None, bounds: dict | None = None,
              **overrides) -> SimpleNamespace:
    """Resolve an experiment's settings: the profile's defaults, then every override that is not None.

    `defaults` maps each profile name to a dict of settings (the chapter module defines it). An
    override whose name the profile does not define fails at once, naming the valid settings; so does
    an override whose type differs from the default's (ints are accepted where floats are expected),
    and one outside its declared range in `bounds` (see :func:`check_bound`).
    """
    profile = resolve_profile(profile)
    bounds = {"seeds": (0, None), **(bounds or {})}
    base = dict(defaults[profile])
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in base:
            raise ValueError(f"unknown setting {name!r}; valid settings: {', '.join(sorted(base))}")
        expected = base[name]
        if not _same_kind(expected, value):
            raise TypeError(
                f"setting {name!r} expects {type(expected).__name__} like {expected!r}, got {value!r}"
            )
        if name in bounds:
            check_bound(name, value, bounds[name])
        base[name] = float(value) if isinstance(expected, float) else value
    return SimpleNamespace(profile=profile, **base)


def check_bound(name: str, value, bound) -> None:
    """Refuse a setting outside its declared range, naming what is allowed.

    `bound` is ``(low, high)`` for numbers, inclusive, None for an open end (a list of numbers is
    checked element by element), a set of allowed strings (a list of strings must be a subset
    of it), or a compiled regular expression that every string must match in full.
    """
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(bound, re.Pattern):
        bad = [v for v in values if not isinstance(v, str) or not bound.fullmatch(v)]
        if bad:
            raise ValueError(f"setting {name!r} got {value!r}; allowed: {describe_bound(bound)}")
        return
    if isinstance(bound, (set, frozenset)):
        bad = [v for v in values if v not in bound]
        if bad:
            raise ValueError(f"setting {name!r} got {value!r}; allowed: {describe_bound(bound)}")
        return
    low, high = bound
    for v in values:
        if (low is not None and v < low) or (high is not None and v > high):
            raise ValueError(f"setting {name!r} got {value!r}; allowed: {describe_bound(bound)}")


def describe_bound(bound) -> str:
    """What a bound allows, in words (for error messages and ``replib params``)."""
    if bound is None:
        return "any"
    if isinstance(bound, re.Pattern):
        return f"names matching {bound.pattern}"
    if isinstance(bound, (set, frozenset)):
        return "one or more of " + ", ".join(sorted(bound))
    low, high = bound
    return (f">= {low}" if high is None else f"<= {high}" if low is None else f"{low} to {high}")


def _same_kind(expected, value) -> bool:
    if isinstance(expected, bool) or isinstance(value, bool):
        return isinstance(expected, bool) and isinstance(value, bool)
    if isinstance(expected, float):
        return isinstance(value, (int, float))
    if isinstance(expected, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(expected))
