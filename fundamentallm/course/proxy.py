"""Moved to :mod:`fundamentallm.course.grader.proxy`. This old name is that same module (an alias,
not a copy): ``fundamentallm.course.proxy`` and ``fundamentallm.course.grader.proxy`` are one object."""

import sys

from .grader import proxy as _module

sys.modules[__name__] = _module
