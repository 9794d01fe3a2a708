"""Registries that refuse duplicates loudly (pure): actions by name, runbooks by name.

Why loudly: a registry keyed by bare names that lets a second entry replace the first
(Robusta's actions) turns a copy-pasted name into a runbook that calls the wrong code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from gpuops.common.errors import GpuopsError

T = TypeVar("T")
M = TypeVar("M", bound=type[BaseModel])


class DuplicateRegistration(GpuopsError):
    """A name registered twice: a programming error, never silently resolved."""


class Registry(Generic[T]):
    """Name -> entry; `add` refuses a name already there, naming where the first came from."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}

    def add(self, name: str, entry: T, *, origin: str = "") -> T:
        if name in self._entries:
            first = f" (first from {self._origins[name]})" if self._origins[name] else ""
            raise DuplicateRegistration(f"{self._what} {name!r} is already registered{first}; "
                                        "give the new one another name")
        self._entries[name] = entry
        self._origins[name] = origin
        return entry

    def get(self, name: str) -> T | None:
        return self._entries.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[str, T]]:
        return sorted(self._entries.items())


@dataclass(frozen=True)
class ActionSpec:
    """What a runbook step may call: its arguments and output as models, and what it is.

    `destructive`: it changes the cluster, a cloud or a person's channel, so it goes through
    `perform()` and the dry run only predicts it. `check`: read-only and answering
    `CheckResult`, so it may stand in `preconditions:` and in `wait-until`."""

    name: str
    summary: str
    args: type[BaseModel]
    output: type[BaseModel]
    destructive: bool
    check: bool = False


class ActionCatalog(Registry[ActionSpec]):
    def __init__(self) -> None:
        super().__init__("action")

    def declare(self, spec: ActionSpec, *, origin: str = "") -> ActionSpec:
        return self.add(spec.name, spec, origin=origin)

    def action(self, name: str, summary: str, *, output: type[BaseModel], destructive: bool,
               check: bool = False) -> Callable[[M], M]:
        """Declare an action by decorating its argument model (returned unchanged)."""

        def register(args: M) -> M:
            self.declare(ActionSpec(name, summary, args, output, destructive, check),
                         origin=f"{args.__module__}.{args.__qualname__}")
            return args

        return register
