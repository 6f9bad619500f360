"""The command line: bad flags are refused by name and value before any model loads; a chat turn decodes end to end."""
import json

import pytest

from dynatree_lib import cli
from dynatree_lib.harness.setup import tiny
from dynatree_lib.harness.setup.data import chat_prompt

QUESTION = "Name three primary colors."

# (flags after `--profile smoke`, what the error must say): argparse's "argument FLAG: ... VALUE"
REFUSED = [
    (["-T", "0"], "argument -T: must be an integer >= 1, got '0'"),
    (["-T", "-3"], "argument -T: must be an integer >= 1, got '-3'"),
    (["-T", "2.5"], "argument -T: must be an integer >= 1, got '2.5'"),
    (["--text", ""], "argument --text: must be non-empty text, got ''"),
    (["--text", " \n\t"], "argument --text: must be non-empty text, got ' \\n\\t'"),
    (["--temperature", "-0.5"], "argument --temperature: must be a number >= 0 (0: greedy), got '-0.5'"),
    (["--temperature", "nan"], "argument --temperature: must be a number >= 0 (0: greedy), got 'nan'"),
    (["--temperature", "inf"], "argument --temperature: must be a number >= 0 (0: greedy), got 'inf'"),
    (["--top-k", "-1"], "argument --top-k: must be an integer >= 0 (0: no top-k cut), got '-1'"),
    (["--top-p", "0"], "argument --top-p: must be a number in (0, 1], got '0'"),
    (["--top-p", "1.5"], "argument --top-p: must be a number in (0, 1], got '1.5'"),
    (["--dtype", "float8"], "argument --dtype: invalid choice: 'float8'"),
    (["--dataset", "imdb"], "argument --dataset: invalid choice: 'imdb'"),
    (["--method", "medusa"], "argument --method: invalid choice: 'medusa'"),
    (["--chat"], "argument --chat: needs --text"),
    (["--top-p", "0.9"], "argument --top-p: 0.9 applies only when sampling; add --temperature > 0"),
    (["--top-k", "5", "--temperature", "0"], "argument --top-k: 5 applies only when sampling"),
    (["--profile", "paper", "--dataset", "spec_bench"],
     "argument --dataset: 'spec_bench' is not a workload of profile 'paper'"),
]


def refused(argv: list[str], capsys) -> str:
    """The error a command line exits with (argparse's exit status 2)."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("cmd", ["generate", "show-tree"])
@pytest.mark.parametrize("flags, message", REFUSED, ids=[" ".join(f) for f, _ in REFUSED])
def test_bad_flags_are_refused_before_any_model_loads(no_model_loads, capsys, cmd, flags, message):
    err = refused([cmd, "--profile", "smoke", *flags], capsys)
    assert f"dynatree {cmd}: error: {message}" in err


def test_show_tree_refuses_zero_iterations(no_model_loads, capsys):
    err = refused(["show-tree", "--profile", "smoke", "--iterations", "0"], capsys)
    assert "argument --iterations: must be an integer >= 1, got '0'" in err


def test_chat_needs_a_tokenizer_with_a_chat_template(monkeypatch, capsys):
    with_template = tiny.tiny_tokenizer

    def without_template():
        tok = with_template()
        tok.chat_template = None
        return tok

    monkeypatch.setattr(tiny, "tiny_tokenizer", without_template)
    assert cli.main(["generate", "--profile", "smoke", "--chat", "--text", QUESTION, "-T", "2"]) == 2
    assert "--chat: the target's tokenizer (tiny:target) has no chat template" in capsys.readouterr().err


def decoded(capsys) -> tuple[str, dict]:
    """``generate``'s text (stdout) and its metrics (the last line of stderr)."""
    out = capsys.readouterr()
    return out.out, json.loads(out.err.strip().splitlines()[-1])


def test_chat_turn_sampled_end_to_end(monkeypatch, capsys):
    """--chat decodes the chat template's user turn to EOS, sampled with the flags' temperature, top-k and top-p."""
    from dynatree_lib import methods

    calls, real_generate = [], methods.generate

    def spy(target, prompt, T, **kw):
        calls.append((prompt.tolist(), T, kw))
        return real_generate(target, prompt, T, **kw)

    monkeypatch.setattr(methods, "generate", spy)
    assert cli.main(["generate", "--profile", "smoke", "--chat", "--temperature", "0.7", "--top-k", "40",
                     "--top-p", "0.9", "--text", QUESTION, "-T", "8"]) == 0
    _, metrics = decoded(capsys)
    [(prompt, T, kw)] = calls
    tok = tiny.tiny_tokenizer()
    assert prompt == chat_prompt(tok, QUESTION) and T == 8
    s = kw["sampling"]
    assert (s.temperature, s.top_k, s.top_p, kw["eos_token_id"]) == (0.7, 40, 0.9, tok.eos_token_id)
    assert 1 <= metrics["tokens"] <= 8


@pytest.mark.full
def test_chat_turn_on_the_cpu_pair(capsys):
    """What a new user types first: an instruction to SmolLM2-135M-Instruct, through its chat template."""
    assert cli.main(["generate", "--chat", "--temperature", "0.7", "--top-p", "0.9", "--text", QUESTION,
                     "-T", "8"]) == 0
    text, metrics = decoded(capsys)
    assert text.strip() and 1 <= metrics["tokens"] <= 8


def test_the_committed_head_drafts_when_named(capsys):
    """--draft names what drafts: the committed EAGLE-3 head with EAGLE-3's tree (its TALON tuning's setting)."""
    from dynatree_lib.harness.setup.weights import COMMITTED_DRAFTS, head_folder, is_head

    for ref in COMMITTED_DRAFTS:
        assert not is_head(ref) or (head_folder(ref) / "config.json").exists(), ref
    assert cli.main(["generate", "--method", "eagle3_tree", "--draft", "eagle3:weights/smollm2-eagle3", "--chat",
                     "--text", QUESTION, "-T", "8"]) == 0
    out = capsys.readouterr()
    assert "designed for a feature head" not in out.err and "note:" not in out.err
    assert 1 <= json.loads(out.err.strip().splitlines()[-1])["tokens"] <= 8


def test_a_head_method_on_a_draft_model_says_so(capsys):
    assert cli.main(["generate", "--profile", "smoke", "--method", "talon", "-T", "4"]) == 0
    assert "talon was designed for a feature head; it drafts on the draft model tiny:draft" in capsys.readouterr().err


def test_draft_help_lists_the_committed_drafts(capsys):
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for ref in ("embedded:draft", "eagle3:weights/smollm2-eagle3", "medusa:weights/smollm2-medusa",
                "hydra:weights/smollm2-hydra"):
        assert ref in text
    assert "talon, eagle3_tree, opt_tree, talon_hw were designed for a feature head" in text
