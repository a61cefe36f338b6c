"""The core of the exercise checks, and all of them that the grader's sandboxed worker sees: the
registry (:data:`CHECKS`, :data:`FORBIDDEN`, :data:`SELF_CHECK`, :data:`BY_HAND`),
:class:`CheckFailed`, where a frame's code comes from (the checks, a library, the student) and the
record of forbidden calls (:func:`run_forbidding`), which the worker runs too.

The rest of the checks' machinery lives one idea a module beside it, and is importable from here
as before: the seeded inputs (:mod:`.seeds`: ``rng``, ``grading_seed``), the call into the
student's function (:mod:`.runner`: ``exercise_check``, ``strict`` ...), the comparisons
(:mod:`.compare`: ``assert_same`` ...) and the kernels no public name leads to (:mod:`.kernels`).
They are not mounted in the worker's sandbox: this module imports them on first use (:func:`__getattr__`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import os
import site
import sys
import sysconfig
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


def _called_by_student(frame: Optional[types.FrameType], label: str = "") -> bool:
    """Whether the nearest non-library frame at or above ``frame`` is the student's code: a
    forbidden function called by a library the student called counts, one the check calls does not.
    A whole package (``label`` "sympy"), which torch itself may use, counts only called directly."""
    if label and "." not in label:
        return frame is not None and _frame_kind(frame.f_code) == _STUDENT
    while frame is not None:
        kind = _frame_kind(frame.f_code)
        if kind != _LIBRARY:
            return kind == _STUDENT
        frame = frame.f_back
    return False


# --- Forbidden calls ---------------------------------------------------------------------------

# A forbidden ``torch.X`` also forbids torch's other names for X, each refused under its own name:
# X in these namespaces, the operator ``torch.ops.aten.X`` with its overloads (``.default``, ``.int``)
# and ``special_X`` ... there, the kernel ``_X`` and the in-place ``X_`` (:func:`_aliases`).
_ALIAS_NAMESPACES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft",
                     "torch.ops.aten", "torch._C._VariableFunctions", "torch._C._nn", "torch._C._special",
                     "torch._C._linalg", "torch._C._fft")
# What a by-hand derivation may not call, besides its exercise's names: autograd in every form (reverse
# and forward mode, torch.func's transforms, the engine they run), a finite-difference helper,
# computer algebra, and the modules of complex and exact arithmetic.
NOT_BY_HAND = tuple(f"torch.func.{n}" for n in ("grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd",
                                                "hessian", "linearize")) + (
    "torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward", "torch.autograd.functional",
    "torch.autograd.forward_ad", "torch.autograd.variable.Variable._execution_engine.run_backward",
    "fundamentallm.gradcheck", "sympy", "mpmath", "cmath", "decimal", "fractions")


@functools.cache
def _namespace(dotted: str) -> Any:
    try:
        return _resolve(dotted)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)
def _aliases(dotted: str) -> tuple[tuple[str, Any], ...]:
    """(name, object) of torch's other names for the function ``dotted`` of a namespace of
    :data:`_ALIAS_NAMESPACES` (``torch.softmax``: ``torch.Tensor.softmax``, ``torch.ops.aten.softmax``,
    ``torch._softmax`` ...), those that exist."""
    space, short = dotted.rsplit(".", 1)
    names = [(ns, short) for ns in _ALIAS_NAMESPACES] + [("torch.ops.aten", f"{p}_{short}") for p in ("special", "linalg", "fft")]
    names += [(ns, f"_{short}") for ns in ("torch", "torch.ops.aten")] + [(ns, f"{short}_") for ns in ("torch", "torch.Tensor", "torch.ops.aten")]
    found = ((f"{ns}.{name}", getattr(_namespace(ns), name, None)) for ns, name in names)
    return tuple((name, obj) for name, obj in found if space in _ALIAS_NAMESPACES and name != dotted
                 and obj is not None and not isinstance(obj, (types.ModuleType, type)))


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
        objects = {}
        for dotted in names:  # the names first, then their aliases: a name keeps its own label
            if _unimported_package(dotted):
                self.modules.setdefault(dotted, dotted)
            else:
                objects[dotted] = _resolve(dotted)
                self._add(dotted, objects[dotted])
        for dotted, obj in objects.items():
            if isinstance(obj, types.ModuleType) and "." in dotted:  # a module's functions, under their own names
                for name, member in sorted(vars(obj).items()):
                    if not name.startswith("_") and isinstance(member, (types.FunctionType, types.BuiltinFunctionType)) \
                            and (getattr(member, "__module__", None) or "").startswith(dotted):  # not an import
                        self._add(f"{dotted}.{name}", member)
            elif dotted.startswith("torch."):
                for alias, member in _aliases(dotted):
                    self._add(alias, member, dotted)

    def _add(self, name: str, obj: Any, origin: str = "") -> None:
        """Forbid ``obj``, labelled ``name`` (with ``origin``, the forbidden name it is an alias of),
        unless an earlier name already forbids it."""
        label = f"{name} ({origin} under another name)" if origin else name
        if isinstance(obj, types.ModuleType):
            self.modules.setdefault(obj.__name__, label)
            return
        if isinstance(obj, torch._ops.OpOverloadPacket):  # ``torch.ops.aten.gelu``, ``.default`` ...: a C builtin, ``_op``
            for overload in obj.overloads():
                self._add(f"{name}.{overload}", getattr(obj, overload), origin)
        if isinstance(obj, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
            self.builtins.setdefault(id(obj._op), label)
            self._alive.append(obj._op)
            return
        owner = getattr(obj, "__self__", None)
        if isinstance(obj, types.BuiltinMethodType) and type(owner).__module__ == "torch._C" \
                and not isinstance(owner, type):  # a method of one of torch's objects (autograd's engine)
            self.methods.setdefault((obj.__name__, type(owner)), label)
            return
        if type(obj).__name__ == "_ArrayFunctionDispatcher" and not isinstance(
                getattr(obj, "__wrapped__", None), types.FunctionType):
            # a NumPy function written in C (np.unravel_index): the profiler sees no C call, only
            # the Python dispatcher NumPy runs first, a function of the same name in multiarray.py
            multiarray = sys.modules.get("numpy._core.multiarray") or sys.modules.get("numpy.core.multiarray")
            if multiarray is not None and getattr(multiarray, "__file__", None):
                self.dispatchers.setdefault((multiarray.__file__, obj.__name__), label)
        fn = inspect.unwrap(obj) if callable(obj) else obj
        for f in {obj, fn}:
            code = getattr(f, "__code__", None)
            if isinstance(code, types.CodeType):
                self.codes.setdefault(code, label)
            elif isinstance(f, (types.MethodDescriptorType, types.WrapperDescriptorType)):
                self.methods.setdefault((f.__name__, f.__objclass__), label)
            elif isinstance(f, types.BuiltinFunctionType) or callable(f):
                self.builtins.setdefault(id(f), label)
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
        names = tuple(dict.fromkeys((*names, *(n for n in NOT_BY_HAND if _unimported_package(n) or _namespace(n)))))
    forbidden = _Forbidden(tuple(names))
    used: list[str] = []
    complex_seen: list[str] = []
    overloaded: list[str] = []

    def profiler(frame, event, arg):
        if event == "call":
            label = forbidden.match_python(frame)
            if label is not None and _called_by_student(frame.f_back, label):
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
            if label is not None and _called_by_student(frame, label):
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


# --- The rest of the machinery, imported on first use (not mounted in the worker's sandbox) -----

_ELSEWHERE = {
    "seeds": ("rng", "grading_seed", "generator_as_told", "_mixed_seed"),
    "runner": ("exercise_check", "collect_passes", "is_student_object", "_snapshot", "_unchanged",
               "_student_call", "_verdict", "strict", "in_ipython"),
    "compare": ("assert_same", "finite_number", "is_close_number", "assert_close_number", "check_shape",
                "_as_tensor", "_expect_value_error"),
    "kernels": ("SOFTMAX_KERNELS", "ATEN_ATTENTION"),
}
_MODULE_OF = {name: module for module, names in _ELSEWHERE.items() for name in names}


def __getattr__(name: str) -> Any:
    """``from fundamentallm.checks.core import rng`` (and the other names of :data:`_ELSEWHERE`)
    as before the split: the name, from the module that holds it."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)
