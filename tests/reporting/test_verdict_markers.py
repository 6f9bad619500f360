"""Documents held to the rule: every verdict the README, FINDINGS and the notebooks state carries a marker
(``<!-- verdict: <id> -->``), and each marked word is the rule's verdict for that claim from the committed JSON."""
from pathlib import Path

import pytest

from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.harness.setup.profiles import get_profile
from dynatree_lib.reporting import markers, scorecard


@pytest.fixture(scope="module")
def rule():
    return scorecard.verdicts(get_profile("cpu"))


def prose() -> list[Path]:
    return [p for pattern in markers.PROSE for p in sorted(REPO.glob(pattern))]


@pytest.mark.parametrize("path", prose(), ids=lambda p: str(p.relative_to(REPO)))
def test_each_marked_verdict_is_the_rules(path, rule):
    assert markers.marker_mismatches(path.read_text(), rule) == [], \
        f"{path.name}: a stated verdict differs from the rule's; update the prose (or rerun)"


def test_the_findings_mark_their_verdicts(rule):
    text = (REPO / "README.md").read_text()
    marked = {cid for _, cid in markers.MARKED.findall(text)}
    assert marked == set(rule), "every claim's verdict is stated, marked, in the README's findings"


def test_a_changed_word_fails(rule):
    """Change one marked verdict word in the README: the check names it."""
    text = (REPO / "README.md").read_text()
    word, cid = markers.MARKED.findall(text)[0]
    other = next(v for v in scorecard.VERDICTS if v != word)
    changed = text.replace(f"**{word}** <!-- verdict: {cid} -->", f"**{other}** <!-- verdict: {cid} -->", 1)
    assert markers.marker_mismatches(changed, rule) == [f"{cid}: says **{other}**, the rule says {rule[cid]}"]


def test_unknown_claims_and_bare_markers_fail(rule):
    assert markers.marker_mismatches("**partly** <!-- verdict: no_such_claim -->", rule) == [
        "no_such_claim: unknown claim"]
    assert markers.marker_mismatches("it holds <!-- verdict: dynatree_vs_ar -->", rule) == [
        "a verdict marker without a **word** right before it"]
