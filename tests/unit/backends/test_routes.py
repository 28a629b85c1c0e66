"""The routes helper (edgekit.backends.routes) on small tables: what it records, warns and raises for each rule, the
same for every backend that declares a table (ONNX export, ExecuTorch lowering, TFLite, OpenVINO)."""

from __future__ import annotations

import logging
import re

import pytest

from edgekit.backends.routes import Route, Routing, alike_together, first_route
from edgekit.errors import ConversionError, EdgekitError, InputMismatchError

ROUTING = Routing(doing="Job", failed="the job failed by every route: ", reason=lambda exc, job: f"{type(exc).__name__}: {exc}")


def works(value, **entry):
    return lambda job: (value, entry)


def fails(error: BaseException):
    def run(job):
        raise error

    return run


def test_the_first_route_that_works_gives_its_result_and_its_record_adds_its_entry():
    result, records = first_route((Route("a", works(1, extra="x")), Route("b", works(2))), "job", ROUTING)
    assert result == 1
    assert records == [{"route": "a", "result": "taken", "why": None, "extra": "x"}]


def test_a_failure_is_recorded_warned_and_logged_in_full_then_the_next_route_runs(caplog):
    routes = (Route("a", fails(ValueError("\x1b[31mbad\x1b[0m op"))), Route("b", works(2, why="b's own why")))
    with caplog.at_level(logging.INFO, logger="edgekit"):
        result, records = first_route(routes, "job", ROUTING)
    assert result == 2
    assert records == [
        {"route": "a", "result": "failed", "why": "ValueError: \x1b[31mbad\x1b[0m op"},
        {"route": "b", "result": "taken", "why": "b's own why"},
    ]
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert logged == [("INFO", "a route failed:\nbad op"), ("WARNING", "Job: a failed (ValueError: \x1b[31mbad\x1b[0m op); trying b")]


def test_a_route_that_does_not_apply_is_skipped_with_its_why_or_left_out_unrecorded():
    never = lambda job: False  # noqa: E731
    routes = (
        Route("a", works(1), applies=never, not_applying="not for this job"),
        Route("b", works(2), applies=never),
        Route("c", works(3)),
    )
    result, records = first_route(routes, "job", ROUTING)
    assert result == 3
    assert records == [
        {"route": "a", "result": "skipped", "why": "not for this job"},
        {"route": "c", "result": "taken", "why": None},
    ]


def test_a_route_not_worth_trying_after_that_failure_is_left_out():
    routes = (
        Route("a", fails(KeyError("k"))),
        Route("b", works(2), worth_trying=lambda exc: isinstance(exc, ValueError)),
        Route("c", works(3)),
    )
    _, records = first_route(routes, "job", ROUTING)
    assert [(r["route"], r["result"]) for r in records] == [("a", "failed"), ("c", "taken")]


def test_a_route_that_fails_alike_is_skipped_and_the_error_groups_the_routes_that_failed_alike(caplog):
    routing = Routing(doing="Lowering", failed="no route lowered it: ", reason=lambda exc, job: str(exc), listed=alike_together)
    routes = (
        Route("a", fails(RuntimeError("Pass: layout"))),
        Route("b", works(2), fails_alike_on=re.compile(r"^Pass: ")),
        Route("c", fails(RuntimeError("Pass: layout"))),
        Route("d", fails(RuntimeError("other"))),
    )
    with caplog.at_level(logging.WARNING, logger="edgekit"), pytest.raises(ConversionError) as raised:
        first_route(routes, "job", routing)
    assert raised.value.message == "no route lowered it: a, c: Pass: layout; d: other"
    warned = [r.getMessage() for r in caplog.records]
    assert warned == ["Lowering: a failed (Pass: layout); trying c", "Lowering: c failed (Pass: layout); trying d"]


def test_every_route_failing_lists_each_record_and_the_hints_their_errors_showed():
    routing = Routing(
        doing="Job",
        failed="the job failed by every route: ",
        reason=lambda exc, job: str(exc),
        hints=((re.compile(r"no kernel for (\w+)"), "{0} has no kernel: rewrite it"), (re.compile(r"never"), "not shown")),
        shown=lambda exc: getattr(exc, "shown", ()),
        cause=lambda failures: f"{len(failures)} failures",
    )
    seen = ValueError("refused")
    seen.shown = ("no kernel for median",)
    routes = (Route("a", works(1), applies=lambda job: False, not_applying="not here"), Route("b", fails(seen)))
    with pytest.raises(ConversionError) as raised:
        first_route(routes, "job", routing)
    assert raised.value.message == "the job failed by every route: a: not here; b: refused"
    assert raised.value.hint == "median has no kernel: rewrite it"
    assert raised.value.cause == "1 failures"


def test_with_own_errors_a_conversion_error_speaks_for_its_route_and_another_edgekit_error_goes_up(caplog):
    routing = Routing(doing="Job", failed="failed: ", reason=lambda exc, job: "reason", own_errors=True)
    own = ConversionError("the tool\n  is not installed", hint="pip install tool")
    with caplog.at_level(logging.INFO, logger="edgekit"), pytest.raises(ConversionError) as raised:
        first_route((Route("a", fails(own)), Route("b", fails(ValueError("x")))), "job", routing)
    assert raised.value.message == "failed: a: the tool is not installed; b: reason"
    assert raised.value.hint == "pip install tool"  # no pattern matched: the route's own hint, not the default
    assert [r.getMessage() for r in caplog.records if r.levelname == "INFO"] == ["b route failed:\nx"]
    with pytest.raises(InputMismatchError):
        first_route((Route("a", fails(InputMismatchError("bad input"))), Route("b", works(2))), "job", routing)


def test_without_own_errors_an_edgekit_error_is_a_failure_like_any_other():
    _, records = first_route((Route("a", fails(EdgekitError("said"))), Route("b", works(2))), "job", ROUTING)
    assert records[0] == {"route": "a", "result": "failed", "why": "EdgekitError: said"}
    assert ROUTING.hint([EdgekitError("said", hint="its own")]) == "run with -v for the exporters' full messages"


def test_every_route_runs_within_the_routing_context():
    entered = []

    class Context:
        def __enter__(self):
            entered.append("in")

        def __exit__(self, *exc):
            entered.append("out")

    routing = Routing(doing="Job", failed="failed: ", reason=lambda exc, job: "r", within=Context)
    first_route((Route("a", fails(ValueError())), Route("b", lambda job: (entered.append("run"), {}))), "job", routing)
    assert entered == ["in", "out", "in", "run", "out"]
