"""Load PyTorch models: .pt2 exported programs, TorchScript, module:factory + state dict, pickles, transformers'
save_pretrained folders and GGUF files."""

from __future__ import annotations

import inspect
import logging
import pickle
import zipfile
from collections import Counter
from pathlib import Path

from edgekit.artifact import TensorSpec
from edgekit.backends.torch.lm_files import load_pretrained
from edgekit.errors import EdgekitError, InputMismatchError, ModelLoadError, first_line
from edgekit.imports import import_attr
from edgekit.source import ModelSource

log = logging.getLogger("edgekit")
FIXED_BATCH = "edgekit_fixed_batch"  # set on a module whose .pt2 was exported at a fixed batch: that batch


def load_torch(source: ModelSource):
    """The source as an eval-mode torch.nn.Module plus the input specs it declares (or None)."""
    import torch

    loaders = {
        "torch-export": _load_exported,
        "torchscript": _load_torchscript,
        "torch-factory": _load_factory,
        "torch-pickle": _load_pickle,
        "transformers": _load_pretrained,
        "gguf": _load_pretrained,
    }
    try:
        module, specs = loaders[source.format](source)
    except ModelLoadError:
        raise
    except (RuntimeError, ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise ModelLoadError(
            f"cannot load {source.spec}: {first_line(exc)}",
            hint="check the file was saved by torch.export.save, torch.jit.save or torch.save",
            cause=str(exc),
        ) from None
    if isinstance(module, torch.nn.Module) and not isinstance(module, torch.fx.GraphModule):
        module.eval()
    return module, specs


def _check_archive(path: Path) -> None:
    """A .pt2 is a zip archive: check before torch.export.load (which logs a traceback on a bad one)."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError) as exc:
        raise ModelLoadError(
            f"{path.name} is not a .pt2 archive ({exc}): damaged, truncated or another kind of file",
            hint="re-export it with torch.export.save(torch.export.export(model.eval(), example_inputs), 'model.pt2')",
        ) from None
    if bad is not None:
        raise ModelLoadError(f"{path.name} is damaged: {bad} fails its checksum", hint="copy or export the .pt2 again")


def _load_exported(source: ModelSource):
    import torch

    _check_archive(Path(source.spec))
    program = torch.export.load(str(source.spec))
    training = training_ops(program)
    if training:
        raise ModelLoadError(
            f"{Path(source.spec).name} was exported from a module in training mode ({training[0]}: statistics updated "
            "or activations dropped at run time)",
            hint="export it in eval mode: torch.export.save(torch.export.export(model.eval(), example_inputs), 'model.pt2')",
        )
    module, specs = program.module(), exported_input_specs(program)
    if specs and all(s.shape and isinstance(s.shape[0], int) for s in specs):
        setattr(module, FIXED_BATCH, specs[0].shape[0])
        log.warning(
            "%s was exported with a fixed batch of %s: its artifacts take that batch only "
            "(export with dynamic_shapes={'x': {0: torch.export.Dim('batch')}} for others)",
            Path(source.spec).name,
            specs[0].shape[0],
        )
    return module, specs


def training_ops(program) -> list[str]:
    """Ops of an exported program that behave as in training (batch norm updating its statistics, active dropout)."""
    found = []
    for node in program.graph.nodes:
        name = str(node.target)
        if node.op != "call_function":
            continue
        if name == "aten.batch_norm.default" and len(node.args) > 5 and node.args[5] is True:
            found.append("batch_norm(training=True)")
        elif name.startswith(("aten._native_batch_norm_legit_functional", "aten._native_batch_norm_legit.default")):
            found.append(name)
        elif name in ("aten.dropout.default", "aten.feature_dropout.default") and len(node.args) > 2 and node.args[2] is True:
            found.append("dropout(train=True)")
    return found


def in_eval_mode(module):
    """eval() where allowed: a .pt2's GraphModule is already in inference form and refuses eval()."""
    try:
        return module.eval()
    except (NotImplementedError, RuntimeError):
        return module


def exported_batch(module) -> int | None:
    """The batch a .pt2 was exported at when it was fixed (its guards allow no other), else None: any batch."""
    return getattr(module, FIXED_BATCH, None)


def export_batch(module, wanted: int) -> int:
    """The example batch to export `module` with: the batch of a .pt2 exported at a fixed batch, else `wanted`."""
    return exported_batch(module) or wanted


def exported_input_specs(program) -> list[TensorSpec]:
    """Input specs of a torch.export ExportedProgram, from its placeholder metadata."""
    user_inputs = set(program.graph_signature.user_inputs)
    specs = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs:
            val = node.meta.get("val")
            shape = tuple(int(d) if str(d).isdigit() else str(d) for d in val.shape)
            specs.append(TensorSpec(node.name, shape, str(val.dtype).removeprefix("torch.")))
    return specs


def _load_torchscript(source: ModelSource):
    import torch

    return torch.jit.load(str(source.spec), map_location="cpu"), None


def _load_pretrained(source: ModelSource):
    """A save_pretrained folder or a GGUF file (backends.torch.lm_files): the model declares no input shapes."""
    return load_pretrained(source), None


def _load_pickle(source: ModelSource):
    import torch

    module = torch.load(str(source.spec), map_location="cpu", weights_only=False)
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(
            f"{source.spec} holds a {type(module).__name__}, not a torch.nn.Module",
            hint="for a state dict name the factory that builds the model and pass --weights",
        )
    return module, None


def _load_factory(source: ModelSource):
    import torch

    try:
        factory = import_attr(source.spec, "function returning a torch.nn.Module")
    except EdgekitError as exc:
        raise ModelLoadError(exc.message, exc.hint) from None
    model = factory()
    if not isinstance(model, torch.nn.Module):
        raise ModelLoadError(
            f"{source.spec} returned a {type(model).__name__}, not a torch.nn.Module", hint="the factory must return the model"
        )
    if source.weights is not None:
        _load_state_dict(model, source.weights)
    elif _builds_random_weights(factory, model):
        log.warning(
            "%s was built without --weights and its weights are random (two builds differ): results say nothing about a trained model "
            "(pass --weights STATE_DICT%s)",
            source.spec,
            ", or use zoo:fashion-cnn, which comes trained" if source.spec == "edgekit.zoo.models:fashion_cnn" else "",
        )
    return model, _declared_inputs(model)


def _builds_random_weights(factory, model) -> bool:
    """Whether a factory's weights change from one build to the next (random init, nothing loaded)."""
    import torch

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(torch.initial_seed() + 1)
        again = factory()
    finally:
        torch.random.set_rng_state(state)
    first, second = model.state_dict(), again.state_dict() if isinstance(again, torch.nn.Module) else {}
    return any(
        k in second and v.dtype.is_floating_point and v.shape == second[k].shape and not torch.equal(v, second[k]) for k, v in first.items()
    )


def _declared_inputs(model) -> list | None:
    """Input specs a module declares as `edgekit_inputs` ("name:dims[:dtype]" strings), so --input is not needed."""
    from edgekit.artifact import parse_input_spec

    declared = getattr(model, "edgekit_inputs", None)
    return [parse_input_spec(spec) for spec in declared] if declared else None


def _load_state_dict(model, weights: Path) -> None:
    import torch

    try:
        state = torch.load(str(weights), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ModelLoadError(
            f"{weights} is not a plain state dict: loading it would run code from the file, which edgekit refused ({first_line(exc)})",
            hint="save the weights with torch.save(model.state_dict(), path); only tensors and plain containers load",
        ) from None
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ModelLoadError(
            f"{weights.name} does not fit the model: missing {result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]}",
            hint="check that the factory builds the architecture the weights were trained with",
        )


def resolve_input_specs(module, declared: list[TensorSpec] | None, given: list[TensorSpec]) -> list[TensorSpec]:
    """Input specs for a torch model: --input wins, then what the model declares; constants (--input state=0) join
    the declared inputs rather than replace them."""
    if declared and any(g.value is not None for g in given):
        from edgekit.targets.base import apply_given_inputs

        return apply_given_inputs(declared, given)
    if given:
        return given
    if declared:
        return declared
    names = forward_input_names(module)
    raise InputMismatchError(
        "this PyTorch model does not record its input shapes",
        hint=f"give them with --input, e.g. --input {names[0] if names else 'x'}:1x3x224x224:float32",
    )


def forward_input_names(module) -> list[str]:
    """The names of a module's forward() parameters (best effort)."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError, AttributeError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def example_tensors(specs: list[TensorSpec], batch: int, seed: int = 0, module=None) -> tuple:
    """Example inputs for `specs`: random tensors with a dynamic batch dim set to `batch`; a constant input
    (--input k=3) as its value, a plain Python number where `module`'s forward() takes an int/float/bool."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    scalars = scalar_parameters(module) if module is not None else set()
    tensors = []
    for s in specs:
        dtype = getattr(torch, s.dtype)
        if s.value is not None:
            tensors.append(s.value if s.name in scalars else torch.from_numpy(s.constant(batch)))
            continue
        axis = s.batch_axis()  # the batch axis is exported dynamic, whatever --input said
        shape = tuple(batch if i == axis else d for i, d in enumerate(s.concrete_shape(batch)))
        if dtype.is_floating_point:
            tensors.append(torch.rand(shape, generator=gen, dtype=torch.float32).to(dtype))
        else:
            tensors.append(torch.zeros(shape, dtype=dtype))
    return tuple(tensors)


def scalar_parameters(module) -> set[str]:
    """forward()'s parameters typed int, float or bool (TorchScript's schema, or a Python module's annotations):
    they take a Python number, never a tensor."""
    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is not None:  # TorchScript
        return {a.name for a in schema.arguments if str(a.type) in ("int", "float", "bool")}
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError, AttributeError):
        return set()
    return {p.name for p in params if p.annotation in (int, float, bool, "int", "float", "bool")}


def check_forward(module, specs: list[TensorSpec], batch: int = 1) -> int:
    """Run one forward pass on example inputs; a shape mismatch becomes a clear error. Returns the output count."""
    import torch

    try:
        with torch.no_grad():
            out = module(*example_tensors(specs, export_batch(module, batch), module=module))
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        shapes = ", ".join(f"{s.name}:{s.shape_text()}:{s.dtype}" for s in specs)
        raise InputMismatchError(
            f"the model does not accept inputs {shapes}: {first_line(exc)}", hint="fix the shapes given with --input"
        ) from None
    return len(out) if isinstance(out, (tuple, list)) else 1


def batch_dynamic_shapes(module, specs: list[TensorSpec]) -> dict | tuple | None:
    """torch.export dynamic_shapes with the batch axis of every input dynamic (dim 0, or where the spec puts it:
    a recurrent state [layers, batch, hidden]), keyed by forward()'s argument names (None for a .pt2 exported at a
    fixed batch)."""
    import torch

    if exported_batch(module):
        return None
    batch = torch.export.Dim("batch", min=1)
    axes = [{s.batch_axis(): batch} if s.batch_axis() is not None else None for s in specs]
    params = forward_input_names(module)
    if len(params) >= len(specs):
        return dict(zip(params, axes, strict=False))
    return tuple(axes)


def for_conversion(source: ModelSource, given: list[TensorSpec]):
    """The module converters take, and its input specs (declared, or given with --input)."""
    module, declared = load_torch(source)
    return module, resolve_input_specs(module, declared, given)


def torch_summary(source: ModelSource) -> dict:
    """What `edgekit info` shows of a PyTorch model: inputs (declared or forward's names), parameters, op histogram."""
    module, declared = load_torch(source)
    info = {
        "parameters": sum(p.numel() for p in module.parameters()),
        "inputs": [s.to_dict() for s in declared]
        if declared
        else [{"name": n, "shape": "unknown (give --input when converting)"} for n in forward_input_names(module)],
    }
    ops = _op_histogram(module)
    if ops:
        info["ops"] = ops
    return info


def _op_histogram(module) -> dict | None:
    """Ops of a graph-carrying module: TorchScript (inlined graph) or an exported program's GraphModule."""
    if hasattr(module, "inlined_graph"):
        kinds = [n.kind() for n in module.inlined_graph.nodes() if not n.kind().startswith("prim::")]
    elif hasattr(module, "graph") and hasattr(module.graph, "nodes"):
        kinds = [str(n.target) for n in module.graph.nodes if n.op == "call_function"]
    else:
        return None
    return dict(Counter(kinds).most_common())
