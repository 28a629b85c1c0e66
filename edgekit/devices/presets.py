"""Presets: defaults for well-known boards, filled in by `edgekit devices add NAME --preset PRESET`."""

from __future__ import annotations

from dataclasses import dataclass

from edgekit.errors import EdgekitError


@dataclass(frozen=True)
class Preset:
    """What a board usually has, and the settings that give it steady timings."""

    name: str
    description: str
    arch: str
    targets: tuple[str, ...]  # targets worth measuring there (append @NAME)
    isa_class: str  # its CPU's class (edgekit.isa): the int8 scheme a build `--for-target` the preset gets
    packages: str  # what to pip install in the board's Python
    cooldown_s: float
    taskset: str | None = None


PRESETS = {
    p.name: p
    for p in (
        Preset(
            "raspberry-pi-5",
            "Raspberry Pi 5 (Cortex-A76 x4, Raspberry Pi OS 64-bit)",
            "aarch64",
            ("litert:cpu", "onnxruntime:cpu"),
            "arm64-dotprod",
            "numpy onnxruntime ai-edge-litert",
            cooldown_s=10.0,
        ),
        Preset(
            "jetson-orin",
            "NVIDIA Jetson Orin (JetPack 6); tensorrt:cuda and torch:cuda are not yet runnable by the device runner",
            "aarch64",
            ("tensorrt:cuda", "torch:cuda", "onnxruntime:cuda", "onnxruntime:cpu"),
            "arm64-dotprod",  # Cortex-A78AE
            "numpy + onnxruntime-gpu from NVIDIA's Jetson wheels (TensorRT comes with JetPack)",
            cooldown_s=5.0,
        ),
        Preset(
            "intel-npu",
            "Intel Core Ultra with its NPU (Linux NPU driver installed)",
            "x86_64",
            ("openvino:npu", "openvino:cpu", "onnxruntime:cpu"),
            "x86-vnni",  # Core Ultra: AVX-VNNI
            "numpy openvino onnxruntime",
            cooldown_s=5.0,
        ),
    )
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise EdgekitError(f"no preset '{name}'", hint=f"presets: {', '.join(PRESETS)}")
    return PRESETS[name]


_ORT_GPU = "pip install onnxruntime-gpu (on a Jetson: NVIDIA's onnxruntime-gpu wheel for its JetPack)"
_LITERT = "pip install ai-edge-litert ({arch} wheels on PyPI)"
# (module, runtime device or None for any) -> what to install on the board; {arch}: its architecture
INSTALL_HINTS = {
    ("numpy", None): "pip install numpy (wheels exist for {arch})",
    ("onnxruntime", "cuda"): _ORT_GPU,
    ("onnxruntime", "tensorrt"): _ORT_GPU,
    ("onnxruntime", None): "pip install onnxruntime (wheels for {arch} on PyPI)",
    ("ai_edge_litert", None): _LITERT,
    ("tflite_runtime", None): _LITERT,
    ("litert", None): _LITERT,
    ("openvino", "npu"): "pip install openvino, and install Intel's linux-npu-driver so /dev/accel shows the NPU",
    ("openvino", None): "pip install openvino ({arch} wheels on PyPI)",
}


def install_hint(module: str, arch: str | None, runtime_device: str = "cpu") -> str:
    """The pip package that provides `module` on a board of this architecture."""
    arch = arch or "this architecture"
    hint = INSTALL_HINTS.get((module, runtime_device)) or INSTALL_HINTS.get((module, None)) or f"pip install {module}"
    if hint == _LITERT and arch.startswith("armv7"):
        return "pip install tflite-runtime (ai-edge-litert has no 32-bit Arm wheels)"
    return hint.format(arch=arch)
