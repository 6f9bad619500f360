"""Rebuild the repository's ``data/`` folder from a staged ``data`` folder, and print its sha256 table.

Usage: python tools/make_data.py SOURCE_DATA_DIR [--reference PAPER_REPORTED_JSON] [--out OUT_DIR]

SOURCE_DATA_DIR is laid out as the project's staging folder was (``wikitext-2/wikitext-2-raw-v1/...``,
``wikitext-2/wikitext-2-tokenized/...``, ``pg19/pg19_subset.jsonl``, ``pg19/pg19_test_split_ids.tsv``);
``--reference`` defaults to ``SOURCE_DATA_DIR/../reference/paper_reported.json``; ``--out`` defaults to
this repository's ``data/``. Provenance only: nothing in the tests or the harness runs it. Every output is
deterministic (gzip with mtime 0, parquet written by pyarrow with fixed settings); the parquet bytes can
differ across pyarrow versions, the rows cannot (checked below).
"""
from __future__ import annotations

import argparse
import gzip
import sys
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from dynatree_lib.harness.setup.weights import sha256_file as sha256  # noqa: E402

PG19_SCHEMA = pa.schema([("short_book_title", pa.string()), ("publication_date", pa.int64()), ("url", pa.string()),
                         ("text", pa.string()), ("book_id", pa.string()), ("pg19_split", pa.string())])




def gzip_file(src: Path, dst: Path) -> None:
    dst.write_bytes(gzip.compress(src.read_bytes(), compresslevel=9, mtime=0))
    assert gzip.decompress(dst.read_bytes()) == src.read_bytes()


def pg19_parquet(src: Path, dst: Path) -> None:
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert all(list(r) == PG19_SCHEMA.names for r in rows), "unexpected PG-19 jsonl schema"
    table = pa.Table.from_pylist(rows, schema=PG19_SCHEMA)
    pq.write_table(table, dst, compression="zstd", compression_level=9, use_dictionary=False)
    assert pq.read_table(dst).to_pylist() == rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", type=Path, help="staged data folder (wikitext-2/, pg19/)")
    ap.add_argument("--reference", type=Path, help="paper_reported.json (default: SOURCE/../reference/...)")
    ap.add_argument("--out", type=Path, default=REPO / "data")
    a = ap.parse_args()
    src, out = a.source, a.out
    ref = a.reference or src.parent / "reference" / "paper_reported.json"
    (out / "wikitext-2").mkdir(parents=True, exist_ok=True)
    (out / "pg19").mkdir(parents=True, exist_ok=True)

    made: list[tuple[Path, Path]] = []  # (stored file, original it was made from)

    def add(dst: Path, orig: Path, how) -> None:
        how(orig, dst)
        made.append((dst, orig))

    wt = src / "wikitext-2"
    add(out / "wikitext-2" / "test.parquet", wt / "wikitext-2-raw-v1" / "test-00000-of-00001.parquet", shutil.copyfile)
    for split in ("valid", "test"):
        add(out / "wikitext-2" / f"wiki.{split}.tokens.gz", wt / "wikitext-2-tokenized" / f"wiki.{split}.tokens",
            gzip_file)
    add(out / "pg19" / "books.parquet", src / "pg19" / "pg19_subset.jsonl", pg19_parquet)
    add(out / "pg19" / "pg19_test_split_ids.tsv", src / "pg19" / "pg19_test_split_ids.tsv", shutil.copyfile)
    add(out / "paper_reported.json", ref, shutil.copyfile)

    print("| file in data/ | bytes | sha256 (as stored) | made from | sha256 (original) |")
    print("|---|---|---|---|---|")
    for dst, orig in made:
        print(f"| `{dst.relative_to(out).as_posix()}` | {dst.stat().st_size:,} | `{sha256(dst)}` "
              f"| `{orig.name}` | `{sha256(orig)}` |")


if __name__ == "__main__":
    main()
