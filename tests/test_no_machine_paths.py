"""No committed output names a machine's layout: executed notebooks, records, weights cards and rendered tables hold
paths relative to the checkout or symbolic ones (``harness.setup.paths.portable``), so that a clone renders and compares
the same text on every machine."""
import json
import subprocess

from dynatree_lib.harness.setup.paths import ABSOLUTE, portable, portable_strings, portable_text

from .conftest import REPO, needs_git_checkout

OUTPUTS = ("executed", "results", "weights", "figures", "README.md", "RESULTS.md", "FINDINGS.md")
TEXT = (".ipynb", ".json", ".md", ".tex", ".txt", ".csv")


def notebook_text(raw: str) -> str:
    """A notebook's sources, metadata and text outputs (images are base64, which may look like paths)."""
    nb = json.loads(raw)
    parts = [json.dumps(nb.get("metadata", {}))]
    for cell in nb["cells"]:
        parts += ["".join(cell.get("source", "")), json.dumps(cell.get("metadata", {}))]
        for out in cell.get("outputs", []):
            parts.append("".join(out.get("text", "")))
            parts += ["".join(v) if isinstance(v, list) else str(v)
                      for k, v in out.get("data", {}).items() if not k.startswith("image/")]
            parts += out.get("traceback", [])
    return "\n".join(parts)


@needs_git_checkout
def test_no_committed_output_holds_a_machine_path():
    files = subprocess.run(["git", "ls-files", *OUTPUTS], cwd=REPO, capture_output=True, text=True).stdout.split()
    found = []
    for f in (f for f in files if f.endswith(TEXT)):
        text = (REPO / f).read_text(errors="replace")
        text = notebook_text(text) if f.endswith(".ipynb") else text
        found += [f"{f}: {m.group(0)[:120]}" for m in ABSOLUTE.finditer(text)]
    assert not found, "machine paths in committed outputs (write them with harness.setup.paths.portable):\n" + \
        "\n".join(found[:20])


def test_paths_are_written_relative_or_symbolic(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNATREE_CACHE", str(tmp_path / "cache"))
    assert portable(REPO / "weights" / "smollm2-eagle3") == "weights/smollm2-eagle3"
    assert portable(tmp_path / "cache" / "llama.cpp" / "x.gguf") == "$DYNATREE_CACHE/llama.cpp/x.gguf"
    assert portable(tmp_path / "cache") == "$DYNATREE_CACHE"
    assert portable("/opt/elsewhere/checkout") == "<outside>/checkout"
    line = f"{tmp_path}/cache/bin/llama-server -m {tmp_path}/cache/t.gguf --host 127.0.0.1 -n 8"
    assert portable_text(line) == "$DYNATREE_CACHE/bin/llama-server -m $DYNATREE_CACHE/t.gguf --host 127.0.0.1 -n 8"
    for kept in ("tok/s", "1/2", "a / b", "/proc/cpuinfo", "figures/cpu/x.png", "~/out"):
        assert portable_text(kept) == kept


def test_portable_strings_rewrites_every_string_of_a_record():
    assert portable_strings({"a": ["/opt/x/y", 1], "b": "-m /opt/w/t.gguf"}) == \
        {"a": ["<outside>/y", 1], "b": "-m <outside>/t.gguf"}
