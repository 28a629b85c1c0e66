"""The backend registry: one `Backend(...)` line per model format, made of strings only.

A declaration names the code of its backend as "module:attr" (each backend's code is one folder,
edgekit/backends/<format>/), so reading the registry imports no framework. The tables the rest of edgekit
reads (default targets, suffixes, formats, converters, runners, describers, summaries) are derived here.
Adding a format is adding its folder and one entry in `REGISTRY` (docs/backends.md); tests/contract/test_backends.py
runs the same checks on every registered backend and fails for one it has no contract entry for.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backend:
    """A model format and what edgekit does with it; code is named as "module:attr" and imported when used."""

    format: str  # the family name: what `--to` takes and what runners declare they run
    suffixes: dict[str, str]  # file suffix -> format name as `edgekit info` shows it; the first is what convert writes
    runners: dict[str, str]  # runtime name -> "module:Runner"
    default_targets: tuple[str, ...]  # runtime:device, the first is the default of `validate`/`bench`
    converters: dict[str, str] = field(default_factory=dict)  # source family -> "module:Converter" writing this format
    loader: str | None = None  # "module:function" (source) -> (model, input specs): what its converters take
    describer: str | None = None  # "module:function" (path, precision) -> Artifact; None for source formats
    summary: str | None = None  # "module:function" (path) -> dict of graph facts for `edgekit info`
    via: str | None = None  # a format built from another edgekit writes first (TensorRT from its ONNX)
    source_only: bool = False  # a framework's own model (torch, keras): read, never written by `convert`
    title: str = ""  # how messages name the format
    source_formats: tuple[str, ...] = ()  # what `edgekit info` calls the kinds of source model it reads (torch-export, ...)
    source_summary: str | None = None  # "module:function" (ModelSource) -> inputs, outputs, parameters, ops of a source model
    debug_capture: str | None = None  # "module:function" (ModelSource, partner capture) -> its tensors for `edgekit debug`
    pruner: str | None = None  # "module:function" (source, options, out, inputs, data, finetune) -> StageReport (`prune`)
    compares_stages: bool = False  # `prune --data` compares original / compressed / int8 stages (through ONNX)
    quantizes_in_place: bool = False  # `edgekit quantize` rewrites a model of this format at another precision
    quantized_check: str | None = None  # "module:function" (path) -> True when the file already holds Q/DQ nodes
    takes_quantized: bool = False  # int8 from a source that holds Q/DQ is built from them as they are (nothing calibrated)
    int8_for: str | None = None  # the --for-target its int8 is made for, whatever was asked (TensorRT: symmetric s8)
    acceptance_checks: str | None = None  # "module:function" (path of what it builds from) -> findings: will it take it
    npu_compiler: str | None = None  # module whose check_device / vela_command / compile_vela compile for an NPU (--device)
    own_input_shapes: bool = False  # its runner takes the shapes the file records (a TFLite from PyTorch may be NHWC)
    lm_export: str | None = None  # "module:function" (model, cache shape, out, options, calibration ids, work) -> notes
    lm_mixed_precision: bool = False  # its int4-weights takes --ratio < 1 (the most sensitive layers int8)
    lm_int8_cache: bool = False  # its runtime holds a language model's KV cache in int8 (--kv-cache int8)
    lm_session: str | None = None  # "module:Class" (ModelSource or path, threads): step(ids, keys, values) of a KV-cache LM
    lm_loader: str | None = None  # "module:function" (ModelSource, max_seq_len) -> (causal LM, CacheShape, facts): LM sources
    lm_tokenizer: str | None = None  # "module:function" (ModelSource) -> the model's tokenizer as tokenizers JSON, or None
    lm_sources: tuple[str, ...] = ()  # kinds of source model that hold a causal LM (convert takes --task text-generation)
    coded_size: str | None = None  # "module:function" (path) -> bytes with the weights coded as Deep Compression codes them
    macs: str | None = None  # "module:function" (path) -> multiply-accumulates per sample (None where a shape is unknown)

    @property
    def suffix(self) -> str:
        """The suffix `convert` writes."""
        return next(iter(self.suffixes), f".{self.format}")


# One entry per backend. Order is the order of `--to` choices and `edgekit targets`.
REGISTRY = (
    # ONNX, run by ONNX Runtime; quantized in place (QDQ int8, fp16).
    Backend(
        format="onnx",
        title="ONNX",
        debug_capture="edgekit.backends.onnx.debug:capture",
        quantizes_in_place=True,
        quantized_check="edgekit.backends.onnx.loader:has_qdq",
        suffixes={".onnx": "onnx"},
        runners={"onnxruntime": "edgekit.backends.onnx.runner:OnnxRuntimeRunner"},
        default_targets=("onnxruntime:cpu",),
        converters={
            "torch": "edgekit.backends.onnx.from_torch:TorchToOnnx",
            "keras": "edgekit.backends.onnx.from_keras:KerasToOnnx",
            "onnx": "edgekit.backends.onnx.quantize:OnnxQuantizer",
        },
        loader="edgekit.backends.onnx.loader:for_conversion",
        describer="edgekit.backends.onnx.loader:onnx_artifact",
        summary="edgekit.backends.onnx.loader:onnx_summary",
        coded_size="edgekit.backends.onnx.coding:coded_bytes",
        macs="edgekit.backends.onnx.macs:file_macs",
        lm_export="edgekit.backends.onnx.causal_lm:convert",
        lm_mixed_precision=True,
        lm_session="edgekit.backends.onnx.causal_lm:OnnxLM",
    ),
    # PyTorch: the models edgekit starts from (exported programs, TorchScript, module:factory), run eagerly or compiled.
    Backend(
        format="torch",
        title="PyTorch",
        source_formats=("torch-export", "torchscript", "torch-factory", "torch-pickle", "transformers", "gguf"),
        source_summary="edgekit.backends.torch.loader:torch_summary",
        debug_capture="edgekit.backends.onnx.torch_capture:capture",
        pruner="edgekit.backends.torch.prune:prune_torch",
        compares_stages=True,
        # TorchScript's .pt/.ts are told apart from state dicts by their content; a save_pretrained folder by its config.json
        suffixes={".pt2": "torch-export", ".gguf": "gguf"},
        runners={"torch": "edgekit.backends.torch.runner:TorchRunner"},
        default_targets=("torch:cpu",),
        loader="edgekit.backends.torch.loader:for_conversion",
        source_only=True,
        lm_loader="edgekit.backends.torch.causal_lm:load_with_cache",
        lm_tokenizer="edgekit.backends.torch.lm_files:tokenizer_json",
        lm_sources=("transformers", "gguf"),
        lm_session="edgekit.backends.torch.causal_lm:TorchLM",
    ),
    # OpenVINO IR (.xml + .bin), run by OpenVINO on CPU, GPU or NPU; int8 through NNCF or ONNX Runtime's QDQ.
    Backend(
        format="openvino",
        title="OpenVINO",
        debug_capture="edgekit.backends.openvino.debug:capture",
        takes_quantized=True,
        suffixes={".xml": "openvino"},
        runners={"openvino": "edgekit.backends.openvino.runner:OpenVinoRunner"},
        default_targets=("openvino:cpu",),
        converters={
            "torch": "edgekit.backends.openvino.convert:ToOpenVino",
            "onnx": "edgekit.backends.openvino.convert:ToOpenVino",
            "keras": "edgekit.backends.openvino.convert:ToOpenVino",
            "openvino": "edgekit.backends.passthrough:Passthrough",
        },
        loader="edgekit.conversion:file_for_conversion",
        describer="edgekit.backends.openvino.loader:openvino_artifact",
        summary="edgekit.backends.openvino.loader:openvino_summary",
        lm_export="edgekit.backends.openvino.causal_lm:convert",
        lm_mixed_precision=True,
        lm_int8_cache=True,
        lm_session="edgekit.backends.openvino.causal_lm:OpenVinoLM",
    ),
    # Keras 3 / TensorFlow: .keras, .h5 and SavedModel folders, run by TensorFlow.
    Backend(
        format="keras",
        title="Keras",
        source_formats=("keras", "keras-h5", "savedmodel"),
        source_summary="edgekit.backends.keras.loader:keras_summary",
        pruner="edgekit.backends.keras.prune:prune_keras",
        suffixes={".keras": "keras", ".h5": "keras-h5", ".hdf5": "keras-h5"},
        runners={"tensorflow": "edgekit.backends.keras.runner:TensorFlowRunner"},
        default_targets=("tensorflow:cpu",),
        loader="edgekit.backends.keras.loader:for_conversion",
        source_only=True,
    ),
    # TFLite / LiteRT flatbuffers, run by the LiteRT interpreter with XNNPACK; Vela compiles int8 ones for Ethos-U.
    Backend(
        format="tflite",
        title="TFLite",
        debug_capture="edgekit.backends.tflite.debug:capture",
        npu_compiler="edgekit.backends.tflite.ethos_u",
        own_input_shapes=True,
        suffixes={".tflite": "tflite"},
        runners={"litert": "edgekit.backends.tflite.runner:LiteRtRunner"},
        default_targets=("litert:cpu",),
        converters={
            "keras": "edgekit.backends.tflite.from_keras:KerasToTflite",
            "torch": "edgekit.backends.tflite.from_torch:TorchToTflite",
            "tflite": "edgekit.backends.passthrough:Passthrough",
        },
        loader="edgekit.conversion:file_for_conversion",
        lm_export="edgekit.backends.tflite.causal_lm:convert",
        lm_session="edgekit.backends.tflite.causal_lm:LiteRtLM",
        describer="edgekit.backends.tflite.loader:tflite_artifact",
        summary="edgekit.backends.tflite.loader:tflite_summary",
    ),
    # TensorRT engines, built on the GPU from the ONNX edgekit writes first (QDQ for int8).
    Backend(
        format="tensorrt",
        title="TensorRT",
        takes_quantized=True,
        int8_for="tensorrt:cuda",
        acceptance_checks="edgekit.backends.tensorrt.checks:findings",
        suffixes={".engine": "tensorrt", ".plan": "tensorrt"},
        runners={"tensorrt": "edgekit.backends.tensorrt.runner:TensorRtRunner"},
        default_targets=("tensorrt:cuda",),
        converters={"onnx": "edgekit.backends.tensorrt.from_onnx:OnnxToTensorrt"},
        describer="edgekit.backends.tensorrt.loader:tensorrt_artifact",
        summary="edgekit.backends.tensorrt.loader:tensorrt_summary",
        via="onnx",
    ),
    # ExecuTorch: PyTorch's edge runtime; .pte programs lowered to the XNNPACK delegate (fp32, PT2E int8).
    Backend(
        format="executorch",
        title="ExecuTorch",
        suffixes={".pte": "executorch"},
        runners={"executorch": "edgekit.backends.executorch.run:ExecuTorchRunner"},
        default_targets=("executorch:cpu",),
        converters={"torch": "edgekit.backends.executorch.convert:TorchToExecutorch"},
        describer="edgekit.backends.executorch.describe:executorch_artifact",
        summary="edgekit.backends.executorch.describe:executorch_summary",
        lm_export="edgekit.backends.executorch.causal_lm:convert",
        lm_mixed_precision=True,
        lm_session="edgekit.backends.executorch.causal_lm:ExecuTorchLM",
    ),
)


BY_FORMAT = {backend.format: backend for backend in REGISTRY}


def backends() -> dict[str, Backend]:
    """Every registered backend by format."""
    return BY_FORMAT


def backend(fmt: str) -> Backend | None:
    return backends().get(fmt)


def written_formats() -> tuple[str, ...]:
    """Formats `edgekit convert --to` writes."""
    return tuple(b.format for b in backends().values() if not b.source_only)


def runners() -> dict[str, str]:
    return {runtime: ref for b in backends().values() for runtime, ref in b.runners.items()}


def runtime_formats() -> dict[str, str]:
    """Runtime name (onnxruntime, openvino, litert, ...) -> the format it runs."""
    return {runtime: b.format for b in backends().values() for runtime in b.runners}


def default_targets() -> dict[str, list[str]]:
    return {b.format: list(b.default_targets) for b in backends().values()}


def converters() -> dict[tuple[str, str], str]:
    """(source family, format) -> "module:Converter"."""
    return {(source, b.format): ref for b in backends().values() for source, ref in b.converters.items()}


def suffix_formats() -> dict[str, str]:
    """File suffix -> format, for recognising a model file."""
    return {suffix: name for b in backends().values() for suffix, name in b.suffixes.items()}


def describers() -> dict[str, str]:
    return {b.format: b.describer for b in backends().values() if b.describer}


def summaries() -> dict[str, str]:
    return {b.format: b.summary for b in backends().values() if b.summary}


def families() -> dict[str, str]:
    """A source model's kind (torch-export, keras-h5, ...) -> the format whose runtime runs it (torch, keras)."""
    return {kind: b.format for b in backends().values() for kind in b.source_formats}


def source_formats() -> tuple[str, ...]:
    """Formats that are a framework's own model: the matrix runs them as they are, at fp32."""
    return tuple(b.format for b in backends().values() if b.source_only)


def titles(where) -> str:
    """'PyTorch and Keras': the names of the formats whose backend satisfies `where`, for messages."""
    names = [b.title for b in backends().values() if where(b)]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def lm_sources() -> tuple[str, ...]:
    """Kinds of source model that hold a causal language model (a save_pretrained folder, a GGUF file)."""
    return tuple(kind for b in backends().values() for kind in b.lm_sources)


def own_int8_backend(target: str) -> Backend | None:
    """The backend whose own int8 a target runs (TensorRT's symmetric s8: tensorrt:cuda, or ONNX Runtime's TensorRT
    provider onnxruntime:tensorrt), or None."""
    runtime, _, device = target.partition(":")
    return next((b for b in backends().values() if b.int8_for and (runtime in b.runners or device in b.runners)), None)
