"""Get a GPU run's files onto a lent device machine, 64 MiB a call.

The device tool sends the checkout's working tree (the tracked files that exist, the untracked files git does not
ignore) and the paths a call carries, 64 MiB in all. This checkout is larger (the committed weights, checkpoints,
results and renders), and a GPU run needs the target too (the Q4_1 GGUF alone is 94 MiB). So:

1. ``slim`` deletes the tracked files a GPU run never reads (``SLIM``: they are committed, so nothing is lost), and
   refuses where one of them has changes git does not hold; ``restore`` is ``git checkout`` of them;
2. ``split FILE`` writes FILE in pieces, one folder each under ``.xfer/`` (git-ignored), each with a manifest
   (name, bytes, sha256, pieces): call k carries ``.xfer/NAME.k`` and copies it into ``.keep/`` there, an ignored
   folder that a warm machine keeps between calls (the calls must follow one another within its idle time);
3. ``join .keep/NAME`` there puts the pieces together and checks the sha256;
4. ``size [PATH ...]``: what a call would send, with those carried paths.

    python tools/device_payload.py slim
    python tools/device_payload.py split PATH/SmolLM2-135M-Instruct.Q4_1.gguf   # harness.setup.weights.smollm2_gguf()
    python tools/device_payload.py size .xfer/SmolLM2-135M-Instruct.Q4_1.gguf.1
    device run, carry [.xfer/NAME.1]:  mkdir -p .keep && cp .xfer/NAME.1/* .keep/
    device run, carry [.xfer/NAME.2]:  cp .xfer/NAME.2/* .keep/ && python3 tools/device_payload.py join .keep/NAME
    python tools/device_payload.py restore
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dynatree_lib.harness.setup.weights import sha256_file  # noqa: E402
SLIM = ("weights", "checkpoints", "results", "executed", "figures", "data/pg19")  # what no GPU run reads
LIMIT_MIB = 64
PIECE_MIB = 50  # with the slimmed tree (about 10 MiB), a piece and its manifest fit one call: the GGUF in two
XFER = ".xfer"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def tracked(repo: Path, paths: tuple[str, ...]) -> list[Path]:
    return [repo / p for p in git(repo, "ls-files", "-z", "--", *paths).split("\0") if p]


def slim(repo: Path = REPO, paths: tuple[str, ...] = SLIM) -> int:
    """Delete the tracked files under ``paths`` (refused where any has changes git does not hold); their bytes."""
    lines = git(repo, "status", "--porcelain", "--untracked-files=no", "--", *paths).splitlines()
    changed = "\n".join(line for line in lines if line[:2] != " D")  # a file slim deleted before is no change
    if changed:
        raise SystemExit(f"slim refused: tracked files under {', '.join(paths)} have changes git does not hold (commit "
                         f"or stash them first):\n{changed}")
    freed = 0
    for f in tracked(repo, paths):
        if f.exists():
            freed += f.stat().st_size
            f.unlink()
    return freed


def restore(repo: Path = REPO, paths: tuple[str, ...] = SLIM) -> None:
    """The files ``slim`` deleted, from the commit checked out (only deleted ones: nothing else under ``paths`` is
    touched; a deletion staged meanwhile is undone too)."""
    gone = [str(f.relative_to(repo)) for f in tracked(repo, paths) if not f.exists()]
    gone += [n for n in git(repo, "diff", "--cached", "--name-only", "--diff-filter=D", "-z", "--", *paths).split("\0")
             if n and n not in gone]
    if gone:
        git(repo, "checkout", "HEAD", "--", *gone)


def tree_bytes(repo: Path = REPO, carry: tuple[str, ...] = ()) -> int:
    """What a device call sends: the tracked files that exist, untracked files git does not ignore, ``shared/``
    where the checkout has one, and the carried paths."""
    names = set(git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")) - {""}
    files = {repo / n for n in names}
    for extra in (*carry, "shared"):
        p = repo / extra
        files |= set(p.rglob("*")) if p.is_dir() else ({p} if p.exists() else set())
    return sum(f.stat().st_size for f in files if f.is_file())


def split(path: Path, out: Path, piece_mib: float = PIECE_MIB, flat: bool = False) -> list[Path]:
    """``path`` in pieces of at most ``piece_mib``: piece k in folder ``out / f"{name}.{k}"`` beside a manifest (a
    call carries each folder), or, ``flat``, every piece and one manifest in ``out`` (files coming back from the
    device, 16 MiB each at most). Returns the folders (``flat``: ``[out]``)."""
    if not (math.isfinite(piece_mib) and piece_mib * 2**20 >= 1):
        raise SystemExit(f"split: a piece must be at least one byte (piece_mib, --piece-mb), got {piece_mib} MiB")
    size, step = path.stat().st_size, int(piece_mib * 2**20)
    count = max(1, -(-size // step))
    manifest = json.dumps({"name": path.name, "bytes": size, "sha256": sha256_file(path), "pieces": count}, indent=1)
    folders = []
    with open(path, "rb") as f:
        for k in range(1, count + 1):
            folder = out if flat else out / f"{path.name}.{k}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{path.name}.part{k}").write_bytes(f.read(step))
            (folder / f"{path.name}.manifest.json").write_text(manifest + "\n")
            folders.append(folder)
    return folders[:1] if flat else folders


def join(target: Path, out: Path | None = None) -> Path:
    """``out`` (default ``target``) from ``target.part1 ..`` (as the manifest beside them lists them), sha256
    checked; returns ``out``."""
    listed = target.with_name(f"{target.name}.manifest.json")
    if not listed.exists():
        raise SystemExit(f"join: no manifest {listed}: copy a piece's folder (.xfer/{target.name}.k) beside it first")
    manifest = json.loads(listed.read_text())
    pieces = [target.with_name(f"{target.name}.part{k}") for k in range(1, manifest["pieces"] + 1)]
    missing = [p.name for p in pieces if not p.exists()]
    if missing:
        raise SystemExit(f"join: {target.name} needs {', '.join(missing)} beside it (each call carries one piece's "
                         "folder and copies it here; a machine given back between calls has lost the earlier pieces)")
    out = out or target
    with open(out, "wb") as f:
        for p in pieces:
            f.write(p.read_bytes())
    if (got := sha256_file(out)) != manifest["sha256"]:
        out.unlink()
        raise SystemExit(f"join: {out} has sha256 {got}, its manifest {listed} says {manifest['sha256']}")
    return out


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    sub.add_parser("slim", help="delete the committed files no GPU run reads")
    sub.add_parser("restore", help="bring them back from git")
    s = sub.add_parser("size", help="what a device call would send, with these carried paths")
    s.add_argument("carry", nargs="*")
    s = sub.add_parser("split", help="a file in pieces under .xfer/")
    s.add_argument("file", type=Path)
    s.add_argument("--piece-mb", type=float, default=PIECE_MIB)
    s = sub.add_parser("join", help="(on the device) the pieces beside PATH into PATH, sha256 checked")
    s.add_argument("path", type=Path)
    args = ap.parse_args(argv)
    if args.verb == "slim":
        print(f"slim: {mib(slim())} of committed files deleted; the tree now sends {mib(tree_bytes())} "
              "(python tools/device_payload.py restore brings them back)")
    elif args.verb == "restore":
        restore()
        print(f"restore: done; the tree sends {mib(tree_bytes())}")
    elif args.verb == "size":
        n = tree_bytes(carry=tuple(args.carry))
        print(f"a call sends {mib(n)} of its {LIMIT_MIB} MiB" + ("" if n <= LIMIT_MIB * 2**20 else ": too much"))
        sys.exit(0 if n <= LIMIT_MIB * 2**20 else 1)
    elif args.verb == "split":
        if not args.file.is_file():
            raise SystemExit(f"split: no file {args.file}")
        for folder in split(args.file, REPO / XFER, args.piece_mb):
            print(f"{folder.relative_to(REPO)}  (carry it in its own call)")
    else:
        print(f"join: {join(args.path)}")


if __name__ == "__main__":
    main()
