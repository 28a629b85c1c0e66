"""Typer commands built from the options edgekit.commands declares (typer reads a function's `__signature__`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import typer

from edgekit import commands
from edgekit.commands import Command, Option
from edgekit.conversion import CALIB_METHODS, FORMATS, PRECISIONS

# What a help text's {formats}, {precisions} and {calib_methods} name: the library's own lists.
CHOICES = {"formats": ", ".join(FORMATS), "precisions": ", ".join(PRECISIONS), "calib_methods": ", ".join(CALIB_METHODS)}


def parameter(option: Option) -> typer.models.ParameterInfo:
    """The typer Argument (an option without flags) or Option for a declared option."""
    text = option.help.format_map(CHOICES)
    if not option.flags:
        return typer.Argument(option.default, help=text, metavar=option.metavar)
    return typer.Option(option.default, *option.flags.split(), help=text, metavar=option.metavar, min=option.minimum)


def command(declared: Command) -> Callable:
    """Decorator: the function (taking `**values`) gets `declared`'s CLI options as its signature, in their order."""

    def with_options(function: Callable) -> Callable:
        function.__signature__ = inspect.Signature([_typer_parameter(o) for o in declared.cli_options()])
        return function

    return with_options


def _typer_parameter(option: Option) -> inspect.Parameter:
    kind = list[str] if option.kind is list else option.kind
    return inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=parameter(option), annotation=kind)


# For the commands that have no API function (info, debug, init): the same options as the others.
INPUT = parameter(commands.INPUTS)
WEIGHTS = parameter(commands.WEIGHTS)
ALLOW_PICKLE = parameter(commands.ALLOW_PICKLE)
PREPROCESS = parameter(commands.PREPROCESS)


def options_markdown() -> str:
    """docs/options.md, with the library's choices filled in."""
    return commands.options_markdown(CHOICES)
