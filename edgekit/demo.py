"""The embedded default: the recipe in edgekit/recipes/demo.yaml (a trained Fashion-MNIST CNN through
convert -> validate -> bench -> gate for every format x precision edgekit runs here), and the data it uses."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from edgekit.artifact import TensorSpec
from edgekit.recipe.schema import load_recipe
from edgekit.source import ModelSource

log = logging.getLogger("edgekit")
INPUTS = (TensorSpec("image", ("batch", 1, 28, 28), "float32"),)


def demo_source() -> ModelSource:
    """The committed, trained PyTorch FashionCNN as a factory + state dict."""
    from edgekit.zoo.fashion_mnist import WEIGHTS

    return ModelSource("edgekit.zoo.models:fashion_cnn", "torch-factory", WEIGHTS)


RECIPE_DIR = Path(__file__).parent / "recipes"
# the classifier from PyTorch (the default), from Keras, and the zoo's detector (judged by mAP)
RECIPES = {
    "pytorch": RECIPE_DIR / "demo.yaml",
    "keras": RECIPE_DIR / "demo-keras.yaml",
    "detector": RECIPE_DIR / "demo-detector.yaml",
    "llm": RECIPE_DIR / "demo-llm.yaml",  # the zoo's language model: perplexity, greedy match, TTFT, tokens/s
}


def demo_recipe(
    workdir: Path | None, threads: int | None = None, runs: int = 200, variant: str = "pytorch", precisions=None, limit: int | None = None
):
    """The embedded demo recipe, with the run's folder (default: the recipe's own, in the current folder: edgekit-demo,
    edgekit-demo-keras, edgekit-demo-detector, so one variant never replaces another's reports and artifacts), threads,
    run count and validation limit (a seeded subset of the recipe's validation data, as `validate --limit` takes one;
    default: all of it)."""
    recipe = load_recipe(RECIPES[variant])
    matrix = replace(recipe.matrix, precisions=tuple(precisions)) if precisions else recipe.matrix
    return replace(
        recipe,
        report=replace(recipe.report, dir=str(Path(workdir or recipe.report.dir).resolve())),
        latency=replace(recipe.latency, threads=threads, runs=runs if variant != "llm" else recipe.latency.runs),
        matrix=matrix,
        validation=replace(recipe.validation, limit=limit) if limit else recipe.validation,
    )


def run_demo(
    workdir: Path | None,
    threads: int | None = None,
    runs: int = 200,
    variant: str = "pytorch",
    precisions=None,
    progress=None,
    limit: int | None = None,
) -> tuple[dict, list]:
    """Run the demo recipe; returns the matrix report and the report files written."""
    from edgekit.recipe.run import run_recipe
    from edgekit.report.write import write_reports

    recipe = demo_recipe(workdir, threads, runs, variant, precisions, limit)
    report = run_recipe(recipe, progress=progress)
    return report, write_reports(report, Path(recipe.report.dir), recipe.report.formats)
