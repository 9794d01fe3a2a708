"""A rollout's parameters, validated before anything is read or changed (pure).

What a person gives (the flow's form, the CLI, a RolloutPolicy Block's defaults) becomes one
frozen `RolloutSpec`; every bad value is a `ConfigError` naming the parameter, so a rollout
with a typo stops before it touches the cluster.

- The pool: `namespace/name` of the InferencePool serving today (`name` alone: `default`).
- The new version: an image, a model (the `--model` vLLM loads), engine flags (`--flag=value`
  sets that flag, `--flag` adds a switch); at least one of them.
- Steps: the new version's traffic percentages, increasing, each in 1..100, ending at 100
  (1 -> 5 -> 25 -> 50 -> 100 by default). Every step below 100 is judged; 100 is the end.
- Analysis: the gates and the least requests a window needs on each side (`gates.py`); the
  window (seconds) after each step; how long a window may be extended while it waits for
  requests before the step counts as failed.
- Warm-up before any traffic: Ready, `/v1/models` answering, then batches of synthetic
  requests until two batches in a row have about the same TTFT (the cold period is over).
- Mode: `blue-green` (a full new copy beside the old: needs spare GPUs), `fixed-capacity`
  (no spare GPUs: shrink the old by k replicas, grow the new by k, weights tied to the ready
  replicas on each side), `auto` (blue-green when the GPUs are there).
- No room for blue-green: `fixed-capacity` (above), or `prewarm`: the new replicas are made
  and the pods the scheduler cannot place are named to the capacity side
  (`gpuops.gpu.capacity-needed`, which raises the node pool that would hold them), then the
  run waits up to `prewarm_timeout_s` for them to be placed and goes blue-green; on time out
  the new replicas go (nothing left Pending) and it falls back to fixed-capacity or fails
  (`prewarm_fallback`).
- Baseline: `none` (the new version judged against the old pool), `fresh-copy` (blue-green
  only: a fresh copy of the old version as large as the new one, started and warmed with it,
  given the new one's weight below 50 %, so the two are judged at equal loads from the first
  step; its GPUs are needed too, else the plan says so and runs without it) or `auto`
  (the default, Kayenta's practice: fresh-copy when there is room for it, else none).
- Steps that adapt to traffic (`adapt_steps`, on when the steps are the built-in ones): before
  the first step the old pool's request rate is measured, and a first step whose window would
  not see `min_requests` new-version requests is raised to the least weight that would, at
  most `max_first_step` %; the timeline says why. Steps a person gave are kept as given.
- Approval: before 100 % (`final`), before every step (`every-step`) or `none`.
- After success: the old version kept warm `keep_old_s`, then scaled to 0 or deleted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

from gpuops.common.errors import ConfigError
from gpuops.tasks.rollout.gates import Analysis, parse_analysis

Mode = Literal["auto", "blue-green", "fixed-capacity"]
Approve = Literal["final", "every-step", "none"]
OnSuccess = Literal["scale-to-zero", "delete"]
Baseline = Literal["auto", "none", "fresh-copy"]
BASELINES: tuple[Baseline, ...] = ("auto", "none", "fresh-copy")
NoRoom = Literal["fixed-capacity", "prewarm"]
NO_ROOM: tuple[NoRoom, ...] = ("fixed-capacity", "prewarm")
PrewarmFallback = Literal["fixed-capacity", "fail"]
PREWARM_FALLBACKS: tuple[PrewarmFallback, ...] = ("fixed-capacity", "fail")
MODES: tuple[Mode, ...] = ("auto", "blue-green", "fixed-capacity")
APPROVALS: tuple[Approve, ...] = ("final", "every-step", "none")
ON_SUCCESS: tuple[OnSuccess, ...] = ("scale-to-zero", "delete")
DEFAULT_STEPS = (1, 5, 25, 50, 100)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_FLAG = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9-]*(=.*)?$")
# An image reference: [registry[:port]/]path[:tag][@digest], no spaces.
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$")


@dataclass(frozen=True)
class PoolName:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class VersionChange:
    """What differs in the new version; None / empty: as the old one."""

    image: str | None = None
    model: str | None = None
    args: tuple[str, ...] = ()  # `--flag=value` or `--flag`


@dataclass(frozen=True)
class Timing:
    window_s: float = 300.0
    step_timeout_s: float = 1800.0  # a step's window extended while it WAITs, at most this
    poll_s: float = 15.0  # how often an extended window is judged again
    ready_timeout_s: float = 1800.0  # new replicas Ready and warm within this
    warmup_requests: int = 10  # per replica and batch
    warmup_interval_s: float = 15.0  # between warm-up batches
    warm_tolerance: float = 0.15  # two batches' TTFT means this close: warm
    keep_old_s: float = 3600.0


@dataclass(frozen=True)
class RolloutSpec:
    pool: PoolName
    change: VersionChange
    steps: tuple[int, ...] = DEFAULT_STEPS
    analysis: Analysis = field(default_factory=Analysis)
    timing: Timing = field(default_factory=Timing)
    mode: Mode = "auto"
    capacity_step: int = 1  # k: replicas moved at a time in fixed-capacity mode
    approve: Approve = "final"
    on_success: OnSuccess = "scale-to-zero"
    container: str | None = None  # the vLLM container, when the pod has several
    baseline: Baseline = "auto"
    no_room: NoRoom = "fixed-capacity"
    prewarm_timeout_s: float = 900.0  # pre-warm: the new pods placed within this
    prewarm_fallback: PrewarmFallback = "fixed-capacity"
    adapt_steps: bool = True  # the first step raised to what the traffic can judge
    max_first_step: int = 10  # ... at most this %


def parse_pool(raw: object, field: str = "pool") -> PoolName:
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(field, f"must name an InferencePool as `namespace/name`, got {raw!r}")
    namespace, _, name = raw.strip().rpartition("/")
    namespace = namespace or "default"
    for part, what in ((namespace, "namespace"), (name, "name")):
        if len(part) > 63 or not _DNS_LABEL.fullmatch(part):
            raise ConfigError(field, f"{what} {part!r} is not a Kubernetes name (lowercase "
                              "letters, digits and '-', at most 63)")
    return PoolName(namespace, name)


def parse_steps(raw: object, field: str = "steps") -> tuple[int, ...]:
    if raw is None:
        return DEFAULT_STEPS
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence) or not raw:
        raise ConfigError(field, f"must be a list of percentages ending at 100, like "
                          f"{list(DEFAULT_STEPS)}, got {raw!r}")
    steps: list[int] = []
    for i, step in enumerate(raw):
        if isinstance(step, bool) or not isinstance(step, int):
            raise ConfigError(f"{field}[{i}]", f"must be an integer percentage, got {step!r}")
        if not 1 <= step <= 100:
            raise ConfigError(f"{field}[{i}]", f"must be within 1..100, got {step}")
        if steps and step <= steps[-1]:
            raise ConfigError(f"{field}[{i}]", f"must be above the step before it "
                              f"({steps[-1]}), got {step}")
        steps.append(step)
    if steps[-1] != 100:
        raise ConfigError(field, f"must end at 100 (the new version serving everything), "
                          f"ends at {steps[-1]}")
    return tuple(steps)


def _seconds(raw: object, field: str, *, low: float = 0.0, allow_zero: bool = False) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ConfigError(field, f"must be a number of seconds, got {raw!r}")
    if raw < low or (raw == low and not allow_zero):
        raise ConfigError(field, f"must be {'>=' if allow_zero else '>'} {low:g}, got {raw}")
    return float(raw)


def _count(raw: object, field: str, *, low: int = 1) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < low:
        raise ConfigError(field, f"must be an integer >= {low}, got {raw!r}")
    return raw


def _choice(raw: object, field: str, choices: Sequence[str]) -> str:
    if raw not in choices:
        raise ConfigError(field, f"must be one of {', '.join(choices)}, got {raw!r}")
    return str(raw)


def parse_change(image: object, model: object, args: object) -> VersionChange:
    if image is not None and (not isinstance(image, str) or not _IMAGE.fullmatch(image)):
        raise ConfigError("image", f"must be a container image reference "
                          f"(`vllm/vllm-openai:v0.12.0`), got {image!r}")
    if model is not None and (not isinstance(model, str) or not model.strip()
                              or any(c.isspace() for c in model)):
        raise ConfigError("model", f"must be the model vLLM loads (`--model`), e.g. "
                          f"`meta-llama/Llama-3.1-8B-Instruct`, got {model!r}")
    flags: list[str] = []
    if args is not None:
        if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
            raise ConfigError("args", f"must be a list of engine flags like "
                              f"['--max-num-seqs=512'], got {args!r}")
        seen: dict[str, int] = {}
        for i, flag in enumerate(args):
            if not isinstance(flag, str) or not _FLAG.fullmatch(flag):
                raise ConfigError(f"args[{i}]", f"must be `--flag=value` or `--flag`, got "
                                  f"{flag!r}")
            name = flag.split("=", 1)[0]
            if name in ("--model", "--served-model-name"):
                raise ConfigError(f"args[{i}]", f"{name} is not an engine flag to change "
                                  "here: set `model` (the served model name is kept)")
            if name in seen:
                raise ConfigError(f"args[{i}]", f"{name} is given twice (also args[{seen[name]}])")
            seen[name] = i
            flags.append(flag)
    change = VersionChange(image or None, model or None, tuple(flags))
    if change.image is None and change.model is None and not change.args:
        raise ConfigError("image", "no new version given: set `image`, `model` or `args` "
                          "(what differs from the version serving now)")
    return change


def parse_spec(*, pool: object, image: object = None, model: object = None,
               args: object = None, steps: object = None, gates: object = None,
               min_requests: object = 200, window_s: object = 300.0,
               step_timeout_s: object = 1800.0, poll_s: object = 15.0,
               ready_timeout_s: object = 1800.0, warmup_requests: object = 10,
               warmup_interval_s: object = 15.0, warm_tolerance: object = 0.15,
               keep_old_s: object = 3600.0, mode: object = "auto", capacity_step: object = 1,
               approve: object = "final", on_success: object = "scale-to-zero",
               container: object = None, baseline: object = "auto",
               no_room: object = "fixed-capacity", prewarm_timeout_s: object = 900.0,
               prewarm_fallback: object = "fixed-capacity", adapt_steps: object = None,
               max_first_step: object = 10) -> RolloutSpec:
    """Every parameter checked, the first bad one raised naming it.

    `adapt_steps` None: on when the steps are the built-in ones (`steps` None or equal to
    them), off for steps a person chose."""
    spec_pool = parse_pool(pool)
    change = parse_change(image, model, args)
    spec_steps = parse_steps(steps)
    analysis = parse_analysis(gates, min_requests)
    window = _seconds(window_s, "window_s")
    timeout = _seconds(step_timeout_s, "step_timeout_s")
    if timeout < window:
        raise ConfigError("step_timeout_s", f"must be at least window_s ({window:g}), got "
                          f"{timeout:g}")
    if not isinstance(warm_tolerance, (int, float)) or isinstance(warm_tolerance, bool) or \
            not 0 < warm_tolerance < 1:
        raise ConfigError("warm_tolerance", f"must be a fraction in (0, 1), got "
                          f"{warm_tolerance!r}")
    timing = Timing(window, timeout, _seconds(poll_s, "poll_s"),
                    _seconds(ready_timeout_s, "ready_timeout_s"),
                    _count(warmup_requests, "warmup_requests", low=0),
                    _seconds(warmup_interval_s, "warmup_interval_s"), float(warm_tolerance),
                    _seconds(keep_old_s, "keep_old_s", allow_zero=True))
    if container is not None and (not isinstance(container, str) or
                                  not _DNS_LABEL.fullmatch(container)):
        raise ConfigError("container", f"must be a container name, got {container!r}")
    return RolloutSpec(
        spec_pool, change, spec_steps, analysis, timing,
        cast(Mode, _choice(mode, "mode", MODES)), _count(capacity_step, "capacity_step"),
        cast(Approve, _choice(approve, "approve", APPROVALS)),
        cast(OnSuccess, _choice(on_success, "on_success", ON_SUCCESS)),
        container or None, cast(Baseline, _choice(baseline, "baseline", BASELINES)),
        cast(NoRoom, _choice(no_room, "no_room", NO_ROOM)),
        _seconds(prewarm_timeout_s, "prewarm_timeout_s"),
        cast(PrewarmFallback, _choice(prewarm_fallback, "prewarm_fallback",
                                      PREWARM_FALLBACKS)),
        _adapt(adapt_steps, spec_steps), _first_step_cap(max_first_step))


def _adapt(raw: object, steps: tuple[int, ...]) -> bool:
    if raw is None:
        return steps == DEFAULT_STEPS
    if not isinstance(raw, bool):
        raise ConfigError("adapt_steps", f"must be true or false, got {raw!r}")
    return raw


def _first_step_cap(raw: object) -> int:
    cap = _count(raw, "max_first_step")
    if cap >= 50:  # a baseline carries as much below 50 %: 2 x cap must leave the old some
        raise ConfigError("max_first_step", f"must be below 50 (%), got {cap}")
    return cap
