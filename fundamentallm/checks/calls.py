"""How many torch operations a student's function makes: a check that asks for one batched pass,
or for a design rather than a search, counts them and refuses a function that makes too many.

:class:`TorchCallCounter` counts every torch function and tensor method called while it is
active (a call made inside another is not counted twice) and stops the student's function once
it passes the budget (there is nothing left to decide). When the function is a grader's proxy for
code that runs in the sandboxed worker, the proxy asks the worker to count there, with the budget
left (:func:`call_budget`), and adds the worker's count here (:func:`count_remote_calls`): the
same check holds in a reader's kernel and under the grader.
"""

from __future__ import annotations

from typing import Optional

import torch

_ACTIVE: list[TorchCallCounter] = []  # the counters around the student call now running


class TooManyCalls(Exception):
    """Raised inside the student's function once it has made more operations than the budget."""


class TorchCallCounter(torch.overrides.TorchFunctionMode):
    """``with TorchCallCounter(500) as counter: fn(...)``; then ``counter.n`` (at most budget + 1:
    the call is stopped with :class:`TooManyCalls` there)."""

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.budget, self.n = int(budget), 0

    def __enter__(self):
        self._grad = torch.is_grad_enabled()
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        out = super().__exit__(*exc)
        torch.set_grad_enabled(self._grad)  # stopped inside a no_grad block, its exit may not have run
        return out

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        if self.n == self.budget + 1:  # enough to decide (once: the function's cleanup still runs)
            raise TooManyCalls
        return func(*args, **(kwargs or {}))


def call_budget() -> Optional[int]:
    """The operations a call may still make under the active counters (None: nothing counts)."""
    return min(max(c.budget - c.n, 0) for c in _ACTIVE) if _ACTIVE else None


def count_remote_calls(n: int) -> None:
    """Add ``n`` operations made elsewhere (the grader's worker) to every active counter; stop the
    call as the counter would have if the budget is passed."""
    for counter in _ACTIVE:
        counter.n += n
    if any(counter.n > counter.budget for counter in _ACTIVE):
        raise TooManyCalls
