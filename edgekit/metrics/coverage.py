"""int8 coverage: how much of an int8 model the runtime actually executes in int8.

Each runtime says it its own way (backends/<format>/coverage.py reads it: OpenVINO's runtime model, ONNX Runtime's
optimized graph, the LiteRT interpreter's ops after delegation, ExecuTorch's delegated partitions); each gives the
layers that multiply (convolutions, matrix products) with the precision they run in and their MACs per sample, and
the float islands: ops that compute in float between int8 neighbours (a DequantizeLinear -> op -> QuantizeLinear
left around an op with no int8 kernel). This module sums them up the same way for all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

INT8, FLOAT = "int8", "float"
ISLANDS_SHOWN = 8
WELL_COVERED = 0.95  # of the MACs in int8: below this a report names what stayed float


@dataclass(frozen=True)
class Layer:
    """One executed layer that multiplies: its name in the runtime, its op there, its precision, its MACs per sample."""

    name: str
    op: str
    precision: str  # INT8 or FLOAT
    macs: int | None = None


@dataclass(frozen=True)
class Island:
    """A float op between int8 neighbours (its MACs when it multiplies, else None); a float layer among them is
    listed as a float layer only."""

    name: str
    op: str
    macs: int | None = None


def summarize(layers: list[Layer], islands: list[Island], read_from: str) -> dict:
    """The coverage a report carries: shares of MACs and of layers in int8, the float layers by MACs, the islands."""
    known = [x for x in layers if x.macs is not None]
    total = sum(x.macs for x in known)
    int8_macs = sum(x.macs for x in known if x.precision == INT8)
    floats = sorted((x for x in layers if x.precision == FLOAT), key=lambda x: -(x.macs or 0))
    islands = [x for x in islands if x.name not in {f.name for f in floats}]  # a float layer is named once, as one
    share = int8_macs / total if total and len(known) == len(layers) else None
    return {
        "macs_share": share,
        "layers_share": sum(x.precision == INT8 for x in layers) / len(layers) if layers else None,
        "int8_layers": sum(x.precision == INT8 for x in layers),
        "layers": len(layers),
        "int8_macs": int8_macs if share is not None else None,
        "macs": total if share is not None else None,
        "float_layers": [{**asdict(x), "macs_share": x.macs / total if x.macs and total else None} for x in floats],
        "islands": [asdict(x) for x in islands],
        "read_from": read_from,
    }


def share(coverage: dict | None) -> float | None:
    """The headline share: of the MACs where every layer's MACs are known, else of the layers."""
    if not coverage:
        return None
    return coverage["macs_share"] if coverage["macs_share"] is not None else coverage["layers_share"]


def coverage_text(coverage: dict | None) -> str | None:
    """`int8 coverage 97.3% of MACs (20/21 layers); float: fc (Gemm, 2.7%)` for tables and notes."""
    if not coverage:
        return None
    value = share(coverage)
    if value is None:
        return "int8 coverage: no multiplying layers"
    unit = "of MACs" if coverage["macs_share"] is not None else "of layers"
    text = f"int8 coverage {100 * value:.1f}% {unit} ({coverage['int8_layers']}/{coverage['layers']} layers)"
    floats = coverage["float_layers"][:ISLANDS_SHOWN]
    if floats:
        text += "; float: " + ", ".join(_named(x) for x in floats)
    if coverage["islands"]:
        text += "; float islands: " + ", ".join(f"{x['name']} ({x['op']})" for x in coverage["islands"][:ISLANDS_SHOWN])
    return text


def _named(layer: dict) -> str:
    part = f", {100 * layer['macs_share']:.1f}%" if layer.get("macs_share") is not None else ""
    return f"{layer['name']} ({layer['op']}{part})"


def why_size_only(coverage: dict | None) -> str | None:
    """What the coverage says of an int8 model that is not faster: the float share, else that int8 kernels ran."""
    value = share(coverage)
    if value is None:
        return None
    if value < WELL_COVERED:
        return f"only {100 * value:.0f}% of its MACs run in int8: {coverage_text(coverage)}"
    return f"{100 * value:.0f}% of its MACs run in int8 kernels: the int8 kernels themselves are no faster on this CPU"
