"""ONNX -> ONNX precision passes: fp16, dynamic int8, static int8 (QDQ) with calibration.

The int8 scheme is chosen for the CPU class (edgekit.isa) or accelerator the model is meant for, and
the reason is recorded: u8 x s8 where VNNI/AMX accumulate it in int32 (the fast path), u8 x s8 with
pair-safe weights on AVX2 (quantization.pair_safe), u8 x u8 where u8 x s8 would saturate and that is not
measured (x86 with AVX-512BW or SSSE3 and no VNNI), s8 x s8 on Arm, symmetric s8 for TensorRT.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from edgekit import registry
from edgekit.backends.onnx.box_decoding import box_decoding
from edgekit.backends.onnx.depthwise_scales import equalize
from edgekit.backends.onnx.exponential_ops import exponential_chains
from edgekit.backends.onnx.int8_rounding import WeightRounding
from edgekit.conversion import ConversionData, Converter, ConvertOptions
from edgekit.errors import ConversionError, EdgekitError
from edgekit.fileio import sha256_of_file
from edgekit.imports import import_attr
from edgekit.memo import Kept
from edgekit.quantization.scheme import Int8Scheme, choose_scheme
from edgekit.source import fingerprint

log = logging.getLogger("edgekit")
_kept_calibrations: Kept[tuple[str, dict]] = Kept(entries=4)  # histogram calibration caches by model, samples, scheme
_kept_orders: Kept[tuple[bytes | None, dict, float]] = Kept(entries=4)  # pair-safe channel orders by model and probe
ORDER_PROBE = 4  # calibration samples a channel reordering is checked on
ORDER_KEPT_BYTES = 256 << 20  # reordered models larger than this are not kept for a later conversion (edgekit.memo)
ORDER_TOLERANCE = 1e-4  # the largest change of the float outputs, relative to their range, that a channel reordering may make
SCALES_PROBE = 8  # calibration samples whose channel peaks set the depthwise channel scales (backends.onnx.depthwise_scales)


class OnnxQuantizer(Converter):
    """fp16 (onnxconverter-common), int8-dynamic and static int8 QDQ (onnxruntime.quantization)."""

    sources = ("onnx",)
    target_format = "onnx"
    precisions = {"fp32": False, "fp16": False, "int8": True, "int8-dynamic": False}
    package = "onnxruntime"
    import_name = "onnxruntime"
    accuracy_control = True
    honours = frozenset({"calib_method", "per_tensor"})
    # histogram: L2-optimal ranges from streamed histograms (backends.onnx.activation_ranges), the best measured on
    # EfficientNet-Lite0 (600 crops: cosine 0.9987 vs minmax 0.9975; percentile and entropy, on 64 samples since
    # ORT's own histograms on 300 exhaust memory, were below minmax: docs/int8-schemes.md)
    calib_methods = ("minmax", "entropy", "percentile", "histogram")
    default_calib_method = "histogram"

    def convert(self, model: Path, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        passes = {"fp32": _copy, "fp16": _to_fp16, "int8-dynamic": _int8_dynamic}
        try:
            if options.precision == "int8":
                return _int8_static(Path(model), out, options, data, specs)
            return passes[options.precision](Path(model), out, options, data.calibration, specs)
        except EdgekitError:
            raise
        except Exception as exc:  # onnxruntime.quantization raises plain exceptions for unsupported graphs
            raise ConversionError(
                f"{options.precision} quantization failed: {str(exc).splitlines()[0][:300]}",
                hint="exclude the failing node with --exclude NODE, or try another precision",
            ) from None


def _copy(model: Path, out: Path, options: ConvertOptions, samples, specs) -> dict:
    shutil.copyfile(model, out)
    return {}


def _to_fp16(model: Path, out: Path, options: ConvertOptions, samples, specs) -> dict:
    import onnx
    from onnxconverter_common import float16

    converted = float16.convert_float_to_float16(
        onnx.load(str(model)), keep_io_types=options.keep_io_types, node_block_list=list(options.exclude) or None
    )
    onnx.save(converted, str(out))
    return {
        "fp16": {
            "keep_io_types": options.keep_io_types,
            "note": "fp16 halves size; on CPUs without fp16 arithmetic ONNX Runtime computes many ops through casts, so it is rarely faster there",
        }
    }


PER_CHANNEL_OPSET = 13  # DequantizeLinear's `axis` (per-channel scales) exists from opset 13


def _preprocessed(model: Path, workdir: Path) -> tuple[Path, dict]:
    """ONNX Runtime's quantization pre-processing (shape inference + graph optimisation), on a model raised to
    opset 13 where it is older; returns the pre-processed file and what was done to the opset."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model, opset = _raised_opset(model, workdir)
    model, target = Path(model).resolve(), (workdir / "pre.onnx").resolve()
    # ORT's symbolic shape inference drops sym_shape_infer_temp.onnx into the current folder when it gives up: keep it in workdir
    with contextlib.chdir(workdir):
        try:
            quant_pre_process(str(model), str(target))
        except Exception as exc:  # symbolic shape inference fails on some exporter outputs
            log.info("symbolic shape inference failed (%s); pre-processing without it", str(exc).splitlines()[0][:200])
            quant_pre_process(str(model), str(target), skip_symbolic_shape=True)
    return target, opset


def _raised_opset(model: Path, workdir: Path) -> tuple[Path, dict]:
    """The model as is, or converted to opset 13 when it is older (per-channel Q/DQ needs it)."""
    import onnx
    from onnx import version_converter

    proto = onnx.load(str(model))
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), PER_CHANNEL_OPSET)
    if opset >= PER_CHANNEL_OPSET:
        return model, {}
    try:
        raised = version_converter.convert_version(proto, PER_CHANNEL_OPSET)
    except Exception as exc:  # the converter lacks an adapter for some op
        raise ConversionError(
            f"the model is opset {opset}, and converting it to opset {PER_CHANNEL_OPSET} for int8 Q/DQ failed: {str(exc).splitlines()[0][:300]}",
            hint=f"re-export the model at opset {PER_CHANNEL_OPSET} or newer (torch.onnx.export(..., opset_version=17))",
        ) from None
    target = workdir / "opset13.onnx"
    onnx.save(raised, str(target))
    return target, {
        "opset": {"from": opset, "to": PER_CHANNEL_OPSET, "why": "Q/DQ with per-channel scales (DequantizeLinear axis) needs opset 13"}
    }


def _int8_dynamic(model: Path, out: Path, options: ConvertOptions, samples, specs) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".work-") as tmp:  # beside the output: swept with it after a kill
        pre, opset = _preprocessed(model, Path(tmp))
        # ConvInteger has u8-weight kernels only on CPU: dynamic int8 covers MatMul/Gemm (Linear, attention, RNN).
        quantize_dynamic(
            str(pre),
            str(out),
            weight_type=QuantType.QInt8,
            per_channel=not options.per_tensor,
            op_types_to_quantize=["MatMul", "Gemm", "Attention", "LSTM", "GRU"],
            nodes_to_exclude=list(options.exclude),
        )
    return {
        "quantization": {
            "mode": "dynamic",
            "weights": "int8",
            "per_channel": not options.per_tensor,
            "ops": "MatMul/Gemm/Attention/RNN",
            "note": "activations are quantized at run time; convolutions stay float (use static int8 for CNNs)",
            **opset,
        }
    }


def _int8_static(model: Path, out: Path, options: ConvertOptions, data: ConversionData, specs) -> dict:
    from edgekit.backends.onnx.accuracy import check_declared_top1, ort_logits
    from edgekit.quantization.accuracy import Limit, Reading, accuracy_aware, on_target

    scheme = choose_scheme(options.for_target)
    control = None
    if data.validation is not None:
        check_declared_top1(Limit.of(options), model)  # a top-1 limit on a map or an embedding: refused before calibrating
    with tempfile.TemporaryDirectory(dir=Path(out).parent, prefix=".work-") as tmp, _stdout_to_log():  # swept after a kill
        pre, opset = _preprocessed(model, Path(tmp))
        order = _channel_order(pre, scheme, data.calibration)
        channel_scales, scales_notes = equalize(pre, data.calibration.head(SCALES_PROBE))
        quantizer = StaticQuantizer(pre, data.calibration, specs, options, scheme, Path(tmp), channel_scales)
        if data.validation is not None:
            logits = on_target(options.validate_on) if options.validate_on else ort_logits  # ONNX Runtime, in process
            control = accuracy_aware(quantizer, out, data.validation, Limit.of(options), logits, Reading.of(options))
            control["validated_on"] = options.validate_on or "onnxruntime:cpu"
            sensitivity = {"kept_in_float": [], "note": "accuracy control chose the float layers (accuracy_control)"}
        elif options.keep_sensitive:
            sensitivity = _keep_sensitive(quantizer, out)
        else:
            sensitivity = _all_int8(quantizer, out)
    excluded = [*options.exclude, *(k["name"] for k in sensitivity["kept_in_float"]), *(control or {}).get("reverted_to_float", [])]
    notes = {
        "quantization": {
            "mode": "static",
            "format": "QDQ",
            "per_channel": not options.per_tensor,
            "method": options.calibration.method,
            "for_target": options.for_target,
            "excluded": excluded,
            "exponential_in_float": quantizer.exponential,
            "box_decoding_in_float": quantizer.box_decoding,
            "outputs": "float: the op producing each output takes int8, its result is not rounded to 8 bits",
            "sensitivity": sensitivity,
            **scheme.to_dict(),
            **opset,
        }
    }
    if order is not None:
        notes["quantization"]["channel_order"] = order
    if scales_notes is not None:
        notes["quantization"]["depthwise_channel_scales"] = scales_notes
    if quantizer.rounding_notes:
        notes["quantization"]["weight_rounding"] = quantizer.rounding_notes
    notes["quantization"].update(quantizer.ranges_notes)
    if control is not None:
        notes["quantization"]["accuracy_control"] = control
    own = registry.own_int8_backend(options.for_target)
    if own is not None and own.acceptance_checks:  # say whether TensorRT would take it
        notes[f"{own.format}_checks"] = import_attr(own.acceptance_checks)(out)
    return notes


def _channel_order(pre: Path, scheme: Int8Scheme, samples) -> dict | None:
    """For pair-safe weights, the pre-processed model's channels reordered in place (backends.onnx.channel_order), kept
    only where the float outputs on a few calibration samples stay what they were; the notes, or None where the scheme
    has no pairs to keep. Kept for the process by the model's bytes and those samples' (edgekit.memo)."""
    if not scheme.pair_safe_weights:
        return None
    key = fingerprint({"model": sha256_of_file(pre), "probe": samples.head(ORDER_PROBE).digest()})
    ordered, notes, moved = _kept_orders.get_or_make(
        key, lambda: _reordered(pre, samples.head(ORDER_PROBE)), lambda made: len(made[0] or b"") <= ORDER_KEPT_BYTES
    )
    if ordered is None:
        log.warning("reordering the channels changed the float outputs (by %.2g of their range): quantizing the model as it is", moved)
        return {"spaces": [], "note": f"reordering changed the float outputs by {moved:.2g} of their range: left as it was"}
    pre.write_bytes(ordered)
    return dict(notes)


def _reordered(pre: Path, probe) -> tuple[bytes | None, dict, float]:
    """(the reordered model's bytes, or None where the float outputs on `probe` moved by more than ORDER_TOLERANCE of
    their range; its notes; how far they moved)."""
    import numpy as np

    from edgekit.backends.onnx.channel_order import reorder
    from edgekit.backends.onnx.sensitivity import outputs

    ordered = pre.with_name("ordered.onnx")
    notes = reorder(pre, ordered)
    before, after = outputs(pre, probe), outputs(ordered, probe)
    moved = max(float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-12)) for a, b in zip(before, after, strict=True))
    kept = ordered.read_bytes() if moved <= ORDER_TOLERANCE else None
    ordered.unlink()
    return kept, notes, moved


def _all_int8(quantizer: StaticQuantizer, out: Path) -> dict:
    quantizer.quantize([], out)
    return {"kept_in_float": [], "note": "off (--no-keep-sensitive): every layer in int8 but those --exclude names"}


def _keep_sensitive(quantizer: StaticQuantizer, out: Path) -> dict:
    """Keep in float the prefix of the sensitivity outliers (most sensitive first) that brings the outputs
    closest to fp32 on the probe samples, all-int8 included: layers interact (one kept alone may hurt)."""
    from edgekit.quantization.sensitivity import losses_by_kept, outliers, provenance

    ranked, total = quantizer.ranked()
    candidates = [s for s in outliers(ranked) if s.name not in quantizer.options.exclude]
    losses, fitted = [], []
    for count in range(len(candidates) + 1):
        trial = out.with_name(f"{out.stem}.keep{count}{out.suffix}")
        quantizer.quantize([s.name for s in candidates[:count]], trial)
        losses.append(quantizer.loss(trial))
        fitted.append(quantizer.rounding_notes)
    best = int(min(range(len(losses)), key=losses.__getitem__))
    quantizer.rounding_notes = fitted[best]  # what the pass did to the model kept
    out.with_name(f"{out.stem}.keep{best}{out.suffix}").replace(out)
    for count in range(len(losses)):
        out.with_name(f"{out.stem}.keep{count}{out.suffix}").unlink(missing_ok=True)
    notes = provenance(ranked, candidates[:best], quantizer.sensitivity_samples, total)
    notes["output_loss_by_kept"] = losses_by_kept(candidates, losses)
    return notes


class StaticQuantizer:
    """ONNX Runtime static QDQ quantization of one pre-processed model: calibrated once (ORT's calibration
    cache), quantized with any set of float layers; and the sensitivity measurements on a few samples."""

    def __init__(
        self, pre: Path, samples, specs, options: ConvertOptions, scheme: Int8Scheme, workdir: Path, channel_scales: Sequence[str] = ()
    ) -> None:
        import onnx

        from edgekit.quantization.sensitivity import SAMPLES

        self.pre, self.samples, self.specs, self.options, self.scheme = pre, samples, specs, options, scheme
        self.cache = workdir / "calibration.json"
        self.sensitivity_samples = min(SAMPLES, len(samples))
        self.probe = samples.head(self.sensitivity_samples)
        self._reference = None
        graph = onnx.load(str(pre), load_external_data=False)  # read once for the two ops-kept-float rules
        self.exponential = exponential_chains(graph)  # always float: no int8 scale holds exp(x) (backends.onnx.exponential_ops)
        self.box_decoding = box_decoding(graph)  # always float: int8 moves boxes by a pixel (quantization.box_decoding)
        self.channel_scales = list(channel_scales)  # always float: the depthwise channel scales' Muls and what lies between
        self.rounding = WeightRounding(pre, samples, scheme.pair_safe_weights)
        self.rounding_notes: dict = {}
        self.workdir = workdir
        self.ranges_notes: dict = {}
        self._quantized: dict = {}  # float layers -> (the model quantize wrote for them, its rounding notes)

    def _calibrate(self) -> None:
        """Fill the calibration cache once; for `histogram`, ONNX Runtime's minmax ranges then made L2-optimal, kept for
        the process by the model's bytes, the samples' and the scheme (two int8 conversions of one model calibrate once)."""
        if self.cache.exists() or self.options.calibration.method != "histogram":
            return
        key = fingerprint(
            {
                "model": sha256_of_file(self.pre),
                "samples": self.samples.digest(),
                "scheme": self.scheme.to_dict(),
                "per_tensor": self.options.per_tensor,
            }
        )
        cache, notes = _kept_calibrations.get_or_make(key, self._histogram_ranges)
        self.cache.write_text(cache)
        self.ranges_notes = dict(notes)

    def _histogram_ranges(self) -> tuple[str, dict]:
        """(the calibration cache's text, its notes): ONNX Runtime's minmax ranges made L2-optimal."""
        from edgekit.backends.onnx.activation_ranges import refine_cache

        _quantize_static(self.pre, self.workdir / "minmax.onnx", self.samples, self.options, self.scheme, [], self.cache)
        changed = refine_cache(self.cache, self.pre, self.samples, self.scheme.symmetric_activations)
        notes = {
            "activation_ranges": "L2-optimal from histograms of the calibration samples (backends.onnx.activation_ranges)",
            "tensors_narrowed": changed,
        }
        return self.cache.read_text(), notes

    def quantize(self, keep_float: list[str], out: Path, float_activations: list[str] = ()) -> None:
        """`out`: every supported layer in int8 but `keep_float` and the user's --exclude, its weight codes and
        biases then fitted to the calibration data (backends.onnx.int8_rounding), and the activations
        `float_activations` unrounded (backends.onnx.float_activations). The quantized model is kept in the work
        folder for a later call with the same float layers, which then only changes activations."""
        import onnx

        from edgekit.backends.onnx.float_activations import unrounded

        key = tuple(keep_float)
        if key in self._quantized:
            path, self.rounding_notes = self._quantized[key]
            shutil.copyfile(path, out)
        else:
            self._quantize(keep_float, out)
            self._quantized[key] = (self.workdir / f"float-layers-{len(self._quantized)}.onnx", self.rounding_notes)
            shutil.copyfile(out, self._quantized[key][0])
        if float_activations:
            onnx.save(unrounded(onnx.load(str(out)), list(float_activations)), str(out))

    def _quantize(self, keep_float: list[str], out: Path) -> None:
        self._calibrate()
        _quantize_static(
            self.pre,
            out,
            self.samples,
            self.options,
            self.scheme,
            [*self.options.exclude, *self.exponential, *self.box_decoding, *self.channel_scales, *keep_float],
            self.cache,
        )
        try:
            self.rounding_notes = self.rounding.apply(out)
        except Exception as exc:  # a graph the pass does not know: the quantizer's rounding stands, and says so
            log.warning("int8 weight fitting skipped: %s", str(exc).splitlines()[0][:200])
            self.rounding_notes = {"skipped": str(exc).splitlines()[0][:200]}

    def activations(self, int8: Path):
        """The activations of the QDQ model `int8`, ranked by what rounding each alone costs (float_activations)."""
        import onnx

        from edgekit.backends.onnx.float_activations import activation_sensitivity

        return activation_sensitivity(onnx.load(str(self.pre)), onnx.load(str(int8)), self.probe)

    def ranked(self, int8: Path | None = None):
        """The weight layers by sensitivity: with round-to-nearest int8 weights, or with those the QDQ model `int8`
        holds (fitted codes, corrected biases; only its int8 layers)."""
        import onnx

        from edgekit.backends.onnx.sensitivity import dequantized_layers, onnx_sensitivity

        quantized = None if int8 is None else dequantized_layers(onnx.load(str(int8)), onnx.load(str(self.pre)))
        return onnx_sensitivity(self.pre, self.probe, quantized=quantized)

    def loss(self, model: Path) -> float:
        """1 - mean cosine of `model`'s outputs vs the fp32 model's on the sensitivity samples."""
        from edgekit.backends.onnx.sensitivity import outputs
        from edgekit.quantization.sensitivity import output_loss

        if self._reference is None:
            self._reference = outputs(self.pre, self.probe)
        return output_loss(self._reference, outputs(model, self.probe))


def _quantize_static(
    pre: Path, out: Path, samples, options: ConvertOptions, scheme: Int8Scheme, exclude: list[str], cache: Path | None = None
) -> None:
    """onnxruntime.quantization.quantize_static with the scheme; `cache` keeps the calibrated ranges for the next call."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from edgekit.backends.onnx.calibration import ort_reader
    from edgekit.backends.onnx.pair_safe import overrides as pair_safe_overrides

    types = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
    overrides = pair_safe_overrides(onnx.load(str(pre)), options.per_tensor) if scheme.pair_safe_weights else {}
    methods = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
        "histogram": CalibrationMethod.MinMax,  # minmax ranges in the cache, rewritten L2-optimal (StaticQuantizer._calibrate)
    }
    quantize_static(
        str(pre),
        str(out),
        ort_reader(samples, *_calibration_batch(pre, samples)),
        quant_format=QuantFormat.QDQ,
        per_channel=not options.per_tensor,
        activation_type=types[scheme.activations],
        weight_type=types[scheme.weights],
        calibrate_method=methods[options.calibration.method],
        nodes_to_exclude=exclude,
        calibration_cache_path=cache,
        extra_options={
            "ActivationSymmetric": scheme.symmetric_activations,
            "WeightSymmetric": True,
            "CalibTensorRangeSymmetric": scheme.symmetric_activations,
            "QuantizeBias": scheme.quantize_bias,
            **({"TensorQuantOverrides": overrides} if overrides else {}),
        },
    )
    _float_boundaries(out, exclude)


def _float_boundaries(path: Path, kept_float: list[str]) -> None:
    """Where int8 meets float, keep float what is meant to be float: the graph outputs, and the input of each
    Conv/ConvTranspose/Gemm kept in float (converters after ORT's quantizer; unused Q/DQ nodes then dropped)."""
    import onnx

    model = onnx.load(str(path))
    _float_outputs(model.graph)
    _float_inputs(model.graph, set(kept_float))
    _drop_unused(model.graph)
    onnx.save(model, str(path))


def _float_outputs(graph) -> None:
    """Drop the QuantizeLinear -> DequantizeLinear pair in front of each graph output: the caller reads the
    outputs in float, and rounding them to 8 bits first only loses resolution (EfficientNet-Lite0's logits:
    +0.5 pt of top-1 agreement with fp32, since near-tied classes stay apart). The op producing an output
    still takes int8 inputs and weights."""
    producers = {o: n for n in graph.node for o in n.output}
    for output in graph.output:
        q = _quantized_by(producers, output.name)
        source = producers.get(q.input[0]) if q is not None else None
        if source is None or sum(q.output[0] in n.input for n in graph.node) > 1:
            continue
        floating = q.input[0]
        graph.node.remove(producers[output.name])  # the DequantizeLinear; the QuantizeLinear goes as unused
        for node in graph.node:
            node.input[:] = [output.name if name == floating else name for name in node.input]
        source.output[:] = [output.name if name == floating else name for name in source.output]
        producers[output.name] = source


def _float_inputs(graph, kept_float: set[str]) -> None:
    """A Conv/ConvTranspose/Gemm kept in float reads its int8 input through a Clip to the int8 range (numerically a
    no-op): fed by a DequantizeLinear directly, its float weights would get symmetric per-tensor int8 from ONNX
    Runtime's WeightBiasQuantization (a basic-level graph optimisation) when the session loads. EfficientNet-Lite0
    with its first depthwise convolution so "kept in float": 57.8% top-1 agreement with fp32 (all-int8 95.5%),
    95.0% with the Clip. The input stays int8, so the layer before it keeps its int8 kernel (feeding the float
    tensor itself instead gave 96.2% but ran that layer in float too)."""
    from edgekit.backends.onnx.float_activations import clip_node, quantized_range

    producers = {o: n for n in graph.node for o in n.output}
    inits = {i.name for i in graph.initializer}
    for node in list(graph.node):
        q = _quantized_by(producers, node.input[0]) if node.op_type in ("Conv", "ConvTranspose", "Gemm") else None
        if q is None or (node.name or node.output[0]) not in kept_float or q.input[1] not in inits or q.input[2] not in inits:
            continue
        clamped = f"{node.name or node.output[0]}_input_clamped"  # one per layer: two may share an input
        clip, bounds = clip_node(node.input[0], quantized_range(graph, q), clamped, clamped)
        graph.initializer.extend(bounds)
        graph.node.insert(list(graph.node).index(node), clip)
        node.input[0] = clamped


def _quantized_by(producers: dict, tensor: str):
    """The QuantizeLinear of the QuantizeLinear -> DequantizeLinear pair that produces `tensor`, or None."""
    dq = producers.get(tensor)
    q = producers.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
    return q if q is not None and q.op_type == "QuantizeLinear" else None


def _drop_unused(graph) -> None:
    """Remove the nodes whose outputs nothing reads (repeatedly) and the initializers no node reads."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {name for node in graph.node for name in node.input} | outputs
        unused = [n for n in graph.node if not any(o in read for o in n.output)]
        if not unused:
            break
        for node in unused:
            graph.node.remove(node)
    read = {name for node in graph.node for name in node.input}
    for init in [i for i in graph.initializer if i.name not in read]:
        graph.initializer.remove(init)


@contextlib.contextmanager
def _stdout_to_log():
    """onnxruntime.quantization prints progress to stdout; keep it out of the user's output."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        yield
    for line in captured.getvalue().splitlines():
        log.info("onnxruntime.quantization: %s", line)


def _calibration_batch(model: Path, samples) -> tuple[int, int | None]:
    """(batch, fixed) for the calibration reader: the batch the ONNX `model` fixes (the last batch filled up with
    repeated samples: a min or max does not change), or for a dynamic one equal batches of at most 16.

    Equal batches, because ONNX Runtime's histogram calibrators (entropy, percentile) fail on a
    smaller last batch (onnxruntime issue #18792).
    """
    from edgekit.artifact import fixed_batch
    from edgekit.backends.onnx.loader import read_onnx, value_specs

    fixed = fixed_batch(s for s in value_specs(read_onnx(model, load_weights=False).graph.input) if s.name in samples.arrays)
    if fixed:
        return fixed, fixed
    return next(size for size in range(min(16, len(samples)), 0, -1) if len(samples) % size == 0), None
