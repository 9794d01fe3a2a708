"""Talk to simcluster's admin API (fault injection, clock) over HTTP, as an operator would.

Like everything outside simcluster, this goes through the network and the kubeconfig that
simcluster wrote, never through simcluster's Python objects.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gpuops.deployments.services import read_kubeconfig_server

_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SimAdminError(RuntimeError):
    """simcluster could not be reached (`status` None) or refused an admin request."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def bad_request(self) -> bool:
        """The request was wrong (a 4xx): fixing the command will help, retrying will not."""
        return self.status is not None and 400 <= self.status < 500


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """`["gpu=3", "reason=Xid 79"]` -> `{"gpu": 3, "reason": "Xid 79"}`; JSON values keep types."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--param {pair!r} is not of the form `key=value`")
        try:
            params[key] = json.loads(raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


def _status_message(body: bytes) -> str:
    """The `message` of the Kubernetes Status simcluster answers with (else the raw text)."""
    try:
        status = json.loads(body)
    except json.JSONDecodeError:
        return body.decode(errors="replace")[:500]
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return status["message"]
    return json.dumps(status)[:500]


def format_fault_kinds(kinds: dict[str, dict[str, Any]]) -> str:
    """`gpuops sim fault --list`: each kind, what it does, its target and its parameters
    (given as `--param name=value`)."""
    out: list[str] = []
    for kind, k in kinds.items():
        out += [f"{kind}: {k['description']}", f"    target: {k['target']}"]
        width = max((len(p["name"]) for p in k["params"]), default=0)
        out.append("    params:" if k["params"] else "    params: none")
        for p in k["params"]:
            default = "" if p["default"] is None else f" (default {json.dumps(p['default'])})"
            about = f"; {p['description']}" if p["description"] else ""
            out.append(f"      {p['name']:<{width}}  {p['value']}{default}{about}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def post_admin(kubeconfig: Path, path: str, body: dict[str, Any], timeout_s: float = 30) -> Any:
    """POST `body` as JSON to `<server><path>` of the simcluster named in `kubeconfig`."""
    url = read_kubeconfig_server(kubeconfig) + path
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with _direct.open(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as e:
        raise SimAdminError(f"simcluster refused POST {path} ({e.code}): "
                            f"{_status_message(e.read())}", e.code) from None
    except (OSError, http.client.HTTPException) as e:
        raise SimAdminError(
            f"cannot reach simcluster at {url}: {e}; is `gpuops up` (or `gpuops sim serve`) "
            "running with this kubeconfig?"
        ) from e
    try:
        return json.loads(raw or b"null")
    except json.JSONDecodeError as e:
        raise SimAdminError(f"simcluster answered POST {path} with non-JSON: {raw[:200]!r}") from e
