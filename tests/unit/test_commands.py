"""The one declaration of each command's options (edgekit.commands) stays in step with what derives from it: every
recipe key an option names exists in the recipe schema, every `convert:` key of a recipe is some option of
`edgekit convert`, the CLI offers every declared flag, and the API every declared keyword with its default."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest
import typer.main

import edgekit
from edgekit import commands
from edgekit.cli import _register, app
from edgekit.recipe.schema import SECTIONS, CompressSection

DECLARED = [value for value in vars(commands).values() if isinstance(value, commands.Command)]


def _schema_keys(section: str) -> set[str]:
    return {f.name for f in fields(CompressSection if section == "compress" else SECTIONS[section])}


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: c.name)
def test_every_recipe_key_an_option_names_is_in_the_schema(command):
    for option in command.options:
        if option.recipe:
            section, _, key = option.recipe.partition(".")
            assert key in _schema_keys(section), f"{command.name} --{option.name}: recipe key {option.recipe} is not in the schema"


def test_every_convert_key_of_a_recipe_is_an_option_of_convert():
    declared = {o.recipe.partition(".")[2] for o in commands.CONVERT.options if (o.recipe or "").startswith("convert.")}
    assert _schema_keys("convert") == declared


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: c.name)
def test_the_cli_offers_every_declared_flag(command):
    _register()
    click_command = typer.main.get_command(app).commands[command.name]
    offered = {flag for parameter in click_command.params for flag in (*parameter.opts, *parameter.secondary_opts)}
    for option in command.cli_options():
        for flag in option.flags.replace("/", " ").split():
            assert flag in offered, f"edgekit {command.name} lacks {flag}"


@pytest.mark.parametrize("command", [c for c in DECLARED if hasattr(edgekit, c.name)], ids=lambda c: c.name)
def test_the_api_takes_every_declared_keyword_with_its_default(command):
    parameters = inspect.signature(getattr(edgekit, command.name)).parameters
    for option in command.api_options():
        expected = inspect.Parameter.empty if option.default is commands.REQUIRED else option.default
        assert parameters[option.name].default == expected, f"edgekit.{command.name}({option.name}=...)"
    required = {o.name: "x" for o in command.api_options() if o.default is commands.REQUIRED}
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        getattr(edgekit, command.name)(**required, no_such_option=1)


def test_docs_options_md_is_generated_from_the_declaration():
    from pathlib import Path

    from edgekit.cli.options import options_markdown

    page = Path(__file__).parents[2] / "docs" / "options.md"
    assert page.read_text() == options_markdown(), "regenerate docs/options.md (its first lines say how)"
