"""Events validated at the edge: every event-driven flow takes its events through here.

The rule: an event is parsed into its payload model before any work is done with it. An
event that fails (its payload does not validate, or handling it fails for a reason that lies
in its content) is *poisoned*: it is skipped and recorded, never retried, and the run goes on
past it, so one bad event can never stop the events after it from being handled. Recorded
means one log line naming the event and the field, and one `gpuops.event.rejected` event
(resource: the bad event's resource; payload: its id, its name and the problems), whose id
derives from the bad event's, so a re-read of the bad event records nothing new.

Problems name the field and what is wrong, never the value: a payload carries logs and pod
facts, which may hold a secret redaction missed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prefect.events import Event, emit_event
from pydantic import BaseModel, ValidationError

from gpuops.common.events import event_name
from gpuops.common.yamlsource import dotted_field, ordered_errors

REJECTED = event_name("event", "rejected")
# Rejections of one event share one id (Prefect keeps one event per id).
_REJECTION_IDS = uuid.UUID("0b7c4d55-7f35-4f5a-a6a1-3d6f2f0e9c21")

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    """What is wrong with one field of an event's payload (never its value)."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Rejection:
    """A poisoned event: which one, and why."""

    event_id: str
    event: str
    resource: dict[str, str]
    problems: tuple[Problem, ...]

    @property
    def rejection_id(self) -> uuid.UUID:
        return uuid.uuid5(_REJECTION_IDS, self.event_id)

    def payload(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "event": self.event,
                "problems": [{"field": p.field, "message": p.message} for p in self.problems]}

    def summary(self) -> str:
        first = str(self.problems[0]) if self.problems else "unknown problem"
        more = len(self.problems) - 1
        return first + (f" (and {more} more problem{'s' * (more > 1)})" if more > 0 else "")


def validation_problems(error: ValidationError) -> tuple[Problem, ...]:
    """Pydantic's errors as field + message, without the input values."""
    out = []
    for e in ordered_errors(error):
        message = e["msg"].removeprefix("Value error, ")
        out.append(Problem(dotted_field(e["loc"]), message))
    return tuple(out)


def validate_event(model: type[M], event: Event) -> M | Rejection:
    """The event's payload as `model`, or why it is not one (pure)."""
    try:
        return model.model_validate(event.payload)
    except ValidationError as e:
        return rejection(event, validation_problems(e))


def rejection(event: Event, problems: Iterable[Problem]) -> Rejection:
    return Rejection(str(event.id), event.event, dict(event.resource.root), tuple(problems))


def handling_problem(stage: str, error: BaseException) -> Problem:
    """A failure while handling an event's content: the kind of error, not its message (an
    exception's message often quotes the value that broke it)."""
    return Problem("<handling>", f"{type(error).__name__} while {stage}")


class EventIntake(Generic[M]):
    """Validate-or-reject for one run. `accept` returns the valid events with their payload
    models; `reject` records a poisoned event once per run (the log line, the event)."""

    def __init__(self, model: type[M], logger: logging.Logger | logging.LoggerAdapter, *,
                 what: str = "", emit: Callable[..., Any] = emit_event) -> None:
        self.model = model
        self.log = logger
        self.what = what or model.__name__
        self._emit = emit
        self.rejected: dict[str, Rejection] = {}

    def accept(self, events: Iterable[Event]) -> list[tuple[M, Event]]:
        accepted: list[tuple[M, Event]] = []
        for event in events:
            if str(event.id) in self.rejected:
                continue  # a batch tried again: rejected once is enough
            parsed = validate_event(self.model, event)
            if isinstance(parsed, Rejection):
                self.record(parsed, f"invalid {self.what}")
            else:
                accepted.append((parsed, event))
        return accepted

    def reject(self, event: Event, problem: Problem) -> None:
        self.record(rejection(event, [problem]), f"{self.what} could not be handled")

    def record(self, found: Rejection, why: str) -> None:
        if found.event_id in self.rejected:
            return
        self.rejected[found.event_id] = found
        self.log.error("event %s (%s) rejected and skipped: %s: %s", found.event_id,
                       found.event, why, found.summary())
        try:
            self._emit(event=REJECTED, resource=found.resource, payload=found.payload(),
                       id=found.rejection_id)
        except Exception as e:  # noqa: BLE001 - the log line stands; the run must go on
            self.log.warning("the rejection of event %s was not recorded as an event: %s",
                             found.event_id, type(e).__name__)
