"""Recognise what the user named (a file or a `module:factory`) without importing a framework."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from edgekit import registry
from edgekit.errors import ModelLoadError
from edgekit.fileio import recover, sha256_of_file
from edgekit.zoo.names import zoo_entry

FAMILIES = registry.families()  # a source model's kind -> the format whose runtime runs it
SUFFIX_FORMATS = registry.suffix_formats()  # from the backend registry
TORCH_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript", ".jit")


@dataclass(frozen=True)
class ModelSource:
    """A model as the user named it, with the options needed to load it."""

    spec: str
    format: str
    weights: Path | None = None
    allow_pickle: bool = False
    zoo: str | None = None  # the zoo: name it came from (provenance keeps it: `validate ARTIFACT` finds its reference)
    original: ModelSource | None = None  # tune's pruned variant: the model before pruning, its artifacts' reference

    @property
    def family(self) -> str:
        """The framework that runs it: 'torch', 'onnx', ..."""
        return FAMILIES.get(self.format, self.format)

    @property
    def path(self) -> Path | None:
        return None if self.format == "torch-factory" else Path(self.spec)

    @property
    def name(self) -> str:
        """A short name for artifacts derived from it."""
        if self.format == "torch-factory":
            return self.spec.rsplit(":", 1)[1]
        return Path(self.spec).stem


def open_source(spec: str, weights: str | None = None, allow_pickle: bool = False) -> ModelSource:
    """Classify `spec` as a model source (a file, a module:factory, or a zoo: name), failing early with a clear message."""
    if spec.startswith("zoo:") and not weights:
        return zoo_model(spec)[0]
    path = Path(spec)
    _finish_interrupted_write(path)
    weights_path = Path(weights) if weights else None
    if weights_path is not None and not weights_path.is_file():
        raise ModelLoadError(f"weights file not found: {weights}", hint="check the --weights path")
    if not path.exists() and _looks_like_factory(spec):
        return ModelSource(spec, "torch-factory", weights_path)
    if not path.exists():
        raise ModelLoadError(
            f"model not found: {spec}", hint="check the path, or name a factory as path/to/file.py:function or package.module:function"
        )
    if weights_path is not None:
        raise ModelLoadError(
            "--weights goes with a module:factory, not a model file",
            hint=f"drop --weights, or name the factory that builds the model instead of {spec}",
        )
    return ModelSource(spec, _detect_file_format(path, allow_pickle), None, allow_pickle)


def _finish_interrupted_write(path: Path) -> None:
    """A write of this artifact killed after its commit point is completed before it is read."""

    with contextlib.suppress(OSError, ValueError):
        recover(path)


def _looks_like_factory(spec: str) -> bool:
    module, sep, func = spec.rpartition(":")
    return bool(sep and module and func.isidentifier() and not (len(module) == 1 and module.isalpha()))


def _detect_file_format(path: Path, allow_pickle: bool) -> str:
    if path.is_dir():
        if (path / "saved_model.pb").exists():
            return "savedmodel"
        if (path / "config.json").exists():
            return "transformers"
        raise ModelLoadError(
            f"{path} is a folder but neither a SavedModel (no saved_model.pb) nor a transformers model (no config.json)",
            hint="give a model file, a folder written by model.export() (Keras) or by save_pretrained (transformers)",
        )
    if path.suffix in SUFFIX_FORMATS:
        return SUFFIX_FORMATS[path.suffix]
    if path.suffix in TORCH_SUFFIXES:
        return _detect_torch_file(path, allow_pickle)
    raise ModelLoadError(
        f"cannot tell the format of {path.name}",
        hint=f"edgekit reads {', '.join(SUFFIX_FORMATS)} files, TorchScript (.pt/.ts), module:factory with --weights, SavedModel "
        "and save_pretrained folders",
    )


def _detect_torch_file(path: Path, allow_pickle: bool) -> str:
    names = _zip_names(path)
    if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
        return "torchscript"
    if allow_pickle:
        return "torch-pickle"
    raise ModelLoadError(
        f"{path.name} is not TorchScript; it may be a state dict or a pickled module",
        hint="for a state dict name the factory that builds the model and pass --weights; "
        "for a whole pickled module pass --allow-pickle (unpickling runs code from the file: only for files you trust)",
    )


def _zip_names(path: Path) -> list[str]:
    try:
        with zipfile.ZipFile(path) as z:
            return z.namelist()
    except (zipfile.BadZipFile, OSError):
        raise ModelLoadError(
            f"{path.name} is not a PyTorch file (not a zip archive)", hint="re-save it with torch.jit.save, torch.export.save or torch.save"
        ) from None


def zoo_model(spec: str):
    """(ModelSource, input specs, layout) of a zoo model; the trained FashionCNN comes with its weights."""
    from edgekit.zoo.fashion_mnist import DATA_DIR, GRU_WEIGHTS, VIT_WEIGHTS, WEIGHTS

    entry = zoo_entry(spec)
    suffix = Path(entry.target).suffix
    if suffix in SUFFIX_FORMATS:  # a zoo model committed as a file (.onnx, .keras); else a factory
        return ModelSource(str(DATA_DIR / entry.target), SUFFIX_FORMATS[suffix], zoo=spec), entry.inputs, entry.layout
    weights = {"zoo:fashion-cnn": WEIGHTS, "zoo:fashion-gru": GRU_WEIGHTS, "zoo:fashion-vit": VIT_WEIGHTS}.get(spec)
    return ModelSource(entry.target, "torch-factory", weights, zoo=spec), entry.inputs, entry.layout


def fingerprint(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:20]


def source_fingerprint(source: ModelSource) -> dict:
    """What identifies a model's content: file hashes (a factory: its module file and the weights)."""
    if source.format == "torch-factory":
        module = source.spec.rpartition(":")[0]
        origin = module if module.endswith(".py") else getattr(importlib.util.find_spec(module), "origin", None)
        return {"factory": source.spec, "code": file_hash(origin), "weights": file_hash(str(source.weights) if source.weights else None)}
    return {"format": source.format, "content": file_hash(source.spec)}


def file_hash(path: str | None) -> str | None:

    if path is None or ":" in path and not Path(path).exists():
        return path
    p = Path(path)
    if p.is_dir():
        return fingerprint({str(f.relative_to(p)): sha256_of_file(f) for f in sorted(p.rglob("*")) if f.is_file()})
    return sha256_of_file(p) if p.exists() else None
