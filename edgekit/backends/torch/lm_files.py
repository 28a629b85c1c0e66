"""Language models as users hold them: a transformers `save_pretrained` folder, or a GGUF file (llama.cpp's format,
read by transformers and dequantized to fp32: that fp32 model is the reference, and the provenance records which
quantization the file held). Each brings its tokenizer, so text reads as the model reads it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from edgekit.errors import ModelLoadError, first_line
from edgekit.native import stderr_silenced, third_party_quiet
from edgekit.source import ModelSource

GGUF_INSTALL = "pip install gguf accelerate (transformers reads GGUF files with them)"


def load_pretrained(source: ModelSource):
    """The causal LM of a save_pretrained folder or a GGUF file, in fp32 and eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    folder, gguf_file = _location(source)
    try:
        with stderr_silenced(), third_party_quiet():
            model = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf_file, dtype=torch.float32, local_files_only=True)
    except ImportError as exc:
        raise ModelLoadError(f"cannot read {source.spec}: {exc}", hint=GGUF_INSTALL) from None
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelLoadError(f"cannot load {source.spec} as a causal language model: {first_line(exc, 240)}", hint=_hint(source)) from None
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:  # a GGUF file's weights are dequantized already: the model is a plain fp32 one
        quantizer.remove_quantization_config(model)
    return model.eval()


def tokenizer_json(source: ModelSource) -> str | None:
    """The model's tokenizer as a tokenizers JSON (a folder's tokenizer files, or the one a GGUF file holds), else None."""
    if source.format not in ("transformers", "gguf"):
        return None
    folder, gguf_file = _location(source)
    if gguf_file is None and (folder / "tokenizer.json").is_file():
        return (folder / "tokenizer.json").read_text()
    from transformers import AutoTokenizer

    try:
        with stderr_silenced(), third_party_quiet():
            tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_file, local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError):
        return None
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend.to_str() if backend is not None else None


def gguf_facts(path: Path) -> dict:
    """What a GGUF file held: its file type (the quantization it was made with) and its tensors' types."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields.get("general.file_type")
    file_type = int(field.parts[field.data[0]][0]) if field is not None else None
    names = {t.value: t.name for t in gguf.LlamaFileType}
    return {
        "file_type": names.get(file_type, str(file_type)).removeprefix("MOSTLY_") if file_type is not None else None,
        "tensor_types": dict(Counter(t.tensor_type.name for t in reader.tensors).most_common()),
        "dequantized_to": "fp32 (the reference: the file's own grid)",
    }


def _location(source: ModelSource) -> tuple[Path, str | None]:
    path = Path(source.spec)
    return (path.parent, path.name) if source.format == "gguf" else (path, None)


def _hint(source: ModelSource) -> str:
    if source.format == "gguf":
        return f"transformers reads GGUF files of the architectures it knows (Llama, Qwen2, Phi3, GPT-2...); {GGUF_INSTALL}"
    return "give a folder written by save_pretrained (config.json beside the weights) of a *ForCausalLM"
