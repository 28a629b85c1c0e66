"""Run many `edgekit` command lines in one interpreter (frameworks imported once), as `python -m edgekit` would.

Reads a JSON list of argument lists on stdin; writes a JSON list of {code, stdout, stderr}. An exception
that escapes `edgekit.cli.main` is printed as Python prints it (a traceback, exit 1), so the corpus test
sees exactly what a user would.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


def run_one(args: list[str], cwd: str) -> dict:
    from edgekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["edgekit", *args]
    code = 0
    os.chdir(cwd)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what the interpreter would print for an uncaught exception
            traceback.print_exc()
            code = 1
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    request = json.load(sys.stdin)
    results = [run_one(args, request["cwd"]) for args in request["cases"]]
    sys.__stdout__.write(json.dumps(results))
