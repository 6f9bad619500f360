"""Notebook helpers: every notebook's header (``start``: its profile, and the modules notebooks use, importable from
here in one line) and showing a table or figure while saving it under ``figures/<profile>/`` (Markdown + LaTeX,
PNG + PDF). Everything shown is computed from logged JSON by ``tables`` and ``plots``."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..harness.experiments import catalog as experiments
from ..harness.setup.paths import FIGURES, RESULTS
from ..harness.setup.profiles import Profile, get_profile, with_setting
from ..harness.measure.store import results_path
from . import plots, tables
from .plots import save as save_fig
from .tables import save as save_table

__all__ = ["experiments", "plots", "tables", "results_path", "start", "show_table", "show_fig", "figures_dir",
           "machines", "on_machine"]


def start(profile: str, overrides: dict | None = None) -> Profile:
    """A notebook's profile: the one its ``profile`` parameter names, with its ``overrides`` (``get_profile``; an
    experiment's own settings checked by it, ``catalog.check_settings``)."""
    return experiments.check_settings(get_profile(profile, **(overrides or {})))


def figures_dir(profile) -> Path:
    return FIGURES / profile.name


def machines(profile) -> tuple[str, ...]:
    """The other machine kinds whose records of this profile are committed (``results/<profile>@<kind>/``), sorted."""
    return tuple(sorted(p.name.split("@", 1)[1] for p in RESULTS.glob(f"{profile.name}@*") if p.is_dir()))


def on_machine(profile: Profile, kind: str) -> Profile:
    """``profile`` reading the records of machine kind ``kind`` (``Models.machine``), at the settings they were
    measured at (``Profile.kind_settings``)."""
    settings = profile.settings
    for experiment, fields in dict(profile.kind_settings).get(kind, ()):
        for field, value in fields:
            settings = with_setting(settings, experiment, field, value)
    return dataclasses.replace(profile, settings=settings, models=dataclasses.replace(profile.models, machine=kind))


def named(name: str, profile) -> str:
    """A table's or figure's file name: another machine kind's carry its kind (``table_heads@intel-amx``)."""
    return name if profile.models.machine is None else f"{name}@{profile.models.machine}"


def show_table(t, name: str, profile) -> None:
    from IPython.display import Markdown, display

    display(Markdown(save_table(t, named(name, profile), figures_dir(profile))))


def show_fig(fig, name: str, profile) -> None:
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    display(Image(filename=str(save_fig(fig, named(name, profile), figures_dir(profile)))))
    plt.close(fig)
