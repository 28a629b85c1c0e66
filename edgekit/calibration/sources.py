"""The data sources: numpy files, image folders (with preprocessing), Python callables; load_samples reads any of them."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np

from edgekit.artifact import TensorSpec
from edgekit.calibration.preprocess import Preprocess
from edgekit.calibration.samples import LABEL_KEYS, Samples, checked_labels, choose, nonfinite_policy
from edgekit.errors import EdgekitError, InputMismatchError
from edgekit.imports import import_attr
from edgekit.zoo.names import zoo_data_for

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff"}
LABELS_FILE = "labels.json"
LABELS_FILE_HINT = (
    f"give {LABELS_FILE} an object mapping each image's path in the folder (as a/b.jpg) to a class index or a list of class "
    "indices ([] where no class names the image), or a list of those in sorted path order (as ImageNet-ReaL's real.json)"
)


def numpy_file(path: Path, limit: int | None, seed: int) -> Samples:
    """An .npz (arrays keyed by input name, optional `labels`) or an .npy (one input)."""
    arrays, labels = _read_numpy(path)
    for key, array in [*arrays.items(), *([("labels", labels)] if labels is not None else [])]:
        if array.ndim == 0:
            raise InputMismatchError(
                f"array '{key}' in {path.name} is a scalar, not a set of samples",
                hint=f"give every array a leading sample axis; for a constant input (a sample rate) pass --input {key}=VALUE:DTYPE instead",
            )
    counts = {len(a) for a in arrays.values()} | ({len(labels)} if labels is not None else set())
    if len(counts) > 1:
        raise InputMismatchError(
            f"arrays in {path.name} have different sample counts {sorted(counts)}", hint="every array's first axis must be the sample axis"
        )
    index = choose(counts.pop() if counts else 0, limit, seed)
    provenance = {"kind": "numpy", "unnamed": path.suffix == ".npy"}
    labels = None if labels is None else checked_labels(labels[index], path.name)
    return Samples({k: v[index] for k, v in arrays.items()}, labels, provenance, ids=[f"{path.name}[{i}]" for i in index])


NUMPY_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")
NUMPY_HINT = "save the data with np.savez / np.save (numeric arrays, no pickled objects)"


def _read_numpy(path: Path) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The arrays and labels of an .npz/.npy, refusing pickles, object arrays and files of another kind."""
    with open(path, "rb") as f:
        head = f.read(6)
    if not head.startswith(NUMPY_MAGIC):
        raise EdgekitError(f"{path.name} is not a NumPy file (no .npz/.npy header)", hint=NUMPY_HINT)
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return {path.stem: loaded}, None
        with loaded:
            arrays = {k: loaded[k] for k in loaded.files if k not in LABEL_KEYS}
            labels = next((loaded[k] for k in LABEL_KEYS if k in loaded.files), None)
        return arrays, labels
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise EdgekitError(f"{path.name} holds an object (pickled) array, which edgekit does not load", hint=NUMPY_HINT) from None
        raise EdgekitError(f"cannot read {path.name}: {exc}", hint=NUMPY_HINT) from None
    except (OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise EdgekitError(f"cannot read {path.name} (damaged or truncated?): {exc}", hint=NUMPY_HINT) from None


def image_folder(path: Path, limit: int | None, seed: int, preprocess: str | None, specs: list[TensorSpec] | None) -> Samples:
    """Images under `path`, labelled by a labels.json at its root (folder_labels) or else by class subfolders (sorted)."""
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise EdgekitError(
            f"no images in {path}",
            hint=f"put {', '.join(sorted(IMAGE_SUFFIXES))} files there (class subfolders or a {LABELS_FILE} give labels)",
        )
    if not specs or len(specs) != 1:
        raise EdgekitError(
            "an image folder feeds a model with exactly one image input", hint="use an .npz keyed by input name for other models"
        )
    recipe = Preprocess.parse(preprocess, specs[0])
    names = [f.relative_to(path).as_posix() for f in files]
    labels, provenance = folder_labels(path, names)
    index = choose(len(files), limit, seed)
    images = np.stack([recipe.apply(_read_image(files[i])) for i in index])
    return Samples(
        {specs[0].name: images},
        None if labels is None else labels[index],
        {"kind": "images", "preprocess": recipe.describe(), **provenance},
        ids=[names[i] for i in index],
    )


def folder_labels(path: Path, names: list[str]) -> tuple[np.ndarray | None, dict]:
    """The labels of every image `names` gives (its path in the folder) and where they came from: the folder's
    labels.json when it has one (a class or a label set per image), else the index of each image's class subfolder
    among the sorted names (none where an image lies at the top of the folder)."""
    listed = path / LABELS_FILE
    if listed.is_file():
        return _listed_labels(listed, names), {"labels": LABELS_FILE}
    folders = [PurePosixPath(name).parent.name for name in names]  # '' at the top of the folder
    classes = sorted(set(folders) - {""})
    if not classes or "" in folders:
        return None, {"classes": classes}
    index = {name: i for i, name in enumerate(classes)}
    return np.array([index[f] for f in folders]), {"labels": "class subfolders", "classes": classes}


def _listed_labels(listed: Path, names: list[str]) -> np.ndarray:
    """labels.json read for the images `names` (paths relative to the folder, sorted): [N] classes where every image has
    one, else [N, largest class + 1] boolean label sets."""
    try:
        entries = json.loads(listed.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EdgekitError(f"cannot read {listed}: {exc}", hint=LABELS_FILE_HINT) from None
    if isinstance(entries, dict):
        missing = [n for n in names if n not in entries]
        if missing:
            raise InputMismatchError(
                f"{listed} gives no label for {len(missing)} of the {len(names)} images (the first: {missing[0]})",
                hint=LABELS_FILE_HINT,
            )
        entries = [entries[n] for n in names]
    elif not isinstance(entries, list) or len(entries) != len(names):
        found = f"{len(entries)} entries" if isinstance(entries, list) else f"a JSON {type(entries).__name__}"
        raise InputMismatchError(f"{listed} holds {found} for the folder's {len(names)} images", hint=LABELS_FILE_HINT)
    sets = [_label_set(entry, name, listed) for entry, name in zip(entries, names, strict=True)]
    if all(len(s) == 1 for s in sets):
        return np.array([s[0] for s in sets], np.int64)
    if not any(sets):
        raise InputMismatchError(f"{listed} names no class for any image: nothing could be scored", hint=LABELS_FILE_HINT)
    marked = np.zeros((len(sets), 1 + max(max(s) for s in sets if s)), bool)
    for row, classes in enumerate(sets):
        marked[row, classes] = True
    return marked


def _label_set(entry, name: str, listed: Path) -> list[int]:
    """One image's classes: a class index, or a list of them."""
    classes = entry if isinstance(entry, list) else [entry]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in classes):
        raise InputMismatchError(
            f"the label of {name} in {listed} is {json.dumps(entry)}: neither a class index nor a list of them", hint=LABELS_FILE_HINT
        )
    return sorted(set(classes))


def _read_image(path: Path):
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.load()
            return img.copy()
    except (UnidentifiedImageError, OSError) as exc:
        raise EdgekitError(f"cannot read image {path}: {str(exc).splitlines()[0]}", hint="remove or replace the unreadable file") from None


def from_callable(spec: str, limit: int | None, specs: list[TensorSpec] | None) -> Samples:
    """`module:function` returning an iterable of arrays (one input) or dicts of arrays, per sample or per batch."""

    produced = import_attr(spec)()
    chunks: dict[str, list[np.ndarray]] = {}
    count = 0
    for item in produced:
        item = item if isinstance(item, dict) else {_only_name(specs): item}
        for name, value in item.items():
            value = np.asarray(value)
            chunks.setdefault(name, []).append(value if _is_batch(name, value, specs) else value[None])
        count += len(next(iter(chunks.values()))[-1])
        if limit is not None and count >= limit:
            break
    arrays = {k: np.concatenate(v)[:limit] for k, v in chunks.items()}
    labels = next((arrays.pop(k) for k in LABEL_KEYS if k in arrays), None)
    return Samples(arrays, None if labels is None else checked_labels(labels, "what the data callable gave"), {"kind": "callable"})


def _only_name(specs: list[TensorSpec] | None) -> str:
    if not specs or len(specs) != 1:
        raise EdgekitError("the data callable yields bare arrays but the model has several inputs", hint="yield dicts keyed by input name")
    return specs[0].name


def _is_batch(name: str, value: np.ndarray, specs: list[TensorSpec] | None) -> bool:
    spec = next((s for s in specs or [] if s.name == name), None)
    return value.ndim >= 1 if spec is None else value.ndim == len(spec.shape)


def load_samples(
    spec: str, limit: int | None = None, seed: int = 0, preprocess: str | None = None, specs: list[TensorSpec] | None = None
) -> Samples:
    """Read samples from an .npz/.npy file, an image folder, a `module:function` or a zoo: data name; sample `limit` of them.

    A zoo name (or a committed zoo file named by path) is read with its declared preprocessing."""
    spec, name = zoo_data_for(spec, specs)
    if limit is not None and limit < 1:
        raise EdgekitError(f"a sample limit of {limit} is out of range: it must be at least 1", hint="ask for 1 sample or more")
    path = Path(spec)
    if path.is_dir():
        samples = image_folder(path, limit, seed, preprocess, specs)
    elif path.suffix in (".npz", ".npy") and not path.exists():
        raise EdgekitError(f"data not found: {spec}", hint="check the path (recipes resolve it from the recipe's folder)")
    elif path.suffix in (".npz", ".npy"):
        samples = numpy_file(path, limit, seed)
    elif ":" in spec and not path.exists():
        samples = from_callable(spec, limit, specs)
    else:
        raise EdgekitError(f"data not found or not readable: {spec}", hint="give an .npz/.npy file, a folder of images, or module:function")
    if len(samples) == 0:
        raise EdgekitError(f"no samples in {spec}", hint="the data source is empty")
    samples.provenance.update(
        source=name, **({"path": spec} if name != spec else {}), samples=len(samples), seed=seed, random=False, nonfinite=nonfinite_policy()
    )
    return samples if specs is None else samples.bind(specs)
