"""The chapter 10 exercise checks: they pass correct answers (including the package's own
functions) and fail, with CheckFailed, a stub and plausible wrong answers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from book_solutions import book_solution
from check_tables import table_tests

from fundamentallm import checks, generation
from fundamentallm.checks import CheckFailed

# --- correct answers ---------------------------------------------------------------------------


top_k_filter = book_solution("ch10-ex1", "top_k_filter")


top_p_filter = book_solution("ch10-ex2", "top_p_filter")


greedy_decode = book_solution("ch10-ex3", "greedy_decode")


cached_attention = book_solution("ch10-ex4", "cached_attention")


def cached_attention_explicit(q, k_new, v_new, cache):
    k_all = k_new if cache is None else torch.cat([cache[0], k_new], 2)
    v_all = v_new if cache is None else torch.cat([cache[1], v_new], 2)
    start = k_all.shape[2] - q.shape[2]
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
    for i in range(q.shape[2]):
        scores[:, :, i, start + i + 1:] = float("-inf")
    return scores.softmax(-1) @ v_all, (k_all, v_all)


CORRECT = {
    "check_top_k_filter": [top_k_filter, generation.top_k_filter],
    "check_top_p_filter": [top_p_filter, generation.top_p_filter],
    "check_greedy_decode": [greedy_decode],
    "check_cached_attention": [cached_attention, cached_attention_explicit],
}


def _top_k_strict(logits, k):
    """Breaks ties by index: keeps exactly k tokens."""
    k = min(k, logits.shape[-1])
    idx = torch.topk(logits, k, dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_inclusive(logits, p):
    """Off by one: drops the token whose own probability carries the mass past p."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    remove_sorted = torch.cumsum(torch.softmax(sorted_logits, -1), -1) > p
    return logits.masked_fill(remove_sorted.scatter(-1, order, remove_sorted), float("-inf"))


def _top_p_unsorted_marks(logits, p):
    """Forgets to scatter the marks back to vocabulary order."""
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, -1)
    return logits.masked_fill(torch.cumsum(probs, -1) - probs >= p, float("-inf"))


def _top_p_ascending(logits, p):
    """Sorts in ascending order: keeps the least likely tokens."""
    return logits.masked_fill(torch.isneginf(top_p_filter(-logits, p)), float("-inf"))


def _greedy_last_token_only(model_fn, ids, n):
    out = ids
    for _ in range(n):
        out = torch.cat([out, model_fn(out[:, -1:])[:, -1].argmax(-1)[:, None]], dim=1)
    return out


def _greedy_in_place(model_fn, ids, n):
    """Right tokens, but overwrites the caller's prompt."""
    out = greedy_decode(model_fn, ids, n)
    ids[0, 0] = (ids[0, 0] + 1) % 11
    return out


def _cached_no_offset(q, k_new, v_new, cache):
    """Applies an ordinary (T_new, T_new)-style causal mask, ignoring the cache offset."""
    if cache is not None:
        k_new, v_new = torch.cat([cache[0], k_new], 2), torch.cat([cache[1], v_new], 2)
    allowed = torch.ones(q.shape[2], k_new.shape[2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k_new, v_new, attn_mask=allowed), (k_new, v_new)


def _cached_no_mask(q, k_new, v_new, cache):
    if cache is not None:
        k_new, v_new = torch.cat([cache[0], k_new], 2), torch.cat([cache[1], v_new], 2)
    return F.scaled_dot_product_attention(q, k_new, v_new), (k_new, v_new)


def _cached_forgets_cache(q, k_new, v_new, cache):
    return cached_attention(q, k_new, v_new, None)


WRONG = {
    "check_top_k_filter": [
        _top_k_strict,
        lambda z, k: torch.softmax(top_k_filter(z, k), -1),       # returns probabilities
        lambda z, k: top_k_filter(z, k).nan_to_num(neginf=0.0),   # removed tokens 0, not -inf
        lambda z, k: z.masked_fill(z <= torch.topk(z, min(k, z.shape[-1]), -1).values[..., -1:],
                                   float("-inf")),                # removes the k-th itself
        lambda z, k: top_k_filter(z.view(-1, z.shape[-1])[:1].expand_as(z.view(-1, z.shape[-1])),
                                  k).view_as(z),                  # filters the first row only
    ],
    "check_top_p_filter": [
        _top_p_inclusive,
        _top_p_unsorted_marks,
        _top_p_ascending,
        lambda z, p: z,                                           # keeps everything
    ],
    "check_greedy_decode": [
        _greedy_last_token_only,
        _greedy_in_place,
        lambda f, ids, n: greedy_decode(f, ids, n)[:, ids.shape[1]:],  # new tokens only
        lambda f, ids, n: greedy_decode(f, ids, max(0, n - 1)),        # one token short
    ],
    "check_cached_attention": [
        _cached_no_offset,
        _cached_no_mask,
        _cached_forgets_cache,
        lambda q, k, v, c: (cached_attention(q, k, v, c)[0], (k, v)),  # cache never grows
    ],
}


test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, WRONG)


def test_top_p_reference_equals_the_package_on_unambiguous_rows():
    from fundamentallm.checks.ch10 import _ch10_top_p_reference

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(20, 30, generator=g) * 2
    for p in (0.2, 0.5, 0.9):
        keep, ambiguous = _ch10_top_p_reference(logits, p)
        assert not ambiguous.all()
        pkg = ~torch.isneginf(generation.top_p_filter(logits, p))
        assert torch.equal(keep[~ambiguous], pkg[~ambiguous])


def test_top_k_message_names_the_wrong_index():
    with pytest.raises(CheckFailed, match="should be kept"):
        checks.check_top_k_filter(_top_k_strict)


# --- positions_processed: predict, then measure -------------------------------------------------


def _positions_processed(prompt_len, n_new, use_cache):
    if use_cache:
        return prompt_len + n_new - 1 if n_new else 0
    return n_new * prompt_len + n_new * (n_new - 1) // 2


def test_positions_processed_correct(capsys):
    assert checks.check_positions_processed(_positions_processed) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [
    lambda p, n, c: n if c else n * (n + 1) // 2,                         # ignores the prompt
    lambda p, n, c: p + n if c else _positions_processed(p, n, False),    # a forward after the last token
])
def test_positions_processed_wrong(wrong):
    with pytest.raises(CheckFailed, match="check_positions_processed"):
        checks.check_positions_processed(wrong)


def test_positions_processed_matches_the_package():
    """The formula the check expects is what fundamentallm.generation.generate runs."""
    from fundamentallm import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1,
                                          max_seq_len=32)).eval()
    counted = []
    hook = model.token_embedding.register_forward_hook(lambda m, i, o: counted.append(i[0].shape[1]))
    try:
        for prompt_len, n_new in [(1, 5), (4, 7)]:
            for use_cache in (False, True):
                counted.clear()
                generation.generate(model, torch.zeros(1, prompt_len, dtype=torch.long), n_new,
                                    greedy=True, use_cache=use_cache)
                assert sum(counted) == _positions_processed(prompt_len, n_new, use_cache)
    finally:
        hook.remove()
