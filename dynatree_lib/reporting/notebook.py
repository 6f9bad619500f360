"""Notebook helpers: every notebook's header (``start``: its profile, and the modules notebooks use, importable from
here in one line) and showing a table or figure while saving it under ``figures/<profile>/`` (Markdown + LaTeX,
PNG + PDF). Everything shown is computed from logged JSON by ``tables`` and ``plots``."""
from __future__ import annotations

from pathlib import Path

from ..harness import experiments
from ..harness.paths import FIGURES
from ..harness.profiles import Profile, get_profile
from ..harness.store import results_path
from . import plots, tables
from .plots import save as save_fig
from .tables import save as save_table

__all__ = ["experiments", "plots", "tables", "results_path", "start", "show_table", "show_fig", "figures_dir"]


def start(profile: str, overrides: dict | None = None) -> Profile:
    """A notebook's profile: the one its ``profile`` parameter names, with its ``overrides`` (``get_profile``)."""
    return get_profile(profile, **(overrides or {}))


def figures_dir(profile) -> Path:
    return FIGURES / profile.name


def show_table(t, name: str, profile) -> None:
    from IPython.display import Markdown, display

    display(Markdown(save_table(t, name, figures_dir(profile))))


def show_fig(fig, name: str, profile) -> None:
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    display(Image(filename=str(save_fig(fig, name, figures_dir(profile)))))
    plt.close(fig)
