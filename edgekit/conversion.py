"""The Converter template and the conversion options: one class per edge (torch->onnx, onnx->onnx quantization, ...),
each in its backend's folder, found through the registry's "module:Class" strings.

Each converter declares the families it reads, the format it writes and the precisions it makes
(and whether each needs calibration data). Planning, CLI choices and error messages derive from that.
`run_steps` runs planned steps one after another (the driver, converters.pipeline, and a backend that converts
through another format's steps both call it).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from edgekit import commands, progress, registry
from edgekit.artifact import TensorSpec
from edgekit.calibration.samples import Samples
from edgekit.errors import EdgekitError, RuntimeMissingError
from edgekit.imports import import_attr
from edgekit.native import third_party_quiet
from edgekit.provenance import describe
from edgekit.source import ModelSource

# Derived from the backend registry (edgekit/registry.py): "source family -> format": "module:Class" and the rest.
# Reading them imports no framework.
CONVERTERS = registry.converters()
# Formats reached through another: a TensorRT engine is built from the ONNX edgekit makes (QDQ for int8).
VIA = {b.format: b.via for b in registry.backends().values() if b.via}
FORMATS = registry.written_formats()
SUFFIXES = {b.format: b.suffix for b in registry.backends().values()}
PRECISIONS = ("fp32", "fp16", "int8", "int8-dynamic", "int8-weights", "int4-weights")
# auto: the quantizing backend's default_calib_method, the one measured best on it (docs/int8-schemes.md)
TEXT_GENERATION = "text-generation"  # convert --task of a causal language model
CALIB_METHODS = ("auto", "minmax", "entropy", "percentile", "histogram")


@dataclass(frozen=True)
@commands.defaults_from(
    commands.CONVERT,
    "calibration",
    renamed={"data": "calib", "samples": "calib_samples", "method": "calib_method", "allow_random": "random_calibration"},
)
class CalibrationOptions:
    """Where calibration data comes from and how ranges are computed (each default: `edgekit convert`'s option's)."""

    data: str | None
    samples: int
    method: str
    seed: int
    preprocess: str | None
    allow_random: bool
    default_of: str | None = None  # the zoo model whose declared calibration set this is (no --calib given)

    @classmethod
    def from_section(cls, section: dict, default_of: str | None = None) -> CalibrationOptions:
        """The options a `calibration:` section's keys (path, samples, method, ...) ask for."""
        return cls(**commands.from_section(cls, section), default_of=default_of)

    def section(self) -> dict:
        """The `calibration:` section of these options: {path, samples, method, seed, preprocess, random}."""
        return commands.section_of(self)


@dataclass(frozen=True)
@commands.defaults_from(
    commands.CONVERT, "convert", renamed={"validation_data": "val", "validation_samples": "val_samples"}, own=("io_dtype",)
)
class ConvertOptions:
    """Everything a conversion may take; each converter reads what applies to it. The defaults are `edgekit convert`'s
    options' (edgekit.commands); io_dtype's is what its option's None means without a device."""

    precision: str
    inputs: tuple[TensorSpec, ...]
    calibration: CalibrationOptions = field(default_factory=CalibrationOptions)
    per_tensor: bool
    exclude: tuple[str, ...]
    for_target: str
    keep_io_types: bool = True
    model_type: str | None  # "transformer" or None (detected)
    validation_data: str | None  # labelled data for accuracy-controlled int8
    validation_samples: int
    max_drop: float | None  # accuracy points; with validation_data turns on accuracy control
    min_agreement: float | None  # top-1 agreement with fp32 (%); with validation_data, accuracy control too
    min_cosine: float | None  # mean cosine of the first output with fp32's; with validation_data, accuracy control too
    min_map_kept: float | None  # the fraction of fp32's own task metric (mAP@0.5, map F1/mIoU) int8 keeps: accuracy control
    postprocess: str | None  # how accuracy control decodes a detector's outputs (metrics.detection.decode)
    mask_threshold: float  # where accuracy control binarizes a one-channel map
    validate_on: str | None = None  # the target accuracy control scores its steps on (None: the written format's runtime)
    io_dtype: str = "float32"  # TFLite full int8: float32, int8 or uint8 model inputs/outputs
    layout: str  # PyTorch -> TFLite: nhwc makes the model take channels-last inputs
    device: str | None  # an NPU to compile for after conversion, e.g. ethos-u55-128
    max_batch: int  # TensorRT: the largest batch of the engine's optimisation profile
    opt_batch: int  # TensorRT: the batch the profile is tuned for
    keep_sensitive: bool  # int8 keeps the layers whose sensitivity stands out in float (quantization.sensitivity)
    verify: bool  # run the artifact and its source on the same inputs before it counts as written (converters.verify)
    task: str | None  # text-generation: a causal LM with its KV cache (converters.causal_lm); else what accuracy control reads
    group_size: int  # int4/int8-weights of a language model: weights per quantization group (-1: per channel)
    ratio: float | None  # int4-weights: share of the weight layers in int4, the rest int8 (None: chosen by measurement)
    max_ppl_ratio: float | None  # a language model's highest perplexity ratio on held-back text (None: its precision's gate)
    max_seq_len: int  # a language model's longest prompt + generated tokens
    kv_cache: str  # a language model's KV cache precision: fp32, or int8 where the runtime holds it so (OpenVINO)

    @classmethod
    def from_section(cls, precision: str, inputs, calibration: CalibrationOptions, section: dict) -> ConvertOptions:
        """The options a `convert:` section's keys (val, per_tensor, ...) ask for; those it lacks keep their defaults.
        io_dtype unset is float32, or int8 with a device (an NPU takes int8 inputs)."""
        values = commands.from_section(cls, section)
        values["exclude"] = tuple(values.get("exclude") or ())
        values["io_dtype"] = values.get("io_dtype") or ("int8" if values.get("device") else "float32")
        return cls(precision, inputs, calibration, **values)

    def section(self) -> dict:
        """The `convert:` section of these options, by its keys (val, val_samples, ...)."""
        return commands.section_of(self)

    @property
    def language_model(self) -> bool:
        """A causal language model's conversion (--task text-generation: converters.causal_lm)."""
        return self.task == TEXT_GENERATION


@dataclass(frozen=True)
class ConversionData:
    """Data a conversion consumes, loaded and checked against the model's inputs before any work."""

    calibration: Samples | None = None
    validation: Samples | None = None


class Converter:
    """Capabilities on the class; `convert()` writes `out` and returns notes for the artifact's meta.

    `model` is what the source family loads to (a torch module, a path to an .onnx file, ...);
    `specs` are its inputs; `data` holds the bound calibration (and validation) samples.
    """

    sources: ClassVar[tuple[str, ...]]
    target_format: ClassVar[str]
    precisions: ClassVar[dict[str, bool]]  # precision -> needs calibration data
    package: ClassVar[str]
    import_name: ClassVar[str]
    # int8 that keeps sensitive layers in float to meet --max-drop, --min-agreement or --min-cosine (quantization.accuracy.Limit)
    accuracy_control: ClassVar[bool] = False
    # quantization options it applies ("calib_method", "per_tensor"); asking another of it is an error. None: not declared
    honours: ClassVar[frozenset[str] | None] = None
    calib_methods: ClassVar[tuple[str, ...]] = CALIB_METHODS  # the --calib-method values it has, when it honours one
    default_calib_method: ClassVar[str] = "minmax"  # what --calib-method auto (the default) means on it

    @classmethod
    def calib_methods_for(cls, options: ConvertOptions) -> tuple[str, ...]:
        """The --calib-method values this step has under `options` (ToOpenVino may quantize through ONNX Runtime)."""
        return cls.calib_methods

    @classmethod
    def require(cls) -> None:
        """Fail clearly when the backend is not installed; `pipeline.convert` calls it for every step before any work."""
        if importlib.util.find_spec(cls.import_name) is None:
            raise RuntimeMissingError(f"converting to {cls.target_format} needs {cls.package}", hint=f"pip install {cls.package}")

    def convert(self, model, specs: list[TensorSpec], out, options: ConvertOptions, data: ConversionData) -> dict:
        raise NotImplementedError


def converter_for(family: str, to: str) -> type[Converter]:
    """The registered converter from `family` to `to`."""
    key = (family, to)
    if key not in CONVERTERS:
        known = ", ".join(f"{a}->{b}" for a, b in CONVERTERS)
        raise EdgekitError(f"edgekit cannot convert {family} models to {to}", hint=f"supported: {known}")
    return import_attr(CONVERTERS[key], "converter")


def plan(family: str, to: str, precision: str) -> list[tuple[type[Converter], str]]:
    """Steps (converter, precision) from `family` to `to` at `precision`: direct, or fp32 then a pass on `to`,
    or (TensorRT) the steps to its ONNX at `precision`, then the build."""
    if to in VIA:
        last = converter_for(VIA[to], to)
        if precision not in last.precisions:
            raise EdgekitError(f"{to} does not support precision {precision}", hint=f"choose one of: {', '.join(last.precisions)}")
        return plan(family, VIA[to], precision) + [(last, precision)]
    first = converter_for(family, to)
    if precision in first.precisions:
        return [(first, precision)]
    if (to, to) in CONVERTERS and family != to:
        second = converter_for(to, to)
        if precision in second.precisions:
            return [(first, "fp32"), (second, precision)]
    supported = sorted(set(first.precisions) | set(converter_for(to, to).precisions if (to, to) in CONVERTERS else ()))
    raise EdgekitError(f"{to} from {family} does not support precision {precision}", hint=f"choose one of: {', '.join(supported)}")


def needs_calibration(steps: list[tuple[type[Converter], str]]) -> bool:
    return any(conv.precisions.get(precision, False) for conv, precision in steps)


def run_steps(steps, model, specs, final: Path, work: Path, options: ConvertOptions, data: ConversionData, name: str) -> dict:
    """Each step's converter on what the step before wrote (the first on the loaded `model`), the last one writing
    `final`, the others files in `work`; their notes merged."""
    notes: dict = {}
    current = model
    for i, (converter, precision) in enumerate(steps):
        step_out = final if i == len(steps) - 1 else work / f"step{i}{SUFFIXES[converter.target_format]}"
        with progress.step(f"{name}: {converter.__name__} ({precision})"), third_party_quiet():
            notes |= converter().convert(current, specs, step_out, dataclasses.replace(options, precision=precision), data)
        current = step_out
    return notes


def load_for_conversion(source: ModelSource, given: list[TensorSpec]):
    """What converters take for this source family (its backend's loader), and its input specs."""
    declared = registry.backend(source.family)
    if declared is None or declared.loader is None:
        raise EdgekitError(f"edgekit cannot convert {source.format} models", hint="convert from PyTorch, Keras or ONNX")
    return import_attr(declared.loader)(source, given)


def file_for_conversion(source: ModelSource, given: list[TensorSpec]):
    """A converted file (OpenVINO IR, TFLite) as a converter takes it: its path, and the inputs it describes."""
    return source.path, describe(source.path, source.family, None).inputs
