"""Bad input gets a clear error from our code (never a torch traceback or a silent wrong answer)."""

import numpy as np
import pytest
import torch

from dynatree_lib import FixedTreeConfig, LinearConfig, generate
from dynatree_lib.harness.setup.models import load_pair
from dynatree_lib.harness.setup.tiny import tiny_gpt_neox
from dynatree_lib.core.engines.runner import check_pair

from .conftest import MAX_POS


def test_mismatched_vocabularies(target):
    other = tiny_gpt_neox(vocab_size=80, max_positions=MAX_POS)
    with pytest.raises(ValueError, match="vocabularies differ"):
        generate(target, torch.tensor([1, 2]), 5, draft=other, method=LinearConfig(2))


def test_mismatched_tokenizers(target, draft):
    class Tok:
        def __init__(self, v):
            self.v = v

        def get_vocab(self):
            return self.v

    check_pair(target, draft, Tok({"a": 0}), Tok({"a": 0}))
    with pytest.raises(ValueError, match="tokenizers differ"):
        check_pair(target, draft, Tok({"a": 0}), Tok({"b": 0}))


@pytest.mark.parametrize("T", [0, -3, 2.5, True, "4", None])
def test_bad_T(target, T):
    with pytest.raises(ValueError, match="T \\(new tokens\\) must be an integer >= 1"):
        generate(target, torch.tensor([1, 2]), T)


def test_numpy_integers_are_integers(target, draft):
    ref = generate(target, torch.tensor([1, 2]), 5).tokens
    assert generate(target, torch.tensor([1, 2]), np.int64(5)).tokens == ref
    assert generate(target, torch.tensor([1, 2]), np.int64(5), draft=draft,
                    method=LinearConfig(np.int64(3))).tokens == ref


def test_prompt_types(target, draft):
    ref = generate(target, torch.tensor([4, 5, 6]), 6).tokens
    assert generate(target, [4, 5, 6], 6).tokens == ref                      # a list of ints simply works
    assert generate(target, (4, 5, 6), 6, draft=draft, method="dynatree").tokens == ref
    assert generate(target, torch.tensor([4, 5, 6], dtype=torch.int32), 6).tokens == ref
    with pytest.raises(TypeError, match="integer token ids"):
        generate(target, torch.tensor([1.0, 2.0]), 3)
    with pytest.raises(TypeError, match="list of token ids"):
        generate(target, [1, 2.5], 3)
    with pytest.raises(TypeError, match="got str"):
        generate(target, "hello", 3)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        generate(target, torch.tensor([], dtype=torch.long), 3)
    with pytest.raises(ValueError, match="non-empty 1-D"):
        generate(target, torch.ones(2, 3, dtype=torch.long), 3)


@pytest.mark.parametrize("bad", [96, 1000, -1])
def test_out_of_range_token_ids(target, draft, bad):
    for kw in ({}, {"draft": draft, "method": "fixed_tree"}):
        with pytest.raises(ValueError, match=f"token id {bad}, outside the target's vocabulary \\[0, 96\\)"):
            generate(target, torch.tensor([1, bad, 2]), 3, **kw)


def test_prompt_longer_than_context(target, draft):
    p = torch.ones(MAX_POS - 3, dtype=torch.long)
    with pytest.raises(ValueError, match="exceeds the target context"):
        generate(target, p, 4)
    with pytest.raises(ValueError, match=rf"shorten the prompt to at most {MAX_POS - 10} tokens or lower T to at most 3"):
        generate(target, p, 10, draft=draft, method=LinearConfig(2))
    assert len(generate(target, p, 3, draft=draft, method=LinearConfig(2)).tokens) == 3  # the advice, followed


@pytest.mark.parametrize("method", [None, "linear", "hf_assisted", "streaming_spec", "talon"])
def test_kv_mode_is_checked_by_every_decoder(target, draft, method):
    with pytest.raises(ValueError, match="kv_mode"):
        generate(target, torch.tensor([1]), 3, draft=draft, method=method, kv_mode="bogus")


def test_methods_by_name_and_bad_methods(target, draft):
    ref = generate(target, torch.tensor([1, 2]), 8).tokens
    for name in ("ar", "linear", "fixed_tree", "dynatree", "talon", "hf_assisted"):
        assert generate(target, torch.tensor([1, 2]), 8, draft=draft, method=name).tokens == ref
    with pytest.raises(ValueError, match="unknown method 'medusa'"):
        generate(target, torch.tensor([1]), 3, draft=draft, method="medusa")
    with pytest.raises(TypeError, match="method must be a name"):
        generate(target, torch.tensor([1]), 3, draft=draft, method=42)
    with pytest.raises(ValueError, match="needs a draft"):
        generate(target, torch.tensor([1]), 3, method=LinearConfig(2))


def test_bad_eos(target):
    with pytest.raises(ValueError, match="eos_token_id"):
        generate(target, torch.tensor([1]), 3, eos_token_id=500)


def test_train_mode_is_refused(target, draft):
    m = tiny_gpt_neox(vocab_size=96, max_positions=MAX_POS).train()
    with pytest.raises(ValueError, match="training mode .* call .eval\\(\\)"):
        generate(m, torch.tensor([1, 2]), 3)
    with pytest.raises(ValueError, match="draft .* training mode"):
        generate(target, torch.tensor([1, 2]), 3, draft=m, method="linear")


@pytest.mark.parametrize("make, msg", [
    (lambda: FixedTreeConfig(D=True), "FixedTreeConfig.D must be an int"),
    (lambda: FixedTreeConfig(tau="0.1"), "FixedTreeConfig.tau must be a float"),
    (lambda: LinearConfig(K=2.0), "LinearConfig.K must be an int"),
])
def test_config_field_types(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()


def test_unknown_engine_dtype_and_models():
    with pytest.raises(ValueError, match="engine must be one of"):
        load_pair("tiny:target", "tiny:draft", engine="turbo")
    with pytest.raises(ValueError, match="dtype must be"):
        load_pair("tiny:target", "tiny:draft", dtype="float8")
    with pytest.raises(ValueError, match="unknown tiny model"):
        load_pair("tiny:target", "tiny:drift")
    with pytest.raises(ValueError, match="fast path supports plain Llama"):
        load_pair("tiny:target", "tiny:draft", engine="static")  # GPT-NeoX has no fast path


def test_an_unused_budget_changes_nothing(target, draft):
    """A node budget far beyond the trees built gives the same trees and tokens (its cost, once 20x that of a
    256 budget, is reported by ``tools/ratio_report.py budget``, not timed here)."""
    p = torch.tensor([1, 2, 3])
    small, large = (generate(target, p, 20, draft=draft, method=FixedTreeConfig(D=2, B=2, tau=0.0, n_max=n),
                             record_trees=20) for n in (256, 16384))
    assert large.tokens == small.tokens and large.log.nodes == small.log.nodes and max(small.log.nodes) < 256
    assert [t["tokens"] for t in large.trees] == [t["tokens"] for t in small.trees]


def test_generate_takes_keywords_past_T_and_the_sampling_law_whole(target, draft):
    import inspect

    params = inspect.signature(generate).parameters
    assert [n for n, p in params.items() if p.kind is not p.KEYWORD_ONLY] == ["target", "prompt", "T"]
    p = torch.tensor([1, 2, 3])
    with pytest.raises(TypeError, match="positional"):
        generate(target, p, 4, draft)
    with pytest.raises(TypeError, match="sampling must be a Sampling"):
        generate(target, p, 4, sampling=1.0)
