"""What `gpuops up` checks and sets up before it announces anything: bad inputs are one line
and exit code 2, a port in TIME_WAIT is free, the local fake's token is not real Slack, the
local stack's signing secret, Block types and approval policy, and the served deployments'
parameters."""

from __future__ import annotations

import asyncio
import socket
import stat
from pathlib import Path

import psutil
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from gpuops.common.settings import UpSettings
from gpuops.deployments.cli import app
from gpuops.deployments.services import ServiceStartError, ensure_port_free, free_port
from gpuops.deployments.up_inputs import (
    FAKE_SLACK_TOKEN,
    SIGNING_SECRET_FILE,
    choose_slack,
)

runner = CliRunner()


def _time_wait_port() -> int:
    """A port whose server closed its side of a connection first: it sits in TIME_WAIT."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            accepted.close()
            assert client.recv(1) == b""  # the server's FIN arrived
    assert any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_TIME_WAIT
               for c in psutil.net_connections(kind="tcp4"))
    return port


def test_a_port_in_time_wait_after_a_stop_is_free_for_a_restart() -> None:
    port = _time_wait_port()

    ensure_port_free(port, what="Prefect server", option="--prefect-port")


def test_a_port_someone_listens_on_is_refused_naming_the_option() -> None:
    with socket.socket() as stranger:
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        with pytest.raises(ServiceStartError, match=f"port {port} for the Prefect server is "
                           "already in use.*--prefect-port"):
            ensure_port_free(port, what="Prefect server", option="--prefect-port")


def _up(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    home = tmp_path / "home"
    result = runner.invoke(app, ["up", "--home", str(home), *args], env=env)
    return result, home


@pytest.mark.parametrize(("args", "message"), [
    (["--kubeconfig", "/nonexistent"],
     ("error: --kubeconfig '/nonexistent': no such file; give the path of a kubeconfig, or "
     "omit --kubeconfig to start the simulated cluster")),
    (["--scenario", "nosuch"],
     ("error: --scenario 'nosuch': invalid scenario 'nosuch'; nothing was created: (file): no "
     "such scenario: not a shipped one (default, empty) nor a file")),
    (["--capacity-mode", "always"],
     ("error: --capacity-mode / GPUOPS_CAPACITY_MODE: Input should be 'dry-run' or 'apply' "
     "(got 'always')")),
], ids=["missing-kubeconfig", "unknown-scenario", "bad-capacity-mode"])
def test_bad_inputs_fail_with_one_line_and_exit_2_before_anything_starts(
        tmp_path: Path, args: list[str], message: str) -> None:
    result, home = _up(tmp_path, *args)

    assert result.exit_code == 2
    assert result.stderr.strip() == message
    assert "gpuops is up." not in result.output
    assert not home.exists()  # nothing was started, not even a log


def test_a_prefect_port_held_by_another_program_fails_before_anything_starts(
        tmp_path: Path) -> None:
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        result, home = _up(tmp_path, "--prefect-port", str(port))

    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: port {port} for the Prefect server is already in use on 127.0.0.1; stop "
        f"whatever holds it or choose another with `--prefect-port`")
    assert not home.exists()


def test_a_real_slack_token_without_a_signing_secret_is_refused(tmp_path: Path) -> None:
    result, _ = _up(tmp_path, "--prefect-port", str(free_port()),
                    env={"GPUOPS_SLACK_BOT_TOKEN": "xoxb-1234-real",
                         "GPUOPS_SLACK_SIGNING_SECRET": ""})

    assert result.exit_code == 2
    assert result.stderr.startswith("error: GPUOPS_SLACK_BOT_TOKEN is a real Slack token but "
                                    "GPUOPS_SLACK_SIGNING_SECRET is not set")
    assert "xoxb-1234-real" not in result.output


def test_the_fakes_token_from_a_sourced_env_sh_means_the_local_fake(tmp_path: Path) -> None:
    sourced = UpSettings(slack_bot_token=SecretStr(FAKE_SLACK_TOKEN))

    assert choose_slack(sourced, tmp_path).local_fake
    assert choose_slack(UpSettings(slack_bot_token=None), tmp_path).local_fake
    real = choose_slack(UpSettings(slack_bot_token=SecretStr("xoxb-1234-real"),
                                   slack_signing_secret=SecretStr("s3cret")), tmp_path)
    assert not real.local_fake and real.signing_secret.get_secret_value() == "s3cret"


def test_the_local_signing_secret_is_random_per_install_private_and_kept(tmp_path: Path) -> None:
    first = choose_slack(UpSettings(), tmp_path / "a").signing_secret.get_secret_value()
    again = choose_slack(UpSettings(), tmp_path / "a").signing_secret.get_secret_value()
    other = choose_slack(UpSettings(), tmp_path / "b").signing_secret.get_secret_value()

    assert first == again != other
    assert len(first) == 64 and first != "local-signing-secret"
    path = tmp_path / "a" / SIGNING_SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_every_gpuops_block_type_is_found_for_registration() -> None:
    from gpuops.deployments.block_setup import gpuops_block_types

    slugs = {cls.get_block_type_slug() for cls in gpuops_block_types()}

    assert {"gpuops-kubernetes-cluster", "gpuops-slack-connection", "gpuops-aws-connection",
            "gpuops-approval-policy", "gpuops-restart-policy",
            "gpuops-capacity-config"} <= slugs


def test_the_local_policy_is_saved_once_with_the_local_approver_and_edits_are_kept(
        prefect_server) -> None:
    from gpuops.blocks.policy import ApprovalPolicy
    from gpuops.deployments.block_setup import (
        LOCAL_APPROVER,
        LOCAL_POLICY,
        ApprovalPolicyNotFound,
        ensure_approval_policy,
    )

    async def scenario() -> None:
        try:  # a fresh server has none (another test's start may have saved it)
            await ApprovalPolicy.adelete(LOCAL_POLICY)
        except ValueError:
            pass
        with_local = await ensure_approval_policy("")
        assert with_local.approvers == [LOCAL_APPROVER] == ["U0LOCALOPS"]
        edited = await ApprovalPolicy.aload(LOCAL_POLICY)
        edited.approvers = ["U0LOCALOPS", "U0REALONE"]
        await edited.save(LOCAL_POLICY, overwrite=True)
        assert (await ensure_approval_policy("")).approvers == ["U0LOCALOPS", "U0REALONE"]
        with pytest.raises(ApprovalPolicyNotFound, match="approval policy 'no-such-policy' "
                           "could not be loaded.*omit `--approval-policy`"):
            await ensure_approval_policy("no-such-policy")

    asyncio.run(scenario())


def test_the_served_flows_use_the_named_policy_and_the_hourly_run_says_its_mode() -> None:
    from gpuops.deployments.serve import deployments

    default = {f"{d.flow_name}/{d.name}": d.parameters for d in deployments()}
    named = {f"{d.flow_name}/{d.name}": d.parameters
             for d in deployments(approval_policy="oncall", capacity_mode="apply")}

    assert default["capacity-prewarm/hourly"] == {"mode": "dry-run"}
    assert named["capacity-prewarm/hourly"] == {"mode": "apply", "policy_block": "oncall"}
    # Every flow that asks for approval asks the named policy's approvers.
    for asking in ("drain-node/on-demand", "gpu-rebalance/on-stranded",
                   "serving-rollout/on-demand"):
        assert named[asking] == {"policy_block": "oncall"}, asking
    assert named["gpu-consolidate/on-idle"]["policy_block"] == "oncall"
    assert named["capacity-for-pending/on-capacity-needed"]["policy_block"] == "oncall"
