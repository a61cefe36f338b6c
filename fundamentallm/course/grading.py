"""Moved to :mod:`fundamentallm.course.grader.grading`. This old name is that same module (an alias,
not a copy): ``fundamentallm.course.grading`` and ``fundamentallm.course.grader.grading`` are one object."""

import sys

from .grader import grading as _module

sys.modules[__name__] = _module
