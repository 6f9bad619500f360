"""The draft's training instructions never come from an evaluation set: none shares a 13-word sequence with a
Spec-Bench question (any turn), the WikiText-2 test split or the PG-19 test books, and none is an evaluation prompt
of the instruction workload."""
from dynatree_lib.train import instructions
from dynatree_lib.harness.setup.data import spec_bench_questions


def test_instructions_are_disjoint_from_every_evaluation_text():
    rows = instructions.load()
    assert len(rows) > 3000 and len({r["id"] for r in rows}) == len(rows)
    banned = instructions.evaluation_ngrams()
    overlapping = [r["id"] for r in rows if instructions.ngram_hashes(r["text"]) & banned]
    assert not overlapping, overlapping[:10]
    questions = {" ".join(instructions.words(t)) for q in spec_bench_questions() for t in q["turns"]}
    assert not [r["id"] for r in rows if " ".join(instructions.words(r["text"])) in questions]


def test_every_source_is_represented():
    kinds = {r["kind"] for r in instructions.load()}
    assert kinds == {"gsm8k", "self_instruct", "template", "summarize", "passage_qa", "translate"}


def test_the_overlap_test_finds_an_evaluation_text():
    q = next(t for r in spec_bench_questions()[300:] for t in r["turns"] if len(instructions.words(t)) > 20)
    assert instructions.ngram_hashes(q) & instructions.evaluation_ngrams()
    assert not instructions.ngram_hashes("a short text of fewer than thirteen words")
