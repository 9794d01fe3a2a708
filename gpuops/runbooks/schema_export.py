"""The runbook format as JSON Schema, for editors (the YAML language server) (pure).

Generated from the same pydantic models the loader validates with, plus each catalog
action's argument model, so an editor knows what `args:` a given `action:` takes. A value
that is a Jinja2 template is accepted for any argument (its type is known once rendered);
the full check (`gpuops runbook validate`) also types `{{ param }}` by its parameter.
The shipped copy (runbooks/runbook.schema.json) is kept equal to this by a test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuops.runbooks.catalog import CATALOG
from gpuops.runbooks.registry import ActionCatalog
from gpuops.runbooks.schema import Runbook

SCHEMA_FILE = Path(__file__).parent / "runbook.schema.json"
TEMPLATE = {"type": "string", "pattern": r"\{\{|\{%",
            "description": "A Jinja2 template, typed once rendered."}


def _templatable(args_schema: dict[str, Any]) -> dict[str, Any]:
    props = {name: {"anyOf": [prop, TEMPLATE]}
             for name, prop in args_schema.get("properties", {}).items()}
    out = {"type": "object", "properties": props, "additionalProperties": False}
    if args_schema.get("required"):
        out["required"] = args_schema["required"]
    return out


def runbook_schema(catalog: ActionCatalog = CATALOG) -> dict[str, Any]:
    schema = Runbook.model_json_schema(ref_template="#/$defs/{model}")
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    branches: dict[str, list[dict[str, Any]]] = {"action": [], "check": []}
    for name, spec in catalog.items():
        args = spec.args.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(args.pop("$defs", {}))
        branch = {"if": {"properties": {"action": {"const": name}}, "required": ["action"]},
                  "then": {"properties": {"args": _templatable(args)}}}
        branches["action"].append(branch)
        if spec.check:
            branches["check"].append({
                "if": {"properties": {"check": {"const": name}}, "required": ["check"]},
                "then": {"properties": {"args": _templatable(args)}}})
    # One definition of the branches, referred to by every model that calls an action.
    defs["ActionArguments"] = {"allOf": branches["action"]}
    defs["CheckArguments"] = {"allOf": branches["check"]}
    names = list(catalog)
    for model in ("Call", "Step", "FailureStep"):
        defs[model]["allOf"] = [{"$ref": "#/$defs/ActionArguments"}]
        defs[model]["properties"]["action"]["enum"] = names
    checks = [n for n, s in catalog.items() if s.check]
    defs["Precondition"]["allOf"] = [{"$ref": "#/$defs/CheckArguments"}]
    defs["Precondition"]["properties"]["check"]["enum"] = checks
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gpuops runbook"
    return schema


def schema_text(catalog: ActionCatalog = CATALOG) -> str:
    return json.dumps(runbook_schema(catalog), indent=2, sort_keys=True) + "\n"
