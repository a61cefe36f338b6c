"""Moved to :mod:`fundamentallm.course.grader.wire`. This old name is that same module (an alias,
not a copy): ``fundamentallm.course.wire`` and ``fundamentallm.course.grader.wire`` are one object."""

import sys

from .grader import wire as _module

sys.modules[__name__] = _module
