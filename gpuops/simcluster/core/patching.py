"""The three PATCH flavours: JSON merge patch (RFC 7386), strategic merge patch and JSON patch."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from .errors import ApiError, bad_request

# Lists that strategic merge patch merges element-wise, by field name -> merge key.
# These are the patchMergeKey tags of the Kubernetes API types gpuops and its users touch;
# a list without one (NodeSpec.taints, PodSpec.tolerations) is replaced whole.
MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "imagePullSecrets": "name", "conditions": "type", "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey", "resourceClaims": "name",
    "ownerReferences": "uid", "containerStatuses": "name", "initContainerStatuses": "name",
    "addresses": "type",
}
# Lists of scalars merged as sets rather than replaced.
MERGED_SCALAR_LISTS = {"finalizers"}
# Lists whose merge key depends on where they sit.
PORTS_MERGE_KEYS = {"containers": "containerPort", "service": "port"}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, *, parent: str = "") -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [x for x in result.get(field, []) if x not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, key, parent)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value, parent=key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = value
    return result


def _merge_list(current: list | None, patch: list, field: str, parent: str) -> list:
    current = current or []
    if field in MERGED_SCALAR_LISTS:
        return current + [x for x in patch if x not in current]
    key = MERGE_KEYS.get(field)
    if field == "ports":
        key = PORTS_MERGE_KEYS["containers"] if parent in ("", "containers") or any(
            isinstance(p, dict) and "containerPort" in p for p in patch) else PORTS_MERGE_KEYS["service"]
    if key is None or not all(isinstance(p, dict) for p in patch):
        return copy.deepcopy([p for p in patch if not (isinstance(p, dict) and p.get("$patch"))])
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy({k: v for k, v in p.items() if k != "$patch"})
                for p in patch if p.get("$patch") != "replace"]
    result = copy.deepcopy(current)
    for item in patch:
        if key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {key}")
        index = next((i for i, c in enumerate(result)
                      if isinstance(c, dict) and c.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(strategic_merge_patch({}, item, parent=field))
        else:
            result[index] = strategic_merge_patch(result[index], item, parent=field)
    return result


def json_patch(target: dict, operations: list) -> dict:
    try:
        return jsonpatch.apply_patch(target, operations, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in "
                       f"our request: {e}") from e
    except (TypeError, KeyError) as e:
        raise bad_request(f"invalid JSON patch: {e}") from e


def apply_patch(content_type: str, target: dict, patch: Any) -> dict:
    ctype = content_type.split(";")[0].strip()
    if ctype == "application/json-patch+json":
        if not isinstance(patch, list):
            raise bad_request("json patch must be a list of operations")
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise bad_request(f"{ctype} patch must be a JSON object")
    if ctype == "application/merge-patch+json":
        return merge_patch(target, patch)
    if ctype == "application/strategic-merge-patch+json":
        return strategic_merge_patch(target, patch)
    if ctype == "application/apply-patch+yaml":
        return merge_patch(target, patch)
    raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown "
                   f"format - accepted media types include: application/json-patch+json, "
                   f"application/merge-patch+json, application/apply-patch+yaml, "
                   f"application/strategic-merge-patch+json (got {ctype!r})")
