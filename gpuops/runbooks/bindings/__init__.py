"""What each catalog action does: one binding per action, over the project's own safe
actions (`perform`), approvals, Slack and served deployments.

A binding has two halves with one signature, `(context, args) -> output`:
- `run` does it (destructive ones through `perform()`: slot, idempotence, postcondition,
  `gpuops.action.*` event, a row in the run's actions artifact);
- `predict` says, from live state and changing nothing, what `run` would change and what
  it would return, so a dry run's later steps see a predicted output, never an empty one.

Bindings register with `binds`, which refuses an action the catalog does not declare and
an action bound twice (the registry is loud about duplicates).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from gpuops.runbooks.catalog import CATALOG
from gpuops.runbooks.context import StepContext
from gpuops.runbooks.registry import DuplicateRegistration, Registry


@dataclass(frozen=True)
class Prediction:
    """What a step would do: its predicted output, the changes one line each, and what
    would get in the way (a disruption budget, a check that does not hold yet)."""

    output: BaseModel
    changes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


Run = Callable[[StepContext, Any], Awaitable[BaseModel]]
Predict = Callable[[StepContext, Any], Awaitable[Prediction]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Binding:
    name: str
    run: Run
    predict: Predict
    origin: str = field(default="", compare=False)


BINDINGS: Registry[Binding] = Registry("action binding")
_pending: dict[str, dict[str, Any]] = {}


def _register(name: str, half: str, fn: Callable[..., Any]) -> None:
    if name not in CATALOG:
        raise DuplicateRegistration(f"no action {name!r} is declared in the catalog "
                                    "(runbooks/catalog.py): declare it before binding it")
    halves = _pending.setdefault(name, {})
    if half in halves or name in BINDINGS:
        raise DuplicateRegistration(f"action {name!r} already has a {half} "
                                    f"({getattr(halves.get(half), '__qualname__', '')})")
    halves[half] = fn
    if {"run", "predict"} <= set(halves):
        BINDINGS.add(name, Binding(name, halves["run"], halves["predict"]),
                     origin=f"{fn.__module__}.{fn.__qualname__}")


def runs(name: str) -> Callable[[F], F]:
    """Decorate the function that carries out action `name` (returned unchanged)."""
    def register(fn: F) -> F:
        _register(name, "run", fn)
        return fn
    return register


def predicts(name: str) -> Callable[[F], F]:
    """Decorate the function that predicts action `name` in a dry run."""
    def register(fn: F) -> F:
        _register(name, "predict", fn)
        return fn
    return register


def load_bindings() -> Registry[Binding]:
    """Every binding, imported once (the modules register as they are imported)."""
    for module in ("checks", "control", "flows", "nodes", "people", "pools", "serving"):
        importlib.import_module(f"gpuops.runbooks.bindings.{module}")
    return BINDINGS
