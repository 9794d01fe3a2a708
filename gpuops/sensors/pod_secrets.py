"""The values of the Secrets a pod references, so that the watcher can redact them by value.

A container sees a Secret's values through `env[].valueFrom.secretKeyRef` (one key),
`envFrom[].secretRef` (every key), and `secret` or `projected` volumes (every key, or the
`items` listed); whatever it prints of them must not leave gpuops. Redaction by shape cannot
know a password with no recognisable shape, so the watcher reads those Secrets with one `get`
each (RBAC: `get` on `secrets`) and masks their values wherever they appear.

What is kept: values in memory only, per (namespace, name), for `ttl_s` (a restart storm of
400 pods sharing a Secret reads it once a minute, not 400 times); never logged, never stored.
A Secret that is missing or forbidden is logged by name only, remembered for the same time,
and capture goes on (shape redaction still applies). ConfigMaps are not read: their values are
configuration, not secrets. `imagePullSecrets` are not read either: a container never sees
them.

Each value is also masked in the forms logs print it in: trimmed of the trailing newline that
`echo ... | base64` leaves, as stored in the API (base64), JSON-escaped, and line by line for
a multi-line value (a mounted key file printed line by line).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuops.common.errors import KubeError
from gpuops.common.redact import MIN_KNOWN_SECRET_CHARS, redact_text
from gpuops.tasks.clients.kube import Kube

log = logging.getLogger("gpuops.sensors.pod_secrets")

DEFAULT_TTL_S = 60.0
MIN_LINE_CHARS = 16  # a line of a multi-line value masked on its own (not `{` or `---`)


@dataclass(frozen=True)
class SecretRef:
    name: str
    keys: frozenset[str] | None  # None: every key of the Secret


def referenced_secrets(pod: dict[str, Any]) -> list[SecretRef]:
    """The Secrets (and which of their keys) a pod's containers can see, one per name."""
    spec = pod.get("spec") or {}
    wanted: dict[str, set[str] | None] = {}

    def add(name: str | None, keys: Iterable[str] | None) -> None:
        if not name:
            return
        if keys is None or wanted.get(name, set()) is None:
            wanted[name] = None
        else:
            wanted.setdefault(name, set()).update(keys)  # type: ignore[union-attr]

    for group in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(group) or ():
            for env in container.get("env") or ():
                ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
                add(ref.get("name"), [ref["key"]] if ref.get("key") else None)
            for source in container.get("envFrom") or ():
                add((source.get("secretRef") or {}).get("name"), None)
    for volume in spec.get("volumes") or ():
        secret = volume.get("secret") or {}
        add(secret.get("secretName"), _item_keys(secret))
        for source in (volume.get("projected") or {}).get("sources") or ():
            projected = source.get("secret") or {}
            add(projected.get("name"), _item_keys(projected))
    return [SecretRef(name, None if keys is None else frozenset(keys))
            for name, keys in wanted.items()]


def _item_keys(source: dict[str, Any]) -> list[str] | None:
    items = source.get("items")
    return [i["key"] for i in items if i.get("key")] if items else None


def forms_of(value: str) -> list[str]:
    """A secret value as logs may print it."""
    forms = {value, value.strip()}
    forms.add(base64.b64encode(value.encode()).decode())
    forms.add(json.dumps(value)[1:-1])
    if "\n" in value:
        forms.update(line.strip() for line in value.splitlines()
                     if len(line.strip()) >= MIN_LINE_CHARS)
    return [f for f in forms if len(f) >= MIN_KNOWN_SECRET_CHARS]


def secret_values(secret: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each key's value, decoded, in every form `forms_of` gives; a binary value is kept in
    its base64 form only."""
    values: dict[str, tuple[str, ...]] = {}
    for key, encoded in (secret.get("data") or {}).items():
        try:
            decoded = forms_of(base64.b64decode(str(encoded), validate=True).decode())
        except (binascii.Error, UnicodeDecodeError):
            decoded = []
        values[key] = (str(encoded), *decoded)
    for key, plain in (secret.get("stringData") or {}).items():  # a server that keeps it
        values[key] = (*values.get(key, ()), *forms_of(str(plain)))
    return values


@dataclass
class _Entry:
    expires: float
    values: dict[str, tuple[str, ...]]  # by key; empty for a Secret that could not be read


@dataclass
class SecretReadStats:
    reads: int = 0  # API reads (cache misses)
    unreadable: int = 0  # reads that found nothing (missing or forbidden)


_readers: weakref.WeakSet[PodSecretReader] = weakref.WeakSet()


class PodSecretReader:
    """Reads and caches the values of the Secrets a pod references (thread-safe: concurrent
    capture workers asking for the same Secret wait for one read)."""

    def __init__(self, kube: Kube, *, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.ttl_s = ttl_s
        self.clock = clock
        self.stats = SecretReadStats()
        self._cache: dict[tuple[str, str], _Entry] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()
        _readers.add(self)

    def values_for(self, pod: dict[str, Any]) -> list[str]:
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        values: list[str] = []
        for ref in referenced_secrets(pod):
            values += self._values(namespace, ref)
        return values

    def known_values(self) -> list[str]:
        """Every value held now (for the watcher's log filter)."""
        with self._lock:
            return [v for entry in self._cache.values() for forms in entry.values.values()
                    for v in forms]

    def _values(self, namespace: str, ref: SecretRef) -> list[str]:
        key = (namespace, ref.name)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # one read per Secret at a time; the others find it cached
            entry = self._cache.get(key)
            now = self.clock()
            if entry is None or entry.expires <= now:
                entry = self._read(namespace, ref.name)
                with self._lock:  # expired values leave memory at the next read
                    for old in [k for k, e in self._cache.items() if e.expires <= now]:
                        del self._cache[old]
                    self._cache[key] = entry
        # The whole Secret is cached; the pod gets the keys it references.
        return [v for k, forms in entry.values.items() if ref.keys is None or k in ref.keys
                for v in forms]

    def _read(self, namespace: str, name: str) -> _Entry:
        with self._lock:
            self.stats.reads += 1
        try:
            secret = self.kube.get_secret(namespace, name)
        except KubeError as e:
            with self._lock:
                self.stats.unreadable += 1
            log.warning("Secret %s/%s is unreadable (HTTP %s): its values are redacted by "
                        "shape only", namespace, name, e.status)
            return _Entry(self.clock() + self.ttl_s, {})
        return _Entry(self.clock() + self.ttl_s, secret_values(secret))


class RedactingFilter(logging.Filter):
    """Masks, in the watcher's own log lines, every Secret value a reader holds and every
    secret shape (the message and the traceback text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        known = [v for reader in list(_readers) for v in reader.known_values()]
        message = record.getMessage()
        clean = redact_text(message, known)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text, known)
        return True


WATCHER_LOGGERS = ("gpuops.sensors.watcher", "gpuops.sensors.capture", "gpuops.sensors.watch",
                   "gpuops.sensors.emitter", "gpuops.sensors.pod_secrets")


def redact_watcher_logs() -> None:
    """Put the redacting filter on the watcher's loggers (once per process)."""
    for name in WATCHER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
