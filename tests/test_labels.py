"""Label selectors: one grammar for simcluster's API server and the restart policy's filter."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.common.errors import PermanentError
from gpuops.common.labels import (
    LabelSelectorError,
    Requirement,
    labels_match,
    parse_label_selector,
)
from gpuops.simcluster.core.errors import ApiError
from gpuops.simcluster.core.selectors import parse_label_selector as simcluster_parse
from gpuops.tasks.restarts.diagnose import diagnose
from gpuops.tasks.restarts.filters import skip_reason
from tests import restart_fixtures as fx

WEB_GPU = {"app": "web", "tier": "gpu"}
WEB = {"app": "web"}
DB_CPU = {"app": "db", "tier": "cpu"}
EMPTY_TIER = {"tier": ""}
NONE: dict[str, str] = {}
ALL = {"web-gpu": WEB_GPU, "web": WEB, "db-cpu": DB_CPU, "empty-tier": EMPTY_TIER, "none": NONE}


def matching(selector: str) -> set[str]:
    reqs = parse_label_selector(selector)
    return {name for name, labels in ALL.items() if labels_match(reqs, labels)}


@pytest.mark.parametrize(("selector", "parsed"), [
    ("app=web", [Requirement("app", "=", frozenset({"web"}))]),
    ("app==web", [Requirement("app", "=", frozenset({"web"}))]),
    ("app!=web", [Requirement("app", "!=", frozenset({"web"}))]),
    ("app=", [Requirement("app", "=", frozenset({""}))]),
    ("tier in (gpu,cpu)", [Requirement("tier", "in", frozenset({"gpu", "cpu"}))]),
    ("tier notin (gpu)", [Requirement("tier", "notin", frozenset({"gpu"}))]),
    ("tier", [Requirement("tier", "exists")]),
    ("!tier", [Requirement("tier", "!exists")]),
    (" app = web , tier in ( gpu ) ", [Requirement("app", "=", frozenset({"web"})),
                                       Requirement("tier", "in", frozenset({"gpu"}))]),
    ("app.kubernetes.io/part-of=serving",
     [Requirement("app.kubernetes.io/part-of", "=", frozenset({"serving"}))]),
])
def test_each_operator_parses_into_its_requirement(selector, parsed):
    assert parse_label_selector(selector) == parsed


@pytest.mark.parametrize(("selector", "expected"), [
    ("app=web", {"web-gpu", "web"}),
    ("app==web", {"web-gpu", "web"}),
    ("app!=web", {"db-cpu", "empty-tier", "none"}),
    ("tier=", {"empty-tier"}),
    ("tier in (gpu,cpu)", {"web-gpu", "db-cpu"}),
    ("tier notin (gpu)", {"web", "db-cpu", "empty-tier", "none"}),
    ("tier", {"web-gpu", "db-cpu", "empty-tier"}),
    ("!tier", {"web", "none"}),
    ("app=web,tier=gpu", {"web-gpu"}),
    ("app=web,!tier", {"web"}),
])
def test_each_operator_matches_as_the_api_server_does(selector, expected):
    assert matching(selector) == expected


@pytest.mark.parametrize("selector", ["", "   ", None])
def test_an_empty_selector_matches_everything(selector):
    assert parse_label_selector(selector) == []
    assert all(labels_match([], labels) for labels in ALL.values())
    assert labels_match([], None)


@pytest.mark.parametrize(("selector", "expected"), [
    ("tier in ()", {"empty-tier"}),
    ("tier in (gpu,)", {"web-gpu", "empty-tier"}),
    ("tier notin (,gpu)", {"web", "db-cpu", "none"}),
    ("tier in(gpu)", {"web-gpu"}),
])
def test_empty_entries_in_a_value_list_are_the_empty_value(selector, expected):
    assert matching(selector) == expected


@pytest.mark.parametrize(("selector", "problem"), [
    ("tier in (gpu", "missing ')'"),
    ("tier in gpu", "expected '(' after 'in'"),
    ("tier notin", "expected '(' after 'notin'"),
    ("tier in (a b)", "expected one value between ',' and ')', found 'a b'"),
    ("app web", "unexpected 'web' after key 'app'"),
    ("app=b c", "expected ',' but found 'c'"),
    ("a=b=c", "expected ',' but found '='"),
    ("!a=b", "expected ',' but found '='"),
    ("app=web,", "expected a requirement after the last ','"),
    ("a,,b", "found ',', expected: a label key"),
    ("=web", "found '=', expected: a label key"),
    ("!", "found '', expected: a label key"),
])
def test_a_bad_selector_is_an_error_naming_the_selector(selector, problem):
    with pytest.raises(LabelSelectorError) as err:
        parse_label_selector(selector)
    assert err.value.selector == selector
    assert err.value.problem == problem
    assert str(err.value) == f"unable to parse requirement: {problem} in label selector " \
                             f"{selector!r}"


def test_a_bad_selector_is_permanent_and_a_value_error():
    with pytest.raises(LabelSelectorError) as err:
        parse_label_selector("tier in (gpu")
    assert isinstance(err.value, PermanentError)
    assert isinstance(err.value, ValueError)  # a pydantic validator may simply call the parser


# --- the two callers: simcluster answers 400, the restart filter skips and says why ---------

def test_simcluster_answers_a_bad_selector_with_400_and_the_same_message():
    with pytest.raises(ApiError) as err:
        simcluster_parse("tier in (gpu")
    assert (err.value.code, err.value.reason) == (400, "BadRequest")
    assert err.value.message == "unable to parse requirement: missing ')' in label selector " \
                                "'tier in (gpu'"


@pytest.mark.parametrize(("selector", "reason"), [
    ("app in (trainer,server)", None),
    ("app notin (trainer)", "pod labels do not match 'app notin (trainer)'"),
    ("app in (trainer", ("invalid pod_label_selector (fix it in the `gpuops-restart-policy` "
                         "block): unable to parse requirement: missing ')' in label selector "
                         "'app in (trainer'")),
])
def test_the_restart_filter_skips_on_a_mismatch_or_a_bad_selector(selector, reason):
    restart = fx.evidence(pod_labels={"app": "trainer"})
    now = restart.observed_at + timedelta(minutes=1)
    # model_construct: a policy saved before selectors were validated on save
    policy = RestartPolicy.model_construct(pod_label_selector=selector)
    assert skip_reason(restart, diagnose(restart), policy, now) == reason


def test_a_restart_policy_with_a_bad_selector_is_refused_naming_the_field():
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        RestartPolicy(pod_label_selector="tier in (a b)")
    assert "pod_label_selector" in str(caught.value)
    assert RestartPolicy(pod_label_selector="tier in (gpu),app").pod_label_selector
