"""tools/device_payload.py: a file split for the device's 64 MiB calls comes back whole or not at all, and a slimmed
checkout comes back as it was."""
import subprocess

import pytest

from ..conftest import load_tool


@pytest.fixture(scope="module")
def payload():
    return load_tool("device_payload")


def test_pieces_join_to_the_file(payload, tmp_path):
    src = tmp_path / "target.gguf"
    src.write_bytes(bytes(range(256)) * 41)  # 10,496 bytes: 3 pieces of 4 KiB
    folders = payload.split(src, tmp_path / "xfer", piece_mib=4096 / 2**20)
    assert [f.name for f in folders] == ["target.gguf.1", "target.gguf.2", "target.gguf.3"]
    keep = tmp_path / "keep"
    keep.mkdir()
    for f in folders:  # one call each: its folder copied beside the others
        for piece in f.iterdir():
            (keep / piece.name).write_bytes(piece.read_bytes())
    assert payload.join(keep / "target.gguf").read_bytes() == src.read_bytes()
    assert payload.join(keep / "target.gguf", tmp_path / "elsewhere").read_bytes() == src.read_bytes()


def test_join_names_a_missing_or_corrupt_piece(payload, tmp_path):
    src = tmp_path / "w.bin"
    src.write_bytes(b"x" * 5000)
    folders = payload.split(src, tmp_path / "xfer", piece_mib=2048 / 2**20)
    keep = tmp_path / "keep"
    keep.mkdir()
    for piece in folders[0].iterdir():
        (keep / piece.name).write_bytes(piece.read_bytes())
    with pytest.raises(SystemExit, match="w.bin.part2, w.bin.part3"):
        payload.join(keep / "w.bin")
    for f in folders[1:]:
        for piece in f.iterdir():
            (keep / piece.name).write_bytes(piece.read_bytes())
    (keep / "w.bin.part2").write_bytes(b"y" * 2048)
    with pytest.raises(SystemExit, match="sha256"):
        payload.join(keep / "w.bin")
    assert not (keep / "w.bin").exists()
    with pytest.raises(SystemExit, match="no manifest"):
        payload.join(tmp_path / "other.bin")
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(SystemExit, match="at least one byte"):
            payload.split(src, tmp_path / "bad", piece_mib=bad)


def test_slim_and_restore(payload, tmp_path):
    repo = tmp_path / "repo"
    (repo / "weights").mkdir(parents=True)
    (repo / "code").mkdir()
    (repo / "weights" / "big.safetensors").write_bytes(b"w" * 3000)
    (repo / "code" / "a.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("/.xfer/\n")
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True).stdout
    run("init", "-q")
    run("-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
    run("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c")
    (repo / ".xfer").mkdir()
    (repo / ".xfer" / "piece").write_bytes(b"p" * 500)  # ignored: sent only when carried
    before = payload.tree_bytes(repo)
    assert payload.tree_bytes(repo, (".xfer",)) == before + 500
    assert payload.slim(repo, ("weights",)) == 3000
    assert payload.tree_bytes(repo) == before - 3000
    assert payload.slim(repo, ("weights",)) == 0  # slimmed already: nothing left to delete, nothing refused
    payload.restore(repo, ("weights",))
    assert run("status", "--porcelain") == "" and payload.tree_bytes(repo) == before
    payload.slim(repo, ("weights",))
    run("add", "-A")  # the deletion staged while slimmed
    payload.restore(repo, ("weights",))
    assert run("status", "--porcelain") == ""
    (repo / "weights" / "big.safetensors").write_bytes(b"changed")
    with pytest.raises(SystemExit, match="changes git does not hold"):
        payload.slim(repo, ("weights",))
    assert (repo / "weights" / "big.safetensors").read_bytes() == b"changed"
