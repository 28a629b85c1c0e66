"""Tables for people, from the same dicts the JSON reports hold."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from edgekit.report.schema import fmt, fmt_count, fmt_size

# Logs and CI are not terminals: keep tables whole rather than squeezing them to 80 columns.
console = Console(highlight=False, width=None if Console().is_terminal else 200)


def machine_line(report: dict, threads: int | None = None) -> str:
    m = report["machine"]
    thread_text = f", {threads} thread(s)" if threads else ""
    isa_class = f", ISA class {m['isa_class']}" if m.get("isa_class") else ""
    return (
        f"measured on {m['cpu']} ({m['usable_cores']} usable cores{thread_text}; {', '.join(m['isa']) or 'no SIMD flags read'}{isa_class})"
    )


def print_info(summary: dict) -> None:
    console.print(f"[bold]{summary['model']}[/] - {summary['format']}" + (f", {summary['precision']}" if summary.get("precision") else ""))
    if summary.get("size_bytes") is not None:
        console.print(f"size on disk: {fmt_size(summary['size_bytes'])}")
    if "parameters" in summary:
        console.print(f"parameters: {summary['parameters']:,}")
    if summary.get("opset"):
        console.print(f"opset: {summary['opset']}")
    for title in ("inputs", "outputs"):
        table = Table("name", "shape", "dtype", title=title, title_justify="left")
        for spec in summary.get(title, []):
            shape = spec["shape"] if isinstance(spec["shape"], str) else "x".join(str(d) if d is not None else "?" for d in spec["shape"])
            table.add_row(spec["name"], shape, spec.get("dtype", "?"))
        if summary.get(title):
            console.print(table)
    delegate = summary.get("delegate")
    if delegate:
        cpu = ", ".join(f"{op} x{n}" for op, n in delegate["ops_on_cpu"].items()) or "none"
        console.print(
            f"{delegate['name']} delegate: {delegate['ops_on_delegate']} of {delegate['ops_total']} ops in {delegate['partitions']} partition(s); on the CPU: {cpu}"
        )
        for title, rows in (("not delegated", delegate.get("cpu_ops")), ("data movement (no arithmetic)", delegate.get("data_movement"))):
            for row in rows or []:
                console.print(f"  {title}: {row['op']} x{row['count']}: {escape(row['why'])}")
    if summary.get("ops"):
        table = Table("op", "count", title="op histogram", title_justify="left")
        for op, count in summary["ops"].items():
            table.add_row(op, str(count))
        console.print(table)
    if summary.get("provenance"):
        print_provenance(summary["provenance"])


def print_targets(rows: list[dict]) -> None:
    table = Table("target", "status", "version", "note")
    for row in rows:
        status = "[green]available[/]" if row["available"] else "[yellow]unavailable[/]"
        note = "; ".join(filter(None, (row["detail"], f"options: {row['options']}" if row.get("options") else "")))
        table.add_row(row["target"], status, row["version"], escape(note))
    console.print(table)


def print_artifact(artifact) -> None:
    console.print(f"wrote [bold]{artifact.path}[/] ({artifact.format}, {artifact.precision}, {fmt_size(artifact.size_bytes())})")
    print_how_made(artifact.meta.get("provenance") or {})


def routes_text(routes: list[dict]) -> str:
    """`dynamo failed (why); torchscript taken`: each route a conversion tried, in order."""
    return "; ".join(f"{r['route']} {r['result']}" + (f" ({r['why']})" if r.get("why") else "") for r in routes)


def verified_text(verified: dict | str) -> str:
    """The check of an artifact against its source (converters.verify), as one clause."""
    if isinstance(verified, str):  # provenance written before verification against the source
        return verified
    if "greedy_match" in verified:  # a language model (converters.causal_lm)
        return (
            f"{verified['result']}: {verified['greedy_match']:.0%} of {verified['prompts']} x {verified['tokens']} greedily decoded "
            "tokens equal PyTorch's (through the KV cache)"
        )
    if verified["result"] != "match":
        return f"{verified['result']} ({verified.get('why')})"
    outputs = verified["outputs"]
    worst = max((o.get("relative", 0.0) for o in outputs), default=0.0)
    cosine = min((o.get("cosine", 1.0) for o in outputs), default=1.0)
    return (
        f"matches its source on {verified['inputs']} ({verified['runtime']} vs {verified['source_runtime']}; "
        f"max relative error {worst:.2g}, cosine {cosine:.5f})"
    )


def print_provenance(prov: dict) -> None:
    """The sidecar's story in full, for `info`: where from, which steps, how quantized and calibrated, with what tools."""
    console.print("[bold]provenance[/]")
    source = prov.get("source") or {}
    if source:
        console.print(f"  from: {escape(str(source.get('spec')))} ({source.get('format', '?')})")
    if prov.get("steps"):
        console.print(f"  steps: {' -> '.join(prov['steps'])}")
    print_how_made(prov)
    if prov.get("versions"):
        console.print(f"  tools: {', '.join(f'{name} {version}' for name, version in prov['versions'].items())}")


def print_how_made(prov: dict) -> None:
    """Routes tried, exporter, quantization scheme and why, layers kept in float, NPU estimate, calibration, the check
    against the source: what `convert` prints."""
    if len(prov.get("routes") or []) > 1:
        console.print(f"  routes: {escape(routes_text(prov['routes']))}")
    if prov.get("kv_cache"):  # a language model (converters.causal_lm)
        cache = prov["kv_cache"]
        console.print(
            f"  {prov['task']}: KV cache [{cache['layers']}, 1, {cache['kv_heads']}, tokens, {cache['head_dim']}] as inputs and outputs, "
            f"up to {cache['max_seq_len']} tokens; weights: {escape(prov.get('weights', '?'))}"
            + (f" ({escape(prov['method'])})" if prov.get("method") else "")
        )
    if prov.get("verified"):
        console.print(f"  verified: {escape(verified_text(prov['verified']))}")
    if prov.get("exporter"):
        console.print(
            f"  exporter: {prov['exporter']}"
            + (f" (fallback: {prov['fallback_reason']})" if prov.get("fallback_reason") and not prov.get("routes") else "")
        )
    quant = prov.get("quantization")
    if quant:
        console.print(f"  int8 {quant['mode']}: {_quant_detail(quant)}")
        _print_float_layers(quant, quant.get("accuracy_control"))
        if quant.get("reason"):
            console.print(f"  why: {quant['reason']}")
        if (quant.get("channel_order") or {}).get("spaces"):
            console.print(f"  {_channel_order_text(quant['channel_order']['spaces'])}")
    for section in PT2E_SECTIONS:
        entry = prov.get(section) or {}
        _print_float_layers(entry.get("quantization") or {}, entry.get("accuracy_control"))
    if "tensorrt_checks" in prov:
        print_tensorrt_findings(prov["tensorrt_checks"], indent="  ")
    npu = prov.get("npu")
    if npu:
        console.print(
            f"  {npu['device']} (Vela estimate, {npu['system_config']}): {npu['inference_time_ms']:.3f} ms, {npu['cycles_total']:,} cycles, "
            f"SRAM {npu['sram_kib']:.1f} KiB, flash {npu['flash_kib']:.1f} KiB; {npu['operators_npu']} ops on the NPU, "
            f"{npu['operators_cpu']} on the CPU ({npu['cpu_fallback_percent']:.1f}%) -> {npu['compiled_model']}"
        )
    _print_fallback(prov)
    layout = (prov.get("tflite") or {}).get("layout_transposes")
    if layout:
        console.print(f"  layout: {'; '.join(layout)}")
    folded = (prov.get("tflite") or {}).get("pads_folded")
    if folded:
        console.print(
            f"  pads: {folded} explicit zero pad(s) folded into the SAME padding of the convolution reading each (backends.tflite.pads)"
        )
    calib = prov.get("calibration")
    if calib:
        from edgekit.calibration.samples import fed_from_text

        console.print(
            f"  calibration: {calib['samples']} samples from {escape(str(calib['source']))}{escape(fed_from_text(calib))} "
            f"({', '.join(filter(None, (calib.get('method'), _seed(calib), 'sha256 ' + calib['sha256'][:12])))})"
            + (f": the default calibration set of {calib['default_of']} (no --calib given)" if calib.get("default_of") else "")
        )
        if calib.get("random"):
            console.print("  [bold red]calibrated on RANDOM data: accuracy of this model is not meaningful[/]")


PT2E_SECTIONS = ("tflite", "executorch")  # the sidecar sections whose int8 backends.torch.pt2e made, its entry inside


def _print_float_layers(quant: dict, control: dict | None) -> None:
    """The layers int8 kept in float: the sensitivity outliers, and what accuracy control returned to float."""
    kept = (quant.get("sensitivity") or {}).get("kept_in_float")
    if kept:
        layers = ", ".join(f"{k['name']} ({k['op']}, 1-cos {k['loss']:.2g})" for k in kept)
        console.print(f"  kept in float (int8 sensitivity outliers: {quant['sensitivity']['rule']}): {escape(layers)}")
    if control:
        console.print(f"  {escape(_control_text(control))}")


def _channel_order_text(spaces: list[dict]) -> str:
    """How many channel spaces pair-safe int8 reordered, and how much finer their weight steps got."""
    before, after = (sorted(s["pair_ratio_median"][i] for s in spaces) for i in (0, 1))
    return (
        f"channels reordered in {len(spaces)} place{'' if len(spaces) == 1 else 's'} to pair large weights with small: largest pair / "
        f"largest weight, median {before[len(before) // 2]:.2f} -> {after[len(after) // 2]:.2f} (1: plain 8-bit)"
    )


def _seed(calib: dict) -> str:
    return f"seed {calib['seed']}" if calib.get("seed") is not None else ""


def print_coverage(coverage: dict, target: str | None = None) -> None:
    """int8 coverage: the headline, then the layers left float with their MACs, and the float islands."""
    from edgekit.metrics.coverage import share

    value = share(coverage)
    unit = "of its MACs" if coverage["macs_share"] is not None else "of its layers"
    where = f" on {escape(target)}" if target else ""
    console.print(
        f"int8 coverage{where}: [bold]{fmt(None if value is None else 100 * value, '.1f')}%[/] {unit} "
        f"({coverage['int8_layers']}/{coverage['layers']} multiplying layers in int8; read from {escape(coverage['read_from'])})"
    )
    if coverage["float_layers"]:
        table = Table("float layer", "op", "MACs", "share", title="layers left float", title_justify="left")
        for layer in coverage["float_layers"]:
            share_text = fmt(None if layer["macs_share"] is None else 100 * layer["macs_share"], ".1f")
            table.add_row(escape(layer["name"]), layer["op"], fmt_count(layer["macs"]), share_text + "%")
        console.print(table)
    if coverage["islands"]:
        islands = ", ".join(f"{x['name']} ({x['op']})" for x in coverage["islands"])
        console.print("float islands (float ops between int8 ones): " + escape(islands))


def print_tensorrt_findings(findings: list[dict], indent: str = "") -> None:
    """What TensorRT would reject (errors) or run worse (warnings), or a one-line all-clear."""
    errors = sum(f["level"] == "error" for f in findings)
    if not findings:
        console.print(f"{indent}TensorRT checks: [green]pass[/] (ops, opset, Q/DQ zero-points and weight scales)")
        return
    head = "[red]TensorRT would reject it[/]" if errors else "[yellow]TensorRT takes it, with warnings[/]"
    console.print(f"{indent}TensorRT checks: {head} ({errors} error(s), {len(findings) - errors} warning(s))")
    for f in findings[:12]:
        colour = "red" if f["level"] == "error" else "yellow"
        console.print(f"{indent}  [{colour}]{f['level']}[/] {f['check']}: {escape(f['message'])}")
    if len(findings) > 12:
        console.print(f"{indent}  ... {len(findings) - 12} more (--json lists all)")


def _control_text(control: dict) -> str:
    """The limit accuracy control met and what it returned to float: layers, and (ONNX Runtime) activations."""
    from edgekit.quantize.accuracy import Limit

    limit = Limit.recorded(control).text()
    limit += f", scored on {control['validated_on']}" if "validated_on" in control else ""
    reverted, activations = control.get("reverted_to_float") or [], control.get("activations_in_float") or []
    unrounded = f"; {len(activations)} activation(s) in float: {', '.join(activations)}" if activations else ""
    smooth = "; SmoothQuant off (NNCF's reverts would undo its weights only)" if "smooth_quant" in control else ""
    return f"accuracy control ({limit}): {len(reverted)} layer(s) kept in float: {', '.join(reverted) or '-'}{unrounded}{smooth}"


def _quant_detail(quant: dict) -> str:
    if quant.get("tool") == "nncf":
        ranges = (
            f"{quant['method']} ranges, {'per-channel' if quant['per_channel'] else 'per-tensor'} weights, " if "method" in quant else ""
        )
        return f"NNCF, {quant['model_type']} scheme, {ranges}{quant['bias_correction']} bias correction, {quant['samples']} samples"
    if "activations" in quant:
        via = "ONNX Runtime's Q/DQ, " if quant.get("tool") == "onnxruntime" else ""  # read by another runtime (OpenVINO)
        return f"{via}{quant['activations']} activations x {quant['weights']} weights, {'per-channel' if quant['per_channel'] else 'per-tensor'}"
    return quant.get("note", quant.get("weights", ""))


def print_validation(report: dict) -> None:
    from edgekit.calibration.samples import fed_from_text

    if report.get("language"):
        _print_language(report)
        return
    for warning in report["warnings"]:
        console.print(f"[bold red]WARNING: {warning}[/]")
    console.print(
        f"[bold]{report['artifact']['spec']}[/] on {escape(report['target'])} vs {report['reference'].get('zoo') or report['reference']['spec']} on {escape(report['reference']['target'])}, "
        f"{report['data']['samples']} samples from {report['data']['source']}{escape(fed_from_text(report['data']))}"
        + (f" (the validation set of {report['data']['default_of']}; -d to choose)" if report["data"].get("default_of") else "")
    )
    for note in report.get("input_alignment", []):
        console.print(f"  input: {note}")
    _print_fallback((report["artifact"].get("meta") or {}).get("provenance") or {})
    task = report.get("task")
    if task:
        console.print(f"  task: {task['name']}" + (f" (inferred from {escape(task['why'])}; --task to set it)" if task["inferred"] else ""))
    if len(report.get("output_pairing") or []) > 1:
        pairs = ", ".join(f"{p['artifact']} ~ {p['reference']}" for p in report["output_pairing"])
        console.print(f"  outputs paired by {report['output_pairing'][0]['by']}: {escape(pairs)}")
    if report.get("task_metrics"):
        _print_task_metrics(report["task_metrics"])
    if report.get("int8_coverage"):
        print_coverage(report["int8_coverage"])
    table = Table("output", "max abs", "mean abs", "cosine (mean/min)", "SNR dB", "top-1 agree", "non-finite")
    for f in report["fidelity"]:
        broken = f.get("nonfinite", 0)
        table.add_row(
            f["name"],
            f"{f['max_abs']:.3g}",
            f"{f['mean_abs']:.3g}",
            f"{f['cosine_mean']:.5f} / {f['cosine_min']:.5f}",
            fmt(f["snr_db"], ".1f"),
            fmt(f["top1_agreement"], ".2f") + ("%" if f["top1_agreement"] is not None else ""),
            f"[bold red]{broken}[/]" if broken else "0",
        )
    console.print(table)
    for f in report["fidelity"]:
        if f.get("top1_flips") is not None:
            console.print(_flips_text(f))
    acc = report.get("accuracy")
    if acc and not report.get("task_metrics"):
        console.print(
            f"accuracy: reference {acc['reference']:.2f}%, artifact {acc['artifact']:.2f}%, drop {acc['drop_points']:+.2f} points"
            + (f" (95% CI {acc['drop_ci95'][0]:+.2f} to {acc['drop_ci95'][1]:+.2f}, paired)" if acc.get("drop_ci95") else "")
            + f" on {acc['samples']} labelled samples"
        )
        if acc.get("classes_lost"):
            from edgekit.metrics.compare import classes_lost_text

            console.print(f"  {classes_lost_text(acc)}")
    _print_latency_rows([report["latency"]], report)
    _print_gate(report["gate"])


def _print_task_metrics(judged: dict) -> None:
    """The task metric first: against the reference, against the labels, and the samples that changed most."""
    from edgekit.validate.validation import metric_label

    metric, ours = judged["metric"], judged["vs_reference"]
    name = metric_label(metric)
    ci = ours.get(f"{metric}_ci95")
    head = f"[bold]{name} {ours[metric]:.4g}[/]" + (f" (95% CI {ci[0]:.4g} to {ci[1]:.4g})" if ci else "")
    console.print(f"  {judged['task']}: {head} against the reference{_task_context(judged)}")
    labelled = judged.get("vs_labels")
    if labelled:
        console.print(
            f"  against labels: reference {metric_label(labelled['metric'])} {labelled['reference']:.4g}, artifact {labelled['artifact']:.4g}, "
            f"drop {labelled['drop_points']:+.2f} points (95% CI {labelled['drop_ci95'][0]:+.2f} to {labelled['drop_ci95'][1]:+.2f}, paired) "
            f"on {labelled['samples']} samples"
        )
    changed = judged.get("changes") or []
    if changed:
        console.print(f"  changed most: {escape(changes_listed(changed[:3]))} (changes in the JSON lists {len(changed)})")


def _task_context(judged: dict) -> str:
    """What the headline is of: a detector's decoding and mAP@0.5:0.95, a map's threshold, an embedding's rank correlation."""
    ours = judged["vs_reference"]
    if judged["task"] == "detection":
        return f"'s {ours['reference_detections']} confident detections; mAP@0.5:0.95 {ours['map50_95']:.4g} (outputs read as {judged['decoded']})"
    if "threshold" in ours:
        return (
            f" (maps at {ours['threshold']:g}; {ours['false_on_empty']} of {ours['empty_maps']} empty maps marked; IoU {ours['iou']:.4g})"
        )
    if "rank_correlation" in ours:
        return f" (rank correlation of similarities {ours['rank_correlation']:.4f})"
    return f" (output {judged['output']})" if judged.get("output") else ""


def changes_listed(changes: list[dict]) -> str:
    """Changed samples as a clause: `canvas 3 (2 missed, 1 added)`, `canvas 5 (off by 0.09)` or `page 7 (0.412)`."""
    parts = []
    for c in changes:
        name = c.get("id") or f"sample {c['sample']}"
        if "missed" in c:
            detail = f"{c['missed']} missed, {c['added']} added"
        else:
            detail = f"off by {c['abs_error']:.3g}" if "abs_error" in c else f"{c['score']:.3g}"
        parts.append(f"{name} ({detail})")
    return ", ".join(parts)


def _flips_text(f: dict) -> str:
    """Where a classifier output's top-1 answers changed: near-ties (a small reference margin) or confident answers; then
    the samples whose change the reference was surest of (their names in the data, where it has them)."""
    from edgekit.metrics.compare import changes_text, flips_text

    text = f"  top-1 ({escape(f['name'])}): {flips_text(f)}"
    surest = changes_text(f)
    if surest:
        text += f"\n    {escape(surest)} (top1_changes in the JSON lists {len(f['top1_changes'])})"
    return text


def _print_fallback(provenance: dict) -> None:
    from edgekit.validate.validation import fallback_of

    fallback = fallback_of(provenance)
    if fallback:
        left = ", ".join(f"{op} x{n}" for op, n in (fallback.get("not_delegated_ops") or {}).items())
        console.print(
            f"  fallback: {fallback['percent']:.1f}% of ops ran outside {fallback['where']}" + (f" ({escape(left)})" if left else "")
        )


def _print_gate(gate: dict) -> None:
    if not gate["thresholds"]:
        return
    if gate["passed"]:
        console.print(f"[bold green]gate passed[/] ({', '.join(f'{k}={v}' for k, v in gate['thresholds'].items())})")
        for r in gate["results"]:
            if "straddles" in r["reason"]:
                console.print(f"[yellow]  close call: {escape(r['reason'])}[/]")
        return
    table = Table("metric", "value", "limit", "why", title="[bold red]GATE FAILED[/]", title_justify="left")
    for f in gate["failures"]:
        table.add_row(f["metric"], *_value_and_limit(f), escape(f["reason"]))
    console.print(table)


def _value_and_limit(result: dict) -> tuple[str, str]:
    """A gate's value and limit with the digits that tell them apart."""
    from edgekit.metrics.gate import fmt_against

    return ("-", str(result["limit"])) if result["value"] is None else fmt_against(result["value"], result["limit"])


def print_bench(report: dict) -> None:
    generation = [r for r in report["results"] if r.get("generation")]
    if generation:
        _print_generation_rows(generation, report)
    others = [r for r in report["results"] if not r.get("generation")]
    if others:
        _print_latency_rows(others, report)


def _print_language(report: dict) -> None:
    """A language model's validation: perplexity of both, their ratio with its interval, KL, agreement, greedy match."""
    lm, data = report["language"], report["data"]
    for warning in report["warnings"]:
        console.print(f"[bold red]WARNING: {warning}[/]")
    console.print(
        f"[bold]{report['artifact']['spec']}[/] on {escape(report['target'])} vs {report['reference'].get('zoo') or report['reference']['spec']}, "
        f"{lm['sequences']} sequences ({lm['tokens']} next-token predictions) from {escape(str(data['source']))} ({data['read_as']})"
        + (f" (the validation set of {data['default_of']}; -d to choose)" if data.get("default_of") else "")
    )
    lo, hi = lm["ppl_ratio_ci95"]
    table = Table("perplexity (ref / artifact)", "ratio [95% CI]", "KL nats", "next-token agree", "greedy match", "non-finite")
    table.add_row(
        f"{lm['perplexity_reference']:.3f} / {lm['perplexity']:.3f}",
        f"{lm['ppl_ratio']:.4f} [{lo:.4f}, {hi:.4f}]",
        f"{lm['kl']:.2e}",
        f"{lm['top1_agreement']:.2%}",
        f"{lm['greedy_match']:.2%} ({lm['greedy_prompts']} x {lm['greedy_tokens']}, {lm['greedy_diverged']} diverged)",
        f"[bold red]{lm['nonfinite']}[/]" if lm["nonfinite"] else "0",
    )
    console.print(table)
    _print_generation_rows([report["latency"]], report)
    _print_gate(report["gate"])


def _print_generation_rows(results: list[dict], report: dict) -> None:
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
        "peak RSS",
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
            f"{r['peak_rss_mb']:.0f} MB",
            fmt_size(r["size_bytes"]),
        )
    console.print(table)
    runs = results[0]["generation"]["runs"] if results else 0
    console.print(f"[dim]{machine_line(report, results[0]['threads'] if results else None)}; median of {runs} generations after warm-up[/]")


def _print_latency_rows(results: list[dict], report: dict) -> None:
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
            *([fmt(r.get("peak_gpu_memory_mb"), ".0f") + (" MB" if r.get("peak_gpu_memory_mb") is not None else "")] if gpu else []),
        )
    console.print(table)
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


def print_compression(report: dict) -> None:
    stage = report["stage"]
    console.print(f"[bold]{report['model']}[/] -> {report['output']} ({stage['method']})")
    line = f"parameters {stage['parameters_before']:,} -> {stage['parameters_after']:,} (non-zero {stage['nonzero_after']:,})"
    if stage.get("macs_before"):
        line += f"; MACs {stage['macs_before']:,} -> {stage['macs_after']:,}"
    console.print(line)
    for note in stage["notes"]:
        console.print(f"  {note}")
    if stage["layers"]:
        keys = [k for k in stage["layers"][0] if k != "layer"]
        table = Table("layer", *keys, title="layers", title_justify="left")
        for layer in stage["layers"]:
            table.add_row(layer["layer"], *[f"{layer[k]:.4f}" if isinstance(layer[k], float) else str(layer[k]) for k in keys])
        console.print(table)
    if report["stages"]:
        table = Table(
            "stage",
            "precision",
            "parameters",
            "size",
            "gzip size",
            "coded size",
            "accuracy",
            "drop (pts)",
            "MACs",
            "MAC ratio",
            "p50 ms",
            "p50 ratio",
            "speed-up",
            title="stages (ONNX Runtime; ratios vs the original: when the p50 ratio stays above the MAC ratio, the kernels do not follow the work)",
            title_justify="left",
        )
        for r in report["stages"]:
            table.add_row(
                r["stage"],
                r["precision"],
                f"{r['parameters']:,}",
                fmt_size(r["size_bytes"]),
                fmt_size(r["gzip_bytes"]),
                fmt_size(r["coded_bytes"]),
                fmt(r["accuracy"], ".2f") + ("%" if r["accuracy"] is not None else ""),
                fmt(r["drop_points"], "+.2f"),
                fmt_count(r.get("macs")),
                fmt(r.get("mac_ratio"), ".2f"),
                f"{r['p50_ms']:.3f}",
                fmt(r.get("p50_ratio"), ".2f"),
                f"{r['speedup']:.2f}x",
            )
        console.print(table)
        console.print(f"[dim]{machine_line(report, report['stages'][0]['threads'])}[/]")
    if stage.get("storage"):
        print_storage(stage["storage"])
    if report.get("gate"):
        gate = report["gate"]
        for r in gate["results"]:
            console.print(f"gate ({gate['stage']}): {'[green]pass[/]' if r['passed'] else '[red]FAIL[/]'} {r['reason']}")


STORAGE_COLUMNS = ("parameters", "non-zeros", "bits/w", "dense", "sparse (rel. index)", "Huffman weights", "Huffman index", "coded", "gzip")


def print_storage(storage: list[dict]) -> None:
    """Deep Compression's table: per stage totals (with the paper's ratio and accuracy), then the last stage per layer."""
    table = Table("stage", *STORAGE_COLUMNS, "ratio", "accuracy", title="storage (Deep Compression accounting)", title_justify="left")
    for row in storage:
        t = row["total"]
        acc = row.get("accuracy")
        table.add_row(row["stage"], *_storage_cells(t, f"{t['bits']:.2f}"), f"{t['ratio']:.1f}x", "-" if acc is None else f"{acc:.2f}%")
    console.print(table)
    last = [r for r in storage if r["stage"] != "int8"][-1]
    layers = Table("layer", "form", *STORAGE_COLUMNS, title=f"storage per layer ({last['stage']})", title_justify="left")
    for layer in last["layers"]:
        bits = f"{layer['bits']}+{layer['index_bits']}" if layer["coded_form"] == "sparse" else str(layer["bits"])
        layers.add_row(layer["layer"], f"{layer['form']}, {layer['coded_form']}", *_storage_cells(layer, bits))
    console.print(layers)
    console.print(
        "[dim]ratio = fp32 bytes of all parameters / coded bytes (the paper's); sparse: relative index, 8 bits for conv, "
        "5 bits for fc, filler zeros past the span; coded: Huffman weights + indices + codebook + code tables (or dense Huffman "
        "when smaller); biases and norms stay fp32; all per-stage data in the JSON report[/]"
    )


def _storage_cells(t: dict, bits: str) -> list[str]:
    return [
        f"{t['parameters']:,}",
        f"{t['nonzeros']:,}",
        bits,
        fmt_size(t["dense_bytes"]),
        fmt_size(t["sparse_bytes"]),
        fmt_size(t["weight_coded_bytes"]),
        fmt_size(t["index_coded_bytes"]),
        fmt_size(t["coded_bytes"]),
        fmt_size(t["gzip_bytes"]),
    ]


def print_run(result: dict, written) -> None:
    from edgekit.report.tables import cells, columns, failed_gates, machine_text, row_notes

    table = Table(
        *columns(result["rows"]), title=f"{result['model']}: gates {'passed' if result['passed'] else 'FAILED'}", title_justify="left"
    )
    for row in result["rows"]:
        style = "" if row.get("passed") else "red"
        table.add_row(*map(escape, cells(row)), style=style)
    console.print(table)
    for note in row_notes(result):
        console.print(f"[yellow]{escape(note)}[/]")
    for line in failed_gates(result):
        console.print(f"[red]FAIL {escape(line)}[/]")
    if result["rows"]:
        console.print(f"[dim]measured on {machine_text(result)}; reports: {', '.join(str(p) for p in written)}[/]")
    published = [Path(r["published"]).parent for r in result["rows"] if r.get("published")]
    if published:
        names = ", ".join(dict.fromkeys(p.name for p in published))
        console.print(f"[dim]artifacts: {escape(str(published[0].parent))}{os.sep}{{{escape(names)}}}[/]")


def print_gate_check(result: dict) -> None:
    table = Table("format", "precision", "target", "metric", "value", "limit", "result", "why")
    for row in result["rows"]:
        if row["status"] != "ok":
            table.add_row(row["format"], row["precision"], escape(row["target"]), "run", "-", "-", "[red]error[/]", row["status"])
        for g in row.get("gates", []):
            table.add_row(
                row["format"],
                row["precision"],
                escape(row["target"]),
                g["metric"],
                *_value_and_limit(g),
                "[green]pass[/]" if g["passed"] else "[red]FAIL[/]",
                g["reason"],
            )
    console.print(table)
    console.print("[bold green]all gates passed[/]" if result["passed"] else "[bold red]gates failed[/]")


def print_debug(report: dict, rows_shown: int | None = None) -> None:
    """The per-tensor table of `edgekit debug` in graph order, the first jump marked, then the worst tensors."""
    console.print(
        f"[bold]{report['artifact']['path']}[/] vs {report['reference']['path']}: {report['matched']} tensors matched, "
        f"{report['data']['samples']} samples from {report['data']['source']}"
    )
    for note in report.get("input_alignment", []):
        console.print(f"  input: {note}")
    jump = report["first_jump"]
    table = Table("#", "tensor", "op", "layer", "shape", "SQNR dB", "cosine", "max abs err", "")
    rows = report["rows"] if rows_shown is None else report["rows"][:rows_shown]
    for row in rows:
        first = jump is not None and row["depth"] == jump["depth"]
        table.add_row(
            str(row["depth"]),
            escape(row["tensor"]),
            row["op"],
            escape(row["layer"]),
            "x".join(map(str, row["shape"])),
            "exact" if row["exact"] else fmt(row["sqnr_db"], ".1f"),
            f"{row['cosine']:.5f}",
            f"{row['max_abs_error']:.3g}",
            ("[bold red]<- first jump[/]" if first else "") + (" [yellow]note[/]" if row.get("notes") else ""),
        )
    console.print(table)
    if rows_shown is not None and len(report["rows"]) > rows_shown:
        console.print(f"  ... {len(report['rows']) - rows_shown} more rows in the JSON (--json)")
    rule = report["rule"]
    if jump is None:
        console.print(f"no jump: no tensor below {rule['floor_db']:g} dB or {rule['jump_db']:g} dB below the one before it")
    else:
        console.print(
            f"[bold]first jump[/]: #{jump['depth']} {escape(jump['tensor'])} ({jump['op']}, {escape(jump['layer'])}) at "
            f"{fmt(jump['sqnr_db'], '.1f')} dB (rule: below {rule['floor_db']:g} dB, or {rule['jump_db']:g} dB below the tensor before it)"
        )
    if report["worst"]:
        console.print(
            "worst: " + ", ".join(f"#{r['depth']} {escape(r['layer'])} ({r['op']}) {r['sqnr_db']:.1f} dB" for r in report["worst"])
        )
    for row in (r for r in report["rows"] if r.get("notes")):
        for note in row["notes"]:
            console.print(f"note: #{row['depth']} {escape(row['tensor'])} ({row['op']}): {escape(note)}")
    unmatched = report["unmatched"]
    for side in ("reference_only", "artifact_only"):
        names = unmatched[side]
        if names:
            more = f" ... and {len(names) - 8} more" if len(names) > 8 else ""
            console.print(f"not matched ({side.replace('_', ' ')}): {len(names)}: {escape(', '.join(names[:8]))}{more}")
    for skipped in unmatched["skipped"][:8]:
        console.print(f"not compared: {escape(skipped['tensor'])}: {escape(skipped['why'])}")
    if report.get("advice"):
        console.print(f"[yellow]advice[/]: {escape(report['advice'])}")
