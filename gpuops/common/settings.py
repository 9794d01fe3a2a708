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
