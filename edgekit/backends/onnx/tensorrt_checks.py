"""Will TensorRT take this ONNX? Checks that need only `onnx`, so they run on any machine.

TensorRT 10+ builds int8 from explicit Q/DQ nodes (TensorRT 11 from nothing else). Its ONNX parser
takes symmetric int8 only (zero-point 0), and accuracy wants per-channel weight scales on Conv/Gemm/
MatMul. Ops are checked against the parser's support matrix (onnx-tensorrt docs/operators.md, TensorRT
9.2-10.x); ops in other domains need a TensorRT plugin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

# ONNX ops (default domain) that TensorRT's ONNX parser imports.
TENSORRT_OPS = frozenset(
    """Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool BatchNormalization Cast CastLike Ceil
    Celu Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum DepthToSpace DequantizeLinear Div
    Dropout Einsum Elu Equal Erf Exp Expand EyeLike Flatten Floor Gather GatherElements GatherND Gelu Gemm
    GlobalAveragePool GlobalLpPool GlobalMaxPool Greater GreaterOrEqual GridSample GroupNormalization GRU HardSigmoid
    HardSwish Hardmax Identity If ImageScaler InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu Less
    LessOrEqual Log LogSoftmax Loop LRN LSTM LpNormalization LpPool MatMul Max MaxPool Mean MeanVarianceNormalization
    Min Mish Mod Mul Neg NonMaxSuppression NonZero Not OneHot Or Pad ParametricSoftplus Pow PRelu QuantizeLinear
    RandomNormal RandomNormalLike RandomUniform RandomUniformLike Range Reciprocal ReduceL1 ReduceL2 ReduceLogSum
    ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Resize
    ReverseSequence RNN RoiAlign Round ScaledTanh Scan Scatter ScatterElements ScatterND Selu Shape Shrink Sigmoid Sign
    Sin Sinh Size Slice Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile
    TopK Transpose Trilu Unsqueeze Upsample Where Xor""".split()
)
OPSETS = range(9, 21)  # TensorRT 10.0's parser: opsets 9-20; later 10.x releases read newer ones
WEIGHT_OPS = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}  # op -> index of its weight input
QDQ = ("QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class Finding:
    """One thing TensorRT would reject (error) or that costs accuracy or speed there (warning)."""

    level: str  # "error" or "warning"
    check: str  # "op", "opset", "zero-point", "per-channel", "quantized"
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def check_for_tensorrt(path: Path) -> list[Finding]:
    """Every finding for the ONNX file at `path`, errors first."""
    from edgekit.backends.onnx.loader import read_onnx

    model = read_onnx(Path(path))
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    findings = _op_findings(graph) + _opset_findings(model) + _qdq_findings(graph, initializers)
    return sorted(findings, key=lambda f: f.level != "error")


def errors_of(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "error"]


def _op_findings(graph) -> list[Finding]:
    custom = sorted({f"{n.domain}::{n.op_type}" for n in graph.node if n.domain not in ("", "ai.onnx")})
    missing = sorted({n.op_type for n in graph.node if n.domain in ("", "ai.onnx") and n.op_type not in TENSORRT_OPS})
    findings = [Finding("error", "op", f"TensorRT's ONNX parser has no {op}; rewrite it or export without it") for op in missing]
    findings += [Finding("error", "op", f"custom op {op} needs a TensorRT plugin; quantize as QDQ, not QOperator") for op in custom]
    return findings


def _opset_findings(model) -> list[Finding]:
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset in OPSETS:
        return []
    return [Finding("warning", "opset", f"opset {opset} is outside TensorRT 10.0's 9-20; it needs a TensorRT release that reads it")]


def _qdq_findings(graph, initializers: dict) -> list[Finding]:
    from onnx import numpy_helper

    wrong_type, non_zero = {}, []
    for node in graph.node:
        if node.op_type not in QDQ or len(node.input) < 3 or node.input[2] not in initializers:
            continue
        zero_point = numpy_helper.to_array(initializers[node.input[2]])
        if zero_point.dtype.name != "int8":
            wrong_type.setdefault(zero_point.dtype.name, []).append(node.name)
        elif zero_point.any():
            non_zero.append(node.name)
    findings = [
        Finding("error", "zero-point", f"{len(names)} Q/DQ nodes are {dtype} ({_examples(names)}): TensorRT takes int8 Q/DQ only")
        for dtype, names in wrong_type.items()
    ]
    if non_zero:
        findings.append(
            Finding(
                "error",
                "zero-point",
                f"{len(non_zero)} Q/DQ nodes have non-zero zero-points ({_examples(non_zero)}): TensorRT takes symmetric int8 only",
            )
        )
    if findings:
        findings.append(
            Finding(
                "warning", "zero-point", "re-quantize with `edgekit quantize ... --for-target tensorrt:cuda` (symmetric s8, float biases)"
            )
        )
    return findings + _weight_findings(graph, initializers)


def _weight_findings(graph, initializers: dict) -> list[Finding]:
    """Per-tensor weight scales on Conv/Gemm/MatMul: accepted by TensorRT, but cost accuracy."""
    from onnx import numpy_helper

    dequantized = {n.output[0]: n for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] in initializers}
    quantized, per_tensor = [], []
    for node in graph.node:
        index = WEIGHT_OPS.get(node.op_type)
        if index is None or len(node.input) <= index or node.input[index] not in dequantized:
            continue
        quantized.append(node.name)
        scale_name = dequantized[node.input[index]].input[1]
        if scale_name in initializers and numpy_helper.to_array(initializers[scale_name]).size == 1:
            per_tensor.append(node.name)
    findings = []
    if per_tensor:
        message = (
            f"{len(per_tensor)} Conv/Gemm/MatMul have per-tensor weight scales ({_examples(per_tensor)}); per-channel keeps more accuracy"
        )
        findings.append(Finding("warning", "per-channel", message))
    if any(n.op_type in QDQ for n in graph.node) and not quantized:
        findings.append(
            Finding("warning", "quantized", "Q/DQ nodes found but no Conv/Gemm/MatMul has quantized weights: TensorRT runs it in float")
        )
    return findings


def _examples(names: list[str]) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:3])
    return f"e.g. {shown}" if len(names) > 3 else shown
