"""Chapter 1 checks: they pass on correct answers and fail, with a clear message, on wrong ones."""

import pytest
import torch

from fundamentallm import checks
from fundamentallm.checks import CheckFailed


def rnn_step(x_t, h_prev, W_x, W_h, b):
    return torch.tanh(x_t @ W_x.T + h_prev @ W_h.T + b)


def unroll_rnn(xs, h0, W_x, W_h, b):
    h, hs = h0, []
    for t in range(xs.shape[1]):
        h = rnn_step(xs[:, t], h, W_x, W_h, b)
        hs.append(h)
    return torch.stack(hs, dim=1)


def scale_to_spectral_radius(W, rho):
    return W * (rho / torch.linalg.eigvals(W).abs().max())


def gradient_norm_through_time(W_h, num_steps):
    return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(W_h, k), ord=2)
                        for k in range(num_steps + 1)])


def stub(*args, **kwargs):
    raise NotImplementedError


CORRECT = {
    "check_rnn_step": rnn_step,
    "check_unroll_rnn": unroll_rnn,
    "check_scale_to_spectral_radius": scale_to_spectral_radius,
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
    "check_scale_to_spectral_radius": [
        lambda W, rho: W * (rho / torch.linalg.matrix_norm(W, ord=2)),  # spectral norm, not radius
        lambda W, rho: W * rho,
        lambda W, rho: W.mul_(rho / torch.linalg.eigvals(W).abs().max()),  # modifies W in place
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


def test_spectral_radius_message_explains():
    with pytest.raises(CheckFailed, match="spectral radius"):
        checks.check_scale_to_spectral_radius(WRONG["check_scale_to_spectral_radius"][0])
