"""The wrong-answer tables, one module per chapter (``ch02.py`` ...): what each check must reject.

Kept apart from the checks so that a chapter's check module reads as the checks alone; importing
this package registers every row in :data:`fundamentallm.checks.wrong.WRONG_ANSWERS`.
"""

from . import (  # noqa: F401
    ch01,
    ch02,
    ch03,
    ch04,
    ch05,
    ch06,
    ch07,
    ch08,
    ch09,
    ch10,
    ch11,
    ch12,
    ch13,
    ch14,
    ch15,
    ch16,
    ch17,
)
