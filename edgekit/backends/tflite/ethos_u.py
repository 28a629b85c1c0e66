"""Arm Ethos-U NPUs: compile a full-int8 TFLite model with Vela and read back its estimates.

The NPU itself is not on this machine: numerics are validated on the int8 TFLite before Vela, and
Vela's figures (inference time, cycles, SRAM/flash, operators on the NPU vs the CPU) are estimates.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

from edgekit.errors import ConversionError, EdgekitError, RuntimeMissingError

CONFIGS = (
    "ethos-u55-32",
    "ethos-u55-64",
    "ethos-u55-128",
    "ethos-u55-256",
    "ethos-u65-256",
    "ethos-u65-512",
    "ethos-u85-128",
    "ethos-u85-256",
    "ethos-u85-512",
    "ethos-u85-1024",
    "ethos-u85-2048",
)
OPERATOR_LINE = re.compile(r"^\s*(CPU|NPU): (\S+) = (.*) \(outputs")


def check_device(device: str, precision: str) -> None:
    """Fail before any work for an unknown Ethos-U configuration or a model it cannot run."""
    if device not in CONFIGS:
        raise EdgekitError(f"unknown NPU '{device}'", hint=f"choose one of: {', '.join(CONFIGS)}")
    if precision != "int8":
        raise EdgekitError(
            f"the Ethos-U runs full-int8 models, not {precision}", hint="use --precision int8 --calib DATA (integer I/O is chosen for you)"
        )


def vela_command() -> list[str]:
    vela = shutil.which("vela") or str(Path(sys.executable).parent / "vela")
    if not Path(vela).exists():
        raise RuntimeMissingError("the Ethos-U compiler (Vela) is not installed", hint="pip install ethos-u-vela")
    return [vela]


def compile_vela(tflite: Path, device: str, out_dir: Path) -> dict:
    """Run Vela on `tflite` for `device`; returns its estimates and the NPU/CPU operator split."""
    cmd = [*vela_command(), str(tflite), "--accelerator-config", device, "--output-dir", str(out_dir), "--show-cpu-operations"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ConversionError(
            f"Vela failed for {device}: {(proc.stderr or proc.stdout).strip().splitlines()[-1][:300]}",
            hint="check the model is full int8 with static shapes",
        )
    summary = next(out_dir.glob("*_summary_*.csv"))
    with open(summary) as f:
        row = next(csv.DictReader(f))
    operators = [{"on": m.group(1), "op": m.group(2), "name": m.group(3)} for m in map(OPERATOR_LINE.match, proc.stdout.splitlines()) if m]
    on_cpu = [o for o in operators if o["on"] == "CPU"]
    return {
        "device": device,
        "tool": "ethos-u-vela",
        "system_config": row["system_config"],
        "memory_mode": row["memory_mode"],
        "clock_hz": float(row["core_clock"]),
        "inference_time_ms": float(row["inference_time"]) * 1000,
        "inferences_per_second": float(row["inferences_per_second"]),
        "cycles_total": int(float(row["cycles_total"])),
        "cycles_npu": int(float(row["cycles_npu"])),
        "sram_kib": float(row["sram_memory_used"]),
        "flash_kib": float(row["off_chip_flash_memory_used"]) + float(row["on_chip_flash_memory_used"]),
        "macs": int(float(row["nn_macs"])),
        "weights_original_bytes": int(float(row["total_original_weights"])),  # Vela's own count, before its weight encoding
        "weights_encoded_bytes": int(float(row["total_npu_encoded_weights"])),  # after (compresses repeated values)
        "operators_npu": len(operators) - len(on_cpu),
        "operators_cpu": len(on_cpu),
        "cpu_fallback_percent": 100.0 * len(on_cpu) / len(operators) if operators else 0.0,
        "cpu_operators": [f"{o['op']} ({o['name'][:80]})" for o in on_cpu],
        "estimated": True,
    }
