"""The grader's side of the worker: starting the sandboxed worker, talking to it in the wire
format, and :class:`StudentProxy`, the stand-in for a student's object that a check calls.

Every wait on the worker is charged to the current exercise's time budget. Calling a proxy sends
the arguments as data and returns the result as data (the student's in-place changes of tensor
arguments and generators are copied back; an output computed from inputs that need gradients is
differentiable, its backward asking the worker). An exception of the student's code comes back
as its type name and message and is raised again here, marked as the student's.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from . import sandbox, wire

STARTUP_S = 120.0  # a fresh worker imports torch, on a busy machine
# the most data one answer of the worker may carry: the grader's memory does not grow with an
# answer's size (a larger answer fails its exercise: "message too large")
MAX_ANSWER_BYTES = 64 * 2 ** 20
_NOTED: set = set()


class GradingAbort(BaseException):
    """The worker timed out, died or broke the protocol: the exercise ends here. A
    ``BaseException``, so that no check's ``except Exception`` takes it for the student's error."""


class NotGradable(GradingAbort):
    """The check passes something other than data to the student's function: a bug of the
    check (see the exercise contract), not of the answer. The exercise needs review."""


class StudentError(Exception):
    """An exception of the student's code whose type is not a plain builtin error."""


_BUILTIN_ERRORS = {name: getattr(builtins, name) for name in (
    "ValueError", "TypeError", "IndexError", "KeyError", "RuntimeError", "ZeroDivisionError",
    "NotImplementedError", "ArithmeticError", "OverflowError", "AttributeError", "LookupError",
    "FloatingPointError", "NameError", "UnboundLocalError", "RecursionError")}


class Worker:
    """One sandboxed worker process and the channel to it. Every wait on it is charged to the
    current exercise's time budget."""

    def __init__(self, limits: sandbox.Limits, hidden: Sequence[Path]) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="fundamentallm-worker-")
        bwrap = sandbox.bwrap_path()
        if bwrap is not None:
            cmd, env = sandbox.bwrap_command(bwrap, limits, hidden), {"PATH": "/usr/bin:/bin"}
        else:
            cmd, env = sandbox.plain_command(Path(self.tmp.name), limits)
        self.stderr = open(Path(self.tmp.name) / "stderr", "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     cwd=self.tmp.name, env=env, start_new_session=True)
        self.budget = STARTUP_S
        self.timeout_message = f"the grading worker did not start within {STARTUP_S:g} s"
        header, _ = self._recv()
        if not header.get("ready"):
            raise GradingAbort(str(header.get("error") or "the grading worker did not start")[:300])
        for note in header.get("missing") or ():  # protection the worker could not set up: said once
            if isinstance(note, str) and note not in _NOTED:
                _NOTED.add(note)
                print(f"grading worker: {note[:200]}", file=sys.stderr)

    def _recv(self) -> tuple[dict, list[bytes]]:
        started = time.monotonic()
        try:
            return wire.recv(self.proc.stdout.fileno(), started + max(self.budget, 0.0), MAX_ANSWER_BYTES)
        except wire.Timeout:
            raise GradingAbort(self.timeout_message) from None
        except wire.Closed:
            self.proc.wait()
            raise GradingAbort(f"the grading process ended (exit code {self.proc.returncode}){self._tail()}") from None
        except wire.WireError as e:
            raise GradingAbort(f"the worker's answer broke the grader's format ({e})") from None
        finally:
            self.budget -= time.monotonic() - started

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - 300))
            tail = self.stderr.read().decode("utf-8", "replace").strip().splitlines()
            if tail:
                return f": {tail[-1][:200]}"
        return ""

    def request(self, header: dict, buffers: Sequence[bytes] = ()) -> tuple[dict, list[bytes]]:
        try:
            wire.send(self.proc.stdin.fileno(), header, list(buffers))
        except (BrokenPipeError, OSError):
            self.proc.wait()
            raise GradingAbort(f"the grading process ended (exit code {self.proc.returncode})") from None
        reply, out = self._recv()
        if not isinstance(reply, dict):
            raise GradingAbort("the worker's answer broke the grader's format")
        return reply, out

    def close(self) -> None:
        """Kill the worker and everything it started (the sandbox's PID namespace dies with it)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.stderr):
            with contextlib.suppress(OSError):
                f.close()
        self.tmp.cleanup()


class StudentProxy:
    """The grader's stand-in for one of the student's objects in the worker: calling it (or a
    method of it) sends data there and returns data. It has no other behaviour: no comparison,
    no conversion, no iteration -- a check that needs those gets a ``TypeError``."""

    _student_proxy = True

    def __init__(self, session: Session, hid: int, name: str) -> None:
        self._session, self._hid = session, hid
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call(self, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_session") or name == "_hid":
            raise AttributeError(name)
        return self._session.getattr(self, name)

    def __repr__(self) -> str:
        return f"<the student's {self.__name__}>"

    def __bool__(self) -> bool:  # an object is not an answer: no check may take it for True
        raise TypeError(f"{self.__name__} is an object of the student's, not data (a number, a "
                        f"string, a tensor ...)")


class Session:
    """One exercise of one student: its worker, its forbidden names and its proxies."""

    def __init__(self, worker: Worker, forbidden: Sequence[str], pure: bool, by_hand: bool = False) -> None:
        self.worker, self.forbidden, self.pure, self.by_hand = worker, list(forbidden), pure, bool(by_hand)
        self.forbidden_seen: Optional[str] = None
        self.calls = 0

    def _encode(self, value: Any) -> tuple[Any, list[bytes]]:
        def to_handle(obj: Any) -> int:
            if isinstance(obj, StudentProxy) and obj._session.worker is self.worker:
                return obj._hid
            raise wire.WireError(f"the check passes a {type(obj).__name__} to the student's function; "
                                 f"the grader forwards only data (a bug of the check, not of the answer)")
        return wire.encode(value, to_handle)

    def _decode(self, obj: Any, buffers: list[bytes], name: str) -> Any:
        try:
            return wire.decode(obj, buffers, lambda hid: StudentProxy(self, hid, name))
        except wire.WireError as e:
            raise GradingAbort(f"the answer could not be read ({e})") from None

    def _reply(self, reply: dict, buffers: list[bytes], name: str) -> Any:
        if "forbidden" in reply:
            self.forbidden_seen = str(reply["forbidden"])[:500]
            from ...checks.core import CheckFailed

            raise CheckFailed(self.forbidden_seen)
        if "error" in reply:
            err = reply["error"] if isinstance(reply["error"], dict) else {}
            kind, message = str(err.get("type", "Error"))[:100], str(err.get("message", ""))[:2000]
            cls = _BUILTIN_ERRORS.get(kind)
            exc = cls(message) if cls is not None else StudentError(f"{kind}: {message}")
            exc._raised_by_student = True  # type: ignore[attr-defined]
            raise exc
        if reply.get("ok") is not True:
            raise GradingAbort("the worker's answer broke the grader's format")
        return self._decode(reply.get("result"), buffers, name)

    def call(self, proxy: StudentProxy, args: tuple, kwargs: dict) -> Any:
        try:
            a, abuf = self._encode(list(args))
            k, kbuf = self._encode(dict(kwargs))
        except wire.WireError as e:
            raise NotGradable(str(e)) from None
        shift = len(abuf)
        k = _shift_buffers(k, shift)
        self.calls += 1
        grad_inputs = wire.grad_tensors([list(args), dict(kwargs)])
        from ...checks.calls import call_budget, count_remote_calls

        budget = call_budget()  # a check counting the torch operations: the worker counts them there
        header = {"op": "call", "target": proxy._hid, "args": a, "kwargs": k, "forbidden": self.forbidden,
                  "by_hand": self.by_hand, "pure": self.pure, "call": self.calls if grad_inputs else None,
                  "count_calls": budget}
        reply, buffers = self.worker.request(header, abuf + kbuf)
        if budget is not None and "too_many_calls" in reply:
            count_remote_calls(_count(reply["too_many_calls"]))  # raises TooManyCalls, as in-process
        out = self._reply(reply, buffers, f"result of {proxy.__name__}")
        if not isinstance(out, dict) or "value" not in out:
            raise GradingAbort("the worker's answer broke the grader's format")
        if budget is not None:
            count_remote_calls(_count(out.get("torch_calls")))
        changed = out.get("changed")
        if isinstance(changed, dict):
            _apply_changes(args, changed)
        if not grad_inputs:
            return out["value"]
        # tensors computed from inputs that need gradients: autograd reaches through to the worker
        remote, index = _remote_grad(), iter(range(1 << 30))
        return wire.map_tensors(out["value"], lambda t: remote.apply(self, self.calls, next(index), t.detach(),
                                                                      *grad_inputs) if t.requires_grad else t)

    def backward(self, call: int, index: int, grad: Any, inputs: Sequence[Any]) -> tuple:
        """The gradients, with respect to ``inputs``, of output ``index`` of call ``call``, for
        the upstream gradient ``grad`` (computed in the worker, where the student's graph is)."""
        obj, buffers = wire.encode(grad.detach())
        reply, out = self.worker.request({"op": "backward", "call": call, "index": index, "grad": obj}, buffers)
        grads = self._reply(reply, out, "gradient")
        if not isinstance(grads, list) or len(grads) != len(inputs):
            raise GradingAbort("the worker's answer broke the grader's format")
        for g, x in zip(grads, inputs):
            if g is not None and (getattr(g, "shape", None) != x.shape):
                raise GradingAbort("a gradient of the answer does not have its input's shape")
        return tuple(None if g is None else g.to(x.dtype) for g, x in zip(grads, inputs))

    def getattr(self, proxy: StudentProxy, name: str) -> Any:
        reply, buffers = self.worker.request({"op": "getattr", "target": proxy._hid, "name": name})
        return self._reply(reply, buffers, f"{proxy.__name__}.{name}")


@functools.lru_cache(maxsize=1)
def _remote_grad():
    """An autograd function whose backward asks the worker: a check may differentiate through
    the student's result (``torch.autograd.grad(out, inputs)``) as it would in a notebook."""
    import torch

    class RemoteGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, session, call, index, value, *inputs):  # noqa: D102
            ctx.session, ctx.call, ctx.index = session, call, index
            ctx.save_for_backward(*inputs)
            return value.clone()

        @staticmethod
        def backward(ctx, grad):  # noqa: D102
            return (None, None, None, None, *ctx.session.backward(ctx.call, ctx.index, grad, ctx.saved_tensors))

    return RemoteGrad


def _count(value: Any) -> int:
    """A count of torch operations from the worker (untrusted: anything else is a broken format)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise GradingAbort("the worker's answer broke the grader's format")


def _shift_buffers(obj: Any, shift: int) -> Any:
    """``obj`` with its buffer indices moved by ``shift`` (the kwargs' buffers follow the args')."""
    if isinstance(obj, list):
        return [_shift_buffers(x, shift) for x in obj]
    if isinstance(obj, dict):
        return {k: (v + shift if k in ("$t", "$a") else _shift_buffers(v, shift)) for k, v in obj.items()}
    return obj


def _apply_changes(args: tuple, changed: dict) -> None:
    """Copy the student's in-place changes of tensor arguments back onto the check's tensors, so
    the check sees them as it would in a notebook."""
    import torch

    for key, value in changed.items():
        with contextlib.suppress(ValueError, TypeError, RuntimeError, IndexError):
            i = int(key)
            if 0 <= i < len(args) and isinstance(args[i], torch.Generator) and isinstance(value, torch.Generator):
                args[i].set_state(value.get_state())  # the generator advanced as in the notebook
            elif 0 <= i < len(args) and isinstance(args[i], torch.Tensor) and isinstance(value, torch.Tensor):
                with torch.no_grad():
                    if value.shape == args[i].shape:
                        args[i].copy_(value.to(args[i].dtype))
                    else:
                        args[i].resize_(0)  # a changed shape: no longer equal to the input
