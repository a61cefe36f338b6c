"""Trainer: schedule, optimizer groups, determinism, accumulation, smoothing, evaluation."""

import math
import os
import re

import pytest
import torch
import torch.nn.functional as F

from fundamentallm import Transformer, TransformerClassifier, TransformerConfig
from fundamentallm.data import DataSource, TextDataset, digit_operations
from fundamentallm.training import (
    TrainConfig,
    Trainer,
    TrainingDiverged,
    cpp_compiler,
    lr_at,
    make_optimizer,
)

VOCAB = 16


def tiny_model(seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=VOCAB, d_model=32, num_heads=2, num_layers=1, max_seq_len=16)
    return Transformer(TransformerConfig(**{**cfg, **overrides}))


def stream(n=2000, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(VOCAB, (n,), generator=g)


def config(**overrides):
    base = dict(max_steps=6, batch_size=4, warmup_steps=2, progress=False, device="cpu", lr=3e-3)
    return TrainConfig(**{**base, **overrides})


def assert_batch_8_equals_4_accumulated_twice(data):
    """Batch 8 in one step and batch 4 accumulated over 2 micro-steps: the same losses and weights."""
    results = []
    for batch, accum in ((8, 1), (4, 2)):
        t = Trainer(tiny_model(), data, None, config(batch_size=batch, grad_accum_steps=accum))
        t.fit(steps=3)
        results.append((t.history["train_loss"], [p.detach().clone() for p in t.model.parameters()]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_lr_schedules_known_values():
    c = TrainConfig(lr=1.0, min_lr=0.1, warmup_steps=10, max_steps=110)
    assert lr_at(0, c) == pytest.approx(0.1)
    assert lr_at(9, c) == pytest.approx(1.0)  # end of warmup: the peak
    assert lr_at(59, c) == pytest.approx(0.55)  # halfway through the cosine
    assert lr_at(109, c) == pytest.approx(0.1) and lr_at(500, c) == pytest.approx(0.1)
    inv = TrainConfig(lr=1.0, warmup_steps=4, schedule="inverse_sqrt")
    assert [lr_at(s, inv) for s in (0, 3, 15)] == pytest.approx([0.25, 1.0, 0.5])
    # proportional to Vaswani et al.'s d_model^-0.5 * min(s^-0.5, s * w^-1.5)
    vaswani = [min(s**-0.5, s * 4**-1.5) for s in range(1, 50)]
    ours = [lr_at(s - 1, inv) for s in range(1, 50)]
    assert ours == pytest.approx([v / max(vaswani) for v in vaswani])
    const = TrainConfig(lr=2.0, warmup_steps=2, schedule="constant")
    assert [lr_at(s, const) for s in (0, 1, 100)] == [1.0, 2.0, 2.0]
    assert TrainConfig(lr=1.0).min_lr is None and lr_at(10**6, TrainConfig(lr=1.0)) == pytest.approx(0.1)


@pytest.mark.parametrize("field,value", [("lr", 0), ("schedule", "linear"), ("batch_size", 0),
                                         ("mixed_precision", "fp8"), ("label_smoothing", 1.0),
                                         ("betas", (0.9, 1.5)), ("grad_accum_steps", 1.5),
                                         ("device", "tpu"), ("progress", "no"), ("sampling", "shuffle")])
def test_train_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})
    with pytest.raises(ValueError, match="min_lr"):
        TrainConfig(lr=1e-3, min_lr=1e-2)


def test_weight_decay_only_on_matrices():
    model = tiny_model()
    opt = make_optimizer(model, TrainConfig(weight_decay=0.1))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert any(p is model.token_embedding.weight for p in decay["params"])  # tied, listed once


def test_same_seed_gives_bitwise_identical_history():
    runs = []
    for _ in range(2):
        trainer = Trainer(tiny_model(dropout=0.1), stream(), stream(300, 1), config(eval_interval=3))
        history = trainer.fit()
        runs.append((history, [p.clone() for p in trainer.model.parameters()]))
    (h1, p1), (h2, p2) = runs
    for key in ("step", "lr", "train_loss", "grad_norm", "tokens_seen", "val_loss", "val_loss_step"):
        assert h1[key] == h2[key], key
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))
    assert h1["step"] == list(range(1, 7)) and h1["val_loss_step"] == [3, 6]
    assert h1["tokens_seen"][-1] == 6 * 4 * 16
    third = Trainer(tiny_model(dropout=0.1), stream(), None, config(seed=1)).fit()
    assert third["train_loss"] != h1["train_loss"]


def test_training_reduces_the_loss():
    ids = torch.arange(3000) % 8  # a periodic stream: perfectly predictable
    trainer = Trainer(tiny_model(), ids, ids[:500], config(max_steps=40, lr=1e-2))
    before = trainer.evaluate()["val_loss"]
    trainer.fit()
    assert trainer.history["val_loss"][-1] < before / 3


def test_gradient_accumulation_equals_a_bigger_batch():
    assert_batch_8_equals_4_accumulated_twice(stream())


def test_grad_clip_and_label_smoothing():
    t = Trainer(tiny_model(), stream(), None, config(grad_clip=1e-3, label_smoothing=0.1, max_steps=1, warmup_steps=1))
    x, y = t.train_source.sample(4, torch.Generator().manual_seed(0))
    logits, _ = tiny_model()(x, y)
    expected = F.cross_entropy(logits.flatten(0, 1), y.flatten(), label_smoothing=0.1)
    metrics = t.train_step()
    assert metrics["loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert metrics["grad_norm"] > 1e-3  # recorded before clipping


def test_evaluate_covers_the_whole_split():
    model, val = tiny_model(), stream(16 * 10 + 5, 2)  # 10 full windows + a short tail
    t = Trainer(model, stream(), val, config(eval_batch_size=3))
    result = t.evaluate()
    windows = val[:161].view(-1)  # the 10 windows (and their targets) cover ids[0:161]
    x = torch.stack([windows[i * 16:(i + 1) * 16] for i in range(10)])
    y = torch.stack([windows[i * 16 + 1:(i + 1) * 16 + 1] for i in range(10)])
    with torch.no_grad():
        expected = model(x, y)[1].item()
    assert result["val_loss"] == pytest.approx(expected, rel=1e-5)
    assert result["val_perplexity"] == pytest.approx(math.exp(expected), rel=1e-5)
    same = t.evaluate(TextDataset(val, 16, stride=16))
    assert same["val_loss"] == pytest.approx(expected, rel=1e-5)


def test_classifier_with_padding_masks_trains():
    task = digit_operations(200, 40, 40, seed=0)
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=20, d_model=32, num_heads=2, num_layers=1, max_seq_len=16, causal=False)
    model = TransformerClassifier(cfg, num_classes=10, pooling="mean")
    t = Trainer(model, task.train.classification(), task.val.classification(), config(max_steps=10, batch_size=16))
    history = t.fit()
    assert len(history["train_loss"]) == 10 and len(history["val_loss"]) == 1
    assert math.isfinite(history["val_loss"][0])
    tensors = (task.train.input_ids, task.train.labels, task.train.attention_mask)
    assert Trainer(model, tensors, None, config(max_steps=1, warmup_steps=1, batch_size=8)).train_step()["loss"] > 0


def test_fit_in_two_parts_equals_one_fit():
    a = Trainer(tiny_model(dropout=0.1), stream(), None, config())
    a.fit()
    b = Trainer(tiny_model(dropout=0.1), stream(), None, config())
    b.fit(steps=2)
    assert b.step == 2
    b.fit()
    assert a.history["train_loss"] == b.history["train_loss"]


def test_epoch_sampling_makes_every_token_a_target_once_per_epoch():
    """sampling="epoch": one epoch's windows (drawn by the trainer, in batches that straddle the
    epoch's end) have every token but at most 2·block_size at the stream's ends as a target
    exactly once, the next epoch a different order and offset; random sampling repeats some
    windows and misses others."""
    ids = torch.arange(1000)  # a token's id is its position
    t = Trainer(tiny_model(vocab_size=1000), ids, None, config(sampling="epoch", batch_size=7, max_steps=40))
    n, T = t.train_source.epoch_size(), 16
    assert n == (1000 - T) // T
    seen = []
    for _ in range(2 * n // 7 + 1):
        seen.append(t.train_source.sample_at(7, len(seen) * 7, t.config.seed)[1])
    targets = torch.cat(seen).reshape(-1, T)
    first, second = targets[:n].flatten(), targets[n:2 * n].flatten()
    for epoch in (first, second):
        assert len(epoch.unique()) == len(epoch) == n * T >= 1000 - 2 * T
    assert not torch.equal(targets[:n], targets[n:2 * n])
    # the trainer draws exactly these windows, step after step
    calls = []
    t.train_source.sample_at = lambda *args: calls.append(args) or (ids[:7 * T].view(7, T), ids[1:7 * T + 1].view(7, T))
    t.fit(steps=3)
    assert calls == [(7, 0, 0), (7, 7, 0), (7, 14, 0)]
    starts = DataSource(ids, T).sample(n, torch.Generator().manual_seed(0))[0][:, 0]
    assert len(starts.unique()) < n  # random windows (nanoGPT's) repeat some starts within an epoch's worth


def test_epoch_sampling_resumes_and_repeats():
    """The same seed, the same epoch-sampled history; fit in two parts equals one fit (the window
    numbers follow from the step); a dataset of examples is sampled by epochs too."""
    a = Trainer(tiny_model(), stream(300), None, config(sampling="epoch", max_steps=12))
    a.fit()  # 12 steps x 4 windows = 48 > one epoch of 17 windows
    b = Trainer(tiny_model(), stream(300), None, config(sampling="epoch", max_steps=12))
    b.fit(steps=5)
    b.fit()
    assert a.history["train_loss"] == b.history["train_loss"]
    c = Trainer(tiny_model(), stream(300), None, config(sampling="epoch", max_steps=12, seed=1))
    c.fit()
    assert c.history["train_loss"] != a.history["train_loss"]
    for bad in (dict(batch_size=0), dict(first=-1), dict(seed=1.5)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            a.train_source.sample_at(**{"batch_size": 4, "first": 0, "seed": 0, **bad})
    with pytest.raises(ValueError, match="without replacement: it needs at least 32"):
        Trainer(tiny_model(), stream(20), None, config(sampling="epoch")).fit(steps=1)
    x = torch.randint(VOCAB, (10, 8))
    d = Trainer(tiny_model(), (x, x), None, config(sampling="epoch", batch_size=5))
    rows = torch.cat([d.train_source.sample_at(5, i, 0)[0] for i in (0, 5)])
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, x.tolist()))


def test_bad_data_is_reported():
    with pytest.raises(ValueError, match="too few"):
        Trainer(tiny_model(), torch.arange(10) % VOCAB, None, config())
    with pytest.raises(ValueError, match="no validation data"):
        Trainer(tiny_model(), stream(), None, config()).evaluate()
    with pytest.raises(TypeError, match="TrainConfig"):
        Trainer(tiny_model(), stream(), None, {"lr": 1e-3})


# --- Issue 15: token-weighted losses, divergence, bad hyperparameters ---------------------------

def padded_dataset(n=64, T=16, seed=0):
    """Sequences whose targets end in a different number of -100s (0 to T - 1 real targets)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(VOCAB, (n, T), generator=g)
    y = torch.randint(VOCAB, (n, T), generator=g)
    keep = torch.randint(1, T + 1, (n, 1), generator=g)
    y[torch.arange(T)[None, :] >= keep] = -100
    return torch.utils.data.TensorDataset(x, y)


def test_accumulation_weights_micro_batches_by_their_real_targets():
    assert_batch_8_equals_4_accumulated_twice(padded_dataset())


def test_train_step_loss_is_the_mean_over_real_targets():
    t = Trainer(tiny_model(), padded_dataset(), None, config(batch_size=4, grad_accum_steps=2, max_steps=1, warmup_steps=1))
    g = t.generator.get_state()
    x1, y1 = t.train_source.sample(4, t.generator)
    x2, y2 = t.train_source.sample(4, t.generator)
    t.generator.set_state(g)
    logits = tiny_model()(torch.cat([x1, x2]))[0]
    expected = F.cross_entropy(logits.flatten(0, 1), torch.cat([y1, y2]).flatten(), ignore_index=-100)
    assert t.train_step()["loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_a_batch_with_no_real_target_is_reported():
    x = torch.randint(VOCAB, (8, 16))
    data = torch.utils.data.TensorDataset(x, torch.full_like(x, -100))
    with pytest.raises(ValueError, match="step 1: every target of the batch is -100"):
        Trainer(tiny_model(), data, None, config()).train_step()
    with pytest.raises(ValueError, match="no target other than -100"):
        Trainer(tiny_model(), data, data, config()).evaluate()


class Poisoned(torch.nn.Module):
    """Wraps a model; from a chosen step on, its loss (or only its gradient) becomes non-finite."""

    def __init__(self, model, what):
        super().__init__()
        self.model, self.what, self.armed = model, what, False

    def forward(self, x, y=None, **kwargs):
        logits, loss = self.model(x, y, **kwargs)
        if self.armed and self.what == "loss":
            loss = loss * float("nan")
        elif self.armed:
            loss = InfGradient.apply(loss)
        return logits, loss


class InfGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("inf")


@pytest.mark.parametrize("what,quantity", [("loss", "the loss is nan"), ("grad", "the gradient norm is")])
def test_divergence_stops_training_and_keeps_the_last_good_weights(what, quantity):
    model = Poisoned(tiny_model(), what)
    t = Trainer(model, stream(), None, config(block_size=16))
    snapshot = {}

    def arm_after_two(trainer, metrics):
        if trainer.step == 2:
            model.armed = True
            snapshot.update({k: v.clone() for k, v in model.state_dict().items()})

    with pytest.raises(TrainingDiverged, match=f"diverged at step 3: {quantity}.*lr=.*smaller lr"):
        t.fit(on_step=arm_after_two)
    assert t.step == 2 and len(t.history["train_loss"]) == 2
    assert all(torch.equal(v, snapshot[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("field,value", [("lr", math.inf), ("lr", math.nan), ("weight_decay", math.inf),
                                         ("eps", math.nan), ("grad_clip", math.inf), ("min_lr", math.inf)])
def test_non_finite_hyperparameters_are_rejected(field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r} must be a finite number"):
        config(**{field: value})


def test_warmup_longer_than_training_and_negative_steps_are_rejected():
    with pytest.raises(ValueError, match="warmup_steps=10 must not exceed max_steps=5"):
        config(warmup_steps=10, max_steps=5)
    t = Trainer(tiny_model(), stream(), None, config())
    for steps in (-5, 2.5, True):
        with pytest.raises(ValueError, match=f"steps={steps!r} must be None"):
            t.fit(steps=steps)
    with pytest.raises(TypeError, match="on_step must be callable"):
        t.fit(on_step=3)
    assert t.step == 0


# --- Issue 18: Muon, warmup-stable-decay, per-group peak rates ------------------------------------

def test_wsd_schedule_known_values():
    """Warmup 10, flat at lr, then the last 20% (22 of 110 steps) decay linearly to min_lr."""
    c = TrainConfig(lr=1.0, min_lr=0.1, warmup_steps=10, max_steps=110, schedule="wsd")
    assert lr_at(0, c) == pytest.approx(0.1) and lr_at(4, c) == pytest.approx(0.5)
    assert [lr_at(s, c) for s in (9, 10, 50, 87)] == [1.0] * 4  # the stable phase is exactly lr
    assert lr_at(88, c) == pytest.approx(1.0 - 0.9 / 22)  # the first decay step
    assert lr_at(98, c) == pytest.approx(0.55)  # halfway through the cooldown
    assert lr_at(109, c) == 0.1 and lr_at(500, c) == 0.1  # exactly min_lr at the last step
    rates = [lr_at(s, c) for s in range(87, 110)]
    steps = [b - a for a, b in zip(rates, rates[1:])]
    assert steps == pytest.approx([-0.9 / 22] * 22)  # linear: equal decrements
    # min_lr=None means lr / 10; another fraction moves the start of the decay
    half = TrainConfig(lr=2.0, warmup_steps=0, max_steps=10, schedule="wsd", cooldown_fraction=0.5)
    assert [lr_at(s, half) for s in range(10)] == pytest.approx(
        [2.0] * 5 + [2.0 - 1.8 * k / 5 for k in range(1, 6)])


def test_wsd_cooldown_fraction_zero_holds_the_peak_and_a_tiny_one_decays_once():
    flat = TrainConfig(lr=1.0, min_lr=0.1, warmup_steps=2, max_steps=10, schedule="wsd", cooldown_fraction=0.0)
    assert [lr_at(s, flat) for s in range(10)] == [0.5] + [1.0] * 9  # warmup, then the peak to the end
    tiny = TrainConfig(lr=1.0, min_lr=0.1, warmup_steps=2, max_steps=10, schedule="wsd", cooldown_fraction=0.01)
    assert [lr_at(s, tiny) for s in range(10)] == [0.5] + [1.0] * 8 + [0.1]  # rounds up to one step


def test_wsd_cooldown_never_starts_inside_the_warmup():
    c = TrainConfig(lr=1.0, min_lr=0.0, warmup_steps=8, max_steps=10, schedule="wsd", cooldown_fraction=0.5)
    rates = [lr_at(s, c) for s in range(10)]
    assert rates[:8] == pytest.approx([(s + 1) / 8 for s in range(8)])
    assert rates[8:] == pytest.approx([0.5, 0.0])


@pytest.mark.parametrize("field,value", [("optimizer", "sgd"), ("optimizer", "Muon"), ("optimizer", None),
                                         ("muon_lr", 0), ("muon_lr", -0.02), ("muon_lr", math.inf),
                                         ("muon_momentum", 1.0), ("muon_momentum", -0.1), ("muon_momentum", True),
                                         ("cooldown_fraction", 1.0), ("cooldown_fraction", -0.2),
                                         ("cooldown_fraction", "0.2"), ("muon_weight_decay", -0.1),
                                         ("muon_weight_decay", math.nan), ("muon_ns_steps", 0),
                                         ("muon_ns_steps", 4.0), ("muon_ns_steps", True)])
def test_muon_and_wsd_fields_are_validated(field, value):
    with pytest.raises(ValueError) as err:
        TrainConfig(**{field: value})
    assert f"{field}={value!r}" in str(err.value)
    if field == "optimizer":
        assert "'adamw'" in str(err.value) and "'muon'" in str(err.value)


def test_schedule_error_lists_wsd():
    with pytest.raises(ValueError, match="'wsd'"):
        TrainConfig(schedule="linear")
    assert TrainConfig(schedule="wsd", optimizer="muon").optimizer == "muon"


MUON_MODELS = {
    "tied": dict(),
    "modern": dict(norm="rmsnorm", pos_encoding="rope", activation="swiglu", tie_weights=False, qk_norm=True,
                   value_embeddings=True, num_kv_heads=1, num_layers=2),
    "relu2-learned": dict(activation="relu2", pos_encoding="learned", qkv_bias=False, bias=True),
}


@pytest.mark.parametrize("kind", sorted(MUON_MODELS))
def test_muon_optimizer_groups(kind):
    """Muon gets exactly the hidden nn.Linear weights (attention and feed-forward matrices); the
    embeddings (token, position, value), the output layer, the norm gains and the biases go to
    AdamW; every parameter appears exactly once."""
    model = tiny_model(**MUON_MODELS[kind])
    opt = make_optimizer(model, TrainConfig(optimizer="muon", weight_decay=0.1, lr=2e-3, muon_lr=0.04,
                                            muon_momentum=0.9, betas=(0.8, 0.99), eps=1e-7))
    muon, decay, no_decay = opt.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    expected = {n for n, p in model.named_parameters()
                if p.dim() == 2 and (".attn." in n or ".ff." in n) and n.endswith("weight")}
    assert {names[id(p)] for p in muon["params"]} == expected and expected
    assert muon["use_muon"] and (muon["lr"], muon["peak_lr"], muon["momentum"]) == (0.04, 0.04, 0.9)
    assert muon["weight_decay"] == 0.0 and muon["ns_steps"] == 5  # muon_weight_decay's, muon_ns_steps' defaults
    assert make_optimizer(model, TrainConfig(optimizer="muon", muon_ns_steps=4)).param_groups[0]["ns_steps"] == 4
    decayed = make_optimizer(model, TrainConfig(optimizer="muon", muon_weight_decay=0.05)).param_groups
    assert decayed[0]["weight_decay"] == 0.05 and decayed[1]["weight_decay"] == TrainConfig().weight_decay
    for group, wd in ((decay, 0.1), (no_decay, 0.0)):
        assert not group["use_muon"] and group["weight_decay"] == wd
        assert (group["lr"], group["peak_lr"], group["betas"], group["eps"]) == (2e-3, 2e-3, (0.8, 0.99), 1e-7)
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    in_decay = {names[id(p)] for p in decay["params"]}
    assert "token_embedding.weight" in in_decay
    if kind == "modern":
        assert {"lm_head.weight", "value_embeds.0.weight", "value_embeds.1.weight"} <= in_decay
        assert {"blocks.0.attn.q_norm.weight", "blocks.1.attn.k_norm.weight"} <= {
            names[id(p)] for p in no_decay["params"]}
    if kind == "relu2-learned":
        assert "pos_encoding.weight" in in_decay
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))  # nothing twice, nothing missing


def test_muon_groups_of_a_classifier_leave_the_head_to_adamw():
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=20, d_model=32, num_heads=2, num_layers=1, max_seq_len=16, causal=False)
    model = TransformerClassifier(cfg, num_classes=5)
    muon, decay, _ = make_optimizer(model, TrainConfig(optimizer="muon")).param_groups
    assert any(p is model.head.weight for p in decay["params"])
    assert not any(p is model.head.weight for p in muon["params"])
    assert len(muon["params"]) == 4  # qkv, out_proj, up, down


def test_muon_parameters_skips_frozen_and_tied_linears():
    from fundamentallm.training import muon_parameters

    model = tiny_model()  # tied: lm_head.weight is token_embedding.weight
    model.blocks[0].ff.up.weight.requires_grad_(False)
    found = muon_parameters(model)
    assert all(p is not model.blocks[0].ff.up.weight and p is not model.lm_head.weight for p in found)
    assert len(found) == 3  # qkv, out_proj, down
    opt = make_optimizer(model, TrainConfig(optimizer="muon"))
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(model.parameters())) - 1


def test_every_group_follows_the_schedule_from_its_own_peak():
    c = config(optimizer="muon", muon_lr=0.05, lr=4e-3, max_steps=6, warmup_steps=2)
    t = Trainer(tiny_model(), stream(), None, c)
    for step in range(6):
        metrics = t.train_step()
        factor = lr_at(step, c) / c.lr
        assert metrics["lr"] == pytest.approx(lr_at(step, c))
        muon, decay, no_decay = t.optimizer.param_groups
        assert muon["lr"] == pytest.approx(0.05 * factor)
        assert decay["lr"] == pytest.approx(4e-3 * factor) and no_decay["lr"] == pytest.approx(4e-3 * factor)
    assert factor < 0.2  # the cosine really moved them
    # groups at the base rate get the schedule's value itself, not lr * factor / lr (which can
    # differ in the last bit: 3e-3 * x / 3e-3 != x at steps 10, 13, 19, 24, 25 and 28 of these)
    c = config(max_steps=100, warmup_steps=10, lr=3e-3, batch_size=1)
    adamw = Trainer(tiny_model(), stream(), None, c)
    muon = Trainer(tiny_model(), stream(), None, config(max_steps=100, warmup_steps=10, lr=3e-3, batch_size=1,
                                                        optimizer="muon"))
    for step in range(8, 30):
        for t in (adamw, muon):
            t.step = step  # the rates are set at the start of train_step, from self.step
            t.train_step()
        assert [g["lr"] for g in adamw.optimizer.param_groups] == [lr_at(step, c)] * 2
        assert [g["lr"] for g in muon.optimizer.param_groups[1:]] == [lr_at(step, c)] * 2


def test_muon_trainer_learns_and_is_deterministic():
    ids = torch.arange(3000) % 8  # a periodic stream: perfectly predictable
    c = config(max_steps=30, optimizer="muon", muon_lr=0.02, lr=1e-2, schedule="wsd")
    runs = []
    for _ in range(2):
        trainer = Trainer(tiny_model(dropout=0.1), ids, ids[:500], c)
        before = trainer.evaluate()["val_loss"]
        history = trainer.fit()
        runs.append((history, [p.detach().clone() for p in trainer.model.parameters()]))
    (h1, p1), (h2, p2) = runs
    assert h1["val_loss"][-1] < before / 3
    for key in ("step", "lr", "train_loss", "grad_norm", "tokens_seen", "val_loss"):
        assert h1[key] == h2[key], key
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))
    assert h1["lr"][-1] == pytest.approx(1e-3)  # wsd ends exactly at min_lr = lr / 10


def compiled_run(threads: list[int], warm_up: bool, **train):
    """A record-like model (canon layers, QK-norm, value embeddings, Muon, bf16 where native) trained one
    step per entry of ``threads`` at that many threads; its weights and losses."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=65, d_model=96, num_heads=4, num_layers=2, max_seq_len=32,
                                          norm="rmsnorm", pos_encoding="rope", activation="swiglu", bias=False,
                                          tie_weights=False, qk_norm=True, value_embeddings=True,
                                          canon="embed+attn+ffn"))
    data = torch.randint(65, (4000,), generator=torch.Generator().manual_seed(0))
    trainer = Trainer(model, data, None, config(max_steps=len(threads), batch_size=12, optimizer="muon",
                                                mixed_precision="bf16-native", **train))
    compile_s = trainer.warm_up() if warm_up else None
    before = torch.get_num_threads()
    try:
        for n in threads:
            torch.set_num_threads(n)
            trainer.fit(steps=1)
    finally:
        torch.set_num_threads(before)
    return trainer.history["train_loss"], [p.detach().clone() for p in model.parameters()], compile_s


@pytest.mark.skipif(cpp_compiler() is None and not os.environ.get("CI"),
                    reason="torch.compile on the CPU needs a C++ compiler (CI installs g++)")
def test_compiled_training_is_deterministic_at_any_thread_count_and_warm_up_changes_nothing():
    """compile=True (the record's recipe): the same seed gives the same weights bit for bit at one
    thread, two, or alternating (Inductor's kernels otherwise add some gradients in a varying
    order); warm_up() compiles without changing the run; and the numbers stay near eager's."""
    losses, weights, compile_s = compiled_run([2, 2, 2], warm_up=True, compile=True)
    assert compile_s > 0
    for threads in ([1, 1, 1], [2, 1, 2]):
        other_losses, other, none = compiled_run(threads, warm_up=False, compile=True)
        assert none is None and other_losses == losses
        assert all(torch.equal(a, b) for a, b in zip(weights, other)), threads
    eager_losses, eager, zero = compiled_run([2, 2, 2], warm_up=True)
    assert zero == 0.0
    assert eager_losses == pytest.approx(losses, abs=2e-2)
    for a, b in zip(eager, weights):
        torch.testing.assert_close(a, b, rtol=0, atol=5e-2)


def test_compile_without_a_cpp_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setattr("fundamentallm.training.cpp_compiler", lambda: None)
    with pytest.raises(ValueError, match=r"compile=True on the CPU needs a C\+\+ compiler.*compile=False"):
        Trainer(tiny_model(), stream(), None, config(compile=True))


def test_the_config_checks_the_device_name_and_the_trainer_its_availability():
    """A TrainConfig is a value: it checks the device's name, not this machine (a config saved on a
    GPU machine loads anywhere); the Trainer refuses a device this machine lacks (issue 39)."""
    with pytest.raises(ValueError, match="device='tpu' is not supported"):
        TrainConfig(device="tpu")
    cuda = TrainConfig(device="cuda", progress=False, max_steps=2, warmup_steps=0)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            Trainer(tiny_model(), stream(), None, cuda)


def test_a_model_moved_after_the_trainer_was_built_is_named():
    """The batches go to the Trainer's device: a parameter elsewhere is named before the forward,
    not found by a deep trace (here the model is moved to the meta device, where no kernel runs)."""
    trainer = Trainer(tiny_model(), stream(), stream(200), config())
    trainer.model.lm_head.to("meta")
    with pytest.raises(ValueError, match=r"parameter '.*' is on meta, but this Trainer puts its batches on cpu"):
        trainer.train_step()
    with pytest.raises(ValueError, match="was moved after the Trainer was built"):
        trainer.evaluate()


def test_the_saved_config_is_read_back_on_resume():
    """The trainer state's config is read back: another optimizer (whose state has other groups)
    or, with epoch sampling, another seed is refused with the field named; a longer run is not."""
    trainer = Trainer(tiny_model(), stream(), None, config(sampling="epoch"))
    trainer.fit(steps=1)
    state = trainer.state_dict()
    Trainer(tiny_model(), stream(), None, config(sampling="epoch", max_steps=12)).load_state_dict(state)
    for changed, shown in (({"optimizer": "muon"}, "optimizer='muon' (saved: 'adamw')"),
                           ({"seed": 3}, "seed=3 (saved: 0)")):
        other = Trainer(tiny_model(), stream(), None, config(sampling="epoch", **changed))
        with pytest.raises(ValueError, match=re.escape(shown)):
            other.load_state_dict(state)
