"""`gpuops restart-rules load FILE`: a rule file into a restart policy Block.

A Block holds the rules' text, never a path (blocks/restart_policy.py): the file is read
here, on the operator's machine, checked with errors naming file, line and column, and its
text saved into the Block; the Block's other fields are kept (a new Block gets defaults).
"""

from __future__ import annotations

from pathlib import Path

from gpuops.blocks.loading import load_block
from gpuops.blocks.restart_policy import RestartPolicy
from gpuops.common.errors import BlockNotFound
from gpuops.tasks.restarts.rules import default_rules, merge_rules, parse_rules


async def load_rule_file(path: Path, policy_block: str) -> tuple[int, bool]:
    """(rules in the file, whether the Block was created)."""
    text = path.read_text(encoding="utf-8")
    rules = parse_rules(text, source=str(path))
    merge_rules(default_rules(), rules, source=str(path))  # duplicate / override problems
    try:
        policy, created = await load_block(RestartPolicy, policy_block), False
    except BlockNotFound:
        policy, created = RestartPolicy(), True
    policy.extra_rules_yaml = text  # validated again on assignment
    await policy.asave(policy_block, overwrite=True)
    return len(rules), created
