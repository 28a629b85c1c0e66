"""`convert --task text-generation`: a causal language model exported with its KV cache, checked, written atomically.

The format's backend writes the file (the registry's `lm_export`: ONNX with MatMulNBits, OpenVINO with NNCF's
compress_weights, ExecuTorch with torchao); this driver loads the model, reads calibration text, checks the
written artifact against PyTorch by greedy decoding through the cache before it is moved into place, and writes the
provenance (the task and the cache's shape: what `validate` and `bench` step it by).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from edgekit import progress, registry
from edgekit.artifact import Artifact
from edgekit.errors import EdgekitError
from edgekit.fileio import SIDECAR_SUFFIX, atomic_output, check_output_path, work_folder
from edgekit.imports import import_attr
from edgekit.machine import package_versions
from edgekit.native import third_party_quiet
from edgekit.provenance import describe, source_provenance
from edgekit.source import ModelSource
from edgekit.validation.text_generation import PRECISIONS, TASK, TOKENIZER_SUFFIX, generate, load_tokens, tokenizer_text

log = logging.getLogger("edgekit")
VERIFY_PROMPTS = 2  # prompts greedily decoded by the artifact and PyTorch before the file counts as written
VERIFY_TOKENS = 16
CALIB_SEQUENCES = 16  # calibration sequences (128 tokens each) for data-aware weight compression


def check_request(to: str, precision: str, ratio: float = 1.0) -> None:
    backend = registry.backend(to)
    if backend is None or backend.lm_export is None:
        writers = [b.format for b in registry.backends().values() if b.lm_export]
        raise EdgekitError(f"--task {TASK} does not write {to}", hint=f"choose --to {' or '.join(writers)}")
    if precision not in PRECISIONS:
        raise EdgekitError(
            f"--task {TASK} takes precision {', '.join(PRECISIONS)}, not {precision}", hint="int8 of activations is for CNNs"
        )
    if not 0 < ratio <= 1:
        raise EdgekitError(f"--ratio {ratio} is not a share of the layers", hint="pass a value in (0, 1], e.g. --ratio 0.8")
    if ratio < 1 and not (precision == "int4-weights" and backend.lm_mixed_precision):
        mixed = [b.format for b in registry.backends().values() if b.lm_mixed_precision]
        raise EdgekitError(
            f"--ratio {ratio} (some layers int8) is for int4-weights on {', '.join(mixed)}, not {precision} on {to}", hint="drop --ratio"
        )


def convert_lm(source: ModelSource, to: str, out: Path, options) -> Artifact:
    """Write `source` (a PyTorch causal LM) as `to` at options.precision with its KV cache; verified, then moved to `out`."""
    check_request(to, options.precision, options.ratio)
    check_output_path(Path(out), "-o", "model" + registry.backend(to).suffix)
    if options.max_seq_len < 2:
        raise EdgekitError(f"--max-seq-len {options.max_seq_len} leaves no room to generate", hint="e.g. --max-seq-len 512")
    with progress.step(f"loading {source.spec}"):
        model, shape, facts = import_attr(_source_backend(source).lm_loader)(source, options.max_seq_len)
        calibration, calib_note = _calibration(options, source)
    with atomic_output(Path(out)) as final, work_folder(Path(out)) as work:
        with progress.step(f"{source.name}: exporting to {to} ({options.precision})"), third_party_quiet():
            notes = import_attr(registry.backend(to).lm_export)(model, shape, final, options, calibration, Path(work))
        notes["verified"] = _verified(source, model, shape, to, final, options, calibration)
        _write_tokenizer(source, final)
        sidecar = _provenance(source, options, shape, notes, calib_note if notes.pop("calibrated", False) else None)
        sidecar["source"] |= facts
        sidecar["files"] = sorted(p.name for p in final.parent.iterdir() if p.name != final.name) + [final.name + SIDECAR_SUFFIX]
        final.with_name(final.name + SIDECAR_SUFFIX).write_text(json.dumps(sidecar, indent=2, default=str) + "\n")
    return describe(Path(out), to, options.precision, sidecar)


def _write_tokenizer(source: ModelSource, final: Path) -> None:
    """The source's tokenizer beside the artifact (MODEL.<ext>.tokenizer.json): a language model ships with it."""
    text = tokenizer_text(source)
    if text is not None:
        final.with_name(final.name + TOKENIZER_SUFFIX).write_text(text)


def _calibration(options, source: ModelSource) -> tuple[np.ndarray | None, dict | None]:
    """Calibration token sequences (--calib: token ids or text), or None: data-aware compression only with them (the
    provenance records them where the backend used them: its notes say `calibrated`)."""
    data = options.calibration.data
    if not data:
        return None, None
    ids, provenance = load_tokens(data, source, CALIB_SEQUENCES)
    return ids, provenance | {"default_of": options.calibration.default_of}


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


def _verified(source: ModelSource, model, shape, to: str, final: Path, options, calibration) -> dict:
    """Greedy decoding of the written artifact against PyTorch's from the same prompts (fp32 must match token for
    token; a quantized model's share is recorded, `validate` judges it). Prompts: calibration text, else fixed tokens."""
    if not options.verify:
        log.warning("not verified against PyTorch (--no-verify)")
        return {"result": "skipped", "why": "--no-verify"}
    prompts = (
        calibration[:VERIFY_PROMPTS, :8]
        if calibration is not None
        else np.random.default_rng(0).integers(1, shape.vocab, (VERIFY_PROMPTS, 8))
    )
    tokens = min(VERIFY_TOKENS, shape.max_seq_len - prompts.shape[1])
    with progress.step(f"decoding {len(prompts)} prompts with the written {to} and with PyTorch"):
        session = import_attr(registry.backend(to).lm_session)(final)
        reference = import_attr(_source_backend(source).lm_session)(model)
        ours = np.stack([generate(session, shape, p, tokens)[0] for p in prompts])
        theirs = np.stack([generate(reference, shape, p, tokens)[0] for p in prompts])
    match = float(np.mean(ours == theirs))
    result = {"result": "passed", "greedy_match": match, "prompts": len(prompts), "tokens": tokens}
    if options.precision == "fp32" and match < 1.0:
        raise EdgekitError(
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
        "options": {"group_size": options.group_size, "ratio": options.ratio, "max_seq_len": options.max_seq_len},
        "versions": package_versions("torch", "transformers", "onnx", "onnxruntime", "openvino", "nncf", "executorch", "torchao"),
        **notes,
    }
