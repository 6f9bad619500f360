"""Whether setup.sh installs this checkout as the ``dynatree`` package (``pip install -e .``): exit 0 to install, 1
to leave the environment as it is. Prints one line that says what setup.sh does and why.

It installs only into a virtual environment (``sys.prefix != sys.base_prefix``) that holds no other install of
``dynatree``: an editable install of another checkout is that checkout's, and re-pointing it would make its
``import dynatree_lib`` load this code. Nothing needs the install: ``run_all.sh`` and ``test.sh`` put the checkout
on ``PYTHONPATH``. An editable install whose folder no longer exists (a deleted clone) belongs to no checkout and is
replaced. ``--pip-flags`` prints the flags the install takes instead (``build_flags``). Uses only the standard
library.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlparse
from urllib.request import url2pathname

DIST = "dynatree"  # the distribution's name (pyproject.toml), not the import package's
CHECKOUT = Path(__file__).resolve().parents[1]
WITHOUT = "./run_all.sh and ./test.sh use this checkout through PYTHONPATH"


class Install(NamedTuple):
    """An install of ``dynatree`` in the environment: its version and, for an editable install, the folder it
    points at (None for any other install: a wheel, a plain ``pip install .``)."""
    version: str
    source: Path | None = None


def editable_source(direct_url: str | None) -> Path | None:
    """The folder an editable install points at, from its ``direct_url.json`` (PEP 610); None for any other."""
    if not direct_url:
        return None
    info = json.loads(direct_url)
    url = urlparse(info.get("url", ""))
    if not info.get("dir_info", {}).get("editable") or url.scheme != "file":
        return None
    return Path(url2pathname(url.path))


def installed(paths: list[str] | None = None) -> Install | None:
    """The ``dynatree`` installed in this environment's site-packages (not one on ``PYTHONPATH`` or in the working
    folder), or None."""
    paths = paths or sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    for dist in metadata.distributions(name=DIST, path=paths):
        return Install(dist.version, editable_source(dist.read_text("direct_url.json")))
    return None


def in_venv() -> bool:
    return sys.prefix != sys.base_prefix


def build_flags() -> str:
    """pip's flags for the install: ``--no-build-isolation`` where the environment's setuptools can build the
    editable wheel itself, offline; else none, and pip builds with a setuptools it fetches."""
    try:
        setuptools = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        setuptools = None
    return offline_flag(setuptools, importlib.util.find_spec("wheel") is not None)


def offline_flag(setuptools: str | None, has_wheel: bool) -> str:
    """``--no-build-isolation`` for setuptools 70.1 and later, or 64 and later with ``wheel`` installed (before
    70.1 setuptools builds wheels through it, and a fresh venv has none); else nothing."""
    try:
        version = tuple(int(x) for x in (setuptools or "").split(".")[:2])
    except ValueError:  # a pre-release's odd spelling: let pip fetch one
        return ""
    return "--no-build-isolation" if version >= (70, 1) or (version >= (64, 0) and has_wheel) else ""


def decide(checkout: Path, venv: bool, install: Install | None) -> tuple[bool, str]:
    """(install it?, the line setup.sh prints) for this checkout, in a virtual environment or not, next to what is
    installed there."""
    if not venv:
        return False, f"[setup] not in a virtual environment: dynatree is not installed; {WITHOUT}"
    if install is None:
        return True, "[setup] installing dynatree editable from this checkout (pip install -e .)"
    if install.source is None:
        return False, (f"[setup] dynatree {install.version} is installed here, not from a checkout: left as it is; "
                       f"{WITHOUT}")
    if install.source.resolve() == checkout.resolve():
        return False, "[setup] dynatree is installed editable from this checkout"
    if not install.source.exists():
        return True, (f"[setup] dynatree's editable install points at {install.source}, which is gone: installing "
                      "this checkout")
    return False, (f"[setup] dynatree is installed editable from another checkout ({install.source}): left as it is; "
                   f"{WITHOUT}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--pip-flags"]:
        print(build_flags())
        sys.exit(0)
    go, line = decide(CHECKOUT, in_venv(), installed())
    print(line)
    sys.exit(0 if go else 1)
