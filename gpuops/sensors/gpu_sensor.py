"""The cluster watcher's GPU side: stranded-GPU episodes, idle GPU nodes, and the GPU gauges.

The watcher's pod and node watches feed this (no watch of its own: one watcher per cluster).
It keeps the latest pods and nodes, and at most once per `GPUOPS_WATCHER_GPU_SCAN_INTERVAL_S`
after a change (or while an episode is going on) assesses them (`tasks/rebalance/stranded`:
which pending GPU pods are stranded, the measures), updates the gauges, and advances the
stranded-GPU episode (`tasks/rebalance/episodes`): `gpuops.gpu.stranded` is sent once per
episode, when GPU pods have stayed stranded `GPUOPS_WATCHER_STRANDED_AFTER_S`; the episode
ends when none has been for as long.

Idle GPUs come from Prometheus (DCGM exporter's `DCGM_FI_DEV_GPU_UTIL`), polled every
`GPUOPS_WATCHER_GPU_IDLE_POLL_S`: a node whose allocated GPUs all stay at or below
`GPUOPS_WATCHER_GPU_IDLE_UTIL_PCT` for `GPUOPS_WATCHER_GPU_IDLE_AFTER_S` gets one
`gpuops.node.gpu-idle` per episode. A Prometheus that cannot be reached skips the poll (the
episodes stay as they were).

Across a restart: the episodes are saved next to the watcher's state file
(`<state>.gpu-episodes.json`, written when one starts, is reported or ends). A restarted
watcher resumes a saved episode whose pods (or node) are still stranded (idle) at its first
look, so the same episode is not reported twice; one that ended meanwhile is forgotten. The
event id is derived from the episode (its subject and start), so a report re-sent after a
crash between sending and saving is the same event to Prefect.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuops.common.errors import ConfigError, PrometheusQueryError, PrometheusUnavailable
from gpuops.common.events import related, resource_id
from gpuops.common.settings import PrometheusSettings, WatcherSettings, get_settings
from gpuops.sensors.emitter import EventSender, build_event
from gpuops.sensors.gpu_metrics import GpuGauges
from gpuops.tasks.clients.prometheus import Prometheus
from gpuops.tasks.rebalance.episodes import Debounce, Episode, advance, resume
from gpuops.tasks.rebalance.from_kube import cluster_view
from gpuops.tasks.rebalance.idle import UTIL_QUERY, node_gpu_use
from gpuops.tasks.rebalance.stranded import GpuAssessment, assess_gpus, failed_for_gpus

log = logging.getLogger("gpuops.sensors.gpu")

Obj = dict[str, Any]
MAX_RELATED_PODS = 50  # Prefect takes 100 related resources per event


def watcher_settings() -> WatcherSettings:
    """The watcher's settings; a bad value is a `ConfigError` naming its variable."""
    try:
        return get_settings(WatcherSettings)
    except ValidationError as e:
        prefix = WatcherSettings.model_config.get("env_prefix", "")
        problems = "; ".join(f"{prefix}{'_'.join(str(p) for p in err['loc']).upper()}: "
                             f"{err['msg']} (got {err.get('input')!r})" for err in e.errors())
        raise ConfigError("watcher settings", problems) from None


def _now() -> datetime:
    return datetime.now(UTC)


class EpisodeStore:
    """The episodes as JSON in one file, replaced atomically; in memory without a path."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.stranded: Episode | None = None
        self.idle: dict[str, Episode] = {}
        self.loaded = False
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
                self.stranded = (Episode.from_json(data["stranded"]) if data.get("stranded")
                                 else None)
                self.idle = {n: Episode.from_json(e) for n, e in (data.get("idle") or {}).items()}
                self.loaded = True
            except (ValueError, KeyError, TypeError) as e:
                log.warning("ignoring unreadable GPU episode state %s: %s", path, e)

    def save(self) -> None:
        if self.path is None:
            return
        data = {"stranded": self.stranded.to_json() if self.stranded else None,
                "idle": {n: e.to_json() for n, e in sorted(self.idle.items())}}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, self.path)


class GpuSensor:
    def __init__(self, *, cluster: str, sender: EventSender, stop: threading.Event,
                 settings: WatcherSettings | None = None, state_file: Path | None = None,
                 prometheus: Prometheus | None = None, gauges: GpuGauges | None = None,
                 clock: Callable[[], datetime] = _now) -> None:
        self.cluster = cluster
        self.sender = sender
        self.stop = stop
        self.settings = settings or watcher_settings()
        self.prometheus = prometheus or Prometheus(get_settings(PrometheusSettings).url,
                                                   timeout_s=10)
        self.gauges = gauges or GpuGauges(cluster)
        self.clock = clock
        self.store = EpisodeStore(state_file.with_name(state_file.stem + ".gpu-episodes.json")
                                  if state_file is not None else None)
        self._resume_stranded = self.store.stranded is not None
        self._resume_idle = bool(self.store.idle)
        self._lock = threading.Lock()
        self._pods: dict[str, Obj] = {}  # uid -> pod
        self._nodes: dict[str, Obj] = {}  # name -> node
        self._synced = {"pods": False, "nodes": False}
        self._changed = threading.Event()
        self._prometheus_down = False
        self.scans = 0
        self.reported: list[Any] = []  # events sent, for the log and tests
        self.last: GpuAssessment | None = None

    # --- feeds from the watcher's watches ------------------------------------------------------

    def on_pod(self, event_type: str, pod: Obj) -> None:
        uid = (pod.get("metadata") or {}).get("uid") or _pod_key(pod)
        with self._lock:
            if event_type == "DELETED":
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = pod
        self._changed.set()

    def on_pod_relist(self, pods: list[Obj]) -> None:
        with self._lock:
            self._pods = {(p.get("metadata") or {}).get("uid") or _pod_key(p): p for p in pods}
            self._synced["pods"] = True
        self._changed.set()

    def on_node(self, event_type: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        with self._lock:
            if event_type == "DELETED":
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = node
        self._changed.set()

    def on_node_relist(self, nodes: list[Obj]) -> None:
        with self._lock:
            self._nodes = {n["metadata"]["name"]: n for n in nodes}
            self._synced["nodes"] = True
        self._changed.set()

    def threads(self) -> list[tuple[Callable[[], None], str]]:
        return [(self._scan_loop, "gpu-scan"), (self._idle_loop, "gpu-idle")]

    # --- stranded GPUs -------------------------------------------------------------------------

    def _scan_loop(self) -> None:
        interval = self.settings.gpu_scan_interval_s
        while not self.stop.is_set():
            # While an episode goes on, time alone moves it (its debounce, its end): look
            # every interval even without changes.
            busy = self.store.stranded is not None
            if not self._wait_for_change(interval if busy else 60.0) and not busy:
                continue
            if self.stop.wait(interval):  # what arrives meanwhile joins this scan
                return
            if not all(self._synced.values()):
                continue
            self._changed.clear()
            try:
                self.scan()
            except RuntimeError:  # stopped before an event was delivered
                return
            except Exception:
                log.exception("GPU scan failed; trying again at the next change")

    def _wait_for_change(self, timeout: float) -> bool:
        """Wait for a change, `timeout` at most, returning early (False) on stop."""
        deadline = time.monotonic() + timeout
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._changed.wait(min(left, 0.5)):
                return True
        return False

    def scan(self, now: datetime | None = None) -> GpuAssessment:
        """Assess the cached pods and nodes, update the gauges, advance the episode."""
        now = now or self.clock()
        with self._lock:
            pods = list(self._pods.values())
            nodes = list(self._nodes.values())
        view = cluster_view(nodes, pods)
        failed = {_pod_key(p) for p in pods if failed_for_gpus(p)}
        assessment = assess_gpus(view.cluster, failed)
        self.last = assessment
        self.scans += 1
        members = frozenset(assessment.stranded_pods) if assessment.stranded else frozenset()
        before = self.store.stranded
        if self._resume_stranded:
            self._resume_stranded = False
            before = resume(before, members=members)
            if before is not None:
                log.info("resuming stranded-GPU episode %s (reported: %s)", before.identity,
                         before.reported)
        debounce = Debounce(hold=timedelta(seconds=self.settings.stranded_after_s),
                            clear=timedelta(seconds=self.settings.stranded_after_s))
        episode, report = advance(before, subject=self.cluster, active=assessment.stranded,
                                  now=now, debounce=debounce, members=members)
        self.gauges.update(assessment, in_episode=episode is not None)
        if report and episode is not None:
            self._send(self._stranded_event(episode, assessment))
        if episode != self.store.stranded:
            if episode is None and self.store.stranded is not None:
                log.info("stranded-GPU episode %s ended", self.store.stranded.identity)
            self.store.stranded = episode
            self.store.save()
        return assessment

    def _stranded_event(self, episode: Episode, assessment: GpuAssessment) -> Any:
        payload = {**assessment.payload(self.cluster), "episode": episode.identity,
                   "stranded_since": episode.started.isoformat(),
                   "stranded_pods": list(assessment.stranded_pods)}
        pods = [related("pod", resource_id(self.cluster, "Pod", *key.split("/", 1)),
                        **{"prefect.resource.name": key})
                for key in assessment.stranded_pods[:MAX_RELATED_PODS]]
        log.info("GPU pods stranded: %s", assessment.why)
        return build_event(obj="gpu", what="stranded", cluster=self.cluster, kind="Cluster",
                           namespace=None, name=self.cluster, identity=episode.identity,
                           payload=payload, related_resources=pods)

    def _send(self, event: Any) -> None:
        self.sender.send([event], stop=self.stop)
        self.reported.append(event)

    # --- idle GPU nodes ------------------------------------------------------------------------

    def _idle_loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll_idle()
            except RuntimeError:
                return
            except Exception:
                log.exception("idle-GPU poll failed")
            if self.stop.wait(self.settings.gpu_idle_poll_s):
                return

    def poll_idle(self, now: datetime | None = None) -> dict[str, Episode]:
        """Ask Prometheus for GPU utilisation and advance each node's idle episode."""
        try:
            samples = self.prometheus.query(UTIL_QUERY)
        except (PrometheusUnavailable, PrometheusQueryError) as e:
            if not self._prometheus_down:
                log.warning("idle-GPU detection paused: %s", e)
            self._prometheus_down = True
            return self.store.idle
        if self._prometheus_down:
            log.info("idle-GPU detection resumed: Prometheus answers again")
            self._prometheus_down = False
        now = now or self.clock()
        use = node_gpu_use(samples)
        idle = {n for n, u in use.items() if u.idle(self.settings.gpu_idle_util_pct)}
        before = dict(self.store.idle)
        if self._resume_idle:
            self._resume_idle = False
            before = {n: e for n, e in ((n, resume(e, members=frozenset({n}) if n in idle
                                                    else frozenset())) for n, e in before.items())
                      if e is not None}
        debounce = Debounce(hold=timedelta(seconds=self.settings.gpu_idle_after_s))
        after: dict[str, Episode] = {}
        for node in sorted(set(before) | idle):
            episode, report = advance(before.get(node), subject=node, active=node in idle,
                                      now=now, debounce=debounce, members=frozenset({node}))
            if report and episode is not None:
                self._send(self._idle_event(episode, use[node]))
            if episode is not None:
                after[node] = episode
        changed = after != self.store.idle
        self.store.idle = after
        if changed:
            self.store.save()
        return after

    def _idle_event(self, episode: Episode, use: Any) -> Any:
        payload = {"cluster": self.cluster, "node": episode.subject, "allocated_gpus": use.gpus,
                   "max_gpu_util_pct": use.max_util_pct, "pods": list(use.pods),
                   "idle_since": episode.started.isoformat(),
                   "idle_for_s": self.settings.gpu_idle_after_s,
                   "threshold_pct": self.settings.gpu_idle_util_pct,
                   "episode": episode.identity}
        log.info("node %s: %d allocated GPU(s) idle since %s", episode.subject, use.gpus,
                 episode.started.isoformat())
        return build_event(obj="node", what="gpu-idle", cluster=self.cluster, kind="Node",
                           namespace=None, name=episode.subject, identity=episode.identity,
                           payload=payload)


def _pod_key(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
