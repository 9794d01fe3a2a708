"""Access and identity reviews, answered at once and never stored: SelfSubjectAccessReview
(`kubectl auth can-i`), SelfSubjectRulesReview (`kubectl auth can-i --list`) and
SelfSubjectReview (`kubectl auth whoami`).

simcluster has no authentication and no RBAC: every caller is the one administrator below and
may do everything, and each answer says so in its reason, so that a `yes` from simcluster is
not mistaken for a real cluster's RBAC decision.
"""

from __future__ import annotations

from typing import Any

from ..core import errors
from . import protowire
from .protowire import OBJECT_META, Schema

Obj = dict[str, Any]
NO_RBAC = "simcluster has no RBAC: every request is allowed"
USER = {"username": "simcluster-admin", "groups": ["system:masters", "system:authenticated"]}


# The messages kubectl sends (k8s.io/api authorization/v1 and authentication/v1), as far as
# a review reads them.
_RESOURCE_ATTRIBUTES: Schema = {1: ("namespace", "string"), 2: ("verb", "string"),
                                3: ("group", "string"), 4: ("version", "string"),
                                5: ("resource", "string"), 6: ("subresource", "string"),
                                7: ("name", "string")}
_NON_RESOURCE_ATTRIBUTES: Schema = {1: ("path", "string"), 2: ("verb", "string")}
_SCHEMAS: dict[tuple[str, str], Schema] = {
    ("authorization.k8s.io", "SelfSubjectAccessReview"): {
        1: ("metadata", OBJECT_META),
        2: ("spec", {1: ("resourceAttributes", _RESOURCE_ATTRIBUTES),
                     2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES)})},
    ("authorization.k8s.io", "SelfSubjectRulesReview"): {
        1: ("metadata", OBJECT_META), 2: ("spec", {1: ("namespace", "string")})},
    ("authentication.k8s.io", "SelfSubjectReview"): {1: ("metadata", OBJECT_META)},
}


def is_review(group: str, kind: str) -> bool:
    return (group, kind) in _SCHEMAS


def from_protobuf(group: str, kind: str, body: bytes) -> Obj:
    """A review sent as protobuf (what kubectl sends), as its JSON object."""
    api_version, sent_kind, raw = protowire.unwrap(body)
    return {"apiVersion": api_version, "kind": sent_kind,
            **protowire.decode(raw, _SCHEMAS[(group, kind)])}


def review(group: str, kind: str, body: Obj) -> Obj:
    """The review with its status filled in (what kube-apiserver answers with 201)."""
    spec = body.get("spec") or {}
    if not isinstance(spec, dict):
        raise errors.invalid(f"{kind}.{group}", "", "spec", "Invalid value: must be an object")
    answer: Obj = {"kind": kind, "apiVersion": f"{group}/v1",
                   "metadata": {"creationTimestamp": None, **(body.get("metadata") or {})}}
    if kind == "SelfSubjectAccessReview":
        resource, non_resource = spec.get("resourceAttributes"), spec.get(
            "nonResourceAttributes")
        if resource is not None and non_resource is not None:
            raise errors.invalid(f"{kind}.{group}", "", "spec.nonResourceAttributes",
                                 "Invalid value: cannot be specified in combination with "
                                 "resourceAttributes")
        if resource is None and non_resource is None:
            raise errors.invalid(f"{kind}.{group}", "", "spec.resourceAttributes",
                                 'Invalid value: "null": exactly one of nonResourceAttributes '
                                 "or resourceAttributes must be specified")
        answer["spec"] = spec
        answer["status"] = {"allowed": True, "reason": NO_RBAC}
    elif kind == "SelfSubjectRulesReview":
        answer["spec"] = spec
        answer["status"] = {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False}
    else:
        answer["status"] = {"userInfo": dict(USER)}
    return answer
