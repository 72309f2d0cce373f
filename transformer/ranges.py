"""Declared ranges: how a setting says which numbers it takes, beside its type.

A setting is typed once, with its range next to it:

- a task's or a data module's constructor parameter (and a positional encoding's own argument):
  ``warmup_steps: Annotated[int, Range(0, 2**40)] = 4000``;
- a model config field (``models.transformer.hp``): ``d_model: int = hp(512, Range(1, 2**16))``;
- a decoding setting (``decoding.settings.setting``): ``beam_size: int = setting(5, "...", Range(1, 1024))``.

The one checker reads them back: :func:`check_value` (a value against its type and range),
:func:`check_arguments` (a callee's keyword arguments against its signature) and
:func:`check_fields` (a config dataclass's fields), each raising :class:`HyperparameterError`
that names the key on one line. Types are validated by pydantic, strictly, as the data a YAML
file, a checkpoint or a hub ``config.json`` holds. Upper bounds keep a typo
(``max_tokens=10**12``, ``num_hidden_layers: 1000000``) from allocating the machine's memory
before anything is said. This module imports nothing of the project, so every layer (the hub
reader, the tasks, the commands) checks with it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import pydantic


@dataclass(frozen=True)
class Range:
    """``lo <= value <= hi`` (a list of values: each of them)."""

    lo: float
    hi: float


@dataclass(frozen=True)
class Probability:
    """``0 <= value < 1``: a rate that leaves something behind (a dropout of 1 zeroes every activation)."""


Declared = Range | Probability


# ----------------------------------------------------------------------------- the one checker
# A config or checkpoint holds data, as YAML and JSON write it: a value is validated as that data
# against its declared type, strictly (a bool is not an int, a string not a number, a float must
# be finite; an int is a float) and with lists where a tuple or a sequence is declared.
_STRICT = pydantic.ConfigDict(strict=True, allow_inf_nan=False)


class HyperparameterError(ValueError):
    """A hyperparameter of the wrong type, out of range, unknown, or naming code to run."""


def show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def range_of(hint: Any) -> Declared | None:
    """The range an ``Annotated[type, Range(...)]`` hint declares, or None."""
    return next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, (Range, Probability))), None)


def unannotated(hint: Any) -> Any:
    """``hint`` without its ``Annotated`` wrapper (the type alone)."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint


def within(declared: Declared, value: float) -> bool:
    """Whether ``value`` lies inside the ``declared`` range."""
    if isinstance(declared, Probability):
        return 0 <= value < 1
    return declared.lo <= value <= declared.hi


def expected(declared: Declared, key: str) -> str:
    """What a message says a value of ``key`` should be."""
    if isinstance(declared, Probability):
        return f"0 <= {key} < 1"
    return f"a value from {declared.lo} to {declared.hi}"


@functools.lru_cache(maxsize=None)
def _adapter(hint: Any) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(hint, config=_STRICT)


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` (plain data: numbers, strings, lists, dicts, None) is of the declared
    type ``hint`` (its ``Annotated`` range aside). Objects other than plain data (a module, a
    tensor, a path) never fit a declared type: a config or checkpoint holds data, not objects."""
    hint = unannotated(hint)
    if hint is inspect.Parameter.empty or hint is Any:
        return True
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        return False
    try:
        _adapter(hint).validate_json(text)
    except (pydantic.ValidationError, pydantic.PydanticUserError):  # a class pydantic cannot take: not data
        return False
    return True


def type_name(hint: Any) -> str:
    """A short name for a declared type in messages: ``int``, ``float or null`` ..."""
    hint = unannotated(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(hint))
    if hint is None or hint is type(None):
        return "null"
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def check_bounds(where: str, key: str, value: Any, declared: Declared | None) -> None:
    """``value`` (a number, or a list of them) inside its ``declared`` range (``transformer.ranges``);
    None: any value."""
    if declared is None:
        return
    values = value if isinstance(value, (list, tuple)) else [value]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if any(not within(declared, v) for v in numbers):
        raise HyperparameterError(f"{where}.{key}={show(value)}: expected {expected(declared, key)}")


def check_value(where: str, key: str, value: Any, hint: Any) -> None:
    """One value against its declaration: the type ``hint`` names, and the range it carries
    (``Annotated[int, Range(0, 2**40)]``)."""
    if not fits(value, hint):
        raise HyperparameterError(f"{where}.{key}={show(value)}: expected {type_name(hint)}")
    check_bounds(where, key, value, range_of(hint))


def check_count(key: str, value: Any) -> int:
    """``value`` when it is a count (an integer from 1; a bool is not one), else a
    :class:`HyperparameterError` ``key=value: expected a positive integer``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HyperparameterError(f"{key}={show(value)}: expected a positive integer")
    return value


def check_arguments(where: str, values: Mapping[str, Any], fn: Callable, skip: set[str] = frozenset(),
                    complete: bool = True) -> None:
    """Check ``values`` against ``fn``'s signature: every key is a parameter, every value
    fits its annotation and range; with ``complete``, every required parameter is given
    (``skip`` names those supplied by the caller, which are not checked)."""
    params = inspect.signature(fn).parameters
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an annotation that cannot be evaluated: check names only
        hints = {}
    for key, value in values.items():
        if key in skip:
            continue
        if key not in params or params[key].kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise HyperparameterError(f"{where}.{key}: unknown key (known: {', '.join(sorted(params))})")
        check_value(where, key, value, hints.get(key, inspect.Parameter.empty))
    if complete:
        missing = [k for k, p in params.items() if p.default is inspect.Parameter.empty and k not in values
                   and k not in skip and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if missing:
            raise HyperparameterError(f"{where}.{missing[0]}: required, but not given")


def declared(config_class: type, name: str) -> Mapping[str, Any]:
    """What field ``name`` declares (``range``, ``factory``): its own
    metadata, or that of the nearest base class's field when a subclass only changed its default."""
    for klass in config_class.__mro__:
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        if f is not None and f.metadata:
            return f.metadata
    return {}


def check_fields(where: str, values: Mapping[str, Any], config_class: type, skip: set[str] = frozenset(),
                 complete: bool = True, spelled: Mapping[str, str] | None = None) -> None:
    """Check ``values`` against the fields of ``config_class`` (a dataclass): every key is a
    field, every value fits its annotation and declared range; with ``complete``, every field
    without a default is given (``skip`` names keys checked elsewhere). ``spelled`` names a
    field as the data's source spells it (a hub ``config.json``'s ``num_hidden_layers`` for our
    ``n_layers``)."""
    spelled = spelled or {}
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    hints = typing.get_type_hints(config_class)
    for key, value in values.items():
        if key in skip:
            continue
        if key not in fields:
            raise HyperparameterError(f"{where}.{key}: unknown key (known: {', '.join(sorted(fields))})")
        check_value(where, spelled.get(key, key), value, hints[key])
        check_bounds(where, spelled.get(key, key), value, declared(config_class, key).get("range"))
    if complete:
        missing = [k for k, f in fields.items() if f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING and k not in values and k not in skip]
        if missing:
            raise HyperparameterError(f"{where}.{missing[0]}: required, but not given")


__all__ = ["Declared", "HyperparameterError", "Probability", "Range", "check_arguments", "check_bounds", "check_count",
           "check_fields",
           "check_value", "declared", "expected", "fits", "range_of", "show", "type_name", "unannotated", "within"]
