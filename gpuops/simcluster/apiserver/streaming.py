"""Pod subresources that stream into a running container: `exec` (also what `kubectl cp`
runs), `attach` and `portforward`.

kube-apiserver checks the pod and hands the connection to the node's kubelet, which opens a
stream into the container runtime. simcluster's pods have no process to stream into, so after
the same checks kube-apiserver makes first (the pod exists: 404; a named container is one of
its: 400 with kube's wording; it is bound to a node; exec and attach need a pod still running)
each is refused with a 400 that says why and what works instead, rather than the bare 404 a
missing route would give. kubectl prints it as `Error from server (BadRequest): ...`.
"""

from __future__ import annotations

from typing import Any

from ..core import errors
from ..core.resources import ResourceType
from ..core.store import Store

STREAMING = ("exec", "attach", "portforward")
_WHAT = {"exec": "kubectl exec and kubectl cp", "attach": "kubectl attach",
         "portforward": "kubectl port-forward"}


def refuse(store: Store, pods: ResourceType, namespace: str, name: str, subresource: str,
           container: str | None) -> errors.ApiError:
    """The error a streaming request on this pod gets (404 for a pod that does not exist)."""
    pod = store.get(pods, namespace, name)
    spec = pod.get("spec") or {}
    if container and subresource != "portforward":
        names = [c.get("name") for group in ("containers", "initContainers",
                                             "ephemeralContainers")
                 for c in spec.get(group) or []]
        if container not in names:
            return errors.bad_request(f"container {container} is not valid for pod {name}")
    if not spec.get("nodeName"):
        return errors.bad_request(f"pod {name} does not have a host assigned")
    phase = (pod.get("status") or {}).get("phase")
    if subresource != "portforward" and phase in ("Succeeded", "Failed"):
        return errors.bad_request(f"cannot {subresource} into a container in a completed pod; "
                                  f"current phase is {phase}")
    return errors.bad_request(_no_runtime(namespace, name, subresource, pod))


def _no_runtime(namespace: str, name: str, subresource: str, pod: dict[str, Any]) -> str:
    ports = [str(p["containerPort"]) for c in (pod.get("spec") or {}).get("containers") or []
             for p in c.get("ports") or [] if isinstance(p, dict) and "containerPort" in p]
    port = ports[0] if ports else "PORT"
    instead = ("kubectl logs, describe and events work, and a simulated server (vLLM's API) "
               f"answers through the API server's proxy: kubectl get --raw "
               f"/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/PATH, or "
               f".../services/NAME:PORT/proxy/PATH)")
    return (f"simcluster runs no containers, so {_WHAT[subresource]} cannot reach pod "
            f"{namespace}/{name} (pods/{subresource} needs a kubelet and a container runtime; "
            f"{instead}")
