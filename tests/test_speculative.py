"""Speculative decoding (fundamentallm/speculative.py): greedy equals the target's greedy output,
and under sampling the output distribution is the target's, exactly (enumerated)."""

import itertools

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.generation import SamplingConfig, generate
from fundamentallm.speculative import exact_distribution, speculative_generate


def _model(seed, vocab=50, d=32, layers=2, T=64):
    torch.manual_seed(seed)
    model = Transformer(TransformerConfig(vocab_size=vocab, d_model=d, num_heads=2, num_layers=layers,
                                          max_seq_len=T)).eval()
    with torch.no_grad():  # sharper distributions than at initialisation
        for p in model.parameters():
            p.mul_(3.0)
    return model


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_equals_the_targets_greedy(k):
    target, draft = _model(0), _model(1, d=16, layers=1)
    prompt = torch.tensor([[3, 14, 15, 9, 2]])
    expected = generate(target, prompt, 30, greedy=True)
    out, stats = speculative_generate(target, draft, prompt, 30, k=k, greedy=True)
    assert torch.equal(out, expected)
    assert stats.generated == 30 and stats.drafted == k * stats.rounds
    # a draft equal to the target has every proposal accepted
    same, stats = speculative_generate(target, target, prompt[0], 30, k=k, greedy=True)
    assert torch.equal(same, expected[0]) and stats.acceptance_rate == 1.0


def _target_distribution(model, prompt, n, temperature):
    """P(x_1..x_n | prompt) for every sequence, from full forwards (no cache)."""
    V = model.config.vocab_size
    dist = {}
    with torch.no_grad():
        for seq in itertools.product(range(V), repeat=n):
            ids = torch.tensor([prompt + list(seq)])
            logits, _ = model(ids)
            probs = torch.softmax(logits[0, len(prompt) - 1:-1].double() / temperature, -1)  # (n, V)
            dist[seq] = float(torch.prod(probs[torch.arange(n), torch.tensor(seq)]))
    return dist


@pytest.mark.parametrize("k,temperature,n", [(1, 1.0, 3), (2, 1.0, 3), (2, 0.7, 3), (3, 1.0, 2)])
def test_sampling_distribution_is_exactly_the_targets(k, temperature, n):
    target, draft = _model(2, vocab=3, d=16), _model(3, vocab=3, d=8, layers=1)
    prompt = [0, 2, 1]
    spec = exact_distribution(target, draft, prompt, n, k=k, temperature=temperature)
    ref = _target_distribution(target, prompt, n, temperature)
    assert abs(sum(spec.values()) - 1) < 1e-9
    assert set(spec) <= set(ref)
    for seq, p in ref.items():
        assert abs(spec.get(seq, 0.0) - p) < 1e-6, (seq, spec.get(seq), p)
    # the draft's own distribution is different: the test could tell them apart
    draft_ref = _target_distribution(draft, prompt, n, temperature)
    assert max(abs(draft_ref[s] - ref[s]) for s in ref) > 1e-2


def test_the_enumerated_runner_samples_as_the_cached_one():
    """exact_distribution runs the models without a cache: the same seed gives the same tokens."""
    from fundamentallm.speculative import _Memo, _Random, _run, _Runner

    target, draft = _model(0), _model(1, d=16, layers=1)
    with torch.no_grad():
        for seed in range(3):
            runs = [_run(make(target), make(draft), [4, 5, 6], 25, 3, SamplingConfig(),
                         _Random(torch.Generator().manual_seed(seed)))[0]
                    for make in (_Runner, lambda m: _Memo(m, {}))]
            assert runs[0] == runs[1]


def test_sampling_is_seeded_and_counts_acceptances():
    target, draft = _model(0), _model(1, d=16, layers=1)
    prompt = torch.tensor([1, 2, 3])
    a, sa = speculative_generate(target, draft, prompt, 20, k=4, generator=torch.Generator().manual_seed(0))
    b, sb = speculative_generate(target, draft, prompt, 20, k=4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and sa.accepted == sb.accepted
    assert a.shape == (23,) and 0 <= sa.acceptance_rate <= 1
    assert sum(sa.accepted_per_round) == sa.accepted


def test_bad_arguments():
    target, draft = _model(0), _model(1, vocab=40)
    with pytest.raises(ValueError, match="vocab_size"):
        speculative_generate(target, draft, [1, 2], 5)
    with pytest.raises(ValueError, match="k=0"):
        speculative_generate(target, target, [1, 2], 5, k=0)
    with pytest.raises(ValueError, match="max_seq_len"):
        speculative_generate(target, target, [1, 2], 60, k=4)
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(target, target, [1, 2], 5, temperature=0)
    with pytest.raises(TypeError, match="draft"):
        speculative_generate(target, torch.nn.Linear(2, 2), [1, 2], 5)


@pytest.mark.parametrize("k", [1, 4])
def test_generate_with_a_draft_is_the_targets_greedy(k):
    """The one decoder: generate(..., draft=, lookahead=) runs the speculative rounds."""
    target, draft = _model(0), _model(1, d=16, layers=1)
    prompt = torch.tensor([[3, 14, 15, 9, 2]])
    expected = generate(target, prompt, 30, greedy=True)
    assert torch.equal(generate(target, prompt, 30, greedy=True, draft=draft, lookahead=k), expected)
    assert torch.equal(generate(target, prompt[0], 30, greedy=True, draft=draft, lookahead=k), expected[0])
    stop = int(expected[0, 5 + 7])  # a token the target emits: both stop at its first occurrence
    assert torch.equal(generate(target, prompt, 30, greedy=True, stop=stop, draft=draft, lookahead=k),
                       generate(target, prompt, 30, greedy=True, stop=stop))


def test_generate_with_a_draft_samples_seeded_and_checks():
    target, draft = _model(0), _model(1, d=16, layers=1)
    prompt = torch.tensor([1, 2, 3])
    a = generate(target, prompt, 12, top_k=5, draft=draft, lookahead=3, generator=torch.Generator().manual_seed(0))
    b = generate(target, prompt, 12, top_k=5, draft=draft, lookahead=3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == (15,)
    with pytest.raises(ValueError, match="one prompt"):
        generate(target, torch.zeros(2, 3, dtype=torch.long), 5, draft=draft)
    with pytest.raises(ValueError, match="k=0"):
        generate(target, prompt, 5, draft=draft, lookahead=0)
    with pytest.raises(ValueError, match="use_cache"):
        generate(target, prompt, 5, draft=draft, use_cache=False)


def test_top_k_sampling_distribution_is_exactly_the_targets():
    """With top-k the draft's and the target's distributions are both filtered: still exact."""
    from fundamentallm.generation import top_k_filter

    target, draft = _model(2, vocab=4, d=16), _model(3, vocab=4, d=8, layers=1)
    prompt, n = [0, 2, 1], 2
    spec = exact_distribution(target, draft, prompt, n, k=2, top_k=2)
    ref = {}
    with torch.no_grad():
        for seq in itertools.product(range(4), repeat=n):
            logits, _ = target(torch.tensor([prompt + list(seq)]))
            probs = torch.softmax(top_k_filter(logits[0, len(prompt) - 1:-1].double(), 2), -1)
            ref[seq] = float(torch.prod(probs[torch.arange(n), torch.tensor(seq)]))
    assert abs(sum(spec.values()) - 1) < 1e-9
    for seq, p in ref.items():
        assert abs(spec.get(seq, 0.0) - p) < 1e-6, (seq, spec.get(seq), p)
    assert sum(p == 0 for p in ref.values()) >= 4  # the filter removed tokens: a real test of it
