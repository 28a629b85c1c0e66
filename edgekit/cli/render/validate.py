"""`validate`: the artifact against its reference, output by output, the task metric, accuracy, latency and the gate;
a language model's perplexity, agreement and generation speed."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from edgekit.cli.render.bench import print_generation_rows, print_latency_rows
from edgekit.cli.render.convert import print_fallback
from edgekit.cli.render.info import print_coverage
from edgekit.cli.render.table import console, value_and_limit
from edgekit.report.schema import fmt


def print_validation(report: dict) -> None:
    from edgekit.calibration.samples import fed_from_text

    if report.get("language"):
        _print_language(report)
        return
    data = report["data"]
    _print_heading(
        report, f" on {escape(report['reference']['target'])}, {data['samples']} samples from {data['source']}{escape(fed_from_text(data))}"
    )
    for note in report.get("input_alignment", []):
        console.print(f"  input: {note}")
    print_fallback((report["artifact"].get("meta") or {}).get("provenance") or {})
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
            fmt(f["top1_agreement"], ".2f", unit="%"),
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
    print_latency_rows([report["latency"]], report)
    _print_gate(report["gate"])


def _print_heading(report: dict, data_text: str) -> None:
    """The warnings, then what was compared with what on which data, and whether that data was the model's default."""
    data = report["data"]
    for warning in report["warnings"]:
        console.print(f"[bold red]WARNING: {warning}[/]")
    console.print(
        f"[bold]{report['artifact']['spec']}[/] on {escape(report['target'])} vs {report['reference'].get('zoo') or report['reference']['spec']}"
        + data_text
        + (f" (the validation set of {data['default_of']}; -d to choose)" if data.get("default_of") else "")
    )


def _print_task_metrics(judged: dict) -> None:
    """The task metric first: against the reference, against the labels, and the samples that changed most."""
    from edgekit.validation.validate import metric_label

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
        table.add_row(f["metric"], *value_and_limit(f), escape(f["reason"]))
    console.print(table)


def _print_language(report: dict) -> None:
    """A language model's validation: perplexity of both, their ratio with its interval, KL, agreement, greedy match."""
    lm, data = report["language"], report["data"]
    _print_heading(
        report,
        f", {lm['sequences']} sequences ({lm['tokens']} next-token predictions) from {escape(str(data['source']))} ({data['read_as']})",
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
    print_generation_rows([report["latency"]], report)
    _print_gate(report["gate"])
