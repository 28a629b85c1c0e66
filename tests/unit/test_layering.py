"""The layering rule of docs/architecture.md, read from the source: every import in edgekit (those inside functions too)
goes to its own layer or one below; the parts of edgekit (each backend folder a part of its own) and its files import
one another without a cycle; no driver imports a named backend (they reach backends through the registry's strings);
and a framework is imported only under edgekit/backends/ (the zoo's PyTorch model definitions and the standalone device
runner excepted)."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "edgekit"

# Lowest first. A part is a top-level module or subpackage of edgekit, or a backend's folder (backends.<format>);
# each belongs to one layer.
LAYERS = (
    ("core", {"errors", "artifact", "record", "fileio", "native", "progress", "imports", "isa", "machine", "emulation", "memo"}),
    ("registry", {"registry", "commands"}),
    ("data", {"source", "zoo", "calibration", "provenance"}),
    ("metrics and reports", {"metrics", "report"}),
    ("runtime", {"targets", "devices"}),
    ("algorithms", {"conversion", "quantization", "pruning"}),
    ("backends", {"backends"}),  # and every backends.<format>
    ("drivers", {"converters", "validation", "debug", "summary"}),
    ("recipe", {"recipe"}),
    ("api", {"api", "demo"}),
    ("cli", {"cli", "__main__", "__init__"}),
)
FRAMEWORKS = {
    "onnxruntime", "openvino", "nncf", "ai_edge_litert", "tflite_runtime", "litert_torch", "ai_edge_torch",
    "executorch", "tensorrt", "tensorflow", "keras", "tf2onnx", "torch", "torchao", "onnx", "transformers",
}  # fmt: skip
# Function-local imports are for what is slow to import: a third-party package (a framework, numpy, typer, rich, yaml:
# 10-800 ms each here), a standard module of one platform, or one measured slow; else they go at the top of the module.
PLATFORM_ONLY = {"resource", "fcntl", "msvcrt", "termios", "winreg", "pwd", "grp"}
SLOW_STDLIB = {"urllib", "http", "multiprocessing", "concurrent", "asyncio", "email", "xml", "sqlite3", "ssl", "ctypes"}
SLOW_EDGEKIT = {"edgekit.api"}  # 96 ms cumulative (python -X importtime): `import edgekit` and the CLI load it on first use
STANDALONE = {ROOT / "devices" / "device_runner.py"}  # goes to a board alone: stdlib, numpy and its runtime
MODEL_DEFINITIONS = ROOT / "zoo"  # the zoo's models are PyTorch code by nature


def part_of(path: Path, root: Path = ROOT) -> str:
    """The part a file belongs to: `backends.<format>` for a backend's folder, else its top-level subpackage, or its own
    name for a top-level module."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[0] == "backends" and len(parts) > 2:
        return f"backends.{parts[1]}"
    return parts[0]


def module_of(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, at any depth (relative ones resolved in `package`)."""
    nodes = ast.walk(ast.parse(path.read_text(), str(path)))
    return [found for node in nodes if isinstance(node, (ast.Import, ast.ImportFrom)) for found in imported_modules_of(node, package)]


def imported_modules_of(node, package: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, absolute name) of what one import statement imports (`from a import b`: a and a.b)."""
    if isinstance(node, ast.Import):
        return [(node.lineno, alias.name) for alias in node.names]
    base = node.module or ""
    if node.level:
        base = ".".join(package[: len(package) - node.level + 1] + ((node.module,) if node.module else ()))
    return [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]


def is_slow_outside(name: str) -> bool:
    """A module outside edgekit that is slow to import: any third-party package, or a slow or one-platform stdlib one."""
    top = name.split(".")[0]
    return top != "__future__" and (top not in sys.stdlib_module_names or top in PLATFORM_ONLY | SLOW_STDLIB)


def package_of(path: Path, root: Path = ROOT) -> tuple[str, ...]:
    return path.relative_to(root.parent).with_suffix("").parts[:-1]


class Tree:
    """The edgekit source under `root`: its modules, and which module or part each import names."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.files = sorted(root.rglob("*.py"))
        self.modules = {module_of(f, root): f for f in self.files}

    def target(self, name: str) -> str | None:
        """The edgekit module an imported name lies in (the longest module prefix), or None outside edgekit."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name if name and name != self.root.name else None

    def imports(self):
        """(file, line, imported name, edgekit module it lies in or None) for every import."""
        for path in self.files:
            for line, name in imported_modules(path, package_of(path, self.root)):
                yield path, line, name, self.target(name)

    def part_graph(self) -> tuple[dict[str, set[str]], dict[tuple[str, str], str]]:
        """Edges between parts and where each edge was first seen."""
        edges, where = defaultdict(set), {}
        for path, line, _, module in self.imports():
            if module is None:
                continue
            source, target = part_of(path, self.root), part_of(self.modules[module], self.root)
            if target != source:
                edges[source].add(target)
                where.setdefault((source, target), f"{path.relative_to(self.root.parent)}:{line}")
        return edges, where

    def file_graph(self) -> dict[str, set[str]]:
        """Edges between modules (a module importing its own package's __init__ left out: Python runs that first)."""
        edges = defaultdict(set)
        for path, _, _, module in self.imports():
            source = module_of(path, self.root)
            if module is not None and module != source and not source.startswith(module + "."):
                edges[source].add(module)
        return edges

    def top_level_imports(self, module: str) -> list[str]:
        """The names `module` imports at its top level (what importing it runs)."""
        path = self.modules[module]
        found = []
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [name for _, name in imported_modules_of(node, package_of(path, self.root))]
        return found

    def slow_to_import(self, module: str) -> bool:
        """Whether importing the edgekit `module` loads something slow, at its top level or through the modules (and
        their packages) it imports there."""
        seen, stack = set(), [module]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            names = self.top_level_imports(current)
            outside = [name for name in names if name.split(".")[0] != self.root.name]
            if current in SLOW_EDGEKIT or any(is_slow_outside(name) for name in outside):
                return True
            parts = current.split(".")
            stack += [t for n in names if (t := self.target(n)) and t != current]
            stack += [p for i in range(2, len(parts)) if (p := ".".join(parts[:i])) in self.modules]
        return False

    def needless_local_imports(self) -> list[str]:
        """Imports inside functions of what is quick to import (the standalone device runner and edgekit's own lazy
        API excepted)."""
        found = []
        for path in self.files:
            if path in STANDALONE or path == self.root / "__init__.py":
                continue
            tree = ast.parse(path.read_text(), str(path))
            top = {id(node) for node in tree.body}
            for node in ast.walk(tree):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in top:
                    continue
                names = [name for _, name in imported_modules_of(node, package_of(path, self.root))]
                if not any(self._slow(name, path) for name in names):
                    found.append(f"{path.relative_to(self.root.parent)}:{node.lineno} {ast.unparse(node)}")
        return found

    def _slow(self, name: str, importer: Path) -> bool:
        if name.split(".")[0] != self.root.name:
            return is_slow_outside(name)
        module = self.target(name)
        return module is not None and module != module_of(importer, self.root) and self.slow_to_import(module)

    def named_backend_imports(self) -> list[str]:
        """Imports of a backend's folder (backends.<format>) from outside the backends: a driver reaches a backend
        through the registry's "module:attr" strings, so adding a format never edits a driver."""
        found = {
            f"{path.relative_to(self.root.parent)}:{line} imports {module}"
            for path, line, _, module in self.imports()
            if module is not None
            and part_of(self.modules[module], self.root).startswith("backends.")
            and not part_of(path, self.root).startswith("backends")
        }
        return sorted(found)


def layer_of(part: str) -> int:
    for index, (_, parts) in enumerate(LAYERS):
        if part in parts or part.partition(".")[0] in parts and part.startswith("backends."):
            return index
    raise AssertionError(f"edgekit/{part} is in no layer: add it to LAYERS here and to docs/architecture.md")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
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


def framework_imports(tree: Tree) -> list[str]:
    """Imports of a framework outside edgekit/backends/ (the standalone device runner and the zoo's models excepted)."""
    return [
        f"{path.relative_to(tree.root.parent)}:{line} imports {name}"
        for path, line, name, _ in tree.imports()
        if name.split(".")[0] in FRAMEWORKS
        and part_of(path, tree.root).partition(".")[0] != "backends"
        and path not in STANDALONE
        and MODEL_DEFINITIONS not in path.parents
    ]


def test_every_part_of_edgekit_has_a_layer():
    parts = {part_of(path) for path in ROOT.rglob("*.py")}
    for part in parts:
        layer_of(part)
    named = set().union(*(p for _, p in LAYERS))
    assert not named - parts, f"LAYERS names parts that do not exist: {sorted(named - parts)}"


def test_imports_go_only_downward():
    edges, where = Tree().part_graph()
    upward = [
        f"{where[(a, b)]}: {a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a in sorted(edges)
        for b in sorted(edges[a])
        if layer_of(b) > layer_of(a)
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_no_cycle_between_the_parts_of_edgekit():
    found = cycles(Tree().part_graph()[0])
    assert not found, "import cycles between parts: " + "; ".join(", ".join(c) for c in found)


def test_no_cycle_between_files():
    found = cycles(Tree().file_graph())
    assert not found, "import cycles between files: " + "; ".join(", ".join(c) for c in found)


def test_no_driver_imports_a_named_backend():
    found = Tree().named_backend_imports()
    assert not found, "imports of a backend's folder from outside edgekit/backends/ (use a registry capability):\n" + "\n".join(found)


def test_function_local_imports_only_defer_what_is_slow_to_import():
    found = Tree().needless_local_imports()
    assert not found, "imports inside functions of modules quick to import (move them to the top):\n" + "\n".join(found)


def test_frameworks_are_imported_only_in_their_backend_folder():
    found = framework_imports(Tree())
    assert not found, "framework imports outside edgekit/backends/:\n" + "\n".join(found)


def _planted(tmp_path: Path, files: dict[str, str]) -> Tree:
    root = tmp_path / "edgekit"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return Tree(root)


def test_the_checks_fail_on_planted_cycles_driver_imports_and_frameworks(tmp_path):
    """A cycle closed inside a function between two files of one part, a driver's import of a backend's folder, a
    cycle between two backends and a framework in a driver are each found."""
    tree = _planted(
        tmp_path,
        {
            "calibration/__init__.py": "",
            "calibration/samples.py": "from edgekit.calibration.sources import load\n",
            "calibration/sources.py": "def load():\n    from edgekit.calibration import samples\n",
            "converters/__init__.py": "",
            "converters/pipeline.py": "def convert():\n    from edgekit.backends.onnx.loader import read_onnx\n    import onnx\n",
            "backends/__init__.py": "",
            "backends/routes.py": "",
            "backends/onnx/__init__.py": "",
            "backends/onnx/loader.py": "import onnx\nfrom edgekit.backends import routes\nfrom edgekit.backends.torch import loader\n",
            "backends/torch/__init__.py": "",
            "backends/torch/loader.py": "from ..onnx.loader import read_onnx\n",
        },
    )
    assert cycles(tree.file_graph()) == [
        ["edgekit.backends.onnx.loader", "edgekit.backends.torch.loader"],
        ["edgekit.calibration.samples", "edgekit.calibration.sources"],
    ]
    assert cycles(tree.part_graph()[0]) == [["backends.onnx", "backends.torch"]]
    assert tree.named_backend_imports() == ["edgekit/converters/pipeline.py:2 imports edgekit.backends.onnx.loader"]
    assert framework_imports(tree) == ["edgekit/converters/pipeline.py:3 imports onnx"]
    assert tree.needless_local_imports() == ["edgekit/calibration/sources.py:2 from edgekit.calibration import samples"]
    assert layer_of("backends.onnx") == layer_of("backends") and layer_of("pruning") < layer_of("backends")


def test_the_check_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """A lazy import is read like any other, so a cycle closed inside a function fails too."""
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from edgekit.cli import main\n    import onnxruntime\n    from ..registry import REGISTRY\n")
    found = imported_modules(module, ("edgekit", "validate"))
    assert (2, "edgekit.cli.main") in found and (3, "onnxruntime") in found and (4, "edgekit.registry.REGISTRY") in found
    assert Tree().target("edgekit.cli.main") == "edgekit.cli" and Tree().target("numpy") is None
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
    outside = [
        p for p in sorted(ROOT.rglob("*.py")) if part_of(p).partition(".")[0] not in {"backends", "registry"} and p not in STANDALONE
    ]
    found = [line for path in outside for line in format_comparisons(path, formats)]
    assert not found, "format names compared outside edgekit/registry.py and edgekit/backends/:\n" + "\n".join(found)
    probe = tmp_path / "probe.py"
    probe.write_text('if source.family in ("torch", "keras") or to != "tflite" or x == "onnxruntime":\n    pass\n')
    assert format_comparisons(probe, formats, tmp_path) == [
        "probe.py:1 compares with ['keras', 'torch']",
        "probe.py:1 compares with ['tflite']",
    ]
