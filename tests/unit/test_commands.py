"""The one declaration of each command's options (edgekit.commands) stays in step with what derives from it: every
recipe key has one default and one type, which the recipe schema, ConvertOptions, CalibrationOptions, PruneOptions,
the CLI, the API and the settings of the lower layers all hold; every recipe key an option names exists in the schema,
every `convert:` key of a recipe is some option of `edgekit convert`, the CLI offers every declared flag, and the API
every declared keyword with its default."""

from __future__ import annotations

import inspect
import typing
from collections import defaultdict
from dataclasses import MISSING, asdict, fields

import pytest
import typer.main

import edgekit
from edgekit import commands
from edgekit.cli import _register, app
from edgekit.conversion import CalibrationOptions, ConvertOptions
from edgekit.metrics.gate import Thresholds
from edgekit.pruning import PruneOptions
from edgekit.recipe.schema import SECTIONS, CalibrationSection, CompressSection, ConvertSection, LatencySection, ReportSection

DECLARED = [value for value in vars(commands).values() if isinstance(value, commands.Command)]
RECIPE_ONLY = {o.recipe for o in commands.RECIPE_ONLY}
# Every recipe key the commands' options name, with the options naming it (one key may be several commands' option).
NAMED = defaultdict(list)
for _command in DECLARED:
    for _option in _command.options:
        if _option.recipe:
            NAMED[_option.recipe].append((_command.name, _option))


def _schema_keys(section: str) -> set[str]:
    return {f.name for f in fields(CompressSection if section == "compress" else SECTIONS[section])}


def _default(f):
    """A dataclass field's default (MISSING: required)."""
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _declared_default(option: commands.Option):
    return MISSING if option.default is commands.REQUIRED else option.frozen_default()


def _type_word(option: commands.Option) -> str:
    """The word a field's annotation holds for the option's type: a list is a tuple in a frozen dataclass."""
    return {list: "tuple"}.get(option.kind, option.kind.__name__)


def _values(command: commands.Command, **given) -> dict:
    """A command's values as the API binds them: every declared default, and `given`."""
    return {o.name: o.default for o in command.options} | given


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: c.name)
def test_every_recipe_key_an_option_names_is_in_the_schema(command):
    for option in command.options:
        if option.recipe:
            section, _, key = option.recipe.partition(".")
            assert key in _schema_keys(section), f"{command.name} --{option.name}: recipe key {option.recipe} is not in the schema"


def test_every_convert_key_of_a_recipe_is_an_option_of_convert():
    declared = {o.recipe.partition(".")[2] for o in commands.CONVERT.options if (o.recipe or "").startswith("convert.")}
    assert _schema_keys("convert") == declared


@pytest.mark.parametrize("key", sorted(set(NAMED) - RECIPE_ONLY))
def test_the_options_naming_one_recipe_key_declare_one_default_and_type(key):
    (first_command, first), *others = NAMED[key]
    for command, option in others:
        assert (option.frozen_default(), option.kind) == (first.frozen_default(), first.kind), (
            f"{key}: `edgekit {command}` declares {option.default!r} ({option.kind.__name__}), "
            f"`edgekit {first_command}` {first.default!r} ({first.kind.__name__}): declare one, or a RECIPE_ONLY default"
        )


@pytest.mark.parametrize("section", list(commands.RECIPE_SECTIONS))
def test_each_recipe_section_holds_its_keys_declared_defaults_and_types_in_order(section):
    schema = CompressSection if section == "compress" else SECTIONS[section]
    assert [f.name for f in fields(schema)] == list(commands.RECIPE_SECTIONS[section])
    for f in fields(schema):
        option = commands.recipe_option(f"{section}.{f.name}")
        assert _default(f) == _declared_default(option), f"{section}.{f.name}: the schema's default is not the declared one"
        assert f.type.startswith(_type_word(option)), f"{section}.{f.name}: the schema reads {f.type}, the declaration {option.kind}"


def test_recipe_only_keys_are_keys_of_the_schema():
    for key in RECIPE_ONLY - {"version"}:
        section, _, name = key.partition(".")
        assert name in commands.RECIPE_SECTIONS[section], key


def test_the_gate_options_declare_the_thresholds_defaults():
    defaults = {f.name: f.default for f in fields(Thresholds)}
    for key, named in NAMED.items():
        if key.startswith("gates."):
            for command, option in named:
                threshold = key.partition(".")[2]
                # size_metric: the command line shows "stored", which is what the gates read for the Thresholds' unset one
                expected = "stored" if threshold == "size_metric" else defaults[threshold]
                assert option.default == expected, (
                    f"edgekit {command} {option.flags.split()[0]}: {option.default!r}, Thresholds: {defaults[threshold]!r}"
                )


@pytest.mark.parametrize("cls", [CalibrationOptions, ConvertOptions, PruneOptions], ids=lambda c: c.__name__)
def test_the_library_options_take_the_declared_defaults_and_types(cls):
    section = {CalibrationOptions: "calibration", ConvertOptions: "convert", PruneOptions: "compress"}[cls]
    command = commands.PRUNE if cls is PruneOptions else commands.CONVERT
    expected = set(commands.RECIPE_SECTIONS[section]) - {"finetune"}  # the fine-tuning data is prune()'s, not an option of a stage
    assert set(cls.recipe_keys.values()) == expected, f"{cls.__name__} holds every key of a recipe's {section}: section"
    by_field = {f.name: f for f in fields(cls)}
    for name, key in cls.recipe_keys.items():
        option = next(o for o in command.options if o.recipe == f"{section}.{key}")
        assert by_field[name].type.startswith(_type_word(option)), f"{cls.__name__}.{name}: {by_field[name].type}, declared {option.kind}"
        if (cls, name) != (ConvertOptions, "io_dtype"):  # the resolved default: what its option's None means without a device
            assert _default(by_field[name]) == _declared_default(option), f"{cls.__name__}.{name}: not {command.name}'s default"
    assert ConvertOptions.from_section("fp32", (), CalibrationOptions(), {}).io_dtype == ConvertOptions().io_dtype


def test_a_recipe_of_defaults_and_a_command_of_defaults_give_the_library_defaults():
    """The mappings (recipe/run.py's and the API's, both through from_section) lose or change no default."""
    calibration = CalibrationOptions.from_section(asdict(CalibrationSection()))
    assert calibration == CalibrationOptions()
    for_target = commands.CONVERT.option("for_target").default  # a recipe's default is the cell's target
    convert = asdict(ConvertSection()) | {"for_target": for_target}
    assert ConvertOptions.from_section(commands.CONVERT.option("precision").default, (), calibration, convert) == ConvertOptions()
    assert PruneOptions.from_section(asdict(CompressSection(method="magnitude"))) == PruneOptions("magnitude")

    values = _values(commands.CONVERT)
    calibration = CalibrationOptions.from_section(commands.CONVERT.recipe_values("calibration", values))
    options = ConvertOptions.from_section(values["precision"], (), calibration, commands.CONVERT.recipe_values("convert", values))
    assert options == ConvertOptions()
    values = _values(commands.PRUNE, method="magnitude")
    assert PruneOptions.from_section(commands.PRUNE.recipe_values("compress", values)) == PruneOptions("magnitude")
    assert Thresholds(**commands.VALIDATE.recipe_values("gates", _values(commands.VALIDATE))) == Thresholds()


def test_the_lower_layers_settings_take_the_declared_defaults():
    """BenchSettings, TaskSettings and GenerationSettings repeat some options' defaults: they must agree."""
    from edgekit.metrics.task_metrics import TaskSettings
    from edgekit.validation.benchmark import BenchSettings
    from edgekit.validation.text_generation import GenerationSettings

    copies = {BenchSettings: ("target", "threads", "batch", "warmup", "runs"), TaskSettings: ("postprocess", "mask_threshold")}
    copies[GenerationSettings] = ("prompt_len", "new_tokens", "threads", "target")  # runs 5, warmup 1: a generation is long
    for cls, names in copies.items():
        defaults = {f.name: f.default for f in fields(cls)}
        for option in map(commands.VALIDATE.option, names):
            assert defaults[option.name] == option.default, f"{cls.__name__}.{option.name}: not {option.flags}'s default"


def test_the_starter_recipe_writes_the_declared_defaults():
    import yaml

    from edgekit.recipe.schema import parse
    from edgekit.recipe.write import starter

    recipe = parse(yaml.compose(starter("zoo:fashion-cnn", "r.yaml", None, [], "calib.npz", "val.npz")), "r.yaml", ".")
    assert (recipe.calibration.samples, recipe.calibration.method) == (CalibrationSection().samples, CalibrationSection().method)
    assert recipe.latency == LatencySection(threads=recipe.latency.threads)
    assert recipe.report == ReportSection()


@pytest.mark.parametrize("command", DECLARED, ids=lambda c: c.name)
def test_the_cli_offers_every_declared_flag_with_its_default_and_type(command):
    _register()
    click_command = typer.main.get_command(app).commands[command.name]
    offered = {flag for parameter in click_command.params for flag in (*parameter.opts, *parameter.secondary_opts)}
    for option in command.cli_options():
        for flag in option.flags.replace("/", " ").split():
            assert flag in offered, f"edgekit {command.name} lacks {flag}"
    parameters = {parameter.name: parameter for parameter in click_command.params}
    for option in command.cli_options():
        parameter = parameters[option.name]
        assert parameter.required == (option.default is commands.REQUIRED), f"edgekit {command.name} {option.name}"
        if not parameter.required:
            assert parameter.default == option.default, f"edgekit {command.name} {option.flags}: {parameter.default!r}"
        annotation = parameter.type_descriptor.annotation
        assert (typing.get_origin(annotation) or annotation) is option.kind, f"edgekit {command.name} {option.flags}: {annotation}"


@pytest.mark.parametrize("command", [c for c in DECLARED if hasattr(edgekit, c.name)], ids=lambda c: c.name)
def test_the_api_takes_every_declared_keyword_with_its_default(command):
    parameters = inspect.signature(getattr(edgekit, command.name)).parameters
    for option in command.api_options():
        expected = inspect.Parameter.empty if option.default is commands.REQUIRED else option.default
        assert parameters[option.name].default == expected, f"edgekit.{command.name}({option.name}=...)"
        assert parameters[option.name].annotation == option.api_annotation(), f"edgekit.{command.name}({option.name}=...)"
    required = {o.name: "x" for o in command.api_options() if o.default is commands.REQUIRED}
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
        getattr(edgekit, command.name)(**required, no_such_option=1)


def test_docs_options_md_is_generated_from_the_declaration():
    from pathlib import Path

    from edgekit.cli.options import options_markdown

    page = Path(__file__).parents[2] / "docs" / "options.md"
    assert page.read_text() == options_markdown(), "regenerate docs/options.md (its first lines say how)"
