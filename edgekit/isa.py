"""ISA classes: which int8 instructions a CPU has, and so which int8 scheme keeps accuracy and pays there.

ONNX Runtime's x86 int8 kernels multiply u8 activations by s8 weights. Without VNNI they use
VPMADDUBSW, which adds pairs of u8 x s8 products into a saturating int16: with real activations the
sums clip and accuracy falls (FashionCNN top-1 agreement 97.4% instead of 99.9% on an AVX2 EPYC;
EfficientNet-Lite0 73% instead of 97%). On AVX2 edgekit keeps each adjacent pair of weight codes to
|w| + |w'| <= 128, so the sums cannot clip (quantization.pair_safe); u8 x u8 goes through a widening path
that cannot saturate but was 3x slower than fp32 on a Zen 3 EPYC.
VNNI (VPDPBUSD) and AMX accumulate u8 x s8 in int32 directly: no saturation, and the fast path.
Arm's kernels (SDOT/UDOT, I8MM, or widening multiplies) accumulate in int32 as well.

The class of the host comes from the CPU flags the kernel reports, cross-checked with what this
process sees through CPUID (numpy's dispatcher): a VM or an emulator that masks AVX-512 or VNNI
shows it there. `--for-target` may name a class, a device preset or a device in the inventory.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from functools import lru_cache


@dataclass(frozen=True)
class IsaClass:
    """A family of CPUs that run int8 the same way."""

    name: str
    description: str
    activations: str  # ONNX Runtime static int8: activation type ("uint8" | "int8")
    weights: str  # weight type
    reason: str  # why this scheme on this class, with the measurement behind it
    int8_pays: bool | None  # measured: is ONNX Runtime int8 faster than fp32 here (None: not measured on this project's machines)
    pair_safe_weights: bool = False  # u8 x s8 weights kept within VPMADDUBSW's int16 pairs (quantization.pair_safe)


# One row per class; docs/int8-schemes.md has the measurements behind each choice.
CLASSES = {
    c.name: c
    for c in (
        IsaClass(
            "x86-amx",
            "x86 with AMX-INT8 (Xeon Sapphire Rapids and later)",
            "uint8",
            "int8",
            "AMX/VNNI accumulate u8 x s8 in int32 (no saturation); u8s8 is ONNX Runtime's fast path: int8/fp32 p50 0.30-0.38 on a Xeon VM, s8s8 no faster than fp32",
            True,
        ),
        IsaClass(
            "x86-vnni",
            "x86 with AVX-512 VNNI or AVX-VNNI, no AMX (Cascade Lake, Ice Lake, Zen 4/5, Alder Lake)",
            "uint8",
            "int8",
            "VNNI's VPDPBUSD accumulates u8 x s8 in int32 (no saturation) and is ONNX Runtime's fast int8 path",
            True,
        ),
        IsaClass(
            "x86-avx512",
            "x86 with AVX-512BW, no VNNI (Skylake-SP)",
            "uint8",
            "uint8",
            "no VNNI: u8 x s8 goes through VPMADDUBSW, whose int16 sums saturate; u8 x u8 takes a widening path that cannot",
            None,
        ),
        IsaClass(
            "x86-avx2",
            "x86 with AVX2, no AVX-512 or VNNI (Haswell to Coffee Lake, Zen 1-3)",
            "uint8",
            "int8",
            "no VNNI: VPMADDUBSW sums u8 x s8 pairs in a saturating int16, so adjacent weight codes keep |w| + |w'| <= 128 "
            "(EfficientNet-Lite0 0.74x fp32's latency; u8 x u8 3.4x)",
            True,
            True,
        ),
        IsaClass(
            "x86-sse",
            "x86 without AVX2",
            "uint8",
            "uint8",
            "no AVX2: the SSSE3 PMADDUBSW path saturates like AVX2's; u8 x u8 does not",
            None,
        ),
        IsaClass(
            "arm64-i8mm",
            "Arm64 with I8MM (Neoverse V1/N2, Graviton 3/4, Cortex-A710+)",
            "int8",
            "int8",
            "Arm64: ONNX Runtime's s8s8 kernels use SMMLA/SDOT, accumulating in int32",
            None,
        ),
        IsaClass(
            "arm64-dotprod",
            "Arm64 with the dot-product extension (Cortex-A76/A78: Raspberry Pi 5, Jetson Orin)",
            "int8",
            "int8",
            "Arm64: ONNX Runtime's s8s8 kernels use SDOT, accumulating in int32",
            None,
        ),
        IsaClass(
            "arm64",
            "Arm64 without dot-product (Cortex-A53/A72: Raspberry Pi 3/4)",
            "int8",
            "int8",
            "Arm64 without SDOT: widening multiplies accumulate in int32 (no saturation); int8 saves size more than time",
            None,
        ),
        IsaClass(
            "other",
            "a CPU edgekit does not classify",
            "uint8",
            "uint8",
            "unknown CPU: u8 x u8 is the scheme no int8 kernel saturates on",
            None,
        ),
    )
}


# The multiple of channels structured pruning keeps per layer, per class: the fp32 vector width the convolution and
# GEMM kernels block output channels by (oneDNN and MLAS: 16 lanes on AVX-512, 8 on AVX2 and NEON). Off that width a
# pruned layer pays for the padded remainder: issue 48's Xeon (x86-amx) ran a ResNet-18 with 30% of its channels
# pruned at 0.74-0.77 of the full p50 unrounded (45/89/179/358 channels) and 0.51-0.54 rounded to 16.
# bench/results/<class>/prune.md has this project's measurements per class; "measured" says which rows are.
CHANNEL_MULTIPLE = {
    "x86-amx": 16,
    "x86-vnni": 16,
    "x86-avx512": 16,
    "x86-avx2": 8,
    "x86-sse": 4,
    "arm64-i8mm": 8,
    "arm64-dotprod": 8,
    "arm64": 8,
    "other": 8,
}
CHANNEL_MULTIPLE_MEASURED = {"x86-amx", "x86-vnni"}


def channel_multiple(isa_class: str) -> int:
    """The kept-channel multiple for a class (8 for one edgekit does not know)."""
    return CHANNEL_MULTIPLE.get(isa_class, 8)


def classify(flags: set[str], arch: str) -> IsaClass:
    """The class of a CPU from its /proc/cpuinfo flags (x86) or Features (Arm) and its architecture."""
    arch = arch.lower()
    if arch in ("aarch64", "arm64"):
        if "i8mm" in flags:
            return CLASSES["arm64-i8mm"]
        return CLASSES["arm64-dotprod" if "asimddp" in flags else "arm64"]
    if arch not in ("x86_64", "amd64", "x86", "i686"):
        return CLASSES["other"]
    if "amx_int8" in flags:
        return CLASSES["x86-amx"]
    if {"avx512_vnni", "avx_vnni"} & flags:
        return CLASSES["x86-vnni"]
    if "avx512bw" in flags:
        return CLASSES["x86-avx512"]
    return CLASSES["x86-avx2" if "avx2" in flags else "x86-sse"]


@lru_cache(maxsize=1)
def host_flags() -> frozenset[str]:
    """The flags this process can use: /proc/cpuinfo's, less what CPUID hides from it (VMs, emulators)."""
    flags = set(cpu_flags())
    seen = _cpuid_flags()
    if seen is not None and not _agrees(flags, seen):
        flags = seen  # the kernel's list is the host's; this process runs on less (qemu -cpu, a masking hypervisor)
    return frozenset(flags)


def host_class() -> IsaClass:
    """The class of the CPU this process runs on."""
    return classify(set(host_flags()), platform.machine())


INT8_PAYS = 1.1  # an int8 speed-up below this buys size, not speed
# Flags of half-precision arithmetic (and of bf16, which OpenVINO runs an fp16 model in): without one, a CPU runtime runs
# an fp16 model in fp32 (or casts around each op), never faster than the fp32 model.
HALF_PRECISION = frozenset({"avx512fp16", "amx_fp16", "amx_bf16", "avx512_bf16", "asimdhp", "fphp"})


def half_precision_arithmetic(flags: frozenset[str] | set[str]) -> bool:
    return bool(HALF_PRECISION & set(flags))


def speedup_note(precision: str, speedup: float | None, isa_class: str) -> str | None:
    """What a report says when int8 is not faster than fp32 on the machine that timed it."""
    if not precision.startswith("int8") or speedup is None or speedup >= INT8_PAYS:
        return None
    return f"int8 here: size only, not faster ({isa_class}: {speedup:.2f}x fp32)"


def to_dict(isa: IsaClass) -> dict:
    return asdict(isa)


def _cpuid_flags() -> set[str] | None:
    """x86 features as CPUID reports them to this process (numpy's dispatcher reads them), in cpuinfo's names."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:
        return None
    names = {"AVX2": "avx2", "AVX512F": "avx512f", "AVX512BW": "avx512bw", "AVX512VNNI": "avx512_vnni"}
    if not any(features.get(key) is not None for key in names):
        return None
    return {flag for key, flag in names.items() if features.get(key)}


def _agrees(cpuinfo: set[str], cpuid: set[str]) -> bool:
    """True when CPUID shows this process every wide feature the kernel lists (cpuid has no AMX/AVX-VNNI bits to compare)."""
    return all(flag in cpuid for flag in ("avx2", "avx512f", "avx512bw", "avx512_vnni") if flag in cpuinfo)


def cpu_flags() -> set[str]:
    """The CPU's flags as the kernel lists them (/proc/cpuinfo `flags` on x86, `Features` on Arm)."""
    for line in cpuinfo_lines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


@lru_cache(maxsize=1)
def cpuinfo_lines() -> tuple[str, ...]:
    try:
        with open("/proc/cpuinfo") as f:
            return tuple(f)
    except OSError:
        return ()
