"""14. The zoo's language model on the device: zoo:stdlib-lm exported with its KV cache to ONNX Runtime, OpenVINO,
ExecuTorch and LiteRT in fp32, int8 weights and int4 weights (convert's defaults), each judged by perplexity on the 64 held-out
sequences against PyTorch's (ratio with its paired 95% interval; gates int8-weights <= 1.01, int4-weights <= 1.03), greedy
match through the cache, and timed: time to first token (32-token prompt) and decode tokens/s (32 new tokens), median
of 5 generations in a fresh process, 1 and 2 threads; tokens/s vs the same runtime's fp32. Also a damaged int4
(group 1024, written unchecked) that the gate must stop.

Then bench.lm_real: SmolLM2-135M's default int4 on each runtime beside llama.cpp's Q4_0 and Q4_K_M, perplexity and decode speed.

`python -m bench lm`; EDGEKIT_LM_THREADS=1,2 EDGEKIT_LM_FORMATS=onnx,openvino,executorch,tflite
EDGEKIT_LM_TABLES=zoo,quality,speed,memory (the zoo table, then SmolLM2's three). Artifacts are cached by the code that made them.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench import lm_real
from bench.common import CACHE, code_stamp, publish

FORMATS = lm_real.FORMATS
THREADS = tuple(int(t) for t in os.environ.get("EDGEKIT_LM_THREADS", "1,2").split(","))
PRECISIONS = ("fp32", "int8-weights", "int4-weights")
SUFFIX = lm_real.SUFFIX


def artifact(fmt: str, precision: str, damaged: bool = False) -> Path:
    """The zoo LM converted with convert's defaults (cached under bench/.cache/lm, by the code that made it); `damaged`: int4 in one group per
    channel (--group-size 1024), written unchecked (--no-verify) for the gate to stop."""
    import edgekit

    name = f"stdlib_lm.{precision}{'.damaged' if damaged else ''}.{code_stamp()}{SUFFIX[fmt]}"
    out = CACHE / "lm" / fmt / name
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        extra = {"group_size": 1024, "verify": False} if damaged else {}
        edgekit.convert("zoo:stdlib-lm", to=fmt, output=str(out), precision=precision, task="text-generation", max_seq_len=256, **extra)
    return out


def judged(path: Path) -> dict:
    """Perplexity ratio, greedy match (validate, no gate raised) on the held-out sequences."""
    import edgekit

    result = edgekit.validate(str(path), data="zoo:stdlib-lm-test", runs=1, warmup=0, threads=2)
    return {"language": result.language, "passed": result.gate.passed, "failures": [f.reason for f in result.gate.failures]}


def timed(path: Path, threads: int) -> dict:
    import edgekit

    return edgekit.bench(str(path), threads=threads, runs=5, warmup=1, prompt_len=32, new_tokens=32).results[0].generation


def _size(path: Path) -> int:
    """The artifact's bytes: an OpenVINO IR's .xml and .bin together."""
    return sum(p.stat().st_size for p in (path, path.with_suffix(".bin")) if p.exists())


def run() -> None:
    if "zoo" in lm_real.TABLES:
        zoo_table()
    lm_real.run()  # a real checkpoint (SmolLM2-135M) beside llama.cpp


def zoo_table() -> None:
    """The zoo LM on every runtime at every precision: perplexity, greedy match, TTFT and decode speed."""
    rows = []
    for fmt in FORMATS:
        paths = {p: artifact(fmt, p) for p in PRECISIONS}
        quality = {p: judged(path) for p, path in paths.items()}
        speed = {(p, t): timed(path, t) for p, path in paths.items() for t in THREADS}
        for precision, path in paths.items():
            lm = quality[precision]["language"]
            lo, hi = lm["ppl_ratio_ci95"]
            row = [
                fmt,
                precision,
                f"{_size(path) / 1e6:.1f} MB",
                f"{lm['perplexity']:.3f}",
                f"{lm['ppl_ratio']:.4f} [{lo:.4f}, {hi:.4f}]",
            ]
            row += [f"{lm['greedy_match']:.3f}", "pass" if quality[precision]["passed"] else "FAIL"]
            for t in THREADS:
                g, base = speed[(precision, t)], speed[("fp32", t)]
                row += [f"{g['ttft_ms']:.2f}", f"{g['tokens_per_s']:.0f}", f"{g['tokens_per_s'] / base['tokens_per_s']:.2f}x"]
            rows.append(row)
    damaged = judged(artifact("openvino", "int4-weights", damaged=True))
    lm = damaged["language"]
    columns = ["format", "precision", "size", "perplexity", "ppl ratio [95% CI]", "greedy match", "gate"]
    for t in THREADS:
        columns += [f"TTFT ms {t}t", f"tokens/s {t}t", f"vs fp32 {t}t"]
    notes = [
        f"reference: PyTorch fp32, perplexity {lm['perplexity_reference']:.3f} on {lm['sequences']} held-out sequences "
        f"({lm['tokens']} next-token predictions)",
        f"damaged int4 (OpenVINO NNCF, group 1024 = one group per channel, unchecked): perplexity ratio {lm['ppl_ratio']:.4f} "
        f"[{lm['ppl_ratio_ci95'][0]:.4f}, {lm['ppl_ratio_ci95'][1]:.4f}], gate {'pass' if damaged['passed'] else 'FAIL'}: "
        + "; ".join(damaged["failures"]),
        "convert's defaults: int8-weights: ONNX MatMulNBits 8 bits g32, OpenVINO NNCF INT8_ASYM per channel, ExecuTorch torchao 8da8w (int8 "
        "dynamic activations; its weight-only int8 lowers to wrong numbers, docs/language-models.md), LiteRT AI Edge "
        "Quantizer dynamic_wi8_afp32; "
        "int4-weights: NNCF INT4_ASYM g32 with AWQ + scale estimation on the shipped zoo:stdlib-lm-calib (ONNX written as MatMulNBits, "
        "the embedding and head int8), ExecuTorch torchao 8da4w g32 with scales searched on the calibration activations (the most sensitive "
        "layers and the head 8da8w), LiteRT AI Edge Quantizer int4 blocks of 32 (OCTAV clipping, head int8); each held to perplexity 1.03 on held-back calibration text",
    ]
    publish("lm", "The zoo LM with its KV cache: perplexity ratio, greedy match, TTFT and decode tokens/s", columns, rows, notes)
