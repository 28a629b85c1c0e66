"""`convert --task text-generation`: a causal language model exported with its KV cache, checked, written atomically.

The format's backend writes the file (the registry's `lm_export`: ONNX with MatMulNBits, OpenVINO with NNCF's
compress_weights, ExecuTorch with torchao); this driver loads the model, reads calibration text (--calib, else the
text that ships with edgekit), checks the written artifact against PyTorch before it is moved into place, and writes
the provenance (the task and the cache's shape: what `validate` and `bench` step it by).

The check: fp32 and fp16 decode greedily what PyTorch decodes; int8 and int4 weights keep their perplexity on
calibration sequences held back from the compression within --max-ppl-ratio (default: the precision's gate). int4
without --ratio tries the largest share of its layers in int4 first (SHARES) and keeps the first that holds; an
artifact that holds nothing is not written (exit 2, its figure named) unless --no-verify.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np

from edgekit import progress, registry
from edgekit.artifact import Artifact
from edgekit.errors import EdgekitError, VerificationError
from edgekit.fileio import SIDECAR_SUFFIX, atomic_output, check_output_path, work_folder
from edgekit.imports import import_attr
from edgekit.machine import package_versions
from edgekit.metrics.gate import LM_GATES
from edgekit.metrics.language import perplexity_ratio, token_nll
from edgekit.native import third_party_quiet
from edgekit.provenance import describe, source_provenance
from edgekit.source import ModelSource
from edgekit.validation.text_generation import (
    PRECISIONS,
    TASK,
    TOKENIZER_SUFFIX,
    generate,
    load_tokens,
    sequence_logits,
    tokenizer_text,
)

log = logging.getLogger("edgekit")
VERIFY_PROMPTS = 2  # prompts greedily decoded by the artifact and PyTorch before the file counts as written
VERIFY_TOKENS = 16
VERIFY_PROMPT_LEN = 8
CALIB_SEQUENCES = 16  # calibration sequences (128 tokens each) for data-aware weight compression
HELD_BACK = 16  # further calibration sequences, kept from the compression, that the perplexity check reads
DEFAULT_CALIB = "zoo:stdlib-lm-calib"  # text that ships with edgekit (Python standard library source), read without --calib
SHARES = (1.0, 0.8, 0.6, 0.4, 0.2)  # int4 shares of the weight layers tried in turn where --ratio is not given
KV_CACHES = ("fp32", "int8")  # --kv-cache


def check_request(to: str, precision: str, ratio: float | None = None, kv_cache: str = "fp32") -> None:
    backend = registry.backend(to)
    if backend is None or backend.lm_export is None:
        writers = [b.format for b in registry.backends().values() if b.lm_export]
        raise EdgekitError(f"--task {TASK} does not write {to}", hint=f"choose --to {' or '.join(writers)}")
    if precision not in PRECISIONS:
        raise EdgekitError(
            f"--task {TASK} takes precision {', '.join(PRECISIONS)}, not {precision}", hint="int8 of activations is for CNNs"
        )
    if kv_cache not in KV_CACHES:
        raise EdgekitError(f"--kv-cache takes {' or '.join(KV_CACHES)}, not {kv_cache}", hint="e.g. --kv-cache int8")
    if kv_cache == "int8" and not backend.lm_int8_cache:
        held = [b.format for b in registry.backends().values() if b.lm_int8_cache]
        raise EdgekitError(f"an int8 KV cache is held by {', '.join(held)}, not {to}", hint="drop --kv-cache or choose --to openvino")
    if ratio is None:
        return
    if not 0 < ratio <= 1:
        raise EdgekitError(f"--ratio {ratio} is not a share of the layers", hint="pass a value in (0, 1], e.g. --ratio 0.8")
    if ratio < 1 and not (precision == "int4-weights" and backend.lm_mixed_precision):
        mixed = [b.format for b in registry.backends().values() if b.lm_mixed_precision]
        raise EdgekitError(
            f"--ratio {ratio} (some layers int8) is for int4-weights on {', '.join(mixed)}, not {precision} on {to}", hint="drop --ratio"
        )


def convert_lm(source: ModelSource, to: str, out: Path, options) -> Artifact:
    """Write `source` (a PyTorch causal LM) as `to` at options.precision with its KV cache; verified, then moved to `out`."""
    check_request(to, options.precision, options.ratio, options.kv_cache)
    check_output_path(Path(out), "-o", "model" + registry.backend(to).suffix)
    if options.max_seq_len < 2:
        raise EdgekitError(f"--max-seq-len {options.max_seq_len} leaves no room to generate", hint="e.g. --max-seq-len 512")
    with progress.step(f"loading {source.spec}"):
        model, shape, facts = import_attr(_source_backend(source).lm_loader)(source, options.max_seq_len)
        calibration, held_back, calib_note = _calibration(options, source)
    with atomic_output(Path(out)) as final, work_folder(Path(out)) as work:
        notes = _export_within_limit(source, model, shape, to, final, options, calibration, held_back, Path(work))
        _write_tokenizer(source, final)
        sidecar = _provenance(source, options, shape, notes, calib_note if notes.pop("calibrated", False) else None)
        sidecar["source"] |= facts
        sidecar["files"] = sorted(p.name for p in final.parent.iterdir() if p.name != final.name) + [final.name + SIDECAR_SUFFIX]
        final.with_name(final.name + SIDECAR_SUFFIX).write_text(json.dumps(sidecar, indent=2, default=str) + "\n")
    return describe(Path(out), to, options.precision, sidecar)


def _export_within_limit(source, model, shape, to: str, final: Path, options, calibration, held_back, work: Path) -> dict:
    """The artifact written to `final` and checked: for int4 without --ratio, at the largest share of SHARES whose
    perplexity holds the limit; the notes, with each share tried. Nothing holds: VerificationError (exit 2)."""
    limit = options.max_ppl_ratio or _gate(options)
    judged = options.verify and limit is not None and held_back is not None
    held_back = held_back[:, : shape.max_seq_len] if judged else held_back  # read within the cache the export holds
    shares = _shares(to, options) if judged else (options.ratio or 1.0,)
    reference = _nll(import_attr(_source_backend(source).lm_session)(model), shape, held_back) if judged else None
    tried = []
    for share in shares:
        trial = replace(options, ratio=share) if options.precision == "int4-weights" else options
        label = f" at {share:.0%} int4" if options.precision == "int4-weights" else ""
        with progress.step(f"{source.name}: exporting to {to} ({options.precision}{label})"), third_party_quiet():
            notes = import_attr(registry.backend(to).lm_export)(model, shape, final, trial, calibration, work)
        session = import_attr(registry.backend(to).lm_session)(final) if options.verify else None  # both checks read it
        held = _perplexity(to, session, shape, held_back, reference, limit) if judged else {}
        if held:
            tried.append({"ratio": share, "ppl_ratio": held["ppl_ratio"]})
            if not held["ppl_ratio"] <= limit:  # a NaN perplexity holds nothing
                continue
        notes["verified"] = _verified(source, model, shape, to, session, options, calibration) | held
        if held:  # held its perplexity: the greedy tokens' share is recorded, not judged
            notes["verified"]["result"] = "passed"
        return notes | ({"ratio_search": tried} if len(shares) > 1 else {})
    shares_tried = ", ".join(f"{t['ratio']:.0%}: {t['ppl_ratio']:.3f}" for t in tried)
    raise VerificationError(
        f"{options.precision} on {to}: perplexity {tried[-1]['ppl_ratio']:.3f}x the reference's on {len(held_back)} held-back "
        f"calibration sequences, above the limit {limit}"
        + (f" at every int4 share tried ({shares_tried})" if len(tried) > 1 else "")
        + ": not written",
        hint=_refusal_hint(to, options),
    )


def _gate(options) -> float | None:
    """The precision's perplexity gate; an int8 cache with float weights is held to int8 weights' (it is quantized)."""
    gate = LM_GATES[options.precision].max_ppl_ratio
    return gate if gate or options.kv_cache == "fp32" else LM_GATES["int8-weights"].max_ppl_ratio


def _shares(to: str, options) -> tuple[float, ...]:
    """int4 shares to try: --ratio's alone, else SHARES where the backend keeps layers in int8 (else all in int4)."""
    if options.precision != "int4-weights" or options.ratio is not None:
        return (options.ratio or 1.0,)
    return SHARES if registry.backend(to).lm_mixed_precision else (1.0,)


def _refusal_hint(to: str, options) -> str:
    mixed = [b.format for b in registry.backends().values() if b.lm_mixed_precision]
    if options.precision == "int4-weights" and to not in mixed:
        return f"--to {' or '.join(mixed)} keeps sensitive layers in int8 until it holds; -p int8-weights; --no-verify writes it anyway"
    lighter = "-p int8-weights, " if options.precision == "int4-weights" else ""
    return f"{lighter}a larger --max-ppl-ratio, or --no-verify to write it anyway"


def _nll(session, shape, ids: np.ndarray) -> np.ndarray:
    """Per-token negative log-likelihood [N, T-1] of each sequence, read in one prefill."""
    return np.concatenate([token_nll(sequence_logits(session, shape, row[None]), row[None]) for row in ids])


def _perplexity(to: str, session, shape, held_back: np.ndarray, reference: np.ndarray, limit: float) -> dict:
    """The written artifact's perplexity over the reference's on the held-back sequences, with its 95% interval."""
    with progress.step(f"perplexity of the written {to} on {len(held_back)} held-back sequences"):
        ours = _nll(session, shape, held_back)
    ratio, interval = perplexity_ratio(reference, ours)
    return {"ppl_ratio": round(ratio, 4), "ppl_ratio_ci95": [round(v, 4) for v in interval], "sequences": len(held_back), "limit": limit}


def _write_tokenizer(source: ModelSource, final: Path) -> None:
    """The source's tokenizer beside the artifact (MODEL.<ext>.tokenizer.json): a language model ships with it."""
    text = tokenizer_text(source)
    if text is not None:
        final.with_name(final.name + TOKENIZER_SUFFIX).write_text(text)


def _calibration(options, source: ModelSource) -> tuple[np.ndarray | None, np.ndarray | None, dict | None]:
    """Calibration token sequences for the compression, those held back for the perplexity check, and their
    provenance: from --calib (token ids or text), else the text that ships with edgekit read with the model's
    tokenizer (none: no data, no check). The provenance records them where the backend used them."""
    if options.precision in ("fp32", "fp16") and options.kv_cache == "fp32" and not options.calibration.data:
        return None, None, None  # greedy decoding checks them (from fixed prompts)
    data = options.calibration.data or DEFAULT_CALIB
    try:
        ids, provenance = load_tokens(data, source, CALIB_SEQUENCES + HELD_BACK)
    except EdgekitError as exc:
        if options.calibration.data:
            raise
        log.warning("no calibration: %s (pass --calib token ids: an .npz of input_ids)", exc.message)
        return None, None, None
    held = HELD_BACK if len(ids) >= CALIB_SEQUENCES + HELD_BACK else len(ids) // 3  # a short text: a third held back
    calibration, held_back = (ids[:-held], ids[-held:]) if held else (ids, None)
    provenance |= {"samples": len(calibration), "held_back": held, "default_of": options.calibration.default_of}
    return calibration, held_back, provenance


def _source_backend(source: ModelSource) -> registry.Backend:
    """The backend of the source's framework, where it loads causal LMs (the registry's `lm_loader`: PyTorch's)."""
    backend = registry.backend(source.family)
    if backend is None or backend.lm_loader is None:
        raise EdgekitError(
            f"{source.spec} is a {source.format} model: --task {TASK} takes a causal language model of "
            f"{registry.titles(lambda b: b.lm_loader)}",
            hint="give a transformers *ForCausalLM (a module:factory, a save_pretrained folder)",
        )
    return backend


def _verified(source: ModelSource, model, shape, to: str, session, options, calibration) -> dict:
    """Greedy decoding of the written artifact against PyTorch's from the same prompts (fp32 must match token for
    token; a quantized model's share is recorded, `validate` judges it). Prompts: calibration text, else fixed tokens."""
    if not options.verify:
        log.warning("not verified against PyTorch (--no-verify)")
        return {"result": "skipped", "why": "--no-verify"}
    length = min(VERIFY_PROMPT_LEN, shape.max_seq_len - 1)  # a prompt and at least one new token within the cache
    prompts = (
        calibration[:VERIFY_PROMPTS, :length]
        if calibration is not None
        else np.random.default_rng(0).integers(1, shape.vocab, (VERIFY_PROMPTS, length))
    )
    tokens = min(VERIFY_TOKENS, shape.max_seq_len - prompts.shape[1])
    with progress.step(f"decoding {len(prompts)} prompts with the written {to} and with PyTorch"):
        reference = import_attr(_source_backend(source).lm_session)(model)
        ours = np.stack([generate(session, shape, p, tokens)[0] for p in prompts])
        theirs = np.stack([generate(reference, shape, p, tokens)[0] for p in prompts])
    match = float(np.mean(ours == theirs))
    result = {"result": "passed", "greedy_match": match, "prompts": len(prompts), "tokens": tokens}
    if options.precision == "fp32" and options.kv_cache == "fp32" and match < 1.0:
        raise VerificationError(
            f"the fp32 {to} decodes differently from PyTorch ({match:.0%} of {ours.size} greedy tokens equal): not written",
            hint="report it with the model; --no-verify writes it anyway",
        )
    if match < 1.0:
        result["result"] = "differs"
    return result


def _provenance(source: ModelSource, options, shape, notes: dict, calibration: dict | None) -> dict:

    return {
        "source": source_provenance(source),
        "task": TASK,
        "precision": options.precision,
        "kv_cache": shape.to_dict(),
        "calibration": calibration,
        "options": {
            "group_size": options.group_size,
            "ratio": options.ratio,
            "max_seq_len": options.max_seq_len,
            "kv_cache": options.kv_cache,
        },
        "versions": package_versions(
            "torch",
            "transformers",
            "onnx",
            "onnxruntime",
            "onnxruntime-genai",
            "openvino",
            "nncf",
            "executorch",
            "torchao",
            "litert-torch",
            "ai-edge-quantizer",
        ),
        **notes,
    }
