"""`bench`: latency (or a language model's time to first token and decode speed), one row per artifact; where it
was measured."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from edgekit.cli.render.table import console, machine_line
from edgekit.metrics.coverage import coverage_text, share
from edgekit.report.schema import fmt, fmt_size


def print_bench(report: dict) -> None:
    generation = [r for r in report["results"] if r.get("generation")]
    if generation:
        print_generation_rows(generation, report)
    others = [r for r in report["results"] if not r.get("generation")]
    if others:
        print_latency_rows(others, report)


def print_generation_rows(results: list[dict], report: dict) -> None:
    """Time to first token and decode speed, one row per artifact."""
    table = Table(
        "artifact",
        "target",
        "thr",
        "prompt",
        "new",
        "load ms",
        "TTFT ms",
        "tokens/s",
        "decode p50 ms",
        "p90 ms",
        "p99 ms",
        "RSS prefill",
        "peak RSS",
        "KV cache",
        "size",
    )
    for r in results:
        g = r["generation"]
        table.add_row(
            r["artifact"],
            escape(r["target"]),
            str(r["threads"]),
            str(g["prompt_len"]),
            str(g["new_tokens"]),
            f"{r['load_ms']:.0f}",
            f"{g['ttft_ms']:.2f}",
            f"{g['tokens_per_s']:.1f}",
            f"{g['decode_ms_p50']:.3f}",
            f"{g['decode_ms_p90']:.3f}",
            f"{g['decode_ms_p99']:.3f}",
            fmt(g.get("peak_rss_prefill_mb"), ".0f", unit=" MB"),
            f"{r['peak_rss_mb']:.0f} MB",
            fmt(g.get("kv_cache_mb"), ".1f", unit=" MB"),
            fmt_size(r["size_bytes"]),
        )
    console.print(table)
    runs = results[0]["generation"]["runs"] if results else 0
    console.print(
        f"[dim]{machine_line(report, results[0]['threads'] if results else None)}; median of {runs} generations after warm-up; "
        "peak RSS: the timing process's own (RSS prefill: its peak once loaded and one prompt read, before decoding); "
        "KV cache: fp32 keys and values at prompt + new tokens (LiteRT, and ONNX Runtime's in-place buffers: what they allocate)[/]"
    )


def print_latency_rows(results: list[dict], report: dict) -> None:
    table = Table(
        "artifact",
        "target",
        "thr",
        "batch",
        "load ms",
        "first ms",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "mean±std",
        "min ms",
        "items/s",
        "peak RSS",
        "size",
    )
    gpu = any(r.get("peak_gpu_memory_mb") is not None for r in results)
    if gpu:  # CUDA targets: torch's peak allocation in the timed process
        table.add_column("peak GPU")
    covered = any(r.get("int8_coverage") for r in results)
    if covered:  # int8 models: the share their runtime runs in int8, as validate and info --for-target read it
        table.add_column("int8 coverage")
    for r in results:
        lat = r["latency"]
        table.add_row(
            r["artifact"],
            escape(r["target"]),
            str(r["threads"]),
            str(lat["batch"]),
            f"{r['load_ms']:.0f}",
            f"{r['first_inference_ms']:.2f}",
            f"{lat['p50']:.3f}",
            f"{lat['p90']:.3f}",
            f"{lat['p99']:.3f}" + ("*" if lat.get("tail_note") else ""),
            f"{lat['mean']:.3f}±{lat['std']:.3f}",
            f"{lat['min']:.3f}",
            f"{lat['throughput']:.0f}",
            f"{r['peak_rss_mb']:.0f} MB",
            fmt_size(r["size_bytes"]),
            *([fmt(r.get("peak_gpu_memory_mb"), ".0f", unit=" MB")] if gpu else []),
            *([_coverage_cell(r.get("int8_coverage"))] if covered else []),
        )
    console.print(table)
    for r in results:
        if r.get("int8_coverage") and r["int8_coverage"]["float_layers"]:
            console.print(f"{r['artifact']}: {escape(coverage_text(r['int8_coverage']))}")
    for r in results:
        if r.get("compile_ms") is not None:
            console.print(f"{r['artifact']} on {escape(r['target'])}: compiled in {r['compile_ms'] / 1000:.1f} s (not in any time above)")
        if r.get("runtime_latency"):
            own = r["runtime_latency"]
            how = (
                "with CUDA events"
                if (r.get("runtime_config") or {}).get("timing") == "CUDA events"
                else "as its own benchmark tool reports"
            )
            console.print(
                f"{r['artifact']}: as {r['target'].split(':')[0]} measures itself ({how}): "
                f"p50 {own['p50']:.3f} ms, p90 {own['p90']:.3f} ms; wall p50 includes the Python call"
            )
    for r in results:
        if r.get("device"):
            console.print(device_line(r["device"], r["threads"]))
    if not all(r.get("device") for r in results):
        console.print(
            f"[dim]{machine_line(report, results[0]['threads'] if results else None)}; {results[0]['latency']['runs'] if results else 0} timed runs after warm-up[/]"
        )
    note = next((r["latency"].get("tail_note") for r in results if r["latency"].get("tail_note")), None)
    if note:
        console.print(f"[dim]* {note}[/]")


def _coverage_cell(coverage: dict | None) -> str:
    value = share(coverage)
    return "-" if value is None else f"{100 * value:.1f}%"


def device_line(device: dict, threads: int | None = None) -> str:
    """Where a result on a board was measured: the board's probed facts and its thermal state."""
    f = device.get("facts") or {}
    runtimes = ", ".join(f"{k} {v}" for k, v in (f.get("runtimes") or {}).items() if v)
    line = (
        f"measured on device {escape(device['name'])} ({escape(device['ssh'])}): {f.get('cpu')}, {f.get('arch')}, "
        f"{f.get('usable_cores')} usable cores, {threads} thread(s); {', '.join(f.get('isa') or []) or 'no SIMD flags read'}; "
        f"{f.get('os')}; Python {f.get('python')}, numpy {f.get('numpy')}; {runtimes}; governor {f.get('governor') or 'unknown'}"
    )
    if f.get("emulated"):
        line += f"; EMULATED ({escape(f['emulated'])}): its numerics are that CPU's, its latency is not"
    thermal = device.get("thermal") or {}
    for when in ("before", "after"):
        state = thermal.get(when) or {}
        temps = state.get("temperature_c") or {}
        freq = state.get("freq_mhz") or {}
        parts = [f"{max(temps.values()):.1f} C" if temps else "no temperature", f"{freq['mean']:.0f} MHz" if freq else "no frequency"]
        if state.get("pi_throttled") is not None:
            parts.append(f"throttled={state['pi_throttled']}")
        if state.get("throttle_count") is not None:
            parts.append(f"throttle events {state['throttle_count']}")
        line += f"; {when}: {', '.join(parts)}"
    return f"[dim]{line}[/]"
