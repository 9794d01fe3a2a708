"""gpuops' Blocks on the Prefect server of `gpuops up`: their types, and a usable approval policy.

Why at start: a Block type the server does not know cannot be created in the UI (`prefect
block type ls` shows none of gpuops'), and the default approval policy has no approvers, so a
signed Approve click from the local Slack page would answer "not on the approvers list".
`gpuops up` registers every Block class in `gpuops/blocks` and, unless told to use a saved
policy, saves `local-approvers` once, whose one approver is the local user the Slack fake's
page clicks as. A user edits that document (or names their own) to set real approvers.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from prefect.blocks.core import Block
from prefect.client.orchestration import get_client

import gpuops.blocks
from gpuops.blocks.policy import ApprovalPolicy

LOCAL_POLICY = "local-approvers"
LOCAL_APPROVER = "U0LOCALOPS"  # the Slack fake's page clicks as this user


class ApprovalPolicyNotFound(ValueError):
    """The approval policy named for `gpuops up` is not saved (or does not load)."""


def gpuops_block_types() -> list[type[Block]]:
    """Every Block class defined in a module of `gpuops.blocks`, sorted by slug."""
    found: dict[str, type[Block]] = {}
    for info in pkgutil.iter_modules(gpuops.blocks.__path__):
        module = importlib.import_module(f"gpuops.blocks.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, Block) and cls.__module__ == module.__name__
                    and not inspect.isabstract(cls)):
                found[cls.get_block_type_slug()] = cls
    return [found[slug] for slug in sorted(found)]


async def register_block_types() -> list[str]:
    """Register (idempotently) every gpuops Block type and schema; returns their slugs."""
    types = gpuops_block_types()
    async with get_client() as client:
        for cls in types:
            await cls.aregister_type_and_schema(client=client)
    return [cls.get_block_type_slug() for cls in types]


async def ensure_approval_policy(name: str = "") -> ApprovalPolicy:
    """The policy named `name`, which must be saved; with no name, `local-approvers`,
    saved with the local approver when it does not exist yet (later edits are kept)."""
    try:
        return await ApprovalPolicy.aload(name or LOCAL_POLICY)
    except ValueError as e:
        if name:
            raise ApprovalPolicyNotFound(
                f"approval policy {name!r} could not be loaded from the Prefect server "
                f"({_first_line(e)}); create it in the UI (Blocks > gpuops approval policy) "
                f"or omit `--approval-policy` to use {LOCAL_POLICY!r}") from None
        if "Unable to find block document" not in str(e):
            raise ApprovalPolicyNotFound(
                f"approval policy {LOCAL_POLICY!r} does not load ({_first_line(e)}); fix or "
                f"delete it in the UI (Blocks) and start again") from None
    policy = ApprovalPolicy(approvers=[LOCAL_APPROVER])
    await policy.save(LOCAL_POLICY)
    return policy


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
