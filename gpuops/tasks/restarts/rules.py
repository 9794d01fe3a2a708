"""Restart cause rules: their schema, the shipped rule file, and operator extensions.

The rules that classify a restart are data (`restart_rules.yaml`), not a chain of ifs, so an
operator can add a cause for their own software without a release: a rule names the
conditions that must hold (`when`), conditions that make it more certain (`supporting`, each
adds `bonus`), and what to tell a person. Files are validated with pydantic; an error names
the field and the YAML line. Rule ids are a registry: a second rule with a known id is refused
unless it says `override: true` (STYLE.md, "registries refuse duplicates loudly").

Rule file shape (a list, or a mapping with `rules:` and optionally `definitions:`, a place
for YAML anchors the rules share, such as the shipped file's Xid classes):

    - id: oom-killed-limit            # unique
      cause: oom-killed-limit         # what the diagnosis reports; several rules may share it
      title: "OOMKilled: container memory limit reached"   # may use {facts}, see diagnose.py
      confidence: 0.88                # base score, 0..1
      priority: 50                    # breaks ties between equal scores (higher wins)
      fault: true                     # false for planned or benign terminations
      window_s: 600                   # how near the termination events and Xids must be
      bonus: 0.02                     # added per `supporting` set that holds
      recency: {within_s: 300, tail_lines: 100, stale_penalty: 0.4}  # old log lines weigh less
      explanation: "..."              # why, and what to do; may use {facts}
      when: {terminated.reason: [OOMKilled]}
      supporting:
        - {limits_set: [memory]}
      override: false                 # true to replace a rule with the same id
      enabled: true                   # false (with override) switches a shipped rule off

Conditions (all keys of one mapping must hold; lists mean "any of"):
`terminated.reason`, `terminated.exit_code` (ints or "a-b" ranges), `terminated.message_regex`,
`signal` (from `signal`, else exit code - 128), `ran_for_at_most_s`, `waiting_reason`,
`waiting_message_regex`, `log_regex`, `log_words` (a vocabulary: a log line holding one
term of every group, and none of `unless`; see `LogWords`), `log_traceback`,
`log_exception_regex` (the exception the last Python traceback ends with),
`log_traceback_regex` (any line of that traceback, its frames included), `pod_event_reason`,
`pod_event_message_regex`, `node_event_reason`, `node_event_message_regex`, `node_condition`
({type, status, reason, message_regex}, or a list: any), `node_xid_in` (Xids on the
container's GPUs, by PCI bus id or index where known, within `window_s`), `node_xid`
({in, window_s, gpu: assigned|any}, or a list: all must hold), `pod_reason`,
`pod_message_regex`, `pod_condition` ({type, status, reason}), `pod_deleting`,
`workload_rolling_out`, `trigger` (what was seen: `restart`, `terminated` — a container
that failed and is not restarted, as a Job's pod —, `pod-failed` — the pod was taken away —,
`waiting`), `evicted_by_gpuops` (an eviction a gpuops run made and recorded on the pod),
`container_kind`, `limits_set`, `namespace`, `image_regex`,
`any` (a list of condition mappings, one must hold) and `not` (a mapping that must not hold).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    model_validator,
)

from gpuops.common.errors import ConfigError
from gpuops.common.yamlsource import ordered_errors, parse_yaml

SHIPPED_RULES = "restart_rules.yaml"
_ID = r"^[a-z0-9][a-z0-9._-]*$"


def _as_list(value: Any) -> Any:
    """Let a single value stand for a one-element list (`reason: OOMKilled`)."""
    if value is None or isinstance(value, list):
        return value
    return [value]


def _compile(value: Any) -> re.Pattern[str]:
    if isinstance(value, re.Pattern):
        return value
    if not isinstance(value, str):
        # ValueError, not TypeError: pydantic turns only ValueError into a validation error
        raise ValueError(  # noqa: TRY004
            f"a regular expression must be a string, not {type(value).__name__}")
    try:
        return re.compile(value)
    except re.error as e:
        raise ValueError(f"{value!r} is not a valid regular expression: {e}") from e


def _exit_codes(value: Any) -> list[tuple[int, int]]:
    """Exit codes as inclusive ranges: `137` -> (137, 137), `"1-255"` -> (1, 255)."""
    out = []
    for item in _as_list(value) or []:
        if isinstance(item, bool):
            raise ValueError(f"{item!r} is not an exit code")  # noqa: TRY004 (see _compile)
        if isinstance(item, int):
            out.append((item, item))
            continue
        if isinstance(item, str) and re.fullmatch(r"\s*\d+\s*-\s*\d+\s*", item):
            low, high = (int(p) for p in item.split("-"))
            if low > high:
                raise ValueError(f"range {item!r} is empty: write it low-high")
            out.append((low, high))
            continue
        raise ValueError(f"{item!r} is not an exit code: use an integer or a range like \"1-255\"")
    return out


Regex = Annotated[re.Pattern[str], PlainValidator(_compile),
                  PlainSerializer(lambda p: p.pattern, return_type=str)]
RegexList = Annotated[list[Regex], BeforeValidator(_as_list)]
StrList = Annotated[list[str], BeforeValidator(_as_list)]
IntList = Annotated[list[int], BeforeValidator(_as_list)]
ExitCodes = Annotated[list[tuple[int, int]], BeforeValidator(_exit_codes)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class NodeConditionMatch(_Strict):
    type: str
    status: StrList = Field(default_factory=lambda: ["True"])
    reason: StrList | None = None
    message_regex: RegexList | None = None


class PodConditionMatch(_Strict):
    type: str
    status: StrList = Field(default_factory=lambda: ["True"])
    reason: StrList | None = None


class XidMatch(_Strict):
    """`node_xid`: an Xid of `in` within `window_s` of the termination (default: the rule's
    `window_s`), on a GPU the container was given (`gpu: assigned`, the default: an Xid on
    another GPU of the node is not this container's evidence; one whose GPU or the
    container's GPUs are unknown still counts) or on any GPU of the node (`gpu: any`)."""

    xids: IntList = Field(alias="in", min_length=1)
    window_s: float | None = Field(None, gt=0)
    gpu: Literal["assigned", "any"] = "assigned"


class Recency(_Strict):
    """How old log evidence may be before it counts less. A log line is stale when it was
    written more than `within_s` before the termination (by the timestamps the software
    prints, see logtime.py) or, with no timestamp after it to tell, when more than
    `tail_lines` lines follow it. A rule whose `when` rests on stale log lines only scores
    `stale_penalty` less: a CUDA OOM the application caught half an hour before a liveness
    kill does not outweigh the kill."""

    within_s: float = Field(300.0, gt=0)
    tail_lines: int = Field(100, ge=1)
    stale_penalty: float = Field(0.4, ge=0, le=1)


def _term(text: str) -> re.Pattern[str]:
    """One vocabulary term, case-insensitive, matched where a word starts: `oom` finds
    "OOM" and "OOMKilled" but not "room"; `cuda` finds "cudaMalloc" and "CUDA0"."""
    body = _compile(text).pattern.removeprefix("(?i)")
    return re.compile(r"(?i)(?<![A-Za-z0-9])(?:" + body + ")")


def _terms(value: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise ValueError("a group is a non-empty list of terms")
    return [_term(t) if not isinstance(t, re.Pattern) else t for t in value]


def _unless(value: Any) -> Any:
    return [_compile("(?i)" + t.removeprefix("(?i)")) if isinstance(t, str) else _compile(t)
            for t in (_as_list(value) or [])]


TermGroup = Annotated[list[Regex], BeforeValidator(_terms)]


class LogWords(_Strict):
    """`log_words`: the vocabulary of a failure rather than one program's sentence. A log line
    counts when it holds a term of every group in `all` (terms are case-insensitive regular
    expressions matched where a word starts) and matches none of `unless` (case-insensitive
    regular expressions: the red herrings, such as host memory for a GPU-memory rule):

        log_words:
          all: [[out of memory, oom, insufficient \\w* ?memory], [cuda, gpu, device]]
          unless: ["shared memory", "/dev/shm"]

    Several mappings in a list: any of them."""

    all_of: list[TermGroup] = Field(alias="all", min_length=1)
    unless: Annotated[list[Regex], BeforeValidator(_unless)] = Field(default_factory=list)


class Conditions(_Strict):
    """One set of conditions; every one given must hold. Keys are as written in rule files."""

    terminated_reason: StrList | None = Field(None, alias="terminated.reason")
    terminated_exit_code: ExitCodes | None = Field(None, alias="terminated.exit_code")
    terminated_message_regex: RegexList | None = Field(None, alias="terminated.message_regex")
    signal: IntList | None = None
    ran_for_at_most_s: float | None = Field(None, gt=0)
    waiting_reason: StrList | None = None
    waiting_message_regex: RegexList | None = None
    log_regex: RegexList | None = None
    log_words: Annotated[list[LogWords], BeforeValidator(_as_list)] | None = None
    log_traceback: bool | None = None
    log_exception_regex: RegexList | None = None
    log_traceback_regex: RegexList | None = None
    pod_event_reason: StrList | None = None
    pod_event_message_regex: RegexList | None = None
    node_event_reason: StrList | None = None
    node_event_message_regex: RegexList | None = None
    node_condition: Annotated[list[NodeConditionMatch], BeforeValidator(_as_list)] | None = None
    node_xid_in: IntList | None = None
    node_xid: Annotated[list[XidMatch], BeforeValidator(_as_list)] | None = None
    pod_reason: StrList | None = None
    pod_message_regex: RegexList | None = None
    pod_condition: Annotated[list[PodConditionMatch], BeforeValidator(_as_list)] | None = None
    pod_deleting: bool | None = None
    workload_rolling_out: bool | None = None
    trigger: Annotated[list[Literal["restart", "terminated", "pod-failed", "waiting"]],
                       BeforeValidator(_as_list)] | None = None
    evicted_by_gpuops: bool | None = None
    container_kind: Annotated[list[Literal["init", "sidecar", "app"]],
                              BeforeValidator(_as_list)] | None = None
    limits_set: StrList | None = None
    namespace: StrList | None = None
    image_regex: RegexList | None = None
    any_of: list[Conditions] | None = Field(None, alias="any", min_length=1)
    none_of: Conditions | None = Field(None, alias="not")

    @model_validator(mode="after")
    def _not_empty(self) -> Conditions:
        if not self.given():
            raise ValueError("a condition set needs at least one condition")
        return self

    def given(self) -> list[tuple[str, Any]]:
        """The conditions set in this mapping, as (key as written in files, value)."""
        return [(CONDITION_KEYS[name], getattr(self, name)) for name in type(self).model_fields
                if getattr(self, name) is not None]


#: field name -> the key rule files use
CONDITION_KEYS = {name: (f.alias or name) for name, f in Conditions.model_fields.items()}


class Rule(_Strict):
    id: str = Field(pattern=_ID)
    cause: str = Field(pattern=_ID)
    title: str = Field(min_length=1, max_length=140)
    confidence: float = Field(ge=0, le=1)
    priority: int = 0
    fault: bool = True
    window_s: float = Field(600.0, gt=0)
    bonus: float = Field(0.02, ge=0, le=0.2)
    recency: Recency = Field(default_factory=Recency)
    explanation: str = ""
    when: Conditions
    supporting: list[Conditions] = Field(default_factory=list)
    override: bool = False
    enabled: bool = True


class RuleFile(_Strict):
    #: a place for YAML anchors shared by rules (the Xid classes); not read otherwise
    definitions: dict[str, Any] = Field(default_factory=dict)
    rules: list[Rule]


@dataclass(frozen=True)
class RuleSet:
    """An ordered set of rules with unique ids (later files override by id, explicitly)."""

    rules: tuple[Rule, ...]

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def ids(self) -> list[str]:
        return [r.id for r in self.rules]

    def get(self, rule_id: str) -> Rule | None:
        return next((r for r in self.rules if r.id == rule_id), None)

    def enabled(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.enabled)

    def causes(self) -> list[str]:
        return sorted({r.cause for r in self.rules if r.enabled})


def _condition_hint() -> str:
    return "known conditions: " + ", ".join(CONDITION_KEYS.values())


def _read(path_or_text: str | Path) -> tuple[str, str | None]:
    """(text, source name): a `Path`, or a one-line string ending in .yaml/.yml, is a file."""
    if isinstance(path_or_text, Path) or (
            "\n" not in path_or_text and path_or_text.strip().endswith((".yaml", ".yml"))):
        path = Path(path_or_text)
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except OSError as e:
            raise ConfigError("path", f"cannot read rule file {str(path)!r}: {e.strerror}",
                              source=str(path)) from e
    return path_or_text, None


def parse_rules(text: str, *, source: str | None = None) -> list[tuple[Rule, int | None]]:
    """Validate one rule file: its rules with the line each starts on."""
    doc = parse_yaml(text, source=source)
    data = doc.data
    wrapped = isinstance(data, list)
    if data is None:
        return []
    if not isinstance(data, (list, dict)):
        raise ConfigError("rules", "a rule file is a list of rules, or a mapping with `rules:`",
                          line=doc.line_of(()), source=source)
    try:
        parsed = RuleFile.model_validate({"rules": data} if wrapped else data)
    except ValidationError as e:
        loc = ordered_errors(e)[0]["loc"]
        hint = _condition_hint() if _in_conditions(loc) else ""
        raise doc.config_error(e, wrapper=["rules"] if wrapped else [], hint=hint) from e
    return [(rule, doc.line_of([i] if wrapped else ["rules", i]))
            for i, rule in enumerate(parsed.rules)]


def _in_conditions(loc: tuple[Any, ...]) -> bool:
    """Whether an error sits inside a condition mapping (then list the known conditions)."""
    parents = [part for part in loc[:-1] if not isinstance(part, int)]
    return bool(parents) and parents[-1] in ("when", "supporting", "any", "not")


@lru_cache(maxsize=1)
def default_rules() -> RuleSet:
    """The shipped rules (`gpuops/tasks/restarts/restart_rules.yaml`), parsed once."""
    shipped = resources.files("gpuops.tasks.restarts").joinpath(SHIPPED_RULES)
    text = shipped.read_text(encoding="utf-8")
    return merge_rules(RuleSet(()), parse_rules(text, source=SHIPPED_RULES),
                       source=SHIPPED_RULES)


def load_rules(path_or_text: str | Path, *, base: RuleSet | None = None) -> RuleSet:
    """The rules of `base` (default: the shipped ones) extended by an operator's rule file.

    A rule whose id is already known must say `override: true`; one that says so but
    overrides nothing is refused too (a misspelt id would otherwise add a rule silently)."""
    text, source = _read(path_or_text)
    return merge_rules(default_rules() if base is None else base,
                       parse_rules(text, source=source), source=source)


def merge_rules(base: RuleSet, new: Iterable[tuple[Rule, int | None]], *,
                source: str | None = None) -> RuleSet:
    rules = list(base.rules)
    index = {r.id: i for i, r in enumerate(rules)}
    seen_here: dict[str, int | None] = {}
    for rule, line in new:
        if rule.id in seen_here:
            raise ConfigError("id", f"rule id {rule.id!r} appears twice in this file (first "
                              f"at line {seen_here[rule.id]})", line=line, source=source)
        seen_here[rule.id] = line
        if rule.id in index:
            if not rule.override:
                raise ConfigError("id", f"rule id {rule.id!r} is already defined; to replace "
                                  "it, add `override: true` to this rule", line=line,
                                  source=source)
            rules[index[rule.id]] = rule
        elif rule.override:
            raise ConfigError("override", f"rule {rule.id!r} says `override: true` but no rule "
                              f"with that id exists (known: {', '.join(sorted(index))})",
                              line=line, source=source)
        else:
            index[rule.id] = len(rules)
            rules.append(rule)
    return RuleSet(tuple(rules))
