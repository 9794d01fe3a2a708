"""Connection Blocks: how gpuops reaches a cluster, Slack and AWS.

Secrets live in `SecretStr` fields. Each Block has `from_settings()`, the out-of-the-box
default built from `GPUOPS_*` environment settings, used when no Block document is saved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

from gpuops.common.settings import AwsSettings, KubeSettings, SlackSettings, get_settings

if TYPE_CHECKING:
    from gpuops.tasks.clients.kube import Kube

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


class KubernetesCluster(Block):
    """A Kubernetes cluster gpuops acts on (a kubeconfig, or in-cluster config)."""

    _block_type_name = "gpuops Kubernetes cluster"
    _block_type_slug = "gpuops-kubernetes-cluster"
    _description = "Which cluster gpuops acts on, and the name its events give it."

    cluster_name: str = Field("sim", description="Name in event resource ids "
                              "(k8s.<cluster>.<kind>.<ns>.<name>).", examples=["prod-us-east-1"])
    kubeconfig_path: str | None = Field(None, description="Kubeconfig file; empty means "
                                        "in-cluster service account.",
                                        examples=["~/.kube/config"])
    context: str | None = Field(None, description="Kubeconfig context.")

    @classmethod
    def from_settings(cls) -> KubernetesCluster:
        s = get_settings(KubeSettings)
        return cls(cluster_name=s.cluster_name,
                   kubeconfig_path=str(s.kubeconfig) if s.kubeconfig else None,
                   context=s.kube_context)

    def kube(self) -> Kube:
        from gpuops.tasks.clients.kube import Kube

        return Kube.from_kubeconfig(self.kubeconfig_path, self.context, self.cluster_name)


class SlackConnection(Block):
    """Slack: a bot token for the Web API, a signing secret to verify button clicks."""

    _block_type_name = "gpuops Slack connection"
    _block_type_slug = "gpuops-slack-connection"
    _description = "The Slack app gpuops posts with and receives approvals through."

    bot_token: SecretStr = Field(description="Bot user OAuth token.", examples=["xoxb-..."])
    signing_secret: SecretStr | None = Field(None, description="Signing secret used to verify "
                                             "requests; the Slack receiver needs it, posting "
                                             "does not.")
    app_token: SecretStr | None = Field(None, description="App-level token for Socket Mode.",
                                        examples=["xapp-..."])
    base_url: str | None = Field(None, description="Web API base URL; only for a local fake "
                                 "(on this machine: 127.0.0.1, ::1 or localhost).",
                                 examples=["http://127.0.0.1:8765/api/"])
    default_channel: str = Field("#gpuops", description="Channel used when no route matches.")

    @classmethod
    def from_settings(cls) -> SlackConnection:
        s = get_settings(SlackSettings)
        return cls(bot_token=s.bot_token, signing_secret=s.signing_secret,
                   app_token=s.app_token, base_url=s.base_url, default_channel=s.channel)

    @property
    def uses_local_fake(self) -> bool:
        """Does this talk to a Slack fake on this machine rather than to Slack? Only a
        `base_url` on a loopback host says so, never the token."""
        host = urlsplit(self.base_url).hostname if self.base_url else None
        return host in LOOPBACK_HOSTS

    def secrets(self) -> list[str]:
        """Secret values, for redaction of anything that could echo them."""
        values = (s.get_secret_value() for s in (self.bot_token, self.signing_secret,
                                                  self.app_token) if s is not None)
        return [v for v in values if v]


class AwsConnection(Block):
    """AWS region and endpoint; credentials come from the usual AWS chain unless set here."""

    _block_type_name = "gpuops AWS connection"
    _block_type_slug = "gpuops-aws-connection"
    _description = "Where gpuops reads and changes node groups and Auto Scaling groups."

    region: str = Field("us-east-1", description="AWS region.")
    endpoint_url: str | None = Field(None, description="Endpoint override (moto in dev).")
    access_key_id: str | None = Field(None, description="Access key id (else the AWS chain).")
    secret_access_key: SecretStr | None = Field(None, description="Secret access key.")
    max_attempts: int = Field(10, ge=1, description="botocore retry attempts (adaptive mode).")

    @classmethod
    def from_settings(cls) -> AwsConnection:
        s = get_settings(AwsSettings)
        return cls(region=s.region, endpoint_url=s.endpoint_url)
