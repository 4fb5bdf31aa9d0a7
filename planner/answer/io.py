"""Reading specs and plans from files (JSON or YAML), with errors that name the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from planner.specs import Plan, PlanResponse
from planner.specs.errors import MeshplanError, validation_errors

M = TypeVar("M", bound=BaseModel)


def read_document(path: str | Path, field: str) -> object:
    p = Path(path)
    if not p.is_file():
        raise MeshplanError(field, f"file {str(p)!r} does not exist", "give the path of an existing JSON or YAML file")
    text = p.read_text()
    try:
        if p.suffix in {".yaml", ".yml"}:
            return yaml.safe_load(text)
        return json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise MeshplanError(
            field,
            f"{p} is not valid {'YAML' if p.suffix in {'.yaml', '.yml'} else 'JSON'}: {exc}",
            "fix the file's syntax",
        ) from None


def load_model(cls: type[M], path: str | Path, field: str) -> M:
    data = read_document(path, field)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        first = validation_errors(exc)[0]
        raise MeshplanError(
            first["field"], f"{first['message']} (in {path})", f"correct the field in the {cls.__name__} document"
        ) from None


def plan_from_data(data: object, field: str = "plan", index: int = 0) -> Plan:
    """A Plan from a Plan document or a PlanResponse (its plan number ``index``, best first)."""
    try:
        if isinstance(data, dict) and "plans" in data:
            response = PlanResponse.model_validate(data)
            if not response.plans:
                reason = response.infeasible.reason if response.infeasible else "no feasible plan"
                raise MeshplanError(
                    field, f"the plan response holds no plan ({reason})", "re-plan with a feasible request"
                )
            if index >= len(response.plans):
                raise MeshplanError(
                    field, f"plan index {index} out of range ({len(response.plans)} plans)", "choose a smaller index"
                )
            return response.plans[index]
        return Plan.model_validate(data)
    except ValidationError as exc:
        first = validation_errors(exc)[0]
        fix = first["fix"] or "pass the JSON that `meshplan plan --json` wrote"
        raise MeshplanError(f"{field}.{first['field']}", first["message"], fix) from None


def load_plan(path: str | Path, index: int = 0) -> Plan:
    return plan_from_data(read_document(path, "plan"), "plan", index)
