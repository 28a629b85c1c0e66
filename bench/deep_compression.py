"""Deep Compression (Han et al., ICLR 2016): prune -> share weights (k-means) -> Huffman, counted as the paper counts.

Models: LeNet-300-100 (the paper's MNIST MLP, trained here on Fashion-MNIST) and the repo's FashionCNN. Fine-tuning
uses a 20k subset of the Fashion-MNIST training split; accuracy is on all 10k test images (PyTorch). Then, where it
pays on a target: Vela's weight size for clustered vs unclustered int8 TFLite (Ethos-U), and whether OpenVINO or
ONNX Runtime run a 90%-sparse int8 model any faster than a dense one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from bench.common import CACHE, RESULTS, publish, spread
from edgekit.artifact import TensorSpec
from edgekit.source import ModelSource

PAPER = {"LeNet-300-100": "40x (MNIST, 8% weights, 6-bit)", "AlexNet": "35x", "VGG-16": "49x"}
IMAGE = (TensorSpec("image", ("batch", 1, 28, 28), "float32"),)
TRAIN_SUBSET = 20_000
FINETUNE = {"LeNet-300-100": (8, 1e-3), "FashionCNN": (2, 3e-4)}  # (epochs per stage: pruning, then centroids; learning rate)
CONFIGS = [  # (model, sparsity, clusters)
    ("LeNet-300-100", 0.8, 16),
    ("LeNet-300-100", 0.9, 16),
    ("LeNet-300-100", 0.92, 64),  # the paper's setting: 8% of the weights kept, 6-bit shared values
    ("LeNet-300-100", 0.95, 16),
    ("FashionCNN", 0.8, 16),
    ("FashionCNN", 0.9, 16),
]


def lenet_300_100():
    """The paper's LeNet-300-100: 784-300-100-10 fully connected, for 1x28x28 images in [0, 1] (normalised inside)."""
    import torch

    from edgekit.zoo.models import FASHION_MEAN, FASHION_STD

    class LeNet300100(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.classifier = torch.nn.Sequential(
                torch.nn.Flatten(),
                torch.nn.Linear(784, 300),
                torch.nn.ReLU(),
                torch.nn.Linear(300, 100),
                torch.nn.ReLU(),
                torch.nn.Linear(100, 10),
            )

        def forward(self, image):
            return self.classifier((image - FASHION_MEAN) / FASHION_STD)

    return LeNet300100()


def run() -> None:
    import torch

    torch.set_num_threads(1)  # fine-tuning: one thread is steadier than two on a shared machine
    data = _data()
    sources = {"LeNet-300-100": _trained_lenet(data), "FashionCNN": _fashion()}
    rows, results = [], []
    for model, sparsity, clusters in CONFIGS:
        storage = _compress(sources[model], model, sparsity, clusters, data)
        base = storage[0]["accuracy"]
        for row in storage:
            results.append({"model": model, "sparsity": sparsity, "clusters": clusters, **row})
            rows.append(_row(model, sparsity, clusters, row, base))
    best = _best(results)
    surgery = _surgery_vs_iterative(sources["LeNet-300-100"], data)
    vela = _vela(sources["FashionCNN"], data)
    latency = _sparse_latency(sources["LeNet-300-100"], data)
    notes = [
        "Fine-tuning per stage (pruning with a cubic schedule, then centroids) on "
        f"{TRAIN_SUBSET:,} Fashion-MNIST training images, AdamW, 1 torch thread: "
        + "; ".join(f"{m} {e} epochs, lr {lr:g}" for m, (e, lr) in FINETUNE.items())
        + ". LeNet-300-100 itself: 10 epochs on all 60k training images. Accuracy: the 10k test images in PyTorch; "
        "int8 rows: storage of per-channel int8 weights (accuracy from ONNX Runtime only for the FashionCNN 90% row, made by the CLI).",
        "Ratio as the paper: fp32 bytes of all parameters / coded bytes (Huffman-coded shared-value indices and relative indices, "
        "codebooks and code tables included; biases stay fp32). Relative index: 8 bits for conv, 5 bits for fc (the paper's).",
        "Paper: LeNet-300-100 40x, AlexNet 35x, VGG-16 49x (ImageNet/MNIST; not the same data: set side by side, not equal).",
        best,
    ]
    publish(
        "deep_compression",
        "Deep Compression: storage per stage, ratio beside the paper's",
        ["model", "sparsity", "clusters", "stage", "non-zeros", "bits/w", "coded", "gzip", "ratio", "paper", "accuracy", "drop (pts)"],
        rows,
        notes,
    )
    extra = _sections(surgery, vela, latency)
    with open(RESULTS / "deep_compression.md", "a") as f:
        f.write(extra)
    print(extra, flush=True)
    report = json.loads((RESULTS / "deep_compression.json").read_text())
    report.update(storage=results, surgery=surgery, vela=vela, sparse_latency=latency)
    (RESULTS / "deep_compression.json").write_text(json.dumps(report, indent=2, default=str))


def _data() -> dict:
    """Training subset (20k), test (10k) and calibration (1k) .npz files, cached."""
    from edgekit.zoo.fashion_mnist import IDX_DIR, read_idx, to_model_input, write_demo_data

    out = CACHE / "deep_compression"
    out.mkdir(parents=True, exist_ok=True)
    test, calib = write_demo_data(out)
    train = out / f"train{TRAIN_SUBSET}.npz"
    if not train.exists():
        images, labels = read_idx("train", Path(os.environ.get("FASHION_MNIST_DIR", IDX_DIR)))
        pick = np.random.default_rng(0).permutation(len(images))[:TRAIN_SUBSET]
        np.savez(train, image=to_model_input(images[pick]), labels=labels[pick])
    return {"train": train, "test": test, "calib": calib, "dir": out}


def _fashion() -> ModelSource:
    from edgekit.demo import demo_source

    return demo_source()


def _trained_lenet(data: dict) -> ModelSource:
    """LeNet-300-100 trained 10 epochs on the full 60k training split (seed 0), cached as a state dict."""
    import torch

    path = data["dir"] / "lenet_300_100.full60k.pt"
    if not path.exists():
        torch.manual_seed(0)
        model = lenet_300_100()
        images, labels = _full_train()
        optimizer = torch.optim.Adam(model.parameters(), 1e-3)
        for _ in range(10):
            order = torch.randperm(len(images))
            for start in range(0, len(images), 128):
                idx = order[start : start + 128]
                loss = torch.nn.functional.cross_entropy(model(images[idx]), labels[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        torch.save(model.state_dict(), path)
    return ModelSource("bench.deep_compression:lenet_300_100", "torch-factory", str(path))


def _full_train():
    import torch

    from edgekit.zoo.fashion_mnist import IDX_DIR, read_idx, to_model_input

    images, labels = read_idx("train", Path(os.environ.get("FASHION_MNIST_DIR", IDX_DIR)))
    return torch.from_numpy(to_model_input(images)), torch.from_numpy(labels)


def _compress(source: ModelSource, model: str, sparsity: float, clusters: int, data: dict) -> list[dict]:
    from edgekit.pruning import PruneOptions
    from edgekit.pruning.stages import prune

    epochs, learning_rate = FINETUNE[model]
    out = data["dir"] / f"{model}.s{sparsity}.k{clusters}.e{epochs}.pt2"
    cached = out.with_suffix(".storage.json")
    if not cached.exists():
        options = PruneOptions("magnitude,cluster", sparsity, epochs=epochs, learning_rate=learning_rate, clusters=clusters)
        report = prune(source, options, out, list(IMAGE), str(data["test"]), str(data["train"]))
        cached.write_text(json.dumps(report.storage))
    return json.loads(cached.read_text())


def _row(model: str, sparsity: float, clusters: int, row: dict, base: float) -> list:
    t, acc = row["total"], row["accuracy"]
    return [
        model,
        f"{sparsity:.0%}",
        clusters,
        row["stage"],
        f"{t['nonzeros']:,} / {t['parameters']:,}",
        f"{t['bits']:.2f}",
        f"{t['coded_bytes'] / 1024:.1f} KiB",
        f"{t['gzip_bytes'] / 1024:.1f} KiB",
        f"{t['ratio']:.1f}x",
        PAPER["LeNet-300-100"].split(" ")[0] if model == "LeNet-300-100" and row["stage"] == "clustered" else "",
        "-" if acc is None else f"{acc:.2f}%",
        "-" if acc is None else f"{base - acc:+.2f}",
    ]


def _best(results: list[dict]) -> str:
    """The highest coded ratio with at most 0.5 points of accuracy lost, per model."""
    lines = []
    for model in dict.fromkeys(r["model"] for r in results):
        mine = [r for r in results if r["model"] == model]
        base = next(r["accuracy"] for r in mine if r["stage"] == "original")
        ok = [r for r in mine if r["accuracy"] is not None and base - r["accuracy"] <= 0.5 and r["stage"] != "original"]
        if ok:
            top = max(ok, key=lambda r: r["total"]["ratio"])
            lines.append(
                f"{model}: {top['total']['ratio']:.1f}x at {top['accuracy']:.2f}% ({base - top['accuracy']:+.2f} pts; "
                f"{top['stage']}, sparsity {top['sparsity']:.0%}, {top['clusters']} clusters)"
            )
        else:
            lines.append(f"{model}: no setting within 0.5 pts")
    return "Ratio at <= 0.5 pt accuracy loss: " + "; ".join(lines)


def _surgery_vs_iterative(source: ModelSource, data: dict) -> list[dict]:
    """Same sparsity, same epochs, same data: gradual magnitude pruning vs dynamic network surgery (LeNet-300-100)."""
    from edgekit.backends.torch.prune import torch_accuracy
    from edgekit.backends.torch.prune_methods import magnitude_prune
    from edgekit.calibration import load_samples
    from edgekit.conversion import load_for_conversion
    from edgekit.pruning import PruneOptions

    cached = data["dir"] / f"surgery.{Path(source.weights).stem}.e{FINETUNE['LeNet-300-100'][0]}.json"
    if cached.exists():
        return json.loads(cached.read_text())
    module, specs = load_for_conversion(source, list(IMAGE))
    train = load_samples(str(data["train"]), None, 0, None, specs)
    test = load_samples(str(data["test"]), None, 0, None, specs)
    out = []
    epochs, learning_rate = FINETUNE["LeNet-300-100"]
    for sparsity in (0.95, 0.98):
        for surgery in (False, True):
            options = PruneOptions("magnitude", sparsity, epochs=epochs, learning_rate=learning_rate, surgery=surgery)
            model, report = magnitude_prune(module, options, train)
            out.append(
                {
                    "model": "LeNet-300-100",
                    "sparsity": sparsity,
                    "method": "surgery" if surgery else "iterative (cubic)",
                    "epochs": epochs,
                    "accuracy": torch_accuracy(model, test),
                    "reference": torch_accuracy(module, test),
                    "spliced_back": sum(layer.get("spliced_back", 0) for layer in report.layers),
                    "spliced_kept": sum(layer.get("spliced_kept", 0) for layer in report.layers),
                }
            )
    cached.write_text(json.dumps(out))
    return out


def _vela(source: ModelSource, data: dict) -> list[dict]:
    """FashionCNN int8 TFLite through Vela (Ethos-U55-128): weight bytes as Vela counts them, with and without 16 clusters."""
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.provenance import read_provenance
    from edgekit.source import open_source

    variants = {
        "dense": source,
        "dense + 16 clusters": open_source(str(_one_shot(data, "cluster", 0.0))),
        "pruned 90%": open_source(str(_one_shot(data, "magnitude", 0.9))),
        "pruned 90% + 16 clusters": open_source(str(_one_shot(data, "magnitude,cluster", 0.9))),
    }
    rows = []
    for name, variant in variants.items():
        out = data["dir"] / f"vela.{name.replace(' ', '_').replace('%', '').replace('+', 'and')}.tflite"
        if not out.exists():
            options = ConvertOptions("int8", IMAGE, CalibrationOptions(str(data["calib"]), 300), device="ethos-u55-128")
            convert(variant, "tflite", out, options)
        npu = read_provenance(out)["npu"]
        rows.append(
            {
                "variant": name,
                "tflite_bytes": out.stat().st_size,
                "vela_original_weights": npu["weights_original_bytes"],
                "vela_encoded_weights": npu["weights_encoded_bytes"],
                "flash_kib": npu["flash_kib"],
                "inference_time_ms": npu["inference_time_ms"],
            }
        )
    return rows


def _one_shot(data: dict, method: str, sparsity: float) -> Path:
    """The FashionCNN compressed without fine-tuning (Vela's weight bytes depend on the values, not on the training)."""
    from edgekit.pruning import PruneOptions
    from edgekit.pruning.stages import prune

    out = data["dir"] / f"FashionCNN.oneshot.{method.replace(',', '_')}.{sparsity}.pt2"
    if not out.exists():
        prune(_fashion(), PruneOptions(method, sparsity, clusters=16), out, list(IMAGE))
    return out


def _sparse_latency(source: ModelSource, data: dict) -> list[dict]:
    """Dense vs 90%-sparse int8 LeNet-300-100 (fully connected: where OpenVINO's sparse int8 path applies), batch 1 and 64."""
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.pruning import PruneOptions
    from edgekit.pruning.stages import prune
    from edgekit.source import open_source

    sparse_pt2 = data["dir"] / "LeNet-300-100.s0.9.pt2"
    if not sparse_pt2.exists():
        prune(source, PruneOptions("magnitude", 0.9), sparse_pt2, list(IMAGE))
    calibration = CalibrationOptions(str(data["calib"]), 300)
    calls = {}
    for name, variant in (("dense", source), ("90% sparse", open_source(str(sparse_pt2)))):
        for fmt, suffix in (("onnx", ".onnx"), ("openvino", ".xml")):
            path = data["dir"] / f"lat.{name.split('%')[0].strip()}.int8{suffix}"
            if not path.exists():
                convert(variant, fmt, path, ConvertOptions("int8", IMAGE, calibration))
            for batch in (1, 64):
                if fmt == "onnx":
                    calls[(name, "onnxruntime", "default", batch)] = _ort(path, batch)
                    continue
                for rate in (None, 0.5):
                    setting = "default" if rate is None else f"CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE={rate}"
                    calls[(name, "openvino", setting, batch)] = _ov(path, batch, rate)
    times = _interleaved({key: call for key, (call, _) in calls.items()})
    return [{"model": k[0], "runtime": k[1], "setting": k[2], "batch": k[3], "ms": spread(times[k]), "kernels": calls[k][1]} for k in calls]


def _interleaved(calls: dict, rounds: int = 7, runs: int = 200) -> dict:
    """Every call timed in turn, `rounds` times: slow phases of the shared machine hit all of them alike."""
    import time

    for call in calls.values():
        for _ in range(30):
            call()
    times = {key: [] for key in calls}
    for _ in range(rounds):
        for key, call in calls.items():
            start = time.perf_counter()
            for _ in range(runs):
                call()
            times[key].append((time.perf_counter() - start) / runs * 1000)
    return times


def _ort(path: Path, batch: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: _images(batch)}
    return (lambda: session.run(None, feed)), "ORT CPU (no sparse kernels)"


def _ov(path: Path, batch: int, rate: float | None):
    """A compiled OpenVINO request, and the kernels its FullyConnected layers got (a sparse one would say so)."""
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY"}
    if rate is not None:
        config["CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE"] = rate
    model = core.read_model(str(path))
    model.reshape({model.inputs[0].get_any_name(): [batch, 1, 28, 28]})
    compiled = core.compile_model(model, "CPU", config)
    info = [op.get_rt_info() for op in compiled.get_runtime_model().get_ops()]
    kernels = sorted({i["primitiveType"].astype(str) for i in info if i["layerType"].astype(str) == "FullyConnected"})
    request = compiled.create_infer_request()
    images = _images(batch)
    return (lambda: request.infer([images])), "FullyConnected: " + ", ".join(kernels)


def _images(batch: int) -> np.ndarray:
    from edgekit.zoo.fashion_mnist import TEST_NPZ, load_split

    return np.ascontiguousarray(load_split(TEST_NPZ)[0][:batch])


def _verdict(dense: dict, sparse: dict) -> str:
    """Faster or slower only when the ranges of the rounds do not overlap."""
    if sparse is dense:
        return "-"
    if sparse["max"] < dense["min"]:
        return "faster"
    if sparse["min"] > dense["max"]:
        return "slower"
    return "same within noise: size only"


def _sections(surgery: list[dict], vela: list[dict], latency: list[dict]) -> str:
    lines = ["", "### Dynamic network surgery vs iterative pruning (same sparsity, same epochs, same data)", ""]
    lines += [
        "| model | sparsity | method | epochs | accuracy | drop (pts) | weights spliced back (kept) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['sparsity']:.0%} | {r['method']} | {r['epochs']} | {r['accuracy']:.2f}% | "
        f"{r['reference'] - r['accuracy']:+.2f} | {r['spliced_back']:,} ({r['spliced_kept']:,}) |"
        for r in surgery
    ]
    lines += ["", "### Ethos-U55-128 (Vela): weight bytes of the int8 FashionCNN", ""]
    lines += [
        "| variant | .tflite | Vela original weights | Vela encoded weights | flash (KiB) | est. inference (ms) |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['variant']} | {r['tflite_bytes'] / 1024:.1f} KiB | {r['vela_original_weights'] / 1024:.1f} KiB | "
        f"{r['vela_encoded_weights'] / 1024:.1f} KiB | {r['flash_kib']:.1f} | {r['inference_time_ms']:.3f} |"
        for r in vela
    ]
    lines += [
        "",
        "### Does unstructured sparsity run faster? int8 LeNet-300-100, 2 threads (ms per inference, median (min-max) of 7 interleaved rounds of 200 runs)",
        "",
    ]
    lines += [
        "| model | runtime | setting | batch | latency | vs dense: min (median) | verdict | kernels |",
        "|---|---|---|---|---|---|---|---|",
    ]
    dense = {(r["runtime"], r["setting"], r["batch"]): r["ms"] for r in latency if r["model"] == "dense"}
    for r in latency:
        base, s = dense[(r["runtime"], r["setting"], r["batch"])], r["ms"]
        lines.append(
            f"| {r['model']} | {r['runtime']} | {r['setting']} | {r['batch']} | {s['median']:.4f} ({s['min']:.4f}-{s['max']:.4f}) | "
            f"{base['min'] / s['min']:.2f}x ({base['median'] / s['median']:.2f}x) | {_verdict(base, s)} | {r['kernels']} |"
        )
    lines += [
        "",
        "- Latency: a shared 2-core VM under load from other jobs; differences within the min-max spread are noise. "
        "Where the sparse row is not faster than the dense one, the compression gives size only.",
        "- OpenVINO 2026.4.1 accepts CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE (ov.properties.intel_cpu.sparse_weights_decompression_rate), "
        "but the FullyConnected kernels it picks are the same with and without it (column `kernels`): no sparse kernel runs here. "
        "OpenVINO documents the feature for 4th-gen Xeon (AMX); this Zen 5 has no AMX. ONNX Runtime's CPU provider has no "
        "sparse int8 kernels either. On these CPUs unstructured sparsity and clustering buy size (download, flash), not latency.",
        "",
    ]
    return "\n".join(lines)
