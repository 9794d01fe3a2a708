"""Events validated at the edge: the restart payload's times, and validate-or-reject."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from prefect.events import Event
from pydantic import ValidationError

from gpuops.tasks.event_intake import REJECTED, EventIntake, Problem, validate_event
from gpuops.tasks.restarts.evidence import RestartEvidence, rfc3339
from tests import restart_fixtures as fx

SECRETISH = "2025-06-01T10:00:01Z password=hunter2"


def restart_event(**payload_overrides) -> Event:
    payload = fx.evidence().model_dump(mode="json") | payload_overrides
    return Event(id=uuid.uuid4(), occurred=datetime.now(UTC), event="gpuops.pod.restarted",
                 resource={"prefect.resource.id": "k8s.prod.pod.ml.trainer-0"},
                 payload=payload)


def test_times_are_parsed_once_into_aware_utc_datetimes():
    ev = fx.evidence(observed_at="2025-06-01T12:00:01+02:00")

    assert ev.observed_at == datetime(2025, 6, 1, 10, 0, 1, tzinfo=UTC)
    assert ev.last_state.terminated.finished_at == datetime(2025, 6, 1, 10, 0, tzinfo=UTC)
    assert ev.model_dump(mode="json")["observed_at"] == "2025-06-01T10:00:01Z"
    assert rfc3339(ev.observed_at) == "2025-06-01T10:00:01Z"


def test_a_time_without_an_offset_is_taken_as_utc():
    ev = fx.evidence(observed_at="2025-06-01T10:00:01")
    aware = fx.evidence(observed_at=datetime(2025, 6, 1, 12, 0, 1,
                                             tzinfo=timezone(timedelta(hours=2))))

    assert ev.observed_at == aware.observed_at == datetime(2025, 6, 1, 10, 0, 1, tzinfo=UTC)


@pytest.mark.parametrize("value", ["not-a-time", "2025-06-01", "2025-13-01T00:00:00Z", 1748772001,
                                   SECRETISH])
def test_a_value_that_is_not_a_date_and_time_is_refused_without_echoing_it(value):
    with pytest.raises(ValidationError) as err:
        fx.evidence(observed_at=value)

    assert err.value.errors()[0]["loc"] == ("observed_at",)
    assert "hunter2" not in str(err.value) and "not-a-time" not in str(err.value)


def test_a_poisoned_event_is_a_rejection_naming_the_field_not_the_value():
    event = restart_event(observed_at=SECRETISH, restart_count="many")

    found = validate_event(RestartEvidence, event)

    assert not isinstance(found, RestartEvidence)
    assert found.event_id == str(event.id) and found.event == "gpuops.pod.restarted"
    assert found.resource == {"prefect.resource.id": "k8s.prod.pod.ml.trainer-0"}
    assert {p.field for p in found.problems} == {"observed_at", "restart_count"}
    assert "hunter2" not in repr(found.payload()) and "many" not in repr(found.payload())


def test_the_intake_passes_valid_events_and_records_each_poisoned_one_once(caplog):
    emitted: list[dict] = []
    intake = EventIntake(RestartEvidence, logging.getLogger("test.intake"),
                         what="restart evidence", emit=lambda **kw: emitted.append(kw))
    good, bad = restart_event(), restart_event(observed_at="not-a-time")

    with caplog.at_level(logging.ERROR, "test.intake"):
        first = intake.accept([bad, good])
        again = intake.accept([bad, good])  # a batch tried again
        intake.reject(good, Problem("<handling>", "KeyError while classifying the restart"))

    assert [e.id for _, e in first] == [good.id] == [e.id for _, e in again]
    assert isinstance(first[0][0], RestartEvidence)
    assert [kw["event"] for kw in emitted] == [REJECTED, REJECTED]
    assert emitted[0]["resource"] == dict(bad.resource.root)
    assert emitted[0]["payload"]["problems"][0]["field"] == "observed_at"
    assert emitted[0]["id"] == validate_event(RestartEvidence, bad).rejection_id
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and str(bad.id) in lines[0] and "observed_at" in lines[0]
    assert intake.accept([good]) == []  # rejected while handled: not handled again
