"""Environment settings per area (prefix `GPUOPS_`), all in this module, read lazily through
the one accessor `get_settings(<class>)` — never at import time, so that tests and the CLI
can change the environment (`GPUOPS_HOME=...`) before anything looks at it.

They are the out-of-the-box defaults: when no Prefect Block is configured, the connection
Blocks are built from these (`gpuops up` writes them into its env.sh). One variable is one
field of one class: `GPUOPS_CLUSTER_NAME` is `KubeSettings.cluster_name` for every process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeVar

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class KubeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUOPS_", extra="ignore")

    cluster_name: str = Field("sim", description="Name of the cluster in event resource ids.")
    kubeconfig: Path | None = Field(
        None, validation_alias=AliasChoices("GPUOPS_KUBECONFIG", "KUBECONFIG"),
        description="Kubeconfig file; unset means in-cluster config.")
    kube_context: str | None = Field(None, description="Kubeconfig context to use.")


class WatcherSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUOPS_WATCHER_", extra="ignore")

    read_pod_secrets: bool = Field(
        True, description="Read the Secrets a restarted pod references (env `secretKeyRef`, "
        "`envFrom.secretRef`, secret and projected volumes) so that their values are redacted "
        "wherever they appear. Needs `get` on `secrets`; costs one API read per referenced "
        "Secret per cache miss (values are cached in memory for a minute, never logged or "
        "stored). Off: only literal env values and secret shapes are redacted.")
    # GPU rebalance's sensor side (sensors/gpu_sensor.py)
    stranded_after_s: float = Field(
        30.0, ge=0, le=86400, description="How long GPU pods must stay stranded (Pending for "
        "GPUs while the free GPUs would hold them) before `gpuops.gpu.stranded` is sent, and "
        "how long none must be before the episode ends.")
    gpu_scan_interval_s: float = Field(
        5.0, gt=0, le=3600, description="At most one stranded-GPU assessment per this many "
        "seconds, however many pod updates arrive.")
    gpu_idle_after_s: float = Field(
        1800.0, gt=0, le=7 * 86400, description="How long a node's allocated GPUs must show "
        "near-zero utilisation in DCGM before `gpuops.node.gpu-idle` is sent.")
    gpu_idle_util_pct: float = Field(
        5.0, ge=0, le=100, description="At or below this `DCGM_FI_DEV_GPU_UTIL` (%) a GPU "
        "counts as idle.")
    gpu_idle_poll_s: float = Field(
        60.0, gt=0, le=3600, description="How often Prometheus is asked for GPU utilisation.")
    metrics_port: int = Field(
        9450, ge=0, le=65535, description="Port of the watcher's Prometheus `/metrics` "
        "(`gpuops_stranded_gpus`, `gpuops_gpu_fragmentation`, `gpuops_pending_gpu_pods`); "
        "0: not served.")
    metrics_host: str = Field(
        "127.0.0.1", min_length=1, description="Interface of `/metrics` (`0.0.0.0` for a "
        "Prometheus elsewhere).")


class SlackSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUOPS_SLACK_", extra="ignore")

    bot_token: SecretStr = Field(SecretStr("xoxb-local-fake"), description="Bot token.")
    signing_secret: SecretStr | None = Field(
        None, description="The Slack app's signing secret; the Slack receiver verifies every "
        "click with it and refuses to start without one (there is no default).")
    app_token: SecretStr | None = Field(None, description="App-level token for Socket Mode.")
    base_url: str | None = Field(None, description="Web API base URL (a local fake in dev).")
    channel: str = Field("#gpuops", description="Default channel.")


class AwsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUOPS_AWS_", extra="ignore")

    region: str = Field("us-east-1", validation_alias=AliasChoices(
        "GPUOPS_AWS_REGION", "AWS_DEFAULT_REGION", "AWS_REGION"))
    endpoint_url: str | None = Field(None, validation_alias=AliasChoices(
        "GPUOPS_AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL"))


class PrometheusSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUOPS_PROMETHEUS_", extra="ignore")

    url: str = Field("http://127.0.0.1:9090", description="Prometheus HTTP API base URL.")


class RunbookSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUOPS_RUNBOOKS_", extra="ignore")

    dir: Path | None = Field(None, description="A folder of runbooks (`*.yaml`), validated "
                             "with the shipped ones and served beside them by `gpuops up`; "
                             "one with any problem stops them all from loading.")
    started_by: str = Field("", description="Who `gpuops runbook run` says started a run "
                            "(your Slack user ID) when `--as` is not given; a runbook that "
                            "must be approved by someone else refuses that person's "
                            "Approve.")


class UpSettings(BaseSettings):
    """Defaults of `gpuops up`; every field can be set as `GPUOPS_<FIELD>` in the environment,
    and the command line's options go over them (`load_up_settings`). The cluster's name is
    `KubeSettings.cluster_name` (`GPUOPS_CLUSTER_NAME`), as for every other process."""

    model_config = SettingsConfigDict(env_prefix="GPUOPS_", extra="ignore")

    home: Path = Field(
        default=Path(".gpuops"),
        description="Directory for logs, the Prefect database, the kubeconfig and env.sh.",
    )
    scenario: str = Field(default="default", description="simcluster scenario name or path.")
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


DEFAULT_LOCAL_SLACK_USER = "U0LOCALOPS"  # who the local Slack page clicks as


class SlackFakeSettings(BaseSettings):
    """What the local Slack fake's page needs to send clicks; `GPUOPS_SLACK_<FIELD>` in the environment.

    The same variables configure the receiver, so one secret serves both ends."""

    model_config = SettingsConfigDict(env_prefix="GPUOPS_SLACK_", extra="ignore")

    signing_secret: SecretStr | None = Field(
        None, description="The receiver's signing secret; the page signs clicks with it.")
    interactions_url: str | None = Field(
        None, description="The receiver's URL for clicks (Slack's Interactivity Request URL).",
        examples=["http://127.0.0.1:3000/slack/events"])
    local_user: str = Field(DEFAULT_LOCAL_SLACK_USER,
                            description="The Slack user id the page clicks as.")


S = TypeVar("S", bound=BaseSettings)


def get_settings(cls: type[S]) -> S:
    """Build settings from the current environment (never cached at import time)."""
    return cls()
