"""Notebook sources are readable text (jupytext percent .py) paired with the .ipynb papermill runs; the
nbval copies stay in sync with the sources; the README, RESULTS.md and FINDINGS.md name only produced files."""
import json
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.py"))


def all_cells(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]


def produced_names() -> set[str]:
    names = set()
    for src in SOURCES:
        text = src.read_text()
        names |= set(re.findall(r"[\"'](\w+)[\"'],\s*(?:prof|on_kind)\)", text))  # show_table(..., "name", prof)
    return names


def test_numbered_notebooks():
    assert [p.name[:2] for p in SOURCES] == [f"{i:02d}" for i in range(len(SOURCES))] and len(SOURCES) >= 11


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_ipynb_is_paired_with_its_source(src):
    ipynb = src.with_suffix(".ipynb")
    assert ipynb.exists(), f"missing {ipynb}: run `jupytext --to ipynb notebooks/*.py`"
    assert all_cells(nbformat.read(ipynb, as_version=4)) == all_cells(jupytext.read(src)), \
        f"{ipynb.name} differs from {src.name}: run `jupytext --to ipynb {src}`"


EXECUTED_PROFILES = sorted(p.name for p in (REPO / "executed").iterdir() if p.is_dir())


@pytest.mark.parametrize("profile", EXECUTED_PROFILES)
@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_executed_copy_matches_source(src, profile):
    """Every committed executed notebook (smoke's is nbval's regression copy; the others are what a newcomer's
    render is compared against) holds its source's current cells, prose included."""
    copy = REPO / "executed" / profile / src.with_suffix(".ipynb").name
    command = "./run_all.sh --render" if profile == "cpu" else f"./run_all.sh {profile}"
    assert copy.exists(), f"missing {copy}: run {command}"
    assert all_cells(nbformat.read(copy, as_version=4)) == all_cells(jupytext.read(src)), \
        f"{copy} is stale: run {command}"


# produced in figures/cpu only: notebook 12 needs llama.cpp, the draft versions and draft change tables an earlier
# draft's reports, notebooks 13 and 14 a feature head (only the cpu profile has one)
CPU_ONLY = {"table_peers", "table_peers_r2", "table_peers_best", "fig_peers", "table_draft_versions",
            "table_draft_change", "table_sampling_draft_change", "table_heads", "table_head_pair", "table_head_cost",
            "table_head_vocab", "table_head_memory", "table_head_lookup", "table_head_lookup_weights", "fig_heads_T0",
            "fig_heads_T1", "table_talon_T0", "table_talon_T1", "fig_talon_T0", "fig_talon_T1", "fig_talon_delta_tau",
            "table_talon_reported_vs_reproduced", "table_talon_peer", "table_talon_tuning", "table_talon_budget",
            "table_verification_by_machine",  # only where another machine kind's costs are committed
            "table_forward_steps", "table_forward_phases",  # only where the target runs the fused bf16 forward
            "table_vllm", "table_vllm_r2", "table_vllm_idle", "table_vllm_tuning", "table_vllm_throughput",  # the head
            "table_vllm_schedule", "table_vllm_tpot", "table_vllm_accepted", "fig_vllm_serving",  # vLLM under load
            "table_vllm_plugin", "table_vllm_load_drop",
            "table_frontier", "fig_frontier", "table_frontier_projection", "table_two_verdicts",  # notebook 15: the head
            "table_frontier_kinds",  # only where two machine kinds measured the frontier
            "table_cost_check", "table_cost_check_summary"}


@pytest.mark.parametrize("doc", ["README.md", "RESULTS.md", "FINDINGS.md"])
def test_docs_name_only_produced_files(doc):
    text = (REPO / doc).read_text()
    named = set(re.findall(r"figures/[\w-]+/(\w+)\.(?:png|pdf|md|tex)", text))
    assert named, f"{doc} names no figure or table"
    produced = produced_names()
    assert named <= produced, f"{doc} names files no notebook produces: {named - produced}"
    for name in named:
        where = "cpu" if name in CPU_ONLY else "smoke"
        assert list((REPO / "figures" / where).glob(f"{name}.*")), f"{name} not produced in figures/{where}"


def test_findings_state_results_not_history():
    """FINDINGS.md quotes committed results: no commit ids, no measurement that was never committed."""
    text = (REPO / "FINDINGS.md").read_text()
    commits = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"[a-f]", w) and re.search(r"\d", w)]
    assert not commits, f"FINDINGS.md names commits {commits}: history lives in git"
    assert not re.search(r"\buncommitted\b|\bnot committed\b", text, re.I), "FINDINGS.md quotes an uncommitted run"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.name)
def test_smoke_regression_copy_renders_only(src):
    """nbval re-executes the injected parameters: a copy run with ``--rerun`` would measure results/smoke again
    (and fail against its own stored tables) instead of rendering the committed JSON."""
    copy = REPO / "executed" / "smoke" / src.with_suffix(".ipynb").name
    injected = [c.source for c in nbformat.read(copy, as_version=4).cells
                if "injected-parameters" in c.metadata.get("tags", [])]
    assert not any(re.search(r"^rerun\s*=\s*True", s, re.M) for s in injected), \
        f"{copy} was executed with --rerun: re-render it with ./run_all.sh smoke"


def test_results_page_names_every_commit_its_records_come_from(tmp_path, monkeypatch):
    """A partial re-measurement (records on another commit) is said in the page's header, not hidden."""
    import json

    from dynatree_lib.reporting import results_md

    env = lambda c: {"device_name": "cpu", "cpu_count": 2, "torch_threads": 2, "torch": "t", "transformers": "x",
                     "git_commit": c, "date": "2026-11-25T00:00:00"}
    rec = lambda dtype, role, c: {"dtype": dtype, "tags": {"role": role}, "environment": env(c), "rows": [],
                                  "engine": "e", "target": "a", "draft": "b"}
    (tmp_path / "results" / "p").mkdir(parents=True)
    (tmp_path / "results" / "p" / "main.json").write_text(json.dumps(
        {"records": [rec("bfloat16", "timed", "aaa"), rec("float32", "exact", "bbb")]}))
    monkeypatch.setattr(results_md, "REPO", tmp_path)
    head = results_md._environment("p")
    assert "commit aaa" in head and "float32 records of main.json on commit bbb" in head


@pytest.mark.parametrize("nb", sorted(REPO.glob("executed/*/*.ipynb")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_executed_notebooks_name_no_path_of_the_machine_that_rendered_them(nb):
    """A committed notebook renders the same in any clone (tools/clean_render.sh compares them): what it prints
    names files relative to the repository."""
    text = nb.read_text()
    assert str(REPO) not in text and "/tmp/" not in text, f"{nb} prints an absolute path"


def test_a_render_gives_papermills_parameters_cell_one_id():
    """Papermill gives the cell it injects a new random id at every run; ``strip`` fixes it, so an unchanged render
    changes no committed file."""
    from dynatree_lib.reporting.executed import INJECTED, strip

    cell = lambda cid: {"id": cid, "cell_type": "code", "metadata": {"tags": [INJECTED]}, "outputs": [], "source": ""}
    runs = [strip({"metadata": {}, "cells": [cell(cid)]}) for cid in ("5bad3215", "a5a11e9e")]
    assert runs[0] == runs[1] and runs[0]["cells"][0]["id"] == INJECTED
    assert all(c["id"] == INJECTED for p in EXECUTED_PROFILES for c in json.loads(
        (REPO / "executed" / p / "02_latency.ipynb").read_text())["cells"] if INJECTED in c["metadata"].get("tags", []))
