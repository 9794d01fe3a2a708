"""The life of a pod on its node, as a pure event-driven state machine over virtual time.

Every transition (image pulled, container started, probe passed, container exited, back-off
over) happens at a computed virtual time, and `advance(pod, now)` applies the due ones in time
order with their own timestamps. So a clock jump of ten minutes replays ten minutes of crash
loop exactly (10 s, 20 s, 40 s back-offs), and a pod that nobody looks at costs nothing until
its next deadline. The store, events and logs are reached only through `World` (questions) and
`Outbox` (effects), which the kubelet plumbing provides: this module touches no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

from . import containerlogs as text
from .backoff import after_restart, delay_before_restart, go_duration
from .containerplan import plan_instance, replan
from .env import expand
from .runtime import (
    INF,
    ContainerRuntime,
    Instance,
    Outbox,
    PodRuntime,
    Termination,
    World,
    compute_phase,
    container_id,
    image_id,
    image_size,
    timestamp,
    update_conditions,
)
from .spec import PodSpecView

MAX_TRANSITIONS_PER_ADVANCE = 20_000


# --- driving ------------------------------------------------------------------------------------

def advance(pod: PodRuntime, now: float, world: World, out: Outbox) -> None:
    """Apply every transition due at or before `now`, each at its own virtual time."""
    for _ in range(MAX_TRANSITIONS_PER_ADVANCE):
        t = pod.next_due()
        if t > now:
            return
        if pod.terminating_at is not None:
            _finish_termination(pod, t, out)
        elif pod.sandbox_ready_at is None and pod.sandbox_due <= t:
            _create_sandbox(pod, t, world, out)
        elif pod.spec.active_deadline is not None and \
                pod.admitted_at + pod.spec.active_deadline <= t:
            fail_pod(pod, t, out, "DeadlineExceeded",
                     "Pod was active on the node longer than the specified deadline")
        else:
            c = min(pod.containers, key=lambda x: x.due)
            _fire(pod, c, t, world, out)
        _settle(pod, t, out)


def _settle(pod: PodRuntime, t: float, out: Outbox) -> None:
    """Pod-wide consequences of a transition: phase, sidecar shutdown, conditions."""
    if pod.done is None:
        phase = compute_phase(pod)
        if phase in ("Succeeded", "Failed"):
            _stop_sidecars(pod, t, out)
            pod.done = "terminal"
        pod.phase = phase
    update_conditions(pod, t)


def _create_sandbox(pod: PodRuntime, t: float, world: World, out: Outbox) -> None:
    for ref in pod.spec.volume_refs:
        error = world.config_error(pod, (ref,))
        if error:
            out.event("FailedMount", f'MountVolume.SetUp failed for volume "{ref.volume}" : '
                      f"{error}", "Warning")
            pod.mount_retry = min(max(pod.mount_retry * 2, 2.0), pod.tun.mount_retry_cap)
            pod.sandbox_due = t + pod.mount_retry
            return
    pod.sandbox_ready_at = t
    kick(pod, t, world, out)


def recheck_config(pod: PodRuntime, now: float) -> None:
    """A ConfigMap or Secret appeared: retry blocked mounts and container configs now."""
    if pod.sandbox_ready_at is None:
        pod.sandbox_due = min(pod.sandbox_due, now)
    for c in pod.containers:
        if c.stage == "config-error":
            c.due = min(c.due, now)


def kick(pod: PodRuntime, t: float, world: World, out: Outbox) -> None:
    """Start what may start: init containers one by one, then every app container."""
    if pod.done or pod.terminating_at is not None or pod.sandbox_ready_at is None:
        return
    for c in pod.containers:
        if c.spec.role == "app":
            break
        if c.stage == "pending":
            _begin(pod, c, t, world, out)
            return
        if c.spec.role == "init" and c.stage != "completed":
            return
        if c.spec.role == "sidecar" and not c.ever_started:
            return
    if pod.initialized_at is None:
        pod.initialized_at = t
        for c in pod.app():
            c.waiting_reason = "ContainerCreating"
    for c in pod.app():
        if c.stage == "pending":
            _begin(pod, c, t, world, out)


# --- container steps ----------------------------------------------------------------------------

def _fire(pod: PodRuntime, c: ContainerRuntime, t: float, world: World, out: Outbox) -> None:
    if c.stage == "pulling":
        _finish_pull(pod, c, t, world, out)
    elif c.stage == "pull-error":
        c.stage, c.waiting_reason = "pull-backoff", "ImagePullBackOff"
        c.waiting_message = f'Back-off pulling image "{c.spec.image}"'
        out.event("BackOff", c.waiting_message)
        out.event("Failed", "Error: ImagePullBackOff", "Warning")
        c.due = t + max(0.0, c.retry_delay - pod.tun.show_err_image_pull)
    elif c.stage == "pull-backoff":
        _pull(pod, c, t, world, out)
    elif c.stage == "config-error":
        _create(pod, c, t, world, out)
    elif c.stage == "backoff":
        c.backoff = after_restart(c.backoff, c.finished_at, t)
        _begin(pod, c, t, world, out)
    elif c.stage == "running":
        _fire_instance(pod, c, t, world, out)
    else:
        c.due = INF


def _begin(pod: PodRuntime, c: ContainerRuntime, t: float, world: World, out: Outbox) -> None:
    policy = c.spec.pull_policy
    if policy == "Never" or (policy != "Always" and world.image_present(pod, c.spec.image)):
        out.event("Pulled", f'Container image "{c.spec.image}" already present on machine')
        if not c.image_id:
            c.image_id = image_id(c.spec.image)
        _create(pod, c, t, world, out)
        return
    _pull(pod, c, t, world, out)


def _pull(pod: PodRuntime, c: ContainerRuntime, t: float, world: World, out: Outbox) -> None:
    out.event("Pulling", f'Pulling image "{c.spec.image}"')
    c.stage, c.pull_started = "pulling", t
    if world.pull_error(pod, c.spec):
        c.due = t + pod.tun.pull_fail_seconds
    elif world.image_present(pod, c.spec.image):
        c.due = t + 0.5  # pull policy Always: only the manifest is fetched
    else:
        c.due = t + c.spec.pull_seconds


def _finish_pull(pod: PodRuntime, c: ContainerRuntime, t: float, world: World,
                 out: Outbox) -> None:
    image = c.spec.image
    error = world.pull_error(pod, c.spec)
    if error:
        out.event("Failed", f'Failed to pull image "{image}": {error}', "Warning")
        out.event("Failed", "Error: ErrImagePull", "Warning")
        c.pull_backoff = after_restart(c.pull_backoff, t, t)
        c.retry_delay = c.pull_backoff.delay
        c.stage, c.waiting_reason, c.waiting_message = "pull-error", "ErrImagePull", error
        c.due = t + min(pod.tun.show_err_image_pull, c.retry_delay)
        return
    took = go_duration(t - c.pull_started)
    out.event("Pulled", f'Successfully pulled image "{image}" in {took} ({took} including '
              f"waiting). Image size: {image_size(image)} bytes.")
    world.image_pulled(pod, image)
    c.image_id, c.pull_backoff = image_id(image), None
    _create(pod, c, t, world, out)


def _create(pod: PodRuntime, c: ContainerRuntime, t: float, world: World, out: Outbox) -> None:
    error = world.config_error(pod, c.spec.config_refs)
    if error:
        out.event("Failed", f"Error: {error}", "Warning")
        c.stage, c.waiting_reason, c.waiting_message = "config-error", \
            "CreateContainerConfigError", error
        c.retry_delay = min(max(c.retry_delay * 2, 10.0), 60.0)
        c.due = t + c.retry_delay
        return
    c.retry_delay = 0.0
    _start_instance(pod, c, t, world, out)


def _start_instance(pod: PodRuntime, c: ContainerRuntime, t: float, world: World,
                    out: Outbox) -> None:
    if c.instances > 0:
        c.restart_count += 1
        if c.terminated is not None:
            c.last_terminated = c.terminated
    c.instances += 1
    c.terminated = None
    cid = container_id(pod.uid, c.name, c.restart_count)
    out.event("Created", f"Created container: {c.name}")
    out.event("Started", f"Started container {c.name}")
    c.instance = plan_instance(pod, c.spec, cid, t, world)
    c.stage, c.waiting_reason, c.waiting_message = "running", None, None
    shown = c.spec  # the command line as the process sees it: `$(VAR)` expanded
    if c.spec.refers_to_env:
        env = world.environment(pod, c.spec)
        shown = dataclasses.replace(c.spec, args=tuple(expand(a, env) for a in c.spec.args))
    out.log(c.name, t, text.start_lines(shown, t, pod.ctx))
    c.due = c.instance.next_due()


def update_spec(pod: PodRuntime, view: PodSpecView, now: float, world: World,
                out: Outbox) -> None:
    """The pod's spec or annotations changed: a changed image restarts its container."""
    pod.spec = view
    by_name = {s.name: s for s in view.containers}
    for c in pod.containers:
        new = by_name.get(c.name)
        if new is None:
            continue
        changed = new.image != c.spec.image
        c.spec = new
        if changed and c.stage == "running" and c.instance is not None:
            out.event("Killing", f"Container {c.name} definition changed, will be restarted")
            c.instance.forced_end = Termination(now, 0, "Completed", "changed")
    replan(pod, now, world)


def _fire_instance(pod: PodRuntime, c: ContainerRuntime, t: float, world: World,
                   out: Outbox) -> None:
    """Everything this instance has due at `t`, in order; its end comes last."""
    inst = c.instance
    assert inst is not None
    _write_steady(pod, c, inst, t, out)
    if not inst.loaded_logged and inst.loaded_at <= t:
        inst.loaded_logged = True
        if c.spec.load_seconds > 0 or c.spec.workload == "serving":
            out.log(c.name, inst.loaded_at, text.loaded_lines(c.spec, inst.loaded_at, pod.ctx))
    if not inst.started and inst.startup_ok_at <= t:
        inst.started = c.ever_started = True
        if c.spec.role == "sidecar":
            kick(pod, t, world, out)
    if not inst.ready and inst.ready_at <= t:
        inst.ready = True
        probe = c.spec.readiness
        if probe and inst.ready_at > inst.started_at + probe.initial_delay:
            out.event("Unhealthy", "Readiness probe failed: "
                      + probe.failure(pod.pod_ip, loading=True), "Warning")
    if inst.end and inst.end.at <= t:
        _terminate(pod, c, inst.end, world, out)
        return
    c.due = inst.next_due()


def _write_steady(pod: PodRuntime, c: ContainerRuntime, inst: Instance, t: float,
                  out: Outbox) -> None:
    """Write the steady lines the instance printed up to `t` (at most the last
    `max_backfill_lines` of a long quiet spell: a reader wants the recent ones)."""
    tun = pod.tun
    if c.spec.role == "init" or t < inst.steady_from:
        return
    last = math.floor((t - inst.steady_from) / tun.log_interval + 1e-9)
    first = max(inst.steady_written, last - tun.max_backfill_lines + 1)
    for index in range(first, last + 1):
        ts = inst.steady_from + index * tun.log_interval
        out.log(c.name, ts, [text.steady_line(c.spec, ts, index, pod.ctx)])
    inst.steady_written = max(inst.steady_written, last + 1)


def flush_steady_lines(pod: PodRuntime, container: str, now: float, out: Outbox) -> None:
    """Someone reads the log: write what a running instance has printed so far, but never
    past a transition still to be applied (its lines must come first)."""
    c = pod.container(container)
    if c is None or c.stage != "running" or c.instance is None:
        return
    _write_steady(pod, c, c.instance, min(now, pod.next_due()), out)


def _failure_lines(pod: PodRuntime, c: ContainerRuntime, end: Termination) -> list[str]:
    p = end.fault.params if end.fault else {}
    if end.cause == "crashloop":
        return text.crash_lines(p)
    if end.cause in ("oom", "memory"):
        return text.oom_lines(c.spec, end.at, pod.ctx)
    if end.cause == "cuda-oom":
        return text.cuda_oom_lines(p, pod.ctx)
    if end.cause == "nccl-timeout":
        return text.nccl_timeout_lines(p, end.at, pod.ctx)
    if end.cause == "gpu-xid":
        return text.xid_lines(int(p.get("xid", 79)), first=bool(end.fault and
                                                                 end.fault.fired == 0))
    if end.cause == "config-error":
        return text.config_error_lines(p)
    if end.cause == "run":
        if end.exit_code == 0:
            return text.completion_lines(c.spec, end.at, pod.ctx)
        return text.crash_lines({"error": "RuntimeError: step failed: loss is NaN"})
    return []


def _terminate(pod: PodRuntime, c: ContainerRuntime, end: Termination, world: World,
               out: Outbox) -> None:
    inst = c.instance
    assert inst is not None
    t = end.at
    out.log(c.name, t, _failure_lines(pod, c, end))
    if end.cause in ("liveness", "startup"):
        probe = c.spec.liveness if end.cause == "liveness" else c.spec.startup
        assert probe is not None
        what = "Liveness" if end.cause == "liveness" else "Startup"
        message = f"{what} probe failed: " + probe.failure(pod.pod_ip, loading=end.loading)
        for _ in range(min(probe.failure_threshold, 10)):
            out.event("Unhealthy", message, "Warning")
        out.event("Killing", f"Container {c.name} failed {what.lower()} probe, will be "
                  "restarted")
    if end.cause == "gpu-xid" and end.fault is not None and end.fault.fired == 0 \
            and not end.fault.params.get("recorded"):
        out.xids.append({"xid": int(end.fault.params.get("xid", 79)),
                         "gpu": int(end.fault.params.get("gpu", 0)), "container": c.name,
                         "time": t})
    if end.fault is not None:
        world.fault_fired(pod, c.name, end.fault)
    c.terminated = terminated_state(end.exit_code, end.reason, inst, t)
    c.instance, c.finished_at = None, t
    restart = _restarts(pod, c, end.exit_code)
    if restart and not (c.spec.role == "init" and end.exit_code == 0):
        # The log of the instance that just ended is from now on the "previous" one: it is
        # what `kubectl logs --previous` shows both during the back-off and after the restart.
        out.rotate(c.name)
    if c.spec.role == "init" and end.exit_code == 0:
        c.stage, c.due = "completed", INF
        kick(pod, t, world, out)
    elif restart and end.cause == "changed":
        _begin(pod, c, t, world, out)
    elif restart:
        delay = delay_before_restart(c.backoff, t)
        if delay == 0:
            c.backoff = after_restart(c.backoff, t, t)
            _begin(pod, c, t, world, out)
        else:
            c.stage, c.waiting_reason, c.due = "backoff", "CrashLoopBackOff", t + delay
            c.waiting_message = (f"back-off {go_duration(delay)} restarting failed "
                                 f"container={c.name} pod={pod.formatted}")
            out.event("BackOff", f"Back-off restarting failed container {c.name} in pod "
                      f"{pod.formatted}", "Warning")
    else:
        c.stage, c.due = "exited", INF


def _restarts(pod: PodRuntime, c: ContainerRuntime, exit_code: int) -> bool:
    if pod.terminating_at is not None or pod.done:
        return False
    if c.spec.role == "sidecar":
        return True
    policy = pod.spec.restart_policy
    if c.spec.role == "init":
        return exit_code != 0 and policy != "Never"
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def terminated_state(exit_code: int, reason: str, inst: Instance, at: float) -> dict[str, Any]:
    return {"exitCode": exit_code, "reason": reason, "startedAt": timestamp(inst.started_at),
            "finishedAt": timestamp(at), "containerID": inst.container_id}


def _stop(pod: PodRuntime, c: ContainerRuntime, t: float, exit_code: int, reason: str,
          out: Outbox) -> None:
    if c.stage == "running" and c.instance is not None:
        _write_steady(pod, c, c.instance, t, out)
        c.terminated = terminated_state(exit_code, reason, c.instance, t)
        c.instance, c.finished_at = None, t
    if c.stage not in ("completed",):
        c.stage, c.due = "exited", INF


def _stop_sidecars(pod: PodRuntime, t: float, out: Outbox) -> None:
    for c in pod.containers:
        if c.spec.role == "sidecar" and c.stage != "exited":
            if c.stage == "running":
                out.event("Killing", f"Stopping container {c.name}")
            _stop(pod, c, t, 0, "Completed", out)


# --- pod-wide endings ---------------------------------------------------------------------------

def begin_termination(pod: PodRuntime, now: float, grace: float, out: Outbox) -> None:
    """The pod got a deletionTimestamp: stop its containers within the grace period."""
    if pod.terminating_at is not None or pod.done:
        return
    pod.terminating_at = now
    shutdown = 1.0 + (int(hashlib.sha1(pod.uid.encode()).hexdigest()[:4], 16) % 1000) / 1000
    pod.finalize_at = now + max(0.0, min(grace, shutdown))
    for c in pod.containers:
        if c.stage == "running":
            out.event("Killing", f"Stopping container {c.name}")


def _finish_termination(pod: PodRuntime, t: float, out: Outbox) -> None:
    for c in pod.containers:
        if c.stage == "running":
            _stop(pod, c, t, 0, "Completed", out)
    app = pod.app()
    ok = all(c.terminated is None or c.terminated["exitCode"] == 0 for c in app)
    pod.phase = "Succeeded" if ok and pod.initialized_at is not None else "Failed"
    pod.done = "deleted"
    pod.finalize_at = INF


def fail_pod(pod: PodRuntime, t: float, out: Outbox, reason: str, message: str, *,
             disruption: bool = False) -> None:
    """The kubelet ends the pod itself (eviction, active deadline): phase Failed, kept."""
    if pod.done:
        return
    out.event(reason, message, "Warning")
    for c in pod.containers:
        if c.stage == "running":
            out.event("Killing", f"Stopping container {c.name}")
            _stop(pod, c, t, 137, "Error", out)
        elif c.stage != "completed":
            c.stage, c.due = "exited", INF
    pod.failure = (reason, message)
    pod.phase, pod.done = "Failed", "terminal"
    if disruption:
        pod.extra_conditions.append({"type": "DisruptionTarget", "status": "True",
                                     "lastProbeTime": None, "lastTransitionTime": timestamp(t),
                                     "reason": "TerminationByKubelet", "message": message})
    update_conditions(pod, t)
