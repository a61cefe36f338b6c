"""fundamentallm.posttrain: the DPO and GRPO losses against the papers' equations written out
term by term (Rafailov et al. 2023, eq. 7; Shao et al. 2024, eqs. 3-4), the masked SFT loss,
batched KV-cache sampling against one-row uncached decoding, and the bad inputs of issue 27.

Why not trl: its DPO loss is a method of ``DPOTrainer`` (it reads the trainer's beta, loss type
and label smoothing, so it needs a model, tokenizer and dataset to construct) and its GRPO loss
lives inside ``GRPOTrainer.compute_loss``; neither takes plain tensors. The papers' equations,
written independently below with explicit loops, are the reference instead.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fundamentallm import CharacterTokenizer, Transformer, TransformerConfig
from fundamentallm import posttrain as pt


@pytest.fixture(scope="module")
def setup():
    splits = pt.addition_splits(n_test=20, n_hard=20)
    tok = CharacterTokenizer(set("0123456789+=\n") | {pt.USER, pt.ASSISTANT, pt.END})
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=tok.vocab_size, d_model=32, num_heads=4, num_layers=2,
                                          max_seq_len=16, pos_encoding="rope", norm="rmsnorm", activation="swiglu",
                                          bias=False)).eval()
    return splits, tok, pt.ChatTemplate(tok), model


def test_dpo_loss_equals_the_paper_equation():
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (torch.randn(7, generator=g) * 3 for _ in range(4))
    for beta in (0.05, 0.1, 1.0):
        loss, chosen, rejected = pt.dpo_loss(pc, pr, rc, rr, beta)
        terms = [-math.log(1 / (1 + math.exp(-(beta * (float(pc[i]) - float(rc[i]))
                                                 - beta * (float(pr[i]) - float(rr[i]))))))
                 for i in range(7)]
        assert math.isclose(float(loss), sum(terms) / 7, rel_tol=1e-5)
        torch.testing.assert_close(chosen, beta * (pc - rc))
        torch.testing.assert_close(rejected, beta * (pr - rr))
    same = torch.zeros(3)
    assert math.isclose(float(pt.dpo_loss(same + 1, same - 2, same + 1, same - 2, 0.3)[0]), math.log(2), rel_tol=1e-6)


def test_grpo_loss_equals_the_paper_equation():
    g = torch.Generator().manual_seed(1)
    B, L = 6, 5
    logps, old, ref = (-torch.rand(B, L, generator=g) * 2 for _ in range(3))
    rewards = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    adv = pt.group_advantages(rewards).flatten()
    mask = (torch.rand(B, L, generator=g) > 0.3).float()
    mask[:, 0] = 1
    eps, beta = 0.2, 0.04
    loss, stats = pt.grpo_loss(logps, old, ref, adv, mask, eps, beta)
    objective = 0.0
    for i in range(B):
        terms = []
        for t in range(L):
            if mask[i, t]:
                ratio = math.exp(float(logps[i, t]) - float(old[i, t]))
                a = float(adv[i])
                clipped = min(max(ratio, 1 - eps), 1 + eps)
                q = math.exp(float(ref[i, t]) - float(logps[i, t]))  # pi_ref / pi_theta
                terms.append(min(ratio * a, clipped * a) - beta * (q - math.log(q) - 1))
        objective += sum(terms) / len(terms)
    assert math.isclose(float(loss), -objective / B, rel_tol=1e-5, abs_tol=1e-6)
    # the group advantages of eq. (ch15-adv): mean 0, sample std 1 within a group
    mean, std = rewards.mean(1, keepdim=True), rewards.std(1, keepdim=True)
    torch.testing.assert_close(adv.view(2, 3), (rewards - mean) / (std + 1e-4))
    assert stats["kl"] >= 0


def test_the_gradient_moves_probability_toward_rewarded_answers(setup):
    _, _, template, model = setup
    torch.manual_seed(0)  # a fresh model of its own, not one that depends on the tests run before
    model = Transformer(model.config)
    ids, mask = pt.pack([template.prompt("12+3") + template.tokenizer.encode("15") + [template.end_id],
                         template.prompt("12+3") + template.tokenizer.encode("16") + [template.end_id]], [6, 6])
    with torch.no_grad():
        old = pt.token_logprobs(model, ids)
    adv = torch.tensor([1.0, -1.0])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)  # a small step: the first-order effect
    loss, _ = pt.grpo_loss(pt.token_logprobs(model, ids), old, old, adv, mask, 0.2, 0.0)
    loss.backward()
    opt.step()
    with torch.no_grad():
        new = (pt.token_logprobs(model, ids) * mask).sum(1)
    before = (old * mask).sum(1)
    assert new[0] > before[0] and new[1] < before[1]


def test_sft_batch_masks_the_prompt_and_the_padding(setup):
    splits, tok, template, model = setup
    pairs = [("5+3", "8"), ("57+8", "65")]
    ids, targets = pt.sft_batch(template, pairs)
    assert tok.decode(ids[0].tolist()) == f"{pt.USER}5+3{pt.ASSISTANT}8{pt.END}"  # padding decodes to nothing
    trained = [[tok.decode([int(t)]) for t in row if t != -100] for row in targets]
    assert trained == [["8", pt.END], ["6", "5", pt.END]]
    _, all_targets = pt.sft_batch(template, pairs, mask_prompt=False)
    assert (all_targets[1] != -100).sum() == len(template.example("57+8", "65")[0]) - 1
    assert (all_targets[0, 6:] == -100).all()  # padding is never trained on


def test_batched_cached_sampling_equals_one_row_uncached_decoding(setup):
    splits, tok, template, model = setup
    questions = ["5+3", "57+8", "12+0", "99+9", "7+7"]  # different lengths: one batch per length
    got = pt.sample_completions(model, [template.prompt(q) for q in questions], 1, 6, template.end_id, greedy=True)
    for q, completion in zip(questions, got):
        ids = torch.tensor([template.prompt(q)])
        expected = []
        for _ in range(6):
            nxt = int(model(ids)[0][0, -1].argmax())
            expected.append(nxt)
            if nxt == template.end_id:
                break
            ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
        assert completion == expected


def test_each_row_stops_at_its_own_end_token(setup):
    _, tok, template, model = setup
    model = Transformer(model.config).eval()
    with torch.no_grad():  # make the end token likely, so that rows end at different steps
        model.lm_head.weight[template.end_id] += 0.5 * model.lm_head.weight.mean(0)
    out = pt.sample_completions(model, [template.prompt("12+3")], 64, 8, template.end_id,
                                generator=torch.Generator().manual_seed(0))
    assert len(out) == 64
    lengths = {len(c) for c in out}
    assert len(lengths) > 1
    for c in out:
        assert template.end_id not in c[:-1]  # nothing is kept after a row's end token
        assert c[-1] == template.end_id or len(c) == 8


def test_same_seed_same_samples(setup):
    _, _, template, model = setup
    a = pt.sample_completions(model, [template.prompt("3+4")], 8, 6, template.end_id,
                              generator=torch.Generator().manual_seed(3))
    b = pt.sample_completions(model, [template.prompt("3+4")], 8, 6, template.end_id,
                              generator=torch.Generator().manual_seed(3))
    assert a == b


def test_rollouts_draw_through_the_one_decoder(setup, monkeypatch):
    """Rollouts are sampled by generation's sampler, which draws on the generator's own device
    (generation._sample's guard): every draw gets the rollout's generator."""
    import fundamentallm.generation as generation

    _, _, template, model = setup
    seen, sample = [], generation._sample
    monkeypatch.setattr(generation, "_sample", lambda logits, sampling, gen: seen.append(gen) or
                        sample(logits, sampling, gen))
    gen = torch.Generator().manual_seed(0)
    pt.sample_completions(model, [template.prompt("3+4"), template.prompt("12+3")], 4, 6, template.end_id,
                          generator=gen)
    assert seen and all(g is gen for g in seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_rollouts_of_a_cuda_model_with_a_cpu_generator(setup):
    """dpo's and grpo's rollouts on a GPU: the chapters' CPU generator drives a CUDA model."""
    _, _, template, model = setup
    cuda = copy.deepcopy(model).cuda()
    prompts = [template.prompt("3+4"), template.prompt("12+3")]
    a = pt.sample_completions(cuda, prompts, 4, 6, template.end_id, generator=torch.Generator().manual_seed(0))
    b = pt.sample_completions(cuda, prompts, 4, 6, template.end_id, generator=torch.Generator().manual_seed(0))
    assert a == b and len(a) == 8
    greedy = pt.sample_completions(cuda, prompts, 1, 6, template.end_id, greedy=True)
    assert greedy == pt.sample_completions(model, prompts, 1, 6, template.end_id, greedy=True)


def test_a_reward_function_that_raises_costs_that_sample_only(setup):
    def flaky(question, answer):
        if answer == "boom":
            raise RuntimeError("verifier crashed")
        return pt.digit_verifier(question, answer)

    with pytest.warns(RuntimeWarning, match="reward_fn raised RuntimeError"):
        rewards, failures = pt.score(flaky, ["1+1", "1+1", "1+1", "2+2"], ["2", "boom", None, "4"])
    assert rewards.tolist() == [1.0, 0.0, 0.0, 1.0] and failures == 1
    _, _, template, model = setup
    with pytest.warns(RuntimeWarning):
        history = pt.train_grpo(model.__class__(model.config), model, template, ["1+1", "2+3"], steps=1,
                                batch_size=2, group_size=2, reward_fn=lambda q, a: 1 / 0)
    assert history["reward_failures"] == [4]


def test_digit_verifier_and_splits():
    assert pt.digit_verifier("57+8", "65") == 1.0
    assert pt.digit_verifier("57+8", "065") == 0.0 and pt.digit_verifier("57+8", None) == 0.0
    s = pt.addition_splits(n_test=100, n_hard=100)
    assert len(s["train"]) == 800 and not (set(s["train"]) & set(s["test"])) and not (set(s["hard"]) & set(s["train"]))
    assert all(pt.carries(*map(int, q.split("+"))) >= 1 for q, _ in s["hard"])
    assert pt.carries(58, 67) == 2 and pt.carries(10, 5) == 0


def test_padded_operands_and_reversed_answers():
    assert pt.format_addition(7, 8) == ("7+8", "15")
    assert pt.format_addition(7, 8, pad=True) == ("07+8", "15")
    assert pt.format_addition(57, 8, pad=True, reverse=True) == ("57+8", "56")
    assert pt.format_addition(99, 9, reverse=True) == ("99+9", "801")
    assert pt.format_addition(5, 7, digits=(3, 2), pad=True) == ("005+07", "12")
    plain = pt.addition_splits(n_test=100, n_hard=100)
    new = pt.addition_splits(n_test=100, n_hard=100, pad=True, reverse=True)
    for name in plain:  # the same problems in the same splits, only written differently
        assert [tuple(map(int, q.split("+"))) for q, _ in plain[name]] == \
            [tuple(map(int, q.split("+"))) for q, _ in new[name]]
        assert [a[::-1] for _, a in plain[name]] == [a for _, a in new[name]]
        assert all(len(q.split("+")[0]) == 2 for q, _ in new[name])
        assert all(pt.digit_verifier(q, a, reverse=True) == 1.0 for q, a in new[name])
    # a reversed answer is judged in its own order, never in the other
    assert pt.digit_verifier("07+8", "51", reverse=True) == 1.0
    assert pt.digit_verifier("07+8", "15", reverse=True) == 0.0 and pt.digit_verifier("07+8", "15") == 1.0
    assert pt.digit_verifier("23+7", "03", reverse=True) == 1.0 and pt.digit_verifier("23+7", "3", reverse=True) == 0.0
    assert pt.digit_verifier("11+1", None, reverse=True) == 0.0


def test_sft_learning_rate_decays_linearly_the_same_in_pieces(setup):
    splits, _, template, model = setup
    seen = {}
    for pieces in ((0, 4), (0, 2, 4)):
        m = model.__class__(model.config)
        m.load_state_dict(model.state_dict())
        opt = pt.make_optimizer(m, 1e-3)
        lrs = []
        for start, stop in zip(pieces, pieces[1:]):
            pt.train_sft(m, template, splits["train"], stop, 4, seed=0, optimizer=opt, start_step=start,
                         decay_steps=4, on_step=lambda step, _, lrs=lrs, opt=opt: lrs.append(opt.param_groups[0]["lr"]))
        seen[pieces] = (lrs, [p.detach().clone() for p in m.parameters()])
    assert seen[(0, 4)][0] == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
    for a, b in zip(seen[(0, 4)][1], seen[(0, 2, 4)][1]):
        torch.testing.assert_close(a, b)


def test_reserved_tokens_are_added_with_the_old_rows_kept(setup):
    _, _, _, model = setup
    tok = CharacterTokenizer("0123456789+=\n")
    torch.manual_seed(0)
    small = Transformer(TransformerConfig(vocab_size=tok.vocab_size, d_model=16, num_heads=2, num_layers=1,
                                          max_seq_len=16))
    big, big_tok = pt.add_reserved_tokens(small, tok)
    template = pt.ChatTemplate(big_tok)
    assert big.config.vocab_size == tok.vocab_size + 3
    for c in "0123456789+=":
        torch.testing.assert_close(big.token_embedding.weight[big_tok.stoi[c]], small.token_embedding.weight[tok.stoi[c]])
    assert template.end_id == big_tok.stoi[pt.END]


BAD = [
    ("template without its tokens", lambda s: pt.ChatTemplate(CharacterTokenizer("0123456789+")), "user='▷' is not one token"),
    ("template with one missing", lambda s: pt.ChatTemplate(CharacterTokenizer("0123456789+▷◁")), "end='■' is not one token"),
    ("question holding a marker", lambda s: s[2].prompt(f"1+1{pt.ASSISTANT}2"), "question=.*reserved symbol"),
    ("identical pair", lambda s: pt.train_dpo(s[3], s[3], s[2], [("1+1", "2", "2")], 1), r"pairs\[0\].*same answer '2'"),
    ("empty pairs", lambda s: pt.train_dpo(s[3], s[3], s[2], [], 1), "pairs is empty"),
    ("group size 1", lambda s: pt.train_grpo(s[3], s[3], s[2], ["1+1"], 1, group_size=1), "group_size=1"),
    ("advantages of groups of 1", lambda s: pt.group_advantages(torch.ones(4, 1)), "group_size >= 2"),
    ("beta 0", lambda s: pt.dpo_loss(*torch.zeros(4, 2), beta=0), "beta=0 must be"),
    ("beta < 0", lambda s: pt.train_dpo(s[3], s[3], s[2], [("1+1", "2", "3")], 1, beta=-0.1), "beta=-0.1"),
    ("beta nan", lambda s: pt.dpo_loss(*torch.zeros(4, 2), beta=float("nan")), "beta=nan"),
    ("clip 0", lambda s: pt.grpo_loss(*torch.zeros(3, 2, 2), torch.zeros(2), torch.ones(2, 2), clip_eps=0), "clip_eps=0"),
    ("kl < 0", lambda s: pt.grpo_loss(*torch.zeros(3, 2, 2), torch.zeros(2), torch.ones(2, 2), kl_coef=-1.0), "kl_coef=-1.0"),
    ("steps 0", lambda s: pt.train_sft(s[3], s[2], [("1+1", "2")], 0), "steps=0"),
    ("num_samples 0", lambda s: pt.sample_completions(s[3], [[1, 2]], 0), "num_samples=0"),
    ("temperature 0", lambda s: pt.sample_completions(s[3], [[1, 2]], 1, temperature=0.0), "temperature=0.0"),
    ("prompt too long", lambda s: pt.sample_completions(s[3], [[3] * 16], 1), "no room in max_seq_len=16"),
    ("digits", lambda s: pt.addition_splits(digits=(2, 0)), r"digits=\(2, 0\)"),
    ("pad not a bool", lambda s: pt.addition_splits(pad="yes"), "pad='yes' must be True or False"),
    ("reverse not a bool", lambda s: pt.digit_verifier("1+1", "2", reverse=1), "reverse=1 must be True or False"),
    ("decay_steps 0", lambda s: pt.train_sft(s[3], s[2], [("1+1", "2")], 1, decay_steps=0), "decay_steps=0"),
    ("lr 0", lambda s: pt.make_optimizer(s[3], 0.0), "lr=0.0"),
]


@pytest.mark.parametrize("what,call,match", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_name_the_parameter(setup, what, call, match):
    with pytest.raises(ValueError, match=match):
        call(setup)


@pytest.mark.parametrize("flags,message", [
    (["--short-accuracy", "1.5"], "--short-accuracy=1.5 must be in (0, 1)"),
    (["--seeds", "0"], "--seeds=0 must be >= 1"),
    (["--grpo-steps", "-2"], "--grpo-steps=-2 must be >= 1"),
    (["--grpo-carry-weight", "0"], "--grpo-carry-weight=0 must be >= 1"),
])
def test_the_benchmark_refuses_bad_settings_before_any_work(flags, message):
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "posttrain.py"
    proc = subprocess.run([sys.executable, str(script), *flags], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
