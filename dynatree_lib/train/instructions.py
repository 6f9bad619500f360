"""The instructions whose answers the draft learns from the target: none comes from an evaluation set.

Sources (provenance, licences and hashes in ``data/README.md``), each a ``kind`` of the built file:

- ``gsm8k``: GSM8K *train* questions (MIT; ``data/instructions/gsm8k_train.jsonl``). Spec-Bench's
  mathematical-reasoning questions are GSM8K *test* questions.
- ``self_instruct``: Self-Instruct's 175 seed tasks and 252 user-oriented instructions (Apache-2.0;
  ``data/instructions/self_instruct.jsonl``), each with its first instance's input.
- ``template``: task templates written here over topic seeds written here (writing, roleplay, reasoning,
  coding, science, humanities, extraction, short questions).
- ``summarize`` / ``passage_qa``: "Summarize: <passage>" and "<passage>\\n<question>" over passages of the
  PG-19 books outside the test split and of WikiText-2 *validation* articles (the draft's continuation text).
- ``translate``: "Translate German to English: <sentence>", the German being the target's own greedy
  rendering of a WikiText-2 validation sentence (no German corpus with a permissive licence was at hand).

Every candidate that shares a 13-word sequence (lower-cased, punctuation dropped: the usual contamination
test) with an evaluation text (every question workload's questions, every turn: Spec-Bench's 480, HumanEval's and
UltraChat's evaluation set, added after the file was built; the WikiText-2 test split; the PG-19 test books) is
dropped. ``tests/train/test_instructions.py`` checks the committed file against the same texts.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path

from ..harness.setup.data import DATASETS, REPO_DATA, load_texts, training_text, wikitext_valid_articles
from ..harness.setup.workloads import WORKLOADS

FOLDER = REPO_DATA / "instructions"
BUILT = FOLDER / "instructions.jsonl"
NGRAM = 13
COUNTS = {"gsm8k": 1000, "template": 1600, "summarize": 350, "passage_qa": 350, "translate": 300}

TOPICS = (
    "volcanoes", "the water cycle", "black holes", "photosynthesis", "the French Revolution", "the Roman Empire",
    "ancient Egypt", "the Industrial Revolution", "climate change", "renewable energy", "electric cars",
    "machine learning", "the internet", "smartphones", "social media", "healthy eating", "sleep", "running a marathon",
    "learning a new language", "public speaking", "saving money", "starting a small business", "remote work",
    "job interviews", "time management", "meditation", "gardening", "baking bread", "coffee", "tea", "chess",
    "soccer", "basketball", "the Olympic Games", "jazz", "classical music", "painting", "photography", "poetry",
    "Shakespeare", "the printing press", "the moon landing", "Mars", "the solar system", "earthquakes",
    "hurricanes", "rainforests", "deserts", "the ocean", "coral reefs", "whales", "honeybees", "dinosaurs",
    "evolution", "DNA", "vaccines", "the immune system", "the human brain", "the heart", "antibiotics",
    "nutrition labels", "recycling", "plastic pollution", "city planning", "public transport", "bicycles",
    "airplanes", "trains", "bridges", "skyscrapers", "electricity", "magnets", "light", "sound", "gravity",
    "atoms", "chemical reactions", "prime numbers", "probability", "geometry", "statistics", "budgets",
    "inflation", "interest rates", "the stock market", "democracy", "human rights", "philosophy", "ethics",
    "happiness", "friendship", "parenting", "pets", "dogs", "cats", "birds", "travel in Japan", "travel in Italy",
    "a trip to the mountains", "camping", "museums", "libraries", "video games", "board games", "movies",
    "television", "newspapers", "advertising", "cooking pasta", "vegetarian food", "spices", "chocolate",
    "the history of writing", "calendars", "clocks", "maps", "the Silk Road", "medieval castles", "pirates",
    "the Renaissance", "World War I", "the Cold War", "space telescopes", "robots", "3D printing", "cybersecurity",
    "passwords", "databases", "spreadsheets", "email etiquette", "teamwork", "leadership", "customer service",
)
TEMPLATES = {
    "writing": ("Write a short story about {t}.", "Write a poem about {t}.", "Write a blog post about {t}.",
                "Compose a persuasive essay on {t}.", "Write a product description related to {t}.",
                "Draft a friendly email inviting a colleague to a talk about {t}.",
                "Write a speech for a school assembly about {t}.", "Write a diary entry of a day spent thinking about {t}."),
    "roleplay": ("Pretend you are a tour guide. Tell visitors about {t}.", "Act as a teacher and explain {t} to a child.",
                 "Imagine you are a scientist being interviewed about {t}. Answer the first question: why does it matter?",
                 "You are a travel agent. Recommend a holiday built around {t}.",
                 "Pretend to be a famous chef and give your opinion on {t}."),
    "reasoning": ("What are the pros and cons of {t}?", "Compare {t} and {u}.", "Why do some people dislike {t}?",
                  "What would happen if {t} disappeared tomorrow?", "Give three arguments for and against {t}.",
                  "How are {t} and {u} related?"),
    "coding": ("Write a Python function that counts how often each word appears in a text about {t}.",
               "Write a Python class that stores a list of facts about {t} and prints them.",
               "Explain how to sort a list of numbers in Python, with an example.",
               "Write a SQL query that selects all rows about {t} from a table named articles.",
               "Write a JavaScript function that returns the longest word in a sentence.",
               "Write a Python program that reads a CSV file of {t} data and prints the average of one column."),
    "stem": ("Explain {t} in simple terms.", "How does {t} work?", "What is the science behind {t}?",
             "Describe the main ideas of {t} for a high-school student.", "What are common misconceptions about {t}?"),
    "humanities": ("Describe the history of {t}.", "How has {t} changed society?", "What can {t} teach us about people?",
                   "Summarize the cultural importance of {t}.", "Discuss the ethical questions raised by {t}."),
    "extraction": ("List five key facts about {t}.", "Give me five tips for {t}.", "Make a table of the main parts of {t}.",
                   "List the steps someone should follow to learn about {t}.", "Name three famous examples of {t}."),
    "qa": ("What is {t}?", "Who first studied {t}?", "When did {t} become popular?", "Where can I learn more about {t}?",
           "Is {t} important? Answer briefly.", "What is one interesting fact about {t}?"),
}
PASSAGE_QUESTIONS = ("What is this passage about?", "Who is the main person in this text?", "Where does this take place?",
                     "What happened first in this text?", "What is the main idea of the passage?",
                     "Why is this event important?", "What does the author describe?", "When did this happen?")


def words(text: str) -> list[str]:
    """Lower-cased words without punctuation: the unit of the overlap test."""
    return re.findall(r"[a-z0-9]+", text.lower())


def ngram_hashes(text: str, n: int = NGRAM) -> set[int]:
    """8-byte hashes of every ``n``-word sequence of ``text``."""
    w = words(text)
    return {int.from_bytes(hashlib.blake2b(" ".join(w[i:i + n]).encode(), digest_size=8).digest(), "little")
            for i in range(len(w) - n + 1)}


def evaluation_ngrams() -> set[int]:
    """The 13-word sequences of every evaluation text: every question workload's questions (every turn),
    WikiText-2 test, the PG-19 test books."""
    out: set[int] = set()
    for w in WORKLOADS.values():
        for q in ([] if w.continuation else w.questions(None).values()):
            for turn in q["turns"]:
                out |= ngram_hashes(turn)
    for dataset in DATASETS:
        for _, text in load_texts(dataset):
            out |= ngram_hashes(text)
    return out


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _passages(rng: random.Random, n: int, min_words: int = 120, max_words: int = 420) -> list[str]:
    """``n`` passages of whole paragraphs from the draft's continuation text (no ``<unk>``)."""
    paras = [p.strip() for text in training_text() + wikitext_valid_articles()
             for p in re.split(r"\n\s*\n|\n(?= = )", text) if "<unk>" not in p and " = " not in p[:3]]
    paras = [" ".join(p.split()) for p in paras if len(p.split()) >= 40]
    out = []
    while len(out) < n:
        i = rng.randrange(len(paras))
        passage = paras[i]
        while len(passage.split()) < min_words and i + 1 < len(paras):
            i += 1
            passage += " " + paras[i]
        out.append(" ".join(passage.split()[:max_words]))
    return out


def _sentences(rng: random.Random, n: int) -> list[str]:
    sents = [s.strip() for text in wikitext_valid_articles() for s in re.split(r"(?<=[.!?])\s+", text)
             if "<unk>" not in s and 8 <= len(s.split()) <= 30 and "=" not in s]
    return rng.sample(sents, n)


def candidates(seed: int = 0, to_german=None) -> list[dict]:
    """Every candidate instruction before the overlap filter, seeded. ``to_german(sentences) -> list[str]``
    renders English sentences in German (the target's greedy translation in ``build``)."""
    rng = random.Random(seed)
    out = [{"id": f"self_instruct:{r['id']}", "kind": "self_instruct", "text": r["text"]}
           for r in _jsonl(FOLDER / "self_instruct.jsonl")]
    out += [{"id": f"gsm8k:{r['id']}", "kind": "gsm8k", "text": r["text"]}
            for r in _jsonl(FOLDER / "gsm8k_train.jsonl")[:COUNTS["gsm8k"]]]
    combos = [(cat, tpl, t) for cat, tpls in TEMPLATES.items() for tpl in tpls for t in TOPICS]
    for i, (cat, tpl, t) in enumerate(rng.sample(combos, COUNTS["template"])):
        other = rng.choice([x for x in TOPICS if x != t])
        out.append({"id": f"template:{i}", "kind": "template", "category": cat, "text": tpl.format(t=t, u=other)})
    for i, p in enumerate(_passages(rng, COUNTS["summarize"])):
        out.append({"id": f"summarize:{i}", "kind": "summarize", "text": f"Summarize: {p}"})
    for i, p in enumerate(_passages(rng, COUNTS["passage_qa"])):
        out.append({"id": f"passage_qa:{i}", "kind": "passage_qa", "text": f"{p}\n{rng.choice(PASSAGE_QUESTIONS)}"})
    if to_german is not None:
        german = to_german(_sentences(rng, COUNTS["translate"]))
        out += [{"id": f"translate:{i}", "kind": "translate", "text": f"Translate German to English: {g}"}
                for i, g in enumerate(german) if g.strip()]
    return out


def build(out: Path = BUILT, seed: int = 0, to_german=None) -> Path:
    """Write the instruction file: ``candidates`` minus every one that overlaps an evaluation text."""
    banned = evaluation_ngrams()
    kept = [c for c in candidates(seed, to_german) if not ngram_hashes(c["text"]) & banned]
    out.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in kept))
    return out


def load(path: Path = BUILT) -> list[dict]:
    """The committed instructions (``build`` writes them)."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; build it with python -m dynatree_lib build-draft --instructions-only")
    return _jsonl(path)
