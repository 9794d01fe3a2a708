"""kubectl on simcluster's OpenAPI: `apply -f` with kubectl's own validation (the server's,
`fieldValidation=Strict`), `explain`, and what an unknown field gets, with the real kubectl
1.33 (`tests/kubectl.py`). Field names and types expected come from the official client's
models, not from a copy of kubectl's output."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(180)
NS = "default"

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: app
        {image_field}: ghcr.io/acme/api:1.4.2
        imagePullPolicy: IfNotPresent
"""


def manifest(tmp_path: Path, name: str, image_field: str = "image") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(DEPLOYMENT.format(name=name, image_field=image_field))
    return str(path)


def test_apply_validates_without_validate_false(sim, kubectl, tmp_path):
    out = kubectl(sim, "apply", "-f", manifest(tmp_path, "web"))
    assert out.strip() == "deployment.apps/web created"
    assert kubectl(sim, "apply", "-f", manifest(tmp_path, "web")).strip() == \
        "deployment.apps/web unchanged"
    stored = client.AppsV1Api(sim.api).read_namespaced_deployment("web", NS)
    assert stored.spec.template.spec.containers[0].image == "ghcr.io/acme/api:1.4.2"


def test_apply_of_an_unknown_field_fails_with_the_servers_strict_decoding_error(
        sim, kubectl, tmp_path):
    path = manifest(tmp_path, "web", image_field="imagee")
    done = kubectl.run(sim, "apply", "-f", path)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f'Error from server (BadRequest): error when creating "{path}": Deployment in version '
        '"v1" cannot be handled as a Deployment: strict decoding error: unknown field '
        '"spec.template.spec.containers[0].imagee"')
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(sim.api).read_namespaced_deployment("web", NS)
    assert err.value.status == 404


def test_validate_warn_prints_the_servers_warning(sim, kubectl, tmp_path):
    kubectl(sim, "apply", "-f", manifest(tmp_path, "web"))
    path = tmp_path / "labelled.yaml"
    path.write_text(Path(manifest(tmp_path, "web")).read_text().replace(
        "  name: web\n", "  name: web\n  labelz: {tier: front}\n"))
    done = kubectl.run(sim, "apply", "--validate=warn", "-f", str(path))
    assert done.returncode == 0, done.stderr
    assert 'Warning: unknown field "metadata.labelz"' in done.stderr
    assert done.stdout.strip() == "deployment.apps/web configured"


def test_explain_shows_a_fields_type_description_and_its_fields(sim, kubectl):
    out = kubectl(sim, "explain", "pods.spec.containers")
    lines = out.splitlines()
    assert lines[:2] == ["KIND:       Pod", "VERSION:    v1"]
    assert "FIELD: containers <[]Container>" in lines
    description = client.V1PodSpec.model_fields["containers"].description
    assert " ".join(out.split("DESCRIPTION:")[1].split("FIELDS:")[0].split()).startswith(
        description)
    listed = {line.split("\t")[0].strip() for line in lines
              if line.startswith("  ") and not line.startswith("   ") and "\t" in line}
    assert listed == set(client.V1Container.attribute_map.values())
    assert "  name\t<string> -required-" in lines
    assert "  ports\t<[]ContainerPort>" in lines


def test_explain_a_custom_resource_reads_its_crds_schema(sim, kubectl):
    client.ApiextensionsV1Api(sim.api).create_custom_resource_definition({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "runbooks.gpuops.io"},
        "spec": {"group": "gpuops.io", "scope": "Namespaced",
                 "names": {"plural": "runbooks", "singular": "runbook", "kind": "Runbook"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                     "openAPIV3Schema": {"type": "object", "properties": {"spec": {
                         "type": "object", "description": "What the runbook does.",
                         "properties": {"steps": {"type": "array", "description":
                                                  "Steps, in order.",
                                                  "items": {"type": "string"}}}}}}}}]}})
    custom = client.CustomObjectsApi(sim.api)
    wait_for(lambda: custom.list_namespaced_custom_object("gpuops.io", "v1", NS, "runbooks")
             is not None, timeout=10, message="runbooks served")
    out = kubectl(sim, "explain", "runbooks.spec")
    assert "KIND:       Runbook" in out and "GROUP:      gpuops.io" in out
    assert "What the runbook does." in out
    assert "  steps\t<[]string>" in out.splitlines()


def test_explain_from_openapi_v2_reads_the_protobuf_document(sim, kubectl):
    """kubectl's v2 reader (client-go's OpenAPISchema) takes gnostic protobuf only."""
    out = kubectl(sim, "explain", "--output", "plaintext-openapiv2", "deployments.spec.strategy")
    lines = out.splitlines()
    assert lines[:2] == ["KIND:     Deployment", "VERSION:  apps/v1"]
    assert "RESOURCE: strategy <Object>" in lines
    listed = {line.split("\t")[0].strip() for line in lines
              if line.startswith("   ") and not line.startswith("    ") and "\t" in line}
    assert listed == set(client.V1DeploymentStrategy.attribute_map.values())
