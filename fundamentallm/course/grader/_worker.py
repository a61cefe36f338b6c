"""The grading worker: ``python -m fundamentallm.course.grader._worker`` (started by the grader, inside
the sandbox).

It holds one student's code and nothing else: no check, no expected value, no score, no file of
the grader. In the sandbox only ``fundamentallm/checks/core.py`` of the checks is visible (the
chapters' checks, their references and answer keys are not), and before any student code runs
the worker drops every privilege and installs the seccomp filter (:func:`sandbox.confine`). It reads requests from its stdin and answers on its stdout, in the wire format
(:mod:`fundamentallm.course.grader.wire`), one request at a time:

* ``load``: run the student's code of one exercise (after the chapter's imports) in the
  chapter's namespace; answer the requested names as data, or as handles for functions, classes
  and other objects;
* ``call``: call a handle with data arguments (or handles); answer the result, the arguments the
  call changed in place, or the exception's type and message (``NotImplementedError`` for a
  stub). Calls to the exercise's forbidden functions are recorded by the profiler of
  :func:`fundamentallm.checks.core.run_forbidding` and, at PyTorch's dispatcher, by a
  ``TorchFunctionMode`` that sees every torch function the call reaches, however it was named
  (``operator.methodcaller``, a string evaluated, ``torch.overrides`` enumerated, the package's own
  code); a mode the student's code removed or replaced makes the exercise fail as tampering;
* ``getattr``: an attribute of a handle.

The worker is untrusted: the grader treats everything it answers as the student's answer and
judges it in its own process. Before any student code runs, the protocol moves to private file
descriptors and stdin/stdout/stderr point to /dev/null, so printing cannot corrupt the stream.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

MAX_HANDLES = 10_000


def main() -> None:
    proto_in, proto_out = os.dup(0), os.dup(1)
    from fundamentallm.course import (  # torch is imported by the first tensor (or the student)
        sandbox,
        wire,
    )

    if os.environ.get(sandbox.LIMITS_ENV):
        sandbox.set_limits(os.environ.pop(sandbox.LIMITS_ENV))
    sandboxed = os.environ.pop(sandbox.SANDBOX_ENV, None) == "1"
    try:  # outside bubblewrap a root grader's worker stays root (it must read the grader's Python)
        missing = sandbox.confine(drop_root=sandboxed)
    except OSError as e:
        wire.send(proto_out, {"ready": False, "error": f"the worker could not drop its privileges ({e})"}, [])
        os._exit(1)

    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    handles: dict[int, Any] = {}
    ids: dict[int, int] = {}
    namespaces: dict[str, dict] = {}
    graphs: dict[int, tuple[list, list]] = {}  # call id -> (inputs, outputs) that need gradients

    def to_handle(obj: Any) -> int:
        hid = ids.get(id(obj))
        if hid is None or handles.get(hid) is not obj:
            if len(handles) >= MAX_HANDLES:
                raise wire.WireError("too many objects")
            hid = len(handles) + 1
            handles[hid] = obj
            ids[id(obj)] = hid
        return hid

    def from_handle(hid: int) -> Any:
        if hid not in handles:
            raise wire.WireError(f"unknown handle {hid}")
        return handles[hid]

    def error(e: BaseException) -> dict:
        return {"error": {"type": type(e).__name__, "message": str(e)[:2000]}}

    def answer(value: Any, extra: dict) -> tuple[dict, list[bytes]]:
        obj, buffers = wire.encode(value, to_handle)
        return {**extra, "ok": True, "result": obj}, buffers

    def handle_request(header: dict, buffers: list[bytes]) -> tuple[dict, list[bytes]]:
        op = header.get("op")
        torch = sys.modules.get("torch")
        if op == "load":
            ns = namespaces.setdefault(str(header["chapter"]), {"__name__": "__main__"})
            try:
                if header.get("prelude"):
                    exec(compile(header["prelude"], "<chapter imports>", "exec"), ns)  # noqa: S102
                exec(compile(header["code"], f"<answer {header['label']}>", "exec"), ns)  # noqa: S102
            except BaseException as e:  # SystemExit and KeyboardInterrupt too: the student's
                return error(e), []
            names = {}
            for name in header.get("names", []):
                if name in ns:
                    value = ns[name]
                    names[name] = value if not callable(value) else wire.Handle(to_handle(value))
                else:
                    names[name] = wire.Handle(0)  # 0: not defined
            return answer(names, {})
        if op == "call":
            fn = from_handle(int(header["target"]))
            args = wire.decode(header["args"], buffers, from_handle)
            kwargs = wire.decode(header["kwargs"], buffers, from_handle)
            torch = sys.modules.get("torch")  # the call may have imported it
            before = {i: a.detach().clone() for i, a in enumerate(args)
                      if torch is not None and isinstance(a, torch.Tensor)} if header.get("pure") else {}
            forbidden = tuple(header.get("forbidden", ()))
            by_hand = header.get("by_hand") is True  # complex arithmetic refused too
            budget = header.get("count_calls")  # the torch operations the check still allows
            budget = budget if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0 else None
            calls = None
            try:
                if forbidden or by_hand or budget is not None:
                    from fundamentallm.checks.core import CheckFailed, run_forbidding

                    recorder = _recorder(forbidden, budget)
                    try:  # a partial, not a lambda: the student's function is called from the checks' own
                        # frame, as in a reader's kernel (a by-hand check reads the student's top frame)
                        with recorder:
                            result = run_forbidding(forbidden, functools.partial(fn, *args, **kwargs), by_hand=by_hand)
                    except CheckFailed as e:  # the profiler saw a forbidden call
                        return {"forbidden": str(e)}, []
                    except _OverBudget:
                        pass
                    finally:
                        seen = recorder.verdict()
                    if seen:
                        return {"forbidden": seen}, []
                    calls = recorder.calls
                    if budget is not None and calls > budget:  # stopped: the check refuses it
                        return {"too_many_calls": calls}, []
                else:
                    result = fn(*args, **kwargs)
            except BaseException as e:
                return error(e), []
            if header.get("call") is not None:  # the grader will ask for gradients
                graphs[int(header["call"])] = (wire.grad_tensors([args, kwargs]), wire.grad_tensors(result))
                for old in sorted(graphs)[:-64]:
                    del graphs[old]
            changed = {str(i): args[i] for i, b in before.items()
                       if isinstance(args[i], torch.Tensor) and (args[i].shape != b.shape or not torch.equal(
                           args[i].detach().nan_to_num(1e30), b.nan_to_num(1e30)))}
            if torch is not None:  # a generator the check passed: its state after the call
                changed.update({str(i): a for i, a in enumerate(args) if isinstance(a, torch.Generator)})
            return answer({"value": result, "changed": changed, "torch_calls": calls}, {})
        if op == "backward":  # gradients of one output of an earlier call, for the check's autograd
            inputs, outputs = graphs[int(header["call"])]
            grad = wire.decode(header["grad"], buffers, from_handle)
            try:
                grads = torch.autograd.grad(outputs[int(header["index"])], inputs, grad,
                                            allow_unused=True, retain_graph=True)
            except BaseException as e:
                return error(e), []
            return answer(list(grads), {})
        if op == "getattr":
            obj = from_handle(int(header["target"]))
            try:
                value = getattr(obj, str(header["name"]))
            except BaseException as e:
                return error(e), []
            return answer(value if not callable(value) else wire.Handle(to_handle(value)), {})
        return {"error": {"type": "ProtocolError", "message": f"unknown op {op!r}"}}, []

    wire.send(proto_out, {"ready": True, "missing": missing}, [])
    while True:
        try:
            header, buffers = wire.recv(proto_in)
        except wire.Closed:
            break
        try:
            reply, out_buffers = handle_request(header, buffers)
        except BaseException as e:  # an unsendable result, a bad handle ...
            reply, out_buffers = error(e), []
        try:
            wire.send(proto_out, reply, out_buffers)
        except wire.WireError as e:
            wire.send(proto_out, error(e), [])
    sys.stdout.flush()
    os._exit(0)  # do not wait for threads the student's code may have left running


class _Recorder:
    """A ``TorchFunctionMode`` (made lazily: torch is imported only when needed) that records every
    call of a forbidden torch function while the student's function runs, by the function object
    PyTorch dispatches, not by the name the student wrote; and whether the mode was still in
    place at the end (a student who pops or disables it is caught as tampering)."""

    def __init__(self, forbidden: tuple, budget=None) -> None:
        self.forbidden, self.used, self.mode, self.depth, self.tampered = forbidden, [], None, 0, False
        self.budget, self.counted = budget, [0]  # torch operations made; stopped past the budget

    def __enter__(self):
        torch = sys.modules.get("torch")
        if torch is None:
            import torch
        from torch.overrides import TorchFunctionMode

        from fundamentallm.checks.core import _Forbidden
        from fundamentallm.course.grader.review import _forbidden_key, _words

        match = _Forbidden(self.forbidden)
        # by name too, its variants: ``_softmax``, ``log_softmax``, ``_log_softmax`` of ``softmax``
        keys = [(d, _forbidden_key(d)) for d in self.forbidden if d.startswith("torch")]

        def _names_forbidden(name: str, key: list) -> bool:
            words = _words(name)
            return bool(key) and (words == key or words == ["log", *key])
        used, counted, budget = self.used, self.counted, self.budget

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                counted[0] += 1
                if budget is not None and counted[0] > budget:  # not an Exception: no except clause stops it
                    raise _OverBudget
                label = match.match_function(func)
                name = getattr(func, "__name__", "") or ""
                if label is None:
                    label = next((d for d, key in keys if _names_forbidden(name, key)), None)
                if label is not None:
                    used.append(label)
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.depth = torch._C._len_torch_function_stack()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        torch = sys.modules["torch"]
        stack = torch._C._len_torch_function_stack()
        top = torch._C._get_function_stack_at(stack - 1) if stack > self.depth else None
        enabled = torch._C._is_torch_function_enabled()
        if top is not self.mode or stack != self.depth + 1 or not enabled:
            self.tampered = True
            while torch._C._len_torch_function_stack() > self.depth:
                torch._C._pop_torch_function_stack()
        else:
            self.mode.__exit__(*exc)

    @property
    def calls(self) -> int:
        """The torch operations the student's function made (counted as the check counts them)."""
        return self.counted[0]

    def verdict(self) -> str:
        if self.tampered:
            return ("your code removed or disabled the record of the torch functions it calls "
                    "(torch function mode); the exercise cannot be graded")
        if self.used:
            return f"this exercise asks you not to use {self.used[0]}; write it with basic operations instead"
        return ""


class _OverBudget(BaseException):
    """Stops a student's function that has made more torch operations than the check allows."""


def _recorder(forbidden: tuple, budget=None) -> _Recorder:
    return _Recorder(forbidden, budget)


if __name__ == "__main__":
    main()
