"""Errors a user can act on: each names the field, what was wrong and how to fix it.

The CLI turns these (and pydantic's ValidationError) into a message and exit code 2; the service
turns them into an RFC 9457 problem response with status 422.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any

_UNIONS = (typing.Union, types.UnionType)


class MeshplanError(ValueError):
    """A bad input: ``field`` is the dotted path of the offending field (e.g. ``parallel.tp``)."""

    def __init__(self, field: str, message: str, fix: str = "") -> None:
        self.field = field
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = f"{self.field}: {self.message}"
        return f"{text}. Fix: {self.fix}" if self.fix else text


class FieldValueError(ValueError):
    """A validator's "what; fix" about a field below the one it validates: ``sub`` is the dotted path from there
    (``top_k`` under ``model.moe``, ``hf_config.num_experts`` under ``model``), so the error names that field."""

    def __init__(self, sub: str, message: str) -> None:
        self.sub = sub
        super().__init__(message)


class UnknownCatalogIdError(MeshplanError):
    """A catalog id (model or GPU) that is not in the catalog."""


class InvalidInput(MeshplanError):
    """Several bad fields at once (one pydantic ``ValidationError``, each entry with its fix)."""

    def __init__(self, errors: list[MeshplanError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.field, first.message, first.fix)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


def validation_errors(
    exc: Exception, prefix: str = "", *, model: type | None = None, flags: Mapping[str, str] | None = None
) -> list[dict[str, str]]:
    """A pydantic ValidationError as ``[{"field", "message", "fix"}]``, one entry per failure.

    ``field`` is the dotted path (``training.global_batch_size``, after ``prefix``), or the command-line
    flag the path was given by when ``flags`` maps it (``--global-batch-size``). The message says what
    the constraint is and what was given ("must be ≥ 1 (got 0)"); the fix says what to pass, using the
    bounds and description of the field when ``model`` (the validated class) is known."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return [{"field": prefix or "body", "message": str(exc), "fix": "correct the input"}]
    out = []
    for err in merge_union_errors(exc.errors(include_url=False)):
        loc = [p for p in located(err) if not is_union_tag(p)]
        path = ".".join(str(p) for p in loc)
        flag = _flag_for(loc, flags) if flags else None
        name = flag or ".".join(x for x in (prefix, path) if x) or "body"
        info = field_info(model, loc) if model is not None else None
        if err.get("type") == "extra_forbidden" and model is not None:
            err = with_known_fields(err, model, loc)
        entry = bool(loc) and isinstance(loc[-1], int)
        if entry and info is not None and _base_type(info.annotation) is None:
            info = None  # an entry of a list: the list's own bounds and description are not the entry's
        message, fix = explain_error(err, name, info, flag is not None, entry=entry)
        if flag is not None and entry:
            message = f"entry {loc[-1] + 1} {message}"
        out.append({"field": name, "message": message, "fix": fix})
    return out


def located(err: Mapping[str, Any]) -> tuple:
    """A pydantic error entry's location, down to the field a ``FieldValueError`` names below the validated one."""
    sub = getattr((err.get("ctx") or {}).get("error"), "sub", None)
    return tuple(err.get("loc", ())) + (tuple(sub.split(".")) if isinstance(sub, str) else ())


def explain(
    exc: Exception, prefix: str = "", *, model: type | None = None, flags: Mapping[str, str] | None = None
) -> InvalidInput:
    """``validation_errors`` as one raisable ``InvalidInput``."""
    return InvalidInput([MeshplanError(**e) for e in validation_errors(exc, prefix, model=model, flags=flags)])


def explain_error(
    err: Mapping[str, Any], name: str, info: Any = None, flag: bool = False, *, entry: bool = False
) -> tuple[str, str]:
    """(message, fix) for one pydantic error entry; ``name`` is what the user wrote (a flag when
    ``flag``, else a field path); ``info`` the field's pydantic ``FieldInfo`` when known; ``entry``:
    the value is an entry of a list (a flag's comma-separated value)."""
    try:
        return _explain(err, name, info, flag, entry)
    except Exception:  # an error being reported must never become another error: pydantic's words then
        return str(err.get("msg", "invalid value")), f"correct {name}"


def _explain(err: Mapping[str, Any], name: str, info: Any, flag: bool, entry: bool) -> tuple[str, str]:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    value = err.get("input")
    got = value if flag and isinstance(value, str) and value else _shown(value)  # as typed on the command line

    def to(what: str) -> str:  # the imperative of the fix
        if flag:
            return f"pass {name} {what} for every comma-separated entry" if entry else f"pass {name} {what}"
        return f"set {name} to {what}"

    what = _requirement(info)
    note = _described(info)
    if kind == "union_type":
        kinds = " or ".join(ctx["expected"])
        return f"must be {kinds} (got {got})", to(kinds + note)
    if kind == "missing":
        return "is required", (f"pass {name}" if flag else f"add {name}") + (f": {what}" if what else "") + note
    if kind == "extra_forbidden":
        import difflib

        known = ctx.get("known") or []
        close = difflib.get_close_matches(name.rsplit(".", 1)[-1], known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known fields here: {', '.join(known)}" if known else ""
        return "is not a known field", f"remove {name} or correct its spelling" + (f" ({hint})" if hint else "")
    if kind in _BOUNDS:
        symbol, key = _BOUNDS[kind]
        bound = f"{symbol} {_num(ctx.get(key))}"
        return f"must be {bound} (got {got})", to((what or f"a value {bound}") + note)
    if kind in {"int_parsing", "int_type", "int_from_float"}:
        return f"must be a whole number (got {got})", to((what or "a whole number") + note)
    if kind in {"float_parsing", "float_type", "finite_number"}:
        finite = "finite " if kind == "finite_number" else ""
        return f"must be a {finite}number (got {got})", to((what or "a number") + note)
    if kind in {"bool_parsing", "bool_type"}:
        return f"must be true or false (got {got})", to("true or false")
    if kind == "literal_error":
        choices = ", ".join(_choices(info)) or str(ctx.get("expected"))
        return f"must be one of {ctx.get('expected')} (got {got})", to(f"one of: {choices}")
    if kind in {"string_too_short", "too_short", "string_too_long", "too_long"}:
        text = kind.startswith("string")
        noun, unit = ("a string", "character") if text else ("a list", "entry")
        if kind.endswith("short"):
            n = ctx.get("min_length")
            return f"must have at least {n} {_plural(unit, n)}", to(f"{noun} of {n} or more {_plural(unit, 2)}" + note)
        n = ctx.get("max_length")
        return f"must have at most {n} {_plural(unit, n)}", to(f"{noun} of at most {n} {_plural(unit, n)}" + note)
    if kind in {"string_type", "string_unicode"}:
        return f"must be a string (got {got})", to("a string" + note)
    if kind in {"list_type", "tuple_type", "iterable_type"}:
        return f"must be a list (got {got})", to("a list" + note)
    if kind in {"model_type", "model_attributes_type", "dict_type", "model_class_type"}:
        return f"must be an object (got {got})", to("a JSON object" + note)
    if kind == "json_invalid":
        return f"is not valid JSON ({ctx.get('error', 'syntax error')})", "send a valid JSON document"
    if kind in {"value_error", "assertion_error"}:
        text = str(ctx.get("error") or err.get("msg", "invalid value"))
        text = text.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        message, _, fix = text.partition("; ")  # meshplan's validators write "what is wrong; how to fix it"
        return message, fix or f"change {name} as the message says" + (f" ({what})" if what else "")
    msg = str(err.get("msg", "invalid value"))
    return f"{msg[:1].lower()}{msg[1:]} (got {got})", to((what or "a valid value") + note)


#: What each union member's type mismatch reads as, when a value is none of the members.
_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
    "model_type": "a JSON object",
    "model_attributes_type": "a JSON object",
    "dict_type": "a JSON object",
    "list_type": "a list",
}


def merge_union_errors(errors: list[Any]) -> list[dict]:
    """Errors of a union field (``model: str | ModelSpec``) as the user means them: a value that was an
    object failing inside the object keeps only those errors (not "must be a string"); a value that is
    none of the members becomes one error "must be a string or a JSON object"."""
    groups: dict[tuple, list[tuple[int, dict]]] = {}
    out: list[dict | tuple] = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        i = next((k for k, p in enumerate(loc) if is_union_tag(p)), None)
        if i is None:
            out.append(err)
            continue
        if loc[:i] not in groups:
            groups[loc[:i]] = []
            out.append(loc[:i])
        groups[loc[:i]].append((i, err))
    merged: list[dict] = []
    for item in out:
        if isinstance(item, dict):
            merged.append(item)
            continue
        members = groups[item]
        # errors inside the object, and those of the object's own validators (a ModelSpec's shape checks)
        nested = [e for i, e in members if len(e["loc"]) > i + 1 or e["type"] == "value_error"]
        literal = [e for _, e in members if e["type"] == "literal_error" and isinstance(e.get("input"), str)]
        if nested:
            merged += nested
        elif literal:  # a string for an id-or-object field (``training.stack``): it was meant as one of the ids
            merged += literal
        elif len(members) > 1 and all(e["type"] in _TYPE_WORDS for _, e in members):
            words = list(dict.fromkeys(_TYPE_WORDS[e["type"]] for _, e in members))
            merged.append(
                {
                    "type": "union_type",
                    "loc": item,
                    "input": members[0][1].get("input"),
                    "ctx": {"expected": words},
                    "msg": "matches none of the allowed types",
                }
            )
        else:
            merged += [e for _, e in members]
    return merged


_BOUNDS = {
    "greater_than_equal": ("≥", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("≤", "le"),
    "less_than": ("<", "lt"),
}


def _requirement(info: Any) -> str:
    """What a valid value is, from the field's type and bounds: 'a whole number from 1 to 64'."""
    if info is None:
        return ""
    base = _base_type(info.annotation)
    if base is bool:
        return "true or false"
    if base not in (int, float):
        choices = _choices(info)
        return f"one of: {', '.join(choices)}" if choices else ""
    noun = "a whole number" if base is int else "a number"
    b = {key: getattr(m, key) for m in info.metadata for key in ("ge", "gt", "le", "lt") if hasattr(m, key)}
    lo = ("≥", b["ge"]) if "ge" in b else (">", b["gt"]) if "gt" in b else None
    hi = ("≤", b["le"]) if "le" in b else ("<", b["lt"]) if "lt" in b else None
    if lo and hi and lo[0] == "≥" and hi[0] == "≤":
        return f"{noun} from {_num(lo[1])} to {_num(hi[1])}"
    parts = [f"{b[0]} {_num(b[1])}" for b in (lo, hi) if b]
    return f"{noun} {' and '.join(parts)}" if parts else noun


def _described(info: Any) -> str:
    text = (getattr(info, "description", None) or "").strip().rstrip(".")
    if not text[1:2].isupper():
        text = text[:1].lower() + text[1:]
    return f" — {text}" if text else ""


def _choices(info: Any) -> list[str]:
    if info is None:
        return []
    for arg in [info.annotation, *typing.get_args(info.annotation)]:
        if typing.get_origin(arg) is typing.Literal:
            return [str(a) for a in typing.get_args(arg)]
    return []


def _base_type(annotation: Any) -> Any:
    """``int | None`` → int; a Literal or a union of several types → None."""
    args = [annotation]
    if typing.get_origin(annotation) in _UNIONS:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 and isinstance(args[0], type) else None


def field_info(model: type | None, loc: list) -> Any:
    """The pydantic FieldInfo at ``loc`` inside ``model`` (through nested models, optional and union
    members, list items); None where the path leaves the schema."""
    from pydantic import BaseModel

    info = None
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue  # a list item: constraints of the list field itself apply
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return None
        info = current.model_fields[part]
        nested = [a for a in _flatten(info.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        current = nested[0] if nested else None
    return info


def with_known_fields(err: Mapping[str, Any], model: type, loc: list) -> dict:
    """``err`` (an unknown-field error at ``loc``) with the field names allowed beside it in its ctx,
    so that the fix can point at the likely intended one."""
    from pydantic import BaseModel

    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return dict(err)
        nested = [
            a
            for a in _flatten(current.model_fields[part].annotation)
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        current = nested[0] if nested else None
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return dict(err)
    return {**err, "ctx": {**(err.get("ctx") or {}), "known": list(current.model_fields)}}


def _flatten(annotation: Any) -> list:
    out = []
    for arg in typing.get_args(annotation) or [annotation]:
        out += _flatten(arg) if typing.get_args(arg) and typing.get_origin(arg) is not typing.Literal else [arg]
    return out


def _flag_for(loc: list, flags: Mapping[str, str]) -> str | None:
    """The flag that set ``loc`` (or the list it is an item of)."""
    for n in range(len(loc), 0, -1):
        flag = flags.get(".".join(str(p) for p in loc[:n]))
        if flag:
            return flag
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _plural(unit: str, n: Any) -> str:
    if n == 1:
        return unit
    return unit[:-1] + "ies" if unit.endswith("y") else unit + "s"


def is_union_tag(part: object) -> bool:
    # pydantic puts the union member's type name into loc (e.g. 'str', 'ModelSpec', 'function-after[...]').
    return isinstance(part, str) and (part in {"str", "int", "ModelSpec", "GpuSpec", "StackOverride"} or "[" in part)
