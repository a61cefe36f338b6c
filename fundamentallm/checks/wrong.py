"""What each check catches: a table of plausible wrong answers, run live through the checks.

Every check declares at least three wrong answers a student could plausibly write, in its
chapter's table ``checks/wrong_answers/chNN.py`` (the chapter's checks are in ``checks/chNN.py``)::

    wrong_answer("check_softmax_rows", "mistake", "exp without subtracting the row max",
                 '''
    def softmax_rows(x):
        e = torch.exp(x)
        return e / e.sum(-1, keepdim=True)
    ''', call="softmax_rows", message=r"max")

Kinds (:data:`KINDS`):

* ``mistake``: a common error of understanding (a missing scale, an off-by-one, the wrong axis);
* ``edge``: right on easy inputs, wrong on an edge case the statement names (a masked row, T = 1);
* ``method``: the right numbers reached around the method the statement names (autograd where it
  says by hand, finite differences, the package's or torch's function under any name, a fitted
  library routine, a formula where a measurement is asked);
* ``value``: a value that no honest answer gives (NaN, infinity, a wrong type or shape).

The answer is *source code*, compiled under a ``<wrong answer ...>`` file name, so the checks treat
it exactly as a student's notebook cell (forbidden calls in it count). Its namespace holds
``torch``, ``np``, ``math``, ``nn``, ``F`` and ``fundamentallm``; ``call`` is an expression in it:
the argument(s) given to the check (``"predicted, simulate"``). ``message`` is a regular
expression the check's message must match: what the student is told to rethink.

:func:`catches` runs the table (``python -m fundamentallm.course catches [--chapter NN] [--json]``
prints it for instructors); ``tests/test_catches.py`` asserts that every row is rejected with its
message, that every check has at least three rows, and that every check with forbidden calls has a
``method`` row.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from dataclasses import asdict, dataclass
from typing import Optional

KINDS = ("mistake", "edge", "method", "value")


@dataclass(frozen=True)
class WrongAnswer:
    """One plausible wrong answer to the exercise whose check is ``check``."""

    check: str  # "check_softmax_rows"
    kind: str  # one of KINDS
    what: str  # one line for the instructor: what this answer does wrong
    source: str  # Python source defining the answer
    call: str  # expression: the argument(s) passed to the check
    message: str  # regex the check's failure message must match
    chapter: str = ""  # "02", from the module that declared it


WRONG_ANSWERS: list[WrongAnswer] = []


def wrong_answer(check: str, kind: str, what: str, source: str, *, call: str, message: str) -> WrongAnswer:
    """Declare a wrong answer that ``check`` must reject (see the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} must be one of {list(KINDS)}")
    if not check.startswith("check_"):
        raise ValueError(f"check={check!r} must be a check's name (check_...)")
    re.compile(message)  # a typo in the pattern fails at import time
    import sys

    # The declaring module's file (sys._getframe, not inspect.stack(), which reads the source of
    # every frame on the stack: seconds at import once the tables hold a few hundred rows).
    caller = sys._getframe(1).f_code.co_filename
    chapter = re.search(r"ch(\d\d)(?:_\w+)?\.py$", caller)  # chNN.py or a second part, chNN_NAME.py
    entry = WrongAnswer(check, kind, what, _dedent(source), call, message, chapter.group(1) if chapter else "")
    WRONG_ANSWERS.append(entry)
    return entry


def _dedent(source: str) -> str:
    import textwrap

    return textwrap.dedent(source).strip("\n") + "\n"


@dataclass
class Caught:
    """The outcome of running one wrong answer through its check."""

    answer: WrongAnswer
    rejected: bool  # the check raised CheckFailed (not NotAttempted)
    message: str  # what the student would read (or why the row is broken)
    message_ok: bool  # the message matches the row's pattern

    def as_dict(self) -> dict:
        d = asdict(self.answer)
        del d["source"]
        return {**d, "rejected": self.rejected, "message_ok": self.message_ok, "student_reads": self.message}


def run(answer: WrongAnswer, index: int = 0) -> Caught:
    """Run ``answer`` through its check as a script would (a stub raises, a pass returns True)."""
    import numpy as np
    import torch
    from torch import nn
    from torch.nn import functional as F

    import fundamentallm

    from .core import CHECKS, CheckFailed, NotAttempted, strict

    namespace = {"torch": torch, "np": np, "math": math, "nn": nn, "F": F, "fundamentallm": fundamentallm,
                 "__name__": "__wrong_answer__"}
    filename = f"<wrong answer {answer.check} #{index}>"
    try:
        exec(compile(answer.source, filename, "exec"), namespace)  # noqa: S102 (our own table)
        args = eval(compile(f"({answer.call},)", filename, "eval"), namespace)  # noqa: S307
    except Exception as e:  # a broken row: report it, the test fails
        return Caught(answer, False, f"the wrong answer itself did not run: {type(e).__name__}: {e}", False)
    if answer.check not in CHECKS:
        return Caught(answer, False, f"no check named {answer.check}", False)
    out = io.StringIO()
    try:
        with strict(), contextlib.redirect_stdout(out):
            CHECKS[answer.check](*args)
    except NotAttempted as e:
        return Caught(answer, False, f"reported as not attempted, not as wrong: {e}", False)
    except CheckFailed as e:
        text = str(e)
        return Caught(answer, True, text, re.search(answer.message, text) is not None)
    except Exception as e:
        return Caught(answer, False, f"the check crashed: {type(e).__name__}: {e}", False)
    return Caught(answer, False, "PASSED: " + out.getvalue().strip(), False)


def catches(chapter: Optional[str] = None) -> list[Caught]:
    """Run every declared wrong answer (of one chapter, ``"02"``, or all) through its check."""
    from . import CHECKS  # noqa: F401 (importing the package registers every chapter's table)

    rows = [w for w in WRONG_ANSWERS if chapter is None or w.chapter == f"{int(chapter):02d}"]
    return [run(w, i) for i, w in enumerate(rows)]


def format_table(results: list[Caught]) -> str:
    """The instructors' table: per check, each wrong answer, whether it is caught and the message."""
    from .core import SELF_CHECK

    lines: list[str] = []
    current = None
    for r in results:
        w = r.answer
        if w.check != current:
            current = w.check
            tag = " (self-check: counts no marks)" if w.check in SELF_CHECK else ""
            lines.append(f"\nch{w.chapter} {w.check}{tag}")
        mark = "caught" if r.rejected and r.message_ok else ("caught, unexpected message" if r.rejected else "NOT CAUGHT")
        lines.append(f"  [{w.kind:7s}] {w.what}\n      {mark}: {r.message.splitlines()[0][:300] if r.message else ''}")
    caught = sum(r.rejected for r in results)
    lines.append(f"\n{caught} of {len(results)} wrong answers rejected")
    return "\n".join(lines).lstrip("\n") + "\n"
