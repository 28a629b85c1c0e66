"""Arm64 CPUs emulated by qemu-user, to check int8 numerics of ONNX Runtime's Arm kernels from an x86 host.

scripts/arm64_sysroot.sh unpacks Debian's arm64 Python and the aarch64 wheels of numpy and ONNX Runtime into a
sysroot. ONNX Runtime picks its int8 kernels (SDOT, SMMLA, or widening multiplies) through cpuinfo, which reads
the features from the auxiliary vector (the -cpu model qemu emulates) and the core's part number from
/proc/cpuinfo. qemu-user passes the host's x86 /proc/cpuinfo through, which cpuinfo cannot parse (ONNX Runtime
dies on import), so each emulated CPU gets a prefix whose proc/cpuinfo describes it, served by `qemu-aarch64 -L`.
The two must agree: cpuinfo trusts an A76's part number for SDOT, so a Cortex-A72 described as an A76 dies on an
illegal instruction. Integer kernels are exact and qemu's float is IEEE, so the numerics are the real CPU's; the
latency means nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SYSROOT = Path(__file__).resolve().parents[1] / ".arm64"  # where `make arm64-sysroot` puts it, in a checkout


@dataclass(frozen=True)
class ArmCpu:
    isa_class: str  # edgekit.isa class the CPU falls in
    qemu_cpu: str  # qemu-aarch64 -cpu
    part: str  # MIDR part number in /proc/cpuinfo (cpuinfo tunes kernels by it)
    features: str  # /proc/cpuinfo Features, as Linux lists them for that CPU


ARM_CPUS = {
    cpu.isa_class: cpu
    for cpu in (
        ArmCpu("arm64", "cortex-a72", "0xd08", "fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid"),  # Raspberry Pi 4
        ArmCpu(
            "arm64-dotprod",
            "cortex-a76",  # Raspberry Pi 5
            "0xd0b",
            "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp",
        ),
        ArmCpu(
            "arm64-i8mm",
            "max",  # qemu's max has I8MM and SVE, as a Neoverse V1 (Graviton 3) does
            "0xd40",
            "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 "
            "sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16",
        ),
    )
}


def cpuinfo_text(cpu: ArmCpu, cores: int = 2) -> str:
    block = (
        "processor\t: {i}\nBogoMIPS\t: 50.00\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
        "CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: {part}\nCPU revision\t: 1\n"
    )
    return "\n".join(block.format(i=i, features=cpu.features, part=cpu.part) for i in range(cores))


WRAPPER = """#!/bin/sh
# {isa_class}: the sysroot's Python on qemu-aarch64 -cpu {qemu_cpu}, with this CPU's /proc/cpuinfo (edgekit.emulation)
sysroot=$(cd "$(dirname "$0")/.." && pwd)
export EDGEKIT_EMULATED="qemu-aarch64 -cpu {qemu_cpu}"  # a board's probe reports it: its latency means nothing
PYTHONPATH="$sysroot/site" exec qemu-aarch64 -cpu {qemu_cpu} -L "$sysroot/cpu/{isa_class}" "$sysroot/root/usr/bin/python3.11" "$@"
"""


def write_emulated_cpus(sysroot: Path) -> None:
    """For each class: sysroot/cpu/<class>, the sysroot's files with a /proc/cpuinfo that describes its CPU, and
    sysroot/bin/python-<class>, a Python that runs there (a device's `--python`, or a test's interpreter)."""
    (sysroot / "bin").mkdir(exist_ok=True)
    for name, cpu in ARM_CPUS.items():
        prefix = sysroot / "cpu" / name
        (prefix / "proc").mkdir(parents=True, exist_ok=True)
        (prefix / "proc" / "cpuinfo").write_text(cpuinfo_text(cpu, os.cpu_count() or 1))
        for top in ("etc", "lib", "usr"):
            link = prefix / top
            if not link.is_symlink():
                link.symlink_to(Path("..", "..", "root", top))
        python = arm_python(sysroot, name)
        python.write_text(WRAPPER.format(isa_class=name, qemu_cpu=cpu.qemu_cpu))
        python.chmod(0o755)


def arm_python(sysroot: Path, isa_class: str) -> Path:
    """The Python that runs on the emulated CPU of `isa_class` (write_emulated_cpus made it)."""
    return sysroot / "bin" / f"python-{isa_class}"


def sysroot_missing(sysroot: Path = SYSROOT) -> str | None:
    """Why the emulated Arm CPUs cannot run here (a test's skip reason, which .ci/run refuses), or None."""
    if shutil.which("qemu-aarch64") is None or not all(arm_python(sysroot, name).exists() for name in ARM_CPUS):
        return "needs the arm64 sysroot and qemu-user (make arm64-sysroot; .ci/run builds it)"
    return None


def run_json(python: list, code: str, args: list, timeout: float | None = None):
    """`code` run by an emulated CPU's Python (`python`: its argv, e.g. [arm_python(...)] or [qemu-x86_64, -cpu,
    Haswell, sys.executable]) in this checkout, so that it imports edgekit; the JSON its last line of output holds."""
    argv = [str(a) for a in (*python, "-c", code, *args)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=SYSROOT.parent)
    if proc.returncode:
        raise RuntimeError(f"{python[0]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])
