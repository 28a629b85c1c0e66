"""`edgekit demo`: the embedded default, end to end."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekit.errors import EdgekitError
from edgekit.recipe.write import write_text


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    workdir: Path = typer.Option(
        None,
        "--workdir",
        help="Where artifacts and reports go (default: edgekit-demo, edgekit-demo-keras with --keras, edgekit-demo-detector with --detector, edgekit-demo-llm with --llm).",
    ),
    threads: int = typer.Option(None, "--threads", help="Threads for every runtime (default: all usable cores)."),
    runs: int = typer.Option(200, "--runs", min=1, help="Timed latency runs per artifact."),
    limit: int = typer.Option(
        None, "--limit", min=1, help="Validate on a seeded subset of N samples of the recipe's validation data (default: all of it)."
    ),
    keras: bool = typer.Option(False, "--keras", help="Start from the Keras model instead of the PyTorch one."),
    detector: bool = typer.Option(False, "--detector", help="The zoo's detector (zoo:fashion-det) instead, judged by mAP@0.5."),
    llm: bool = typer.Option(
        False,
        "--llm",
        help="The zoo's language model (zoo:stdlib-lm) instead, with its KV cache: perplexity, greedy match, TTFT, tokens/s.",
    ),
    emit_recipe: Path = typer.Option(None, "--emit-recipe", help="Write the recipe this demo runs (then `edgekit run` it)."),
) -> None:
    """Run the embedded recipe: a real Fashion-MNIST CNN to ONNX, OpenVINO and TFLite in fp32/fp16/int8, validated on 10k test images, timed, gated
    (--detector: the zoo's detector, validated by mAP on 200 labelled canvases; --llm: the zoo's language model, validated by
    perplexity and greedy decoding on held-out text)."""
    from edgekit.api.results import exit_code
    from edgekit.cli.render.run import print_run
    from edgekit.cli.render.table import console, escape
    from edgekit.demo import RECIPES, run_demo

    variant = "llm" if llm else "detector" if detector else "keras" if keras else "pytorch"
    if workdir is not None and workdir.exists() and not workdir.is_dir():
        raise EdgekitError(f"--workdir {workdir} is a file, not a folder", hint="name a folder (it is created if missing)")
    if emit_recipe:
        write_text(emit_recipe, RECIPES[variant].read_text(), force=True)
    report, written = run_demo(
        workdir, threads, runs, variant, limit=limit, progress=lambda text: console.print(f"[dim]... {escape(text)}[/]")
    )
    print_run(report, written)
    raise typer.Exit(exit_code(report))
