"""A warm interpreter that runs each `edgekit` command of the tests in a fresh process of its own, forked from it.

`run_cli` ran every command as `python -m edgekit ...` in a new interpreter: 200 commands in the suite, each importing
torch, ONNX and ONNX Runtime again (about 3 CPU-seconds a command, 40% of the suite's CPU time went to these
subprocesses). This server imports edgekit and those frameworks once, then forks a child per command: the child takes
the command's working folder, environment and arguments, points fds 0/1/2 at /dev/null and two files, runs
`edgekit.__main__` as `python -m edgekit` would, and exits the way the interpreter does (threads joined, atexit
handlers run, streams flushed). Each command still runs in a process of its own, on the real runtimes, with nothing
left over from the command before it.

What a forked command does not see: what happens while a framework is imported (its import-time output and the
environment it reads then). Tests about that run the command in a new interpreter (`run_cli(..., fresh=True)`), and
the `-X importtime` tests start their own. Frameworks that start threads or read the environment when imported
(TensorFlow reads TF_CPP_MIN_LOG_LEVEL, which edgekit sets first; OpenVINO and NNCF start a thread) are not preloaded.

Protocol on stdin/stdout, a JSON line each way: {"args", "cwd", "env", "stdout", "stderr", "timeout"} ->
{"code", "timed_out"}; the outputs are in the two files named.
"""

from __future__ import annotations

import json
import os
import sys

PRELOAD = ("edgekit.cli", "numpy", "torch", "torch._dynamo", "onnx", "onnxruntime", "onnxscript", "transformers")


def serve() -> None:
    null, stderr = os.open(os.devnull, os.O_RDWR), os.dup(2)
    os.dup2(null, 2)  # what imports print is not any command's output
    for name in PRELOAD:
        __import__(name)
    _build_torchlib_registry()
    os.dup2(stderr, 2)
    os.close(stderr)
    channel_in, channel_out = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    os.dup2(null, 0)
    os.dup2(null, 1)  # nothing the server itself prints can break the protocol
    os.close(null)
    for line in channel_in:
        request = json.loads(line)
        code = _run(request)
        channel_out.write(json.dumps({"code": code, "timed_out": code is None}) + "\n")
        channel_out.flush()


def _build_torchlib_registry() -> None:
    """The registry every ONNX export in a process shares (edgekit.backends.onnx.torchlib_registry), built here once
    rather than in each forked command (2.3 s each on a 2-core Zen 3)."""
    from torch.onnx import _constants
    from torch.onnx._internal.exporter import _registration

    from edgekit.backends.onnx.torchlib_registry import share_torchlib_registry

    share_torchlib_registry()
    _registration.ONNXRegistry.from_torchlib(opset_version=_constants.ONNX_DEFAULT_OPSET)  # torch.onnx.export's default


def _run(request: dict) -> int | None:
    """The command's exit code, None where it ran past its timeout (then killed)."""
    import signal
    import time

    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(request)  # never returns
    deadline = time.monotonic() + request["timeout"]
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def _child(request: dict) -> None:
    """In the forked process: become `python -m edgekit ARGS` in `cwd` with `env`, then exit as an interpreter does."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY), (2, request["stderr"], os.O_WRONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        sys.path[0] = os.getcwd()  # `python -m` puts the working folder first
        sys.argv = [sys.executable, *request["args"]]
        code = _main()
    finally:
        os._exit(code)


def _main() -> int:
    import atexit
    import runpy
    import threading
    import traceback

    try:
        runpy.run_module("edgekit", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # what Py_FinalizeEx does: join non-daemon threads, then atexit, then flush
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    serve()
