"""The AWS verbs gpuops needs to size node pools, over boto3, with limits checked first.

Why a module of its own: every call goes through `_call`, which maps botocore errors to the
few classes of `gpuops.common.errors`, and every change is checked against min <= desired
<= max and the account's GPU quota *before* AWS sees it — moto (and a careless caller)
would accept desired > max, and a half-applied resize is worse than none. Retries of
throttling are botocore's own (adaptive mode, `AwsConnection.max_attempts`).

Reads return small frozen dataclasses, so callers never depend on boto3's dict shapes.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from gpuops.blocks.connections import AwsConnection
from gpuops.common.errors import (
    AwsError,
    AwsForbidden,
    AwsInvalid,
    AwsNotFound,
    AwsThrottled,
    AwsUnavailable,
    LimitViolation,
)

T = TypeVar("T")
_session_lock = threading.Lock()


@functools.cache
def _shared_session() -> boto3.session.Session:
    """One session per process: it caches the service models (a second or two to load), so
    each run need not load them again. Credentials are given per client, never stored here."""
    return boto3.session.Session()


_NOT_FOUND = {"ResourceNotFoundException", "NotFoundException", "NoSuchEntity",
              "ValidationError.NotFound"}
_FORBIDDEN = {"AccessDeniedException", "AccessDenied", "UnauthorizedOperation",
              "UnrecognizedClientException", "InvalidClientTokenId", "ExpiredTokenException"}
_THROTTLED = {"Throttling", "ThrottlingException", "TooManyRequestsException",
              "RequestLimitExceeded", "ScalingActivityInProgress", "ResourceContention",
              "ResourceInUseException"}  # EKS: another update of the node group is running


def map_client_error(e: ClientError) -> AwsError:
    error = e.response.get("Error", {})
    code = str(error.get("Code", ""))
    message = str(error.get("Message") or code or e)
    status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    operation = getattr(e, "operation_name", "")
    kw = {"code": code, "operation": operation}
    text = f"{operation}: {code}: {message}" if operation else f"{code}: {message}"
    if code in _NOT_FOUND or status == 404:
        return AwsNotFound(text, **kw)
    if code in _FORBIDDEN or status in (401, 403):
        return AwsForbidden(text, **kw)
    if code in _THROTTLED or status == 429:
        return AwsThrottled(text, **kw)
    if status >= 500:
        return AwsUnavailable(text, **kw)
    if status == 400 or code.startswith(("Invalid", "Validation")):
        return AwsInvalid(text, **kw)
    return AwsError(text, **kw)


def _call(fn: Callable[..., T], **kwargs: Any) -> T:
    try:
        return fn(**kwargs)
    except ClientError as e:
        raise map_client_error(e) from e
    except EndpointConnectionError as e:
        raise AwsUnavailable(f"AWS could not be reached: {e}") from e
    except BotoCoreError as e:
        raise AwsUnavailable(f"AWS call failed: {e}") from e


@dataclass(frozen=True)
class GroupScaling:
    """A node group's or ASG's sizes as AWS reports them, plus its instances (ASG only)."""

    name: str
    min_size: int
    max_size: int
    desired_size: int
    instances: int | None = None

    @property
    def effective_desired(self) -> int:
        """What the group converges to: desired clamped into [min, max]."""
        return min(max(self.desired_size, self.min_size), max(self.max_size, self.min_size))


@dataclass(frozen=True)
class GpuBudget:
    """The account's GPU quota for one family, and what other pools of it use (or will)."""

    family: str
    max_gpus: int
    gpus_per_node: int
    other_pools_gpus: int = 0

    def check(self, nodes: int, field: str) -> None:
        wanted = nodes * self.gpus_per_node + self.other_pools_gpus
        if wanted > self.max_gpus:
            raise LimitViolation(
                f"{nodes} nodes x {self.gpus_per_node} GPUs + {self.other_pools_gpus} GPUs in "
                f"other {self.family!r} pools = {wanted}, above the account quota of "
                f"{self.max_gpus} GPUs (quotas[{self.family!r}].max_gpus)", field=field)


EKS_FIELDS = ("scalingConfig.minSize", "scalingConfig.desiredSize", "scalingConfig.maxSize")
ASG_FIELDS = ("MinSize", "DesiredCapacity", "MaxSize")


def check_sizes(name: str, *, min_size: int, desired: int, max_size: int,
                fields: tuple[str, str, str] = EKS_FIELDS) -> None:
    """min <= desired <= max, each >= 0; raises `LimitViolation` naming the field."""
    min_f, desired_f, max_f = fields
    short = {f: f.rsplit(".", 1)[-1] for f in fields}
    for field, value in ((min_f, min_size), (desired_f, desired), (max_f, max_size)):
        if value < 0:
            raise LimitViolation(f"{value} is negative ({name!r})", field=field)
    if min_size > max_size:
        raise LimitViolation(f"{min_size} is above {short[max_f]} {max_size} ({name!r})",
                             field=min_f)
    if desired > max_size:
        raise LimitViolation(f"{desired} is above {short[max_f]} {max_size} ({name!r})",
                             field=desired_f)
    if desired < min_size:
        raise LimitViolation(f"{desired} is below {short[min_f]} {min_size} ({name!r})",
                             field=desired_f)


@dataclass
class Aws:
    """The EKS and Auto Scaling clients of one AwsConnection."""

    eks: Any
    autoscaling: Any

    @classmethod
    def from_connection(cls, conn: AwsConnection) -> Aws:
        secret = conn.secret_access_key.get_secret_value() if conn.secret_access_key else None
        config = Config(retries={"mode": "adaptive", "max_attempts": conn.max_attempts},
                        connect_timeout=5, read_timeout=30)
        kwargs = {"region_name": conn.region, "endpoint_url": conn.endpoint_url,
                  "aws_access_key_id": conn.access_key_id, "aws_secret_access_key": secret,
                  "config": config}
        with _session_lock:  # boto3 sessions are not thread-safe; their clients are
            session = _shared_session()
            return cls(session.client("eks", **kwargs), session.client("autoscaling", **kwargs))

    # --- EKS managed node groups ---------------------------------------------------------------

    def describe_nodegroup(self, cluster: str, nodegroup: str) -> GroupScaling:
        group = _call(self.eks.describe_nodegroup, clusterName=cluster,
                      nodegroupName=nodegroup)["nodegroup"]
        scaling = group.get("scalingConfig") or {}
        return GroupScaling(nodegroup, int(scaling.get("minSize", 0)),
                            int(scaling.get("maxSize", 0)), int(scaling.get("desiredSize", 0)))

    def update_nodegroup_scaling(self, cluster: str, nodegroup: str, *, min_size: int,
                                 max_size: int, desired_size: int,
                                 budget: GpuBudget | None = None) -> str:
        """Set all three sizes (EKS needs min <= desired <= max); returns the update id."""
        check_sizes(nodegroup, min_size=min_size, desired=desired_size, max_size=max_size)
        if budget is not None:
            budget.check(max(desired_size, min_size), "scalingConfig.desiredSize")
        answer = _call(self.eks.update_nodegroup_config, clusterName=cluster,
                       nodegroupName=nodegroup,
                       scalingConfig={"minSize": min_size, "maxSize": max_size,
                                      "desiredSize": desired_size})
        return str((answer.get("update") or {}).get("id", ""))

    # --- EC2 Auto Scaling groups ---------------------------------------------------------------

    def describe_asg(self, name: str) -> GroupScaling:
        groups = _call(self.autoscaling.describe_auto_scaling_groups,
                       AutoScalingGroupNames=[name])["AutoScalingGroups"]
        if not groups:
            raise AwsNotFound(f"Auto Scaling group {name!r} not found", code="NotFound",
                              operation="DescribeAutoScalingGroups")
        group = groups[0]
        live = [i for i in group.get("Instances", [])
                if i.get("LifecycleState", "InService") in ("InService", "Pending")]
        return GroupScaling(name, int(group["MinSize"]), int(group["MaxSize"]),
                            int(group["DesiredCapacity"]), len(live))

    def set_asg_desired_capacity(self, name: str, desired: int, *,
                                 budget: GpuBudget | None = None) -> None:
        """Set DesiredCapacity within the group's own [MinSize, MaxSize] (read first)."""
        current = self.describe_asg(name)
        check_sizes(name, min_size=current.min_size, desired=desired,
                    max_size=current.max_size, fields=ASG_FIELDS)
        if budget is not None:
            budget.check(desired, "DesiredCapacity")
        _call(self.autoscaling.set_desired_capacity, AutoScalingGroupName=name,
              DesiredCapacity=desired, HonorCooldown=False)

    def instance_group(self, instance_id: str) -> str | None:
        """The Auto Scaling group an instance is a live member of (the one behind a managed
        node group included), or None when it is in none or already leaving."""
        found = _call(self.autoscaling.describe_auto_scaling_instances,
                      InstanceIds=[instance_id]).get("AutoScalingInstances") or []
        for item in found:
            state = str(item.get("LifecycleState", "InService"))
            if state in ("InService", "Pending") or state.startswith("Pending:"):
                return str(item["AutoScalingGroupName"])
        return None

    def terminate_with_decrement(self, instance_id: str) -> None:
        """Terminate exactly this instance and lower its group's desired capacity by one,
        in one call: a bare decrease lets the group's termination policy pick the victim."""
        _call(self.autoscaling.terminate_instance_in_auto_scaling_group,
              InstanceId=instance_id, ShouldDecrementDesiredCapacity=True)

    def describe_warm_pool(self, name: str) -> dict[str, Any] | None:
        """The ASG's warm pool configuration, or None when it has none."""
        answer = _call(self.autoscaling.describe_warm_pool, AutoScalingGroupName=name)
        return answer.get("WarmPoolConfiguration") or None

    def put_warm_pool(self, name: str, *, min_size: int, max_prepared: int | None = None,
                      pool_state: str = "Stopped") -> None:
        """Keep `min_size` pre-initialised instances (stopped by default: disk paid, not
        compute) so a later scale-out skips boot, driver and image pull."""
        if min_size < 0:
            raise LimitViolation(f"{min_size} is negative ({name!r})", field="MinSize")
        if max_prepared is not None and max_prepared < min_size:
            raise LimitViolation(f"{max_prepared} is below MinSize {min_size} ({name!r})",
                                 field="MaxGroupPreparedCapacity")
        kwargs: dict[str, Any] = {"AutoScalingGroupName": name, "MinSize": min_size,
                                  "PoolState": pool_state}
        if max_prepared is not None:
            kwargs["MaxGroupPreparedCapacity"] = max_prepared
        _call(self.autoscaling.put_warm_pool, **kwargs)
