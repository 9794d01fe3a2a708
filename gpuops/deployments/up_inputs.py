"""What `gpuops up` checks before it starts anything, and the Slack it will talk to.

Every check here fails with `UpInputError`: one line naming the option or variable and the
fix (the CLI exits 2), before a component starts and long before "gpuops is up.".

Slack: a bot token in the environment means real Slack, except the local fake's own token,
which `<home>/env.sh` exports for other shells: a shell that sourced it must still get a
fresh fake from the next `gpuops up`, not a dead address taken for real Slack. Real Slack
needs the app's signing secret (the receiver verifies every click with it); the local stack
uses a random secret per install, kept in `<home>/slack-signing-secret` (mode 0600).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from gpuops.common.settings import UpSettings
from gpuops.deployments.services import ServiceStartError, ensure_port_free, read_kubeconfig_server

# The fake accepts any token; these are the ones gpuops itself hands out for it.
FAKE_SLACK_TOKEN = "xoxb-gpuops-fake"
LOCAL_FAKE_TOKENS = frozenset({FAKE_SLACK_TOKEN, "xoxb-local-fake"})
SIGNING_SECRET_FILE = "slack-signing-secret"


class UpInputError(ValueError):
    """An option or setting of `gpuops up` cannot work; the message says which and why."""


@dataclass(frozen=True)
class SlackChoice:
    """Which Slack `gpuops up` uses: the local fake (started by it) or the real one."""

    local_fake: bool
    signing_secret: SecretStr


def uses_local_fake(token: SecretStr | None) -> bool:
    """No token, or the local fake's own: start the fake."""
    return token is None or token.get_secret_value() in LOCAL_FAKE_TOKENS


def local_signing_secret(home: Path) -> SecretStr:
    """This install's signing secret for the local stack: made once, then reused."""
    path = Path(home) / SIGNING_SECRET_FILE
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        value = ""
    if not value:
        value = secrets.token_hex(32)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
    os.chmod(path, 0o600)  # also tightens a file someone copied in with looser rights
    return SecretStr(value)


def choose_slack(settings: UpSettings, home: Path) -> SlackChoice:
    if uses_local_fake(settings.slack_bot_token):
        return SlackChoice(local_fake=True, signing_secret=local_signing_secret(home))
    secret = settings.slack_signing_secret
    if secret is None or not secret.get_secret_value().strip():
        raise UpInputError(
            "GPUOPS_SLACK_BOT_TOKEN is a real Slack token but GPUOPS_SLACK_SIGNING_SECRET is "
            "not set: set it to your Slack app's signing secret (Basic Information > App "
            "Credentials), or unset GPUOPS_SLACK_BOT_TOKEN to use the local Slack fake")
    return SlackChoice(local_fake=False, signing_secret=secret)


def check_kubeconfig(kubeconfig: Path) -> None:
    try:
        read_kubeconfig_server(kubeconfig)
    except FileNotFoundError:
        raise UpInputError(f"--kubeconfig {str(kubeconfig)!r}: no such file; give the path of "
                           f"a kubeconfig, or omit --kubeconfig to start the simulated "
                           f"cluster") from None
    except (ValueError, OSError) as e:
        raise UpInputError(f"--kubeconfig {str(kubeconfig)!r}: {e}") from None


def check_scenario(scenario: str) -> None:
    from gpuops.simcluster.scenario import parse_scenario, scenario_text

    try:
        parse_scenario(*scenario_text(scenario))
    except ValueError as e:  # ScenarioError: every problem with its line
        problems = " ".join(line.strip() for line in str(e).splitlines())
        raise UpInputError(f"--scenario {scenario!r}: {problems}") from None
    except OSError as e:
        raise UpInputError(f"--scenario {scenario!r}: {e.strerror}") from None


def check_port(port: int, *, what: str, option: str) -> None:
    try:
        ensure_port_free(port, what=what, option=option)
    except ServiceStartError as e:
        raise UpInputError(str(e)) from None


def check_up_inputs(*, kubeconfig: Path | None, scenario: str, prefect_port: int,
                    sim_port: int) -> None:
    """Everything that can be checked before a component starts."""
    if kubeconfig is not None:
        check_kubeconfig(kubeconfig)
    else:
        check_scenario(scenario)
        if sim_port:
            check_port(sim_port, what="simulated cluster", option="--sim-port")
    check_port(prefect_port, what="Prefect server", option="--prefect-port")
