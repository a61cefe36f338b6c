"""The core of the exercise checks: each ``check_*`` runs a student's function on inputs drawn from a
seeded generator (:func:`rng`), compares it with an independent reference, and says exactly what
is wrong (which output, the first mismatching element, expected vs got).

What a check shows, in a notebook (IPython: Jupyter, Colab, VS Code):

* a pass: one line ``✓ check_x passed: ...``, and the call returns ``None`` (no ``Out: True``);
* a stub (the function raises ``NotImplementedError``, or a value is still ``None``): one line
  ``… check_x: not attempted yet ...``, no exception, so Run All goes on;
* a wrong answer: :class:`CheckFailed` whose traceback is one message with a hint, without the
  package's frames; when the student's own code crashed, its frames (and only those) come first.

Outside IPython (scripts, tests, the grader) a pass returns ``True`` and a stub raises
:class:`NotAttempted` (a :class:`CheckFailed`), so code can tell the three apart.

Every check is registered in :data:`CHECKS` (and its forbidden calls in :data:`FORBIDDEN`); the
tests run each one against the book's reference solution (must pass) and against an unimplemented
stub (must fail with a helpful message). :func:`exercise_check` owns the call into the student's
function: see its docstring and book/CONTRIBUTING.md.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import math
import os
import site
import sys
import sysconfig
import threading
import types
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

CHECKS: dict[str, Callable[..., bool]] = {}
FORBIDDEN: dict[str, tuple[str, ...]] = {}  # check name -> the calls its exercise forbids
# Checks of self-check items (predictions with two or three choices): their messages may explain
# the answer freely and they count no marks (the grade table gives them their own column).
SELF_CHECK: set[str] = set()
# Checks whose statement asks for a derivation by hand: besides their forbidden calls, the
# student's code may not compute with complex numbers (see ``by_hand`` in :func:`exercise_check`).
BY_HAND: set[str] = set()


class CheckFailed(AssertionError):
    """Raised by a ``check_*`` function when the student's answer is wrong. In IPython its
    traceback is the message alone (plus the student's own frames when their code crashed): see
    :meth:`_render_traceback_`."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of the traceback: the student's frames, then one line."""
        lines: list[str] = []
        cause = self.__cause__
        if cause is not None and getattr(cause, "_raised_by_student", False):
            import traceback

            frames = [f for f in traceback.extract_tb(cause.__traceback__)
                      if _file_kind(f.filename) == _STUDENT]
            if frames:
                lines.append("Traceback of your code (most recent call last):")
                lines.extend(x.rstrip("\n") for x in traceback.format_list(frames))
        lines.append(f"\u2717 {self}")
        return lines


class NotAttempted(CheckFailed):
    """Raised (outside IPython) by a check given a stub: the function still raises
    ``NotImplementedError`` or the value is still ``None``. In IPython the check prints one line
    instead, so Run All goes on."""


_STRICT = False


@contextlib.contextmanager
def strict():
    """Within the block, checks behave as outside IPython even in a notebook: a stub raises
    :class:`NotAttempted` and a pass returns ``True`` (nbgrader's check cells use it, since
    nbgrader gives the points of every cell that raises nothing)."""
    global _STRICT
    previous, _STRICT = _STRICT, True
    try:
        yield
    finally:
        _STRICT = previous


def in_ipython() -> bool:
    """Whether the code runs in an IPython shell or kernel (Jupyter, Colab, VS Code), outside
    :func:`strict`."""
    if _STRICT:
        return False
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    try:
        return get is not None and get() is not None
    except Exception:  # a broken IPython import: behave as a script
        return False


# --- Fresh inputs: the grader draws them with a seed it keeps -----------------------------------

_SEED_OFFSET: Optional[int] = None  # set by the grader; None in a notebook (the book's inputs)


def rng(seed: int) -> torch.Generator:
    """A ``torch.Generator`` for a check's inputs: seeded with ``seed`` in a notebook (the same
    inputs every run), and with ``seed`` mixed with the grader's secret seed when grading (inputs
    nobody could see in advance). Use it for every random input of a check."""
    return torch.Generator().manual_seed(_mixed_seed(seed))


def _mixed_seed(seed: int) -> int:
    if _SEED_OFFSET is None:
        return int(seed)
    return (int(seed) * 1_000_003 + _SEED_OFFSET) % (2 ** 63 - 1)


@contextlib.contextmanager
def grading_seed(seed: int):
    """Within the block, :func:`rng` draws from its seed mixed with ``seed`` (the grader's fresh
    inputs), and the global torch and NumPy generators restart from ``seed`` (restored after).
    Every random input of a check comes from :func:`rng`; nothing else is replaced (a
    ``torch.Generator`` seeded by hand, in a check's reference or in the library, draws as it
    would anywhere). The grader alone uses it."""
    global _SEED_OFFSET
    previous_offset = _SEED_OFFSET
    _SEED_OFFSET = int(seed) % (2 ** 62)
    state = torch.random.get_rng_state()
    np_state = np.random.get_state()
    torch.manual_seed(_SEED_OFFSET)
    np.random.seed(_SEED_OFFSET % (2 ** 32))
    try:
        yield
    finally:
        _SEED_OFFSET = previous_offset
        torch.random.set_rng_state(state)
        np.random.set_state(np_state)


# --- Where a frame's code comes from: the checks, a library, or the student -------------------

_CHECKS_DIR = str(Path(__file__).resolve().parent)
_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])
_LIBRARY_DIRS = tuple(sorted(
    {str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {str(Path(p).resolve()) for p in site.getsitepackages() + [site.getusersitepackages()]}
    | {str(Path(m.__file__).resolve().parents[1]) for m in (np, torch)} | {_PACKAGE_DIR}))
_CHECK, _LIBRARY, _STUDENT = "check", "library", "student"
_kinds: dict[str, str] = {}


def _frame_kind(code: types.CodeType) -> str:
    """Classify a code object by its file: this package's ``checks`` (the checks), an installed
    library or ``fundamentallm`` itself (a library), anything else (the student: a notebook cell,
    a grading cell, a test file)."""
    return _file_kind(code.co_filename)


def _file_kind(name: str) -> str:
    kind = _kinds.get(name)
    if kind is None:
        if name.startswith("<frozen") or name.startswith("<__array_function__"):
            kind = _LIBRARY
        else:
            resolved = os.path.realpath(name) if not name.startswith("<") else name
            if resolved.startswith(_CHECKS_DIR + os.sep):
                kind = _CHECK
            elif resolved.startswith(tuple(d + os.sep for d in _LIBRARY_DIRS)):
                kind = _LIBRARY
            else:
                kind = _STUDENT
        _kinds[name] = kind
    return kind


def _called_by_student(frame: Optional[types.FrameType]) -> bool:
    """Whether the nearest non-library frame at or above ``frame`` is the student's code: a
    forbidden function called by a library the student called counts, one the check calls does not."""
    while frame is not None:
        kind = _frame_kind(frame.f_code)
        if kind != _LIBRARY:
            return kind == _STUDENT
        frame = frame.f_back
    return False


# --- Forbidden calls ---------------------------------------------------------------------------

# A forbidden ``torch.X`` also forbids its aliases of the same name in these namespaces.
_ALIAS_NAMESPACES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.special", "torch.linalg",
                     "torch.fft", "torch._C._nn", "torch._C._special", "torch._C._linalg")


def _unimported_package(dotted: str) -> bool:
    """Whether ``dotted`` names a top-level package that is installed but not imported yet
    (``"sympy"``, ``"transformers"``): forbidding it needs only its name, and importing a large
    package just to forbid it would slow every chapter down."""
    if "." in dotted or dotted in sys.modules:
        return False
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def _resolve(dotted: str) -> Any:
    """The object named by ``dotted`` (``"torch.nn.functional.softmax"``, ``"torch.Tensor.softmax"``,
    ``"fundamentallm.attention.causal_mask"``, an operator such as ``"torch.ops.aten.gelu"``, or a
    module such as ``"torch"``)."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise ValueError(f"forbidden: {dotted!r} does not name an importable object; "
                     f"use a dotted path such as 'torch.softmax' or 'torch.nn.functional.softmax'")


class _Forbidden:
    """The objects behind a check's forbidden names, matched against the calls the profiler sees:
    Python functions by code object, C functions by identity (or by bound name and owner type for
    tensor methods), modules by the module a function belongs to."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.codes: dict[types.CodeType, str] = {}
        self.builtins: dict[int, str] = {}
        self.methods: dict[tuple[str, type], str] = {}
        self.modules: dict[str, str] = {}
        self.dispatchers: dict[tuple[str, str], str] = {}  # (file, name) of a NumPy C function's dispatcher
        self._alive: list[Any] = []
        for dotted in names:
            if _unimported_package(dotted):
                self.modules[dotted] = dotted
                continue
            obj = _resolve(dotted)
            self._add(dotted, obj)
            if dotted.startswith("torch.") and not isinstance(obj, types.ModuleType):
                short = dotted.rsplit(".", 1)[-1]
                for ns in _ALIAS_NAMESPACES:
                    with contextlib.suppress(ValueError):
                        self._add(dotted, _resolve(f"{ns}.{short}"))

    def _add(self, label: str, obj: Any) -> None:
        if isinstance(obj, types.ModuleType):
            self.modules[obj.__name__] = label
            return
        if isinstance(obj, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
            # ``torch.ops.aten.gelu`` and its overloads (``.default``) call a C builtin, ``_op``
            overloads = ([getattr(obj, name) for name in obj.overloads()]
                         if isinstance(obj, torch._ops.OpOverloadPacket) else [])
            for op in [obj, *overloads]:
                self.builtins[id(op._op)] = label
                self._alive.append(op._op)
            return
        if type(obj).__name__ == "_ArrayFunctionDispatcher" and not isinstance(
                getattr(obj, "__wrapped__", None), types.FunctionType):
            # a NumPy function written in C (np.unravel_index): the profiler sees no C call, only
            # the Python dispatcher NumPy runs first, a function of the same name in multiarray.py
            multiarray = sys.modules.get("numpy._core.multiarray") or sys.modules.get("numpy.core.multiarray")
            if multiarray is not None and getattr(multiarray, "__file__", None):
                self.dispatchers[(multiarray.__file__, obj.__name__)] = label
        fn = inspect.unwrap(obj) if callable(obj) else obj
        for f in {obj, fn}:
            code = getattr(f, "__code__", None)
            if isinstance(code, types.CodeType):
                self.codes[code] = label
            elif isinstance(f, (types.MethodDescriptorType, types.WrapperDescriptorType)):
                self.methods[(f.__name__, f.__objclass__)] = label
            elif isinstance(f, types.BuiltinFunctionType) or callable(f):
                self.builtins[id(f)] = label
                self._alive.append(f)  # keep the id from being reused

    def match_python(self, frame: types.FrameType) -> Optional[str]:
        label = self.codes.get(frame.f_code)
        if label is None and self.dispatchers:
            label = self.dispatchers.get((frame.f_code.co_filename, frame.f_code.co_name))
        if label is None and self.modules and frame.f_code.co_name != "<module>":  # importing is not using
            module = frame.f_globals.get("__name__", "")
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back is not None else ""
            label = next((v for m, v in self.modules.items() if (module == m or module.startswith(m + "."))
                          # a call inside the package (also from code it generates) is not a new use
                          and not (caller == m or caller.startswith(m + "."))), None)
        return label

    def match_function(self, fn: Any) -> Optional[str]:
        """The label of ``fn`` as PyTorch's dispatcher hands it to a ``TorchFunctionMode`` (a
        function, a builtin or an unbound tensor method), or None."""
        code = getattr(fn, "__code__", None)
        label = self.codes.get(code) if isinstance(code, types.CodeType) else None
        if label is None:
            label = self.builtins.get(id(fn))
        if label is None:
            name, owner = getattr(fn, "__name__", None), getattr(fn, "__objclass__", None)
            label = self.methods.get((name, owner)) if owner is not None else None
        if label is None and self.modules:
            module = getattr(fn, "__module__", None) or ""
            label = next((v for m, v in self.modules.items() if module == m or module.startswith(m + ".")), None)
        return label

    def match_c(self, fn: Any) -> Optional[str]:
        label = self.builtins.get(id(fn))
        if label is None and self.methods:
            owner = getattr(fn, "__self__", None)
            label = next((v for (name, cls), v in self.methods.items()
                          if getattr(fn, "__name__", None) == name and isinstance(owner, cls)), None)
        if label is None and self.modules:
            module = getattr(fn, "__module__", None) or ""
            owner = getattr(fn, "__self__", None)
            owner_module = type(owner).__module__ if owner is not None else ""
            label = next((v for m, v in self.modules.items()
                          if any(x == m or x.startswith(m + ".") for x in (module, owner_module))), None)
        return label


# Why some forbidden names are forbidden, appended to the refusal.
_WHY_FORBIDDEN = {
    "fundamentallm.gradcheck": " (a finite difference is a test, not a derivation)",
    "sympy": " (a computer-algebra derivative is not a derivation by hand)",
    "mpmath": " (a high-precision numerical derivative is a test, not a derivation)",
    "transformers": " (Hugging Face's implementation is the one you are rebuilding)",
    "cmath": " (complex-step differentiation is a numerical derivative, not a derivation by hand)",
    "decimal": " (a difference quotient in extended precision is a numerical derivative, not a derivation)",
    "fractions": " (a difference quotient in exact arithmetic is a numerical derivative, not a derivation)",
}


# What ``by_hand`` refuses, and why (appended to the refusal).
_COMPLEX_STEP = ("this exercise asks for a derivation by hand, and your code computed with complex "
                 "numbers or beyond float64 precision ({where}): evaluating f(x + ih) and reading the "
                 "derivative off the imaginary part (complex-step differentiation), or a difference "
                 "quotient in extended precision, is a numerical derivative, not a derivation; derive "
                 "the formula and write it with real float64 operations")
# NumPy's long double, where it is wider than float64 (x86: 80 bits): a finite difference in it,
# with Richardson extrapolation, reaches float64 precision
_EXTENDED = tuple(t for t in (np.longdouble, getattr(np, "float128", None))
                  if t is not None and np.finfo(t).eps < np.finfo(np.float64).eps)


# Names whose use in the student's own code (attribute or global, read by a by-hand answer) means
# complex or extended-precision arithmetic, even when no complex value is ever stored where the
# profiler looks (a complex step written inline on Python scalars, its temporaries reset before
# the function returns): reading a derivative off an imaginary part needs one of them.
_NUMERIC_NAMES = frozenset({
    "imag", "complex", "complex64", "complex128", "complex192", "complex256", "cfloat", "cdouble",
    "csingle", "clongdouble", "longcomplex", "conj", "conjugate", "emath", "cmath", "longdouble",
    "longfloat", "float96", "float128", "Decimal", "Fraction", "mpf", "mpc"})
# Arithmetic methods: a class of the student's that defines them carries a derivative beside each
# value (dual numbers), which is forward-mode automatic differentiation, not a derivation.
_ARITHMETIC_DUNDERS = frozenset({
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__pow__", "__rpow__", "__neg__", "__array_ufunc__", "__torch_function__"})
_OVERLOADING = ("this exercise asks for a derivation by hand, and your code overloads arithmetic "
                "({where}): a class that carries a derivative beside each value (dual numbers) "
                "differentiates automatically, in forward mode; it is not a derivation. Derive the "
                "formula and write it with plain float64 operations")


@functools.lru_cache(maxsize=4096)
def _code_computes_beyond_float64(code: types.CodeType) -> Optional[str]:
    """Where the student's code object (or a function, lambda or comprehension inside it) writes a
    complex literal (``1e-30j``) or uses a complex or extended-precision name (``.imag``,
    ``complex(...)``, ``np.longdouble``): the static half of ``by_hand``'s refusal of the complex
    step, which catches what never reaches a variable (temporaries on the stack)."""
    for const in code.co_consts:
        if isinstance(const, complex):
            return f"the complex literal {const!r} in {code.co_name}"
        if isinstance(const, types.CodeType):
            inner = _code_computes_beyond_float64(const)
            if inner is not None:
                return inner
    names = _NUMERIC_NAMES.intersection(code.co_names)
    if names:
        return f"{sorted(names)[0]!r} in {code.co_name}"
    return None


def _holds_complex(values: Any, depth: int = 0) -> bool:
    """Whether ``values`` (an iterable of objects) holds a complex number, a complex tensor or a
    complex NumPy array, or a number or array in extended or exact precision (NumPy's long double,
    a ``decimal.Decimal``, a ``fractions.Fraction``), looking one level into lists, tuples and dicts."""
    for i, v in enumerate(values):
        if i >= 256:
            break
        if isinstance(v, torch.Tensor):
            if v.dtype.is_complex:
                return True
        elif isinstance(v, np.ndarray):
            if v.dtype.kind == "c" or (_EXTENDED and v.dtype.type in _EXTENDED):
                return True
        elif isinstance(v, (complex, np.complexfloating)) or (_EXTENDED and isinstance(v, _EXTENDED)):
            return True
        elif type(v).__module__ in ("decimal", "_decimal", "_pydecimal", "fractions"):  # Decimal, Fraction
            return True
        elif depth == 0 and isinstance(v, (list, tuple)):
            if _holds_complex(v, 1):
                return True
        elif depth == 0 and isinstance(v, dict):
            if _holds_complex(v.values(), 1):
                return True
    return False


class _ComplexRecorder(torch.overrides.TorchFunctionMode):
    """Records the first torch function the student's code calls with a complex tensor among its
    inputs or outputs (at PyTorch's dispatcher: every operator, method and factory, however it is
    spelled); the checks' own complex arithmetic does not count."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.seen:
            dtype = kwargs.get("dtype")
            complex_dtype = isinstance(dtype, torch.dtype) and dtype.is_complex
            if (complex_dtype or _holds_complex((out,)) or _holds_complex(args) or _holds_complex(kwargs.values())) \
                    and _called_by_student(sys._getframe(1)):
                self.seen.append(f"torch: {getattr(func, '__name__', func)}")
        return out


def run_forbidding(names: tuple[str, ...], call: Callable[[], Any], by_hand: bool = False) -> Any:
    """Run ``call()``; any call the student's code makes meanwhile (directly, or through a library
    such as ``nn.CrossEntropyLoss``) to one of ``names`` or its aliases fails with a
    :class:`CheckFailed` naming it (even if ``call`` also failed). With ``by_hand``, so does any
    computation of the student's code with complex numbers (complex-step differentiation) or in
    extended precision: a complex tensor passed to or returned by a torch function, or a complex
    or long-double array or number (or a ``Decimal`` or ``Fraction``) among the arguments, locals
    or return value of the student's functions; ``cmath``, ``decimal`` and ``fractions`` are
    forbidden too. The previous profiler
    is restored whatever happens, ``SystemExit`` included."""
    if not names and not by_hand:
        return call()
    if by_hand:
        names = tuple(names) + ("cmath", "decimal", "fractions")
    forbidden = _Forbidden(tuple(names))
    used: list[str] = []
    complex_seen: list[str] = []
    overloaded: list[str] = []

    def profiler(frame, event, arg):
        if event == "call":
            label = forbidden.match_python(frame)
            if label is not None and _called_by_student(frame.f_back):
                used.append(label)
            if by_hand and not complex_seen and _frame_kind(frame.f_code) == _STUDENT \
                    and frame.f_back is not None and _frame_kind(frame.f_back.f_code) != _LIBRARY:
                # (code a library generates and runs, e.g. mpmath's exec'd operators, is not the student's)
                if frame.f_code.co_name in _ARITHMETIC_DUNDERS:
                    overloaded.append(f"{frame.f_code.co_name} in {frame.f_code.co_filename.rsplit('/', 1)[-1]}")
                    complex_seen.append("")
                elif _holds_complex(frame.f_locals.values()):
                    complex_seen.append(f"the arguments of {frame.f_code.co_name}")
                else:
                    where = _code_computes_beyond_float64(frame.f_code)
                    if where is not None:
                        complex_seen.append(where)
        elif event == "return":
            if by_hand and not complex_seen and _frame_kind(frame.f_code) == _STUDENT \
                    and (_holds_complex((arg,)) or _holds_complex(frame.f_locals.values())):
                complex_seen.append(f"a value in {frame.f_code.co_name}")
        elif event == "c_call":
            label = forbidden.match_c(arg)
            if label is not None and _called_by_student(frame):
                used.append(label)

    previous = sys.getprofile()
    mode = _ComplexRecorder(complex_seen) if by_hand else contextlib.nullcontext()
    sys.setprofile(profiler)
    error: Optional[Exception] = None
    try:
        with mode:
            result = call()
    except Exception as e:  # report a forbidden call first, then the failure
        result, error = None, e
    finally:  # also on SystemExit / KeyboardInterrupt
        tampered = sys.getprofile() is not profiler
        sys.setprofile(previous)
    if tampered:
        raise CheckFailed("your code changed the profiler (sys.setprofile) that checks the "
                          "functions this exercise forbids")
    if used:
        why = next((w for m, w in _WHY_FORBIDDEN.items() if used[0] == m or used[0].startswith(m + ".")), "")
        raise CheckFailed(f"this exercise asks you not to use {used[0]}{why}; write it with "
                          f"basic operations instead")
    if overloaded:
        raise CheckFailed(_OVERLOADING.format(where=overloaded[0]))
    if complex_seen:
        raise CheckFailed(_COMPLEX_STEP.format(where=complex_seen[0]))
    if error is not None:
        raise error
    return result


# --- The call into the student's function ------------------------------------------------------

def _snapshot(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)) and all(isinstance(v, (torch.Tensor, np.ndarray)) for v in value):
        return [_snapshot(v) for v in value]
    if isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value):
        return list(value)
    return None


def _unchanged(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor) or after.shape != before.shape:
            return False
        return bool(torch.equal(after.detach(), before)) or (
            before.is_floating_point() and bool(torch.equal(after.detach().isnan(), before.isnan()))
            and bool(torch.equal(after.detach().nan_to_num(0.0), before.nan_to_num(0.0))))
    if isinstance(before, np.ndarray):
        return isinstance(after, np.ndarray) and after.shape == before.shape and \
            bool(np.array_equal(after, before, equal_nan=before.dtype.kind in "fc"))
    if isinstance(before, list) and isinstance(after, (list, tuple)) and len(after) == len(before):
        return all(_unchanged(b, a) if isinstance(b, (torch.Tensor, np.ndarray))
                   else (b == a or (b != b and a != a))  # NaN equals NaN here
                   for b, a in zip(before, after))
    return False


def _student_call(fn: Callable, pure: bool, may_return_none: bool) -> Callable:
    """Wrap the student's function: mark exceptions it raises as the student's, report an input
    it modified in place (``pure``) and a missing ``return`` (unless ``may_return_none``)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        snapshots = []
        if pure:
            snapshots = [(f"argument {i + 1}", a, _snapshot(a)) for i, a in enumerate(args)]
            snapshots += [(f"argument {k!r}", a, _snapshot(a)) for k, a in kwargs.items()]
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            with contextlib.suppress(Exception):
                e._raised_by_student = True  # type: ignore[attr-defined]
            raise
        if pure:
            for what, value, before in snapshots:
                if before is not None and not _unchanged(before, value):
                    raise CheckFailed(f"{fn.__name__} modified its {what} in place; leave the "
                                      f"inputs unchanged and return a new value")
        if result is None and not may_return_none:
            raise CheckFailed(f"{fn.__name__} returned None -- did you forget to `return` "
                              f"the result?")
        return result

    call._student_function = fn  # type: ignore[attr-defined]
    return call


def is_student_object(value: Any) -> bool:
    """Whether a check argument is the student's callable: a plain function, or a grader proxy
    of one (a class with ``_student_proxy = True``)."""
    return isinstance(value, types.FunctionType) or getattr(type(value), "_student_proxy", False)


def _verdict(fn: Callable, forbidden: tuple[str, ...], pure: bool, may_return_none: bool,
             args: tuple, kwargs: dict, by_hand: bool = False) -> Optional[str]:
    """Run the check ``fn`` on the student's objects: the detail string of a pass, or
    :class:`NotAttempted` / :class:`CheckFailed` with one clear message."""
    name = fn.__name__
    if any(a is None for a in (*args, *kwargs.values())):
        raise NotAttempted(f"{name}: not attempted yet -- replace None by your answer, then run "
                           f"this cell again")
    args = tuple(_student_call(a, pure, may_return_none) if is_student_object(a) else a for a in args)
    kwargs = {k: _student_call(v, pure, may_return_none) if is_student_object(v) else v
              for k, v in kwargs.items()}
    try:
        return run_forbidding(forbidden, lambda: fn(*args, **kwargs), by_hand=by_hand)
    except NotImplementedError:
        raise NotAttempted(f"{name}: not attempted yet -- your function still raises "
                           f"NotImplementedError; replace the stub with your implementation") from None
    except NotAttempted:
        raise
    except CheckFailed as e:
        raise CheckFailed(f"{name} failed: {e}") from None
    except Exception as e:
        if getattr(e, "_raised_by_student", False):  # the student's code crashed: say so
            raise CheckFailed(f"{name}: your code raised {type(e).__name__}: {e}") from e
        raise CheckFailed(
            f"{name}: the check could not use your function's result "
            f"({type(e).__name__}: {e}); check the type and shape of what you return "
            f"(if they look right, the check itself may have a bug -- please report it)") from None


_PASSES = threading.local()  # this thread's list of pass messages, inside collect_passes()


@contextlib.contextmanager
def collect_passes():
    """Within the block, every check that passes in this thread appends its message (the line it
    prints) to the list this yields: the grader and :func:`fundamentallm.course.run_exercise` read
    the message here, not from the printed output."""
    previous = getattr(_PASSES, "found", None)
    _PASSES.found = found = []
    try:
        yield found
    finally:
        _PASSES.found = previous


def exercise_check(fn: Optional[Callable[..., Optional[str]]] = None, *, forbidden: tuple[str, ...] = (),
                   pure: bool = True, may_return_none: bool = False, self_check: bool = False,
                   by_hand: bool = False) -> Any:
    """Turn ``fn`` (which raises :class:`CheckFailed` or returns an optional detail string) into
    a student-facing check: stubs and crashes become clear messages; success prints one line.

    Called by a notebook, the check prints one line for a pass or a stub and raises
    :class:`CheckFailed` for a wrong answer (see the module docstring).

    Usable bare (``@exercise_check``) or with options
    (``@exercise_check(forbidden=("torch.softmax",), pure=True)``):

    * ``forbidden``: dotted names the exercise asks the student not to call. ``torch.X`` also
      forbids ``torch.Tensor.X``, ``torch.nn.functional.X``, ``torch.special.X`` ... of the same
      name; a module name (``"torch"``) forbids every function in it; a ``fundamentallm.*``
      function forbids wrapping the package's reference. Calls made through a library count
      (``nn.CrossEntropyLoss`` calls ``F.cross_entropy``); calls the check itself makes do not.
    * ``pure`` (default True): every plain function passed to the check is the student's; an
      input tensor, array or list it modifies in place fails the check. Pass ``pure=False`` for
      an exercise whose function is meant to work in place.
    * ``may_return_none`` (default False): a ``None`` result fails the check ("did you forget to
      return?") unless ``None`` is a valid answer of the exercise.
    * ``self_check`` (default False): the item is a self-check (a prediction with two or three
      choices, guessable by trial and error): its message may state the answer, and it counts no
      marks (:data:`SELF_CHECK`). A graded check's message names what to rethink, never the answer.
    * ``by_hand`` (default False): the statement asks for a derivation by hand (a gradient, a
      Jacobian). Besides the ``forbidden`` calls, the student's code may not compute with complex
      numbers: complex-step differentiation (evaluate f(x + ih), read f'(x) off the imaginary
      part) is exact to rounding, so no tolerance refuses it, and a difference quotient in
      extended precision comes close. Any complex tensor a torch function takes or returns for the
      student's code, any complex or long-double array or number (or ``Decimal``, ``Fraction``)
      among the arguments, locals or return value of the student's functions, ``cmath``,
      ``decimal`` and ``fractions`` fail the check (:data:`BY_HAND`).
    """
    if isinstance(forbidden, str):
        raise TypeError(f"forbidden must be a tuple of dotted names, got the string {forbidden!r}")
    if fn is None:
        return functools.partial(exercise_check, forbidden=tuple(forbidden), pure=pure,
                                 may_return_none=may_return_none, self_check=self_check, by_hand=by_hand)
    forbidden = tuple(forbidden)
    for name in forbidden:
        if not _unimported_package(name):
            _resolve(name)  # fail at import time on a typo

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Optional[bool]:
        try:
            detail = _verdict(fn, forbidden, pure, may_return_none, args, kwargs, by_hand)
        except NotAttempted as e:
            if not in_ipython():
                raise
            print(f"\u2026 {e}")
            return None
        message = f"\u2713 {fn.__name__} passed" + (f": {detail}" if detail else "")
        found = getattr(_PASSES, "found", None)
        if found is not None:
            found.append(message)
        print(message)
        return None if in_ipython() else True

    wrapper.forbidden = forbidden  # type: ignore[attr-defined]
    wrapper.self_check = self_check  # type: ignore[attr-defined]
    wrapper.by_hand = by_hand  # type: ignore[attr-defined]
    CHECKS[fn.__name__] = wrapper
    FORBIDDEN[fn.__name__] = forbidden
    if self_check:
        SELF_CHECK.add(fn.__name__)
    if by_hand:
        BY_HAND.add(fn.__name__)
    else:
        BY_HAND.discard(fn.__name__)
    return wrapper


def _as_tensor(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return torch.as_tensor(x)


def assert_same(actual: Any, expected: Any, what: str = "output", rtol: Optional[float] = None,
                atol: Optional[float] = None) -> None:
    """Like ``torch.testing.assert_close`` (dtype-aware default tolerances; NumPy arrays and
    numbers accepted), but the message names ``what``, the shapes, and the first mismatch."""
    if actual is None:
        raise CheckFailed(f"{what}: got None -- did you forget to return a value?")
    a, e = _as_tensor(actual), _as_tensor(expected)
    if a.shape != e.shape:
        raise CheckFailed(f"{what}: expected shape {tuple(e.shape)}, got {tuple(a.shape)}")
    if a.dtype != e.dtype:
        if not (a.is_floating_point() or a.is_complex()) and e.is_floating_point():
            a = a.to(e.dtype)
        else:
            common = torch.promote_types(a.dtype, e.dtype)
            a, e = a.to(common), e.to(common)
    try:
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=False)
    except AssertionError:
        if a.is_floating_point():
            tol_a = atol if atol is not None else (1e-7 if a.dtype == torch.float64 else 1e-5)
            tol_r = rtol if rtol is not None else (1e-7 if a.dtype == torch.float64 else 1.3e-6)
            bad = ~torch.isclose(a, e, rtol=tol_r, atol=tol_a)
        else:
            bad = a != e
        idx = tuple(int(i) for i in bad.nonzero()[0]) if bad.any() else ()
        diff = (a.double() - e.double()).abs()
        ev, av = e[idx].item(), a[idx].item()
        digits = next((d for d in (6, 9, 12, 17) if f"{ev:.{d}g}" != f"{av:.{d}g}"), 17)
        raise CheckFailed(
            f"{what}: {int(bad.sum())} of {a.numel()} elements differ; first mismatch at index "
            f"{idx}: expected {ev:.{digits}g}, got {av:.{digits}g} "
            f"(max abs difference {diff.max().item():.3g})"
        ) from None


def finite_number(value: Any, what: str) -> float:
    """``value`` as a float: a real number (a Python number or a one-element tensor/array), and
    finite -- NaN and infinity raise :class:`CheckFailed`, so no later comparison can be fooled by
    them (``abs(nan - x) > tol`` is False). Use it for every number an answer gives."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise CheckFailed(f"{what} should be a number, got {value!r}"[:200])
    try:
        number = float(value.item() if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1
                       else value)
    except (TypeError, ValueError, RuntimeError, AttributeError):
        raise CheckFailed(f"{what} should be a number, got {type(value).__name__} {str(value)[:60]}") from None
    if not math.isfinite(number):
        raise CheckFailed(f"{what} is {number}: the answer is a finite number")
    return number


def is_close_number(got: float, expected: float, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Whether ``|got - expected| <= atol + rtol * |expected|``: False for NaN or infinity (the
    one comparison of numbers the checks share)."""
    try:
        got, expected = float(got), float(expected)
    except (TypeError, ValueError):
        return False
    return math.isfinite(got) and abs(got - expected) <= atol + rtol * abs(expected)


def assert_close_number(got: Any, expected: float, what: str, rtol: float = 0.0, atol: float = 0.0,
                        hint: Optional[str] = None) -> float:
    """Raise :class:`CheckFailed` unless ``got`` is a finite number within ``atol + rtol *
    |expected|`` of ``expected``; the message is ``hint`` when given (a graded check names the
    mechanism to rethink, never the answer), else it states both numbers. Returns ``got`` as a
    float."""
    number = finite_number(got, what)
    if not is_close_number(number, expected, rtol, atol):
        raise CheckFailed(hint if hint is not None else f"{what}: expected {expected:.6g}, got {number:.6g}")
    return number


def check_shape(x: Any, expected: tuple, what: str = "output") -> None:
    """Raise :class:`CheckFailed` unless ``x`` has shape ``expected``."""
    shape = tuple(getattr(x, "shape", ()))
    if shape != tuple(expected):
        raise CheckFailed(f"{what}: expected shape {tuple(expected)}, got {shape}")


def _expect_value_error(call: Callable[[], Any], what: str, must_name: str) -> None:
    """Raise CheckFailed unless ``call()`` raises a ValueError whose message names ``must_name``."""
    try:
        call()
    except ValueError as e:
        if must_name not in str(e):
            raise CheckFailed(f"{what}: the ValueError should name {must_name!r}; got: {e}") from None
    except NotImplementedError:
        raise
    except Exception as e:
        raise CheckFailed(f"{what} should raise ValueError, got {type(e).__name__}: {e}") from None
    else:
        raise CheckFailed(f"{what} should raise ValueError instead of returning")


# torch's kernels under their other names (torch._softmax, torch.ops.aten.*), refused beside the
# public names by the checks of chapters 2 and 3 (list them before the public names: a later
# name's aliases take its label)
SOFTMAX_KERNELS = tuple(f"torch.{n}" for n in ("_softmax", "_log_softmax", "_safe_softmax") if hasattr(torch, n)) \
    + tuple(f"torch.ops.aten.{n}" for n in ("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax",
                                            "special_softmax") if hasattr(torch.ops.aten, n))
ATEN_ATTENTION = tuple(f"torch.ops.aten.{n}" for n in (
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_attention_math_for_mps", "_native_multi_head_attention")
    if hasattr(torch.ops.aten, n))
