"""Muon: Newton-Schulz against the SVD it approximates, the optimizer against ``torch.optim.Muon``
(identical momentum, weights equal up to bf16 rounding) and its AdamW groups against
``torch.optim.AdamW``, bad values, and a bitwise resume from a saved state."""

import math

import pytest
import torch

import fundamentallm.muon as muon_module
from fundamentallm.muon import NS_COEFFICIENTS, Muon, muon_lr_scale, newton_schulz

# Tall, wide and square, repeated shapes (one batched product), a tall and a wide matrix that
# are transposes of each other in shape (orthogonalised in the same batch) and a non-divisible pair.
SHAPES = [(8, 8), (8, 8), (12, 5), (5, 12), (12, 5), (4, 16), (16, 4), (3, 7), (24, 24)]


def _params(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in shapes]


def _grads(shapes, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g) for s in shapes] for _ in range(steps)]


def _run(opt, params, grads):
    """Apply ``grads`` (one list per step) with ``opt``; the same tensors for every optimizer."""
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()
        opt.zero_grad(set_to_none=True)


def _ns_polynomial(s, steps=5, coefficients=NS_COEFFICIENTS):
    """What the iteration does to one singular value: s <- a s + b s^3 + c s^5, ``steps`` times."""
    a, b, c = coefficients
    for _ in range(steps):
        s = a * s + b * s**3 + c * s**5
    return s


# --- newton_schulz --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(6, 6), (16, 16), (10, 30), (30, 10), (5, 3), (32, 128), (128, 32)], ids=str)
def test_newton_schulz_equals_the_polynomial_of_the_singular_values(shape):
    """In exact arithmetic NS(G) = U p(S / ||G||_F) Vᵀ with G = U S Vᵀ: the same singular vectors,
    each singular value mapped by the scalar polynomial. Checked in float64 against an SVD."""
    G = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(sum(shape)))
    out = newton_schulz(G, dtype=torch.float64)
    assert out.shape == G.shape and out.dtype == torch.float64
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    ref = U @ torch.diag(_ns_polynomial(S / torch.linalg.matrix_norm(G))) @ Vh
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("shape", [(8, 8), (16, 48), (48, 16), (32, 128), (128, 32), (5, 3), (10, 40)], ids=str)
def test_newton_schulz_singular_values_land_near_one(shape):
    """Keller Jordan's coefficients leave every singular value roughly in [0.7, 1.2] (not exactly 1)
    for well-conditioned matrices; a random rectangular Gaussian matrix is one."""
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        G = torch.randn(shape, dtype=torch.float64, generator=g)
        sv = torch.linalg.svdvals(newton_schulz(G, dtype=torch.float64))
        assert len(sv) == min(shape)
        assert 0.6 <= sv.min() and sv.max() <= 1.25, (shape, sv.min().item(), sv.max().item())
        # and it is far from G's own spread: the point of orthogonalising
        raw = torch.linalg.svdvals(G)
        assert raw.max() / raw.min() > sv.max() / sv.min()


def test_newton_schulz_orientation_and_batching():
    g = torch.Generator().manual_seed(3)
    tall = torch.randn(20, 6, dtype=torch.float64, generator=g)
    out = newton_schulz(tall, dtype=torch.float64)
    assert out.shape == (20, 6)
    assert torch.equal(newton_schulz(tall.mT, dtype=torch.float64), out.mT)  # NS(Gᵀ) = NS(G)ᵀ
    # a stack (any leading dimensions) equals the matrices one at a time
    for shape in ((4, 6, 20), (2, 3, 20, 6), (5, 7, 7)):
        stack = torch.randn(shape, dtype=torch.float64, generator=g)
        batched = newton_schulz(stack, dtype=torch.float64)
        assert batched.shape == stack.shape
        flat = stack.reshape(-1, *shape[-2:])
        one_by_one = torch.stack([newton_schulz(m, dtype=torch.float64) for m in flat]).reshape(shape)
        torch.testing.assert_close(batched, one_by_one, rtol=1e-12, atol=1e-12)
    # the default computes in bfloat16, as torch.optim.Muon does
    assert newton_schulz(tall.float()).dtype == torch.bfloat16
    # a zero matrix stays zero (the norm is clamped, no 0/0)
    assert torch.equal(newton_schulz(torch.zeros(3, 5), dtype=torch.float32), torch.zeros(3, 5))


def test_newton_schulz_bad_input():
    with pytest.raises(ValueError, match=r"newton_schulz needs a matrix.*\(7,\)"):
        newton_schulz(torch.randn(7))
    for steps in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match=f"steps={steps!r}"):
            newton_schulz(torch.randn(3, 4), steps=steps)


def test_muon_lr_scale():
    assert muon_lr_scale(torch.Size((12, 3))) == pytest.approx(2.0)  # sqrt(12 / 3)
    assert muon_lr_scale(torch.Size((3, 12))) == 1.0 and muon_lr_scale((7, 7)) == 1.0
    assert muon_lr_scale((50, 2)) == pytest.approx(5.0)


# --- the optimizer against torch's ----------------------------------------------------------------

def _assert_matches_torch(ours, theirs, steps, lr):
    """Our batched ``baddbmm`` and torch's per-matrix ``addmm`` round bfloat16 differently now and
    then (measured: about 1 Newton-Schulz call in 200 differs, by at most a few bf16 ulps of its
    entries, which lie below 1.25). So the weights agree to ``lr · scale · 2^-6`` per step (the
    largest difference measured is 0.4 of that), and most often bit for bit."""
    for a, b in zip(ours, theirs):
        tol = steps * lr * muon_lr_scale(a.shape) * 2**-6
        torch.testing.assert_close(a, b, rtol=0, atol=tol)


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_matches_torch_muon(steps, weight_decay, nesterov):
    """The same parameters and gradients: our (batched) Muon and torch.optim.Muon (one matrix at
    a time) end with identical momentum buffers and the same weights up to bf16 rounding."""
    start, grads = _params(SHAPES), _grads(SHAPES, steps)
    ours = [torch.nn.Parameter(p.clone()) for p in start]
    theirs = [torch.nn.Parameter(p.clone()) for p in start]
    kw = dict(lr=0.03, momentum=0.9, nesterov=nesterov, weight_decay=weight_decay)
    opt = Muon(ours, **kw, ns_dtype=torch.bfloat16)  # torch's Newton-Schulz is bf16 on any machine
    ref = torch.optim.Muon(theirs, **kw)
    _run(opt, ours, grads)
    _run(ref, theirs, grads)
    for a, b, p0 in zip(ours, theirs, start):
        assert a.dtype == torch.float32 and not torch.equal(a, p0)
        assert torch.equal(opt.state[a]["momentum_buffer"], ref.state[b]["momentum_buffer"])
    _assert_matches_torch(ours, theirs, steps, lr=0.03)


def test_muon_matches_torch_muon_over_many_draws():
    """Many random draws of one step (seeds 26 and 54 are among the rare ones that round
    differently, with torch 2.13): the differences stay within the bound."""
    shapes = [(10, 6), (6, 10), (12, 5), (8, 8)]
    for seed in range(20, 60):
        start, grads = _params(shapes, seed), _grads(shapes, 1, seed + 100)
        ours = [torch.nn.Parameter(p.clone()) for p in start]
        theirs = [torch.nn.Parameter(p.clone()) for p in start]
        _run(Muon(ours, lr=0.02, ns_dtype=torch.bfloat16), ours, grads)
        _run(torch.optim.Muon(theirs, lr=0.02, weight_decay=0.0), theirs, grads)
        _assert_matches_torch(ours, theirs, 1, lr=0.02)


def test_muon_defaults_match_the_documented_ones():
    opt = Muon([torch.nn.Parameter(torch.zeros(2, 3))])
    group = opt.param_groups[0]
    assert (group["lr"], group["momentum"], group["nesterov"], group["weight_decay"], group["ns_steps"],
            group["use_muon"]) == (0.02, 0.95, True, 0.0, 5, True)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("ns_dtype", [None, torch.bfloat16, torch.float32])
def test_muon_update_written_out(monkeypatch, native, ns_dtype):
    """One step from zero momentum, written out: u = NS((1 - mu) g + mu (1 - mu) g), then
    W <- W (1 - lr wd) - lr sqrt(max(1, rows / cols)) u, for a tall matrix. Newton-Schulz runs in
    ``ns_dtype``; by default in bf16 where the device multiplies bf16 natively, else in float32
    (on a CPU without bf16 instructions a bf16 product is converted in software: many times slower)."""
    monkeypatch.setattr(muon_module, "native_bf16", lambda device: native)
    w0 = torch.randn(9, 4, generator=torch.Generator().manual_seed(5))
    g = torch.randn(9, 4, generator=torch.Generator().manual_seed(6))
    w = torch.nn.Parameter(w0.clone())
    opt = Muon([w], lr=0.05, momentum=0.8, weight_decay=0.2, ns_dtype=ns_dtype)
    w.grad = g.clone()
    opt.step()
    buf = 0.2 * g
    dtype = ns_dtype or (torch.bfloat16 if native else torch.float32)
    u = newton_schulz(g.lerp(buf, 0.8), dtype=dtype)
    expected = w0 * (1 - 0.05 * 0.2) - 0.05 * math.sqrt(9 / 4) * u.float()
    torch.testing.assert_close(opt.state[w]["momentum_buffer"], buf)
    torch.testing.assert_close(w.detach(), expected, rtol=1e-6, atol=1e-6)
    other = torch.bfloat16 if dtype == torch.float32 else torch.float32  # the step did not run in this one
    assert not torch.allclose(w.detach(), w0 * (1 - 0.05 * 0.2) - 0.05 * 1.5 *
                              newton_schulz(g.lerp(buf, 0.8), dtype=other).float(), rtol=0, atol=1e-6)


def test_bad_ns_dtype_is_named():
    with pytest.raises(ValueError, match=r"ns_dtype=torch.float16 is not supported; allowed values: None"):
        Muon([torch.nn.Parameter(torch.zeros(4, 3))], ns_dtype=torch.float16)


def test_adamw_group_equals_torch_adamw():
    """Groups with use_muon=False (any shape) follow torch.optim.AdamW with decoupled decay; a
    Muon group beside them follows torch.optim.Muon; one optimizer holds both."""
    adam_shapes, muon_shapes = [(7,), (5, 3), (2, 3, 4), (6, 6)], [(6, 10), (10, 6)]
    adam_start, muon_start = _params(adam_shapes, 2), _params(muon_shapes, 3)
    adam_grads, muon_grads = _grads(adam_shapes, 4, 4), _grads(muon_shapes, 4, 5)
    adam_kw = dict(lr=3e-3, betas=(0.8, 0.97), eps=1e-7, weight_decay=0.1)
    ours_a = [torch.nn.Parameter(p.clone()) for p in adam_start]
    ours_m = [torch.nn.Parameter(p.clone()) for p in muon_start]
    opt = Muon([{"params": ours_m, "lr": 0.02}, {"params": ours_a, "use_muon": False, **adam_kw}],
               momentum=0.9, ns_dtype=torch.bfloat16)
    ref_a = [torch.nn.Parameter(p.clone()) for p in adam_start]
    ref_m = [torch.nn.Parameter(p.clone()) for p in muon_start]
    adamw = torch.optim.AdamW(ref_a, **adam_kw)
    muon = torch.optim.Muon(ref_m, lr=0.02, momentum=0.9, weight_decay=0.0)
    for step in range(4):
        for p, g in zip(ours_a + ours_m, adam_grads[step] + muon_grads[step]):
            p.grad = g.clone()
        for p, g in zip(ref_a + ref_m, adam_grads[step] + muon_grads[step]):
            p.grad = g.clone()
        opt.step()
        adamw.step()
        muon.step()
        for a, b in zip(ours_a, ref_a):
            torch.testing.assert_close(a, b)
        _assert_matches_torch(ours_m, ref_m, step + 1, lr=0.02)
    for a, b in zip(ours_a, ref_a):
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[a][key], adamw.state[b][key])
        assert float(opt.state[a]["step"]) == 4
    assert all(not torch.equal(a, p0) for a, p0 in zip(ours_a, adam_start))


def test_parameters_without_gradient_are_left_alone():
    a, b = torch.nn.Parameter(torch.ones(3, 4)), torch.nn.Parameter(torch.ones(3, 4))
    c = torch.nn.Parameter(torch.ones(5))
    opt = Muon([{"params": [a, b]}, {"params": [c], "use_muon": False}])
    a.grad = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    assert opt.step(closure=lambda: torch.tensor(2.5)) == 2.5  # the closure's loss is returned
    assert not torch.equal(a, torch.ones(3, 4))
    assert torch.equal(b, torch.ones(3, 4)) and torch.equal(c, torch.ones(5))
    assert b not in opt.state and c not in opt.state


# --- bad values -----------------------------------------------------------------------------------

def test_a_vector_in_a_muon_group_is_refused():
    w, bias = torch.nn.Parameter(torch.zeros(4, 3)), torch.nn.Parameter(torch.zeros(4))
    for params in ([w, bias], [{"params": [w]}, {"params": [bias], "use_muon": True}]):
        with pytest.raises(ValueError) as err:
            Muon(params)
        assert "(4,)" in str(err.value) and "use_muon=False" in str(err.value)
    emb = torch.nn.Parameter(torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match=r"\(2, 3, 4\)"):
        Muon([emb])
    opt = Muon([w])
    with pytest.raises(ValueError, match=r"\(4,\).*use_muon=False"):
        opt.add_param_group({"params": [bias]})  # a group added later is checked too
    opt.add_param_group({"params": [bias], "use_muon": False})  # AdamW takes any shape
    assert len(opt.param_groups) == 2


@pytest.mark.parametrize("name,value", [("lr", -0.1), ("lr", math.inf), ("lr", math.nan), ("lr", "0.02"),
                                        ("momentum", 1.0), ("momentum", -0.5), ("momentum", True),
                                        ("weight_decay", -1e-3), ("ns_steps", 0), ("ns_steps", 2.5),
                                        ("ns_steps", True), ("nesterov", "yes"), ("nesterov", 1)])
def test_bad_hyperparameters_are_named(name, value):
    w = torch.nn.Parameter(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=f"{name}={value!r}"):
        Muon([w], **{name: value})
    with pytest.raises(ValueError, match=f"{name}={value!r}"):  # in a group's own settings too
        Muon([{"params": [w], name: value}])


# --- saving and resuming --------------------------------------------------------------------------

def test_state_dict_round_trip_continues_bitwise(tmp_path):
    """Two steps, save (through a weights_only file, as checkpoints are read), load into a fresh
    optimizer over copies of the weights: the next three steps are identical to not stopping."""
    shapes, adam_shapes = [(6, 10), (10, 6), (6, 10)], [(10,), (4, 6)]
    grads = _grads(shapes + adam_shapes, 5)

    def make(params):
        return Muon([{"params": params[:3], "weight_decay": 0.05},
                     {"params": params[3:], "use_muon": False, "lr": 1e-3, "weight_decay": 0.1}],
                    lr=0.03, momentum=0.9)

    params = [torch.nn.Parameter(p) for p in _params(shapes + adam_shapes)]
    opt = make(params)
    _run(opt, params, grads[:2])
    torch.save(opt.state_dict(), tmp_path / "opt.pt")
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    fresh = make(copies)
    fresh.load_state_dict(torch.load(tmp_path / "opt.pt", weights_only=True))
    _run(opt, params, grads[2:])
    _run(fresh, copies, grads[2:])
    for a, b in zip(params, copies):
        assert torch.equal(a, b)
    for a, b in zip(params[:3], copies[:3]):
        assert torch.equal(opt.state[a]["momentum_buffer"], fresh.state[b]["momentum_buffer"])
    assert [g["use_muon"] for g in fresh.param_groups] == [True, False]
