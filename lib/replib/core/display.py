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
    where nobody watches (REPLIB_PROGRESS=0: the book build, the test run, batch runs)."""
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    kwargs.setdefault("leave", False)
    kwargs.setdefault("disable", os.environ.get("REPLIB_PROGRESS") == "0")
    return tqdm(iterable, **kwargs)


def show_source(obj) -> object:
    """Show the source of a function or class of replib, highlighted, as the notebook's cell output."""
    from IPython.display import Code

    return Code(inspect.getsource(obj), language="python")
