"""TensorRT engines (.engine/.plan): tied to the GPU and TensorRT version that built them.

edgekit records both in the engine's sidecar when it builds one, and checks them before TensorRT
deserializes it, so a mismatch is a clear error instead of a null engine. Device queries use torch's
CUDA API (the runner also uses it for device memory, streams and events).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import numpy as np

from edgekit.artifact import Artifact, TensorSpec
from edgekit.errors import ModelLoadError, RuntimeMissingError

log = logging.getLogger("edgekit")
REBUILD = "engines are tied to their GPU and TensorRT version: rebuild it here with `edgekit convert SOURCE --to tensorrt`"


def engine_identity() -> dict:
    """What an engine built here is tied to: the TensorRT version and the GPU (name, compute capability)."""
    import tensorrt as trt

    try:
        import torch
    except ImportError:
        raise RuntimeMissingError("edgekit's TensorRT path uses torch's CUDA API", hint="pip install torch (a CUDA build)") from None
    if not torch.cuda.is_available():
        raise RuntimeMissingError("TensorRT needs a CUDA GPU and none is visible", hint="run on a machine with an NVIDIA GPU")
    major, minor = torch.cuda.get_device_capability(0)
    return {"version": trt.__version__, "gpu": torch.cuda.get_device_name(0), "compute_capability": f"{major}.{minor}"}


def check_engine_identity(path: Path, built: dict | None, here: dict) -> None:
    """Fail clearly when the engine was built with another TensorRT or for another GPU architecture."""
    if not built:
        return
    for key, what in (("version", "TensorRT"), ("compute_capability", "GPU compute capability")):
        if built.get(key) != here[key]:
            raise ModelLoadError(
                f"{Path(path).name} was built with TensorRT {built.get('version')} for {built.get('gpu')} "
                f"(compute capability {built.get('compute_capability')}); this machine has {what} {here[key]}",
                hint=REBUILD,
            )
    if built.get("gpu") != here["gpu"]:
        log.warning(
            "%s was built on %s and runs on %s: same architecture, but timings may differ", Path(path).name, built.get("gpu"), here["gpu"]
        )


def load_engine(path: Path, here: dict):
    """(trt runtime, ICudaEngine) after checking the engine against `here` (engine_identity()); a file TensorRT
    cannot read is one clear error."""
    import tensorrt as trt

    from edgekit.provenance import read_provenance

    check_engine_identity(path, (read_provenance(path) or {}).get("tensorrt"), here)
    runtime = trt.Runtime(trt.Logger(trt.Logger.ERROR))
    engine = runtime.deserialize_cuda_engine(Path(path).read_bytes())
    if engine is None:
        raise ModelLoadError(
            f"TensorRT {trt.__version__} cannot load {Path(path).name}: not an engine, or built by another TensorRT or for another GPU",
            hint=REBUILD,
        )
    return runtime, engine


def engine_specs(engine) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs and outputs of an engine; -1 dims become 'batch' (axis 0) or dN."""
    import tensorrt as trt

    inputs, outputs = [], []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        dims = tuple(d if d >= 0 else ("batch" if axis == 0 else f"d{axis}") for axis, d in enumerate(engine.get_tensor_shape(name)))
        spec = TensorSpec(name, dims, np.dtype(trt.nptype(engine.get_tensor_dtype(name))).name)
        (inputs if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outputs).append(spec)
    return inputs, outputs


def tensorrt_artifact(path: Path, precision: str | None = None) -> Artifact:
    """An Artifact for an engine: read by TensorRT where it is installed, else from the sidecar edgekit wrote."""
    from edgekit.provenance import read_provenance

    provenance = read_provenance(path) or {}
    if importlib.util.find_spec("tensorrt") is not None:
        _, engine = load_engine(path, engine_identity())
        inputs, outputs = engine_specs(engine)
    else:
        inputs, outputs = [TensorSpec.from_dict(s) for s in provenance.get("inputs", [])], []
    return Artifact(
        Path(path),
        "tensorrt",
        precision or provenance.get("precision", "unknown"),
        inputs,
        outputs,
        {"tensorrt": provenance.get("tensorrt")},
    )


def tensorrt_summary(path: Path) -> dict:
    """What `edgekit info` shows for an engine beyond its signature: what it was built with and for."""
    from edgekit.provenance import read_provenance

    provenance = read_provenance(path) or {}
    return {"built_for": provenance.get("tensorrt") or "unknown (no edgekit sidecar)", "build": provenance.get("build")}
