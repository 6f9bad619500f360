"""A record measured on a dirty tree is refused by name when it would land in results/, unless --allow-dirty; the
dirty check covers every tracked input that can change a result, not the library alone."""
import json

import pytest

from dynatree_lib.harness import environment as env_mod
from dynatree_lib.harness import store as store_mod
from dynatree_lib.harness.store import ALLOW_DIRTY, ResultStore, write_report

DIRTY = {"git_commit": "abc1234", "git_dirty": True, "git_dirty_files": ["tools/head_cost.py"]}


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "RESULTS", tmp_path / "results")
    monkeypatch.delenv(ALLOW_DIRTY, raising=False)
    return tmp_path / "results" / "cpu"


def test_a_dirty_record_is_refused_in_results_and_names_what_was_dirty(results):
    store = ResultStore(results / "main.json")
    with pytest.raises(ValueError, match=r"main.json: refusing to write a record measured on a dirty tree "
                                         r"\(changed since abc1234: tools/head_cost.py\).*--allow-dirty"):
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
