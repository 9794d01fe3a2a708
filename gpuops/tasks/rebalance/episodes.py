"""Episodes: a condition that holds for a while is reported once, when it has held long enough.

Why a state machine of its own: the watcher sees a stranded-GPU situation (or an idle GPU
node) on every pod update, dozens of times a minute, while the flow it triggers must run
once per episode. An episode
- starts when the condition is first seen (`pending`: not reported yet);
- is reported once the condition has held for `hold` (a debounce: the scheduler's next
  cycle, or an autoscaler's new node, often ends a condition within seconds);
- ends once the condition has been gone for `clear` (a pod deleted and re-created by its
  Job for a moment leaves nothing pending; that is no new episode); a new one may start
  after.
What an episode is about (`members`: the stranded pods, the idle node) changes as it goes;
it is kept so that a watcher restarted mid-episode can tell the same episode (its members
overlap the saved one's) from a new one, and not report the same episode twice.

Pure: `advance` takes the previous episode (or None), what is seen now and `now`, and returns
the next episode and whether to report it; `to_json` / `from_json` are its storage shape.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from gpuops.common.errors import ConfigError


@dataclass(frozen=True)
class Episode:
    subject: str  # what it is about: the cluster, a node
    started: datetime  # first seen
    reported: bool = False
    members: frozenset[str] = frozenset()
    cleared_since: datetime | None = None  # the condition is gone since then

    @property
    def identity(self) -> str:
        """Stable for the episode's whole life (and across a watcher restart)."""
        return f"{self.subject}@{self.started.isoformat()}"

    def to_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "started": self.started.isoformat(),
                "reported": self.reported, "members": sorted(self.members),
                "cleared_since": self.cleared_since.isoformat() if self.cleared_since
                else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Episode:
        cleared = data.get("cleared_since")
        return cls(subject=str(data["subject"]),
                   started=datetime.fromisoformat(data["started"]),
                   reported=bool(data.get("reported")),
                   members=frozenset(data.get("members") or ()),
                   cleared_since=datetime.fromisoformat(cleared) if cleared else None)


@dataclass(frozen=True)
class Debounce:
    """`hold`: how long a condition must hold before it is reported; `clear`: how long it
    must be gone before its episode ends."""

    hold: timedelta
    clear: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        for name in ("hold", "clear"):
            if getattr(self, name) < timedelta(0):
                raise ConfigError(name, f"must be >= 0, got {getattr(self, name)}")


def advance(episode: Episode | None, *, subject: str, active: bool, now: datetime,
            debounce: Debounce, members: frozenset[str] = frozenset()
            ) -> tuple[Episode | None, bool]:
    """The next episode (None: none going on) and whether to report it now."""
    if not active:
        if episode is None:
            return None, False
        if not episode.reported:
            return None, False  # gone before it was reported: it never was an episode
        cleared = episode.cleared_since or now
        if now - cleared >= debounce.clear:
            return None, False
        return replace(episode, cleared_since=cleared), False
    if episode is None:
        episode = Episode(subject=subject, started=now, members=members)
    else:
        episode = replace(episode, members=members, cleared_since=None)
    if not episode.reported and now - episode.started >= debounce.hold:
        return replace(episode, reported=True), True
    return episode, False


def resume(saved: Episode | None, *, members: frozenset[str]) -> Episode | None:
    """What a restarted watcher keeps of an episode it saved, given what it sees first: the
    same episode if its members overlap what is seen now (reported ones stay reported);
    None (start afresh) otherwise."""
    if saved is None or not (saved.members & members):
        return None
    return replace(saved, members=members, cleared_since=None)
