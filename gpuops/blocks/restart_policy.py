"""The restart-diagnostics policy: filters, routing, caps and thresholds, as a Prefect Block.

Every field has a default that works out of the box; operators change them in the UI.
Values are checked when the Block is built, saved or loaded: a bad label selector or rule
YAML is refused with its field (and the rule's line and column), never at run time, and an
error never quotes a value.

`extra_rules_yaml` holds the rules themselves, never a path: a Block is read by workers on
other machines, and a path would be read from whichever disk the worker has (and a file's
content would end up in errors). `gpuops restart-rules load FILE` puts a file's rules into
the Block.
"""

from __future__ import annotations

from prefect.blocks.core import Block
from pydantic import ConfigDict, Field, field_validator

from gpuops.common.errors import ConfigError
from gpuops.common.labels import parse_label_selector
from gpuops.tasks.restarts.rules import RuleSet, default_rules, merge_rules, parse_rules


def looks_like_a_path(text: str) -> bool:
    """One line naming a file (`rules.yaml`, `/etc/gpuops/rules.yml`, `~/x`): not YAML rules."""
    line = text.strip()
    return "\n" not in line and bool(line) and (
        line.endswith((".yaml", ".yml")) or line.startswith(("/", "~", "./", "../")))


def extra_rules(text: str, base: RuleSet | None = None) -> RuleSet:
    """`base` (the shipped rules) with the rules in `text`; ConfigError naming line and
    column. Text only: a path is refused, never read."""
    if looks_like_a_path(text):
        raise ConfigError("extra_rules_yaml", "this looks like a file path; the Block holds "
                          "the rules themselves: paste the YAML here, or load a file with "
                          "`gpuops restart-rules load FILE --policy-block NAME`")
    base = default_rules() if base is None else base
    return merge_rules(base, parse_rules(text)) if text.strip() else base


class RestartPolicy(Block):
    _block_type_name = "gpuops restart policy"
    _block_type_slug = "gpuops-restart-policy"
    _description = "Which restarts gpuops reports, where, and how often."
    model_config = ConfigDict(hide_input_in_errors=True, validate_assignment=True)

    namespaces_allow: list[str] = Field(default_factory=list, description="Only these "
                                        "namespaces (empty: all).", examples=[["inference"]])
    namespaces_deny: list[str] = Field(default_factory=lambda: ["kube-system"],
                                       description="Never these namespaces.")
    pod_label_selector: str = Field("", description="Only pods matching this label selector "
                                    "(`=`, `!=`, `in`, `notin`, exists).",
                                    examples=["app.kubernetes.io/part-of=serving"])
    ignore_exit_code_zero: bool = Field(True, description="Skip containers that exited 0 "
                                        "(completed), unless the diagnosis says otherwise.")
    ignore_planned: bool = Field(True, description="Skip planned terminations (rollouts).")
    min_restart_count: int = Field(1, ge=1, description="Report from this restartCount on.")
    default_channel: str = Field("#gpuops-alerts", description="Channel when no route matches.")
    channel_by_namespace: dict[str, str] = Field(default_factory=dict, description="Namespace "
                                                 "-> channel. The namespace label or annotation "
                                                 "`gpuops.io/slack-channel` wins over this.")
    thread_window_minutes: int = Field(24 * 60, gt=0, description="Restarts with the same "
                                       "cause within this window go to the same thread.")
    summary_window_minutes: int = Field(30, gt=0, description="'5× in 30 min' counts this "
                                        "window.")
    recovered_after_minutes: float = Field(10, gt=0, description="Post 'recovered' once the "
                                         "workload has been Ready this long.")
    max_event_age_minutes: int = Field(60, gt=0, description="Older restarts are recorded in "
                                       "the history but not posted (stale).")
    slack_posts_per_minute_per_channel: int = Field(
        60, gt=0, description="gpuops' own cap on new Slack messages per channel (a Prefect "
        "global rate limit per channel; Slack allows about one a second per channel).")
    slack_updates_per_minute: int = Field(50, gt=0, description="gpuops' own cap on parent "
                                          "message edits (Slack's chat.update is Tier 3, "
                                          "about 50 a minute).")
    parent_update_seconds: int = Field(60, ge=0, description="Edit a thread's parent at most "
                                       "this often while restarts keep coming (the run's last "
                                       "edit always brings it up to date).")
    log_lines: int = Field(20, gt=0, le=200, description="Log lines in the parent message.")
    extra_rules_yaml: str = Field("", description="More cause rules: the YAML text itself "
                                  "(not a path), merged into the shipped ones; see "
                                  "restart_rules.yaml. `gpuops restart-rules load FILE` loads "
                                  "a file into this field.")

    @field_validator("pod_label_selector")
    @classmethod
    def _selector_parses(cls, value: str) -> str:
        parse_label_selector(value)  # a bad selector is refused when saved, not at run time
        return value

    @field_validator("extra_rules_yaml")
    @classmethod
    def _rules_parse(cls, value: str) -> str:
        try:
            extra_rules(value)  # refused when saved and when loaded, not at run time
        except ConfigError as e:
            # The field is named by pydantic; the message says where in the YAML.
            raise ValueError(str(e).removeprefix("extra_rules_yaml: ")) from None
        return value

    def cause_rules(self) -> RuleSet:
        """The shipped rules with this policy's extra ones."""
        return extra_rules(self.extra_rules_yaml)

    @classmethod
    def from_settings(cls) -> RestartPolicy:
        return cls()
