"""Parse and validate a recipe; every error names the bad key and its line."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from pathlib import Path

from edgekit import commands, registry
from edgekit.errors import EdgekitError
from edgekit.metrics.gate import SIZE_METRICS, Thresholds
from edgekit.pruning import METHODS, method_chain

VERSION = commands.recipe_option("version").default
TODO = "TODO"  # the value `edgekit init` writes where it needs one it was not given
DEFAULT_TARGETS = registry.default_targets()
# The model itself as a matrix row, on its own runtime (e.g. torch:cuda[compile=reduce-overhead,dtype=fp16]):
# it runs at fp32, its dtype set by the target's options.
SOURCE_FORMATS = registry.source_formats()


class RecipeError(EdgekitError):
    """A recipe that does not validate: the message names the key and the line."""


def _key_field(option: commands.Option) -> tuple[str, str, object]:
    """A section's field for a recipe key: its name, its type as the parser reads it ("int | None", "tuple[str, ...]") and its
    default, all from the key's declaration (edgekit.commands); a required key has none."""
    kind = {list: "tuple[str, ...]"}.get(option.kind, option.kind.__name__)
    annotation = f"{kind} | None" if option.default is None and option.kind is not list else kind
    if option.default is commands.REQUIRED:
        default = field()
    else:
        default = field(default_factory=dict) if option.kind is dict else field(default=option.frozen_default())
    return option.recipe.partition(".")[2], annotation, default


def _section_class(section: str, **methods) -> type:
    """The frozen dataclass of a recipe section (CalibrationSection, ...): its keys in commands.RECIPE_SECTIONS' order."""
    keys = [_key_field(commands.recipe_option(f"{section}.{key}")) for key in commands.RECIPE_SECTIONS[section]]
    return make_dataclass(f"{section.title()}Section", keys, frozen=True, namespace={"__module__": __name__, **methods})


def _cells(self) -> list[tuple[str, str, str]]:
    """(format, precision, target) for every combination (the model itself only at fp32)."""
    return [
        (f, p, t)
        for f in self.formats
        for p in (("fp32",) if f in SOURCE_FORMATS else self.precisions)
        for t in self.targets.get(f, DEFAULT_TARGETS.get(f, []))
    ]


ModelSection = _section_class("model")
CalibrationSection = _section_class("calibration")
ValidationSection = _section_class("validation")
CompressSection = _section_class("compress")
ConvertSection = _section_class("convert")
MatrixSection = _section_class("matrix", cells=_cells)
LatencySection = _section_class("latency")
ReportSection = _section_class("report")


@dataclass(frozen=True)
class Recipe:
    model: ModelSection
    calibration: CalibrationSection = CalibrationSection()
    validation: ValidationSection = ValidationSection()
    compress: tuple[CompressSection, ...] = ()
    convert: ConvertSection = ConvertSection()
    matrix: MatrixSection = MatrixSection()
    latency: LatencySection = LatencySection()
    gates: Thresholds = Thresholds()
    report: ReportSection = ReportSection()
    version: int = VERSION
    base_dir: Path = Path(".")

    def resolve(self, path: str | None) -> str | None:
        """A data/model path relative to the recipe's folder (factories and zoo: names stay as they are)."""
        if (
            path is None
            or path.startswith("zoo:")
            or (":" in path and not Path(self.base_dir / path).exists() and not path.endswith(".py"))
        ):
            return path
        candidate = Path(path)
        return str(candidate if candidate.is_absolute() else self.base_dir / candidate)


# The least value a count may take (a key not here is unchecked): runs: -3 is refused at parse, with its line.
MINIMUMS = {
    "latency.runs": 1,
    "latency.batch": 1,
    "latency.warmup": 0,
    "latency.threads": 1,
    "calibration.samples": 1,
    "validation.samples": 1,
}

SECTIONS = {
    "model": ModelSection,
    "calibration": CalibrationSection,
    "validation": ValidationSection,
    "convert": ConvertSection,
    "matrix": MatrixSection,
    "latency": LatencySection,
    "gates": Thresholds,
    "report": ReportSection,
}


def load_recipe(path: Path) -> Recipe:
    """Read and validate a recipe file."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe not found: {path}", hint="write one with `edgekit init MODEL`")
    try:
        root = yaml.compose(path.read_text())
    except yaml.YAMLError as exc:
        raise RecipeError(
            f"{path.name}: not valid YAML: {str(exc).splitlines()[0]}", hint="check indentation and quoting at that line"
        ) from None
    return parse(root, path.name, path.parent)


def parse(root, name: str, base_dir: Path) -> Recipe:
    """A Recipe from a composed YAML node tree; a value still TODO is refused before any key is read."""
    todos = todo_fields(root)
    if todos:
        raise RecipeError(
            f"{name}: {len(todos)} field(s) still TODO: {', '.join(todos)}",
            hint="replace each TODO with a value (data: a .npz, an image folder, module:function or a zoo: name), "
            "or delete the section you do not need",
        )
    top = _mapping(root, name, "the recipe")
    unknown = set(top) - set(SECTIONS) - {"version", "compress"}
    _no_unknown(unknown, top, name, "top level", list(SECTIONS) + ["version", "compress"])
    if "model" not in top:
        raise RecipeError(f"{name}: missing required key 'model'", hint="add model: {path: your_model}")
    values = {key: _section(SECTIONS[key], top[key][1], name, key) for key in SECTIONS if key in top}
    if "compress" in top:
        node = top["compress"][1]
        items = node.value if hasattr(node, "value") and isinstance(node.value, list) else None
        if items is None:
            raise RecipeError(
                f"{name}: line {node.start_mark.line + 1}: 'compress' must be a list of stages",
                hint="e.g. compress: [{method: magnitude, sparsity: 0.5}]",
            )
        values["compress"] = tuple(_section(CompressSection, item, name, f"compress[{i}]") for i, item in enumerate(items))
    version = _typed(_plain(top["version"][1]), "int", f"{name}: line {top['version'][0] + 1}: 'version'") if "version" in top else VERSION
    if version != VERSION:
        raise RecipeError(
            f"{name}: line {top['version'][0] + 1}: recipe version {version} is not supported", hint=f"this edgekit reads version {VERSION}"
        )
    recipe = Recipe(**values, version=version, base_dir=base_dir)
    _check_choices(recipe, top, name)
    return recipe


def todo_fields(node, where: str = "") -> list[str]:
    """'calibration.path (line 9)' for every scalar whose value starts with TODO, in file order."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [t for k, v in node.value for t in todo_fields(v, f"{where}.{k.value}" if where else str(k.value))]
    if isinstance(node, yaml.SequenceNode):
        return [t for i, v in enumerate(node.value) for t in todo_fields(v, f"{where}[{i}]")]
    if isinstance(node, yaml.ScalarNode) and str(node.value).startswith(TODO):
        return [f"{where or 'the recipe'} (line {node.start_mark.line + 1})"]
    return []


def _mapping(node, name: str, where: str) -> dict:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        line = node.start_mark.line + 1 if node is not None else 1
        raise RecipeError(f"{name}: line {line}: {where} must be a mapping of keys", hint="write key: value pairs")
    return {k.value: (k.start_mark.line, v) for k, v in node.value}


def _no_unknown(unknown: set, keys: dict, name: str, where: str, allowed) -> None:
    if unknown:
        key = sorted(unknown, key=lambda k: keys[k][0])[0]
        raise RecipeError(f"{name}: line {keys[key][0] + 1}: unknown key '{key}' in {where}", hint=f"allowed: {', '.join(allowed)}")


def _section(cls, node, name: str, where: str):
    keys = _mapping(node, name, f"'{where}'")
    allowed = [f.name for f in fields(cls)]
    _no_unknown(set(keys) - set(allowed), keys, name, f"'{where}'", allowed)
    values = {}
    for key, (line, value_node) in keys.items():
        value = _value(value_node)
        if value is None:  # `key:` left empty (or only a comment after it) means the default
            continue
        expected = next(f for f in fields(cls) if f.name == key).type
        values[key] = _typed(value, expected, f"{name}: line {line + 1}: '{where}.{key}'")
        _check_minimum(f"{where}.{key}", values[key], f"{name}: line {line + 1}")
    missing = [f.name for f in fields(cls) if _required(f) and f.name not in values]
    if missing:
        raise RecipeError(f"{name}: line {node.start_mark.line + 1}: '{where}' needs '{missing[0]}'", hint=f"add {missing[0]}: ...")
    return cls(**values)


def _check_minimum(key: str, value, where: str) -> None:
    least = MINIMUMS.get(key)
    if least is not None and value is not None and value < least:
        raise RecipeError(f"{where}: '{key}' is {value}, below its minimum {least}", hint=f"set {key.split('.')[1]}: {least} or more")


def _required(f) -> bool:

    return f.default is MISSING and f.default_factory is MISSING


def _value(node):
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return [_value(n) for n in node.value]
    if isinstance(node, yaml.MappingNode):
        return {k.value: _value(v) for k, v in node.value}
    return _plain(node)


def _plain(node):
    import yaml

    if isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null":
        return None  # `key:` with nothing after it (yaml.serialize cannot round-trip an empty scalar: found by fuzzing)
    try:
        return yaml.safe_load(yaml.serialize(node))
    except yaml.YAMLError as exc:  # a tag such as !python/object, which safe_load refuses (found by fuzzing)
        raise RecipeError(
            f"recipe line {node.start_mark.line + 1}: {getattr(exc, 'problem', None) or exc}",
            hint="remove the YAML tag (!...) or quote the value",
        ) from None


def _typed(value, expected: str, where: str):
    """Coerce a YAML value to the field's declared type (as a string annotation)."""
    try:
        if value is None:
            return None
        if "tuple" in expected:
            return tuple(value if isinstance(value, list) else [value])
        if expected.startswith("dict"):
            if not isinstance(value, dict):
                raise TypeError("a mapping")
            return {k: list(v) if isinstance(v, list) else [v] for k, v in value.items()}
        if expected.startswith("int"):
            return int(value)
        if expected.startswith("float"):
            return float(value)
        if expected.startswith("bool"):
            if not isinstance(value, bool):
                raise TypeError("true or false")
            return value
        return str(value)
    except (TypeError, ValueError) as exc:
        raise RecipeError(
            f"{where} has the wrong type ({value!r})",
            hint=f"expected {expected.split(' |')[0]}{': ' + str(exc) if isinstance(exc, TypeError) else ''}",
        ) from None


def _check_choices(recipe: Recipe, top: dict, name: str) -> None:
    from edgekit.conversion import CALIB_METHODS, FORMATS, PRECISIONS

    line = lambda key: top[key][0] + 1 if key in top else 1  # noqa: E731
    checks = [
        ("matrix", "formats", recipe.matrix.formats, FORMATS + SOURCE_FORMATS),
        ("matrix", "precisions", recipe.matrix.precisions, PRECISIONS),
        ("calibration", "method", (recipe.calibration.method,), CALIB_METHODS),
        ("compress", "method", tuple(m for c in recipe.compress for m in method_chain(c.method)), METHODS),
        ("gates", "size_metric", tuple(filter(None, [recipe.gates.size_metric])), tuple(SIZE_METRICS)),
        ("report", "formats", recipe.report.formats, ("json", "md", "html", "junit")),
    ]
    for section, key, values, allowed in checks:
        bad = [v for v in values if v not in allowed]
        if bad:
            raise RecipeError(
                f"{name}: line {line(section)}: '{section}.{key}' has unknown value '{bad[0]}'", hint=f"choose from: {', '.join(allowed)}"
            )
