"""RESULTS.md: every table and figure of a profile's run, collected in reading order.

The tables are the Markdown files the notebooks wrote from the logged JSON (``figures/<profile>/*.md``);
nothing here is typed by hand. ``python -m dynatree_lib.reporting.results_md cpu`` writes ``RESULTS.md`` (the cpu
profile) or ``figures/<profile>/RESULTS.md`` (any other profile); ``run_all.sh`` calls it at the end.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from ..harness.experiments.catalog import EXPERIMENTS
from ..harness.experiments.tuning import NotTuned
from ..harness.measure.load import is_busy
from ..harness.setup.machine import kind_of_record
from ..harness.setup.paths import REPO
from ..harness.setup.profiles import get_profile
from .formatting import MARKS_NOTE
from .records import records
from .scorecard import claims

NOTEBOOKS = REPO / "notebooks"


def sections() -> list[tuple[str, str, list[str]]]:
    """(title, notebook, the tables and figures it saves, in order) for every numbered notebook: read from its
    source, so every saved table and figure is in RESULTS.md (another machine kind's are saved with ``on_kind``)."""
    out = []
    for src in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py")):
        text = src.read_text()
        title = re.search(r"^# # (.+)$", text, re.M)
        names = list(dict.fromkeys(re.findall(r"[\"'](\w+)[\"'],\s*(?:prof|on_kind)\)", text)))
        out.append((title.group(1) if title else src.stem, src.stem, names))
    return out


def _environment(profile: str) -> str:
    main = REPO / "results" / profile / "main.json"
    if not main.exists():
        return ""
    recs = json.loads(main.read_text())["records"]
    if not recs:
        return ""
    r = next((x for x in recs if x.get("tags", {}).get("role") == "timed"), recs[-1])  # the timed run, not fp32's
    e = r["environment"]
    engine = r["rows"][0].get("engine", r["engine"]) if r["rows"] else r["engine"]  # as run: names the kernel too
    others = {}  # records measured on another commit (a partial re-measurement), by dtype
    for x in recs:
        c = x["environment"]["git_commit"]
        if c != e["git_commit"]:
            others.setdefault(c, set()).add(x["dtype"])
    also = "".join(f" {', '.join(sorted(d))} records of main.json on commit {c}."
                   for c, d in sorted(others.items(), key=lambda cd: str(cd[0])))
    return (f"Measured on {e['device_name']} ({e['cpu_count']} cores, {e['torch_threads']} threads), torch "
            f"{e['torch']}, transformers {e['transformers']}, commit {e['git_commit']}, {e['date'][:10]}; "
            f"target `{r['target']}`, draft `{r['draft']}`, engine `{engine}`, timed in {r['dtype']}.{also}\n")


def provenance(profile: str) -> list[str]:
    """RESULTS.md's provenance: each scorecard row's file, commits and marked records, then each results file's
    records: kept (the profile's current cells) or superseded (another run's settings), their commits and machine
    kinds, and how many come from a dirty tree or a busy machine."""
    prof = get_profile(profile)
    rows = [f"| {r['claim']} | {r['verdict']} | {r['source']} |" for rs in claims(prof).values() for r in rs]
    lines = ["## Where the scorecard's rows come from", "", "| claim | verdict | file @ commits |", "|---|---|---|",
             *rows, "", "| file | records | superseded | commits | machines | dirty tree | busy machine |",
             "|---|---|---|---|---|---|---|"]
    for path in sorted((REPO / "results" / profile).glob("*.json")):
        if not path.name.endswith(".bak.json"):  # a rerun's archive of the file it replaced: never committed
            lines.append(file_line(path, prof))
    return lines + [""]


def file_line(path: Path, prof) -> str:
    """One results file's row of the provenance table (``provenance``); the commits, machines and marks are those
    of its current records, or of all of them where none is current."""
    every = json.loads(path.read_text()).get("records")
    if not isinstance(every, list):  # a document, not records
        return f"| `{path.name}` | (a document) | | | | | |"
    if path.stem not in EXPERIMENTS:  # an earlier draft's run, kept for comparison (main_v3, pair_v2, ...)
        kept = []
    else:
        try:
            kept = records(path, prof, verbose=False)
        except NotTuned:  # the tuning its cells come from is not logged: none is current
            kept = []
    envs = [r.get("environment") or {} for r in (kept or every)]
    commits = ", ".join(sorted({str(e.get("git_commit")) for e in envs})) or "–"
    kinds = ", ".join(sorted({k for e in envs if (k := kind_of_record(e))})) or "–"
    dirty, busy = sum(bool(e.get("git_dirty")) for e in envs), sum(is_busy(r) for r in (kept or every))
    return (f"| `{path.name}` | {len(kept)} | {len(every) - len(kept)} | {commits} | {kinds} | {dirty} | "
            f"{busy} |")


def machine_kinds_of(figs: Path, name: str) -> list[str]:
    """The saved copies of table or figure ``name`` for other machine kinds (``name@<kind>``), sorted."""
    return sorted({p.stem for p in figs.glob(f"{name}@*") if p.suffix in (".md", ".png")})


def build(profile: str) -> Path:
    """Write the profile's results page; returns its path."""
    figs = REPO / "figures" / profile
    out = REPO / "RESULTS.md" if profile == "cpu" else figs / "RESULTS.md"
    rel = lambda p: os.path.relpath(p, out.parent)  # links that work in any clone (and on GitHub)
    lines = [f"# Results: profile `{profile}`", "",
             "Generated by `run_all.sh` from the logged JSON in `results/" + profile + "/` (every table below is a "
             "file the notebooks wrote from that JSON; the executed notebooks are in `executed/" + profile + "/`). "
             "Do not edit by hand.", "", _environment(profile), MARKS_NOTE, "", *provenance(profile)]
    for title, nb, names in sections():
        lines += [f"## {title}", "", f"Notebook: [`{nb}`]({rel(REPO / 'executed' / profile / (nb + '.ipynb'))})", ""]
        for name in (n for base in names for n in (base, *machine_kinds_of(figs, base))):
            if (figs / f"{name}.md").exists():
                lines += [f"**{name}**", "", (figs / f"{name}.md").read_text().strip(), ""]
            elif (figs / f"{name}.png").exists():
                lines += [f"![{name}]({rel(figs / (name + '.png'))})", ""]
    out.write_text("\n".join(lines) + "\n")
    return out


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "cpu"))
