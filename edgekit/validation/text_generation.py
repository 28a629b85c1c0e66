"""`validate` and `bench` of a language model: the KV-cache artifact stepped token by token on its runtime.

Every runtime runs the signature edgekit.backends.torch.causal_lm defines (input_ids, past_keys, past_values ->
logits, present_keys, present_values): a session per backend (the registry's `lm_session`) has one method,
step(ids, keys, values). Validation reads the same token sequences through the artifact and the PyTorch model
(perplexity, KL, next-token agreement: edgekit.metrics.language) and decodes greedily from the same prompts through
the cache on both (greedy_match). The bench times prefill (time to first token) and single-token decode steps in a
fresh spawned process, as every other bench.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from edgekit import progress, registry
from edgekit.artifact import CacheShape
from edgekit.conversion import TEXT_GENERATION
from edgekit.errors import EdgekitError, ModelLoadError, first_line
from edgekit.fileio import sha256_of_file
from edgekit.imports import import_attr
from edgekit.machine import in_fresh_process, package_versions, peak_rss_mb
from edgekit.metrics.gate import Thresholds
from edgekit.metrics.language import compare_lm
from edgekit.metrics.latency import BenchResult, LatencyStats
from edgekit.provenance import model_size, read_provenance
from edgekit.report.schema import new_report
from edgekit.source import ModelSource
from edgekit.targets.base import default_threads
from edgekit.zoo.names import zoo_text, zoo_tokenizer

log = logging.getLogger("edgekit")
TASK = TEXT_GENERATION
PRECISIONS = ("fp32", "fp16", "int8-weights", "int4-weights")
SEQUENCE_LEN = 128  # tokens per sequence when the data is text
TOKENIZER_SUFFIX = ".tokenizer.json"  # the source's tokenizer, written beside a language-model artifact
GREEDY_PROMPTS = 8  # prompts decoded greedily (the first sequences' openings)


@dataclass(frozen=True)
class GenerationSettings:
    """The prompt and generation lengths of greedy decoding and of the bench."""

    prompt_len: int = 32
    new_tokens: int = 32
    runs: int = 5
    warmup: int = 1
    threads: int | None = None
    target: str | None = None


@dataclass(frozen=True)
class LMValidationRequest:
    artifact: ModelSource
    reference: ModelSource
    data: str | None = None
    limit: int | None = None
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    thresholds: Thresholds = field(default_factory=Thresholds)
    default_gates: bool = True


def is_language_model(source: ModelSource) -> bool:
    """Whether an artifact was written by `convert --task text-generation` (its provenance says so)."""
    provenance = read_provenance(source.path) if source.path else None
    return (provenance or {}).get("task") == TASK


def cache_of(source: ModelSource):
    """The artifact's KV cache shape, as its provenance records it."""
    provenance = read_provenance(source.path) if source.path else None
    if not provenance or "kv_cache" not in provenance:
        raise EdgekitError(
            f"{source.spec} does not record its KV cache (no provenance from `edgekit convert --task text-generation`)",
            hint=f"convert the model with `edgekit convert MODEL --task text-generation --to {'|'.join(_lm_formats())}`",
        )
    return CacheShape(**provenance["kv_cache"])


def _lm_formats() -> list[str]:
    """The formats `convert --task text-generation` writes."""
    return [b.format for b in registry.backends().values() if b.lm_export]


def open_session(source: ModelSource, threads: int | None = None, target: str | None = None):
    """A stepping session on the artifact's runtime, or the PyTorch model itself for a PyTorch source."""
    if target and "@" in target:
        raise EdgekitError(f"text generation on a board ({target}) is not supported yet", hint="validate on this machine's runtime")
    backend = registry.backend(source.family)
    if backend is None or backend.lm_session is None:
        raise EdgekitError(f"{source.format} models cannot be run as language models", hint=f"convert to {' or '.join(_lm_formats())}")
    if target and target.split(":")[0] not in backend.runners:
        raise EdgekitError(f"a {source.format} language model runs on {', '.join(backend.runners)}, not {target}", hint="drop --target")
    try:
        return import_attr(backend.lm_session)(source, threads)
    except EdgekitError:
        raise
    except Exception as exc:  # the runtimes raise their own types for a file they refuse
        raise ModelLoadError(
            f"{', '.join(backend.runners)} cannot load {source.spec}: {first_line(exc, 240)}",
            hint="convert it again with this edgekit; a file another tool wrote may use an op or layout this runtime refuses",
            cause=str(exc),
        ) from None


# --- data ---------------------------------------------------------------------------------------------------------


def load_tokens(
    data: str, reference: ModelSource, limit: int | None = None, seq_len: int = SEQUENCE_LEN, artifact: ModelSource | None = None
) -> tuple[np.ndarray, dict]:
    """Token sequences [N, T] from an .npz of `input_ids` (or a zoo name), or from a text file cut into `seq_len`-token
    sequences with the model's tokenizer (the reference's, else the one beside the artifact); with their provenance."""
    path = _data_path(data)
    if path.suffix == ".npz":
        with np.load(path) as npz:
            if "input_ids" not in npz:
                raise EdgekitError(f"{data} holds no `input_ids`", hint="save token ids as np.savez(FILE, input_ids=array[N, T])")
            ids = np.asarray(npz["input_ids"], np.int64)
        if ids.ndim != 2 or ids.shape[1] < 2:
            raise EdgekitError(f"{data}: input_ids must be [sequences, tokens >= 2], not {list(ids.shape)}", hint="one row per sequence")
        how = "token ids"
    else:
        tokenizer = _tokenizer(reference, *([artifact] if artifact else []))
        ids = np.asarray(tokenizer.encode(path.read_text(errors="replace")).ids, np.int64)
        ids = ids[: len(ids) // seq_len * seq_len].reshape(-1, seq_len)
        if not len(ids):
            raise EdgekitError(f"{data} holds fewer than {seq_len} tokens", hint="give a longer text")
        how = f"text cut into {seq_len}-token sequences"
    if limit:
        ids = ids[:limit]

    return ids, {"source": str(data), "samples": int(len(ids)), "tokens": int(ids.size), "read_as": how, "sha256": sha256_of_file(path)}


def _data_path(data: str) -> Path:

    path = zoo_text(data) if data.startswith("zoo:") else Path(data)
    if not path.is_file():
        raise EdgekitError(f"data not found: {data}", hint="an .npz of input_ids, a text file, or zoo:stdlib-lm-test")
    return path


def tokenizer_text(source: ModelSource) -> str | None:
    """A model's tokenizer as tokenizers JSON: the zoo model's, the one its framework reads from it (a save_pretrained
    folder's, a GGUF file's: the registry's lm_tokenizer), a tokenizer.json beside it, or the one edgekit wrote beside
    an artifact (MODEL.<ext>.tokenizer.json)."""

    if source.zoo and (found := zoo_tokenizer(source.zoo)) is not None:
        return found.read_text()
    backend = registry.backend(source.family)
    if backend is not None and backend.lm_tokenizer and (text := import_attr(backend.lm_tokenizer)(source)) is not None:
        return text
    if source.path is None:
        return None
    beside = (source.path.with_name(source.path.name + TOKENIZER_SUFFIX), source.path.parent / "tokenizer.json")
    return next((p.read_text() for p in beside if p.is_file()), None)


def _tokenizer(*models: ModelSource):
    """The tokenizer of the first of `models` that has one."""
    from tokenizers import Tokenizer

    text = next((t for m in models if (t := tokenizer_text(m)) is not None), None)
    if text is None:
        raise EdgekitError(
            f"no tokenizer for {models[0].spec} to read text with",
            hint="pass token ids instead (an .npz of input_ids), or put its tokenizer.json beside it",
        )
    return Tokenizer.from_str(text)


# --- stepping -----------------------------------------------------------------------------------------------------


def sequence_logits(session, shape, ids: np.ndarray) -> np.ndarray:
    """Logits [N, T, V] of each sequence read from an empty cache: in one prefill, or token by token where a session's
    `all_logits` is False: LiteRT's prefill gives its last position's only, and a quantized cache (OpenVINO's u8) is
    read only by the tokens after those it holds."""
    if getattr(session, "all_logits", True):
        return np.stack([session.step(row[None], shape.empty(), shape.empty())[0][0] for row in ids])
    return np.stack([_stepped_logits(session, shape, row) for row in ids])


def _stepped_logits(session, shape, row: np.ndarray) -> np.ndarray:
    keys = values = shape.empty()
    logits = []
    for token in row:
        step, keys, values = session.step(np.array([[token]], np.int64), keys, values)
        logits.append(step[0, -1])
    return np.stack(logits)


def generate(session, shape, prompt: np.ndarray, new_tokens: int) -> tuple[np.ndarray, float, list[float]]:
    """Greedy decoding through the cache: the new tokens, the prefill's ms (time to first token) and each decode step's."""
    start = time.perf_counter_ns()
    prefill = getattr(session, "step_last", session.step)  # a session that can give the last position's logits alone
    logits, keys, values = prefill(prompt[None].astype(np.int64), shape.empty(), shape.empty())
    token = int(np.argmax(logits[0, -1]))
    ttft = (time.perf_counter_ns() - start) / 1e6
    tokens, steps = [token], []
    for _ in range(new_tokens - 1):
        start = time.perf_counter_ns()
        logits, keys, values = session.step(np.array([[token]], np.int64), keys, values)
        token = int(np.argmax(logits[0, -1]))
        steps.append((time.perf_counter_ns() - start) / 1e6)
        tokens.append(token)
    return np.array(tokens), ttft, steps


def check_lengths(shape, prompt_len: int, new_tokens: int, ids: np.ndarray | None = None) -> None:
    if prompt_len < 1 or new_tokens < 1:
        raise EdgekitError("--prompt-len and --new-tokens must be at least 1", hint="e.g. --prompt-len 32 --new-tokens 32")
    if prompt_len + new_tokens > shape.max_seq_len:
        raise EdgekitError(
            f"--prompt-len {prompt_len} + --new-tokens {new_tokens} is past the {shape.max_seq_len} tokens the artifact was exported for",
            hint="shorten them, or convert again with a larger --max-seq-len",
        )
    if ids is not None and ids.shape[1] > shape.max_seq_len:
        raise EdgekitError(
            f"the data's sequences have {ids.shape[1]} tokens, past the export's {shape.max_seq_len}", hint="use shorter sequences"
        )
    if ids is not None and ids.shape[1] < prompt_len:
        raise EdgekitError(
            f"the data's sequences have {ids.shape[1]} tokens, fewer than --prompt-len {prompt_len}", hint="pass a smaller --prompt-len"
        )


# --- validate -----------------------------------------------------------------------------------------------------


def validate_lm(request: LMValidationRequest) -> dict:
    """The validation report of a language-model artifact against its PyTorch reference."""
    report, prompt = evaluate_lm(request)
    return add_lm_latency(report, request, prompt)


def evaluate_lm(request: LMValidationRequest) -> tuple[dict, np.ndarray]:
    """The host-side part: both models on the same sequences and prompts, no timing. The report so far and the
    prompt the timing will decode from."""
    from edgekit.provenance import report_entry

    shape = cache_of(request.artifact)
    settings = request.settings
    if request.data is None:
        raise EdgekitError(
            "validating a language model needs token data", hint="pass -d TOKENS.npz (input_ids), -d TEXT.txt or -d zoo:stdlib-lm-test"
        )
    ids, data = load_tokens(request.data, request.reference, request.limit, artifact=request.artifact)
    check_lengths(shape, settings.prompt_len, settings.new_tokens, ids)
    prompts = ids[:GREEDY_PROMPTS, : settings.prompt_len]
    with progress.step(f"{request.artifact.name}: loading it and the reference {request.reference.name}"):
        artifact = open_session(request.artifact, settings.threads, settings.target)
        reference = open_session(request.reference, settings.threads)
    with progress.step(f"{request.artifact.name}: {len(ids)} sequences and {len(prompts)} greedy decodes through it and the reference"):
        art_logits, ref_logits = sequence_logits(artifact, shape, ids), sequence_logits(reference, shape, ids)
        art_greedy = np.stack([generate(artifact, shape, p, settings.new_tokens)[0] for p in prompts])
        ref_greedy = np.stack([generate(reference, shape, p, settings.new_tokens)[0] for p in prompts])
    language = compare_lm(ids, ref_logits, art_logits, ref_greedy, art_greedy)
    language["nonfinite"] = int(np.size(art_logits) - np.isfinite(art_logits).sum())
    report = new_report("validate", (_package(artifact), "torch"))
    report.update(
        artifact=report_entry(request.artifact, artifact.name),
        reference=report_entry(request.reference, reference.name),
        target=artifact.name,
        threads=settings.threads or 0,
        data=data,
        task={"name": TASK, "how": "--task text-generation (the artifact's provenance)"},
        fidelity=[],
        accuracy=None,
        task_metrics=None,
        language=language,
    )
    return report, prompts[0]


def add_lm_latency(report: dict, request: LMValidationRequest, prompt: np.ndarray) -> dict:
    """The timing part (a fresh process on this machine), then the gate."""
    from edgekit.validation.validate import gate_section

    report["latency"] = bench_lm(request.artifact, replace(request.settings, target=report["target"]), prompt).to_dict()
    report["threads"] = report["latency"]["threads"]
    report["gate"] = gate_section(report, request.thresholds, request.default_gates)
    return report


# --- bench --------------------------------------------------------------------------------------------------------


def bench_lm(source: ModelSource, settings: GenerationSettings, prompt: np.ndarray | None = None) -> BenchResult:
    """Time to first token and decode tokens/s of one artifact, measured in a fresh spawned process."""
    with progress.step(f"{source.name}: timing prefill of {settings.prompt_len} tokens and {settings.new_tokens} decode steps"):
        return in_fresh_process(bench_lm_in_process, source, settings, prompt)


def bench_lm_in_process(source: ModelSource, settings: GenerationSettings, prompt: np.ndarray | None = None) -> BenchResult:
    """`settings.runs` greedy generations after `settings.warmup` untimed ones: each run's prefill ms (TTFT) and its
    decode steps' ms; tokens/s is the median over runs of (new tokens - 1) / decode time."""
    shape = cache_of(source)
    check_lengths(shape, settings.prompt_len, settings.new_tokens)
    start = time.perf_counter_ns()
    session = open_session(source, settings.threads, settings.target)
    load_ms = (time.perf_counter_ns() - start) / 1e6
    if prompt is None:
        prompt = np.random.default_rng(0).integers(1, shape.vocab, settings.prompt_len)
    prompt = np.asarray(prompt[: settings.prompt_len], np.int64)
    _, first_ms, _ = generate(session, shape, prompt, 1)
    prefill_rss = peak_rss_mb()  # loaded and one prefill: before any decode step or later prompt
    for _ in range(settings.warmup):
        generate(session, shape, prompt, settings.new_tokens)
    ttfts, rates, steps = [], [], []
    for _ in range(settings.runs):
        _, ttft, decode = generate(session, shape, prompt, settings.new_tokens)
        ttfts.append(ttft)
        rates.append(len(decode) * 1000 / sum(decode) if decode else 0.0)
        steps += decode
    step_ms = np.array(steps or [0.0])
    generation = {
        "prompt_len": settings.prompt_len,
        "new_tokens": settings.new_tokens,
        "runs": settings.runs,
        "ttft_ms": float(np.median(ttfts)),
        "ttft_ms_p90": float(np.percentile(ttfts, 90)),
        "tokens_per_s": float(np.median(rates)),
        "decode_ms_p50": float(np.percentile(step_ms, 50)),
        "decode_ms_p90": float(np.percentile(step_ms, 90)),
        "decode_ms_p99": float(np.percentile(step_ms, 99)),
        "peak_rss_prefill_mb": prefill_rss,
        "kv_cache_mb": shape.nbytes(getattr(session, "cache_tokens", settings.prompt_len + settings.new_tokens)) / 1e6,
    }
    return BenchResult(
        source.spec,
        session.name,
        _runtime_version(session),
        settings.threads or default_threads(),
        load_ms,
        first_ms,
        LatencyStats.from_times(step_ms, 1),
        peak_rss_mb(),
        model_size(source),
        [round(t, 4) for t in steps],
        generation=generation,
    )


def _package(session) -> str:
    """The runtime's package: the session's own where its runtime's name is not one (LiteRT's ai-edge-litert)."""
    return getattr(session, "package", session.name.split(":")[0])


def _runtime_version(session) -> str:
    return package_versions(_package(session)).get(_package(session), "")
