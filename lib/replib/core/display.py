"""Notebook helpers: plotting style, progress bars, showing a lib function's source."""

from __future__ import annotations

import importlib.util
import inspect
import os

import matplotlib as mpl
import seaborn as sns


def set_style() -> None:
    """The book's figure style: seaborn's whitegrid theme, compact figures, no titles (captions
    instead); tables show long text cells in full."""
    import pandas as pd

    pd.set_option("display.max_colwidth", 200)
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    mpl.rcParams.update({"figure.figsize": (6.4, 3.6), "figure.dpi": 100, "lines.linewidth": 2,
                         "axes.titlesize": "medium", "savefig.bbox": "tight"})


def progress(iterable=None, **kwargs):
    """A tqdm progress bar: a widget where ipywidgets exists, plain text otherwise; switched off
    where nobody watches (REPLIB_PROGRESS=0: the book build, the test run). Batch runs set
    REPLIB_PROGRESS=lines: the bar then prints a plain line to stderr, marked PROGRESS_MARK, at most every
    LINES_INTERVAL seconds and once at the end, which `replib run` shows as the run's progress."""
    mode = os.environ.get("REPLIB_PROGRESS")
    if mode == "lines":
        import sys

        from tqdm import tqdm

        kwargs.update(leave=True, mininterval=LINES_INTERVAL, file=_MarkedLines(sys.stderr),
                      desc=f"{kwargs['desc']}: " if kwargs.get("desc") else "",
                      bar_format="{desc}{n_fmt}/{total_fmt} done ({elapsed} elapsed, about {remaining} left)")
        return tqdm(iterable, **kwargs)
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    kwargs.setdefault("leave", False)
    kwargs.setdefault("disable", mode == "0")
    return tqdm(iterable, **kwargs)


PROGRESS_MARK = "[replib progress] "
LINES_INTERVAL = 10.0


class _MarkedLines:
    """A file for tqdm that turns each redraw ("\\r" + bar) into one marked, complete line."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        for part in text.replace("\r", "\n").split("\n"):
            if part.strip():
                self.stream.write(PROGRESS_MARK + part.strip() + "\n")
        self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()


def show_source(obj) -> object:
    """Show the source of a function or class of replib, highlighted, as the notebook's cell output."""
    from IPython.display import Code

    return Code(inspect.getsource(obj), language="python")
