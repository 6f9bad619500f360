"""How tables print: numbers with their spread, dashes for what is not measured, workload and category names, and
Markdown + LaTeX files."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..harness.setup.workloads import labels as workload_labels

CATEGORY_LABELS = {"multi-turn": "Multi-turn conv.", "translation": "Translation", "summarization": "Summarization",
                   "qa": "QA", "math_reasoning": "Math reasoning", "rag": "RAG"}


def pm(mean: float, std: float, fmt: str = "{:.1f}") -> str:
    if pd.isna(mean):
        return "–"
    return f"{fmt.format(mean)} ± {fmt.format(std)}"


def dash(x, fmt) -> str:
    """``x`` formatted, or a dash where it is not a number."""
    return "–" if pd.isna(x) else fmt.format(x)


def present(datasets) -> list[str]:
    """The workloads (and the pooled scope) among ``datasets``, in table order."""
    have = set(datasets)
    return [d for d in workload_labels() if d in have]


def scope_label(scope: str) -> str:
    """A pair-report scope ("wikitext2", "spec_bench/qa", "all") as tables name it."""
    ws, _, cat = scope.partition("/")
    name = workload_labels().get(ws, ws)
    return f"{name} · {CATEGORY_LABELS.get(cat, cat)}" if cat else name


def to_markdown(t: pd.DataFrame) -> str:
    """GitHub Markdown without extra dependencies; MultiIndex columns are joined with ' / '."""
    cols = [" / ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in t.columns]
    idx = t.index.names if any(t.index.names) else [""]
    head = [" / ".join(str(x) for x in idx if x)] + cols
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, row in t.iterrows():
        i = " / ".join(map(str, i)) if isinstance(i, tuple) else str(i)
        lines.append("| " + " | ".join([i] + [str(v) for v in row]) + " |")
    return "\n".join(lines) + "\n"


def save(t: pd.DataFrame, name: str, out_dir: Path) -> str:
    """Write ``name.md`` and ``name.tex`` into ``out_dir``; return the Markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = to_markdown(t)
    (out_dir / f"{name}.md").write_text(md)
    (out_dir / f"{name}.tex").write_text(t.to_latex(escape=True))
    return md


DIRTY_MARK, BUSY_MARK = "†", "‡"  # what a table appends to a number measured on a dirty tree, on a busy machine
MARKS_NOTE = (f"{DIRTY_MARK}: measured on a tree with uncommitted changes (`git_dirty`); {BUSY_MARK}: measured on a "
              "busy machine (`load`; docs/usage.md); a ratio carries either record's mark.")
