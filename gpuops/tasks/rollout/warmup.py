"""Ready and warm before any traffic: the new replicas' own vLLM endpoints, through the API
server's pod proxy (thin I/O over `tasks/clients/kube`).

Ready is not warm. A vLLM that passed its readiness probe has its weights loaded, but its
prefix cache is empty and kernels for shapes it has not seen compile on first use: its first
requests are slower, and an analysis window judged then would blame the version for its cold
start. So, per replica:

1. `GET /v1/models` answers and lists the served model (the check the llm-d guides use as
   readiness: the server is up and the model loaded);
2. batches of synthetic requests (`POST /v1/completions`, a few tokens each), each batch's
   mean TTFT read from the replica's own `/metrics` (`_sum` / `_count` before and after);
   warm when a batch's mean is within the tolerance of the batch before (the cold period is
   over: more requests no longer make it faster). The requests count in the replica's
   metrics like any other; they come before the first analysis window, so none is judged.

Whether warm is decided by `is_warm` (pure); the rest reads and sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from gpuops.common.errors import KubeError
from gpuops.tasks.clients.kube import Kube

TTFT = "vllm:time_to_first_token_seconds"
PROMPT = "Warm-up request from gpuops before the rollout sends traffic."


@dataclass(frozen=True)
class Batch:
    pod: str
    sent: int
    failed: int  # answered >= 400, or not at all
    ttft_mean: float | None  # None: the replica's /metrics has no TTFT for them


def served_models(kube: Kube, namespace: str, pod: str, port: int) -> list[str] | None:
    """The models `/v1/models` lists; None while nothing answers (the model is loading)."""
    try:
        import json

        body = json.loads(kube.proxy_get(namespace, pod, port, "v1/models") or b"{}")
    except (KubeError, ValueError):
        return None
    return [str(m.get("id")) for m in body.get("data") or () if isinstance(m, Mapping)]


def _ttft_totals(kube: Kube, namespace: str, pod: str, port: int) -> tuple[float, float] | None:
    try:
        text = kube.proxy_get(namespace, pod, port, "metrics").decode("utf-8", "replace")
    except KubeError:
        return None
    total = count = 0.0
    found = False
    for family in text_string_to_metric_families(text):
        if family.name != TTFT:
            continue
        for sample in family.samples:
            if sample.name == TTFT + "_sum":
                total += sample.value
                found = True
            elif sample.name == TTFT + "_count":
                count += sample.value
    return (total, count) if found else None


def warm_up_batch(kube: Kube, namespace: str, pod: str, port: int, model: str, n: int
                  ) -> Batch:
    """Send `n` warm-up requests to one replica; their mean TTFT from its own /metrics."""
    before = _ttft_totals(kube, namespace, pod, port)
    failed = 0
    for _ in range(n):
        try:
            status, _ = kube.proxy_post(namespace, pod, port, "v1/completions",
                                        {"model": model, "prompt": PROMPT, "max_tokens": 8})
        except KubeError:
            status = 0
        failed += status != 200
    after = _ttft_totals(kube, namespace, pod, port)
    mean = None
    if before is not None and after is not None and after[1] > before[1]:
        mean = (after[0] - before[0]) / (after[1] - before[1])
    return Batch(pod, n, failed, mean)


def is_warm(previous: Mapping[str, Batch], latest: Sequence[Batch], tolerance: float) -> bool:
    """Every replica's latest batch about as fast as its batch before (within `tolerance`,
    relative). A replica whose TTFT cannot be read is warm once it answered two batches."""
    if not latest:
        return False
    for batch in latest:
        before = previous.get(batch.pod)
        if before is None:
            return False
        if batch.ttft_mean is None or before.ttft_mean is None:
            continue
        if batch.ttft_mean > before.ttft_mean * (1 + tolerance):
            continue  # slower than before: load, not coldness
        if batch.ttft_mean < before.ttft_mean * (1 - tolerance):
            return False  # still getting faster
    return True
