"""Errors a user can act on: each names the field, what was wrong and how to fix it.

The CLI turns these (and pydantic's ValidationError) into a message and exit code 2; the service
turns them into an RFC 9457 problem response with status 422.
"""

from __future__ import annotations


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

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message, "fix": self.fix}


class UnknownCatalogIdError(MeshplanError):
    """A catalog id (model or GPU) that is not in the catalog."""


def validation_errors(exc: Exception, prefix: str = "") -> list[dict[str, str]]:
    """Flatten a pydantic ValidationError into ``[{"field": "a.b.0", "message": ...}]``."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return [{"field": prefix or "body", "message": str(exc)}]
    out = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ()) if not _is_union_tag(p))
        field = ".".join(x for x in (prefix, loc) if x) or "body"
        out.append({"field": field, "message": err.get("msg", "invalid value")})
    return out


def _is_union_tag(part: object) -> bool:
    # pydantic puts the union member's type name into loc (e.g. 'str', 'ModelSpec', 'function-after[...]').
    return isinstance(part, str) and (part in {"str", "int", "ModelSpec", "GpuSpec"} or "[" in part)
