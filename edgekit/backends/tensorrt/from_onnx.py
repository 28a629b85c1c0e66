"""ONNX -> TensorRT engine with the tensorrt Python API (TensorRT 10+), explicit quantization only.

The ONNX decides every precision: int8 comes from edgekit's symmetric Q/DQ ONNX, fp16 from its fp16
ONNX (float I/O kept), and the network is built strongly typed, as TensorRT 10 recommends and
TensorRT 11 requires (it removed the FP16/INT8 builder flags). A dynamic batch gets one optimisation
profile (1 .. --max-batch, tuned for --opt-batch). Engines only run on the GPU model and TensorRT
version that built them, so both are recorded in the sidecar and checked when the engine is loaded.

Not verified on edgekit's machines: TensorRT cannot be installed there (see the README's support table).
"""

from __future__ import annotations

from pathlib import Path

from edgekit.artifact import TensorSpec
from edgekit.backends.onnx.tensorrt_checks import check_for_tensorrt, errors_of
from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError, EdgekitError

WORKSPACE_BYTES = 4 << 30


class OnnxToTensorrt(Converter):
    """Builds a serialized engine (.engine) from an ONNX file on the machine's GPU."""

    sources = ("onnx",)
    target_format = "tensorrt"
    precisions = {"fp32": False, "fp16": False, "int8": False}  # the precision is the ONNX's; calibration happens before
    package = "tensorrt"
    import_name = "tensorrt"

    def convert(self, model: Path, specs: list[TensorSpec], out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        findings = check_for_tensorrt(model)
        errors = errors_of(findings)
        if errors:
            raise ConversionError(
                f"TensorRT would reject this ONNX: {errors[0].message} ({len(errors)} problem(s))",
                hint="see them all: convert with --to onnx (same precision), then `edgekit info MODEL.onnx --for-target tensorrt:cuda`",
            )
        import tensorrt as trt

        from edgekit.backends.tensorrt.loader import engine_identity

        identity = engine_identity()  # fails clearly without a visible GPU, before the build
        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(model)):
            first = parser.get_error(0).desc() if parser.num_errors else "unknown error"
            raise ConversionError(
                f"TensorRT's ONNX parser failed: {first}", hint="check the ops with `edgekit info MODEL --for-target tensorrt:cuda`"
            )
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
        shapes = _profile_shapes(network, specs, options)
        if shapes:
            config.add_optimization_profile(_profile(builder, shapes))
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise ConversionError(
                "TensorRT could not build an engine from this network", hint="rerun with TensorRT's verbose log (trtexec --verbose)"
            )
        Path(out).write_bytes(bytes(serialized))
        return {
            "tensorrt": identity,
            "build": {"strongly_typed": True, "workspace_bytes": WORKSPACE_BYTES, "profile": _profile_text(shapes)},
            "tensorrt_checks": [f.to_dict() for f in findings],
        }


def _profile_shapes(network, specs: list[TensorSpec], options: ConvertOptions) -> dict[str, tuple[tuple, tuple, tuple]]:
    """(min, opt, max) per dynamic input: the batch from 1 to --max-batch, other dims from --input or an error."""
    given = {s.name: s for s in specs}
    shapes = {}
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        dims = list(tensor.shape)
        if all(d >= 0 for d in dims):
            continue
        spec = given.get(tensor.name)
        fixed = []
        for axis, d in enumerate(dims):
            if d >= 0 or axis == 0:
                fixed.append(d)
            elif spec is not None and isinstance(spec.shape[axis], int):
                fixed.append(spec.shape[axis])
            else:
                raise EdgekitError(
                    f"input '{tensor.name}' has a dynamic dimension {axis} besides the batch",
                    hint=f"give its size with --input {tensor.name}:SHAPE (TensorRT needs the range of every dynamic dim)",
                )
        if fixed[0] >= 0:
            shapes[tensor.name] = (tuple(fixed),) * 3
        else:
            rest = tuple(fixed[1:])
            shapes[tensor.name] = ((1, *rest), (min(options.opt_batch, options.max_batch), *rest), (options.max_batch, *rest))
    return shapes


def _profile(builder, shapes: dict):
    profile = builder.create_optimization_profile()
    for name, (low, opt, high) in shapes.items():
        profile.set_shape(name, low, opt, high)
    return profile


def _profile_text(shapes: dict) -> dict:
    return {name: ["x".join(map(str, s)) for s in bounds] for name, bounds in shapes.items()}
