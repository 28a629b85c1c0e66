"""Where numbers were measured: CPU, cores, versions."""

from __future__ import annotations

import importlib.metadata
import multiprocessing
import os
import platform
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import lru_cache
from pathlib import Path

from edgekit import __version__
from edgekit.errors import EdgekitError
from edgekit.isa import cpuinfo_lines, host_class, host_flags


@lru_cache(maxsize=1)
def machine_info() -> dict:
    """CPU model, cores and ISA features that change quantized speed."""

    flags = host_flags()
    return {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "isa": [
            f for f in ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8", "asimd", "asimddp", "i8mm") if f in flags
        ],
        "isa_class": host_class().name,
        "os": f"{platform.system()} {platform.release()}",
        "arch": platform.machine(),
        "python": platform.python_version(),
    }


def cpu_model() -> str:
    for line in cpuinfo_lines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def nvidia_gpus() -> list[str]:
    """The NVIDIA GPUs the driver lists (/proc/driver/nvidia, else /dev/nvidiaN), without importing a framework."""
    names = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        try:
            lines = info.read_text().splitlines()
        except OSError:
            lines = []
        names.append(next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Model:")), "NVIDIA GPU"))
    return names or ["NVIDIA GPU" for dev in Path("/dev").glob("nvidia[0-9]*")]


def package_versions(*names: str) -> dict[str, str]:
    """Installed versions of `names` (missing ones omitted); edgekit and numpy always."""
    versions = {}
    for name in ("edgekit", "numpy", *names):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if name == "edgekit":
                versions[name] = __version__
    return versions


def in_fresh_process(function, *args):
    """function(*args) in a fresh spawned process (not forked: nothing of this process's state or threads), its result
    or its exception brought back; a process that ended without either: one EdgekitError."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(function, *args).result()
        except BrokenProcessPool:
            raise EdgekitError(
                f"the process edgekit spawned for {function.__name__} ended before it finished (killed, out of memory, or a "
                "Python script that calls edgekit ran again in it)",
                hint='a script calling edgekit\'s API needs its calls under `if __name__ == "__main__":`; else free memory and retry',
            ) from None


def peak_rss_mb() -> float:
    """This process's own peak resident memory, in MB: VmHWM from /proc (Linux), which a spawned process starts afresh;
    getrusage's ru_maxrss is kept across fork and exec, so a timing process spawned by a process holding a PyTorch
    reference would report the parent's peak as its own (measured: 1,514 MB in a child whose own peak was 15 MB)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
