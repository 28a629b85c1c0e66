"""Routes: the ways a backend can do one job (export a module, lower a program, convert a model), tried in order until
one works. A backend declares its table of routes (`Route`: a name, what it does with the job, and the rules that pass
it over) and its `Routing` (what its warnings and its final error say, how a failure becomes a one-line why, which hints
the errors can show); `first_route` runs the table on a job.

Every route considered is recorded ({"route", "result": "failed" | "taken" | "skipped", "why", ...what the route taken
adds}), each fallback is one warning ("X: A failed (why); trying B") and each failure's full text is logged at info.
Every route failing: a ConversionError naming each failure, with the hints for the causes their errors showed.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from edgekit.backends.export_errors import DEFAULT_HINT, hint_for, plain
from edgekit.errors import ConversionError, EdgekitError

log = logging.getLogger("edgekit")


def _always(_) -> bool:
    return True


@dataclass(frozen=True)
class Route:
    """One way to do a job: its name (for the records), `run` (the job -> (what it gives, what its "taken" record adds))
    and the rules that pass it over:
    - `applies` (the job -> whether it can take it at all): where not, recorded "skipped" with `not_applying` as the
      why, or left out of the records where `not_applying` is None;
    - `worth_trying` (the error of the route that failed before it -> whether it can succeed after it): where not, left
      out of the records;
    - `fails_alike_on` (a pattern): where it finds the why of the failure before, recorded "skipped" ("it fails alike
      on: WHY")."""

    name: str
    run: Callable[[Any], tuple[Any, dict]]
    applies: Callable[[Any], bool] = _always
    not_applying: str | None = None
    worth_trying: Callable[[BaseException], bool] = _always
    fails_alike_on: re.Pattern | None = None


def each_route(records: list[dict]) -> str:
    """`a: WHY; b: WHY2`: every route considered, in order."""
    return "; ".join(f"{r['route']}: {r['why']}" for r in records)


def alike_together(records: list[dict]) -> str:
    """`a, b: WHY; c: WHY2`: the failed routes, those that failed alike together."""
    by_why: dict[str, list[str]] = {}
    for record in (r for r in records if r["result"] == "failed"):
        by_why.setdefault(record["why"], []).append(record["route"])
    return "; ".join(f"{', '.join(names)}: {why}" for why, names in by_why.items())


def _nothing(_) -> tuple[str, ...]:
    return ()


def _no_cause(_) -> str:
    return ""


@dataclass(frozen=True)
class Routing:
    """How a backend runs its routes.

    - `doing`: what the warnings call the job ("ONNX export" -> "ONNX export: A failed (why); trying B");
    - `failed`: how the error begins where every route failed ("ONNX export failed: "); `listed` writes the failures
      after it (each_route or alike_together);
    - `reason` (the error, the job -> its why on one line) and `hints` ((pattern, hint) for what the errors showed,
      backends.export_errors.hint_for), with `shown` (an error -> texts it showed beyond its message: a refused
      trace's warnings) and `cause` (the errors -> the framework's full message shown below the error line);
    - `own_errors`: edgekit's own errors speak for the route: a ConversionError's message is its why and its hint joins
      the hints; another EdgekitError (the inputs or options, not the route: every route would say the same) goes up;
    - `within`: the context every route runs in (quiet exporters)."""

    doing: str
    failed: str
    reason: Callable[[BaseException, Any], str]
    hints: tuple = ()
    listed: Callable[[list[dict]], str] = each_route
    shown: Callable[[BaseException], tuple[str, ...]] = _nothing
    cause: Callable[[list[BaseException]], str] = _no_cause
    own_errors: bool = False
    within: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

    def hint(self, failures: list[BaseException]) -> str:
        """The hints for the causes the failures showed; with `own_errors` the failed routes' own hints too, each once,
        DEFAULT_HINT only where there is no other."""
        found = hint_for(failures, self.hints, tuple(text for exc in failures for text in self.shown(exc)))
        if not self.own_errors:
            return found
        texts = [found] + [exc.hint for exc in failures if isinstance(exc, EdgekitError)]
        hints = dict.fromkeys(h for text in texts for h in (text or "").split("; ") if h and h != DEFAULT_HINT)
        return "; ".join(hints or [DEFAULT_HINT])


def first_route(routes: Sequence[Route], job, routing: Routing) -> tuple[Any, list[dict]]:
    """What the first of `routes` that does `job` gives, and every route considered ({"route", "result": "failed" |
    "taken" | "skipped", "why", ...}). All failing: a ConversionError naming each failure, with the hints."""
    records: list[dict] = []
    failures: list[BaseException] = []
    for route in routes:
        passed_over, why = _passed_over(route, job, records, failures)
        if passed_over:
            if why is not None:
                records.append({"route": route.name, "result": "skipped", "why": why})
            continue
        if failures:
            failed = next(r for r in reversed(records) if r["result"] == "failed")
            log.warning("%s: %s failed (%s); trying %s", routing.doing, failed["route"], failed["why"], route.name)
        try:
            with routing.within():
                result, entry = route.run(job)
        except Exception as exc:  # the frameworks raise many types; the next route is the point
            if routing.own_errors and isinstance(exc, EdgekitError) and not isinstance(exc, ConversionError):
                raise  # the inputs or options, not the route: every route would say the same
            records.append({"route": route.name, "result": "failed", "why": _why(exc, route, job, routing)})
            failures.append(exc)
            continue
        records.append({"route": route.name, "result": "taken", "why": None, **entry})
        return result, records
    raise ConversionError(routing.failed + routing.listed(records), hint=routing.hint(failures), cause=routing.cause(failures))


def _passed_over(route: Route, job, records: list[dict], failures: list[BaseException]) -> tuple[bool, str | None]:
    """(whether `route` is passed over, the why it is recorded "skipped" with, or None where it is left out of the
    records): it does not apply, it is not worth trying after the failure before it, or it fails alike on that."""
    if not route.applies(job):
        return True, route.not_applying
    if failures and not route.worth_trying(failures[-1]):
        return True, None
    failed = next((r["why"] for r in reversed(records) if r["result"] == "failed"), None)
    if failed is not None and route.fails_alike_on is not None and route.fails_alike_on.search(failed):
        return True, f"it fails alike on: {failed}"
    return False, None


def _why(exc: BaseException, route: Route, job, routing: Routing) -> str:
    """The failure's why on one line; the full error logged at info (an own ConversionError says it all already)."""
    if routing.own_errors and isinstance(exc, ConversionError):
        return " ".join(exc.message.split())
    log.info("%s route failed:\n%s", route.name, plain(exc))
    return routing.reason(exc, job)
