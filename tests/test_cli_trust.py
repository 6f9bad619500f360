"""A command line a user can trust: no method is silently replaced by AR, every bad value is named before anything
loads (no traceback, no wait on the model hub), the advice an error gives works when followed, a decode says what
it did (a summary line, valid JSON, --compare-ar's speedup and equality), Ctrl-C ends it with code 130, and every
command says what it does."""
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynatree_lib import cli
from dynatree_lib import methods as registry

REPO = Path(__file__).resolve().parents[1]
PEERS = [n for n, m in registry.REGISTRY.items() if m.impl not in ("ours", "transformers")]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of the command line (argparse's refusals exit 2 too)."""
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def strict_json(line: str) -> dict:
    def refuse(constant):
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def test_the_peers_are_every_registered_engine_of_another_project():
    assert set(PEERS) == {"llamacpp", "vllm"}


@pytest.mark.parametrize("built", [False, True], ids=["engine-missing", "engine-built"])
@pytest.mark.parametrize("name", PEERS)
def test_a_peer_method_is_refused_by_name_never_decoded_as_ar(no_model_loads, monkeypatch, capsys, name, built):
    method = registry.REGISTRY[name]
    why = "engine X is not built here: run tools/build_x.sh"
    monkeypatch.setitem(registry.REGISTRY, name,
                        dataclasses.replace(method, unavailable=lambda: None if built else why))
    code, _, err = run(["generate", "--profile", "smoke", "--method", name, "-T", "4"], capsys)
    assert code == 2 and f"argument --method: {name} is {method.display.label}, not our engine" in err
    assert "bench --experiment" in err and (why in err) != built


def test_a_method_without_a_setting_is_refused_by_name_not_replaced_by_ar():
    from dynatree_lib.harness.setup.profiles import get_profile

    for name in PEERS + ["dynatree_cost"]:
        with pytest.raises(ValueError, match=rf"method '{name}' has no setting of its own in profile 'smoke'"):
            get_profile("smoke").method(name, "wikitext2")
    assert get_profile("smoke").method("ar", "wikitext2") is None


@pytest.mark.parametrize("name", [n for n in registry.REGISTRY if n not in PEERS])
def test_every_method_decodes_with_itself_and_says_which_engine_ran(capsys, name):
    """Registry-wide: each method the CLI decodes runs, says so on its summary line, and its metrics show its own
    work: a drafting method drafted, transformers' methods ran transformers' loop."""
    code, text, err = run(["generate", "--profile", "smoke", "--method", name, "-T", "12"], capsys)
    assert code == 0, err
    lines = err.strip().splitlines()
    metrics, summary = strict_json(lines[-1]), next(x for x in lines if x.startswith(f"{name}: "))
    assert re.match(rf"{name}: \d+ tokens in \d+ target verifications \([\d.]+ tokens per verification\), "
                    rf"[\d.]+ tokens/s, engine {re.escape(metrics['engine'])}$", summary)
    method = registry.REGISTRY[name]
    assert metrics["engine"].startswith("hf") == (method.impl == "transformers")
    if method.drafts and method.impl == "ours":
        assert metrics["draft_forwards_per_iter"] > 0  # it drafted: not AR in its place


def test_ar_metrics_are_valid_json_with_null_for_what_does_not_apply(capsys):
    code, _, err = run(["generate", "--profile", "smoke", "--method", "ar", "-T", "6"], capsys)
    metrics = strict_json(err.strip().splitlines()[-1])
    assert code == 0 and metrics["accept_rate"] is None and metrics["tokens"] == 6


def test_compare_ar_prints_the_speedup_and_whether_the_tokens_equal(capsys):
    code, _, err = run(["generate", "--profile", "smoke", "--method", "dynatree", "-T", "16", "--compare-ar"], capsys)
    assert code == 0, err
    assert re.search(r"speedup over AR: [\d.]+x \(median of 3 alternations, [\d.]+-[\d.]+x\); tokens: equal to "
                     r"AR's", err)
    code, _, err = run(["generate", "--profile", "smoke", "--method", "dynatree", "-T", "8", "--temperature", "1",
                        "--compare-ar"], capsys)
    assert code == 0 and "tokens: sampled, so not compared with AR's" in err


BAD = [
    (["--set", "T=abc"], "error: protocol.T must be an integer, got 'abc'"),
    (["--set", "L_max=512"], "error: protocol.L_max must be a dict such as"),
    (["--set", "nonsense=1"], "error: unknown profile field 'nonsense'"),
    (["--set", "n_prompts=0"], "error: protocol.n_prompts must be an integer >= 1, got 0"),
    (["--set", "temperatures=1.0"], "error: protocol.temperatures must be a tuple such as (1.0,), got 1.0"),
    (["--set", "workloads=('imdb',)"], "error: protocol.workloads: unknown ['imdb']"),
    (["--set", "dtype=int8"], "error: models.dtype must be one of"),
    (["--set", "draft=nope:x"], "error: models.draft 'nope:x': unknown kind 'nope'"),
    (["--draft", "foo:bar"], "error: --draft 'foo:bar': unknown kind 'foo'"),
    (["--draft", "weights/nope"], "error: --draft 'weights/nope': no such folder"),
    (["--draft", "eagle3:weights/nope"], "weights/nope/config.json is missing"),
    (["--dtype", "float16"], "argument --dtype: float16 is the paper profile's GPU precision"),
]


@pytest.mark.parametrize("flags, message", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_bad_values_are_named_in_one_line_before_anything_loads(no_model_loads, capsys, flags, message):
    t0 = time.perf_counter()
    code, _, err = run(["generate", "--profile", "cpu", "-T", "4", *flags], capsys)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert time.perf_counter() - t0 < 5  # no wait on the model hub


def advice(err: str) -> dict:
    """The numbers a context-overflow error advises: {"prompt": at most that many tokens, "T": at most that}."""
    out = {}
    if m := re.search(r"shorten the prompt to at most (\d+) tokens", err):
        out["prompt"] = int(m.group(1))
    if m := re.search(r"lower T to at most (\d+)", err):
        out["T"] = int(m.group(1))
    return out


def test_the_context_overflow_advice_works_when_followed(capsys):
    """A --text prompt too long for the context with its -T: the error says how far to lower -T, or how far to
    shorten the text; each, followed, decodes (the smoke target reads one token a byte)."""
    text = "a short prompt "
    code, _, err = run(["generate", "--profile", "smoke", "--text", text, "-T", "900"], capsys)
    assert code == 2 and "exceeds the target context" in err
    fix = advice(err)
    code, _, err = run(["generate", "--profile", "smoke", "--text", text, "-T", str(fix["T"])], capsys)
    assert code == 0, err
    long = "word " * 200
    code, _, err = run(["generate", "--profile", "smoke", "--text", long, "-T", "400"], capsys)
    fix = advice(err)
    assert code == 2 and "prompt" in fix
    code, _, err = run(["generate", "--profile", "smoke", "--text", long[:fix["prompt"]], "-T", "400"], capsys)
    assert code == 0, err


def test_ctrl_c_ends_a_decode_with_one_line_and_code_130():
    code = ("import os, signal, threading\nfrom dynatree_lib import cli\n"
            "threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
            "raise SystemExit(cli.main(['generate', '--profile', 'smoke', '-T', '400', '--compare-ar']))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "interrupted" and "Traceback" not in done.stderr


def test_every_command_says_what_it_does_and_lists_its_choices(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = " ".join(capsys.readouterr().out.split())
    for name, what in cli.COMMANDS.items():
        assert f"{name} {' '.join(what.split())}" in top, name
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    bench = " ".join(capsys.readouterr().out.split())
    assert "{authors,authors-dryrun,cpu,paper,paper-dryrun,smoke}" in bench
    for name in ("main", "sampling", "heads", "costs", "head_records"):
        assert f" {name}," in bench or f" {name} " in bench, name


def test_long_steps_say_so_before_they_start(monkeypatch, capsys, tmp_path):
    """Compiling the forward graphs and building the kernels print a line first (they take seconds to minutes)."""
    import torch

    from dynatree_lib.core.engines import kernels, static
    from dynatree_lib.harness.setup.tiny import tiny_llama

    monkeypatch.setattr(torch, "compile", lambda module, **kw: module)
    monkeypatch.setattr(static.StaticRunner, "warm", lambda self: None)
    static.StaticRunner(tiny_llama(layers=1, vocab_size=32, max_positions=64), compile=True, kernel=False)
    assert "compiling the static+compile forward graphs" in capsys.readouterr().err
    if kernels.available():
        monkeypatch.setattr(kernels, "build_folder", lambda: tmp_path)
        monkeypatch.setattr("torch.utils.cpp_extension.load", lambda *a, **kw: None)
        kernels.available.cache_clear()
        try:
            assert kernels.available()
            assert f"building the bf16 kernels (once; cached in {tmp_path})" in capsys.readouterr().err
        finally:
            kernels.available.cache_clear()


def run_all(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "run_all.sh"), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_run_all_help_is_its_header_and_names_every_profile():
    done = run_all("--help")
    assert done.returncode == 0 and "set -euo" not in done.stdout
    for profile in ("cpu", "paper", "paper-dryrun", "authors", "authors-dryrun", "smoke"):
        assert f"./run_all.sh {profile}" in done.stdout or profile == "cpu", profile
    for option in ("--render", "--rerun", "--quick", "--plan", "--allow-dirty", "--allow-busy", "--set", "--only"):
        assert option in done.stdout, option


@pytest.mark.parametrize("option, message", [("--only=99", "--only=99: no notebook notebooks/99_*.py"),
                                             ("--only=3", "--only takes a notebook's two digits, e.g. --only=03"),
                                             ("--bogus", "unknown option --bogus")])
def test_run_all_refuses_an_option_that_would_do_nothing(option, message):
    done = run_all(option)
    assert done.returncode == 2 and message in done.stderr


def test_converting_the_target_says_so_first(monkeypatch, capsys, tmp_path):
    """The first load converts the GGUF target (seconds): a line says so before it starts."""
    import transformers

    from dynatree_lib.harness.setup import weights

    class Stop(Exception):
        pass

    def refuse(*_a, **_kw):
        raise Stop

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    with pytest.raises(Stop):
        weights.dequantize(tmp_path / "t.gguf", "0" * 64, tmp_path / "folder")
    assert "dequantizing t.gguf into" in capsys.readouterr().err


def test_a_notebooks_json_list_becomes_the_profiles_tuple():
    """run_all's --set reaches a notebook as papermill JSON, where a tuple is a list."""
    from dynatree_lib.harness.setup.profiles import get_profile
    prof = get_profile("smoke", workloads=["wikitext2", "spec_bench"], temperatures=[1.0])
    assert prof.protocol.workloads == ("wikitext2", "spec_bench") and prof.protocol.temperatures == (1.0,)


def test_control_decodes_exactly_and_show_tree_says_what_it_chose(capsys):
    code, _, err = run(["generate", "--profile", "smoke", "--method", "dynatree", "-T", "16", "--control",
                        "--compare-ar"], capsys)
    assert code == 0 and "tokens: equal to AR's" in err, err
    code, out, err = run(["show-tree", "--profile", "smoke", "--method", "fixed_tree", "-T", "12", "--control",
                          "--iterations", "3"], capsys)
    assert code == 0, err
    assert out.count("controller: ") == 3 and "the method's own budget, to start" in out


def test_control_of_a_method_without_our_tree_is_refused_by_name(no_model_loads, capsys):
    code, _, err = run(["generate", "--profile", "smoke", "--method", "hf_assisted", "-T", "4", "--control"], capsys)
    assert code == 2 and "--control sizes the trees of our speculative loop; --method hf_assisted has none" in err
    assert "Traceback" not in err
