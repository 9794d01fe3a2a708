"""Environment settings per area (prefix `GPUOPS_`), read lazily through `get_settings`.

They are the out-of-the-box defaults: when no Prefect Block is configured, the connection
Blocks are built from these (`gpuops up` writes them into its env.sh).
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

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


S = TypeVar("S", bound=BaseSettings)


def get_settings(cls: type[S]) -> S:
    """Build settings from the current environment (never cached at import time)."""
    return cls()
