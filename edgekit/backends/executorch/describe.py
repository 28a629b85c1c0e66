"""Read a .pte: inputs, outputs, which delegates it calls and which operators run outside them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from edgekit.artifact import Artifact, TensorSpec
from edgekit.errors import ModelLoadError
from edgekit.native import stderr_silenced

# ExecuTorch's ScalarType codes (as c10's) -> numpy dtype names
DTYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64", 11: "bool"}


def load_program(path: Path):
    """The program in ExecuTorch's runtime, or one clear error for a file that is not a .pte it can load."""

    try:
        with stderr_silenced():  # the runtime's cpuinfo and threadpool banners
            from executorch.runtime import Runtime

            program = Runtime.get().load_program(str(path))
        return program, program.metadata("forward")
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(
            f"{Path(path).name} is not a valid ExecuTorch program ({str(exc).splitlines()[0][:200]})",
            hint="re-convert it with `edgekit convert MODEL --to executorch`",
        ) from None


def tensor_specs(meta, count: int, getter: str, prefix: str) -> list[TensorSpec]:
    """Specs from a MethodMeta; a .pte keeps no tensor names, so they are numbered (matched by position)."""
    specs = []
    for i in range(count):
        info = getattr(meta, getter)(i)
        dtype = DTYPES.get(int(info.dtype()), f"scalar-type-{int(info.dtype())}")
        specs.append(TensorSpec(f"{prefix}_{i}", tuple(int(d) for d in info.sizes()), dtype))
    return specs


def executorch_artifact(path: Path, precision: str | None = None) -> Artifact:
    _, meta = load_program(path)
    inputs = tensor_specs(meta, meta.num_inputs(), "input_tensor_meta", "input")
    outputs = tensor_specs(meta, meta.num_outputs(), "output_tensor_meta", "output")
    return Artifact(Path(path), "executorch", precision or "unknown", inputs, outputs, {"delegates": delegate_split(path)})


def read_program(path: Path):
    """The .pte's Program (the flatbuffer, its delegate payloads inline), as ExecuTorch's serializer reads it."""

    with stderr_silenced():  # torchao's notes on kernels it cannot load here
        from executorch.exir._serialize._program import deserialize_pte_binary
    try:
        return deserialize_pte_binary(Path(path).read_bytes()).program
    except Exception as exc:  # the flatbuffer reader raises many types on a damaged file
        raise ModelLoadError(
            f"{Path(path).name} is not a valid ExecuTorch program ({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__})",
            hint="re-convert it with `edgekit convert MODEL --to executorch`",
        ) from None


def delegate_split(path: Path) -> dict:
    """The delegate calls of the program and the operators it runs on ExecuTorch's own CPU kernels (outside any delegate)."""
    plan = read_program(path).execution_plan[0]
    calls = Counter(type(i.instr_args).__name__ for chain in plan.chains for i in chain.instructions)
    kernels = Counter()
    for chain in plan.chains:
        for instruction in chain.instructions:
            if type(instruction.instr_args).__name__ == "KernelCall":
                op = plan.operators[instruction.instr_args.op_index]
                kernels[f"{op.name}.{op.overload}" if op.overload else op.name] += 1
    return {
        "delegates": sorted({d.id for d in plan.delegates}),
        "delegate_calls": calls.get("DelegateCall", 0),
        "ops_outside_delegates": dict(kernels.most_common()),
    }


def executorch_summary(path: Path) -> dict:
    """The delegate split for `edgekit info`: ops on the delegate (as the conversion recorded them; a .pte keeps only
    the delegate's compiled blob) and the operators the program runs outside it."""
    from edgekit.provenance import read_provenance

    split = delegate_split(path)
    recorded = (read_provenance(path) or {}).get("fallback") or {}
    inside = sum((recorded.get("delegated_ops") or {}).values()) if recorded else "?"
    outside = sum(split["ops_outside_delegates"].values())
    return {
        "delegate": {
            "name": ", ".join(split["delegates"]) or "no",
            "ops_on_delegate": inside,
            "ops_total": inside + outside if isinstance(inside, int) else "?",
            "partitions": split["delegate_calls"],
            "ops_on_cpu": split["ops_outside_delegates"],
        }
    }
