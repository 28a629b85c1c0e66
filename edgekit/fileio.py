"""Writing artifacts safely: a multi-file artifact appears whole or not at all.

The scheme (docs/architecture.md, "Nothing half-written") works the same on Linux, macOS and Windows
because it relies only on renames inside one folder:

1. The writer fills a staging folder `.NAME.edgekit-stage-PID-RAND` beside the final path.
2. Every staged file is fsynced, then a plan (the files to move in, main file last, and the old
   artifact's stale companions to remove) is written into the staging folder and fsynced.
3. **Commit point:** the staging folder is renamed to `.NAME.edgekit-commit`. One rename of a folder:
   before it the old artifact is untouched, after it the new one is decided.
4. The files are moved into place (each an atomic rename), stale companions removed, and the commit
   folder deleted.

A process killed after step 3 leaves a commit folder; `recover()` finishes its moves (roll forward).
edgekit calls `recover()` before it reads a model (`loaders.open_source`) and before it writes one, so
a reader through edgekit always sees the old artifact or the new one. Staging and work folders whose
process is gone are swept at the next write to the same path.

`EDGEKIT_FAULT_STEP=<step>` makes the process exit at that step (`os._exit`), for the kill test.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from edgekit.errors import EdgekitError

SIDECAR_SUFFIX = ".edgekit.json"
FAULT_ENV = "EDGEKIT_FAULT_STEP"
FAULT_EXIT_CODE = 86
PLAN = "plan.json"
STALE_AFTER_S = 24 * 3600  # where a process id cannot be checked (Windows), a staging folder this old is abandoned


def fault_point(step: str) -> None:
    """Exit at once (no cleanup, as a kill would) when EDGEKIT_FAULT_STEP names this step."""
    if os.environ.get(FAULT_ENV) == step:
        os._exit(FAULT_EXIT_CODE)


@contextlib.contextmanager
def atomic_output(final: Path) -> Iterator[Path]:
    """Yield a temporary path with `final`'s name; on success commit it (and its side files) as one unit.

    The writer may create side files next to the yielded path (`model.onnx.data`, `model.bin`, the
    sidecar). On any error, or a kill before the commit, nothing at `final` changes.
    """
    final = Path(final).resolve()
    check_output_path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    recover(final)
    _sweep_abandoned(final)
    staging = Path(tempfile.mkdtemp(prefix=_private_prefix(final, "stage"), dir=final.parent))
    try:
        yield staging / final.name
        fault_point("staged")
        _commit(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def work_folder(final: Path) -> Iterator[Path]:
    """A scratch folder beside `final` (not in the system temp folder), removed on exit or swept after a kill."""
    final = Path(final).resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=_private_prefix(final, "work"), dir=final.parent))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_output_path(path: Path, option: str = "the output", example: str = "model.onnx") -> None:
    """Refuse, before any work, a destination that cannot be written: a folder, a path under a file, a read-only folder."""

    path = Path(path)
    if path.is_dir():
        raise EdgekitError(
            f"{option} {path} is an existing folder, not a file name",
            hint=f"name a file inside it, e.g. {path / example}, or another path",
        )
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise EdgekitError(f"{option} {path} cannot be written: {parent} is a file, not a folder", hint="choose a path in a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise EdgekitError(f"{option} {path} cannot be written: no permission in {parent}", hint="choose a folder you can write to")


def recover(final: Path) -> bool:
    """Finish a commit a killed process left half-done (roll forward). True if there was one."""
    final = Path(final)
    commit = _commit_folder(final)
    plan_file = commit / PLAN
    if not plan_file.is_file():
        if commit.is_dir():  # renamed without a plan cannot happen; an empty leftover is only removed
            shutil.rmtree(commit, ignore_errors=True)
        return False
    plan = json.loads(plan_file.read_text())
    _apply(commit, final.parent, plan)
    return True


def artifact_files(final: Path) -> list[Path]:
    """The files of the artifact at `final` that exist: the main file, known companions and those its sidecar lists."""
    final = Path(final)
    names = [final.name, *_companion_names(final)]
    return [final.parent / n for n in dict.fromkeys(names) if (final.parent / n).is_file()]


def _commit(staging: Path, final: Path) -> None:
    produced = sorted((p.name for p in staging.iterdir()), key=lambda n: (n == final.name, n))
    for name in produced:
        _fsync_file(staging / name)
    stale = [n for n in _companion_names(final) if n not in produced and (final.parent / n).exists()]
    plan = {"moves": produced, "remove": stale}
    _write_synced(staging / PLAN, json.dumps(plan))
    _fsync_dir(staging)
    fault_point("synced")
    commit = _commit_folder(final)
    try:
        os.rename(staging, commit)  # the commit point
    except OSError:  # another writer's commit of the same path is half-applied: finish it, then ours
        recover(final)
        os.rename(staging, commit)
    _fsync_dir(final.parent)
    fault_point("committed")
    _apply(commit, final.parent, plan)


def _apply(commit: Path, folder: Path, plan: dict) -> None:
    """Move the committed files into place and drop stale companions; safe to repeat after a kill."""
    for name in plan["moves"]:
        if (commit / name).exists():
            os.replace(commit / name, folder / name)
        fault_point(f"moved:{name}")
    for name in plan["remove"]:
        with contextlib.suppress(FileNotFoundError):
            (folder / name).unlink()
    _fsync_dir(folder)
    fault_point("cleaned")
    shutil.rmtree(commit, ignore_errors=True)


def _companion_names(final: Path) -> list[str]:
    """Side files an artifact at `final` may have: by convention, plus those its sidecar lists."""
    names = [final.name + SIDECAR_SUFFIX, final.name + ".data", final.name + "_data"]
    if final.suffix == ".xml":
        names.append(final.stem + ".bin")
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        listed = json.loads((final.parent / (final.name + SIDECAR_SUFFIX)).read_text()).get("files") or []
        names += [n for n in listed if isinstance(n, str) and Path(n).name == n and n != final.name]
    return list(dict.fromkeys(names))


def _commit_folder(final: Path) -> Path:
    return final.parent / f".{final.name}.edgekit-commit"


def _private_prefix(final: Path, kind: str) -> str:
    return f".{final.name}.edgekit-{kind}-{os.getpid()}-"


def _sweep_abandoned(final: Path) -> None:
    """Remove staging/work folders for `final` left by processes that no longer run."""
    for kind in ("stage", "work"):
        for folder in final.parent.glob(f".{final.name}.edgekit-{kind}-*-*"):
            pid = folder.name.rsplit("-", 2)[-2]
            if pid.isdigit() and not _process_alive(int(pid), folder):
                shutil.rmtree(folder, ignore_errors=True)


def _process_alive(pid: int, folder: Path) -> bool:
    if pid == os.getpid():
        return True
    if os.name == "nt":
        with contextlib.suppress(OSError):
            return time.time() - folder.stat().st_mtime < STALE_AFTER_S
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_file(path: Path) -> None:
    if path.is_dir():
        for child in path.rglob("*"):
            if child.is_file():
                _fsync_file(child)
        return
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    if os.name == "nt":  # Windows cannot open a folder to fsync it; NTFS journals renames itself
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


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
