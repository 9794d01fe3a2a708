"""The restart-cause corpus: realistic restarts as the classifier sees them (pure data).

Each case (`tests/data/restart_cases/*.yaml`) is one restart's evidence in the classifier's
own input type, `RestartEvidence`, with the cause a person would name (`expect`), the public
issue or document its message formats come from (`source`), and `holdout: true` for the cases
kept out of rule tuning. So the cases stay readable, what every case shares is filled in here:

- identity and context (cluster, namespace, pod, workload, node, capture times), the
  container `app`, a healthy node (MemoryPressure/DiskPressure False, Ready True);
- `last_state` omitted: it ended with exit 1 (reason Error); a terminated state without times
  ran from 09:00:00Z to 10:00:00Z on 2025-06-01 (every case's termination is at 10:00:00Z);
- `previous_log` may be a list of lines, where `{repeat: LINE, times: N}` stands for N copies
  of LINE (a long log whose middle does not matter).

Errors name the file, the case and the field.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuops.common.errors import ConfigError
from gpuops.common.yamlsource import dotted_field, ordered_errors, parse_yaml
from gpuops.tasks.restarts.evidence import RestartEvidence

STARTED = "2025-06-01T09:00:00Z"
FINISHED = "2025-06-01T10:00:00Z"
OBSERVED = "2025-06-01T10:00:02Z"
HEALTHY_NODE = [
    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
     "message": "kubelet has sufficient memory available"},
    {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
     "message": "kubelet has no disk pressure"},
    {"type": "Ready", "status": "True", "reason": "KubeletReady",
     "message": "kubelet is posting ready status"},
]


def default_corpus_dir() -> Path:
    """`tests/data/restart_cases` of the checkout this module is in."""
    return Path(__file__).resolve().parents[2] / "tests" / "data" / "restart_cases"


class RestartCase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    expect: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    source: str = Field(pattern=r"^https://\S+$")
    holdout: bool = False
    note: str = ""
    evidence: RestartEvidence
    file: str = ""


def _log(value: Any) -> Any:
    """A list of lines (with `{repeat, times}` items) as one log text; a string as it is."""
    if not isinstance(value, list):
        return value
    lines: list[str] = []
    for item in value:
        if isinstance(item, dict) and set(item) == {"repeat", "times"}:
            lines += [str(item["repeat"])] * int(item["times"])
        else:
            lines.append(str(item))
    return "\n".join(lines) + "\n"


def _with_times(state: Any) -> Any:
    if isinstance(state, dict) and isinstance(state.get("terminated"), dict):
        state = {**state, "terminated": {"started_at": STARTED, "finished_at": FINISHED,
                                         **state["terminated"]}}
    return state


def evidence_data(case_id: str, given: dict[str, Any]) -> dict[str, Any]:
    """The case's evidence with what every case shares filled in (see the module docstring)."""
    data: dict[str, Any] = {
        "cluster": "prod-gpu", "namespace": "ml", "pod": f"{case_id}-0", "pod_uid": case_id,
        "container": "app", "restart_count": 1, "image": "ghcr.io/acme/app:1.0",
        "node": "gpu-node-1", "limits": {"memory": "32Gi", "nvidia.com/gpu": "1"},
        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
        "last_state": {"terminated": {"reason": "Error", "exit_code": 1}},
        "node_conditions": copy.deepcopy(HEALTHY_NODE),
        "observed_at": OBSERVED, "captured_at": OBSERVED,
    }
    data.update(copy.deepcopy(given))
    data["workload"] = {"kind": "Deployment", "name": case_id, "namespace": data["namespace"],
                        **(data.get("workload") or {})}
    data["last_state"] = _with_times(data["last_state"])
    if "state" in data:
        data["state"] = _with_times(data["state"])
    if "previous_log" in data:
        data["previous_log"] = _log(data["previous_log"])
    return data


def parse_cases(text: str, *, source: str) -> list[RestartCase]:
    """The cases of one corpus file (a mapping with `cases:`)."""
    doc = parse_yaml(text, source=source)
    raw = doc.data.get("cases") if isinstance(doc.data, dict) else None
    if not isinstance(raw, list):
        raise ConfigError("cases", "a corpus file is a mapping with a `cases:` list",
                          source=source)
    cases = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ConfigError(f"cases[{i}]", "a case is a mapping", source=source,
                              line=doc.line_of(["cases", i]))
        case_id = str(item.get("id", f"#{i}"))
        try:
            evidence = evidence_data(case_id, item.get("evidence") or {})
            cases.append(RestartCase.model_validate({**item, "evidence": evidence,
                                                     "file": source}))
        except ValidationError as e:
            loc = list(ordered_errors(e)[0]["loc"])
            raise ConfigError(f"cases[{i}] ({case_id}).{dotted_field(loc)}",
                              ordered_errors(e)[0]["msg"], source=source,
                              line=doc.line_of(["cases", i, *loc])) from None
    return cases


def load_corpus(directory: Path | str | None = None) -> list[RestartCase]:
    """Every case of every `*.yaml` file in `directory` (default: the repository's corpus),
    in file then case order; case ids are unique across the corpus."""
    root = Path(directory) if directory is not None else default_corpus_dir()
    files = sorted(root.glob("*.yaml"))
    if not files:
        raise ConfigError("corpus", f"no *.yaml case files in {str(root)!r}")
    cases: list[RestartCase] = []
    for path in files:
        cases += parse_cases(path.read_text(encoding="utf-8"), source=path.name)
    _unique(cases)
    return cases


def _unique(cases: Iterable[RestartCase]) -> None:
    seen: dict[str, str] = {}
    for case in cases:
        if case.id in seen:
            raise ConfigError("id", f"case id {case.id!r} appears twice ({seen[case.id]} and "
                              f"{case.file})", source=case.file)
        seen[case.id] = case.file
