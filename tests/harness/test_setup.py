"""setup.sh's editable install (``tools/editable_install.py``): made only into a virtual environment that holds no
other checkout's ``dynatree``, otherwise nothing is installed and one line says why; pip's errors are not hidden.
The decision is tested without pip, on the function and on the script in throwaway environments whose installs are
written by hand."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, load_tool

tool = load_tool("editable_install")
Install = tool.Install


def test_the_helper_knows_its_checkout():
    assert tool.CHECKOUT == REPO.resolve()


@pytest.mark.parametrize("venv, install, go, says", [
    (False, None, False, "not in a virtual environment"),
    (False, "this", False, "not in a virtual environment"),
    (True, None, True, "installing dynatree editable from this checkout"),
    (True, "this", False, "installed editable from this checkout"),
    (True, "other", False, "another checkout"),
    (True, "gone", True, "which is gone: installing this checkout"),
    (True, "wheel", False, "not from a checkout: left as it is"),
])
def test_installs_only_into_a_venv_without_another_checkout(tmp_path, venv, install, go, says):
    other = tmp_path / "other"
    other.mkdir()
    installs = {None: None, "this": Install("0.1.0", REPO), "other": Install("0.1.0", other),
                "gone": Install("0.1.0", tmp_path / "deleted"), "wheel": Install("0.1.0")}
    decided, line = tool.decide(REPO, venv, installs[install])
    assert decided is go and says in line and line.startswith("[setup] ") and "\n" not in line
    if not go and install != "this":
        assert "PYTHONPATH" in line  # what the scripts use instead


def test_editable_source_reads_direct_url(tmp_path):
    editable = json.dumps({"url": tmp_path.as_uri(), "dir_info": {"editable": True}})
    assert tool.editable_source(editable) == tmp_path
    assert tool.editable_source(json.dumps({"url": tmp_path.as_uri(), "dir_info": {}})) is None  # pip install .
    assert tool.editable_source(json.dumps({"url": "https://example.org/d.whl", "archive_info": {}})) is None
    assert tool.editable_source(None) is None  # from an index: no direct_url.json


@pytest.mark.parametrize("setuptools, has_wheel, flag", [
    ("80.9.0", False, "--no-build-isolation"), ("70.1.0", False, "--no-build-isolation"),
    ("65.5.0", True, "--no-build-isolation"), ("65.5.0", False, ""),  # a fresh 3.11 venv: pip fetches setuptools
    ("63.2.0", True, ""), (None, False, ""),
])
def test_builds_offline_only_where_the_environments_setuptools_can(setuptools, has_wheel, flag):
    assert tool.offline_flag(setuptools, has_wheel) == flag


def fake_install(site: Path, source: Path | None) -> None:
    """A ``dynatree`` distribution's metadata as pip writes it, editable from ``source`` (None: from an index)."""
    info = site / "dynatree-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dynatree\nVersion: 0.1.0\n")
    if source is not None:
        (info / "direct_url.json").write_text(json.dumps({"url": source.as_uri(), "dir_info": {"editable": True}}))


def test_installed_reads_the_environments_site_packages(tmp_path):
    assert tool.installed([str(tmp_path)]) is None
    fake_install(tmp_path, REPO)
    assert tool.installed([str(tmp_path)]) == Install("0.1.0", REPO)


def venv(path: Path) -> tuple[Path, Path]:
    """A throwaway virtual environment (no pip): its interpreter and its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    return python, Path(site)


def decision(python: Path) -> tuple[int, str]:
    """setup.sh's call: the helper's exit status (0: install) and its line."""
    run = subprocess.run([str(python), str(REPO / "tools" / "editable_install.py")], capture_output=True, text=True,
                         cwd=REPO)
    return run.returncode, run.stdout.strip()


@pytest.mark.parametrize("installed, go, says", [
    (None, 0, "installing dynatree editable"),
    ("this", 1, "from this checkout"),
    ("other", 1, "another checkout"),
])
def test_setup_decides_in_a_real_venv(tmp_path, installed, go, says):
    python, site = venv(tmp_path / "venv")
    other = tmp_path / "other"
    other.mkdir()
    if installed:
        fake_install(site, REPO if installed == "this" else other)
    status, line = decision(python)
    assert status == go and says in line


def test_setup_installs_nothing_outside_a_venv():
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not base.exists():
        pytest.skip(f"needs the base interpreter {base}")
    status, line = decision(base)
    assert status == 1 and "not in a virtual environment" in line


def test_setup_sh_shows_pips_errors_and_asks_the_helper():
    text = (REPO / "setup.sh").read_text()
    install = [line for line in text.splitlines() if "-e ." in line and "pip install" in line]
    assert install and not any("2>" in line or "|| true" in line for line in install)
    assert 'if "$PY" tools/editable_install.py; then' in text
