"""Reading a Hugging Face ``config.json``'s keys (``planner.specs.hf``, ``hf_moe``): a key the model type needs, or
one whose value the ModelSpec cannot express, is an error naming it ("what; fix", ``FieldValueError`` with the
field's path ``hf_config.<key>``)."""

from __future__ import annotations

from typing import Any

from planner.specs.errors import FieldValueError


def get(cfg: dict[str, Any], key: str, default: Any = ...) -> Any:
    value = cfg.get(key, default)
    if value is ...:
        raise FieldValueError(
            f"hf_config.{key}",
            f"hf_config has no {key!r} (model_type {cfg.get('model_type')!r} needs it); "
            "give the model's complete config.json",
        )
    return value


def expect(cfg: dict[str, Any], key: str, allowed: tuple[Any, ...], why: str) -> None:
    value = cfg.get(key, allowed[0])
    if value not in allowed:
        raise FieldValueError(
            f"hf_config.{key}",
            f"hf_config field {key!r} = {value!r} is not supported ({why}); meshplan models "
            f"{' or '.join(repr(a) for a in allowed)} here: describe the model as a ModelSpec instead",
        )
