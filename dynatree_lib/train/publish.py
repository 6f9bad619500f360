"""Publishing a trained head (``build-draft --head <kind> --publish``): its last export (``models/<kind>/v<N>k/head``)
copied to ``weights/smollm2-<kind>`` with its model card. Every record measured with the weights it replaces is
stale from then on (``tests/harness/test_records_weights.py`` says which); ``bench --experiment head_records`` measures the
EAGLE-3
head's again."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..core.drafts.heads.mlp import KINDS as MLP_KINDS
from ..harness.setup.paths import REPO
from . import head_card, mlp_card
from .mlp_heads import training_spec


def published_folder(kind: str) -> Path:
    return REPO / "weights" / f"smollm2-{kind}"


def card(kind: str, folder: Path) -> str:
    """The model card of a head folder of ``kind``: EAGLE-3's quotes its pair report where that report measured
    these weights; Medusa's and Hydra's, the training record their export carries."""
    if kind in MLP_KINDS:
        return mlp_card.card(json.loads((folder / "config.json").read_text()))
    return head_card.card(folder)


def publish(kind: str, draft_vocab: int = 8192) -> Path:
    """Copy the last export of ``kind``'s training to ``weights/smollm2-<kind>``, calibrate it there (the export
    itself stays uncalibrated, so publishing again calibrates once) and write its card; returns the folder."""
    spec = training_spec(kind, draft_vocab=draft_vocab)
    src = spec.folder() / "head"
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"{src} holds no exported {kind} head: train one first "
                                f"(`python -m dynatree_lib build-draft --head {kind} --seconds S`)")
    dest = published_folder(kind)
    shutil.copytree(src, dest, dirs_exist_ok=True)
    spec.calibrate(dest)
    (dest / "README.md").write_text(card(kind, dest))
    return dest


def refresh_mlp_cards() -> list[Path]:
    """The committed Medusa and Hydra cards again from their configs' training records (``run_all.sh`` calls this,
    as it refreshes the other cards, so a card follows the code that writes it)."""
    written = []
    for kind in MLP_KINDS:
        folder = published_folder(kind)
        if (folder / "config.json").exists():
            (folder / "README.md").write_text(card(kind, folder))
            written.append(folder / "README.md")
    return written


if __name__ == "__main__":
    print(refresh_mlp_cards())
