"""The artifact: a model file in some format with its signature and provenance."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from edgekit.errors import InputMismatchError

Dim = int | str | None  # an int is static; a str or None is dynamic (named or not)


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output: name, shape (dynamic dims as names or None) and numpy dtype name."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "float32"
    value: float | int | None = None  # a constant input (--input sr=16000:int64): fed as given, never batched or read from data

    def shape_text(self) -> str:
        return "x".join(str(d) if isinstance(d, int) else (d or "?") for d in self.shape)

    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def batch_axis(self) -> int | None:
        """Where the batch goes: a dim named batch (or N, batch_size), else dim 0 where it is fixed and two or more dims
        are dynamic (an image fixed at batch 1 whose H and W are not: [1, 3, H, W]), else the first dynamic dim, else dim 0.

        A recurrent state [layers, batch, hidden] has its batch in the middle; a scalar has none (None)."""
        if not self.shape:
            return None
        named = [i for i, d in enumerate(self.shape) if isinstance(d, str) and d.lower() in BATCH_NAMES]
        dynamic = [i for i, d in enumerate(self.shape) if not isinstance(d, int)]
        if not named and len(dynamic) > 1 and dynamic[0] > 0:
            return 0
        return (named or dynamic or [0])[0]

    def fixed_batch(self) -> int | None:
        """The size the model fixes this input's batch at (its batch axis static), or None: a dynamic batch, a scalar
        or a constant input."""
        axis = self.batch_axis()
        if axis is None or self.value is not None:
            return None
        size = self.shape[axis]
        return size if isinstance(size, int) else None

    def sample_shape(self) -> tuple[Dim, ...]:
        """The shape of one sample: the model's shape without its batch axis."""
        axis = self.batch_axis()
        return tuple(d for i, d in enumerate(self.shape) if i != axis)

    def to_model_layout(self, batch_array):
        """A batch stored sample-major [N, ...sample] put in the model's layout (the batch on its batch axis)."""
        import numpy as np

        axis = self.batch_axis()
        return batch_array if not axis else np.moveaxis(batch_array, 0, axis)

    def _with_batch(self, batch: int) -> tuple[Dim, ...]:
        """The shape with a dynamic batch axis set to `batch` (other dims as they are)."""
        axis = self.batch_axis()
        return tuple(batch if i == axis and not isinstance(d, int) else d for i, d in enumerate(self.shape))

    def concrete_shape(self, batch: int) -> tuple[int, ...]:
        """The shape with a dynamic batch dim set to `batch`; other dynamic dims are an error."""
        dims = self._with_batch(batch)
        if not all(isinstance(d, int) for d in dims):
            raise InputMismatchError(
                f"input '{self.name}' has dynamic dims ({self.shape_text()}) edgekit cannot guess",
                hint=f"give the shape with --input {self.name}:1x...:{self.dtype}",
            )
        return tuple(dims)

    def to_dict(self) -> dict:
        out = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        return out if self.value is None else {**out, "value": self.value}

    @classmethod
    def from_dict(cls, data: dict) -> TensorSpec:
        return cls(data["name"], tuple(data["shape"]), data.get("dtype", "float32"), data.get("value"))

    def constant(self, batch: int = 1):
        """The constant input's array: a scalar for a scalar input, else the model's shape (its batch axis sized
        `batch`) filled with the value, as `--input state=0` starts a recurrent state at zeros."""
        import numpy as np

        if not self.shape:
            return np.array(self.value, dtype=self.dtype)
        shape = self._with_batch(batch)
        if not all(isinstance(d, int) for d in shape):
            raise InputMismatchError(
                f"constant input '{self.name}' has dynamic dims ({self.shape_text()}) edgekit cannot size",
                hint=f"give its shape too: --input {self.name}:{self.shape_text()} and the data, or fix the model's dims",
            )
        return np.full(shape, self.value, dtype=self.dtype)


def fixed_batch(specs) -> int | None:
    """The batch a model takes only, from its first data input (constants aside): every batch fed to it must be
    exactly this size. None where that input's batch is dynamic (any size fits)."""
    data = [s for s in specs if s.value is None and s.batch_axis() is not None]
    return data[0].fixed_batch() if data else None


BATCH_NAMES = {"batch", "batch_size", "n", "bs"}  # a dim given one of these names is the batch axis
GENERATED_NAME = re.compile(r"(args|arg|input|inputs|input_layer|x|in|serving_default_\w+)(_\d+)?(:\d+)?")


def is_generated_name(name: str) -> bool:
    """A name a converter made up (litert-torch's args_0, tf2onnx's input_1), not one the model's author chose.

    Data keyed and --input named after the source model's inputs are matched to such names by position."""
    return bool(GENERATED_NAME.fullmatch(name))


def parse_input_spec(text: str) -> TensorSpec:
    """Parse NAME:SHAPE[:DTYPE] as in `--input image:1x3x224x224:float32` (a dim may be a name),
    or NAME=VALUE[:DTYPE] for a constant input such as a sample rate: `--input sr=16000:int64`."""
    if "=" in text.split(":")[0]:
        return _parse_constant(text)
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise InputMismatchError(f"--input '{text}' is not NAME:SHAPE[:DTYPE]", hint="e.g. --input image:1x3x224x224:float32")
    dims = tuple(_parse_dim(d, text) for d in parts[1].lower().split("x"))
    dtype = parts[2] if len(parts) == 3 else "float32"
    _check_dtype(dtype, text)
    return TensorSpec(parts[0], dims, dtype)


def _parse_constant(text: str) -> TensorSpec:
    head, _, dtype = text.partition(":")
    name, _, value = head.partition("=")
    dtype = dtype or ("float32" if any(c in value for c in ".eE") or value.lower() in ("nan", "inf") else "int64")
    _check_dtype(dtype, text)
    try:
        number = float(value) if dtype.startswith(("float", "bfloat")) else int(value)
    except ValueError:
        number = None
    if not name or number is None or number != number:
        raise InputMismatchError(
            f"--input '{text}' is not NAME=VALUE[:DTYPE] with a number", hint="e.g. --input sr=16000:int64 for a constant input"
        )
    return TensorSpec(name, (), dtype, number)


def _parse_dim(dim: str, text: str) -> int | str:
    """A positive size, or a dynamic dim's name (batch, seq, height: two letters or more)."""
    if dim.isdigit() and int(dim) > 0:
        return int(dim)
    if dim.isidentifier() and len(dim) > 1:
        return dim
    raise InputMismatchError(
        f"--input '{text}': dim '{dim}' is neither a positive size nor a dynamic dim's name",
        hint="write dims as NxCxHxW with positive sizes, or name a dynamic one (batch, seq), e.g. --input image:1x3x224x224",
    )


def _check_dtype(dtype: str, text: str) -> None:
    import numpy as np

    try:
        np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError):  # numpy raises all three for odd names ("01" is a SyntaxError)
        raise InputMismatchError(
            f"--input '{text}': unknown dtype '{dtype}'", hint="use a numpy dtype name such as float32, int64, uint8"
        ) from None


@dataclass
class Artifact:
    """A model file plus what edgekit knows about it."""

    path: Path
    format: str
    precision: str = "fp32"
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def files(self) -> list[Path]:
        """The file itself and any side files (ONNX external data, OpenVINO .bin)."""
        return [self.path, *[Path(p) for p in self.meta.get("side_files", [])]]

    def size_bytes(self) -> int:
        return sum(file_size(p) for p in self.files())

    def to_dict(self) -> dict:
        return {
            "path": str(self.path),
            "format": self.format,
            "precision": self.precision,
            "size_bytes": self.size_bytes(),
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
            "meta": self.meta,
        }


def file_size(path: Path) -> int:
    """Size of a file, or of all files under a folder (SavedModel, IR pairs)."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def check_array(spec: TensorSpec, array: np.ndarray) -> None:
    """An array (in the model's layout) fits a spec: same rank, equal static dims (the batch axis aside), same dtype."""
    axis = spec.batch_axis()
    if array.ndim != len(spec.shape) or any(
        isinstance(d, int) and i != axis and d != a for i, (d, a) in enumerate(zip(spec.shape, array.shape, strict=True))
    ):
        raise InputMismatchError(
            f"input '{spec.name}': data shape {'x'.join(map(str, array.shape))} does not match the model's {spec.shape_text()}",
            hint="reshape the data or fix --input",
        )
    if array.dtype.name != spec.dtype:
        raise InputMismatchError(
            f"input '{spec.name}': data dtype {array.dtype.name} but the model takes {spec.dtype}",
            hint=f"convert it, e.g. array.astype(np.{spec.dtype})",
        )


@dataclass(frozen=True)
class CacheShape:
    """What the KV cache of a language model looks like: [layers, 1, kv_heads, tokens, head_dim] for keys and for values."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_seq_len: int

    def empty(self, tokens: int = 0) -> np.ndarray:
        return np.zeros((self.layers, 1, self.kv_heads, tokens, self.head_dim), np.float32)

    def nbytes(self, tokens: int, itemsize: int = 4) -> int:
        """The bytes of the keys and values of `tokens` tokens (fp32 unless `itemsize` says otherwise)."""
        return 2 * self.layers * self.kv_heads * tokens * self.head_dim * itemsize

    def to_dict(self) -> dict:
        return asdict(self)


def held_step(logits: np.ndarray, keys: np.ndarray, tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a step of a session that holds its cache in the runtime gives back: the logits and, for the keys and the
    values, one zero-byte stand-in of the cache's shape whose length axis counts the `tokens` the runtime holds (what
    the next step takes as its past)."""
    held = np.empty((*keys.shape[:3], tokens, 0), np.float32)
    return logits, held, held


def check_cache_room(tokens: int, room: int, runtime: str) -> None:
    """One clear error where a step would write `tokens` tokens into a cache allocated for `room`."""
    if tokens > room:
        raise InputMismatchError(
            f"{tokens} tokens are past the {room} the {runtime} model's cache holds", hint="convert it again with a larger --max-seq-len"
        )
