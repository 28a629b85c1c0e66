"""Zero pads that litert-torch leaves before a convolution, folded into the convolution's own SAME padding.

PyTorch has no asymmetric convolution padding, so a model ported from TensorFlow (EfficientNet's
Conv2dStaticSamePadding) pads explicitly before each stride-2 convolution. litert-torch folds such a pad in fp32,
but in PT2E int8 a quantize/dequantize pair sits between pad and convolution: the pad then stays in NCHW, with a
TRANSPOSE to NCHW before it and one back after, three copies of the tensor per convolution (EfficientNet-Lite0: 9 ops,
about a tenth of its int8 latency on XNNPACK). A pad on the NCHW graph input stays too, before the input's transpose.

Where the widths are exactly those of the convolution's SAME padding, the convolution reads the unpadded tensor and
pads itself: the same arithmetic (a quantized PAD writes the zero point, which SAME padding also stands for). The
rewritten model is kept only where its outputs equal the original's on a probe input.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from edgekit.errors import EdgekitError
from edgekit.source import open_source

log = logging.getLogger("edgekit")
TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def fold_same_pads(path: Path) -> int:
    """Rewrite the .tflite at `path` with its foldable pads folded (see the module's note); the number folded."""
    from ai_edge_litert import schema_py_generated as schema

    original = Path(path).read_bytes()
    try:
        model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(original, 0))
        _inline_buffers(model, original)
        graph = _Graph(model, schema)
        folded = sum(graph.fold(index) for index in range(len(graph.ops)))
        rewritten = graph.packed() if folded else None
    except Exception as exc:  # a flatbuffer this pass does not know: the model stays as litert-torch wrote it, and says so
        log.warning("pads not folded into their convolutions: %s", str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        return 0
    if rewritten is None:
        return 0
    probe = Path(path).with_name(f".{Path(path).stem}.folded.tflite")
    try:
        probe.write_bytes(rewritten)
        if not _same_outputs(Path(path), probe):
            log.warning("folding %d pads into their convolutions changed the outputs: the .tflite is kept as converted", folded)
            return 0
        probe.replace(path)
    except EdgekitError as exc:  # the rewritten model does not load: the fold is an optimisation, the conversion stands
        log.warning("pads not folded into their convolutions: the rewritten model did not load (%s)", exc.message.splitlines()[0][:200])
        return 0
    finally:
        probe.unlink(missing_ok=True)
    return folded


def _inline_buffers(model, original: bytes) -> None:
    """Constants the converter stored after the flatbuffer (a buffer's offset and size into the file: litert-torch's
    fp16 EfficientNet-Lite0) moved into it, so that packing the model again keeps them (packed, such a model lost its
    data: "Constant buffer 1 specified an out of range offset")."""
    for buffer in model.buffers:
        if buffer.offset > 1:  # 1 marks an empty buffer in that layout (the TFLite schema)
            buffer.data = np.frombuffer(original, np.uint8, buffer.size, buffer.offset)
            buffer.offset = buffer.size = 0


class _Graph:
    """The first subgraph of a TFLite ModelT, with its readers, and the ops a fold removes."""

    def __init__(self, model, schema) -> None:
        self.model, self.schema = model, schema
        self.graph = model.subgraphs[0]
        self.ops = self.graph.operators
        self.names = {number: name for name, number in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
        self.readers: dict[int, list[int]] = {}
        self.writer: dict[int, int] = {}
        for index, op in enumerate(self.ops):
            for tensor in op.inputs if op.inputs is not None else ():
                self.readers.setdefault(int(tensor), []).append(index)
            for tensor in op.outputs if op.outputs is not None else ():
                self.writer[int(tensor)] = index
        self.outputs = {int(t) for t in self.graph.outputs}
        self.removed: set[int] = set()

    def fold(self, index: int) -> bool:
        """Fold the pad at `index` where one of the two patterns holds; whether it did."""
        if self._name(index) != "PAD" or index in self.removed:
            return False
        before, after = self._only_reader_of_input(index), self._single_reader(index)
        if after is None or self._name(after) != "TRANSPOSE" or self._perm(after) != TO_NHWC:
            return False
        conv = self._single_reader(after)
        if conv is None or self._name(conv) not in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            return False
        if before is not None and self._name(before) == "TRANSPOSE" and self._perm(before) == TO_NCHW:  # NHWC -> NCHW, pad, back
            unpadded = int(self.ops[before].inputs[0])
            nhwc = [int(d) for d in self.graph.tensors[unpadded].shape]
            if not self._same_quantization(unpadded, int(self.ops[after].outputs[0])) or not self._pads_are_same(index, conv, nhwc):
                return False
            self._read(conv, unpadded)
            self.removed |= {before, index, after}
        else:  # a pad on an NCHW tensor (the graph input), then its transpose to NHWC
            unpadded, transposed = int(self.ops[index].inputs[0]), int(self.ops[after].outputs[0])
            nhwc = [int(d) for d in np.asarray(self.graph.tensors[unpadded].shape)[TO_NHWC]]
            if not self._same_quantization(unpadded, transposed) or not self._pads_are_same(index, conv, nhwc):
                return False
            self.ops[after].inputs = [unpadded, int(self.ops[after].inputs[1])]
            self._reshape(transposed, nhwc)
            self.removed.add(index)
        self.ops[conv].builtinOptions.padding = self.schema.Padding.SAME
        return True

    def packed(self) -> bytes:
        import flatbuffers

        self.graph.operators = [op for index, op in enumerate(self.ops) if index not in self.removed]
        builder = flatbuffers.Builder(1024)
        builder.Finish(self.model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    def _name(self, index: int) -> str:
        code = self.model.operatorCodes[self.ops[index].opcodeIndex]
        return self.names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "")

    def _single_reader(self, index: int) -> int | None:
        """The one op that reads op `index`'s output, where that output is read once and is no graph output."""
        tensor = int(self.ops[index].outputs[0])
        readers = self.readers.get(tensor, [])
        return readers[0] if len(readers) == 1 and tensor not in self.outputs else None

    def _only_reader_of_input(self, index: int) -> int | None:
        """The op that writes op `index`'s first input, where op `index` is its only reader."""
        writer = self.writer.get(int(self.ops[index].inputs[0]))
        return writer if writer is not None and self._single_reader(writer) == index else None

    def _constant(self, tensor: int) -> np.ndarray | None:
        spec = self.graph.tensors[tensor]
        data = self.model.buffers[spec.buffer].data
        if data is None:
            return None
        dtype = {self.schema.TensorType.INT32: np.int32, self.schema.TensorType.INT64: np.int64}.get(spec.type)
        return None if dtype is None else np.frombuffer(bytes(data), dtype=dtype).reshape(spec.shape)

    def _perm(self, index: int) -> list[int] | None:
        perm = self._constant(int(self.ops[index].inputs[1]))
        return None if perm is None else [int(p) for p in perm]

    def _same_quantization(self, a: int, b: int) -> bool:
        qa, qb = self.graph.tensors[a].quantization, self.graph.tensors[b].quantization
        scales = [None if q is None or q.scale is None else np.asarray(q.scale).tolist() for q in (qa, qb)]
        zeros = [None if q is None or q.zeroPoint is None else np.asarray(q.zeroPoint).tolist() for q in (qa, qb)]
        return scales[0] == scales[1] and zeros[0] == zeros[1]

    def _pads_are_same(self, pad: int, conv: int, shape: list[int]) -> bool:
        """Whether the NCHW widths of `pad` are exactly SAME padding for `conv` on the unpadded input of NHWC `shape`."""
        widths = self._constant(int(self.ops[pad].inputs[1]))
        signature = self.graph.tensors[int(self.ops[pad].inputs[0])].shapeSignature
        if widths is None or widths.shape != (4, 2) or len(shape) != 4 or (signature is not None and -1 in list(signature)[1:]):
            return False
        kernel = [int(d) for d in self.graph.tensors[int(self.ops[conv].inputs[1])].shape]
        options = self.ops[conv].builtinOptions
        if options.padding != self.schema.Padding.VALID:
            return False
        height = _same(shape[1], kernel[1], options.strideH, options.dilationHFactor)
        width = _same(shape[2], kernel[2], options.strideW, options.dilationWFactor)
        return widths.tolist() == [[0, 0], [0, 0], height, width]

    def _read(self, conv: int, tensor: int) -> None:
        inputs = [int(t) for t in self.ops[conv].inputs]
        self.ops[conv].inputs = [tensor, *inputs[1:]]

    def _reshape(self, tensor: int, shape: list[int]) -> None:
        spec = self.graph.tensors[tensor]
        if spec.shapeSignature is not None:
            spec.shapeSignature = [int(s) if int(s) == -1 else d for s, d in zip(spec.shapeSignature, shape, strict=True)]
        spec.shape = shape


def _same(size: int, kernel: int, stride: int, dilation: int) -> list[int]:
    """TensorFlow's SAME padding (before, after) of one spatial axis."""
    extent = (kernel - 1) * max(dilation, 1) + 1
    total = max((-(-size // stride) - 1) * stride + extent - size, 0)
    return [total // 2, total - total // 2]


def _same_outputs(original: Path, rewritten: Path) -> bool:
    """Whether both models give the same outputs on one random sample (exact for int8; float to rounding)."""
    a, b = _probe_outputs(original), _probe_outputs(rewritten)
    return all(np.allclose(x, y, rtol=1e-5, atol=1e-6 * max(np.abs(x).max(), 1e-12)) for x, y in zip(a, b, strict=True))


def _probe_outputs(path: Path) -> list[np.ndarray]:
    """The .tflite's outputs on LiteRT for one random sample, the probe pipeline.verify_written runs."""
    from edgekit.calibration import random_samples
    from edgekit.targets import make_runner

    runner = make_runner(open_source(str(path)), None, 1)
    runner.load()
    return [
        np.asarray(out, dtype=np.float64) for out in runner.infer(next(random_samples(runner.inputs, 1).batches(1, runner.fixed_batch())))
    ]
