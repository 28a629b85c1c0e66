"""Writing artifacts safely: never leave a half-written file where a good one was."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_output(final: Path) -> Iterator[Path]:
    """Yield a temporary path with `final`'s name; on success move it (and side files) into place.

    The writer may create side files next to the yielded path (e.g. `model.onnx.data`); they are
    moved first and the main file last, each with an atomic rename on the same file system.
    On any error nothing at `final` changes.
    """
    final = Path(final).resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield staging / final.name
        for produced in sorted(staging.iterdir(), key=lambda p: p.name == final.name):
            os.replace(produced, final.parent / produced.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def sha256_of_file(path: Path, limit: int | None = None) -> str:
    """Hex SHA-256 of a file (or of its first `limit` bytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        remaining = limit
        while chunk := f.read(1 << 20 if remaining is None else min(1 << 20, remaining)):
            digest.update(chunk)
            if remaining is not None:
                remaining -= len(chunk)
                if remaining <= 0:
                    break
    return digest.hexdigest()
