"""The Slack fake's page in a real browser (Debian's Chromium, headless, driven by Selenium):
a drain waiting for approval shows up on the page, a click on Approve there reaches the real
receiver as a signed Slack interaction from the local user, the run resumes and the node is
cordoned, and the page shows the verdict.

Everything is real but Slack: simcluster over HTTP, the Prefect server, the drain-node flow,
gpuops' Bolt receiver and the Slack fake with its page."""

from __future__ import annotations

import asyncio
import json
import shutil
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prefect.client.orchestration import get_client
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as page_shows
from selenium.webdriver.support.ui import WebDriverWait

from gpuops.blocks.connections import KubernetesCluster, SlackConnection
from gpuops.blocks.policy import ApprovalPolicy
from gpuops.deployments.services import free_port
from gpuops.deployments.slackfake import start_slack_fake
from gpuops.flows.drain_node import drain_node
from gpuops.sensors.slack_receiver import serve_http
from tests import helpers
from tests.helpers import wait_for
from tests.servers import LoopThread
from tests.test_slackfake import real_receiver

pytestmark = pytest.mark.timeout(240)

LOCAL_USER = "U0LOCALOPS"
SIGNING_SECRET = "browser-test-signing-secret"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1280,1100")
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        pytest.fail("Chromium or its driver is missing: `apt-get install chromium "
                    "chromium-driver` (Debian's packages; `make test` installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    yield driver
    driver.quit()


@dataclass
class Stack:
    page_url: str
    v1: client.CoreV1Api
    blocks: dict[str, str]

    def messages(self) -> list[dict]:
        with _direct.open(f"{self.page_url}/_fake/messages", timeout=10) as response:
            return json.loads(response.read())["messages"]


@pytest.fixture
def stack(prefect_server: str, sim: Any) -> Iterator[Stack]:
    """The Slack fake sending clicks to the real receiver, a node with two pods, and the
    drain flow's Blocks with the local user as the one approver."""
    loop = LoopThread()
    port = free_port()
    runner, base_url = loop.run(start_slack_fake(
        "127.0.0.1", 0, signing_secret=SIGNING_SECRET, local_user=LOCAL_USER,
        interactions_url=f"http://127.0.0.1:{port}/slack/events"))
    loop.on_stop(runner.cleanup)
    conn = SlackConnection(bot_token="xoxb-test-token", signing_secret=SIGNING_SECRET,
                           base_url=base_url, default_channel="#ops")
    policy = ApprovalPolicy(approvers=[LOCAL_USER], channel="#ops", timeout_s=120,
                            poll_interval_s=1, expiry_grace_s=60)
    receiver = loop.run(serve_http(real_receiver(conn, policy), "127.0.0.1", port))
    loop.on_stop(receiver.cleanup)
    v1 = client.CoreV1Api(sim.api)
    gpus = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    v1.create_node({"metadata": {"name": "gpu-1", "labels": {"gpuops.io/pool": "h100"}},
                    "status": {"capacity": gpus, "allocatable": gpus,
                               "conditions": [{"type": "Ready", "status": "True"}]}})
    for i in range(2):
        v1.create_namespaced_pod("default", {
            "metadata": {"name": f"worker-{i}"},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "image": "busybox:1"}]}})
    suffix = uuid.uuid4().hex[:8]
    blocks = {"cluster_block": f"cluster-{suffix}", "slack_block": f"slack-{suffix}",
              "policy_block": f"policy-{suffix}"}

    async def save() -> None:
        await KubernetesCluster(cluster_name="test", kubeconfig_path=str(sim.kubeconfig)
                                ).save(blocks["cluster_block"])
        await conn.save(blocks["slack_block"])
        await policy.save(blocks["policy_block"])

    asyncio.run(save())
    yield Stack(base_url.removesuffix("/api/"), v1, blocks)
    loop.stop()


class DrainThread(helpers.FlowThread):
    def run_flow(self, **params: Any) -> Any:
        return asyncio.run(drain_node(**params, return_state=True))


def _run_paused(flow_run_id: str) -> bool:
    async def paused() -> bool:
        async with get_client() as c:
            run = await c.read_flow_run(uuid.UUID(flow_run_id))
            return bool(run.state and run.state.is_paused())
    return asyncio.run(paused())


def _approval_run_id(stack: Stack) -> str:
    for message in stack.messages():
        for block in message.get("blocks") or []:
            if block.get("type") == "actions":
                return json.loads(block["elements"][0]["value"])["flow_run_id"]
    return ""


def test_approving_a_drain_on_the_page_resumes_the_run_and_shows_the_verdict(
        stack: Stack, browser: WebDriver, tmp_path: Path) -> None:
    browser.get(stack.page_url + "/")  # before the request exists: the page must refresh
    run = DrainThread(node="gpu-1", reason="Xid 79 on GPU 3", **stack.blocks)
    wait = WebDriverWait(browser, 60)

    wait.until(page_shows.element_to_be_clickable(
        (By.CSS_SELECTOR, 'nav a[href="/channels/ops"]'))).click()
    wait.until(page_shows.text_to_be_present_in_element(
        (By.TAG_NAME, "main"), "Approval needed: Drain node gpu-1"))
    run_id = wait_for(lambda: _approval_run_id(stack), message="the approval request")
    wait_for(lambda: _run_paused(run_id), timeout=60, message="the run to wait for approval")
    approve = browser.find_element(By.XPATH, "//button[normalize-space()='Approve']")
    assert approve.is_enabled()
    approve.click()
    confirm = wait.until(page_shows.alert_is_present())  # the button's Slack confirm dialog
    assert confirm.text.startswith("Approve this change?")
    confirm.accept()

    wait.until(page_shows.text_to_be_present_in_element(
        (By.TAG_NAME, "main"), f"{LOCAL_USER} clicked Approve — the receiver answered HTTP 200"))
    state = run.result()
    assert state.is_completed() and state.name == "Completed"
    assert stack.v1.read_node("gpu-1").spec.unschedulable
    wait.until(page_shows.text_to_be_present_in_element(
        (By.TAG_NAME, "main"), f"Approved by @{LOCAL_USER}"))
    assert not browser.find_elements(By.XPATH, "//button[normalize-space()='Approve']")
    screenshot = tmp_path / "slack-page-approved.png"
    browser.save_screenshot(str(screenshot))
    print(f"screenshot of the page: {screenshot}")
