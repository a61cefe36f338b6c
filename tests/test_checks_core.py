"""The checks' core: forbidden calls in every spelling (and through the package's reference),
the profiler restored whatever the student's code does, in-place mutation, missing returns, and
"your code raised" vs "the check could not use your result". The correct answers are the book's
own solution cells (run through the course tool), so no solution is written here again."""

from __future__ import annotations

import re
import sys

import pytest
import torch
import torch.nn.functional as F
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed, exercise_check
from fundamentallm.checks.core import FORBIDDEN

# (check, answer that uses a forbidden call, the name the message must give: the name the answer
# used, and the forbidden name it is an alias of)
_SOFTMAX_AS = " (torch.softmax under another name)"
FORBIDDEN_CASES = [
    ("check_softmax_rows", lambda x: torch.softmax(x, -1), "torch.softmax"),
    ("check_softmax_rows", lambda x: torch._C._VariableFunctions.softmax(x, -1), "torch.softmax"),  # the same object
    ("check_softmax_rows", lambda x: x.softmax(-1), "torch.Tensor.softmax" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: torch.Tensor.softmax(x, -1), "torch.Tensor.softmax" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: F.softmax(x, dim=-1), "torch.nn.functional.softmax" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: torch.nn.functional.softmax(x, -1), "torch.nn.functional.softmax" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: torch.special.softmax(x, -1), "torch.special.softmax" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: torch.nn.Softmax(dim=-1)(x), "torch.nn.functional.softmax" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: torch.ops.aten.softmax(x, -1), "torch.ops.aten.softmax" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: torch.ops.aten.softmax.int(x, -1), "torch.ops.aten.softmax.int" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: torch._softmax(x, -1, False), "torch._softmax" + _SOFTMAX_AS),
    ("check_softmax_rows", lambda x: torch.ops.aten._softmax.default(x, -1, False),
     "torch.ops.aten._softmax.default" + _SOFTMAX_AS),
    ("check_make_causal_mask", lambda T: __import__("fundamentallm.attention", fromlist=["x"]).causal_mask(T),
     "fundamentallm.attention.causal_mask"),
    ("check_entropy_from_scores", lambda s: torch.special.entr(torch.exp(s - s.logsumexp(-1, keepdim=True))).sum(-1),
     "torch.special.entr"),
    ("check_feed_forward_backward", lambda x, wu, bu, wd, bd, g: {"x": F.gelu(x @ wu.T + bu, approximate="tanh")},
     "torch.nn.functional.gelu"),
    ("check_feed_forward_backward", lambda x, wu, bu, wd, bd, g: {"x": torch.nn.GELU("tanh")(x @ wu.T + bu)},
     "torch.nn.functional.gelu"),
    ("check_cross_entropy_grad", lambda z, y, ignore_index=-100: F.cross_entropy(z, y, ignore_index=ignore_index),
     "torch.nn.functional.cross_entropy"),
    ("check_cross_entropy_grad", lambda z, y, ignore_index=-100: z.softmax(-1), "torch.Tensor.softmax" + _SOFTMAX_AS),
    ("check_top_p_filter", lambda z, p: __import__("fundamentallm.generation", fromlist=["x"]).top_p_filter(z, p),
     "fundamentallm.generation.top_p_filter"),
    ("check_rotate_half", lambda x: __import__("fundamentallm.positions", fromlist=["x"]).rotate_half(x),
     "fundamentallm.positions.rotate_half"),
    ("check_chunked_bpe_encode", lambda text, merges, pattern: __import__(
        "fundamentallm.tokenizers", fromlist=["x"]).ByteBPETokenizer(list(merges), pattern=pattern).encode(text),
     "fundamentallm.tokenizers"),
]


@pytest.mark.parametrize("name, answer, call", FORBIDDEN_CASES,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(FORBIDDEN_CASES)])
def test_forbidden_call_fails_with_a_clear_message(name, answer, call):
    with pytest.raises(CheckFailed, match=f"asks you not to use {re.escape(call)};"):
        checks.CHECKS[name](answer)
    assert sys.getprofile() is None


@pytest.mark.parametrize("names", [("torch.ops.aten.gelu", "torch.nn.functional.gelu"),
                                   ("torch.nn.functional.gelu", "torch.ops.aten.gelu"), ("torch.nn.functional.gelu",)])
def test_a_refusal_names_what_the_student_called_whatever_the_order_of_the_forbidden_names(names):
    """torch's other names for a forbidden function are derived from it (core._aliases): each
    refusal names the function the answer called, listed or derived, in any order."""
    @exercise_check(forbidden=names)
    def check_core_demo_gelu(fn):
        checks.assert_same(fn(torch.ones(3)), F.gelu(torch.ones(3)))

    listed = "torch.ops.aten.gelu" in names
    try:
        for answer, used in ((lambda x: torch.ops.aten.gelu(x), "torch.ops.aten.gelu"),
                             (lambda x: torch.ops.aten.gelu.default(x), "torch.ops.aten.gelu.default"),
                             (lambda x: torch._C._nn.gelu(x), "torch.nn.functional.gelu"),  # the same object
                             (lambda x: F.gelu(x), "torch.nn.functional.gelu")):
            alias = used != "torch.nn.functional.gelu" and not (listed and used == "torch.ops.aten.gelu")
            if listed and used == "torch.ops.aten.gelu.default":
                alias = False  # an overload of a listed operator: its own name, no alias note
            message = re.escape(used + (" (torch.nn.functional.gelu under another name)" if alias else "")) + ";"
            with pytest.raises(CheckFailed, match="asks you not to use " + message):
                check_core_demo_gelu(answer)
    finally:
        checks.CHECKS.pop("check_core_demo_gelu", None)
        FORBIDDEN.pop("check_core_demo_gelu", None)


def test_wrapping_the_reference_through_an_alias_fails():
    from fundamentallm.attention import causal_mask as cm  # bound before the check runs

    def make_causal_mask(T):
        return cm(T).clone()

    with pytest.raises(CheckFailed, match="fundamentallm.attention.causal_mask"):
        checks.check_make_causal_mask(make_causal_mask)


@pytest.mark.parametrize("label, name, check", [
    ("ch02-ex2", "softmax_rows", "check_softmax_rows"),
    ("ch02-ex3", "make_causal_mask", "check_make_causal_mask"),
    ("ch03-ex3", "entropy_from_scores", "check_entropy_from_scores"),
    ("ch07-ex1", "feed_forward_backward", "check_feed_forward_backward"),
    ("ch09-ex1", "cross_entropy_grad", "check_cross_entropy_grad"),
    ("ch10-ex2", "top_p_filter", "check_top_p_filter"),
])
def test_the_books_solution_uses_no_forbidden_call(label, name, check, capsys):
    assert FORBIDDEN[check]
    assert checks.CHECKS[check](book_solution(label, name)) is True
    assert "passed" in capsys.readouterr().out


def test_profiler_is_restored_after_exceptions_and_system_exit():
    def boom(x):
        raise RuntimeError("student bug")

    def leave(x):
        raise SystemExit(3)

    with pytest.raises(CheckFailed, match="your code raised RuntimeError: student bug"):
        checks.check_softmax_rows(boom)
    assert sys.getprofile() is None
    with pytest.raises(SystemExit):
        checks.check_softmax_rows(leave)
    assert sys.getprofile() is None

    def outer_profiler(frame, event, arg):
        return None

    sys.setprofile(outer_profiler)
    try:
        with pytest.raises(CheckFailed):
            checks.check_softmax_rows(lambda x: x.softmax(-1))
        assert sys.getprofile() is outer_profiler
    finally:
        sys.setprofile(None)


def test_switching_the_profiler_off_is_reported():
    def sneaky(x):
        sys.setprofile(None)
        return torch.softmax(x, -1)

    with pytest.raises(CheckFailed, match="changed the profiler"):
        checks.check_softmax_rows(sneaky)
    assert sys.getprofile() is None


def test_forbidden_call_reported_even_when_the_answer_is_also_wrong():
    with pytest.raises(CheckFailed, match="not to use torch.softmax"):
        checks.check_softmax_rows(lambda x: torch.softmax(x, 0))


def test_mutation_and_missing_return_are_reported():
    def in_place(x):
        return x.sub_(x.amax(-1, keepdim=True)).exp_()

    with pytest.raises(CheckFailed, match="modified its argument 1 in place"):
        checks.check_softmax_rows(in_place)
    with pytest.raises(CheckFailed, match="did you forget to `return`"):
        checks.check_softmax_rows(lambda x: None)


def test_a_result_the_check_cannot_use_is_not_blamed_on_the_student_as_a_crash():
    with pytest.raises(CheckFailed) as info:
        checks.check_attention(lambda q, k, v, mask=None: ("out", "weights"))
    assert "your code raised" not in str(info.value)


def test_exercise_check_with_and_without_arguments():
    @exercise_check
    def check_core_demo_bare(fn):
        checks.assert_same(fn(2), 4)

    @exercise_check(forbidden=("torch.square",), may_return_none=False)
    def check_core_demo_forbidden(fn):
        checks.assert_same(fn(torch.tensor(2.0)), torch.tensor(4.0))

    try:
        assert check_core_demo_bare(lambda x: x * 2) is True
        assert check_core_demo_forbidden(lambda x: x * x) is True
        with pytest.raises(CheckFailed, match=r"not to use torch\.Tensor\.square \(torch\.square under another name\)"):
            check_core_demo_forbidden(lambda x: x.square())
        assert FORBIDDEN["check_core_demo_forbidden"] == ("torch.square",)
    finally:
        for name in ("check_core_demo_bare", "check_core_demo_forbidden"):
            checks.CHECKS.pop(name, None)
            FORBIDDEN.pop(name, None)
    with pytest.raises(ValueError, match="torch.sofmax"):
        exercise_check(forbidden=("torch.sofmax",))(lambda fn: None)
    with pytest.raises(TypeError, match="tuple"):
        exercise_check(forbidden="torch.softmax")(lambda fn: None)


def test_by_hand_refuses_complex_step_differentiation_in_every_spelling():
    """``by_hand``: complex arithmetic in the student's code (torch, NumPy, Python numbers, cmath)
    fails the check with the reason; a real derivation passes. (This file counts as the student's
    code, so the demo check here computes in real numbers only.)"""
    import cmath

    import numpy as np

    @exercise_check(by_hand=True)
    def check_core_demo_by_hand(fn):
        x = torch.linspace(-2, 2, 7, dtype=torch.float64)
        checks.assert_same(torch.as_tensor(np.asarray(fn(x.numpy()), dtype=np.float64)), 3 * x ** 2, rtol=1e-12, atol=1e-12)

    def torch_step(x):
        z = torch.tensor(x).to(torch.complex128) + 1e-30j
        return (z ** 3).imag.numpy() / 1e-30

    def numpy_step(x):
        z = x + 1e-30j
        return (z ** 3).imag / 1e-30

    def cmath_step(x):
        return np.array([(cmath.exp(3 * cmath.log(t + 1e-30j))).imag / 1e-30 for t in x.tolist()])

    def helper_step(x):
        cube = lambda v: v ** 3
        return np.array([cube(complex(t, 1e-30)).imag / 1e-30 for t in x.tolist()])

    def inline_step(x):  # complex only on the value stack, never in a variable the profiler reads
        return np.array([((t + 1e-30j) ** 3).imag / 1e-30 for t in x.tolist()])

    def reset_step(x):  # a complex local, reset to a float before the function returns
        out = []
        for t in x.tolist():
            z = (t + 1e-30j) ** 3
            out.append(z.imag / 1e-30)
            z = 0.0
        return np.array(out)

    class Dual:  # forward-mode autodiff by hand: (value, derivative) through *
        def __init__(self, a, b):
            self.a, self.b = a, b

        def __mul__(self, o):
            return Dual(self.a * o.a, self.a * o.b + self.b * o.a)

    def dual_numbers(x):
        z = Dual(x, np.ones_like(x))
        return (z * z * z).b

    def real_part_is_fine(x):  # .real and float64 arithmetic alone are not refused
        return (3 * x ** 2).real

    try:
        assert checks.BY_HAND >= {"check_core_demo_by_hand"}
        assert check_core_demo_by_hand(lambda x: 3 * x ** 2) is True
        assert check_core_demo_by_hand(real_part_is_fine) is True
        for fn in (torch_step, numpy_step, cmath_step, helper_step, inline_step, reset_step):
            with pytest.raises(CheckFailed, match="complex-step differentiation"):
                check_core_demo_by_hand(fn)
        with pytest.raises(CheckFailed, match="overloads arithmetic"):
            check_core_demo_by_hand(dual_numbers)
    finally:
        checks.CHECKS.pop("check_core_demo_by_hand", None)
        FORBIDDEN.pop("check_core_demo_by_hand", None)
        checks.BY_HAND.discard("check_core_demo_by_hand")


def test_every_check_that_forbids_autograd_is_by_hand():
    """A statement that forbids autograd asks for a derivation: its check refuses the complex step."""
    for name, names in FORBIDDEN.items():
        if any(n.startswith(("torch.autograd", "torch.Tensor.backward")) for n in names):
            assert name in checks.BY_HAND, name


def test_every_forbidden_name_resolves_and_is_documented_in_the_statement_or_the_package():
    for check, names in FORBIDDEN.items():
        for name in names:
            # whole third-party packages an exercise's reference implementation lives in
            third_party = {"transformers", "sympy", "mpmath"}
            assert name.startswith(("torch.", "numpy.", "math.", "statistics.", "builtins.", "fundamentallm.")) \
                or name in third_party, (check, name)


def test_what_a_check_shows_in_a_notebook(tmp_path):
    """In a kernel: a pass is one ✓ line and no `Out: True`; a stub one "not attempted yet" line
    and no error (Run All goes on); a wrong answer one message without the package's frames; a
    crash the student's own frames, then the message."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError  # noqa: F401  (errors are allowed below)

    code = nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        code("import torch\nfrom fundamentallm import checks"),
        code("def make_causal_mask(T):\n    return torch.ones(T, T, dtype=torch.bool).tril()"),
        code("checks.check_make_causal_mask(make_causal_mask)"),
        code("def make_causal_mask(T):\n    raise NotImplementedError  # your code here"),
        code("checks.check_make_causal_mask(make_causal_mask)"),
        code("checks.check_make_causal_mask(None)"),
        code("def make_causal_mask(T):\n    return torch.ones(T, T, dtype=torch.bool).triu()"),
        code("checks.check_make_causal_mask(make_causal_mask)", metadata={"tags": ["raises-exception"]}),
        code("def helper(T):\n    return [][T]\n\ndef make_causal_mask(T):\n    return helper(T)"),
        code("checks.check_make_causal_mask(make_causal_mask)", metadata={"tags": ["raises-exception"]}),
        code("print('the notebook went on')"),
    ]
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    def shown(i):
        out = nb.cells[i].outputs
        text = "".join(o.get("text", "") for o in out)
        errors = [o for o in out if o.output_type == "error"]
        return text, errors, [o for o in out if o.output_type == "execute_result"]

    text, errors, results = shown(2)
    assert text.startswith("\u2713 check_make_causal_mask passed") and len(text.splitlines()) == 1
    assert not errors and not results
    for i in (4, 5):
        text, errors, results = shown(i)
        assert "not attempted yet" in text and len(text.splitlines()) == 1 and not errors and not results
    _, errors, _ = shown(7)
    (error,) = errors
    assert error["ename"] == "CheckFailed" and len(error["traceback"]) == 1
    assert error["traceback"][0].startswith("\u2717 check_make_causal_mask failed: mask for T=2")
    _, errors, _ = shown(9)
    trace = "\n".join(errors[0]["traceback"])
    assert "return [][T]" in trace and "return helper(T)" in trace  # the student's frames
    assert "fundamentallm" not in trace.replace("\u2717 check_make_causal_mask: your code raised", "")
    assert "your code raised IndexError" in errors[0]["traceback"][-1]
    assert shown(10)[0] == "the notebook went on\n"


def test_outside_a_notebook_a_stub_raises_not_attempted_and_a_pass_returns_true():
    with pytest.raises(checks.NotAttempted, match="NotImplementedError"):
        checks.check_make_causal_mask(lambda T: (_ for _ in ()).throw(NotImplementedError))
    with pytest.raises(checks.NotAttempted, match="replace None"):
        checks.check_make_causal_mask(None)
    assert issubclass(checks.NotAttempted, CheckFailed)
    assert checks.check_make_causal_mask(lambda T: torch.ones(T, T, dtype=torch.bool).tril()) is True
    with checks.strict():
        assert checks.core.in_ipython() is False


def test_rng_is_fixed_in_a_notebook_and_fresh_when_grading():
    from fundamentallm.checks.core import grading_seed

    a, b = torch.randn(3, generator=checks.rng(1)), torch.randn(3, generator=checks.rng(1))
    assert torch.equal(a, b)
    generator = torch.Generator
    with grading_seed(12345):
        c = torch.randn(3, generator=checks.rng(1))
        d = torch.randn(3, generator=torch.Generator().manual_seed(1))  # a generator seeded by hand
        assert torch.Generator is generator  # nothing is replaced for the process
    with grading_seed(12345):
        e = torch.randn(3, generator=checks.rng(1))
    assert not torch.equal(a, c) and torch.equal(c, e) and torch.equal(d, a)
    assert torch.equal(torch.randn(3, generator=checks.rng(1)), a)  # restored


def test_the_checks_draw_their_inputs_from_rng_only():
    """Every ``torch.Generator().manual_seed`` in the checks' own code (not in a wrong answer's
    source, which is the student's) goes through ``core.rng``: the grader's seed reaches it."""
    import io
    import tokenize
    from pathlib import Path

    folder = Path(checks.__file__).parent
    found = []
    for path in sorted(folder.glob("ch*.py")):
        tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
        for tok, after in zip(tokens, tokens[1:]):
            if tok.type == tokenize.NAME and tok.string == "Generator" and after.string == "(":
                found.append(f"{path.name}:{tok.start[0]}")
    assert found == [], found


def test_a_forbidden_package_that_is_not_imported_yet_is_forbidden_without_importing_it():
    import sys

    from fundamentallm.checks.core import _Forbidden, _unimported_package
    name = next((m for m in ("transformers", "sympy", "mpmath") if m not in sys.modules), None)
    if name is None:
        pytest.skip("every candidate package is already imported in this process")
    assert _unimported_package(name) and not _unimported_package("torch")
    assert _Forbidden((name,)).modules == {name: name}
    assert name not in sys.modules
