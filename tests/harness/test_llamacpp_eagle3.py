"""Our EAGLE-3 head in llama.cpp (experiment ``llamacpp_eagle3``, issue 56 item 5): the committed record
``results/cpu/llamacpp_eagle3.json`` is checked on every run (its structure, its dev prompts, and that it names the
committed head's sha256, so a new head makes it stale loudly); the experiment's pre-flight checks and command lines without
llama.cpp; and, where ``tools/build_llamacpp.sh`` has built llama.cpp, the conversion and one short greedy
comparison (skipped otherwise, with the reason)."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from dynatree_lib.harness.peers import eagle3_gguf as G
from dynatree_lib.harness.peers import llamacpp_server as H
from dynatree_lib.harness.peers import llamacpp_eagle3 as E
from dynatree_lib.harness.setup.paths import REPO
from dynatree_lib.harness.setup.profiles import get_profile

HEAD = REPO / "weights" / "smollm2-eagle3"
RESULT = REPO / "results" / "cpu" / "llamacpp_eagle3.json"
RERUN = "rerun `python -m dynatree_lib bench --experiment llamacpp_eagle3 --rerun` (after `bash tools/build_llamacpp.sh`)"
# the committed record was made before this was an experiment, by the tool it was then
MADE_BY_THE_TOOL = "python tools/llamacpp_eagle3.py run"
TIMING_KEYS = {"tps", "wall_s", "prefill_s", "decode_s", "timings", "ms_per_token", "encoded_s", "decoded_s"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def keys_of(x):
    if isinstance(x, dict):
        for k, v in x.items():
            yield k
            yield from keys_of(v)
    elif isinstance(x, list):
        for v in x:
            yield from keys_of(v)


@pytest.fixture(scope="module")
def rec():
    return json.loads(RESULT.read_text())


def test_the_record_names_the_committed_head(rec):
    head = rec["head"]
    assert head["folder"] == "weights/smollm2-eagle3"
    assert head["model_safetensors_sha256"] == sha256(HEAD / "model.safetensors"), \
        f"{RESULT.name} was measured with another head than weights/smollm2-eagle3: {RERUN}"
    assert head["config_json_sha256"] == sha256(HEAD / "config.json"), \
        f"{RESULT.name} was measured with another config.json of the head: {RERUN}"
    assert head["gguf"] == f"eagle3-{head['model_safetensors_sha256'][:12]}-{head['outtype']}.gguf"
    target = json.loads((REPO / "results" / "cpu" / "pair_eagle3.json").read_text())["models"]["target"]
    assert rec["target"]["sha256"] == target["weights"]["sha256"] and rec["target"]["gguf"] == target["weights"]["file"]


def test_the_record_says_what_ran_and_where(rec):
    ll = rec["llama_cpp"]
    assert ll["commit"] == H.COMMIT and ll["llama_cpp_python"] == H.VERSION and ll["version"] == H.version_string(ll | {
        "llama_cpp_commit": ll["commit"]})
    assert "-DGGML_NATIVE=ON" in ll["cmake_flags"] and "-DGGML_CUDA=OFF" in ll["cmake_flags"]
    conv = rec["conversion"]
    assert conv["command"].startswith("python $LLAMACPP/src/convert_hf_to_gguf.py weights/smollm2-eagle3 ")
    assert "--target-model-dir $TARGET_HF" in conv["command"] and f"$LLAMACPP/{rec['head']['gguf']}" in conv["command"]
    meta = conv["checks"]["metadata"]
    cfg = json.loads((HEAD / "config.json").read_text())
    assert meta["general.architecture"] == "eagle3"
    assert meta["eagle3.target_layers"] == cfg["eagle_aux_hidden_state_layer_ids"]
    assert set(conv["checks"]["tensors_equal"]) == set(G.TENSORS.values())
    cmds = rec["commands"]
    assert cmds["server_ar"].startswith("$LLAMACPP/build/bin/llama-server -m $Q4_1 ") and "-md" not in cmds["server_ar"]
    n = rec["settings"]["n_draft"]
    assert f"-md $LLAMACPP/{rec['head']['gguf']} --spec-type draft-eagle3 --spec-draft-n-max {n}" in cmds["server_eagle3"]
    assert cmds["server_request"]["temperature"] == 0 and cmds["server_request"]["top_k"] == 1
    for name, line in cmds.get("cli", {}).items():
        kind = name.split()[0]
        assert kind in ("ar", "no-draft", "draft-eagle3") and "--temp 0 --top-k 1 -s 0" in line
        assert line.startswith("$LLAMACPP/build/bin/llama-") and " -m $Q4_1 " in line, line
        assert line.count("--spec-type") == (kind != "ar"), name
        if kind == "no-draft":
            assert "--spec-type ngram-simple" in line and "--spec-ngram-simple-size-n 1024" in line
        if kind == "draft-eagle3":
            assert line.startswith("$LLAMACPP/build/bin/llama-speculative-simple ") and "--spec-type draft-eagle3" in line
    env = rec["environment"]
    assert env["device"] == "cpu" and "git_commit" in env and "date" in env
    assert rec["notes"] == list(E.NOTES) and rec.get("experiment", rec.get("tool")) in ("llamacpp_eagle3", MADE_BY_THE_TOOL)
    assert not TIMING_KEYS & set(keys_of(rec)), "the record holds no timing"


def test_the_record_uses_dev_prompts_and_adds_up(rec):
    from dynatree_lib.harness.setup.prompts import candidates

    rows = rec["prompts"]
    assert {r["workload"] for r in rows} == {"spec_bench", "wikitext2"} and len(rows) == rec["summary"]["n_prompts"]
    for r in rows:
        assert r["split"] == "dev" and r["id"] in candidates(r["workload"], "dev"), f"{r['id']} is not a dev prompt"
        s = r["server"]
        assert isinstance(s["equal"], bool) and (s["first_divergence"] is None) == s["equal"]
        assert 0 <= s["n_accepted"] <= s["n_drafted"] and s["n_spec"] >= 1
        assert r["ignore_eos"] == (r["workload"] == "wikitext2")
        if r["ignore_eos"]:
            assert s["n_ar"] == rec["settings"]["n_new"]
        if "probe" in s:
            assert s["probe"]["at"] == s["first_divergence"]
        if "cli" in r:
            c = r["cli"]
            assert c["tokens_match"] is True and c["own_ar_drafted"] == 0, "the example's own AR drafts nothing"
            assert c["equal_completion_ar"] == (c["first_divergence_from_completion_ar"] is None)
            assert ("probe" in c) == (not c["equal_completion_ar"])
    summ = rec["summary"]
    assert summ["all_equal_server"] == all(r["server"]["equal"] for r in rows)
    if "cli" in rows[0]:
        assert summ["all_equal_cli_own_ar"] == all(r["cli"]["equal_own_ar"] for r in rows)
        assert summ["all_equal_cli_completion_ar"] == all(r["cli"]["equal_completion_ar"] for r in rows)
    assert summ["n_drafted"] == sum(r["server"]["n_drafted"] for r in rows)
    assert summ["n_accepted"] == sum(r["server"]["n_accepted"] for r in rows)
    assert summ["accept_rate"] == pytest.approx(summ["n_accepted"] / summ["n_drafted"])


# ---- the tool without llama.cpp -----------------------------------------------------------------------------------

def test_check_head_names_what_the_converter_reads(tmp_path):
    import torch
    from safetensors.torch import save_file

    assert G.check_head(HEAD)["draft_vocab_size"] == 8192
    head = tmp_path / "head"
    head.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        G.check_head(head)
    cfg = json.loads((HEAD / "config.json").read_text())
    del cfg["eagle_aux_hidden_state_layer_ids"]
    (head / "config.json").write_text(json.dumps(cfg))
    save_file({k: torch.zeros(1) for k in G.TENSORS}, str(head / "model.safetensors"))
    with pytest.raises(ValueError, match="eagle_aux_hidden_state_layer_ids"):
        G.check_head(head)
    shutil.copy(HEAD / "config.json", head / "config.json")
    with pytest.raises(ValueError, match="lacks tensors .*: d2t"):
        G.check_head(head)
    cfg = json.loads((HEAD / "config.json").read_text())
    cfg["transformer_layer_config"]["num_hidden_layers"] = 2
    (head / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="one decoder layer"):
        G.check_head(head)


def test_command_lines_and_comparisons():
    argv = E.cli_command("/b", "/t.gguf", "/h.gguf", "a prompt", 16, n_draft=4, ignore_eos=False)
    assert argv[0] == "/b/llama-speculative-simple" and argv.count("--spec-type") == 1
    assert argv[argv.index("--spec-type") + 1] == "draft-eagle3" and argv[argv.index("-md") + 1] == "/h.gguf"
    for flag, value in (("--spec-draft-n-max", "4"), ("--spec-draft-n-min", "0"), ("--spec-draft-p-min", "0"),
                        ("--temp", "0"), ("--top-k", "1"), ("-n", "15")):
        assert argv[argv.index(flag) + 1] == value
    assert "--ignore-eos" not in argv
    extra = E.spec_args("/h.gguf", 3)
    srv = H.server_command("ar", "/b", "/t.gguf", 1, extra=tuple(extra))
    assert srv[-len(extra):] == extra and srv.count("--spec-type") == 1
    assert E.portable(["/x/build/bin/llama-server", "-m", "/w/t.gguf"], {"/x": "$LLAMACPP", "/w/t.gguf": "$Q4_1"}) \
        == "$LLAMACPP/build/bin/llama-server -m $Q4_1"
    # the runner's argv comes with ``paths.portable`` applied: its forms get the same names
    from dynatree_lib.harness.setup.paths import cache_dir
    root, gguf = cache_dir() / "llama.cpp" / "0", "/elsewhere/t.gguf"
    logged = ["$DYNATREE_CACHE/llama.cpp/0/build/bin/llama-completion", "-m", "<outside>/t.gguf", "-p", "a b"]
    assert E.portable(logged, {str(root): "$LLAMACPP", gguf: "$Q4_1"}) \
        == "$LLAMACPP/build/bin/llama-completion -m $Q4_1 -p 'a b'"
    assert E.compare([1, 2, 3], [1, 2, 3]) == {"equal": True, "first_divergence": None, "n_ar": 3, "n_spec": 3}
    c = E.compare([1, 2, 3, 4], [1, 2, 5])
    assert not c["equal"] and c["first_divergence"] == 2 and c["ar_at"] == [3, 4] and c["spec_at"] == [5]
    assert E.compare([1, 2], [1, 2, 3])["first_divergence"] == 2
    assert E.acceptance(10, 4, 20) == {"n_drafted": 10, "n_accepted": 4, "accept_rate": 0.4,
                                       "tokens_per_verification": 20 / 16}


def test_where_an_examples_text_leaves_ars_tokens():
    """Examples print text: the first AR token it does not continue with, a piece of a UTF-8 character (``" \\xce"``,
    ``"\\xa9"``: " Ω") judged with its character; an example may run past ``n_new`` tokens, never stop short."""
    from transformers import AutoTokenizer

    from dynatree_lib.harness.setup.weights import smollm2_folder

    tok = AutoTokenizer.from_pretrained(smollm2_folder())
    ar = [450, 33, 446, 216, 33, 5664, 119, 284]  # " L1 = 1 Ω and"
    assert tok.decode(ar) == " L1 = 1 Ω and"
    assert E.text_divergence(ar, " L1 = 1 Ω and more", tok) is None
    assert [E.text_divergence(ar, t, tok) for t in (" L1 = 1 Ωx", " L1 = 1 Δ and", " L1 = 2")] == [7, 5, 4]
    ref = {"text": " a b", "tokens": 2}
    assert E.continues(ref, {"text": " a b c"}, 2) and not E.continues(ref, {"text": " a b c"}, 3)
    assert not E.continues(ref, {"text": " a"}, 2)


def test_absent_llamacpp_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNATREE_LLAMACPP", str(tmp_path / "nowhere"))
    monkeypatch.setenv("DYNATREE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(H.LlamaCppMissing, match="convert_hf_to_gguf.py is missing.*build_llamacpp.sh"):
        G.source_dir()
    with pytest.raises(FileNotFoundError, match="llamacpp_eagle3 needs a llama.cpp build.*build_llamacpp.sh"):
        E.run_llamacpp_eagle3(get_profile("cpu"), root=tmp_path / "results")
    assert not (tmp_path / "results").exists()


# ---- with llama.cpp -----------------------------------------------------------------------------------------------

def _built() -> str | None:
    bin_dir = H.find_llamacpp()
    if bin_dir is None:
        return "needs the llama.cpp binaries (bash tools/build_llamacpp.sh)"
    missing = [b for b in ("llama-server", "llama-speculative-simple") if not (bin_dir / b).is_file()]
    if missing or not (H.root_of(bin_dir) / "src" / "convert_hf_to_gguf.py").is_file():
        return f"the llama.cpp build in {H.root_of(bin_dir)} lacks {missing or 'its source'} (tools/build_llamacpp.sh)"
    return None


@pytest.mark.skipif(_built() is not None, reason=_built() or "")
def test_the_head_converts_and_llamacpp_decodes_with_it_as_its_own_ar():
    from transformers import AutoTokenizer

    from dynatree_lib.harness.setup.weights import smollm2_folder

    gguf, argv = E.convert(HEAD)  # verified tensor by tensor against the folder
    assert gguf.name == f"eagle3-{sha256(HEAD / 'model.safetensors')[:12]}-bf16.gguf" and "--target-model-dir" in argv
    prompt = E.dev_prompts(AutoTokenizer.from_pretrained(smollm2_folder()), questions=1, L_max=64)[-1]
    rows, argvs = E.server_runs([prompt], gguf, 24, 3, H.find_llamacpp())
    ar, spec = rows[("ar", prompt["id"])], rows[("draft-eagle3", prompt["id"])]
    assert "draft-eagle3" in argvs["draft-eagle3"] and len(ar["token_ids"]) == 24
    assert E.compare(ar["token_ids"], spec["token_ids"])["equal"]
    assert spec["n_drafted"] > 0 and 0 <= spec["n_accepted"] <= spec["n_drafted"]
