"""Every committed record was measured with the committed weights: each place a JSON under ``results/`` names a file
under ``weights/`` with a sha256 (a record's ``weights``, a tool's ``drafts``, a pair report's ``models``, llama.cpp's
``head``), the sha256 is the file's now. A record key names a draft by its reference, not its bytes, so a head
published again (``build-draft --head ... --publish``) leaves the old records looking complete: this test is what
says they are stale (``bench --experiment head_records`` measures the EAGLE-3 head's again). Earlier versions kept for
comparison (``<name>_v<N>.json``) are exempt."""
import json
import re

import pytest

from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.harness.setup.weights import sha256_file

EARLIER_VERSION = re.compile(r"_v\d+$")


def named_weights(node, where: str = ""):
    """(where, file, sha256) of every committed weight file a JSON tree names with its sha256."""
    if isinstance(node, dict):
        file = node.get("file") or (node.get("folder") and f"{node['folder']}/model.safetensors")
        sha = node.get("sha256") or node.get("model_safetensors_sha256")
        if isinstance(file, str) and file.startswith("weights/") and isinstance(sha, str):
            yield where, file, sha
        for k, v in node.items():
            yield from named_weights(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from named_weights(v, f"{where}[{i}]")


RECORDS = sorted(p for p in (REPO / "results").glob("*/*.json")
                 if not p.name.endswith(".bak.json") and not EARLIER_VERSION.search(p.stem))


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.relative_to(REPO / "results").as_posix())
def test_each_record_names_the_committed_weights(path):
    stale = {(file, sha[:12]) for where, file, sha in named_weights(json.loads(path.read_text()))
             if sha != sha256_file(REPO / file)}
    assert not stale, (f"{path.relative_to(REPO)} was measured with other weights than the committed "
                       f"{sorted(stale)}: measure it again (bench --experiment head_records for the EAGLE-3 head)")


def test_the_check_finds_weights_where_records_keep_them():
    tree = {"records": [{"weights": {"draft": {"file": "weights/a/model.safetensors", "sha256": "1"}}}],
            "head": {"folder": "weights/b", "model_safetensors_sha256": "2"},
            "models": {"target": {"file": "SmolLM2.gguf", "sha256": "3"}}}
    assert [(f, s) for _, f, s in named_weights(tree)] == [("weights/a/model.safetensors", "1"),
                                                           ("weights/b/model.safetensors", "2")]
