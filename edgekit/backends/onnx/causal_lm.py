"""A causal language model as ONNX with its KV cache, weight-only int4/int8 through ONNX Runtime's MatMulNBits.

The graph is torch.onnx's dynamo export of edgekit.backends.torch.causal_lm's KV-cache signature (token and past
lengths dynamic). int8-weights and int4-weights quantize every MatMul with a constant weight group-wise along its input
(`--group-size` 16 to 256, what MLAS takes) with ONNX Runtime's MatMulNBitsQuantizer: asymmetric, round to nearest
(its data-aware GPTQ leaves the codes of round to nearest in onnxruntime 1.32, so `--calib` is not used here), int8
activations as it runs (accuracy_level 4). The embedding (a Gather) and a tied head (a MatMul reading the embedding
through a Transpose) stay fp32: GatherBlockQuantized takes 4 bits only.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path

from edgekit.backends.export_errors import quiet
from edgekit.errors import ConversionError

log = logging.getLogger("edgekit")
BITS = {"int8-weights": 8, "int4-weights": 4}
BLOCK_SIZES = (16, 32, 64, 128, 256)
ACCURACY_LEVEL = 4  # MatMulNBits computes with int8 activations (quantized per block as it runs)


def export_onnx(model, shape, out: Path) -> None:
    """fp32 ONNX of `model` behind the KV-cache signature (weights inside the file)."""
    import torch

    from edgekit.backends.torch import causal_lm

    example, dynamic = causal_lm.export_inputs(shape)
    with quiet(), torch.no_grad():
        try:
            torch.onnx.export(
                causal_lm.wrap(model),
                example,
                str(out),
                dynamo=True,
                input_names=list(causal_lm.INPUTS),
                output_names=list(causal_lm.OUTPUTS),
                dynamic_shapes=dynamic,
                external_data=False,
            )
        except Exception as exc:  # noqa: BLE001 - any exporter failure is reported as one line
            raise ConversionError(f"ONNX export of the language model failed: {str(exc).splitlines()[0][:240]}") from None


def convert(model, shape, final: Path, options, calibration, work: Path) -> dict:
    """Write the language model as ONNX at options.precision to `final`; the notes for the provenance."""
    fp32 = final if options.precision == "fp32" else work / "fp32.onnx"
    export_onnx(model, shape, fp32)
    if options.precision == "fp16":
        _to_fp16(fp32, final)
        return {"weights": "fp16 (inputs and cache fp32)"}
    if options.precision in BITS:
        return quantize_weights(fp32, final, BITS[options.precision], options.group_size)
    return {"weights": "fp32"}


def _to_fp16(fp32: Path, out: Path) -> None:
    import onnx
    from onnxconverter_common import float16

    model = float16.convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True)
    onnx.save(model, str(out))


def quantize_weights(fp32: Path, out: Path, bits: int, group_size: int) -> dict:
    """Every MatMul with a constant weight in `bits` (groups of `group_size` inputs, asymmetric), run with int8
    activations (accuracy_level 4: without it the 8-bit kernel ran 9x slower than fp32 here, the 4-bit one 1.5x
    slower than with it). The tied head reads the embedding through a Transpose, not a constant, and stays fp32."""

    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    for name in ("onnxruntime.quantization.matmul_nbits_quantizer", "neural_compressor"):  # it sets the root logger to INFO
        logging.getLogger(name).setLevel(logging.ERROR)
    block = _block_size(group_size)
    model = onnx.load(str(fp32))
    config = nbits.DefaultWeightOnlyQuantConfig(
        block_size=block,
        is_symmetric=False,
        accuracy_level=ACCURACY_LEVEL,
        bits=bits,
        op_types_to_quantize=("MatMul",),
        quant_axes=(("MatMul", 0),),
    )
    quantizer = nbits.MatMulNBitsQuantizer(
        model, bits=bits, block_size=block, is_symmetric=False, accuracy_level=ACCURACY_LEVEL, algo_config=config
    )
    with contextlib.redirect_stdout(io.StringIO()):  # a progress bar
        quantizer.process()
    counts = _count(quantizer.model.model, "MatMulNBits")
    if not counts:
        raise ConversionError(
            f"no MatMul weight could be quantized to {bits} bits", hint="the model's linear layers are not MatMuls with constant weights"
        )
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)
    return {
        "weights": f"int{bits} asymmetric, groups of {block}, int8 activations as it runs (accuracy_level {ACCURACY_LEVEL}); the tied head fp32",
        "group_size": block,
        "quantized_matmuls": counts,
        "method": "RTN (MatMulNBits)",
    }


def _block_size(group_size: int) -> int:
    """MatMulNBits quantizes in blocks of 16, 32, 64, 128 or 256 weights along the input (ONNX Runtime's MLAS)."""
    if group_size not in BLOCK_SIZES:
        raise ConversionError(
            f"ONNX Runtime's MatMulNBits takes --group-size {', '.join(map(str, BLOCK_SIZES))}, not {group_size}",
            hint="use 128 (the usual); one group per channel (-1) or larger groups: --to openvino (NNCF)",
        )
    return group_size


def _count(model, op_type: str) -> int:
    return sum(node.op_type == op_type for node in model.graph.node)


class OnnxLM:
    """One ONNX Runtime session stepping the KV-cache graph."""

    def __init__(self, source, threads: int | None = None) -> None:
        """`source`: the artifact's ModelSource or its path."""
        path = getattr(source, "path", source)
        import onnxruntime as ort

        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.name = "onnxruntime:cpu"

    def step(self, ids, keys, values):
        return tuple(self.session.run(None, {"input_ids": ids, "past_keys": keys, "past_values": values}))
