"""Every bad input in the corpus, through every command that takes it: exit 1 (2 for a failed gate),
no traceback, one `error:` line naming the file and the fix.

The cases run in two interpreters (one per core), each importing the frameworks once
(tests/corpus/batch_cli.py); one test per case then checks what the user saw.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CliResult, assert_clean_error
from tests.corpus.make_corpus import CASES, case_id, run_all, write_corpus
from tests.unit.test_hints import misnamed_flags


@pytest.fixture(scope="session")
def corpus_results(tmp_path_factory) -> tuple[Path, dict[str, CliResult]]:
    folder = write_corpus(tmp_path_factory.mktemp("corpus"))
    results = {_key(c): CliResult(r["code"], r["stdout"], r["stderr"]) for c, r in zip(CASES, run_all(folder), strict=True)}
    return folder, results


def _key(case) -> str:
    return f"{case_id(case)} {' '.join(case.args[1:])}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_bad_input_gives_one_clean_error(case, corpus_results):
    folder, results = corpus_results
    result = results[_key(case)]
    if case.code == 1:
        assert_clean_error(result, *case.needles)
    else:
        assert result.code == case.code and "Traceback" not in result.stderr
    hint = next((ln for ln in result.stderr.splitlines() if ln.startswith("hint: ")), "")
    assert not misnamed_flags(hint, case.args[0]), f"the hint names options `edgekit {case.args[0]}` lacks: {hint}"
    cause = result.stderr.partition("\ncause:\n")[2]
    for needle in case.cause:
        assert needle in cause, result.stderr
    for name in case.forbid:
        assert not (folder / name).exists(), f"{name} was created: unsafe load"


def test_the_corpus_covers_every_command_that_takes_a_file():
    commands = {c.args[0] for c in CASES}
    assert {"info", "convert", "validate", "bench", "gate", "run"} <= commands
