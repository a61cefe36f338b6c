"""Moved to :mod:`fundamentallm.course.grader.sandbox`. This old name is that same module (an alias,
not a copy): ``fundamentallm.course.sandbox`` and ``fundamentallm.course.grader.sandbox`` are one object."""

import sys

from .grader import sandbox as _module

sys.modules[__name__] = _module
