"""When a container instance will be loaded, started, ready, and when (and why) it will end.

Computed once when the instance starts, from its spec (load time, probes, run time, memory
growth) and its injected faults, and recomputed when faults change. Probe arithmetic follows
the prober: probes tick every `periodSeconds` from `initialDelaySeconds`, and a container is
killed at the `failureThreshold`-th consecutive failure.
"""

from __future__ import annotations

from .runtime import INF, Fault, Instance, PodRuntime, Termination, World
from .spec import ContainerSpec


def plan_instance(pod: PodRuntime, s: ContainerSpec, cid: str, start: float,
                  world: World) -> Instance:
    """When this container instance will be loaded, started (startup probe), ready, and end."""
    loaded = start + s.load_seconds
    startup_ok, end = start, None
    if s.startup:
        p = s.startup
        first_ok = p.tick_at_or_after(start, loaded)
        failures = round((first_ok - start - p.initial_delay) / p.period)
        if failures >= p.failure_threshold:
            startup_ok = INF
            end = Termination(start + p.initial_delay + (p.failure_threshold - 1) * p.period,
                              137, "Error", "startup", loading=True)
        else:
            startup_ok = first_ok
    if s.liveness and startup_ok < INF:
        p = s.liveness
        first = p.tick_at_or_after(start, startup_ok)
        if first < loaded:
            failures = round((p.tick_at_or_after(start, loaded) - first) / p.period)
            if failures >= p.failure_threshold:
                end = Termination(first + (p.failure_threshold - 1) * p.period, 137, "Error",
                                  "liveness", loading=True)
    if s.readiness:
        ready = s.readiness.tick_at_or_after(start, max(loaded, startup_ok))
    else:
        ready = startup_ok
    steady = max(start, loaded) + pod.tun.log_interval
    inst = Instance(cid, start, loaded, startup_ok, ready, steady, forced_end=end,
                    loaded_logged=s.role == "init")
    inst.end = _earliest(end, planned_end(pod, s, inst, world))
    return inst


def _earliest(a: Termination | None, b: Termination | None) -> Termination | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a.at <= b.at else b


def planned_end(pod: PodRuntime, s: ContainerSpec, inst: Instance,
                world: World) -> Termination | None:
    """The end that the container's own behaviour and its injected faults give it."""
    start = inst.started_at
    ends: list[Termination] = []
    if s.run_seconds is not None:
        code = s.exit_code
        ends.append(Termination(start + s.run_seconds, code, "Completed" if code == 0
                                else "Error", "run"))
    if s.memory_growth_mib_per_min and s.memory_limit_mib:
        room = max(0.0, s.memory_limit_mib - s.memory_base_mib)
        ends.append(Termination(start + room / s.memory_growth_mib_per_min * 60, 137,
                                "OOMKilled", "memory"))
    for fault in world.faults(pod, s.name):
        end = fault_end(fault, s, inst)
        if end is not None:
            ends.append(end)
    return min(ends, key=lambda e: e.at) if ends else None


_FAULT_EXITS = {"crashloop": (3.0, 1, "Error"), "oom": (5.0, 137, "OOMKilled"),
                "cuda-oom": (15.0, 1, "Error"), "nccl-timeout": (30.0, 134, "Error"),
                "gpu-xid": (1.0, 1, "Error"), "config-error": (1.0, 1, "Error")}


def fault_end(fault: Fault, s: ContainerSpec, inst: Instance) -> Termination | None:
    base = max(inst.started_at, fault.since)
    p = fault.params
    if fault.kind == "liveness":
        probe = s.liveness
        if probe is None or inst.startup_ok_at == INF:
            return None
        failing = max(base, inst.startup_ok_at)
        first = probe.tick_at_or_after(inst.started_at, failing)
        return Termination(first + (probe.failure_threshold - 1) * probe.period, 137, "Error",
                           "liveness", fault)
    if fault.kind not in _FAULT_EXITS:
        return None
    after, code, reason = _FAULT_EXITS[fault.kind]
    if fault.kind == "gpu-xid" and fault.fired and not fault.once:
        after = 5.0  # the GPU is gone: the next instance fails as soon as it touches CUDA
    after = float(p.get("after_seconds", after))
    if fault.kind == "crashloop":
        code = int(p.get("exit_code", 1))
        reason = "Completed" if code == 0 else "Error"
    return Termination(base + max(after, 0.0), code, reason, fault.kind, fault)


def replan(pod: PodRuntime, now: float, world: World) -> None:
    """Faults or annotations changed: recompute the end of every running instance."""
    for c in pod.containers:
        inst = c.instance
        if c.stage != "running" or inst is None:
            continue
        end = planned_end(pod, c.spec, inst, world)
        if end is not None and end.at < now:
            end.at = now
        inst.end = _earliest(inst.forced_end, end)
        c.due = inst.next_due()
