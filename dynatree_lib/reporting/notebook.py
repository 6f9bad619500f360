"""Notebook helpers: show a table or figure and save it under ``figures/<profile>/`` (Markdown + LaTeX,
PNG + PDF). Everything shown is computed from logged JSON by ``tables`` and ``plots``."""
from __future__ import annotations

from pathlib import Path

from ..harness.paths import FIGURES
from .plots import save as save_fig
from .tables import save as save_table


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
