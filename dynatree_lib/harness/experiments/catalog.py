"""The experiment registry, and the one runner that measures any experiment into JSON.

An experiment is declared once: a subclass of ``Experiment`` in a module of its own (``main``, ``control``, ...),
holding its cells, its prompt counts, the profile it measures with, whether its replicates run in fresh processes
and which tuning it reads; registered by ``@experiment``, which refuses a duplicate name and a class that measures
nothing. A one-document experiment (``Document``) makes its JSON itself; a ``Sequence`` runs others in turn. Bench,
plan, the queue, the notebooks and the CLI find an experiment here by name, and nothing compares a name to decide
what to do. Importing ``harness.experiments`` registers every experiment of the harness; the package's
``__init__`` also imports ``train.reports`` (the reports that read the training text), so the registry is the same
whatever was imported.

A cell runs one registered method in one of its variants (``setup.variants``); its record's key (``cell_key``)
hashes the method, the variant, the configuration, the tags and the protocol, never what tables call the cell.
Every notebook calls ``run(name, profile)``, which measures the cells its JSON lacks and returns the path;
``render_only=True`` refuses to measure anything (rebuilding tables and figures from JSON alone).
"""
from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, ClassVar

from ..measure import load
from ..measure.bench import measurable, measure_cells, unmeasurable
from ..measure.cell import Cell
from ..measure.store import ResultStore, archive_for_rerun, config_dict, record_key, results_path
from ..setup.profiles import Profile, check_part
from ..setup.splits import CATEGORIES
from ..setup.workloads import count


@dataclasses.dataclass(frozen=True)
class Settings:
    """Base of an experiment's own settings (``Experiment.settings``): a frozen dataclass whose ``part`` is the
    experiment's name, every field checked as a profile part's are (``check_part``; ``positive`` names the counts
    that must be >= 1, every other count >= 0)."""

    part: ClassVar[str] = ""
    positive: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        check_part(self, positive=set(self.positive))


@dataclasses.dataclass(frozen=True)
class PromptSettings(Settings):
    """Settings that count an experiment's sealed test prompts (``CountsOwnPrompts``): ``n_prompts`` per workload
    without categories (0: none), ``n_questions`` per Spec-Bench category. A subclass may change the defaults."""

    n_prompts: int = 0
    n_questions: int = 1


class Experiment:
    """One experiment, measured as cells into ``results/<profile>/<name>.json``. Every hook has a default; a
    subclass sets ``name`` and overrides ``cells`` at least."""

    name: ClassVar[str] = ""
    notebook: ClassVar[str | None] = None  # the notebook that measures it (``plan`` counts it there); None: bench only
    in_process: ClassVar[bool] = False  # each replicate measured in a fresh Python process
    tuning: ClassVar[str | None] = None  # the tuning whose settings it reads, measured first where it has cells here
    picks_settings: ClassVar[bool] = False  # a tuning: it reads no tuned setting (``plan`` prices its cells as is)
    settings: ClassVar[type | None] = None  # its own settings: a ``Settings`` dataclass whose ``part`` is its name

    def settings_of(self, p: Profile):
        """Its settings on ``p``: the dataclass's defaults with the fields ``p`` sets (``Profile.settings``,
        ``--set <experiment>.<field>=...``), checked: an unknown field, or one of the wrong kind, is refused by name."""
        given = p.settings_for(self.name)
        if self.settings is None:
            if given:
                raise ValueError(f"experiment {self.name!r} has no settings of its own; profile {p.name!r} sets "
                                 f"{', '.join(f'{self.name}.{k}' for k in sorted(given))}")
            return None
        known = {f.name for f in dataclasses.fields(self.settings)}
        if unknown := sorted(set(given) - known):
            raise ValueError(f"unknown setting {self.name}.{unknown[0]}; {self.name}'s settings are "
                             f"{', '.join(sorted(known))}")
        return self.settings(**given)

    def cells(self, p: Profile, root: Path | None = None) -> list[Cell]:
        return []

    def applies(self, p: Profile, root: Path | None = None) -> bool:
        """Whether the profile has any cell of it (a profile without temperatures samples nothing)."""
        return bool(self.cells(p, root))

    def prompts(self, p: Profile, cell: Cell) -> int:
        """Prompts per cell: the protocol's, per continuation workload or per Spec-Bench category."""
        return count(cell.dataset, p.protocol.n_prompts, p.protocol.n_questions)

    def profile(self, p: Profile) -> Profile:
        """The profile the experiment measures with (another draft, its own workloads)."""
        return p

    def before(self, p: Profile, *, rerun: bool, root: Path | None, render_only: bool) -> None:
        """What must be measured first, besides the tuning (``tuning``)."""

    def measure(self, p: Profile, todo: list, path: Path) -> None:
        """Measure the missing (cell, key) pairs ``todo`` into ``path``."""
        measure_cells(self.name, p, todo, path, {k: self.prompts(p, c) for c, k in todo})

    def planned(self, p: Profile, cells: list[Cell]) -> list[tuple[Cell, int]]:
        """(cell, generations) of a whole run, for ``plan``: ``cells`` are this experiment's, with stand-in
        settings where nothing is tuned yet; warm-up generations included."""
        per_category = len(set(CATEGORIES.values()))
        return [(c, self.prompts(p, c) * count(c.dataset, 1, per_category) + p.protocol.warmup) for c in cells]

    def run(self, profile: Profile, *, rerun: bool = False, root: Path | None = None, render_only: bool = False,
            replicate: int | None = None):
        """Measure every cell the JSON lacks (``measure_experiment``); returns the JSON path."""
        return measure_experiment(self, profile, rerun=rerun, root=root, render_only=render_only,
                                  replicate=replicate)


class CountsOwnPrompts(Experiment):
    """An experiment whose prompt counts are its own settings' (a ``PromptSettings``), not the protocol's."""

    def prompts(self, p: Profile, cell: Cell) -> int:
        own = self.settings_of(p)
        return count(cell.dataset, own.n_prompts, own.n_questions)


class PicksSettings(Experiment):
    """A tuning: it measures candidate settings on the tuning prompts (``Tuning.n`` per workload without categories,
    ``Tuning.n_questions`` per Spec-Bench category) and reads no tuned setting itself."""

    picks_settings = True

    def prompts(self, p: Profile, cell: Cell) -> int:
        return count(cell.dataset, p.tuning.n, p.tuning.n_questions)


class Document(Experiment):
    """An experiment that makes one JSON document (not a table of cells): ``make(profile, rerun=, root=,
    render_only=) -> Path``."""

    make: ClassVar[Callable]

    def applies(self, p: Profile, root: Path | None = None) -> bool:
        return True

    def run(self, profile: Profile, *, rerun: bool = False, root: Path | None = None, render_only: bool = False,
            replicate: int | None = None) -> Path:
        return type(self).make(profile, rerun=rerun, root=root, render_only=render_only)


class Sequence(Experiment):
    """Experiments run one after another (``parts``, each measuring what it lacks); returns their paths."""

    parts: ClassVar[tuple[str, ...]] = ()

    def run(self, profile: Profile, *, rerun: bool = False, root: Path | None = None, render_only: bool = False,
            replicate: int | None = None) -> list:
        return [run(n, profile, rerun=rerun, root=root, render_only=render_only) for n in self.parts]


EXPERIMENTS: dict[str, Experiment] = {}


def experiment(cls: type) -> type:
    """Register ``cls`` (an ``Experiment`` subclass) under its ``name``: a duplicate name, a class of another kind
    or one that measures nothing is refused by name."""
    if not (isinstance(cls, type) and issubclass(cls, Experiment)):
        raise TypeError(f"@experiment registers Experiment subclasses, got {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name:
        raise TypeError(f"experiment {cls.__qualname__} has no name (class attribute `name`)")
    if name in EXPERIMENTS:
        raise ValueError(f"experiment {name!r} is registered twice: {type(EXPERIMENTS[name]).__qualname__} and "
                         f"{cls.__qualname__}")
    kinds = {Document: "make", Sequence: "parts"}
    for base, attr in kinds.items():
        if issubclass(cls, base) and not vars(cls).get(attr):
            raise TypeError(f"experiment {name!r} ({cls.__qualname__}) is a {base.__name__} without `{attr}`")
    if not issubclass(cls, tuple(kinds)) and cls.cells is Experiment.cells:
        raise TypeError(f"experiment {name!r} ({cls.__qualname__}) measures nothing: it overrides neither `cells` "
                        "nor `run`")
    if cls.settings is not None and not (isinstance(cls.settings, type) and issubclass(cls.settings, Settings)
                                         and cls.settings.part == name):
        raise TypeError(f"experiment {name!r}: `settings` must be a Settings dataclass whose `part` is {name!r}")
    if issubclass(cls, CountsOwnPrompts) and not (cls.settings and issubclass(cls.settings, PromptSettings)):
        raise TypeError(f"experiment {name!r} counts its own prompts: its `settings` must be a PromptSettings")
    for attr in ("notebook", "tuning"):
        if not isinstance(getattr(cls, attr), (str, type(None))):
            raise TypeError(f"experiment {name!r}: `{attr}` must be a name or None, got {getattr(cls, attr)!r}")
    EXPERIMENTS[name] = cls()
    return cls


def get(name: str) -> Experiment:
    """The registered experiment ``name``; an unknown name is refused with the known ones."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(sorted(EXPERIMENTS))}")
    return EXPERIMENTS[name]


def names() -> list[str]:
    return sorted(EXPERIMENTS)


def check_settings(p: Profile) -> Profile:
    """``p`` once every experiment setting it holds is known and of its kind (``Experiment.settings_of``); a setting
    of no registered experiment is refused by name. The CLI and the notebooks check before anything loads."""
    for name, _ in p.settings:
        get(name).settings_of(p)
    return p


def run(name: str, profile: Profile, *, rerun: bool = False, root: Path | None = None, render_only: bool = False,
        replicate: int | None = None):
    """Experiment ``name`` (``Experiment.run``): measures what its JSON lacks; returns its path (a ``Sequence``: its
    parts' paths)."""
    return get(name).run(profile, rerun=rerun, root=root, render_only=render_only, replicate=replicate)


def cells(name: str, p: Profile, root: Path | None = None) -> list[Cell]:
    """Experiment ``name``'s cells on ``p`` (as given: ``measuring_profile`` is the one it measures with)."""
    return get(name).cells(p, root)


def prompts(name: str, p: Profile, cell: Cell) -> int:
    """Prompts per cell of experiment ``name`` (``Experiment.prompts``)."""
    return get(name).prompts(p, cell)


def measuring_profile(name: str, p: Profile) -> Profile:
    """The profile experiment ``name`` measures with (``Experiment.profile``)."""
    return get(name).profile(p)


def cell_key(name: str, p: Profile, c: Cell) -> str:
    """A cell's record key in experiment ``name`` (``p``: the profile it measures with): a hash of everything that
    defines the cell (``key_parts``)."""
    return record_key(**key_parts(get(name).prompts(p, c), p, c))


def key_parts(n: int, p: Profile, c: Cell) -> dict:
    """What a record key hashes: the profile's models and protocol, the cell's prompt count ``n``, method, variant,
    configuration, tags, workload, lengths, precision and sampling law; never what tables call it."""
    m, s = p.models, c.sampling
    return dict(profile=p.name, target=m.target, draft=c.draft or m.draft, dtype=c.dtype, engine=str(m.engine),
                kv=p.protocol.kv_mode, seed=p.prompt_seed(c.split), n=n, warmup=p.protocol.warmup,
                ds=c.dataset, method=c.method, variant=c.variant, config=config_dict(c.config), T=c.T, L=c.L_max,
                tags=c.tags, split=c.split, lookup=c.lookup and m.draft_lookup, temperature=s.temperature,
                top_k=s.top_k, top_p=s.top_p, max_prompt=p.protocol.max_prompt,
                **({"draft_vocab": m.draft_vocab} if m.draft_vocab else {}),
                **({"control": config_dict(c.control)} if c.control is not None else {}))


def missing(name: str, profile: Profile, root: Path | None = None, replicate: int | None = None) -> list:
    """(cell, key) of every cell of ``name`` (of one replicate, if given) that its JSON lacks."""
    measuring = get(name).profile(profile)
    store = ResultStore(results_path(name, measuring, root))
    cells = [c for c in get(name).cells(measuring, root)
             if replicate is None or c.tags.get("replicate", 0) == replicate]
    return [(c, k) for c in cells if store.get(k := cell_key(name, measuring, c)) is None]


def measures(name: str, profile: Profile, root: Path | None = None) -> bool:
    """Whether the profile has any cell of experiment ``name`` (``Experiment.applies``)."""
    return get(name).applies(profile, root)


def tunes_here(tuning: str, profile: Profile, root: Path | None = None) -> bool:
    """Whether an experiment runs its tuning first: always on the reference machine; on another machine kind only
    where that kind's tuning was begun (``bench --experiment <tuning> --set machine=...``), else it adopts the
    reference's settings and says so (``tuning.machine_tuning``)."""
    return profile.models.machine is None or results_path(tuning, profile, root).exists()


def measure_experiment(exp: Experiment, profile: Profile, *, rerun: bool, root: Path | None, render_only: bool,
                       replicate: int | None) -> Path:
    """Measure every cell of ``exp`` that its JSON lacks, after its ``before`` and its tuning; returns the JSON
    path. In-process experiments measure each replicate in a fresh Python process unless ``replicate`` names one.
    Cells of a method this machine cannot run (``Method.unavailable``) are not measured, and an experiment holding
    such cells is not archived by ``rerun``: its committed records stay and render."""
    name = exp.name
    path = results_path(name, profile, root)
    if rerun and not render_only and (lacking := unmeasurable(exp.cells(profile, root))):
        print(f"rerun of {name!r} skipped, its records kept: this machine cannot measure {sorted(lacking)}")
        rerun = False
    archive_for_rerun(path, rerun, render_only)
    exp.before(profile, rerun=rerun, root=root, render_only=render_only)
    if exp.tuning and measures(exp.tuning, profile, root) and tunes_here(exp.tuning, profile, root):
        run(exp.tuning, profile, root=root, render_only=render_only)
    todo = missing(name, profile, root, replicate)
    if todo and render_only:
        raise FileNotFoundError(f"render-only: {len(todo)} cell(s) of '{name}' are missing from {path}; "
                                "run without --render first")
    if not (todo := measurable(name, todo, profile)):
        return path
    check_machine(profile)
    load.guard(profile, f"{profile.name}/{name}")
    if exp.in_process and replicate is None:
        for r in sorted({c.tags.get("replicate", 0) for c, _ in todo}):
            in_fresh_process(name, profile, root, r)
    else:
        exp.measure(exp.profile(profile), todo, path)
    return path


def check_machine(profile: Profile) -> None:
    """Refuse to measure a profile named for another machine kind than this one (``Models.machine``)."""
    from ..setup.machine import here

    if profile.models.machine is not None and profile.models.machine != here():
        raise ValueError(f"machine={profile.models.machine!r} names the records of that machine kind, but this "
                         f"machine is {here()!r}: measure with --set machine={here()} (or without machine on the "
                         "profile's reference machine)")


def in_fresh_process(name: str, profile: Profile, root: Path | None, replicate: int) -> None:
    """Run one replicate of an experiment in a new Python process (``experiments.replicate``, its output streamed
    here), part of this run (``load.child_env``)."""
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as f:
        pickle.dump((name, profile, root, replicate), f)
    cmd = [sys.executable, "-m", "dynatree_lib.harness.experiments.replicate", f.name]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=load.child_env()) as proc:
        for line in proc.stdout:
            print(line, end="", flush=True)
    Path(f.name).unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"replicate {replicate} of {name!r} failed (exit {proc.returncode}); see the output above")
