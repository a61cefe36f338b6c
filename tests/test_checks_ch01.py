"""Chapter 1 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py)."""

import torch
from book_solutions import book_solution
from check_tables import wrong_answer_tests

bptt_jacobian = book_solution("ch01-ex4", "bptt_jacobian")
gradient_norm_through_time = book_solution("ch01-ex3", "gradient_norm_through_time")


def _bound(hs, W_h, sigma):
    return ((1 - hs[1:] ** 2).max(dim=-1).values * sigma).prod()


WRONG = [
    ("check_rnn_step", lambda x, h, W_x, W_h, b: x @ W_x.T + h @ W_h.T + b, "elements differ"),  # no tanh
    ("check_rnn_step", lambda x, h, W_x, W_h, b: torch.tanh(x @ W_x.T + h @ W_h + b), "vs torch.nn.RNN"),
    ("check_rnn_step", lambda x, h, W_x, W_h, b: torch.tanh(x @ W_x.T + h @ W_h.T)[:1], "expected shape"),
    ("check_orthogonal_rnn_prediction", 0.5, "norm of one step"),
    ("check_orthogonal_rnn_prediction", 0.0, "does not vanish exactly"),
    ("check_orthogonal_rnn_prediction", 0.5 ** 40 * 8 ** 0.5, "Frobenius"),
    ("check_orthogonal_rnn_prediction", 1e-10, "keeps every length"),
    ("check_orthogonal_rnn_prediction", "tiny", "should be a number"),
    ("check_gradient_norm_through_time",  # rho ** k: right only for normal matrices
     lambda W, n: torch.linalg.eigvals(W).abs().max() ** torch.arange(n + 1), "vs autograd"),
    ("check_gradient_norm_through_time", lambda W, n: gradient_norm_through_time(W, n)[1:],
     r"one norm for each k = 0..num_steps"),
    ("check_gradient_norm_through_time", lambda W, n: torch.stack(  # Frobenius norm
        [torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k)) for k in range(n + 1)]), "first mismatch"),
    ("check_bptt_jacobian", lambda hs, W: torch.linalg.matrix_power(W, hs.shape[0] - 1), "vs autograd"),
    ("check_bptt_jacobian", lambda hs, W: bptt_jacobian(hs[:-1], W) if hs.shape[0] > 1 else W, "vs autograd"),
    ("check_bptt_jacobian", lambda hs, W: torch.linalg.multi_dot(  # J_1 ... J_T, the wrong order
        [torch.eye(W.shape[0], dtype=W.dtype)] + [torch.diag(1 - h ** 2) @ W for h in hs[1:]]), "elements differ"),
    ("check_bptt_norm_bound", lambda hs, W: _bound(hs, W, torch.linalg.eigvals(W).abs().max()), "spectral radius"),
    ("check_bptt_norm_bound", lambda hs, W: torch.linalg.matrix_norm(W, ord=2) ** (hs.shape[0] - 1), "differ"),
    ("check_bptt_norm_bound", lambda hs, W: _bound(hs, W, 0.5 * torch.linalg.matrix_norm(W, ord=2)),
     "not an upper bound"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(WRONG)
