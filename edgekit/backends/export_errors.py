"""What a failed torch export said, told plainly: the user's file and line where it stopped, the innermost cause on one
line (no ANSI codes, no exporter banners), and a hint only for a cause the errors showed (HINTS). Standard library
only: shared by the converters that start from a torch module (ONNX, OpenVINO, ExecuTorch, LiteRT) and by the routes
they take (backends/routes.py)."""

from __future__ import annotations

import contextlib
import functools
import io
import linecache
import os
import re
import site
import sys
import sysconfig
import traceback
from pathlib import Path

from edgekit.native import stderr_silenced, verbose

REASON_CHARS = 240
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
FRAME = re.compile(r'File "([^"]+)", line (\d+)')  # a frame as tracebacks and torch.export's "user code" stacks print it
# what the errors showed -> the hint naming that cause ({0}: what the pattern caught); none showed: DEFAULT_HINT
HINTS = (
    (
        re.compile(r"Python boolean|data-dependent expression"),
        "write the branch with torch.cond(pred, true_fn, false_fn, (x,)) so the exported graph holds both branches, "
        "or make the condition a constant that does not depend on the input",
    ),
    (
        re.compile(r"Python (?:number|float|integer|index|list)|NumPy array"),
        "keep that value a tensor (tensor ops instead of .item(), float(), int(), .tolist() or .numpy()), or make it a constant",
    ),
    (re.compile(r"Using len|Iterating over a tensor"), "use x.shape[0] instead of len(x), and tensor ops instead of a loop over a tensor"),
)
DEFAULT_HINT = "run with -v for the exporters' full messages"


def reason(exc: BaseException, code: tuple[str, ...] = ()) -> str:
    """The error on one line, plain: where in the user's code (`code`: model_code) it stopped, then the innermost
    cause's type and first line (torch.onnx wraps torch.export's error in its own 'step 1/3' banner)."""
    root, where = chain(exc)[-1], user_frame(exc, code)
    line = first_line(root)
    return (f"at {where_text(*where)}: " if where else "") + type(root).__name__ + (f": {line}" if line else "")


def hint_for(failures: list[BaseException], hints=HINTS, extra: tuple[str, ...] = ()) -> str:
    """The hints naming the causes the failures showed (their causes and `extra` texts included); else DEFAULT_HINT."""
    text = "\n".join([plain(e) for exc in failures for e in chain(exc)] + list(extra))
    found = [hint.format(*match.groups()) for pattern, hint in hints if (match := pattern.search(text))]
    return "; ".join(found) or DEFAULT_HINT


def chain(exc: BaseException) -> list[BaseException]:
    """`exc` and its causes (raise ... from, or raised while handling), outermost first."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return found


def user_frame(exc: BaseException, code: tuple[str, ...]) -> tuple[str, int] | None:
    """The innermost frame of the user's code where the export stopped: from the user-code stack torch.export prints
    in its messages, else from the traceback (non-strict export runs forward() itself), innermost cause first."""
    for error in reversed(chain(exc)):
        printed = [(path, int(line)) for path, line in FRAME.findall(plain(error)) if is_user_file(path, code)]
        raised = [(f.filename, f.lineno) for f in traceback.extract_tb(error.__traceback__) if is_user_file(f.filename, code)]
        frames = printed or raised
        if frames:
            return frames[-1]
    return None


def model_code(module) -> tuple[str, ...]:
    """Where the code of the module's classes lives (a package's folder, a lone file's path), outside torch and
    edgekit: the user's code even when installed (a model package in site-packages)."""
    tops = {sys.modules.get(type(m).__module__.split(".")[0]) for m in module.modules()}
    tops -= {None, sys.modules["torch"], sys.modules["edgekit"]}  # edgekit's zoo models: its own frames are not the model's
    return tuple(code for code in map(_code_of, tops) if code)


def _code_of(module) -> str | None:
    """A package's folder (with a trailing separator) or a lone module's file, resolved."""
    if hasattr(module, "__path__"):
        return os.path.realpath(next(iter(module.__path__))) + os.sep
    return os.path.realpath(module.__file__) if getattr(module, "__file__", None) else None


def where_text(path: str, line: int | None) -> str:
    """`path:line (`the code`)`."""
    code = linecache.getline(path, line or 0).strip()
    return f"{path}:{line}" + (f" (`{code}`)" if code else "")


def is_user_file(path: str, code: tuple[str, ...]) -> bool:
    """Code of the model's (`code`), or any not installed: not in site-packages, the standard library or edgekit, nor
    generated (<frozen ...>, <string>, fx code)."""
    if not path or path.startswith("<"):
        return False
    real = os.path.realpath(path)
    return real.startswith(code) or not real.startswith(_library_folders())


@functools.cache
def _library_folders() -> tuple[str, ...]:
    """Where installed packages (torch, onnxscript, sympy, ...), Python's standard library and edgekit live."""
    paths = sysconfig.get_paths()
    folders = {paths["stdlib"], paths["purelib"], paths["platlib"], site.getusersitepackages(), *site.getsitepackages()}
    folders.add(str(Path(__file__).parents[2]))  # edgekit, also where it is not installed (an editable checkout)
    return tuple(os.path.realpath(f) + os.sep for f in folders)


def first_line(exc: BaseException) -> str:
    lines = [ln for ln in plain(exc).strip().splitlines() if ln.strip()]
    return " ".join(lines[0].split())[:REASON_CHARS] if lines else ""


def plain(exc: BaseException | str) -> str:
    """An error or a text without terminal codes."""
    return ANSI.sub("", str(exc))


@contextlib.contextmanager
def quiet():
    """Around an exporter: what torch prints itself (torch.export's partial graph on stderr on a failure, the TorchScript
    exporter's "Torch IR graph at exception" on stdout) goes nowhere, unless --verbose."""

    if verbose():
        yield
        return
    with stderr_silenced(), contextlib.redirect_stdout(io.StringIO()):
        yield
