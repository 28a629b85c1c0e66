"""The run cache checks itself: each entry records the SHA-256 of every file, checked on use.

An entry is a folder (`.cache/KEY/`) holding one artifact and `edgekit-cache.json` (file -> SHA-256).
`publish()` puts a run's artifacts where people look for them (`REPORT_DIR/artifacts/MODEL/FORMAT-PRECISION/`).
A missing, truncated or changed file makes the entry damaged: it is rebuilt, with a warning saying so.
Concurrent runs take a lock per entry (fcntl on POSIX, msvcrt on Windows), so one builds while the
other waits and then reuses the result; a run also holds its report folder, so a second run into the
same folder is refused instead of silently replacing the first's report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.fileio import artifact_files, atomic_output, sha256_of_file

log = logging.getLogger("edgekit")
MANIFEST = "edgekit-cache.json"
RUN_LOCK = ".edgekit-run.lock"


def cached_build(out: Path, build: Callable[[], object], use_cache: bool = True) -> bool:
    """Make sure `out` (an artifact in its own cache folder) exists and is intact; True if reused as it was."""
    entry = Path(out).parent
    entry.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(entry.parent / f"{entry.name}.lock"):
        if use_cache and entry.exists():
            problem = damage(entry) if Path(out).exists() else f"{Path(out).name} is missing"
            if problem is None:
                return True
            log.warning("cache entry %s is damaged (%s): rebuilding it (--no-cache rebuilds every entry)", entry, problem)
        if entry.exists():
            shutil.rmtree(entry)
        build()
        record(entry)
        return False


def damage(entry: Path) -> str | None:
    """What is wrong with a cache entry, or None when every file matches its recorded SHA-256."""
    try:
        recorded = json.loads((entry / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "no checksum record"
    for name, digest in recorded.items():
        path = entry / name
        if not path.is_file():
            return f"{name} is missing"
        if sha256_of_file(path) != digest:
            return f"{name} has changed (truncated or overwritten)"
    return None


def record(entry: Path) -> None:
    """Write the entry's manifest: the SHA-256 of every file in it."""
    files = {p.name: sha256_of_file(p) for p in sorted(entry.iterdir()) if p.is_file() and p.name != MANIFEST}
    with atomic_output(entry / MANIFEST) as tmp:
        tmp.write_text(json.dumps({"files": files}, indent=2) + "\n")


def publish(artifact: Path, folder: Path) -> Path:
    """The cached `artifact` and its side files at `folder`, same names, as one atomic unit: hard links where the
    file system allows (no copy of the bytes), copies elsewhere; never symlinks into a cache that may be rebuilt.
    The cache replaces a file by renaming a new one over it, so a link keeps the bytes it was made with."""
    final = Path(folder) / Path(artifact).name
    if final.exists() and final.samefile(artifact) and all((final.parent / f.name).exists() for f in artifact_files(artifact)):
        return final  # already this entry's files
    with atomic_output(final) as staged:
        for path in artifact_files(artifact):
            try:
                os.link(path, staged.parent / path.name)
            except OSError:  # another file system, or one without hard links
                shutil.copy2(path, staged.parent / path.name)
    return final


@contextlib.contextmanager
def report_folder(folder: Path) -> Iterator[Path]:
    """Hold `folder` for one run: a second run into it is refused with a clear error."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with file_lock(folder / RUN_LOCK, wait=False):
            yield folder
    except BlockingIOError:
        raise EdgekitError(
            f"another `edgekit run` is writing its reports into {folder}",
            hint="wait for it to finish, or give this recipe another report.dir",
        ) from None


@contextlib.contextmanager
def file_lock(path: Path, wait: bool = True) -> Iterator[None]:
    """An exclusive lock on `path` (created if needed), released when the block ends or the process dies.

    With wait=False a lock held elsewhere raises BlockingIOError at once."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock(fd, wait)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            yield
        finally:
            _unlock(fd)
    finally:
        os.close(fd)


def _lock(fd: int, wait: bool) -> None:
    if os.name == "nt":
        import msvcrt

        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                return
            except OSError:
                if not wait:
                    raise BlockingIOError(f"lock held: fd {fd}") from None
                time.sleep(0.1)
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))


def _unlock(fd: int) -> None:
    if os.name == "nt":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)
