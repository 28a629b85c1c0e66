"""`edgekit tune`: the fastest artifact that passes the gates where it will run, found by measurement.

The space is a recipe's matrix (formats x precisions x targets) times thread counts. Each cell is converted (or taken
from the run cache) and validated on the host, as `edgekit run` does it. A cell is dropped before any timing when it
misses a gate that timing cannot change (the task metric, fidelity, size), or when it is int8 and its runtime runs
none of its multiply-accumulates in int8 (int8 coverage 0: it cannot be faster than fp32); fp16 on a CPU without
half-precision arithmetic is not even converted (it runs in fp32 there). The rest, at every thread
count, are timed by successive halving: all with short runs, the faster half again with twice the runs, and so on
until FINALISTS remain or the runs reach the full protocol's; the finalists are then timed with the full protocol (the
recipe's warm-up and runs), and where their p50s lie within CLOSE of each other, timed again in reverse order (A B B A,
as the gate re-times), each one's timed runs of both processes pooled: one process of a small model can land in a
slow or fast mode of its own (docs/ci.md), and two finalists that close are told apart by more than one. Every timing
is a fresh process alone on the machine that runs the target (a board's over SSH). The choice is the finalist with the
lowest p50 that passes every gate.

Int8 with fallback layers: an int8 cell whose task metric may miss its gate (--max-drop, --min-agreement: the 95%
interval on the screening sample reaches past it) while every other gate holds is converted once more under accuracy
control, which returns layers to float in the order of measured sensitivity until that gate holds on the validation
data (`fallback_limit`); the variant joins the search as a cell of its own, `int8+fallback`, beside the plain one.
Where the recipe's convert section already asks for accuracy control, every int8 cell has it and none is added.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from edgekit.conversion import TEXT_GENERATION
from edgekit.errors import EdgekitError
from edgekit.isa import classify, half_precision_arithmetic, host_flags
from edgekit.metrics.gate import Thresholds, check_row, failures, with_default_gates
from edgekit.recipe.cache import publish
from edgekit.recipe.cells import STATIC_INT8_ONLY, PreparedCell, prepare_cell
from edgekit.recipe.distributed import RayOptions, prepare_cells
from edgekit.recipe.run import apply_compression, data_path, model_source, say
from edgekit.recipe.schema import CompressSection, Recipe
from edgekit.recipe.tune_timing import FINALISTS, FIRST_RUNS, Candidate, close, final_timing, ms_per_item, successive_halving
from edgekit.report.schema import new_report
from edgekit.report.tables import precision_label
from edgekit.source import file_hash
from edgekit.targets import device_name

SCHEMA = "tune"
SCREEN_SAMPLES = 500  # validation samples each cell is first judged on; the finalists then on all of them
TIMING_GATES = {"max_p50_ms": None, "max_p90_ms": None, "min_speedup": None}
CHOSEN = "chosen"  # the folder of the chosen artifact in the tune's folder
RECIPE_NAME = "chosen.yaml"
UNTRIED = "not tried: the budget was spent"
REBUILT = "rebuilt"  # where `edgekit run chosen.yaml` writes, in the tune's folder


@dataclass(frozen=True)
class Work:
    """What a cell's host work needs: the recipe (screening's or the full one), its model and data, the cache."""

    recipe: Recipe
    source: object
    inputs: tuple
    validation: str | None
    calibration: str | None
    cache: Path
    use_cache: bool
    progress: Callable[[str], None] | None
    ray: RayOptions | None = None  # the host work as Ray tasks
    compress: dict | None = None  # a pruned variant's compression stage (its source is the pruned model)

    def prepare(self, cell: tuple[str, str, str], deadline: float = math.inf, control: dict | None = None) -> PreparedCell:
        """The cell's host work (with accuracy control holding `control`, convert's limits); once the time is up, not tried."""
        return self.prepare_all([cell], deadline, control)[0]

    def prepare_all(self, cells: list[tuple], deadline: float = math.inf, control: dict | None = None) -> list[PreparedCell]:
        """Each cell's host work: as Ray tasks, or here one after the other (once the time is up, the rest are not tried)."""
        work = replace(self, recipe=replace(self.recipe, convert=replace(self.recipe.convert, **control))) if control else self
        if control and cells:
            say(
                self.progress,
                f"int8 missed the task metric on {len(cells)} cell(s): again with layers back in float ({_limit_text(control)})",
            )
        label = {"control": control, "compress": self.compress}  # what the progress line names besides the precision
        prepared = (
            prepare_cells(work.ray, *_ray_arguments(work, cells)) if work.ray else [work._prepare_here(c, deadline, label) for c in cells]
        )
        for cell in prepared:
            cell.base.update({"control": control} if control else {})
            cell.base.update({"compress": self.compress} if self.compress else {})
        return prepared

    def _prepare_here(self, cell: tuple[str, str, str], deadline: float, label: dict) -> PreparedCell:
        if time.monotonic() > deadline:
            return PreparedCell(dict(zip(("format", "precision", "target"), cell, strict=True)), failure=UNTRIED)
        say(self.progress, f"{cell[0]} {precision_label({'precision': cell[1], **label})} on {cell[2]}: convert and validate")
        return prepare_cell(self.recipe, self.source, self.inputs, *cell, self.validation, self.calibration, self.cache, self.use_cache)


def tune(
    recipe: Recipe,
    thread_counts: tuple[int, ...],
    budget_s: float | None = None,
    default_gates: bool = True,
    use_cache: bool = True,
    progress: Callable[[str], None] | None = None,
    ray: RayOptions | None = None,
    pruning: Pruning | None = None,
) -> dict:
    """Search `recipe`'s matrix x `thread_counts` (and `pruning`'s variants of the model); the tune report (rows of every
    candidate, the choice). `ray`: the cells' host work (conversion, accuracy) as Ray tasks; the timings stay alone on
    their machine, here or on a board."""
    started = time.monotonic()
    deadline = started + budget_s if budget_s else math.inf
    workdir = Path(recipe.resolve(recipe.report.dir))
    workdir.mkdir(parents=True, exist_ok=True)
    source, inputs, layout = model_source(recipe)
    data = [data_path(recipe.resolve(section.path), workdir, layout) for section in (recipe.validation, recipe.calibration)]
    full = Work(recipe, source, inputs, *data, workdir / ".cache", use_cache, progress, ray)
    screen = replace(full, recipe=screening(recipe))
    gates = Gates(recipe.gates, default_gates)
    ruled_out, worth = _worth_converting(recipe)
    optimistic = screen.recipe is not recipe
    variants, failed = _variants(full, screen, pruning, worth)
    prepared, skipped = [], []
    for _, work in variants.values():
        done, not_done = _prepare_variant(work, worth, deadline, gates, optimistic)
        prepared, skipped = prepared + done, skipped + not_done
    dropped, alive = _screen(prepared, gates, thread_counts, optimistic)
    control = fallback_limit(recipe, data[0])
    again = _fallback_cells(prepared, gates, source.family, optimistic) if control else []
    for key in {_key(cell.base.get("compress")) for cell in again}:
        plain = [cell for cell in again if _key(cell.base.get("compress")) == key]
        more_dropped, more_alive = _fallbacks(variants[key][1], plain, control, deadline, gates, thread_counts, optimistic)
        dropped, alive = dropped + more_dropped, alive + more_alive
    dropped += skipped + failed
    timed = [*alive]
    finalists = successive_halving(alive, recipe.latency, deadline, progress)
    if screen.recipe is not recipe:
        finalists = _confirmed(finalists, timed, {key: work for key, (work, _) in variants.items()}, gates)
    warnings = [final_timing(c, recipe.latency, progress) for c in finalists]
    if close(finalists):
        warnings += [final_timing(c, recipe.latency, progress, pool_with=c.row) for c in reversed(finalists)]
    for candidate in timed:
        gates.judge(candidate)
    chosen = min((c for c in finalists if c.stage == "finalist" and c.row["passed"]), key=Candidate.speed, default=None)
    if chosen:
        chosen.stage, chosen.why = CHOSEN, "the fastest finalist that passes every gate"
        chosen.row["published"] = str(publish(Path(chosen.row["artifact"]), workdir / CHOSEN)) if chosen.row.get("artifact") else None
    rows = sorted((_candidate_row(c) for c in timed), key=_order) + dropped + ruled_out
    report = new_report(SCHEMA, ("torch", "onnxruntime", "openvino", "ai-edge-litert", "tensorflow-cpu"))
    report["warnings"] += [w for w in warnings if w]
    report.update(
        model=recipe.model.path,
        data={"validation": data[0], "calibration": data[1], "screening_samples": screen.recipe.validation.limit},
        thresholds=with_default_gates(recipe.gates, default_gates).to_dict(),
        requested_thresholds=recipe.gates.to_dict(),
        default_gates=default_gates,
        space={**_space(recipe, thread_counts), "pruned_channels": list(pruning.fractions) if pruning else []},
        rows=rows,
        choice=_choice(chosen),
        closest=None if chosen else closest(rows),
        passed=chosen is not None,
        search={
            "cells": len(recipe.matrix.cells()),
            "fallback_cells": len(again),  # int8+fallback: int8 cells converted again under accuracy control
            "candidates": len(timed),
            "timings": sum(len(c.rounds) for c in timed),
            "timed_runs": sum(r["runs"] for c in timed for r in c.rounds),
            "seconds": round(time.monotonic() - started, 1),
            "budget_s": budget_s,
            "first_runs": FIRST_RUNS,
            "finalists": FINALISTS,
        },
    )
    return report


def _ray_arguments(work: Work, cells: list[tuple]) -> tuple:
    """prepare_cells' arguments for `cells` of `work`."""
    return work.recipe, work.source, work.inputs, cells, work.validation, work.calibration, work.cache, work.use_cache, work.progress


def screening(recipe: Recipe) -> Recipe:
    """The recipe the cells are first validated by: at most SCREEN_SAMPLES of the validation data (the seeded subset
    `--limit` takes); the finalists are then validated on all of it. A language model's is its own."""
    limit = recipe.validation.limit
    if recipe.convert.task == TEXT_GENERATION or (limit is not None and limit <= SCREEN_SAMPLES):
        return recipe
    return replace(recipe, validation=replace(recipe.validation, limit=SCREEN_SAMPLES))


def _worth_converting(recipe: Recipe) -> tuple[list[dict], list[tuple]]:
    """The rows of the cells not worth converting (not_worth_converting), and the other cells."""
    skipped, worth = [], []
    for fmt, precision, target in recipe.matrix.cells():
        why = not_worth_converting(fmt, precision, target, recipe.gates, host_flags())
        if why:
            skipped.append(_row({"format": fmt, "precision": precision, "target": target, "status": "not tried"}, "skipped", why))
        else:
            worth.append((fmt, precision, target))
    return skipped, worth


def _screen(
    prepared: list[PreparedCell], gates: Gates, thread_counts: tuple[int, ...], optimistic: bool
) -> tuple[list[dict], list[Candidate]]:
    """The rows of the cells no timing can save, and the candidates (each other cell at each thread count); on a
    screening sample (`optimistic`), a cell is dropped only where the favourable end of each interval misses too."""
    dropped, alive = [], []
    for cell in prepared:
        row = _ruled_out(cell, gates, optimistic)
        if row:
            dropped.append(row)
        else:
            alive += [Candidate(cell, threads) for threads in thread_counts]
    return dropped, alive


def _confirmed(finalists: list[Candidate], timed: list[Candidate], fulls: dict[str | None, Work], gates: Gates) -> list[Candidate]:
    """The finalists validated on all the data (once per cell; `fulls`: each variant's work by its key); one that misses
    a gate there is dropped and the next fastest candidate takes its place, until FINALISTS hold or none is left."""
    order = finalists + sorted((c for c in timed if c.stage == "halved"), key=Candidate.speed)
    validated: dict[tuple, PreparedCell] = {}
    kept = []
    for candidate in order:
        if len(kept) == FINALISTS:
            break
        base = candidate.cell.base
        cell, control, variant = (base["format"], base["precision"], base["target"]), base.get("control"), _key(base.get("compress"))
        key = (*cell, _key(control), variant)
        if key not in validated:  # a screening that saw all of the data stands; else the cell is validated on all of it
            saw_all = (candidate.cell.report.get("data") or {}).get("samples", 0) < SCREEN_SAMPLES
            validated[key] = candidate.cell if saw_all else fulls[variant].prepare(cell, control=control)
        candidate.cell = validated[key]
        missed = _ruled_out(candidate.cell, gates)  # strictly now: the metric itself, not its interval's favourable end
        if missed:
            candidate.row, candidate.stage = {**missed, "threads": candidate.threads}, "dropped"
            candidate.why = f"{missed['tune']['why']} (on all the validation data)"
            continue
        candidate.stage, candidate.why = "timed", None
        kept.append(candidate)
    return kept


@dataclass(frozen=True)
class Gates:
    """The thresholds a candidate is judged by: the user's, with the default gates unless turned off."""

    requested: Thresholds
    defaults: bool = True

    def of(self, row: dict, timed: bool = True) -> Thresholds:
        limits = with_default_gates(self.requested, self.defaults, row)
        return limits if timed else replace(limits, **TIMING_GATES)

    def judge(self, candidate: Candidate) -> None:
        if candidate.row is None or candidate.row["status"] != "ok":
            return
        results = check_row(candidate.row, self.of(candidate.row))
        candidate.row["gates"] = [r.to_dict() for r in results]
        candidate.row["passed"] = not failures(results)


def not_worth_converting(fmt: str, precision: str, target: str, gates: Thresholds, flags: frozenset[str]) -> str | None:
    """Why a cell cannot win before it is even converted, or None: fp16 on this machine's CPU (its `flags`) without
    half-precision arithmetic runs in fp32, never faster than the fp32 cell (kept when a size gate may need its smaller
    file)."""
    on_host_cpu = target.partition(":")[2].partition("[")[0] == "cpu" and not device_name(target)
    if precision == "fp16" and on_host_cpu and gates.max_size_mb is None and not half_precision_arithmetic(flags):
        return f"this CPU ({classify(set(flags), platform.machine()).name}) has no half-precision arithmetic: fp16 runs in fp32 here, never faster than fp32"
    return None


PRUNE_CHANNELS = (0.25, 0.5)  # the channel-pruning fractions tried where training data is given
PRUNE_EPOCHS = 2  # each pruned model's fine-tuning, unless --epochs says


@dataclass(frozen=True)
class Pruning:
    """The pruned variants searched beside the model: channel pruning at each fraction, fine-tuned on `finetune`."""

    finetune: str
    fractions: tuple[float, ...] = PRUNE_CHANNELS
    epochs: int = PRUNE_EPOCHS

    def stages(self) -> list[dict]:
        """Each variant's compression stage, as a recipe's `compress:` holds it."""
        return [{"method": "channels", "channels": f, "finetune": self.finetune, "epochs": self.epochs} for f in self.fractions]


def _key(settings: dict | None) -> str | None:
    """A hashable name of a variant's settings (a compression stage, an accuracy-control limit); None for none."""
    return None if not settings else ",".join(f"{k}={v}" for k, v in sorted(settings.items()))


def _bases(cells: list[tuple]) -> list[dict]:
    return [dict(zip(("format", "precision", "target"), cell, strict=True)) for cell in cells]


def _pruned(work: Work, stage: dict) -> tuple[Work, str | None]:
    """`work` on the model pruned and fine-tuned by `stage` (cached like an artifact), or the failure's line."""
    say(work.progress, f"pruning {stage['channels']:.0%} of the channels, {stage['epochs']} epoch(s) of fine-tuning")
    recipe = replace(work.recipe, compress=(CompressSection(**stage),))
    try:
        source = apply_compression(recipe, work.source, work.inputs, work.validation, work.cache, work.progress)
    except EdgekitError as exc:
        return work, f"failed: {exc.one_line()}"
    return replace(work, source=replace(source, original=work.source), compress=stage), None  # judged against the model


def _variants(full: Work, screen: Work, pruning: Pruning | None, cells: list[tuple]) -> tuple[dict, list[dict]]:
    """The model's work and each pruned variant's, by the variant's key (None: the model): (full, screening); and the
    rows of the variants whose pruning failed (one per cell)."""
    variants, failed = {None: (full, screen)}, []
    for stage in pruning.stages() if pruning else []:
        pruned, failure = _pruned(full, stage)
        if failure:
            failed += [_row({**b, "compress": stage, "status": failure}, "failed", failure.removeprefix("failed: ")) for b in _bases(cells)]
        else:
            variants[_key(stage)] = (pruned, replace(pruned, recipe=screen.recipe))
    return variants, failed


def _fallbacks(
    work: Work, plain: list[PreparedCell], control: dict, deadline: float, gates: Gates, thread_counts, optimistic: bool
) -> tuple[list[dict], list[Candidate]]:
    """The int8+fallback variants of `plain` int8 cells, screened: (dropped rows, candidates). One whose accuracy control
    kept every layer in int8 is the plain int8's model: dropped, not timed twice."""
    fallback = work.prepare_all([(c.base["format"], "int8", c.base["target"]) for c in plain], deadline, control)
    same = [not f.failure and _same_artifact(f, p) for f, p in zip(fallback, plain, strict=True)]
    dropped = [
        _row(_cell_row(f), "dropped", "accuracy control kept every layer in int8: the plain int8's model")
        for f, s in zip(fallback, same, strict=True)
        if s
    ]
    more_dropped, alive = _screen([f for f, s in zip(fallback, same, strict=True) if not s], gates, thread_counts, optimistic)
    return dropped + more_dropped, alive


def _prepare_variant(
    work: Work, cells: list[tuple], deadline: float, gates: Gates, optimistic: bool
) -> tuple[list[PreparedCell], list[dict]]:
    """The cells' host work on the model, or on a pruned variant its fp32 cell first: where the pruned model already
    misses a gate no timing changes at fp32, its other cells are not converted (their rows say why)."""
    first = [c for c in cells if c[1] == "fp32"][:1] if work.compress else []
    done = work.prepare_all(first, deadline)
    missed = _ruled_out(done[0], gates, optimistic) if done else None
    rest = [c for c in cells if c not in first]
    if missed and missed["tune"]["stage"] == "dropped":
        why = f"at fp32 the pruned model already {missed['tune']['why']}"
        return done, [_row({**base, "compress": work.compress, "status": "not tried"}, "skipped", why) for base in _bases(rest)]
    return done + work.prepare_all(rest, deadline), []


TASK_METRIC_GATES = ("max_drop", "min_agreement")  # the gates accuracy control holds (fallback_limit)


def fallback_limit(recipe: Recipe, validation: str | None) -> dict | None:
    """Convert's accuracy control that holds the user's task-metric gates on the `validation` data they are judged on,
    as NNCF's accuracy control does: layers (and ONNX Runtime's activations) ranked by sensitivity on calibration
    samples go back to float until --max-drop (labels) and --min-agreement (fp32's answers; a detector's mAP@0.5 of
    fp32's detections, a map's F1) hold there. None without validation data or a task-metric gate, or where the
    recipe's convert section already asks for accuracy control (then every int8 cell has it)."""
    gates, convert = recipe.gates, recipe.convert
    if validation is None or convert.task == TEXT_GENERATION or any(getattr(convert, key) is not None for key in STATIC_INT8_ONLY):
        return None
    limits = {key: getattr(gates, key) for key in TASK_METRIC_GATES if getattr(gates, key) is not None}
    samples = {"val_samples": recipe.validation.limit} if recipe.validation.limit else {}
    return {**limits, "val": validation, **samples} if limits else None


def _limit_text(control: dict) -> str:
    limits = [f"drop <= {control['max_drop']:g} pts" if "max_drop" in control else None]
    limits += [f"agreement >= {control['min_agreement']:g}%" if "min_agreement" in control else None]
    return " and ".join(filter(None, limits)) + " on the validation data"


def _fallback_cells(prepared: list[PreparedCell], gates: Gates, family: str, optimistic: bool) -> list[PreparedCell]:
    """The int8 cells worth converting again with accuracy control: those whose task metric may miss its gate (the
    unfavourable end of its 95% interval on the screening sample misses: the variant stands beside a cell that all of
    the data may still drop), with every other gate held, some multiply-accumulates in int8, and a converter that has
    accuracy control."""
    from edgekit.conversion import plan

    cells = []
    for cell in prepared:
        if cell.failure or cell.base["precision"] != "int8":
            continue
        row = _cell_row(cell)
        limits = gates.of(row, timed=False)
        task = Thresholds(**{key: getattr(limits, key) for key in TASK_METRIC_GATES})
        others = replace(limits, **dict.fromkeys(TASK_METRIC_GATES))
        if (
            failures(check_row(unfavourable(row), task))
            and not failures(check_row(favourable(row) if optimistic else row, others))
            and row.get("int8_coverage") != 0
            and plan(family, row["format"], "int8")[-1][0].accuracy_control
        ):
            cells.append(cell)
    return cells


def _same_artifact(a: PreparedCell, b: PreparedCell) -> bool:
    """Whether two cells' artifacts hold the same bytes (an OpenVINO IR: its .xml and its .bin)."""

    def digest(cell: PreparedCell) -> list:
        path = Path(cell.request.artifact.spec)
        return [file_hash(str(f)) for f in (path, path.with_suffix(".bin")) if f.exists()]

    return digest(a) == digest(b)


def _cell_row(cell: PreparedCell) -> dict:
    """The row of a prepared cell (validated, not timed)."""
    from edgekit.validation.validate import summary_row

    return {**summary_row(cell.report), **cell.base, **cell.sizes, "cached": cell.cached, "threads": None}


def _ruled_out(cell: PreparedCell, gates: Gates, optimistic: bool = False) -> dict | None:
    """The row of a cell no timing can make pass (failed, misses a gate of accuracy, fidelity or size, or int8 that
    runs no MAC in int8), or None for a cell worth timing. `optimistic`: judged by the favourable end of each metric's
    95% interval (a screening sample misses only where more data could not save it)."""
    if cell.failure == UNTRIED:
        return _row({**cell.base, "status": "not tried"}, "untried", "the budget was spent")
    if cell.failure:
        return _row({**cell.base, "status": cell.failure}, "failed", cell.failure.removeprefix("failed: "))
    row = _cell_row(cell)
    results = check_row(favourable(row) if optimistic else row, gates.of(row, timed=False))
    row["gates"] = [r.to_dict() for r in results]
    missed = failures(results)
    if missed:
        return _row(row, "dropped", "misses " + "; ".join(r.reason for r in missed) + ": no timing can change that")
    if row["precision"] == "int8" and row.get("int8_coverage") == 0:
        return _row(row, "dropped", "no multiply-accumulate runs in int8 on this runtime: it cannot be faster than fp32")
    return None


# Each metric with a 95% interval, and which end of it favours the artifact: (key, interval key, end).
INTERVALS = (
    ("drop_points", "drop_points_ci95", 0),
    ("agreement", "agreement_ci95", 1),
    ("top1_agreement", "top1_agreement_ci95", 1),
    ("ppl_ratio", "ppl_ratio_ci95", 0),
)


def favourable(row: dict) -> dict:
    """`row` with each metric at the end of its 95% interval that favours the artifact."""
    return {**row, **{key: row[ci][end] for key, ci, end in INTERVALS if row.get(key) is not None and row.get(ci)}}


def unfavourable(row: dict) -> dict:
    """`row` with each metric at the other end of its 95% interval."""
    return {**row, **{key: row[ci][1 - end] for key, ci, end in INTERVALS if row.get(key) is not None and row.get(ci)}}


def _row(row: dict, stage: str, why: str) -> dict:
    return {**row, "passed": False, "tune": {"stage": stage, "why": why, "rounds": []}}


def _candidate_row(candidate: Candidate) -> dict:
    row = candidate.row if candidate.row is not None else {**candidate.cell.base, "status": "not timed"}
    return {**row, "threads": candidate.threads, "tune": {"stage": candidate.stage, "why": candidate.why, "rounds": candidate.rounds}}


STAGE_ORDER = {CHOSEN: 0, "finalist": 1, "halved": 2, "timed": 3, "failed": 4}  # then dropped, skipped, untried


def _order(row: dict) -> tuple:
    return STAGE_ORDER.get(row["tune"]["stage"], 5), ms_per_item(row)


def _choice(chosen: Candidate | None) -> dict | None:
    if chosen is None:
        return None
    row = chosen.row
    keys = (
        "format",
        "precision",
        "target",
        "threads",
        "artifact",
        "published",
        "p50_ms",
        "p50_ms_ci95",
        "tokens_per_s",
        "metric",
        "agreement",
        "control",
        "compress",
    )
    return {key: row.get(key) for key in keys}


def closest(rows: list[dict]) -> dict | None:
    """When nothing passes: the candidate that missed the fewest gates, by the least, and what it missed."""
    judged = [r for r in rows if r["status"] == "ok" and r.get("gates")]
    if not judged:
        return None
    best = min(judged, key=lambda r: (len(_missed(r)), _shortfall(r), ms_per_item(r)))
    return {
        "format": best["format"],
        "precision": best["precision"],
        "target": best["target"],
        "threads": best.get("threads"),
        "missed": [g["reason"] for g in _missed(best)],
    }


def _missed(row: dict) -> list[dict]:
    return [g for g in row["gates"] if not g["passed"]]


def _shortfall(row: dict) -> float:
    """How far a row's failed gates are from their limits, relative to the limits."""
    return sum(abs(g["value"] - g["limit"]) / max(abs(g["limit"]), 1e-9) if g["value"] is not None else math.inf for g in _missed(row))


def _space(recipe: Recipe, thread_counts: tuple[int, ...]) -> dict:
    cells = recipe.matrix.cells()
    return {
        "formats": sorted({f for f, _, _ in cells}),
        "precisions": list(dict.fromkeys(p for _, p, _ in cells)),
        "targets": sorted({t for _, _, t in cells}),
        "threads": list(thread_counts),
    }


def chosen_recipe(recipe: dict, choice: dict) -> dict:
    """The recipe (as the tune's own, a plain dict) narrowed to the choice: `edgekit run` on it rebuilds and re-checks it."""
    fmt, target = choice["format"], choice["target"]
    matrix = {"formats": [fmt], "precisions": [choice["precision"]], "targets": {fmt: [target]}}
    latency = {**recipe.get("latency", {}), "threads": choice["threads"]}
    report = {**recipe["report"], "dir": REBUILT}  # beside the recipe: the tune's own reports stay as they are
    convert = {**recipe.get("convert", {}), **(choice.get("control") or {})}  # int8+fallback: its accuracy control
    compress = {"compress": [choice["compress"]]} if choice.get("compress") else {}  # a pruned variant: its stage
    return {**recipe, **compress, **({"convert": convert} if convert else {}), "matrix": matrix, "latency": latency, "report": report}
