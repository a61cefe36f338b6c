"""Directories written atomically and verified when read: the machinery under checkpoints.

``write_directory(path, fill, step)`` lets ``fill`` write files into a hidden staging directory
beside ``path``, flushes them to the disk, adds ``manifest.json`` (the step, and each file's
size and SHA-256) last, then renames the staging directory into place. An old ``path`` is first
renamed aside (``.name.previous``) and deleted only after the new one is in place, so at every
instant one complete directory exists: a kill or a full disk at any moment leaves the previous
one readable, and :func:`locate` finds it aside if a kill fell between the two renames.
:func:`verify_manifest` checks every file and names the first that does not match.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Callable, Optional, Union

MANIFEST = "manifest.json"
PathLike = Union[str, os.PathLike]


class CheckpointError(ValueError):
    """A checkpoint that is incomplete, corrupt or inconsistent (a ``ValueError``)."""


def _staging(path: Path) -> Path:
    return path.parent / f".{path.name}.saving"


def _aside(path: Path) -> Path:
    return path.parent / f".{path.name}.previous"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    """Flush a file (or a directory's entries) to the disk, so a rename never outruns the data."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. directories on Windows cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_output_dir(path: PathLike, marker: str = "checkpoint.json") -> Path:
    """Raise a clear error, before any work is done, if ``path`` cannot hold a checkpoint: it is
    a file, a non-empty directory that is not a checkpoint (replacing it would delete its files),
    or its parent cannot be created or written. Returns ``Path(path)``."""
    if not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise TypeError(f"path={path!r} must be a non-empty str or os.PathLike")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"path={str(path)!r} exists and is not a directory; a checkpoint is a "
                         f"directory: choose another path")
    if path.is_dir() and any(path.iterdir()) and not (
            (path / marker).is_file() or (path / MANIFEST).is_file()):
        raise ValueError(f"path={str(path)!r} is a non-empty directory that is not a checkpoint; "
                         f"saving would replace its files: choose an empty or new directory")
    parent = path.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"path={str(path)!r}: cannot create its parent directory ({err.strerror})") from err
    probe = parent / f".{path.name}.probe-{os.getpid()}"
    try:  # an actual write: os.access says nothing about read-only mounts (or root)
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as err:
        raise ValueError(f"path={str(path)!r}: the directory {str(parent)!r} is not writable "
                         f"({err.strerror})") from err
    return path


def write_directory(path: Path, fill: Callable[[Path], None], step: Optional[int], names: tuple[str, ...],
                    version: int) -> None:
    """Atomically replace directory ``path`` by what ``fill(stage)`` writes (see the module
    docstring); ``names`` are the files the manifest may record. Call :func:`check_output_dir`
    first. On an ``OSError`` (a full disk, say) the old directory is untouched."""
    stage = _staging(path)
    shutil.rmtree(stage, ignore_errors=True)  # a leftover of an interrupted save
    try:
        stage.mkdir()
        fill(stage)
        files = {}
        for name in names:
            if (stage / name).exists():
                _fsync(stage / name)
                files[name] = {"bytes": (stage / name).stat().st_size, "sha256": _sha256(stage / name)}
        manifest = {"format_version": version, "step": step, "files": files}
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        _fsync(stage / MANIFEST)
        _fsync(stage)
        _swap_into_place(stage, path)
    except OSError as err:
        shutil.rmtree(stage, ignore_errors=True)
        raise OSError(err.errno, f"could not write the checkpoint {str(path)!r} ({err.strerror or err}); "
                                 f"the previous checkpoint there, if any, is unchanged") from err
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _swap_into_place(stage: Path, path: Path) -> None:
    """``stage`` becomes ``path``; an old ``path`` is renamed aside first and deleted last, so at
    every instant one complete checkpoint exists (``path``, or ``.name.previous`` beside it)."""
    aside = _aside(path)
    if path.exists():
        shutil.rmtree(aside, ignore_errors=True)  # path is complete, so an older copy is not needed
        os.replace(path, aside)
    os.replace(stage, path)
    _fsync(path.parent)
    shutil.rmtree(aside, ignore_errors=True)


def _read_manifest(path: Path) -> tuple[dict, Optional[int]]:
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        return manifest["files"], manifest["step"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path}: {MANIFEST} is corrupt ({err!r})") from err


def verify_file(path: Path, name: str) -> None:
    """Check one file against ``manifest.json`` (its size and SHA-256)."""
    entry = _read_manifest(path)[0].get(name)
    file = path / name
    if entry is None:
        raise CheckpointError(f"checkpoint {path}: {name} is not in {MANIFEST}; it was left by "
                              f"another save. Delete it or save the checkpoint again")
    if not file.is_file():
        raise CheckpointError(f"checkpoint {path}: {name} is missing (listed in {MANIFEST})")
    if file.stat().st_size != entry.get("bytes") or _sha256(file) != entry.get("sha256"):
        raise CheckpointError(f"checkpoint {path}: {name} does not match the SHA-256 in {MANIFEST} "
                              f"(the file was changed, truncated or comes from another save)")


def verify_manifest(path: Path, names: tuple[str, ...], deferred: tuple[str, ...] = ()) -> Optional[int]:
    """Check every file against ``manifest.json``; return the manifest's step. The files in
    ``deferred`` are only checked to exist with their listed size here (no hashing): their
    reader calls :func:`verify_file` if and when it reads them."""
    files, step = _read_manifest(path)
    for name in names:
        if name not in files and (path / name).exists():
            raise CheckpointError(f"checkpoint {path}: {name} is not in {MANIFEST}; it was left by "
                                  f"another save. Delete it or save the checkpoint again")
    for name, entry in files.items():
        file = path / name
        if name not in names:
            raise CheckpointError(f"checkpoint {path}: {MANIFEST} lists an unknown file {name!r}")
        if not file.is_file():
            raise CheckpointError(f"checkpoint {path}: {name} is missing (listed in {MANIFEST})")
        if file.stat().st_size != entry.get("bytes") or (name not in deferred
                                                         and _sha256(file) != entry.get("sha256")):
            raise CheckpointError(f"checkpoint {path}: {name} does not match the SHA-256 in {MANIFEST} "
                                  f"(the file was changed, truncated or comes from another save)")
    return step


def locate(path: Path, marker: str = "checkpoint.json") -> Path:
    """``path``, or the old checkpoint a save interrupted between its two renames left aside."""
    if (path / marker).is_file():
        return path
    aside = _aside(path)
    if not path.exists() and (aside / MANIFEST).is_file():
        warnings.warn(f"{path} is missing but {aside} holds the previous checkpoint (a save was "
                      f"interrupted); loading that one", stacklevel=3)
        return aside
    raise FileNotFoundError(f"{path} is not a checkpoint directory (needs checkpoint.json and "
                            f"model.safetensors)")
