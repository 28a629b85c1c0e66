"""The static int8 scheme a model is made with, chosen for where it will run: the CPU class of the target (its ISA:
u8 x s8 where VNNI/AMX accumulate it in int32, with pair-safe weights on AVX2, u8 x u8 where u8 x s8 would saturate,
s8 x s8 on Arm; edgekit.isa) or the symmetric int8 of a backend that takes its own (TensorRT's explicit Q/DQ)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from edgekit import registry
from edgekit.devices.isa_class import class_for


@dataclass(frozen=True)
class Int8Scheme:
    """Activation/weight types and symmetry for static int8, and why."""

    activations: str  # "uint8" | "int8"
    weights: str
    symmetric_activations: bool
    reason: str
    quantize_bias: bool = True  # int32 bias DequantizeLinear (ONNX Runtime fuses it); TensorRT keeps float biases
    isa_class: str | None = None  # the CPU class the scheme was chosen for (None: not a CPU target)
    isa_from: str | None = None  # where that class came from: this host, --for-target, a device
    pair_safe_weights: bool = False  # weight pairs kept within VPMADDUBSW's int16 (x86 without VNNI; quantization.pair_safe)

    def to_dict(self) -> dict:
        return asdict(self)


def choose_scheme(for_target: str) -> Int8Scheme:
    """The int8 scheme for `--for-target`: a backend's own (TensorRT's), or the one for the ISA class the model will
    run on (a target on this host, a class name, a device preset or an inventory device; see edgekit.isa)."""
    own = registry.own_int8_backend(for_target)
    if own is not None:
        reason = f"{own.title}'s explicit quantization takes symmetric int8 Q/DQ (zero-point 0) only, biases in float"
        return Int8Scheme("int8", "int8", True, reason, False)
    isa, source = class_for(for_target)
    return Int8Scheme(
        isa.activations,
        isa.weights,
        False,
        f"{isa.name}: {isa.reason}",
        isa_class=isa.name,
        isa_from=source,
        pair_safe_weights=isa.pair_safe_weights and isa.weights == "int8",
    )
