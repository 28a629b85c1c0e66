"""Quieting what other libraries print: native banners that bypass Python, and by default (unless --verbose)
their progress bars, logs and warnings. edgekit's own progress is edgekit.progress."""

from __future__ import annotations

import contextlib
import logging
import os
import warnings

VERBOSE_ENV = "EDGEKIT_VERBOSE"  # "1": third-party output shown (set by --verbose; spawned processes inherit it)
# Loggers of frameworks edgekit drives, held at ERROR around their calls unless --verbose.
CHATTY = ("nncf", "openvino", "tensorflow", "absl", "tf2onnx", "onnxscript", "onnx_ir", "torch", "jax", "litert_torch", "torchao", "triton")


class OwnLogsOnly(logging.Filter):
    """On edgekit's console handler in normal mode: edgekit's own records, and any error; a framework's warnings and
    notices logged on the root logger (ONNX Runtime's quantizer: "Axis 1 is out-of-range for weight ...") only with -v."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == "edgekit" or record.name.startswith("edgekit.") or record.levelno >= logging.ERROR


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


def set_verbose(on: bool) -> None:
    """For this process and those it spawns, before any framework is imported: third-party chatter on or off."""
    os.environ[VERBOSE_ENV] = "1" if on else "0"
    if on:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO/WARNING lines (oneDNN notice, CPU guard)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    # litert-torch imports JAX, which warns at every later fork (a spawned benchmark, a subprocess); edgekit forks
    # no thread pool it relies on (benchmarks are spawned), so the warning says nothing actionable to a user.
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)


@contextlib.contextmanager
def third_party_quiet():
    """Around a framework's work: its progress bars (NNCF draws rich bars on stdout), INFO/WARNING logs and its
    deprecation notices to itself (torch.export's pytree FutureWarnings) go nowhere, unless --verbose. edgekit prints
    nothing on stdout inside such a block."""
    if verbose():
        yield
        return
    loggers = [logging.getLogger(name) for name in CHATTY]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def stderr_silenced():
    """Point fd 2 at /dev/null for the block (absl/TFLite banners); Python exceptions still propagate."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
