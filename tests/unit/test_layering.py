"""The layering rule of docs/architecture.md, read from the source: every import in edgekit (those inside functions too)
goes to its own layer or one below, the parts of edgekit import one another without a cycle, and a runtime or
converter framework is imported only under edgekit/backends/ (the standalone device runner excepted)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "edgekit"

# Lowest first. A part is a top-level module or subpackage of edgekit; each belongs to one layer.
LAYERS = (
    ("core", {"errors", "artifact", "fileio", "native", "progress", "imports", "isa", "machine", "emulation"}),
    ("registry", {"registry", "commands"}),
    ("data", {"source", "zoo", "calibration", "provenance"}),
    ("metrics and reports", {"metrics", "report"}),
    ("runtime", {"targets", "devices"}),
    ("algorithms", {"conversion", "quantize", "compress"}),
    ("backends", {"backends"}),
    ("drivers", {"converters", "validate", "debug", "summary", "pruning"}),
    ("recipe", {"recipe"}),
    ("api", {"api", "demo"}),
    ("cli", {"cli", "__main__", "__init__"}),
)
FRAMEWORKS = {
    "onnxruntime", "openvino", "nncf", "ai_edge_litert", "tflite_runtime", "litert_torch", "ai_edge_torch",
    "executorch", "tensorrt", "tensorflow", "keras", "tf2onnx",
}  # fmt: skip
STANDALONE = {ROOT / "devices" / "device_runner.py"}  # goes to a board alone: stdlib, numpy and its runtime


def part_of(path: Path) -> str:
    """The part of edgekit a file belongs to: its top-level subpackage, or its own name for a top-level module."""
    return path.relative_to(ROOT).with_suffix("").parts[0]


def imported_modules(path: Path, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, at any depth (relative ones resolved in `package`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ((node.module,) if node.module else ()))
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def edgekit_part(module: str) -> str | None:
    """The part of edgekit a module name lies in, or None for anything outside edgekit."""
    parts = module.split(".")
    if parts[0] != "edgekit" or len(parts) < 2:
        return None
    name = parts[1]
    return name if (ROOT / name).is_dir() or (ROOT / f"{name}.py").is_file() else None


def import_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], str], list[str]]:
    """Edges between parts, where each edge was first seen, and the framework imports outside backends/."""
    edges, where, frameworks = defaultdict(set), {}, []
    for path in sorted(ROOT.rglob("*.py")):
        source = part_of(path)
        for line, module in imported_modules(path, path.relative_to(ROOT.parent).with_suffix("").parts[:-1]):
            rel = f"{path.relative_to(ROOT.parent)}:{line}"
            if module.split(".")[0] in FRAMEWORKS and source != "backends" and path not in STANDALONE:
                frameworks.append(f"{rel} imports {module}")
            target = edgekit_part(module)
            if target and target != source:
                edges[source].add(target)
                where.setdefault((source, target), rel)
    return edges, where, frameworks


def layer_of(part: str) -> int:
    for index, (_, parts) in enumerate(LAYERS):
        if part in parts:
            return index
    raise AssertionError(f"edgekit/{part} is in no layer: add it to LAYERS here and to docs/architecture.md")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one part (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_part_of_edgekit_has_a_layer():
    parts = {part_of(path) for path in ROOT.rglob("*.py")}
    for part in parts:
        layer_of(part)
    named = set().union(*(p for _, p in LAYERS))
    assert not named - parts, f"LAYERS names parts that do not exist: {sorted(named - parts)}"


def test_imports_go_only_downward():
    edges, where, _ = import_graph()
    upward = [
        f"{where[(a, b)]}: {a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a in sorted(edges)
        for b in sorted(edges[a])
        if layer_of(b) > layer_of(a)
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_no_cycle_between_the_parts_of_edgekit():
    edges, where, _ = import_graph()
    found = cycles(edges)
    assert not found, "import cycles: " + "; ".join(", ".join(c) for c in found)


def test_frameworks_are_imported_only_in_their_backend_folder():
    _, _, frameworks = import_graph()
    assert not frameworks, "framework imports outside edgekit/backends/:\n" + "\n".join(frameworks)


def test_the_check_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """A lazy import is read like any other, so a cycle closed inside a function fails too."""
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from edgekit.cli import main\n    import onnxruntime\n    from ..registry import REGISTRY\n")
    found = imported_modules(module, ("edgekit", "validate"))
    assert (2, "edgekit.cli.main") in found and (3, "onnxruntime") in found and (4, "edgekit.registry.REGISTRY") in found
    assert edgekit_part("edgekit.cli.main") == "cli" and edgekit_part("numpy") is None
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def format_comparisons(path: Path, formats: set[str], shown_from: Path = ROOT.parent) -> list[str]:
    """`x == "onnx"`, `fmt in ("torch", "keras")` and the like: a comparison with a registered format's name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = {c.value for side in sides for c in ast.walk(side) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        if names & formats:
            found.append(f"{path.relative_to(shown_from)}:{node.lineno} compares with {sorted(names & formats)}")
    return found


def test_no_format_name_is_compared_outside_the_registry(tmp_path):
    """Adding a format is a folder and a registry entry: the drivers ask the registry's capabilities, not names."""
    from edgekit.registry import backends

    formats = set(backends())
    outside = [p for p in sorted(ROOT.rglob("*.py")) if part_of(p) not in {"backends", "registry"} and p not in STANDALONE]
    found = [line for path in outside for line in format_comparisons(path, formats)]
    assert not found, "format names compared outside edgekit/registry.py and edgekit/backends/:\n" + "\n".join(found)
    probe = tmp_path / "probe.py"
    probe.write_text('if source.family in ("torch", "keras") or to != "tflite" or x == "onnxruntime":\n    pass\n')
    assert format_comparisons(probe, formats, tmp_path) == [
        "probe.py:1 compares with ['keras', 'torch']",
        "probe.py:1 compares with ['tflite']",
    ]
