"""What `convert` prints of the artifact it wrote: how it was made, from its provenance (`info` prints it too)."""

from __future__ import annotations

from rich.markup import escape

from edgekit.cli.render.table import console
from edgekit.report.schema import fmt_size


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
        perplexity = (
            f"perplexity {verified['ppl_ratio']:.3f}x PyTorch's [{verified['ppl_ratio_ci95'][0]:.3f}, {verified['ppl_ratio_ci95'][1]:.3f}] "
            f"on {verified['sequences']} held-back calibration sequences (limit {verified['limit']}); "
            if "ppl_ratio" in verified
            else ""
        )
        return (
            f"{verified['result']}: {perplexity}{verified['greedy_match']:.0%} of {verified['prompts']} x {verified['tokens']} greedily "
            "decoded tokens equal PyTorch's (through the KV cache)"
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


def print_how_made(prov: dict) -> None:
    """Routes tried, exporter, quantization scheme and why, layers kept in float, NPU estimate, calibration, the check
    against the source: what `convert` prints."""
    if len(prov.get("routes") or []) > 1:
        console.print(f"  routes: {escape(routes_text(prov['routes']))}")
    if prov.get("kv_cache"):  # a language model (converters.causal_lm)
        cache = prov["kv_cache"]
        console.print(
            f"  {prov['task']}: KV cache [{cache['layers']}, 1, {cache['kv_heads']}, tokens, {cache['head_dim']}] "
            f"{prov.get('kv_cache_held', 'as inputs and outputs')}, "
            f"up to {cache['max_seq_len']} tokens; weights: {escape(prov.get('weights', '?'))}"
            + (f" ({escape(prov['method'])})" if prov.get("method") else "")
        )
        if len(prov.get("ratio_search") or []) > 1:
            tried = ", ".join(f"{t['ratio']:.0%} int4: {t['ppl_ratio']:.3f}" for t in prov["ratio_search"])
            console.print(f"  int4 share: {prov['ratio']:.0%} of the weight layers, the largest that held (perplexity ratios {tried})")
        if prov.get("group_fallback"):
            taken = ", ".join(f"{w} wide: {g or 'int8'}" for w, g in prov["group_fallback"]["groups"].items())
            console.print(f"  groups: --group-size does not divide every width; {escape(prov['group_fallback']['rule'])} ({taken})")
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
    print_fallback(prov)
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
    """The layers int8 kept in float: the sensitivity outliers, a detector's box decoding, the depthwise convs' channel
    scales, and what accuracy control returned to float."""
    kept = (quant.get("sensitivity") or {}).get("kept_in_float")
    if kept:
        layers = ", ".join(f"{k['name']} ({k['op']}, 1-cos {k['loss']:.2g})" for k in kept)
        console.print(f"  kept in float (int8 sensitivity outliers: {quant['sensitivity']['rule']}): {escape(layers)}")
    decoding = quant.get("box_decoding_in_float")
    if decoding:
        console.print(
            f"  kept in float: the detector's box decoding ({len(decoding)} ops: the box bins' softmax, their expectation, the "
            "arithmetic after it), which int8 moves by about a pixel (mAP@0.5:0.95)"
        )
    scales = quant.get("depthwise_channel_scales")
    if scales:
        console.print(
            f"  per-channel int8 ranges for {len(scales['rewritten'])} of {scales['of']} depthwise convs, whose input channels differ by "
            f"orders of magnitude (channel scales in the weights and in float Muls: {scales['float_nodes']} ops kept float)"
        )
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
    from edgekit.quantization.accuracy import Limit

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


def print_fallback(provenance: dict) -> None:
    """The share of ops that ran outside the accelerated part (validation.validate.fallback_of), where one was recorded."""
    from edgekit.validation.validate import fallback_of

    fallback = fallback_of(provenance)
    if fallback:
        left = ", ".join(f"{op} x{n}" for op, n in (fallback.get("not_delegated_ops") or {}).items())
        console.print(
            f"  fallback: {fallback['percent']:.1f}% of ops ran outside {fallback['where']}" + (f" ({escape(left)})" if left else "")
        )
