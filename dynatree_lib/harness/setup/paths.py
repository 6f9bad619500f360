"""Where the repository keeps what the harness reads and writes, and how a record names a path."""
import os
import re
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RESULTS = Path(os.environ.get("DYNATREE_RESULTS") or REPO / "results")  # elsewhere: a scratch measurement's
FIGURES = REPO / "figures"
DRAFT_DIR = REPO / "weights" / "smollm2-draft"
HEAD_DIR = REPO / "weights" / "smollm2-eagle3"  # the EAGLE-3 head on the cpu target (issue 56)


@contextmanager
def written_whole(path: Path):
    """A temporary path beside ``path`` to write to, renamed over ``path`` once the block ends without an error (a
    killed or failed writer leaves the old file, or none, never a partial one)."""
    tmp = Path(path).with_name(Path(path).name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def cache_dir() -> Path:
    """Where downloaded or dequantized weights live (never in git): ``$DYNATREE_CACHE``, else
    ``$XDG_CACHE_HOME/dynatree``, else ``~/.cache/dynatree``."""
    if os.environ.get("DYNATREE_CACHE"):
        return Path(os.environ["DYNATREE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dynatree"


CACHE_SYMBOL = "$DYNATREE_CACHE"  # a path under cache_dir(), as records write it
ELSEWHERE = "<outside>"            # a path outside the checkout, the cache and the home folder: only its name kept
# an absolute POSIX path of two components or more inside a text (not one of the kernel's own: /proc, /sys, /dev)
ABSOLUTE = re.compile(r"(?<![\w.~$<>/])/(?!(?:proc|sys|dev)/)[A-Za-z_][\w.+-]*/[^\s\"',;:]*")


def portable(path: "str | os.PathLike") -> str:
    """How a record names ``path``: relative to the checkout, ``$DYNATREE_CACHE/...`` under the user's cache,
    ``~/...`` under the home folder, else ``<outside>/<name>``. A record then holds no machine's layout, and two
    machines write the same text for the same files."""
    p = Path(os.path.abspath(os.path.expanduser(str(path))))
    for root, symbol in ((REPO, None), (cache_dir(), CACHE_SYMBOL), (Path.home(), "~")):
        root = Path(os.path.abspath(root))
        if p == root or root in p.parents:
            rel = p.relative_to(root).as_posix()
            return rel if symbol is None else symbol if rel == "." else f"{symbol}/{rel}"
    return f"{ELSEWHERE}/{p.name}"


def portable_text(text: str) -> str:
    """``text`` (a command line, say) with each absolute path in it written as ``portable`` writes it."""
    return ABSOLUTE.sub(lambda m: portable(m.group(0)), text)


def portable_strings(obj):
    """A JSON value with every string in it passed through ``portable_text`` (what a written record holds)."""
    if isinstance(obj, str):
        return portable_text(obj)
    if isinstance(obj, dict):
        return {k: portable_strings(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [portable_strings(v) for v in obj]
    return obj
