"""A record measured on a dirty tree is refused by name when it would land in results/, unless --allow-dirty; the
dirty check covers every tracked input that can change a result, not the library alone."""
import json

import pytest

from dynatree_lib.harness.measure import environment as env_mod
from dynatree_lib.harness.measure import store as store_mod
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.harness.measure.store import ALLOW_DIRTY, ResultStore, results_path, write_report

DIRTY = {"git_commit": "abc1234", "git_dirty": True, "git_dirty_files": ["tools/forward_bench.py"]}


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "RESULTS", tmp_path / "results")
    monkeypatch.delenv(ALLOW_DIRTY, raising=False)
    return tmp_path / "results" / "cpu"


def test_a_dirty_record_is_refused_in_results_and_names_what_was_dirty(results):
    store = ResultStore(results / "main.json")
    with pytest.raises(ValueError, match=r"main.json: refusing to write a record measured on a dirty tree "
                                         r"\(changed since abc1234: tools/forward_bench.py\).*--allow-dirty"):
        store.add({"key": "k", "environment": DIRTY})
    with pytest.raises(ValueError, match="dirty tree"):
        write_report(results / "costs.json", {"environment": DIRTY})
    assert not (results / "main.json").exists() and not (results / "costs.json").exists()


def test_allow_dirty_keeps_it_marked(results, monkeypatch):
    monkeypatch.setenv(ALLOW_DIRTY, "1")
    ResultStore(results / "main.json").add({"key": "k", "environment": DIRTY})
    assert json.loads((results / "main.json").read_text())["records"][0]["environment"]["git_dirty"] is True


def test_clean_records_and_records_outside_results_are_written(results, tmp_path):
    ResultStore(results / "main.json").add({"key": "k", "environment": {**DIRTY, "git_dirty": False}})
    ResultStore(tmp_path / "scratch.json").add({"key": "k", "environment": DIRTY})
    assert ResultStore(results / "main.json").get("k") and ResultStore(tmp_path / "scratch.json").get("k")


def test_the_dirty_check_covers_every_input_of_a_result():
    for path in ("dynatree_lib", "tools", "notebooks/*.py", "data", "weights", "run_all.sh", "requirements.txt"):
        assert path in env_mod.RESULT_INPUTS
    assert ":(exclude,glob)weights/*/README.md" in env_mod.RESULT_INPUTS  # cards are rendered from records


def test_git_state_lists_a_changed_tool(tmp_path, monkeypatch):
    import subprocess

    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "results").mkdir()
    (repo / "tools" / "t.py").write_text("x = 1\n")
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(env_mod, "REPO", repo)
    assert env_mod.git_state()[1] == []
    (repo / "results" / "r.json").write_text("{}")  # outputs do not make a tree dirty
    assert env_mod.git_state()[1] == []
    (repo / "tools" / "t.py").write_text("x = 2\n")
    assert env_mod.git_state()[1] == ["tools/t.py"]


def test_a_file_holds_one_machine_kinds_records(results):
    """A record of one machine kind is refused in a file of another's, with the folder it belongs in named."""
    amd = {"git_dirty": False, "device_name": "AMD EPYC 9R14"}
    intel = {"git_dirty": False, "machine": {"kind": "intel-amx"}}
    store = ResultStore(results / "talon.json")
    store.add({"key": "a", "environment": amd})
    with pytest.raises(ValueError, match=r"holds records measured on amd-avx512bf16; this one was measured on "
                                         r"intel-amx: measure into its own folder with --set machine=intel-amx "
                                         r"\(results/cpu@intel-amx/\)"):
        store.add({"key": "b", "environment": intel})
    write_report(results / "costs.json", {"environment": amd})
    with pytest.raises(ValueError, match="--set machine=intel-amx"):
        write_report(results / "costs.json", {"environment": intel})
    write_report(results / "costs.json", {"environment": intel}, replace=True)  # a rerun replaces the file
    assert json.loads((results / "costs.json").read_text())["environment"] == intel
    assert json.loads((results / "costs.bak.json").read_text())["environment"] == amd


def test_a_machine_kinds_records_live_in_their_own_folder():
    from dynatree_lib.harness.setup.machine import describe, kind_of
    from dynatree_lib.harness.setup.profiles import get_profile
    from dynatree_lib.harness.measure.store import results_path

    assert results_path("costs", get_profile("cpu")).parent.name == "cpu"
    assert results_path("costs", get_profile("cpu", machine="intel-amx")).parent.name == "cpu@intel-amx"
    assert kind_of("amd", ["avx512f", "avx512_bf16"]) == "amd-avx512bf16"
    assert kind_of("intel", ["avx512_bf16", "amx_tile", "amx_bf16"]) == "intel-amx"
    cpu = describe()
    assert set(cpu) == {"vendor", "model", "kind", "isa_flags", "cores",
                        "l3_kib", "cpu_family", "cpu_model"} and cpu["kind"].startswith(cpu["vendor"])


def test_another_machine_kind_tunes_only_where_its_tuning_was_begun(tmp_path):
    """On the reference machine an experiment runs its tuning first; another kind adopts the reference's settings
    until its own tuning file exists (begun with ``bench --experiment talon_tuning --set machine=...``)."""
    from dynatree_lib.harness.experiments.catalog import tunes_here

    ref, amx = get_profile("cpu"), get_profile("cpu", machine="intel-amx")
    assert tunes_here("talon_tuning", ref, tmp_path) and not tunes_here("talon_tuning", amx, tmp_path)
    own = results_path("talon_tuning", amx, tmp_path)
    own.parent.mkdir(parents=True)
    own.write_text("{}")
    assert tunes_here("talon_tuning", amx, tmp_path)
