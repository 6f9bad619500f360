"""Documents held to the verdict rule: prose that states a claim's verdict marks it ``<!-- verdict: <id> -->`` right
after the bold word, and ``marker_mismatches`` finds every marked word the rule (``scorecard.verdicts``) does not
give that claim. ``tests/reporting/test_verdict_markers.py`` runs it over ``PROSE``.
"""
from __future__ import annotations

import re

MARKED = re.compile(r"\*\*([a-z ]+)\*\*\s*<!-- verdict: (\w+) -->")
MARKER = re.compile(r"<!-- verdict: (\w+) -->")
PROSE = ("README.md", "FINDINGS.md", "notebooks/*.py")  # where a stated verdict carries its marker


def marker_mismatches(text: str, rule: dict[str, str]) -> list[str]:
    """What a text's verdict markers get wrong against the rule ({claim id: verdict}): a marked word that is not the
    rule's verdict for its claim, a marker of an unknown claim, a marker without a bold word before it."""
    flat = re.sub(r"\n#?\s*", " ", text)  # a notebook's Markdown lines are comments
    marked = MARKED.findall(flat)
    bad = [f"{cid}: unknown claim" for _, cid in marked if cid not in rule]
    bad += [f"{cid}: says **{word}**, the rule says {rule[cid]}" for word, cid in marked
            if cid in rule and word != rule[cid]]
    if len(MARKER.findall(flat)) > len(marked):
        bad.append("a verdict marker without a **word** right before it")
    return bad
