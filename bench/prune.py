"""13. Pruning that makes the model faster: the ResNet-18 shape with 30% of its channels pruned, kept channel counts
rounded to multiples of 1 (not rounded), 8, 16 and 32, timed on ONNX Runtime and OpenVINO at 1 and 2 threads in fp32
(and int8 for unrounded vs this class's default): the MAC ratio beside the p50 ratio, both vs the unpruned model.

`python -m bench prune`; EDGEKIT_PRUNE_ROUNDS=N (default 3) interleaved rounds.
"""

from __future__ import annotations

import os

from bench.common import ISA_CLASS, artifact, p50, pruned_name, publish, ratio_text, spread
from edgekit.isa import channel_multiple

MULTIPLES = (1, 8, 16, 32)
TARGETS = {"onnx": "onnxruntime:cpu", "openvino": "openvino:cpu"}
ROUNDS = int(os.environ.get("EDGEKIT_PRUNE_ROUNDS", "3"))


def variants() -> dict[str, tuple[str, str]]:
    """label -> (bench model name, precision): the unpruned model first, then each multiple in fp32, then int8."""
    default = channel_multiple(ISA_CLASS)
    found = {"unpruned fp32": ("resnet18_shape", "fp32")}
    found |= {f"pruned x{m} fp32": (pruned_name(m), "fp32") for m in MULTIPLES}
    found |= {"unpruned int8": ("resnet18_shape", "int8")}
    found |= {f"pruned x{m} int8": (pruned_name(m), "int8") for m in sorted({1, default})}
    return found


def run(threads_list: tuple[int, ...] = (1, 2)) -> None:
    from edgekit.backends.onnx.loader import read_onnx
    from edgekit.backends.onnx.macs import total_macs

    rows = []
    for fmt, target in TARGETS.items():
        paths = {label: artifact(model, precision, fmt) for label, (model, precision) in variants().items()}
        onnx = {label: artifact(model, "fp32", "onnx") for label, (model, _) in variants().items()}
        macs = {label: total_macs(read_onnx(path)) for label, path in onnx.items()}
        widths = {label: _widths(path) for label, path in onnx.items()}
        for threads in threads_list:
            times = {label: [] for label in paths}
            for _ in range(ROUNDS):  # interleaved: drift on a shared VM hits every variant alike
                for label, path in paths.items():
                    times[label].append(p50(path, threads))
            for label in paths:
                base = "unpruned int8" if label.endswith("int8") else "unpruned fp32"
                ratios = [t / b for t, b in zip(times[label], times[base], strict=True)]
                rows.append(
                    [
                        target,
                        threads,
                        label,
                        widths[label],
                        f"{macs[label] / 1e9:.2f} G",
                        f"{macs[label] / macs['unpruned fp32']:.3f}",
                        f"{spread(times[label])['median']:.2f}",
                        ratio_text(spread(ratios)),
                    ]
                )
    publish(
        "prune",
        f"Channel pruning (30%) and the kept-channel multiple: MAC ratio vs p50 ratio, ResNet-18 shape, batch 1 ({ISA_CLASS})",
        ["target", "threads", "model", "kept channels per stage", "MACs", "MAC ratio", "p50 ms", "p50 ratio median (min-max)"],
        rows,
        [
            f"{ROUNDS} interleaved rounds, each a fresh process per artifact: 10 warm-up + 60 timed runs; ratios vs the unpruned model "
            "of the same precision on the same runtime and thread count.",
            "Pruned with `edgekit prune -m channels --channels 0.3 --round-to N` (torch-pruning's dependency graph, L2 magnitude, "
            "BN recalibrated on 300 real photo crops); xN keeps the multiple of N nearest to 70% of each layer's channels.",
            f"edgekit's default on {ISA_CLASS}: x{channel_multiple(ISA_CLASS)}. int8: static, calibrated on 300 photo crops.",
        ],
    )


def _widths(path) -> str:
    """The distinct output-channel counts of the model's convolutions, in order: its stages' widths."""
    from edgekit.backends.onnx.loader import read_onnx

    model = read_onnx(path)
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    widths = [shapes[n.input[1]][0] for n in model.graph.node if n.op_type == "Conv" and n.input[1] in shapes]
    return "/".join(str(w) for w in dict.fromkeys(widths))
