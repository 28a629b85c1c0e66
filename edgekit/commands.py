"""Each command's options, declared once.

An `Option` is one declaration: its name (the Python API's keyword and the typer parameter), its default, its CLI flags,
its help text and the recipe key that holds it. Derived from these tuples: the typer commands (edgekit.cli.options.command),
the API functions' signatures and defaults (edgekit.api), the recipe schema's sections, their keys' types and defaults
(edgekit.recipe.schema, with RECIPE_SECTIONS' order and RECIPE_ONLY's keys), and the defaults of the library's option
classes with their mapping to a recipe's sections (`defaults_from`: CalibrationOptions and ConvertOptions in
edgekit.conversion, PruneOptions in edgekit.pruning). A new option is a line here and the code that reads it.

Strings and defaults only: `import edgekit; edgekit.convert` reads this without numpy or typer. Help texts name
the library's choices as `{formats}`, `{precisions}` and `{calib_methods}`; the CLI fills them in.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REQUIRED = ...  # the default of an option that has none (typer's spelling of "required")


@dataclass(frozen=True)
class Option:
    """One option of a command, as the command line, the Python API and a recipe know it."""

    name: str
    default: object
    flags: str  # "--output -o"; "--x/--no-x" declares both switches; "" makes it a positional CLI argument
    help: str
    type: type | None = None  # str, int, float, bool, Path, list (of str) or Callable; None: the default's type
    recipe: str | None = None  # "section.key" of a recipe that holds it; None: no recipe key does
    metavar: str | None = None
    cli: bool = True  # False: the API's alone (a progress callback)
    api: bool = True  # False: the command line's alone (run --quiet)
    annotation: str | None = None  # the API's annotation where the type's does not say it (bench takes one artifact too)
    minimum: int | None = None  # the smallest value the command line takes (a count of samples: 1)

    @property
    def kind(self) -> type:
        """The value's type: the declared one, else the default's (str for a default of None)."""
        if self.type is not None:
            return self.type
        return str if self.default is None or self.default is REQUIRED else type(self.default)

    def frozen_default(self) -> object:
        """The default as a frozen dataclass holds it: a list's as a tuple (its None: empty)."""
        return tuple(self.default or ()) if self.kind is list else self.default

    def at(self, recipe: str) -> Option:
        """The same option, kept under another recipe key (--preprocess: calibration's or validation's)."""
        return replace(self, recipe=recipe)

    def api_annotation(self) -> str:
        """The annotation the API's signature shows: 'str | None', 'str | Path', 'Sequence[str] | None', ..."""
        if self.annotation:
            return self.annotation
        kind = {Path: "str | Path", list: "Sequence[str]"}.get(self.kind, self.kind.__name__)
        return f"{kind} | None" if self.default is None else kind


@dataclass(frozen=True)
class Command:
    """A command's options in their CLI order; the API takes the first `positional` by position too."""

    name: str
    options: tuple[Option, ...]
    positional: int

    def api_options(self) -> tuple[Option, ...]:
        return tuple(o for o in self.options if o.api)

    def cli_options(self) -> tuple[Option, ...]:
        return tuple(o for o in self.options if o.cli)

    def signature(self, returns: object = inspect.Signature.empty) -> inspect.Signature:
        """The API function's signature: every keyword with its default."""
        return inspect.Signature([_parameter(o, i < self.positional) for i, o in enumerate(self.api_options())], return_annotation=returns)

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def recipe_values(self, section: str, values: dict) -> dict:
        """{key: value} of the options a recipe keeps in `section` (e.g. "convert"), from the command's `values`."""
        keys = {o.name: (o.recipe or "").partition(".") for o in self.options}
        return {key: values[name] for name, (where, _, key) in keys.items() if where == section}


def _parameter(option: Option, positional: bool) -> inspect.Parameter:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if positional else inspect.Parameter.KEYWORD_ONLY
    default = inspect.Parameter.empty if option.default is REQUIRED else option.default
    return inspect.Parameter(option.name, kind, default=default, annotation=option.api_annotation())


# --- options several commands take -----------------------------------------------------------------------------

INPUTS = Option(
    "inputs",
    None,
    "--input -i",
    "Model input as NAME:SHAPE[:DTYPE], e.g. image:1x3x224x224:float32, or a constant NAME=VALUE[:DTYPE], e.g. sr=16000:int64 (repeat per input).",
    list,
    recipe="model.inputs",
)
WEIGHTS = Option("weights", None, "--weights", "State dict for a module:factory model.", recipe="model.weights")
ALLOW_PICKLE = Option(
    "allow_pickle",
    False,
    "--allow-pickle",
    "Allow loading a whole pickled torch module. Unpickling runs code from the file: only for files you trust.",
    recipe="model.allow_pickle",
)
MODEL_OPTIONS = (INPUTS, WEIGHTS, ALLOW_PICKLE)
PREPROCESS = Option(
    "preprocess",
    None,
    "--preprocess",
    "Image preprocessing: key=value,... (resize, crop, scale, mean, std, order, layout, dtype) or a YAML/JSON file.",
)
TARGET = Option("target", None, "--target -t", "runtime:device, e.g. onnxruntime:cpu (see `edgekit targets`).", recipe="matrix.targets")
THREADS = Option("threads", None, "--threads", "Intra-op threads (default: all usable cores). Always recorded.", int, "latency.threads")
WARMUP = Option("warmup", 10, "--warmup", "Untimed runs before timing.", recipe="latency.warmup")
RUNS = Option("runs", 100, "--runs", "Timed runs; percentiles are over these.", recipe="latency.runs")
BATCH = Option("batch", 1, "--batch", "Batch size of the latency runs.", recipe="latency.batch")
REPORT = Option("report", None, "--report", "Write the JSON report here.", Path)
EMIT_RECIPE = Option("emit_recipe", None, "--emit-recipe", "Also write the recipe that reproduces this command (`edgekit run FILE`).", Path)
NO_CACHE = Option("no_cache", False, "--no-cache", "Convert every cell again, even when a cached artifact matches.")
QUIET = Option("quiet", False, "--quiet -q", "No progress, only the table and errors (for CI logs).", api=False)
RAY = (
    Option(
        "ray",
        False,
        "--ray",
        "Run the host-side work (conversion, calibration, accuracy) as Ray tasks; timings still run alone on their machine. "
        "`--ray` starts a local Ray; `--ray auto` or `--ray ray://HEAD:10001` joins a cluster (docs/scale.md).",
    ),
    Option("address", None, "", "With --ray: the Ray cluster to join (auto, ray://HEAD:10001).", metavar="[ADDRESS]"),
    Option("ray_cpus", None, "--ray-cpus", "CPUs of the local Ray that --ray starts (default: this machine's cores).", int),
)
PROGRESS = Option("progress", None, "", "A callable taking a line of text: hears of each step.", Callable, cli=False)

# Gate thresholds, shared by `validate` (applied to the new result) and `gate` (replacing a saved report's).
THRESHOLDS = (
    Option(
        "max_drop",
        None,
        "--max-drop",
        "Gate: fail (exit 2) if the task metric against the labels falls more than this many points (top-1 accuracy, mAP@0.5, "
        "mIoU or F1 x 100, Recall@1).",
        float,
        "gates.max_drop",
    ),
    Option(
        "min_cosine",
        None,
        "--min-cosine",
        "Gate: fail (exit 2) if any output's mean cosine similarity is below this.",
        float,
        "gates.min_cosine",
    ),
    Option(
        "min_agreement",
        None,
        "--min-agreement",
        "Gate: fail (exit 2) if the task metric against the reference is below this percent: top-1 agreement, mAP@0.5, "
        "F1 or mIoU of maps, recall@k.",
        float,
        "gates.min_agreement",
    ),
    Option(
        "min_snr",
        None,
        "--min-snr",
        "Gate: fail (exit 2) if any output's SNR vs the reference is below this many dB.",
        float,
        "gates.min_snr_db",
    ),
    Option(
        "max_npu_fallback",  # the option's old name; --max-npu-fallback stays an alias of --max-fallback
        None,
        "--max-fallback --max-npu-fallback",
        "Gate: fail (exit 2) if more than this percent of ops run outside the NPU or delegate (Ethos-U, XNNPACK).",
        float,
        "gates.max_npu_fallback",
    ),
    Option(
        "no_default_gates",
        False,
        "--no-default-gates",
        "Without thresholds of your own, non-finite outputs and a fidelity floor (cosine, SNR) still fail; this turns that off.",
    ),
)

# --- convert and quantize ------------------------------------------------------------------------------------------

CALIB = Option(
    "calib",
    None,
    "--calib",
    "Calibration data: .npz/.npy, a folder of images (labels: class subfolders or a labels.json), module:function or a zoo: data name.",
    recipe="calibration.path",
)
CALIB_SAMPLES = Option(
    "calib_samples",
    300,
    "--calib-samples",
    "Samples drawn (deterministically, --seed) from the calibration data.",
    recipe="calibration.samples",
    minimum=1,
)
QUANTIZATION = (
    CALIB,
    CALIB_SAMPLES,
    Option(
        "calib_method",
        "auto",
        "--calib-method",
        "Range estimation: {calib_methods} (auto: the backend's best measured method).",
        recipe="calibration.method",
    ),
    PREPROCESS.at("calibration.preprocess"),
    Option("per_tensor", False, "--per-tensor", "Per-tensor weight scales instead of per-channel.", recipe="convert.per_tensor"),
    Option("exclude", None, "--exclude", "Node name to keep in float (repeatable).", list, "convert.exclude"),
    Option(
        "keep_sensitive",
        True,
        "--keep-sensitive/--no-keep-sensitive",
        "int8: keep in float the few layers whose int8 sensitivity stands out (> 10x the median layer's, at most 3).",
        recipe="convert.keep_sensitive",
    ),
    Option(
        "for_target",
        "onnxruntime:cpu",
        "--for-target",
        "Where the model will run; picks the int8 scheme: a target on this host (onnxruntime:cpu), tensorrt:cuda (symmetric s8), "
        "an ISA class (x86-avx2, x86-vnni, x86-amx, arm64-dotprod, ... see docs/int8-schemes.md), a device preset (raspberry-pi-5) "
        "or an inventory device (NAME, runtime:device@NAME).",
        recipe="convert.for_target",
    ),
    Option("seed", 0, "--seed", "Seed of the calibration sampling.", recipe="calibration.seed"),
    Option(
        "random_calibration",
        False,
        "--random-calibration",
        "Calibrate on random data (plumbing only: the report marks the result as not meaningful).",
        recipe="calibration.random",
    ),
)
POSTPROCESS = Option(
    "postprocess",
    None,
    "--postprocess",
    "How a detector's outputs become boxes: detections, yolov5, yolov8, picodet (raw per-stride heads), or module:function "
    "(outputs dict -> per sample {{boxes, scores, classes}}); default: read from the outputs' layout.",
    recipe="validation.postprocess",
)
MASK_THRESHOLD = Option(
    "mask_threshold",
    0.5,
    "--mask-threshold",
    "Segmentation: the probability at which a single-channel map counts as foreground.",
    recipe="validation.mask_threshold",
)
ACCURACY_CONTROL = (
    Option(
        "val",
        None,
        "--val",
        "Validation data for accuracy-controlled int8 (ONNX, OpenVINO, TFLite from PyTorch), with a limit: --max-drop (and labels), "
        "--min-agreement or --min-cosine.",
        recipe="convert.val",
    ),
    Option("val_samples", 1000, "--val-samples", "Validation samples drawn for accuracy control.", recipe="convert.val_samples", minimum=1),
    Option(
        "max_drop",
        None,
        "--max-drop",
        "Accuracy control: keep layers in float until the drop against the labels is at most this many points (top-1, or a "
        "detector's mAP@0.5 on a zoo set with boxes).",
        float,
        "convert.max_drop",
    ),
    Option(
        "min_agreement",
        None,
        "--min-agreement",
        "Accuracy control: keep layers in float until top-1 agreement with fp32 is at least this percent.",
        float,
        "convert.min_agreement",
    ),
    Option(
        "min_cosine",
        None,
        "--min-cosine",
        "Accuracy control: keep layers in float until the first output's mean cosine with fp32's is at least this "
        "(embeddings, detection maps: models whose output is not a class).",
        float,
        "convert.min_cosine",
    ),
    Option(
        "min_map_kept",
        None,
        "--min-map-kept",
        "Accuracy control in the task's metric: keep layers in float until the int8 model keeps at least this fraction of "
        "the fp32 model's own results: a detector's mAP@0.5 of fp32's detections (decoded by --postprocess), a map's F1 (one "
        "channel, at --mask-threshold) or mIoU. No labels needed; without --val, a quarter of the calibration samples is held back.",
        float,
        "convert.min_map_kept",
    ),
    POSTPROCESS.at("convert.postprocess"),
    MASK_THRESHOLD.at("convert.mask_threshold"),
)
LANGUAGE_MODEL = (
    Option(
        "task",
        None,
        "--task",
        "text-generation: a causal language model (transformers *ForCausalLM) exported with its KV cache; precisions fp32, "
        "fp16, int8-weights, int4-weights. classification, detection, segmentation, embedding or regression: the metric int8's "
        "accuracy control reads (default: inferred from the outputs; detection with --postprocess).",
        recipe="convert.task",
    ),
    Option(
        "group_size",
        32,
        "--group-size",
        "int4/int8-weights of a language model: weights per quantization group along the input (-1: one per channel); "
        "32 is llama.cpp's block (on SmolLM2-135M, round to nearest: perplexity ratio 1.33 at 32, 1.38 at 128).",
        recipe="convert.group_size",
    ),
    Option(
        "ratio",
        None,
        "--ratio",
        "int4-weights: share of the weight layers in int4, the rest in int8, the most sensitive kept int8 (NNCF's measure; ExecuTorch: the int4 error on the calibration tokens) (default: "
        "the largest of 1, 0.8, 0.6, 0.4, 0.2 whose perplexity on held-back calibration text holds --max-ppl-ratio).",
        float,
        "convert.ratio",
    ),
    Option(
        "max_seq_len",
        512,
        "--max-seq-len",
        "A language model's longest prompt plus generated tokens.",
        recipe="convert.max_seq_len",
        minimum=2,
    ),
    Option(
        "kv_cache",
        "fp32",
        "--kv-cache",
        "text-generation: the KV cache's precision, fp32 or int8 (OpenVINO's u8 cache, its own default where attention is "
        "fused to the cache); an int8 cache is judged by perplexity on held-back text like int8 weights (1.01 with fp32 weights).",
        recipe="convert.kv_cache",
    ),
)
GENERATION = (
    Option(
        "prompt_len",
        32,
        "--prompt-len",
        "text-generation: prompt tokens (prefill; time to first token).",
        recipe="latency.prompt_len",
        minimum=1,
    ),
    Option(
        "new_tokens",
        32,
        "--new-tokens",
        "text-generation: tokens generated greedily (greedy_match, decode tokens/s).",
        recipe="latency.new_tokens",
        minimum=1,
    ),
)
MAX_PPL_RATIO = Option(
    "max_ppl_ratio",
    None,
    "--max-ppl-ratio",
    "text-generation: the highest perplexity over the reference's that passes (default by precision: int8-weights 1.01, "
    "int4-weights 1.03). validate/gate: fail (exit 2) above it. convert: judged on held-back calibration text; "
    "int4-weights keeps layers in int8 until it holds; not written (exit 2) if nothing holds it.",
    float,
    "gates.max_ppl_ratio",
)
LM_GATES = (
    MAX_PPL_RATIO,
    Option(
        "min_greedy_match",
        None,
        "--min-greedy-match",
        "Gate (text-generation): fail (exit 2) if fewer greedily decoded tokens than this share equal the reference's "
        "(default: fp32 1.0, fp16 0.99).",
        float,
        "gates.min_greedy_match",
    ),
)
VERIFY = Option(
    "verify",
    True,
    "--verify/--no-verify",
    "Run the new artifact and its source on the same inputs before it counts as written (fp32 must match, int8 be close); "
    "--no-verify skips it (recorded in the provenance).",
    recipe="convert.verify",
)
CONVERT = Command(
    "convert",
    (
        Option(
            "model",
            REQUIRED,
            "",
            "Model file (.pt2, TorchScript, .onnx, .keras, .h5, SavedModel), module:factory or zoo: name (zoo:fashion-cnn).",
            recipe="model.path",
        ),
        Option("to", REQUIRED, "--to", "Target format: {formats}.", recipe="matrix.formats"),
        Option("output", None, "--output -o", "Output file (default: next to the model, named by precision).", Path),
        *MODEL_OPTIONS,
        Option(
            "precision",
            "fp32",
            "--precision -p",
            "One of {precisions}. int8 needs --calib (a zoo: model brings its own).",
            recipe="matrix.precisions",
        ),
        *QUANTIZATION,
        *ACCURACY_CONTROL,
        Option(
            "model_type",
            None,
            "--model-type",
            "'transformer' for NNCF's transformer scheme (detected when not given).",
            recipe="convert.model_type",
        ),
        Option(
            "io_dtype",
            None,
            "--io-dtype",
            "TFLite full int8: float32, int8 or uint8 inputs/outputs (default float32; int8 with --device).",
            recipe="convert.io_dtype",
        ),
        Option("layout", "nchw", "--layout", "PyTorch -> TFLite: nhwc gives the model channels-last inputs.", recipe="convert.layout"),
        Option(
            "device",
            None,
            "--device",
            "Compile the int8 TFLite for an NPU with Vela, e.g. ethos-u55-128 (see the README).",
            recipe="convert.device",
        ),
        Option(
            "max_batch",
            64,
            "--max-batch",
            "TensorRT: the largest batch the engine takes (its optimisation profile).",
            recipe="convert.max_batch",
        ),
        Option("opt_batch", 1, "--opt-batch", "TensorRT: the batch the engine is tuned for.", recipe="convert.opt_batch"),
        *LANGUAGE_MODEL,
        MAX_PPL_RATIO,  # a recipe's one limit (gates:), which its convert cells hold too
        VERIFY,
        EMIT_RECIPE,
    ),
    positional=3,
)
QUANTIZE = Command(
    "quantize",
    (
        Option("model", REQUIRED, "", "An .onnx file.", recipe="model.path"),
        Option("output", REQUIRED, "--output -o", "Output .onnx file.", Path),
        Option("precision", "int8", "--precision -p", "One of {precisions}.", recipe="matrix.precisions"),
        *QUANTIZATION,
        VERIFY,
        EMIT_RECIPE,
    ),
    positional=2,
)

# --- prune ---------------------------------------------------------------------------------------------------------

FINETUNE = Option("finetune", None, "--finetune", "Labelled training data for fine-tuning (PyTorch).", recipe="compress.finetune")
EPOCHS = Option("epochs", 0, "--epochs", "Fine-tuning epochs (magnitude: a gradual sparsity schedule over them).", recipe="compress.epochs")
PRUNE = Command(
    "prune",
    (
        Option("model", REQUIRED, "", "PyTorch (.pt2, TorchScript, module:factory) or Keras model.", recipe="model.path"),
        Option(
            "method",
            REQUIRED,
            "--method -m",
            "magnitude (unstructured), cluster (weight sharing), channels (structured), lowrank (Linear/Dense SVD); "
            "a chain runs in order: magnitude,cluster.",
            recipe="compress.method",
        ),
        Option("output", REQUIRED, "--output -o", "The compressed model: .pt2 for PyTorch, .keras for Keras.", Path),
        *MODEL_OPTIONS,
        Option("sparsity", 0.5, "--sparsity", "magnitude: fraction of weights set to zero.", recipe="compress.sparsity"),
        Option("scope", "global", "--scope", "magnitude: global (one threshold) or layer (per layer).", recipe="compress.scope"),
        Option("channels", 0.3, "--channels", "channels: fraction of channels removed per layer.", recipe="compress.channels"),
        Option(
            "round_to",
            None,
            "--round-to",
            "channels: keep a multiple of N channels per layer, the width the kernels want (default: this host's ISA class's, "
            "e.g. 16 on AVX-512; 1 rounds nothing).",
            int,
            "compress.round_to",
            minimum=1,
        ),
        Option(
            "energy",
            None,
            "--energy",
            "lowrank: keep singular values holding this share of the energy (e.g. 0.9).",
            float,
            "compress.energy",
        ),
        Option("keep", 0.5, "--keep", "lowrank (without --energy): fraction of each layer's parameters to keep.", recipe="compress.keep"),
        Option("clusters", 16, "--clusters", "cluster: shared non-zero values per layer (k-means).", recipe="compress.clusters"),
        Option("init", "linear", "--init", "cluster: centroid initialisation, linear or density.", recipe="compress.init"),
        Option(
            "surgery",
            False,
            "--surgery",
            "magnitude + --epochs: dynamic network surgery (masks recomputed while fine-tuning; cut weights may return).",
            recipe="compress.surgery",
        ),
        Option("data", None, "--data -d", "Labelled data: batch-norm recalibration and the stage comparison.", recipe="validation.path"),
        FINETUNE,
        EPOCHS,
        Option("lr", 1e-3, "--lr", "Fine-tuning learning rate.", recipe="compress.lr"),
        Option(
            "precision",
            None,
            "--precision -p",
            "Also compare the pruned model at this precision (e.g. int8) in the stage table.",
            recipe="matrix.precisions",
        ),
        Option("calib", None, "--calib", "Calibration data for --precision int8.", recipe="calibration.path"),
        THREADS,
        Option("max_size_mb", None, "--max-size-mb", "Gate: the compressed model's size (exit 2 when over).", float, "gates.max_size_mb"),
        Option(
            "size_metric",
            "stored",
            "--size-metric",
            "What --max-size-mb limits: stored, gzip or coded (entropy-coded).",
            recipe="gates.size_metric",
        ),
        REPORT,
        EMIT_RECIPE,
    ),
    positional=3,
)

# --- validate and bench --------------------------------------------------------------------------------------------

TASK_OPTIONS = (
    Option(
        "task",
        None,
        "--task",
        "classification, detection, embedding, regression, segmentation or text-generation (decides the metrics); inferred when absent.",
        recipe="validation.task",
    ),
    Option(
        "labels",
        None,
        "--labels",
        "A task's labels: COCO instances .json or a YOLO labels folder (detection), a folder of PNG masks (segmentation); "
        "default: the zoo data's own.",
        recipe="validation.labels",
    ),
    POSTPROCESS,
    MASK_THRESHOLD,
    Option(
        "ignore_label",
        None,
        "--ignore-label",
        "A class label that marks a sample as unlabelled (e.g. -1): left out of the accuracy. Any other label outside "
        "[0, classes) is an error.",
        int,
        "validation.ignore_label",
    ),
)
DATA = Option(
    "data",
    None,
    "--data -d",
    ".npz keyed by input name (+ optional `labels`), .npy, image folder (labels: class subfolders or a labels.json), "
    "module:function or zoo: name "
    "(default: a zoo reference's validation set).",
    recipe="validation.path",
)
LIMIT = Option("limit", None, "--limit", "Use at most N samples of DATA (seeded).", int, "validation.limit", minimum=1)
VALIDATE = Command(
    "validate",
    (
        Option("artifact", REQUIRED, "", "The converted model (.onnx)."),
        Option(
            "reference",
            None,
            "--reference -r",
            "The original model: file, module:factory or zoo: name (default: the artifact's provenance).",
            recipe="model.path",
        ),
        DATA,
        TARGET,
        REPORT,
        EMIT_RECIPE,
        *MODEL_OPTIONS,
        LIMIT,
        PREPROCESS.at("validation.preprocess"),
        THREADS,
        WARMUP,
        RUNS,
        BATCH,
        *TASK_OPTIONS,
        *THRESHOLDS,
        *LM_GATES,
        *GENERATION,
    ),
    positional=3,
)
BENCH = Command(
    "bench",
    (
        Option("artifacts", REQUIRED, "", "One or more model files.", list, "model.path", annotation="str | Sequence[str]"),
        TARGET,
        THREADS,
        BATCH,
        WARMUP,
        RUNS,
        *MODEL_OPTIONS,
        REPORT,
        EMIT_RECIPE,
        Option(
            "task",
            None,
            "--task",
            "text-generation: time to first token and decode tokens/s (a language model's provenance says so when absent).",
            recipe="validation.task",
        ),
        *GENERATION,
    ),
    positional=1,
)

TUNE = Command(
    "tune",
    (
        Option("model", REQUIRED, "", "The model: a file, module:factory or zoo: name (zoo:fashion-cnn).", recipe="model.path"),
        Option(
            "targets",
            None,
            "--target -t",
            "Where it will run: runtime:device targets, comma-separated or repeated (onnxruntime:cpu,openvino:cpu,litert:cpu; "
            "a board: onnxruntime:cpu@NAME); each target's format is searched (default: ONNX Runtime, OpenVINO and LiteRT here).",
            list,
        ),
        Option(
            "precisions",
            None,
            "--precisions",
            "Precisions to try, comma-separated (default: fp32, fp16, int8; a language model: fp32, int8-weights, int4-weights).",
            list,
        ),
        Option(
            "thread_counts",
            None,
            "--threads",
            "Thread counts to try, comma-separated (default: 1, the powers of two below the usable cores, and their count).",
            list,
        ),
        *MODEL_OPTIONS,
        DATA,
        LIMIT,
        PREPROCESS.at("validation.preprocess"),
        CALIB,
        CALIB_SAMPLES,
        *TASK_OPTIONS,
        *LANGUAGE_MODEL[1:],  # --task is TASK_OPTIONS'
        *GENERATION,
        FINETUNE,
        EPOCHS,
        Option(
            "prune_channels",
            None,
            "--prune-channels",
            "With --finetune: the channel-pruning fractions tried (comma-separated; default 0.25,0.5), each pruned model "
            "fine-tuned (--epochs, 2 when not given) and searched like the model itself.",
            list,
        ),
        *THRESHOLDS,
        *LM_GATES,
        Option("budget", None, "--budget", "Try no new candidate after this long (90s, 20m, 1h); what was measured by then decides."),
        WARMUP,
        RUNS,
        BATCH,
        Option(
            "workdir",
            Path("edgekit-tune"),
            "--workdir",
            "Folder of the reports, the chosen artifact (chosen/) and the recipe that rebuilds it (chosen.yaml); conversions are cached there.",
            Path,
        ),
        NO_CACHE,
        QUIET,
        *RAY,
        PROGRESS,
    ),
    positional=1,
)

# --- run and gate --------------------------------------------------------------------------------------------------

RUN = Command(
    "run",
    (
        Option("recipe", REQUIRED, "", "The recipe (edgekit.yaml).", Path),
        NO_CACHE,
        QUIET,
        *RAY,
        PROGRESS,
    ),
    positional=1,
)
GATE = Command(
    "gate",
    (
        Option("saved", REQUIRED, "", "A JSON report from `edgekit run`, `validate`, `bench` or `prune`.", Path),
        Option("baseline", None, "--baseline", "An earlier report of the same kind: check latency against it.", Path),
        Option(
            "baseline_artifact",
            None,
            "--baseline-artifact",
            "The baseline's model file, when its report's artifact path is not at hand: both are re-timed here.",
        ),
        Option("tolerance", 0.10, "--tolerance", "The smallest latency regression that counts (0.10 = 10%)."),
        Option("max_rounds", 12, "--max-rounds", "Re-timing: at most this many A-B-B-A rounds before INCONCLUSIVE."),
        Option(
            "reports_only",
            False,
            "--reports-only",
            "Judge latency from the two reports' times, without re-timing (flags only gross changes).",
        ),
        Option("junit", None, "--junit", "Write the gate results as JUnit XML.", Path),
        *THRESHOLDS,
        *LM_GATES,
        PROGRESS,
    ),
    positional=1,
)

# --- a recipe's keys ----------------------------------------------------------------------------------------------


def _recipe_only(key: str, default: object, help: str, type: type | None = None) -> Option:
    return Option(key.rpartition(".")[2], default, "", help, type, key, cli=False, api=False)


# The recipe keys no command option fills as it is: a list where a command takes one value, a default of the recipe's own
# (convert.for_target: each cell's target), or a key of the recipe alone.
RECIPE_ONLY = (
    _recipe_only("version", 1, "The recipe format; this edgekit reads version 1."),
    _recipe_only("model.path", REQUIRED, "The model: a file, module:factory or zoo: name (a path is relative to the recipe)."),
    _recipe_only("convert.for_target", None, "Where the model will run; picks the int8 scheme (default: each cell's target)."),
    _recipe_only("matrix.formats", ("onnx",), "The formats to convert to (or the model's own: torch, keras).", list),
    _recipe_only("matrix.precisions", ("fp32", "int8"), "The precisions of each format (the model's own format: fp32 only).", list),
    _recipe_only("matrix.targets", {}, "format: [runtime:device, ...] (default: each format's runtime on this host).", dict),
    _recipe_only("report.dir", "edgekit-report", "The folder of the reports and the artifacts (relative to the recipe)."),
    _recipe_only("report.formats", ("json", "md", "html", "junit"), "The reports written.", list),
)
# Each section's keys in the recipe schema's order (the order of an unknown key's `allowed:` hint, of `edgekit run`'s
# report and of an emitted `convert:` section); each key's type and default are those of its RECIPE_ONLY entry, else of the options that name it. `gates:`
# is edgekit.metrics.gate.Thresholds, whose every limit defaults to None (not checked).
RECIPE_SECTIONS = {
    "model": ("path", "weights", "inputs", "allow_pickle"),
    "calibration": ("path", "samples", "method", "preprocess", "seed", "random"),
    "validation": ("path", "limit", "preprocess", "task", "labels", "postprocess", "mask_threshold", "ignore_label"),
    "compress": ("method", "sparsity", "scope", "channels", "energy", "keep", "epochs", "finetune", "clusters", "init", "surgery", "lr", "round_to"),
    "convert": (
        "for_target", "per_tensor", "exclude", "keep_sensitive", "verify", "model_type", "val", "val_samples", "max_drop", "min_agreement",
        "min_cosine", "min_map_kept", "postprocess", "mask_threshold", "io_dtype", "layout", "device", "max_batch", "opt_batch", "task", "group_size", "ratio", "max_seq_len",
        "kv_cache",
    ),
    "matrix": ("formats", "precisions", "targets"),
    "latency": ("threads", "batch", "warmup", "runs", "prompt_len", "new_tokens"),
    "report": ("dir", "formats"),
}  # fmt: skip


def declared_commands() -> tuple[Command, ...]:
    return tuple(value for value in globals().values() if isinstance(value, Command))


def recipe_option(key: str) -> Option:
    """The declaration of recipe key `key` ("latency.warmup"): its RECIPE_ONLY entry, else the first option naming it
    (tests/unit/test_commands.py checks that all the options naming one key declare one default and type)."""
    options = (*RECIPE_ONLY, *(o for command in declared_commands() for o in command.options))
    return next(o for o in options if o.recipe == key)


def defaults_from(command: Command, section: str, renamed: dict[str, str] | None = None, own: tuple[str, ...] = ()) -> Callable:
    """Class decorator, put under @dataclass: each annotated field takes the default of `command`'s option of its name
    (or of the one `renamed` gives it), and the class's `recipe_keys` maps the fields whose option a recipe keeps in
    `section` to their keys there. A field that no option declares, or one named in `own`, keeps the value it gives;
    a value of its own where an option declares one is refused, so each default is written once, here."""

    def fill(cls: type) -> type:
        declared = {name: command.option((renamed or {}).get(name, name)) for name in cls.__annotations__}
        declared = {name: option for name, option in declared.items() if option is not None}
        for name, option in declared.items():
            if name not in own:
                _fill_default(cls, name, option, command)
        cls.recipe_keys = {name: o.recipe.partition(".")[2] for name, o in declared.items() if (o.recipe or "").startswith(f"{section}.")}
        return cls

    return fill


def _fill_default(cls: type, name: str, option: Option, command: Command) -> None:
    if name in vars(cls):
        raise TypeError(f"{cls.__name__}.{name} gives a default of its own; `edgekit {command.name}`'s {option.name} declares it")
    if option.default is not REQUIRED:
        setattr(cls, name, option.frozen_default())


def from_section(cls: type, section: dict[str, Any]) -> dict[str, Any]:
    """`section`'s values (a recipe section's keys) under the field names of `cls` (a class `defaults_from` filled);
    keys it has no field for are left out."""
    return {name: section[key] for name, key in cls.recipe_keys.items() if key in section}


def section_of(options: object) -> dict[str, Any]:
    """The recipe section's {key: value} of `options` (an instance of a class `defaults_from` filled), in field order."""
    return {key: getattr(options, name) for name, key in type(options).recipe_keys.items()}


def options_markdown(choices: dict[str, str]) -> str:
    """docs/options.md: every command's options as this module declares them (`choices` fills {formats} and the like)."""
    lines = ["# Options", "", "Every option of every command, generated from `edgekit/commands.py` (the one place each is declared):",
             "`python -c 'from edgekit.cli.options import options_markdown; print(options_markdown(), end=\"\")' > docs/options.md`.",
             "The recipe key is where `edgekit run` reads the same setting; `--emit-recipe` writes it there."]  # fmt: skip
    for command in declared_commands():
        lines += ["", f"## edgekit {command.name}", "", "| option | default | recipe key | what it does |", "|---|---|---|---|"]
        lines += [_option_row(option, choices) for option in command.cli_options()]
    lines += ["", "## Recipe keys of no option", "", "Keys a recipe alone has, or whose default there is the recipe's own; every other key",
              "takes its option's default above. Each key of `gates:` (edgekit.metrics.gate.Thresholds) is unset, not checked, by default.",
              "", "| recipe key | default | what it does |", "|---|---|---|"]  # fmt: skip
    lines += [f"| `{o.recipe}` | {_shown(o.default)} | {o.help} |" for o in RECIPE_ONLY]
    return "\n".join(lines) + "\n"


def _shown(default: object) -> str:
    if default is REQUIRED:
        return "required"
    return f"`[{', '.join(default)}]`" if isinstance(default, tuple) else "" if default is None else f"`{default}`"


def _option_row(option: Option, choices: dict[str, str]) -> str:
    flags = " ".join(f"`{flag}`" for flag in option.flags.split()) or f"`{option.name.upper()}` (argument)"
    text = option.help.format_map(choices).replace("|", "\\|")
    return f"| {flags} | {_shown(option.default)} | {f'`{option.recipe}`' if option.recipe else ''} | {text} |"
