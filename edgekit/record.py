"""A report section as a dataclass: its schema's named fields, and every other key of the section kept in `extra`, so
`to_dict()` gives back exactly the section it was read from (same keys, same order) and a section built by edgekit
the report it writes (the fields in their declared order)."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field


@dataclass
class Record:
    """A report section: its schema fields plus `extra` (the keys the schema leaves open), in the report's order."""

    extra: dict = field(default_factory=dict, repr=False, kw_only=True)
    _order: tuple = field(default=(), repr=False, compare=False, kw_only=True)

    @classmethod
    def from_dict(cls, data: dict):
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("extra", "_order")]
        values = {name: _typed(hints[name], data[name]) for name in names if name in data}
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**values, extra=extra, _order=tuple(data))

    def to_dict(self) -> dict:
        names = [f.name for f in dataclasses.fields(self) if f.name not in ("extra", "_order")]
        values = {name: _plain(getattr(self, name)) for name in names}
        values.update(self.extra)
        order = [k for k in self._order if k in values] + [k for k in values if k not in self._order]
        return {k: values[k] for k in order}


def _typed(hint, value):
    """`value` as the annotated type: a Record from a dict, a list of Records from a list of dicts."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    target = args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1 else hint
    if isinstance(target, type) and issubclass(target, Record) and isinstance(value, dict):
        return target.from_dict(value)
    if typing.get_origin(target) is list and isinstance(value, list):
        (item,) = typing.get_args(target)
        if isinstance(item, type) and issubclass(item, Record):
            return [item.from_dict(v) if isinstance(v, dict) else v for v in value]
    return value


def _plain(value):
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
