"""Chapter 1 checks: they pass on correct answers and fail, with a clear message, on wrong ones."""

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

rnn_step = book_solution("ch01-ex1", "rnn_step")


unroll_rnn = book_solution("ch01-ex2", "unroll_rnn")


bptt_jacobian = book_solution("ch01-ex4", "bptt_jacobian")


gradient_norm_through_time = book_solution("ch01-ex3", "gradient_norm_through_time")


def stub(*args, **kwargs):
    raise NotImplementedError


CORRECT = {
    "check_rnn_step": rnn_step,
    "check_unroll_rnn": unroll_rnn,
    "check_bptt_jacobian": bptt_jacobian,
    "check_gradient_norm_through_time": gradient_norm_through_time,
}

WRONG = {
    "check_rnn_step": [
        lambda x, h, W_x, W_h, b: x @ W_x.T + h @ W_h.T + b,  # forgot tanh
        lambda x, h, W_x, W_h, b: torch.tanh(x @ W_x.T + h @ W_h + b),  # W_h not transposed
        lambda x, h, W_x, W_h, b: torch.tanh(x @ W_x.T + h @ W_h.T),  # forgot the bias
    ],
    "check_unroll_rnn": [
        # returns h_0..h_{T-1} instead of h_1..h_T
        lambda xs, h0, *p: torch.cat([h0[:, None], unroll_rnn(xs, h0, *p)[:, :-1]], dim=1),
        lambda xs, h0, *p: unroll_rnn(xs, h0, *p)[:, -1],  # only the last state
        lambda xs, h0, *p: unroll_rnn(xs, torch.zeros_like(h0), *p),  # ignores h0
    ],
    "check_bptt_jacobian": [
        lambda hs, W: torch.linalg.matrix_power(W, hs.shape[0] - 1),  # forgot tanh's derivative
        lambda hs, W: bptt_jacobian(hs[:-1], W) if hs.shape[0] > 1 else W,  # h_{k-1}, not h_k
        # multiplies in the wrong order: J_1 ... J_T
        lambda hs, W: torch.linalg.multi_dot([torch.eye(W.shape[0], dtype=W.dtype)]
                                             + [torch.diag(1 - h ** 2) @ W for h in hs[1:]]),
    ],
    "check_gradient_norm_through_time": [
        # rho ** k: right only for normal matrices
        lambda W, n: torch.linalg.eigvals(W).abs().max() ** torch.arange(n + 1),
        lambda W, n: gradient_norm_through_time(W, n)[1:],  # misses k = 0
        lambda W, n: torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k))
                                  for k in range(n + 1)]),  # Frobenius norm
    ],
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_check_passes_on_correct_answer(name, capsys):
    assert checks.CHECKS[name](CORRECT[name]) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_check_fails_on_stub(name):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.CHECKS[name](stub)


@pytest.mark.parametrize("name,i", [(n, i) for n in sorted(WRONG) for i in range(len(WRONG[n]))])
def test_check_fails_on_wrong_answer(name, i):
    with pytest.raises(CheckFailed, match=name):
        checks.CHECKS[name](WRONG[name][i])


def test_unroll_message_names_the_off_by_one():
    with pytest.raises(CheckFailed, match="h_1..h_T"):
        checks.check_unroll_rnn(WRONG["check_unroll_rnn"][0])


def test_bptt_jacobian_agrees_with_autograd_for_a_solution():
    torch.manual_seed(0)
    W_h, W_x = torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    xs = torch.randn(4, 2, dtype=torch.float64)

    def run(h):
        states = [h]
        for x_t in xs:
            states.append(torch.tanh(W_h @ states[-1] + W_x @ x_t))
        return states

    h0 = torch.zeros(3, dtype=torch.float64)
    hs = torch.stack(run(h0)).detach()
    expected = torch.autograd.functional.jacobian(lambda h: run(h)[-1], h0)
    torch.testing.assert_close(bptt_jacobian(hs, W_h), expected)


# --- the singular-value bound (eq. ch01-bound) ----------------------------------------------------

def _bound_right(hs, W_h):
    sigma = torch.linalg.matrix_norm(W_h, ord=2)
    return ((1 - hs[1:] ** 2).max(dim=-1).values * sigma).prod()


def _bound_with_rho(hs, W_h):
    rho = torch.linalg.eigvals(W_h).abs().max()
    return ((1 - hs[1:] ** 2).max(dim=-1).values * rho).prod()


def _bound_without_slopes(hs, W_h):
    return torch.linalg.matrix_norm(W_h, ord=2) ** (hs.shape[0] - 1)


def test_check_bptt_norm_bound_passes_a_correct_answer(capsys):
    assert checks.check_bptt_norm_bound(_bound_right) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(("fn", "message"), [
    (_bound_with_rho, "spectral radius"),
    (_bound_without_slopes, "differ"),
])
def test_check_bptt_norm_bound_fails_wrong_answers(fn, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_bptt_norm_bound(fn)
