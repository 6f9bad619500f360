"""llama.cpp's command-line examples (``harness.peers.llamacpp_cli``) without llama.cpp: their command lines, the parsing
of the logs recorded from real runs (``tests/data/llamacpp``: ggml-org/llama.cpp@0c1e57098 as vendored by
llama-cpp-python 0.3.36, 32 new tokens of one WikiText-2 prompt and a chat prompt to EOS, timings uncontrolled), and
their errors when llama.cpp is absent. One test runs llama-tokenize when a build is found (skipped otherwise).
Re-record the fixtures with ``python tools/llamacpp_run.py --record tests/data/llamacpp`` (then update the numbers
below)."""
import json
from pathlib import Path

import pytest

from dynatree_lib.harness.peers import llamacpp_server as H
from dynatree_lib.harness.peers import llamacpp_cli as L

DATA = Path(__file__).parents[1] / "data" / "llamacpp"
RUNS = sorted(p.name.removesuffix(".json") for p in DATA.glob("*.json") if not p.name.endswith(".response.json"))

AR_TEXT = (" British military might .\n\nThe military history of Gibraltar during World War II is a testament to the "
           "bravery and sacrifice of the people of Gibraltar and the bravery of")
CHAT_TEXT = "The primary colors are: Red, Blue, and Yellow."

# read off the logs by hand: tokens, prefill / decode seconds, drafted and accepted draft tokens
EXPECTED = {
    "ar-bf16": dict(tokens=32, prefill_s=0.37722, decode_s=(2473.20 + 2.05) / 1e3, prompt_tokens=64),
    "ar-q4_1": dict(tokens=32, prefill_s=0.56571, decode_s=(3096.66 + 1.83) / 1e3, prompt_tokens=64),
    "chat-ar-eos": dict(tokens=13, prefill_s=2.97210, decode_s=(1383.08 + 22.56) / 1e3, prompt_tokens=35),
    "chat-draft-chain-3-eos": dict(tokens=13, prefill_s=0.240, decode_s=1.943, n_drafted=33, n_accepted=2),
    "draft-chain-3": dict(tokens=34, prefill_s=6.276, decode_s=4.793, n_drafted=63, n_accepted=12),
    "draft-chain-8": dict(tokens=34, prefill_s=0.202, decode_s=7.102, n_drafted=156, n_accepted=12),
    "draft-eagle3-3": dict(tokens=34, prefill_s=0.233, decode_s=0.873, n_drafted=60, n_accepted=13),
    "draft-tree-8x4": dict(tokens=34, prefill_s=1.706, decode_s=7.020, n_drafted=168, n_accepted=12),
    "lookahead": dict(tokens=33, prefill_s=0.337, decode_s=11.273, n_accepted=7),  # + the first, uncounted token
    "lookup-8": dict(tokens=32, prefill_s=0.354, decode_s=2.029, n_drafted=28, n_accepted=6),
    "ngram-cache": dict(tokens=32, prefill_s=0.489, decode_s=6.754, n_drafted=33, n_accepted=7),
    "ngram-map-k": dict(tokens=32, prefill_s=0.899, decode_s=3.475, n_drafted=8, n_accepted=4),
    "ngram-map-k4v": dict(tokens=32, prefill_s=0.423, decode_s=2.580, n_drafted=8, n_accepted=4),
    "ngram-mod": dict(tokens=32, prefill_s=0.461, decode_s=8.525, n_drafted=8, n_accepted=4),
    "ngram-simple": dict(tokens=32, prefill_s=0.467, decode_s=3.584, n_drafted=8, n_accepted=4),
}


def load(name):
    meta = json.loads((DATA / f"{name}.json").read_text())
    return meta, (DATA / f"{name}.stdout").read_text(), (DATA / f"{name}.stderr").read_text()


def test_every_mode_has_a_fixture():
    assert set(RUNS) == set(EXPECTED)
    assert {json.loads((DATA / f"{n}.json").read_text())["mode"] for n in RUNS} == set(H.MODES)


@pytest.mark.parametrize("name", RUNS)
def test_parse_recorded_run(name):
    meta, out, err = load(name)
    row = L.parse_run(meta["mode"], out, err, meta["prompt"], meta["n_new"])
    exp = EXPECTED[name]
    for k, v in exp.items():
        assert row[k] == pytest.approx(v, abs=1e-9), (k, row[k], v)
    assert row["wall_s"] == pytest.approx(row["prefill_s"] + row["decode_s"])
    assert row["tps"] == pytest.approx(row["tokens"] / row["wall_s"])
    assert row["tokens"] >= meta["n_new"] or not meta["ignore_eos"]
    if "n_accepted" in exp:
        assert row["iterations"] == row["tokens"] - row["n_accepted"]
        assert row["L_bar"] == pytest.approx(row["tokens"] / row["iterations"])
        assert row["ell_bar"] == pytest.approx(row["n_accepted"] / row["iterations"])
    if "n_drafted" in exp:
        assert row["accept_rate"] == pytest.approx(exp["n_accepted"] / exp["n_drafted"])
    if meta["mode"] == "ar":
        assert row["iterations"] == row["tokens"] and row["system_info"].startswith("n_threads = 2")
    # every mode decodes the same greedy text (up to its overshoot past n_new)
    ref = CHAT_TEXT if name.startswith("chat") else AR_TEXT
    assert row["text"].startswith(ref) if row["tokens"] >= EXPECTED["ar-bf16"]["tokens"] else row["text"] == ref
    assert "\x1b" not in row["text"] and not row["text"].endswith("\n\n")


def test_speculative_simple_statistics():
    """``-lv 4`` prints common_speculative's per-position acceptance for llama-speculative-simple."""
    meta, out, err = load("draft-chain-3")
    row = L.parse_run(meta["mode"], out, err, meta["prompt"])
    assert row["acc_rate_per_pos"] == [0.409, 0.136] and row["mean_acc_len"] == pytest.approx(1.55)
    stats = row["spec"]["stats"]["draft-simple"]
    assert (stats["calls_draft"], stats["gen_tokens"], stats["acc_tokens"]) == (22, 63, 12)
    assert stats["dur_ms"]["draft"] > 0


def test_perf_blocks_of_both_models():
    """llama-speculative prints the draft's and the target's perf counters: kept apart."""
    meta, out, err = load("draft-tree-8x4")
    perf = L.parse_perf(err)
    assert set(perf) == {"draft", "target"} and perf["target"]["prompt_tokens"] == 253
    assert perf["draft"]["eval_runs"] == 147 and "sampling_ms" not in perf["draft"]
    assert perf["target"]["sampling_ms"] == 10.12 and perf["target"]["load_ms"] == 205.7


def test_generated_text_formats():
    assert L.generated_text("abc [end of text]\n\n\n", "", "ar") == "abc"
    assert L.generated_text("abc\n\n", "", "ar") == "abc"
    assert L.generated_text("\n\nPROMPT new\n\n\n\n\n", "PROMPT", "draft-chain") == " new\n"
    assert L.generated_text("\n\nP\x1b[0;96m x\x1b[0m y\n\n\n\n", "P", "lookahead") == " x y"


def test_tokenize_fixtures_equal_our_ids():
    for key, run in (("text", "ar-bf16"), ("chat", "chat-ar-eos")):
        ids = L.parse_tokenize((DATA / f"tokenize-{key}.stdout").read_text())
        assert L.compare_ids(load(run)[0]["expect_ids"], ids)["tokens_match"]
    c = L.compare_ids([1, 198, 198], [1, 1116])
    assert not c["tokens_match"] and c["first_mismatch"] == 1 and c["llamacpp_at"] == [1116]
    assert L.compare_ids([1, 2], [1, 2, 3])["first_mismatch"] == 2


@pytest.mark.parametrize("name", RUNS)
def test_commands_reproduce_the_recorded_ones(name):
    meta, _, _ = load(name)
    opts = {"ar-q4_1": {}, "draft-chain-3": {"n_draft": 3}, "draft-chain-8": {"n_draft": 8}, "draft-eagle3-3": {"n_draft": 3},
            "chat-draft-chain-3-eos": {"n_draft": 3}, "draft-tree-8x4": {"n_draft": 8, "branches": 4, "p_split": 0.1},
            "lookup-8": {"n_draft": 8}}.get(name, {"n_draft": 8, "ngram_n": 4} if name.startswith("ngram-") and
                                            name != "ngram-cache" else {})
    argv = meta["argv"]
    target = argv[argv.index("-m") + 1]
    draft = argv[argv.index("-md") + 1] if "-md" in argv else None
    assert L.command(meta["mode"], "$LLAMACPP/build/bin", target, meta["prompt"], meta["n_new"], draft=draft,
                     ignore_eos=meta["ignore_eos"], **opts) == argv


def test_command_lines():
    prompt = "line one\\n with a backslash-n\nand a final newline\n"
    ar = L.command("ar", "/b", "/t.gguf", prompt, 16)
    assert ar[0] == "/b/llama-completion" and ar[ar.index("-p") + 1] == prompt and "--no-escape" in ar
    for flag, value in (("-n", "16"), ("-t", "2"), ("-tb", "2"), ("--temp", "0"), ("--top-k", "1"), ("-m", "/t.gguf")):
        assert ar[ar.index(flag) + 1] == value
    assert "--ignore-eos" in ar and "-no-cnv" in ar and "-f" not in ar
    assert "--ignore-eos" not in L.command("ar", "/b", "/t.gguf", prompt, 16, ignore_eos=False)

    chain = L.command("draft-chain", "/b", "/t.gguf", prompt, 16, draft="/d.gguf", n_draft=8)
    assert chain[0] == "/b/llama-speculative-simple" and chain[chain.index("-n") + 1] == "15"  # stops at > -n
    for flag, value in (("-md", "/d.gguf"), ("--spec-type", "draft-simple"), ("--spec-draft-n-max", "8"),
                        ("--spec-draft-p-min", "0"), ("-td", "2"), ("-lv", "4")):
        assert chain[chain.index(flag) + 1] == value
    assert "--draft-max" not in chain  # removed in this llama.cpp version (it exits with an error)

    eagle3 = L.command("draft-eagle3", "/b", "/t.gguf", prompt, 16, draft="/h.gguf", n_draft=3)
    assert eagle3[0] == "/b/llama-speculative-simple" and eagle3[eagle3.index("--spec-type") + 1] == "draft-eagle3"
    assert eagle3[eagle3.index("-md") + 1] == "/h.gguf" and eagle3[eagle3.index("--spec-draft-p-min") + 1] == "0"

    tree = L.command("draft-tree", "/b", "/t.gguf", prompt, 16, draft="/d.gguf", n_draft=8, branches=3, p_split=0.2)
    assert tree[0] == "/b/llama-speculative" and tree[tree.index("-np") + 1] == "3"
    assert tree[tree.index("--spec-draft-p-split") + 1] == "0.2"

    for t in H.NGRAM_TYPES:
        c = L.command(t, "/b", "/t.gguf", prompt, 16, n_draft=5, ngram_n=3)
        assert c[c.index("--spec-type") + 1] == t and "-md" not in c
        if t in ("ngram-simple", "ngram-map-k", "ngram-map-k4v"):
            assert c[c.index(f"--spec-{t}-size-m") + 1] == "5" and c[c.index(f"--spec-{t}-size-n") + 1] == "3"
    mod = L.command("ngram-mod", "/b", "/t.gguf", prompt, 16, n_draft=5, ngram_n=3)
    assert mod[mod.index("--spec-ngram-mod-n-max") + 1] == "5" and mod[mod.index("--spec-ngram-mod-n-min") + 1] == "1"
    lookup = L.command("lookup", "/b", "/t.gguf", prompt, 16, n_draft=5)
    assert lookup[0] == "/b/llama-lookup" and lookup[lookup.index("--spec-draft-n-max") + 1] == "5"
    assert L.command("lookahead", "/b", "/t.gguf", prompt, 16)[0] == "/b/llama-lookahead"

    with pytest.raises(ValueError, match="needs a draft"):
        L.command("draft-chain", "/b", "/t.gguf", prompt, 16)
    with pytest.raises(ValueError, match="unknown llama.cpp mode"):
        L.command("medusa", "/b", "/t.gguf", prompt, 16)
    assert L.tokenize_command("/b", "/t.gguf")[-4:] == ["--stdin", "--ids", "--no-escape", "--log-disable"]


def test_broken_logs():
    with pytest.raises(ValueError, match="decoded"):
        L.parse_run("draft-chain", "", "error: failed to load model")
    with pytest.raises(ValueError, match="perf counters"):
        L.parse_run("ar", "", "")


@pytest.mark.skipif(H.find_llamacpp() is None, reason="needs the llama.cpp binaries (tools/build_llamacpp.sh)")
def test_llamacpp_tokenizes_our_prompt():
    meta, _, _ = load("ar-bf16")
    assert L.tokenize(meta["prompt"], H.target_gguf("q4_1")) == meta["expect_ids"]




def test_absent_llamacpp_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNATREE_LLAMACPP", str(tmp_path / "nowhere"))
    with pytest.raises(H.LlamaCppMissing, match="llama-completion"):
        L.run("ar", "hello", 4)
