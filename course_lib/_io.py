"""Files written whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile

__all__ = ["write_json"]


def write_json(data, path: str | os.PathLike, indent: int | None = 2, allow_nan: bool = False) -> None:
    """Write ``data`` as JSON (``indent``: as ``json.dump``'s) atomically: to a temporary file in the same folder, flushed,
    then renamed over ``path`` (``os.replace``), so that an interruption leaves the old file or the
    new one, never half of one. NaN and infinities, which JSON lacks, are refused unless ``allow_nan``
    (then written as Python's ``json`` writes them)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=indent, allow_nan=allow_nan)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
