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
    """simcluster could not be reached or refused an admin request."""


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
        detail = e.read().decode(errors="replace")
        raise SimAdminError(f"simcluster refused POST {path} ({e.code}): {detail}") from e
    except (OSError, http.client.HTTPException) as e:
        raise SimAdminError(
            f"cannot reach simcluster at {url}: {e}; is `gpuops up` (or `gpuops sim serve`) "
            "running with this kubeconfig?"
        ) from e
    try:
        return json.loads(raw or b"null")
    except json.JSONDecodeError as e:
        raise SimAdminError(f"simcluster answered POST {path} with non-JSON: {raw[:200]!r}") from e
