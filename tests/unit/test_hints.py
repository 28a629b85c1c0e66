"""Every `--option` a hint names exists: statically, each hint in the code names options some command has; the
bad-input corpus (tests/corpus) checks each hint it shows against the command that printed it (cli_flags)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "edgekit"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")


@cache
def cli_flags(command: str | None = None) -> frozenset[str]:
    """The flags the real CLI takes: the global ones, plus those of `command` (a group: all of its subcommands'); None:
    every command's."""
    import click
    import typer

    from edgekit.cli import _register, app

    _register()
    group = typer.main.get_command(app)
    flags = {o for p in group.params for o in p.opts + p.secondary_opts}

    def of(cmd: click.Command) -> set[str]:
        found = {o for p in cmd.params for o in p.opts + p.secondary_opts}
        for sub in getattr(cmd, "commands", {}).values():
            found |= of(sub)
        return found

    ctx = click.Context(group)
    names = [command] if command else group.list_commands(ctx)
    for name in names:
        flags |= of(group.get_command(ctx, name))
    return frozenset({"--help"} | {f for f in flags if f.startswith("--")})


def hint_flags(text: str) -> set[str]:
    return set(FLAG.findall(text))


def misnamed_flags(hint: str, command: str) -> list[str]:
    """The flags a hint printed by `command` names that the command it names them for lacks: a `edgekit OTHER ...`
    quoted in the hint is checked against OTHER, the rest against `command`."""
    wrong = []
    for quoted in re.findall(r"`edgekit ([a-z-]+)([^`]*)`", hint):
        wrong += [f for f in hint_flags(quoted[1]) if f not in cli_flags(quoted[0])]
    rest = re.sub(r"`edgekit [^`]*`", "", hint)
    return sorted(set(wrong) | {f for f in hint_flags(rest) if f not in cli_flags(command)})


def _hint_texts() -> list[tuple[str, str]]:
    """(where, the literal text) of every `hint=` argument in edgekit, f-strings' literal parts included."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "hint":
                    parts = [n.value for n in ast.walk(kw.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                    found.append((f"{path.relative_to(ROOT.parent)}:{kw.value.lineno}", " ".join(parts)))
    return found


def test_every_hint_names_only_options_that_exist():
    hints = _hint_texts()
    assert len(hints) > 100  # the collection sees the code's hints
    known = cli_flags()
    unknown = [f"{where}: {flag}" for where, text in hints for flag in sorted(hint_flags(text) - known)]
    assert not unknown, "hints name options no command has:\n" + "\n".join(unknown)
