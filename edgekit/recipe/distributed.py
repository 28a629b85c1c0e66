"""`edgekit run --ray`: a recipe's host-side work (conversion, calibration, quantization, accuracy) as Ray
tasks, then every latency measurement alone on its machine.

Work where it fits, timings where they are clean: the tasks may run on any worker of a local Ray or a
cluster; once all of them are done (and a Ray started here is shut down), the host's cells are timed
one after the other, and each device (`RUNTIME:DEVICE@NAME`) times its own cells, the devices in
parallel. Artifacts come back into the run's content-addressed cache, byte for byte, so a re-run finds
them whichever worker made them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from edgekit import registry
from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output
from edgekit.recipe.cells import PreparedCell, artifact_path, prepare_cell, time_cell, timing_machine

POLL_SECONDS = 0.5


@dataclass(frozen=True)
class RayOptions:
    """How to reach Ray and what a task may ask of it."""

    address: str | None = None  # None: start a local Ray; "auto", "ray://HEAD:10001" or "HEAD:6379": join a cluster
    num_cpus: int | None = None  # a local Ray's CPUs (default: this machine's usable cores)
    max_retries: int = 2  # attempts after a worker is lost mid-task (a crash, the OOM killer, a node gone)
    cpus_per_task: float = 1.0
    calibration_memory_mb: int = 1024  # reserved by cells that calibrate (int8): the scheduler packs them by memory

    def to_dict(self) -> dict:
        return {"mode": "ray", **asdict(self)}


def run_cells(options: RayOptions, recipe, source, inputs, validation, calibration, cache: Path, use_cache: bool, progress) -> list[dict]:
    """The matrix's rows: host-side work as Ray tasks, then the timings (see the module's docstring)."""
    cells = recipe.matrix.cells()
    prepared = prepare_cells(options, recipe, source, inputs, cells, validation, calibration, cache, use_cache, progress)
    return time_cells(prepared, progress)


def prepare_cells(
    options: RayOptions, recipe, source, inputs, cells, validation, calibration, cache: Path, use_cache: bool, progress
) -> list[PreparedCell]:
    """The host-side work of `cells` (format, precision, target) as Ray tasks, nothing timed: each its PreparedCell."""
    with connected(options) as ray:
        return _host_work(ray, options, recipe, source, inputs, cells, validation, calibration, Path(cache).absolute(), use_cache, progress)


def import_ray():
    """Ray, or a clear error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise EdgekitError("--ray needs Ray, which is not installed", hint="pip install edgekit[ray]") from None
    return ray


@contextlib.contextmanager
def connected(options: RayOptions):
    """Ray, connected as `options` say; a Ray started here is shut down on leaving (one already
    initialised in this process, e.g. by a test, is left as it was)."""
    if not options.address:
        loopback_only()
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(**init_arguments(options))
        except ConnectionError as exc:
            raise EdgekitError(f"cannot reach the Ray cluster at {options.address}: {exc}", hint=_ADDRESS_HINT) from None
    try:
        yield ray
    finally:
        if started:
            _shut_down(ray)


def _shut_down(ray, wait_seconds: float = 30.0) -> None:
    """Stop a Ray started here and wait for its processes to be gone: the timings that follow own the machine."""
    import psutil

    processes = psutil.Process().children(recursive=True)
    ray.shutdown()
    psutil.wait_procs(processes, timeout=wait_seconds)


def loopback_only() -> None:
    """Make a local Ray started from this process listen on 127.0.0.1 only (its servers bind to the node
    address, which is the loopback one in Ray's single-machine mode). Read when ray is first imported."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


_ADDRESS_HINT = "start one with `ray start --head` (docs/scale.md), or leave the address out for a local Ray"


def init_arguments(options: RayOptions) -> dict:
    """ray.init's arguments: a local Ray on the loopback interface only, or a cluster to join."""
    quiet = {"log_to_driver": False, "logging_level": logging.ERROR}  # Ray's start-up notes would break the progress view
    if options.address:
        return {"address": options.address, **quiet}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"num_cpus": options.num_cpus or cores, "include_dashboard": False, **quiet}


def task_resources(fmt: str, precision: str, target: str, options: RayOptions, cluster: dict) -> dict:
    """What a cell's task asks the scheduler for: CPUs, memory for calibration, a GPU for TensorRT or CUDA.
    Never more than the cluster has (`cluster`: ray.cluster_resources()): a task asking for a GPU that no
    worker has would wait forever; without one it runs and fails as a serial run does, with the runtime's reason."""
    resources = {"num_cpus": min(options.cpus_per_task, cluster.get("CPU", 1))}
    if precision == "int8":
        resources["memory"] = min(options.calibration_memory_mb * 2**20, int(cluster.get("memory", 0)))
    devices = {t.partition(":")[2].partition("[")[0] for t in (target, registry.backend(fmt).default_targets[0])}
    if any(device.startswith("cuda") for device in devices) and cluster.get("GPU", 0) >= 1:  # a GPU target, or a GPU-only format
        resources["num_gpus"] = 1
    return resources


def _host_work(ray, options, recipe, source, inputs, cells, validation, calibration, cache, use_cache, progress) -> list[PreparedCell]:
    """Submit one task per cell, collect them as they finish; Ctrl-C cancels what is still running."""
    board = ray.remote(num_cpus=0)(TaskBoard).remote()
    task = ray.remote(host_task)
    here, ship, cluster = ray.get_runtime_context().get_node_id(), _several_nodes(ray), ray.cluster_resources()
    refs, first_of_path = {}, {}
    for index, (fmt, precision, target) in enumerate(cells):
        path = artifact_path(recipe, source, inputs, fmt, precision, target, calibration, cache)
        job = CellJob(index, recipe, source, inputs, (fmt, precision, target), validation, calibration, cache, use_cache, os.getcwd(), here)
        job.files = _cached_files(path) if ship and use_cache else {}
        after = first_of_path.get(path) if path else None  # two targets of one artifact: convert it once
        ref = task.options(**task_resources(fmt, precision, target, options, cluster), max_retries=options.max_retries).remote(
            job, board, after
        )
        refs[ref] = index
        first_of_path.setdefault(path, ref)
        _tell(progress, index, cells[index], "queued")
    return _collect(ray, refs, cells, board, cache, options, progress)


def _collect(ray, refs: dict, cells, board, cache: Path, options: RayOptions, progress) -> list[PreparedCell]:
    prepared: list[PreparedCell | None] = [None] * len(cells)
    pending, seen = list(refs), {}
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_SECONDS, fetch_local=True)
            for ref in done:
                index = refs[ref]
                prepared[index] = _result(ray, ref, cells[index], cache, options)
                _tell(
                    progress, index, cells[index], "failed" if prepared[index].failure else "converted", _where(prepared[index].host_work)
                )
            _show_started(ray, board, cells, prepared, seen, progress)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return prepared


def _result(ray, ref, cell: tuple, cache: Path, options: RayOptions) -> PreparedCell:
    """A finished task's cell, its artifact written back into this run's cache; a lost worker after
    every retry, or an unexpected error, becomes the cell's failure."""
    try:
        prepared, files, folder = ray.get(ref)
    except ray.exceptions.RayError as exc:
        fmt, precision, target = cell
        return PreparedCell({"format": fmt, "precision": precision, "target": target}, failure=_task_failure(exc, options))
    if files:
        restore_files(cache / folder, files)
    return prepared


def _task_failure(exc, options: RayOptions) -> str:
    import ray.exceptions as errors

    if isinstance(exc, errors.WorkerCrashedError | errors.NodeDiedError | errors.OutOfMemoryError):
        return f"failed: its worker died on each of {options.max_retries + 1} attempt(s) ({type(exc).__name__})"
    if isinstance(exc, errors.TaskCancelledError):
        return "failed: cancelled"
    cause = getattr(exc, "cause", None) or exc
    return f"failed: {type(cause).__name__}: {str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}"


def _show_started(ray, board, cells, prepared, seen: dict, progress) -> None:
    """Tell the progress view which cells started where since the last look."""
    if progress is None:
        return
    for index, where in ray.get(board.started.remote()).items():
        if prepared[index] is None and seen.get(index) != where:
            seen[index] = where
            _tell(progress, index, cells[index], "running", _where(where))


@dataclass
class CellJob:
    """What a task needs to do one cell's host-side work (all of it picklable)."""

    index: int
    recipe: object
    source: object
    inputs: tuple
    cell: tuple
    validation: str | None
    calibration: str | None
    cache: Path
    use_cache: bool
    cwd: str  # the driver's folder: relative paths in the recipe resolve as in a serial run
    driver_node: str
    files: dict | None = None  # the driver's cached artifact, for a worker on another node


class TaskBoard:
    """A Ray actor the tasks tell where they started, for the live view."""

    def __init__(self) -> None:
        self._started: dict[int, dict] = {}

    def start(self, index: int, where: dict) -> None:
        self._started[index] = where

    def started(self) -> dict[int, dict]:
        return dict(self._started)


def host_task(job: CellJob, board, after=None) -> tuple[PreparedCell, dict, str]:
    """One cell's host-side work on a Ray worker: (the prepared cell, its artifact's files when this is
    another node than the driver's, the artifact's cache folder name)."""
    import ray

    context = ray.get_runtime_context()
    where = {"node": context.get_node_id()[:12], "worker": context.get_worker_id()[:12], **_machine()}
    board.start.remote(job.index, where)
    with contextlib.suppress(OSError):
        os.chdir(job.cwd)  # a node without the driver's folder resolves only absolute paths
    fmt, precision, target = job.cell
    path = artifact_path(job.recipe, job.source, job.inputs, fmt, precision, target, job.calibration, job.cache)
    if job.files and path is not None:
        restore_files(path.parent, job.files)
    prepared = prepare_cell(
        job.recipe, job.source, job.inputs, fmt, precision, target, job.validation, job.calibration, job.cache, job.use_cache
    )
    prepared.host_work = where
    remote = context.get_node_id() != job.driver_node
    return prepared, _cached_files(path) if remote and not prepared.failure else {}, path.parent.name if path else ""


def _machine() -> dict:

    return {"host": socket.gethostname(), "pid": os.getpid()}


def _cached_files(path: Path | None) -> dict[str, bytes]:
    """The files of an artifact's cache folder (the artifact, its sidecar and side files), if it is there."""
    if path is None or not path.exists():
        return {}
    return {f.name: f.read_bytes() for f in sorted(path.parent.iterdir()) if f.is_file() and not f.name.startswith(".")}


def restore_files(folder: Path, files: dict[str, bytes]) -> None:
    """Write an artifact's files into a cache folder where they are missing: side files first, the
    artifact (the file whose presence means "cached") last, each atomically."""

    for name in sorted(files, key=lambda n: n.endswith(tuple(_MAIN_SUFFIXES))):
        target = Path(folder) / name
        if not target.exists():
            with atomic_output(target) as staging:
                staging.write_bytes(files[name])


_MAIN_SUFFIXES = tuple(suffix for b in registry.backends().values() if not b.source_only for suffix in b.suffixes)


def _several_nodes(ray) -> bool:
    return sum(1 for node in ray.nodes() if node.get("Alive")) > 1


def time_cells(prepared: list[PreparedCell], progress) -> list[dict]:
    """Time every cell: the host's one after the other, each device's on its own, devices in parallel."""
    groups: dict[str, list[int]] = defaultdict(list)
    for index, cell in enumerate(prepared):
        groups[timing_machine(cell.base["target"])].append(index)
    rows: list[dict | None] = [None] * len(prepared)

    def time_group(indices: list[int]) -> None:
        for index in indices:
            cell = prepared[index]
            if not cell.failure:
                _tell(progress, index, _cell_tuple(cell), "timing", timing_machine(cell.base["target"]))
            rows[index] = time_cell(cell)
            _tell(progress, index, _cell_tuple(cell), *_outcome(rows[index], cell))

    with ThreadPoolExecutor(len(groups) or 1) as pool:
        for future in [pool.submit(time_group, indices) for indices in groups.values()]:
            future.result()
    return rows


def _outcome(row: dict, cell: PreparedCell) -> tuple[str, str]:
    if row["status"] != "ok":
        return "failed", row["status"]
    return "done", f"{_where(cell.host_work)}; timed on {row['timed_on']['machine']}"


def _cell_tuple(cell: PreparedCell) -> tuple:
    return cell.base["format"], cell.base["precision"], cell.base["target"]


def _where(where: dict) -> str:
    return f"{where.get('host')} (node {where.get('node', '-')}, pid {where.get('pid')})" if where else ""


def _tell(progress, index: int, cell: tuple, state: str, detail: str = "") -> None:
    """A cell's new state to the progress view (a live table), or as a line to a plain callback."""
    if progress is None:
        return
    if hasattr(progress, "cell"):
        progress.cell(index, cell, state, detail)
    else:
        progress(f"{' '.join(cell)}: {state}" + (f" ({detail})" if detail else ""))
