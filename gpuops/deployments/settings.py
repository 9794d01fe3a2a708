"""Settings for `gpuops up`: where its state lives and which ports it uses.

Read through `get_up_settings()` at call time, never at import time, so that tests and the
CLI can change the environment (`GPUOPS_HOME=...`) before anything looks at it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class UpSettings(BaseSettings):
    """Defaults of `gpuops up`; every field can be set as `GPUOPS_<FIELD>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="GPUOPS_", extra="ignore")

    home: Path = Field(
        default=Path(".gpuops"),
        description="Directory for logs, the Prefect database, the kubeconfig and env.sh.",
    )
    scenario: str = Field(default="default", description="simcluster scenario name or path.")
    cluster_name: str = Field(default="sim", description="The cluster's name in event "
                              "resource ids (k8s.<cluster>.<kind>.<ns>.<name>).")
    prefect_port: int = Field(default=4200, description="Port of the local Prefect server/UI.")
    sim_port: int = Field(default=0, description="simcluster port; 0 picks a free one.")
    sim_speed: float = Field(default=1.0, description="simcluster clock speed (1 = real time).")
    slack_bot_token: SecretStr | None = Field(
        default=None,
        description="A real Slack bot token; when set, `gpuops up` starts no Slack fake "
        "(the local fake's own token, which env.sh exports, does not count).",
        examples=["xoxb-..."],
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None,
        description="The Slack app's signing secret; required with a real bot token. The "
        "local stack generates its own (`<home>/slack-signing-secret`).",
    )
    approval_policy: str = Field(
        default="",
        description="Name of a saved `gpuops-approval-policy` Block the served flows and the "
        "Slack receiver use; empty: `local-approvers`, created when missing.",
        examples=["platform-oncall"],
    )
    capacity_mode: Literal["dry-run", "apply"] = Field(
        default="dry-run",
        description="What the hourly capacity pre-warm run does: `dry-run` plans and reports, "
        "`apply` changes node pools (with approval above the cost threshold).",
    )
    history_days: int = Field(
        default=14, ge=0, le=90, description="Days of demand history back-filled into the "
        "simulated cluster's Prometheus before it starts, so capacity pre-warm has history at "
        "once (0: none).",
    )
    start_timeout_s: float = Field(
        default=120.0, description="How long to wait for each component to become ready."
    )


def get_up_settings() -> UpSettings:
    """The one accessor: builds the settings from the current environment."""
    return UpSettings()
