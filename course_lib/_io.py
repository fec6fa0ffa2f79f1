"""Files written whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile

__all__ = ["atomic_write", "write_json"]


def atomic_write(path: str | os.PathLike, write, *, binary: bool = False, suffix: str = "") -> None:
    """Call ``write(f)`` on a temporary file in ``path``'s folder, flush it to disk, then rename it
    over ``path`` (``os.replace``), so that an interruption at any moment leaves the old file or the
    new one, never half of one; the temporary file is removed if anything fails."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_json(data, path: str | os.PathLike, indent: int | None = 2, allow_nan: bool = False) -> None:
    """Write ``data`` as JSON (``indent``: as ``json.dump``'s) with :func:`atomic_write`. NaN and
    infinities, which JSON lacks, are refused unless ``allow_nan`` (then written as Python's
    ``json`` writes them)."""

    def dump(f) -> None:
        json.dump(data, f, indent=indent, allow_nan=allow_nan)
        f.write("\n")

    atomic_write(path, dump, suffix=".json")
