"""Every bad input in the corpus, through every command that takes it: exit 1 (2 for a failed gate),
no traceback, one `error:` line naming the file and the fix.

The cases run in two interpreters (one per core), each importing the frameworks once
(tests/corpus/batch_cli.py); one test per case then checks what the user saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import CliResult, assert_clean_error
from tests.corpus.make_corpus import CASES, case_id, write_corpus

BATCH = Path(__file__).with_name("batch_cli.py")
ROOT = Path(__file__).parents[2]


def _run_batch(cases: list[list[str]], cwd: Path) -> list[dict]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(BATCH)],
        input=json.dumps({"cases": cases, "cwd": str(cwd)}),
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def corpus_results(tmp_path_factory) -> tuple[Path, dict[str, CliResult]]:
    folder = write_corpus(tmp_path_factory.mktemp("corpus"))
    argv = [[a.replace("{d}", str(folder)) for a in case.args] for case in CASES]
    halves = [list(range(0, len(CASES), 2)), list(range(1, len(CASES), 2))]
    with ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(lambda idx: _run_batch([argv[i] for i in idx], folder), halves))
    results = {}
    for idx, out in zip(halves, outputs, strict=True):
        for i, r in zip(idx, out, strict=True):
            results[_key(CASES[i])] = CliResult(r["code"], r["stdout"], r["stderr"])
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
    for name in case.forbid:
        assert not (folder / name).exists(), f"{name} was created: unsafe load"


def test_the_corpus_covers_every_command_that_takes_a_file():
    commands = {c.args[0] for c in CASES}
    assert {"info", "convert", "validate", "bench", "gate", "run"} <= commands
