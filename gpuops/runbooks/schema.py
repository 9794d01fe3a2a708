"""The runbook format as pydantic models (pure): what a YAML runbook may say.

Every model forbids unknown keys: a misspelt `when:` must be an error, not a step that runs
unconditionally. What one model cannot know — which actions exist and what arguments they
take, what a template refers to, cycles between runbooks — is checked by check.py, against
the action catalog (catalog.py). The JSON Schema editors use is generated from these models
(jsonschema.py), so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from gpuops.runbooks.params import DNS_LABEL, IDENTIFIER, Parameter, parse_duration

RUNBOOK_NAME = rf"^{DNS_LABEL}$"
STEP_NAME = rf"^{IDENTIFIER}$"
ACTION_NAME = r"^[a-z][a-z0-9-]*$"
EVENT_NAME = r"^gpuops\.[a-z0-9-]+\.[a-z0-9-]+$"


def _seconds(value: Any) -> Any:
    return parse_duration(value) if isinstance(value, str | int) and \
        not isinstance(value, bool) else value


def _expression(value: Any) -> Any:
    # YAML reads `when: true` as a bool: the same as the expression `true`.
    return ("true" if value else "false") if isinstance(value, bool) else value


Duration = Annotated[int, BeforeValidator(_seconds), WithJsonSchema({
    "anyOf": [{"type": "string", "pattern": r"^(\d+h)?(\d+m)?(\d+s)?$"},
              {"type": "integer", "minimum": 0}],
    "description": "`90s`, `5m`, `1h30m`, or seconds"})]
Expression = Annotated[str, BeforeValidator(_expression), Field(
    description="A Jinja2 expression without `{{ }}` (as Ansible's `when:`), e.g. "
                "`evict and steps.drain.blocked | length == 0`")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Retry(_Strict):
    attempts: int = Field(3, ge=1, le=20, description="Tries in all, the first included.")
    delay: Duration = Field(10, description="Wait between tries.")


class Call(_Strict):
    """An action with its arguments (each a value or a Jinja2 template)."""

    action: str = Field(pattern=ACTION_NAME, description="A registered action "
                        "(`gpuops runbook actions` lists them).")
    args: dict[str, Any] = Field(default_factory=dict, description="The action's arguments; "
                                 "strings may be Jinja2 templates over the parameters and "
                                 "earlier steps' outputs (`steps.<name>.<field>`).")


class FailureStep(Call):
    name: str = Field(pattern=STEP_NAME, description="The task run's name.")
    description: str = ""


class Step(Call):
    """One step: a task run named after the step."""

    name: str = Field(pattern=STEP_NAME, description="The task run's name; later steps read "
                      "this step's output as `steps.<name>`.")
    description: str = ""
    when: Expression | None = None
    retry: Retry | None = None
    on_failure: list[FailureStep] = Field(default_factory=list, description="Run, in order, "
                                          "when this step fails (after its retries); the "
                                          "runbook then fails.")
    undo: Call | None = Field(None, description="What puts this step's change back; run in "
                              "reverse order when a later step fails.")


class Precondition(_Strict):
    """A read-only check that must hold before any step runs."""

    check: str = Field(pattern=ACTION_NAME, description="A registered check.")
    args: dict[str, Any] = Field(default_factory=dict)
    description: str = ""


class Trigger(_Strict):
    """Run the runbook when a gpuops event happens."""

    event: str = Field(pattern=EVENT_NAME, description="e.g. `gpuops.pod.restarted`")
    match: dict[str, str] = Field(default_factory=dict, description="Event resource labels "
                                  "that must match (as a Prefect trigger's `match`).")
    parameters: dict[str, Any] = Field(default_factory=dict, description="Parameter values, "
                                       "templates over `event` (its resource, payload).")


class ApprovalRules(_Strict):
    """Who may answer this runbook's approval requests."""

    separate_approver: bool = Field(False, description="Someone other than whoever started "
                                    "the run must approve it (four eyes): the starter's "
                                    "Approve is refused and the request keeps waiting; the "
                                    "starter may still reject. A run must then say who "
                                    "started it (`started_by`); it also holds for the "
                                    "runbooks this one runs.")


class Runbook(_Strict):
    """A runbook: an operator's procedure as a Prefect flow."""

    name: str = Field(pattern=RUNBOOK_NAME, description="The deployment's name.")
    description: str = ""
    parameters: dict[str, Parameter] = Field(default_factory=dict)
    trigger: Trigger | None = None
    approval: ApprovalRules = Field(default_factory=ApprovalRules)
    preconditions: list[Precondition] = Field(default_factory=list)
    steps: list[Step] = Field(min_length=1)
