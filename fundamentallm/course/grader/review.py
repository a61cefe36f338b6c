"""What the grader reads in a submission's source, without running it: the forbidden functions
an answer names (in any spelling: ``x.softmax``, ``F.softmax``, ``nn.Softmax``, ``log_softmax``,
``getattr(torch, "softmax")``, an imported alias), and the dynamic constructs that could hide one
or reach outside the exercise (``__import__``, ``importlib``, ``exec``/``eval``, ``getattr`` with a
computed name, frames, profilers, threads, processes, ``ctypes``, ``os``/``sys``, ``torch.ops``,
dunder attributes, ``import *`` ...): those mark the exercise "needs review"."""

from __future__ import annotations

import ast
import re
from typing import Sequence

SAFE_MODULES = {"torch", "numpy", "math", "cmath", "fundamentallm", "collections", "itertools",
                "functools", "typing", "dataclasses", "random", "statistics", "string", "re", "heapq",
                "bisect", "operator", "copy", "enum", "fractions", "decimal", "abc", "numbers",
                "matplotlib", "einops", "__future__"}
UNSAFE_SUBMODULES = ("torch._", "torch.ops", "torch.library", "torch.utils.cpp_extension",
                     "torch.multiprocessing", "torch.distributed", "numpy.ctypeslib", "fundamentallm.course",
                     "fundamentallm.checks")
DYNAMIC_NAMES = {"__import__", "exec", "eval", "compile", "globals", "locals", "vars", "breakpoint",
                 "open", "input", "__builtins__", "__loader__", "__spec__", "memoryview", "help"}
DYNAMIC_ATTRIBUTES = {"_getframe", "setprofile", "settrace", "getprofile", "gettrace", "f_back", "f_locals",
                      "f_globals", "f_code", "gi_frame", "cr_frame", "tb_frame", "tb_next", "ops", "_C",
                      "modules", "system", "popen", "fork", "kill", "environ", "getppid", "setpgid", "setsid",
                      "jit", "methodcaller", "attrgetter", "_dynamo", "get_type_hints", "get_field", "locate",
                      "get_overridable_functions", "get_testing_overrides", "resolve_name", "import_module",
                      "vformat"}
ALLOWED_DUNDERS = {"__init__", "__call__", "__repr__", "__str__", "__len__", "__getitem__", "__iter__",
                   "__next__", "__eq__", "__hash__", "__name__", "__doc__", "__post_init__", "__lt__",
                   "__contains__", "__setitem__", "__enter__", "__exit__"}
NAME_ONLY_ARGS = {"getattr", "setattr", "delattr", "hasattr"}


def _words(name: str) -> list[str]:
    return [w for w in name.lower().strip("_").split("_") if w]


def _forbidden_key(dotted: str) -> list[str]:
    """The words that name a forbidden function: the last part of its dotted name (the class's
    name for a method such as ``LayerNorm.forward``)."""
    parts = dotted.split(".")
    last = parts[-1] if parts[-1] not in ("forward", "__init__", "__call__") or len(parts) < 2 else parts[-2]
    return _words(last)


def _names_forbidden(name: str, key: list[str]) -> bool:
    words = _words(name)
    if "".join(words) == "".join(key):  # layer_norm ~ LayerNorm
        return True
    n = len(key)
    return any(words[i:i + n] == key for i in range(len(words) - n + 1))  # log_softmax ~ softmax


def review_source(code: str, forbidden: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """Read a submission's code without running it: (forbidden functions it names, as
    "name (line N)"; dynamic constructs that need review, as "what (line N)"). Raises
    ``SyntaxError``."""
    tree = ast.parse(code)
    keys = [(d, _forbidden_key(d)) for d in forbidden]
    hits: list[str] = []
    review: list[str] = []

    direct = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in NAME_ONLY_ARGS and len(n.args) >= 2
              and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)}

    def forbid(name: str, node: ast.AST) -> None:
        for dotted, key in keys:
            if _names_forbidden(name, key):
                hits.append(f"{dotted} (as `{name}`, line {node.lineno})")

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if node.__class__ is ast.ImportFrom and node.level:
                    review.append(f"a relative import (line {node.lineno})")
                elif module.split(".")[0] not in SAFE_MODULES or module.startswith(UNSAFE_SUBMODULES):
                    review.append(f"import of {module} (line {node.lineno})")
            for alias in node.names:
                if alias.name == "*":
                    review.append(f"`import *` (line {node.lineno})")
                forbid(alias.name.rsplit(".", 1)[-1], node)
                if isinstance(node, ast.ImportFrom) and (alias.name in DYNAMIC_ATTRIBUTES or alias.name in DYNAMIC_NAMES):
                    review.append(f"import of {alias.name} (line {node.lineno})")
                if isinstance(node, ast.ImportFrom) and alias.name.startswith("_") and alias.name != "__future__":
                    review.append(f"import of private {alias.name} (line {node.lineno})")
        elif isinstance(node, ast.Attribute):
            forbid(node.attr, node)
            if node.attr in DYNAMIC_ATTRIBUTES or (node.attr == "compile" and not (
                    isinstance(node.value, ast.Name) and node.value.id in ("re", "regex"))):
                review.append(f"`.{node.attr}` (line {node.lineno})")
            elif node.attr.startswith("__") and node.attr not in ALLOWED_DUNDERS:
                review.append(f"`.{node.attr}` (line {node.lineno})")
        elif isinstance(node, ast.Name):
            if node.id in NAME_ONLY_ARGS and id(node) not in direct:
                review.append(f"`{node.id}` with a computed name or as a value (line {node.lineno})")
            elif node.id in DYNAMIC_NAMES:
                review.append(f"`{node.id}` (line {node.lineno})")
            elif node.id.startswith("__") and node.id not in ALLOWED_DUNDERS:
                review.append(f"`{node.id}` (line {node.lineno})")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("__") and node.name not in ALLOWED_DUNDERS:
                review.append(f"a method `{node.name}` (line {node.lineno})")
        elif isinstance(node, ast.Call) and id(node.func) in direct:  # getattr(x, "name")
            name = node.args[1].value
            forbid(name, node)
            if name.startswith("__") or name in DYNAMIC_ATTRIBUTES:
                review.append(f"`{node.func.id}(..., {name!r})` (line {node.lineno})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and keys \
                and re.fullmatch(r"[A-Za-z_][\w.]{0,100}", node.value):  # a name as a string, not prose
            for dotted, key in keys:
                if any(_names_forbidden(w, key) for w in node.value.split(".")):
                    review.append(f"the string {node.value!r} names {dotted} (line {node.lineno})")
    return sorted(set(hits)), sorted(set(review), key=lambda r: (int(r.rsplit("line ", 1)[-1].rstrip(")")) if "line " in r else 0, r))
