"""Beam search (fundamentallm.beam) equals Hugging Face's generate(num_beams=...): the same tokens
and the same sequence scores, on a GPT-2 built from a config (random weights, no download) and
loaded into the package's Transformer with from_hf_gpt2; and its bad arguments are clear errors."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.beam import beam_search

transformers = pytest.importorskip("transformers")
logging.getLogger("transformers").setLevel(logging.ERROR)

EOS = 3


@pytest.fixture(scope="module")
def models():
    from fundamentallm.interop import from_hf_gpt2

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                  bos_token_id=0, eos_token_id=EOS)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # peaked distributions, and an end token likely enough to end some beams
        hf.transformer.wte.weight.mul_(4.0)
        hf.transformer.wte.weight[EOS] *= 2.5
    return hf, from_hf_gpt2(hf)


PROMPT = torch.tensor([[5, 9, 11, 2], [7, 1, 1, 8]])
SETTINGS = [
    dict(num_beams=3, max_new_tokens=8, length_penalty=1.0, early_stopping=False),
    dict(num_beams=4, max_new_tokens=10, length_penalty=2.0, early_stopping=True),
    dict(num_beams=5, max_new_tokens=7, length_penalty=-1.0, early_stopping=False, num_return_sequences=3),
    dict(num_beams=4, max_new_tokens=15, length_penalty=1.5, early_stopping="never", num_return_sequences=2),
    dict(num_beams=2, max_new_tokens=12, length_penalty=0.0, early_stopping="never"),
]


def _hf(hf, eos, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = hf.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), do_sample=False, eos_token_id=eos,
                          pad_token_id=eos if eos is not None else 0, return_dict_in_generate=True,
                          output_scores=True, **kw)
    return out.sequences, out.sequences_scores


@pytest.mark.parametrize("eos", [EOS, None], ids=["eos", "no-eos"])
@pytest.mark.parametrize("setting", SETTINGS, ids=[f"beams{s['num_beams']}-lp{s['length_penalty']}-"
                                                   f"es{s['early_stopping']}" for s in SETTINGS])
def test_beam_search_equals_hugging_face(models, setting, eos):
    hf, ours = models
    expected_ids, expected_scores = _hf(hf, eos, **setting)
    ids, scores = beam_search(ours, PROMPT, eos_token_id=eos, pad_token_id=eos, **setting)
    assert torch.equal(ids, expected_ids)
    torch.testing.assert_close(scores, expected_scores)


def test_some_hypotheses_end_early(models):
    """The settings above exercise the end token: some returned hypotheses stop before the limit."""
    _, ours = models
    ids, _ = beam_search(ours, PROMPT, eos_token_id=EOS, pad_token_id=EOS, **SETTINGS[2])
    generated = ids[:, PROMPT.shape[1]:]
    lengths = [int(row.tolist().index(EOS)) + 1 if EOS in row.tolist() else len(row) for row in generated]
    assert min(lengths) < generated.shape[1]


def test_one_beam_is_greedy(models):
    from fundamentallm.generation import generate

    _, ours = models
    ids, scores = beam_search(ours, PROMPT, num_beams=1, max_new_tokens=6)
    assert torch.equal(ids, generate(ours, PROMPT, 6, greedy=True))
    logp = torch.log_softmax(ours(ids)[0][:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    torch.testing.assert_close(scores, logp[:, PROMPT.shape[1] - 1:].sum(-1) / 6)


def test_four_beams_find_sequences_at_least_as_likely_as_greedy_here(models):
    """Without an end token (and length_penalty 0) a score is a total log-probability. On this
    model the best of 4 beams scores at least greedy's on both prompts: measured, not a theorem
    (beam search can prune the path greedy takes, and lose to it)."""
    _, ours = models
    _, greedy = beam_search(ours, PROMPT, num_beams=1, max_new_tokens=8, length_penalty=0.0)
    _, beam = beam_search(ours, PROMPT, num_beams=4, max_new_tokens=8, length_penalty=0.0)
    assert (beam >= greedy - 1e-6).all()


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_beams=0), "num_beams=0 must be an int >= 1"),
    (dict(num_beams=2.0), "num_beams=2.0 must be an int"),
    (dict(max_new_tokens=0), "max_new_tokens=0"),
    (dict(num_return_sequences=3), "num_return_sequences=3 must be <= num_beams=2"),
    (dict(length_penalty=float("nan")), "length_penalty=nan must be a finite number"),
    (dict(early_stopping="sometimes"), "early_stopping='sometimes' must be True, False or 'never'"),
    (dict(eos_token_id=99), "eos_token_id: 99 is not a token id"),
    (dict(eos_token_id="3"), "eos_token_id='3' must be None"),
    (dict(max_new_tokens=100), "exceeds the model's max_seq_len=16"),
])
def test_bad_arguments_are_clear_errors(kwargs, match):
    model = Transformer(TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1, max_seq_len=16))
    args = dict(num_beams=2, max_new_tokens=3) | kwargs
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace("[", r"\[")):
        beam_search(model, torch.tensor([[1, 2]]), **args)


def test_bad_prompts_are_clear_errors():
    model = Transformer(TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1, max_seq_len=16))
    with pytest.raises(TypeError, match="integer torch.Tensor"):
        beam_search(model, torch.tensor([[1.0, 2.0]]), 2, 3)
    with pytest.raises(ValueError, match="shape"):
        beam_search(model, torch.zeros(1, 0, dtype=torch.long), 2, 3)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        beam_search("gpt2", torch.tensor([1, 2]), 2, 3)
