"""`/healthz`, `/livez`, `/readyz` as kube-apiserver answers them: `ok`, or with `?verbose`
one `[+]<check> ok` line per check and `<endpoint> check passed`; `/<endpoint>/<check>` asks
for one check. simcluster has one honest check, `ping` (the server answers); it has no etcd,
informers or admission webhooks to report on."""

from __future__ import annotations

from aiohttp import web

from ..core import errors

ENDPOINTS = ("healthz", "livez", "readyz")
CHECKS = ("ping",)


def is_health(parts: list[str]) -> bool:
    return bool(parts) and parts[0] in ENDPOINTS and len(parts) <= 2


def health_response(parts: list[str], verbose: bool) -> web.Response:
    endpoint, check = parts[0], parts[1] if len(parts) > 1 else None
    if check is not None:
        if check not in CHECKS:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested "
                                  "resource", details={})
        return web.Response(text="ok")
    if not verbose:
        return web.Response(text="ok")
    lines = [f"[+]{c} ok" for c in CHECKS] + [f"{endpoint} check passed"]
    return web.Response(text="\n".join(lines) + "\n")
