"""Which earlier result a runbook step's task run may reuse: its own, in the same flow run.

Why: an approval that waits longer than the policy's `suspend_after_s` suspends the flow
run, and Prefect runs a resumed flow again from the top. Each step's task run is cached
under a key made of the flow run, the step's place (the runbook steps it is nested in, its
own `where` and name) and its arguments as rendered now, with its result persisted in
Prefect's result storage: the re-run gets the steps done before the approval back without
doing them again (no second Slack post, no repeated change), and carries on from the
approval. A step whose arguments render differently on the re-run (the plan drifted) has
another key, so it runs. No run id (a step run outside a flow run): no key, no reuse.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

PREFIX = "gpuops-runbook-step-"


def step_key(run_id: str, path: Sequence[str], action: str, args: Any) -> str | None:
    """The cache key of one step's task run (`args`: its rendered arguments, JSON-able)."""
    if not run_id:
        return None
    body = json.dumps({"run": run_id, "path": list(path), "action": action, "args": args},
                      sort_keys=True, default=str)
    return PREFIX + hashlib.sha256(body.encode()).hexdigest()


def key_parameter(_context: Any, parameters: dict[str, Any]) -> str | None:
    """Prefect's `cache_key_fn`: the key the engine computed, passed as the `key` argument."""
    key = parameters.get("key")
    return key if isinstance(key, str) and key else None
