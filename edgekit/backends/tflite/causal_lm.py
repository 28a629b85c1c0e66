"""A causal language model as a LiteRT .tflite with prefill and decode signatures, the layout LiteRT-LM runs.

Written by litert-torch's generative export for transformers models (litert_torch.generative.export_hf) from the model
saved as a save_pretrained folder: `prefill_N` signatures (N in PREFILL_LENGTHS, up to --max-seq-len) and `decode`,
each taking the tokens, their positions, an additive attention mask and the whole KV cache (one [1, kv_heads,
max_seq_len, head_dim] tensor per layer and kind; values transposed), and giving the cache back with the new tokens
written in place. Prefill gives the logits of its last position only. Weights through AI Edge Quantizer, run by
XNNPACK's dynamically quantized kernels: int8-weights int8 per output channel (dynamic_wi8_afp32); int4-weights int4 in
blocks of --group-size (the quantizer's blocks: BLOCKS) on every fully connected layer but the head, the embedding and
the head int8 per channel (as NNCF's backup mode keeps them), each block's clipping chosen by OCTAV (no calibration data).

The fp32 export is kept in the process by the model's content, so the model's int8 and int4 (a recipe or `tune` over
precisions) quantize it again instead of exporting it again (the zoo LM: 33 s, then 1.9 s and 1.1 s).

LiteRtLM runs it on LiteRT's interpreter, carrying the cache from one signature call to the next.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np

from edgekit.artifact import check_cache_room, held_step
from edgekit.backends.torch.causal_lm import save_folder
from edgekit.errors import ConversionError, ModelLoadError
from edgekit.machine import in_fresh_process
from edgekit.memo import Kept
from edgekit.native import stderr_silenced, third_party_quiet

PREFILL_LENGTHS = (8, 32, 128)  # prefill signatures; a prompt is read in the longest that fit, its remainder by decode
BLOCKS = (32, 64, 128, 256)  # the int4 block sizes AI Edge Quantizer writes (QuantGranularity.BLOCKWISE_*)
DECODE = "decode"
HEAD = ".*logits.*"  # the output layer: its fully connected op writes the signatures' logits


def convert(model, shape, final: Path, options, calibration, work: Path) -> dict:
    """Write the language model as a .tflite at options.precision to `final`; the notes for the provenance. The fp32
    export is kept in this process by the model's content (EXPORTS), so its int8 and int4 only quantize it again."""
    if options.precision == "fp16":
        raise ConversionError("LiteRT language models are written in fp32, int8-weights or int4-weights", hint="choose one of those")
    fp32 = _fp32_export(model, shape, work)
    recipe, notes = _recipe(model, options, work)
    if recipe:
        _quantize(fp32, recipe, final)
    else:
        shutil.copyfile(fp32, final)
    signatures = [f"prefill_{n}" for n in _prefill_lengths(shape)] + [DECODE]
    held = f"in {len(signatures)} signatures' inputs and outputs, allocated whole ({shape.max_seq_len} tokens)"
    return notes | {"signatures": signatures, "kv_cache_held": held, "calibrated": False}


EXPORTS: Kept[bytes] = Kept(2)  # fp32 exports of at most KEEP_BYTES, by the model's content and the cache's shape
KEEP_BYTES = 256 * 2**20


def _fp32_export(model, shape, work: Path) -> Path:
    """The fp32 .tflite of `model` in `work`: exported, or this process's kept copy of the same model's export (a model
    whose weights pass KEEP_BYTES is exported each time, its weights not hashed for a key nothing is kept under)."""
    path = work / "fp32.tflite"
    if sum(p.numel() * p.element_size() for p in model.parameters()) > KEEP_BYTES:
        _exported(model, shape, work, path)
        return path
    data = EXPORTS.get_or_make(_content_key(model, shape), lambda: _exported(model, shape, work, path), keep=bool)
    if not path.exists():  # kept from an earlier conversion in this process
        path.write_bytes(data)
    return path


def _exported(model, shape, work: Path, path: Path) -> bytes:
    """litert-torch's export of `model` written to `path`; its bytes where small enough to keep (else none)."""
    folder, out = work / "hf", work / "litert"
    save_folder(model, folder)
    in_fresh_process(_export, folder, out, shape)  # see _export
    written = sorted(out.rglob("model.tflite"))
    if not written:
        raise ConversionError("litert-torch's export wrote no .tflite", hint="run again with --verbose to see its log")
    shutil.move(str(written[0]), path)
    shutil.rmtree(out, ignore_errors=True)
    return path.read_bytes() if path.stat().st_size <= KEEP_BYTES else b""


def _content_key(model, shape) -> str:
    """What an export follows from: the model's weights and buffers, its class and config, the cache's shape."""
    from edgekit.backends.torch.pt2e import content_digest

    settings = hashlib.sha256(f"{type(model).__name__}{model.config.to_json_string()}{shape}{PREFILL_LENGTHS}".encode())
    return content_digest(list(model.state_dict().items()), settings).hexdigest()


def _quantize(fp32: Path, recipe: Path, out: Path) -> None:
    """AI Edge Quantizer's `recipe` applied to the fp32 export, written to `out`."""
    from ai_edge_quantizer import quantizer

    try:
        with third_party_quiet(), stderr_silenced():  # its size and timing lines
            model = quantizer.Quantizer(str(fp32))
            model.load_quantization_recipe(str(recipe))
            model.quantize().export_model(str(out), overwrite=True)
    except Exception as exc:  # noqa: BLE001 - the quantizer raises many types
        raise ConversionError(f"AI Edge Quantizer could not quantize the language model: {str(exc).splitlines()[0][:240]}") from None


def _prefill_lengths(shape) -> list[int]:
    return [n for n in PREFILL_LENGTHS if n < shape.max_seq_len]


def _export(folder: Path, out: Path, shape) -> None:
    """litert-torch's export, run in a process of its own: after it, this process's LiteRT ran the int4 model to NaN
    logits (the converter's TensorFlow brings kernels of its own), and its memory is given back."""
    try:
        with third_party_quiet(), stderr_silenced():  # its progress; TensorFlow's and the converter's absl banners
            from litert_torch.generative.export_hf import export

            export.export(
                model=str(folder),
                output_dir=str(out),
                prefill_lengths=_prefill_lengths(shape),
                cache_length=shape.max_seq_len,
                quantization_recipe="none",
                prefill_logits=True,
                bundle_litert_lm=False,
            )
    except Exception as exc:  # noqa: BLE001 - torch.export, the converter and the quantizer raise many types
        raise ConversionError(f"LiteRT export of the language model failed: {str(exc).splitlines()[0][:240]}") from None


def _recipe(model, options, work: Path) -> tuple[Path | None, dict]:
    """AI Edge Quantizer's recipe for options.precision, written to `work` (None for fp32), and the provenance's notes."""
    if options.precision == "fp32":
        return None, {"weights": "fp32"}
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe_manager

    manager = recipe_manager.RecipeManager()
    linear, embedding = qtyping.TFLOperationName.FULLY_CONNECTED, qtyping.TFLOperationName.EMBEDDING_LOOKUP
    if options.precision == "int8-weights":
        manager.add_dynamic_config(regex=".*", operation_name=linear, num_bits=8)
        notes = {"weights": "int8 per channel, int8 dynamic activations (AI Edge Quantizer dynamic_wi8_afp32)", "method": "RTN"}
    else:
        block = _block(model, options.group_size)
        granularity = qtyping.QuantGranularity[f"BLOCKWISE_{block}"] if block else qtyping.QuantGranularity.CHANNELWISE
        octav = algorithm_manager.AlgorithmName.OCTAV  # clipping chosen per block: SmolLM2 1.29 against min-max's 1.34
        manager.add_dynamic_config(regex=".*", operation_name=linear, num_bits=4, granularity=granularity, algorithm_key=octav)
        manager.add_dynamic_config(regex=HEAD, operation_name=linear, num_bits=8)  # the latest matching rule wins
        manager.add_dynamic_config(regex=".*", operation_name=embedding, num_bits=8)
        groups = f"in blocks of {block}" if block else "per channel"
        notes = {
            "weights": f"int4 {groups}, symmetric, int8 dynamic activations; the embedding and the head int8 per channel (AI Edge Quantizer)",
            "group_size": block or -1,
            "method": "OCTAV (clipping per block, no data)",
        }
        if options.group_size > 0 and block != options.group_size:
            notes["group_fallback"] = {"asked": options.group_size, "taken": block or "per channel", "rule": _BLOCK_RULE}
    path = work / f"{options.precision}.recipe.json"
    path.write_text(json.dumps(manager.get_quantization_recipe(), default=str))
    return path, notes


_BLOCK_RULE = "the largest of AI Edge Quantizer's blocks (32-256) at most --group-size that divides every layer's input width"


def _block(model, group_size: int) -> int | None:
    """The int4 block: --group-size where the quantizer writes it and it divides every linear layer's input width, else
    the largest block that does (None: one scale per channel, for --group-size -1 or where no block divides)."""
    import torch

    widths = {m.in_features for m in model.modules() if isinstance(m, torch.nn.Linear)}
    fitting = [b for b in BLOCKS if b <= max(group_size, 0) and all(w % b == 0 for w in widths)]
    return fitting[-1] if fitting else None


class LiteRtLM:
    """The .tflite's signatures stepping the KV cache on LiteRT's interpreter (XNNPACK).

    Each signature's tensors are allocated once and read and written through numpy views of the interpreter's memory:
    a call writes its tokens, positions and mask, copies the cache from the outputs of the signature that ran last into
    its own inputs (one copy of the cache per call, where the signature runner makes two and allocates), and invokes.
    SmolLM2-135M int8 at a 512-token export: 66-99 -> 111-114 tokens/s, the same tokens.

    Like OpenVINO's stateful models, step() takes and gives back zero-byte stand-ins of the cache's shape (their
    length axis counts the tokens held); the positions come from the past's length, and a past of 0 starts afresh
    (the mask hides whatever an earlier sequence left). A prompt is read by the longest prefill signatures that fit,
    then by decode; only its last position's logits come back (`all_logits` False: validation reads a sequence's
    logits token by token).

    LiteRT's CompiledModel, whose tensor buffers would keep the cache in place, is not used: at 2 threads, in a process
    where OpenVINO had converted a model, it decoded the zoo LM wrongly in some runs and rightly in others (the
    interpreter: rightly in every run)."""

    name = "litert:cpu"
    package = "ai-edge-litert"
    all_logits = False

    def __init__(self, source, threads: int | None = None) -> None:
        """`source`: the artifact's ModelSource or its path."""
        from edgekit.backends.tflite.interpreter import interpreter_class
        from edgekit.targets.base import default_threads

        path = getattr(source, "path", source)
        with stderr_silenced():  # the XNNPACK delegate's banner
            self.interpreter = interpreter_class()[0](model_path=str(path), num_threads=threads or default_threads())
            signatures = self.interpreter.get_signature_list()
            if DECODE not in signatures:
                raise ModelLoadError(
                    f"{path} has no `{DECODE}` signature: not a language model edgekit or LiteRT-LM wrote",
                    hint="convert it with `edgekit convert MODEL --task text-generation --to tflite`",
                )
            self.signatures = {name: _Signature(self.interpreter, name) for name in signatures}
            decode = self.signatures[DECODE]
            self.names = [k for k in decode.inputs if k.startswith("kv_cache_")]
            for name in self.names:
                decode.inputs[name][...] = 0
            self.last: _Signature | None = None  # the signature whose outputs hold the cache
            self.lengths = sorted((int(k.split("_")[1]) for k in signatures if k.startswith("prefill_")), reverse=True)
            self.length = self.cache_tokens = int(decode.inputs["mask"].shape[-1])  # the cache is allocated whole
            self._run(DECODE, np.zeros(1, np.int32), 0)  # the delegate is made at the first call, with its banner

    def step(self, ids, keys, values):
        past, tokens = keys.shape[3], np.asarray(ids[0], np.int32)
        check_cache_room(past + len(tokens), self.length, "LiteRT")
        done = 0
        while done < len(tokens):
            n = next((n for n in self.lengths if n <= len(tokens) - done), 1)
            logits = self._run(f"prefill_{n}" if n > 1 else DECODE, tokens[done : done + n], past + done)
            done += n
        return held_step(logits, keys, past + len(tokens))

    def _run(self, name: str, tokens: np.ndarray, start: int) -> np.ndarray:
        """One signature over `tokens` at positions from `start`, the cache carried on; its last logits [1, 1, V]."""
        signature = self.signatures[name]
        positions = np.arange(start, start + len(tokens), dtype=np.int32)
        signature.inputs["tokens"][...] = tokens[None]
        signature.inputs["input_pos"][...] = positions
        signature.inputs["mask"][...] = np.where(np.arange(self.length) <= positions[:, None], 0.0, -np.inf)
        if self.last is not None:
            for key in self.names:
                np.copyto(signature.inputs[key], self.last.outputs[key])
        signature.invoke()
        self.last = signature
        return signature.outputs["logits"].reshape(1, 1, -1).copy()


class _Signature:
    """One signature's subgraph with its tensors allocated, and numpy views of its inputs and outputs."""

    def __init__(self, interpreter, name: str) -> None:
        runner = interpreter.get_signature_runner(name)
        self.wrapper, self.subgraph = interpreter._interpreter, runner._subgraph_index  # noqa: SLF001 - no public view API
        self.wrapper.AllocateTensors(self.subgraph)
        self.inputs = {k: self._view(i) for k, i in runner._inputs.items()}  # noqa: SLF001
        self.outputs = {k: self._view(i) for k, i in runner._outputs}  # noqa: SLF001

    def _view(self, index: int) -> np.ndarray:
        return self.wrapper.tensor(self.wrapper, index, self.subgraph)

    def invoke(self) -> None:
        self.wrapper.Invoke(self.subgraph)
