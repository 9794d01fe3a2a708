"""simcluster's protobuf codec of built-in kinds (`apiserver/protobuf/`): a body decodes to
the dict the JSON path yields for the same object, with the schemas read from the kubectl
binary of the layer package. The kubectl-driven checks are in test_sim_kubectl_create.py.
"""

from __future__ import annotations

import base64

import pytest

from gpuops.simcluster.apiserver.protobuf import decode_body, kube_protobuf
from gpuops.simcluster.apiserver.protobuf.codec import MAGIC, go_duration, parse_go_duration
from gpuops.simcluster.apiserver.protobuf.descriptors import descriptors_in
from gpuops.simcluster.core.errors import ApiError

DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"},
                 "creationTimestamp": "2026-03-04T05:06:07Z", "generation": 3,
                 "finalizers": ["example.com/keep"],
                 "managedFields": [{"manager": "kubectl", "operation": "Update",
                                    "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                                    "time": "2026-03-04T05:06:07Z",
                                    "fieldsV1": {"f:spec": {"f:replicas": {}}}}]},
    "spec": {
        "replicas": 0, "paused": True, "revisionHistoryLimit": 0,
        "selector": {"matchLabels": {"app": "web"}},
        "strategy": {"type": "RollingUpdate",
                     "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [{
                    "name": "app", "image": "ghcr.io/acme/api:1.4.2",
                    "command": ["serve", "--port=8080"],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {
                        "name": "api-token", "key": "token", "optional": False}}}],
                    "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"},
                                  "requests": {"cpu": "500m"}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}},
                    "securityContext": {"readOnlyRootFilesystem": False}}]}}},
}


@pytest.fixture(scope="module")
def codec():
    return kube_protobuf()


def test_a_deployment_comes_back_as_it_went_in(codec):
    """Including the fields of structs Go embeds inline (a volume's `emptyDir`, a probe's
    `httpGet`, a secretKeyRef's `name`), which protobuf nests one level down."""
    assert codec.decode(codec.encode(DEPLOYMENT)) == DEPLOYMENT


def test_a_set_pointer_keeps_its_zero_and_a_zero_value_scalar_is_left_out(codec):
    """`replicas: 0` is not "no replicas given" (that defaults to 1); an empty string in a
    value field is what an absent one means."""
    body = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "", "generateName": ""},
            "spec": {"suspend": False, "backoffLimit": 0, "template": {
                "spec": {"restartPolicy": "Never", "hostNetwork": False,
                         "containers": [{"name": "t", "image": "busybox",
                                         "workingDir": ""}]}}}}
    assert codec.decode(codec.encode(body)) == {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {"suspend": False, "backoffLimit": 0, "template": {
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "t", "image": "busybox"}]}}}}


def test_secret_bytes_configmap_binary_data_and_micro_times_keep_their_json_form(codec):
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
              "type": "Opaque", "data": {"password": base64.b64encode(b"\x00hunter2").decode()}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
              "data": {"level": "debug"}, "binaryData": {"blob": "AAEC"}}
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "leader"},
             "spec": {"holderIdentity": "a", "renewTime": "2026-03-04T05:06:07.123456Z",
                      "leaseDurationSeconds": 15}}
    for obj in (secret, config, lease):
        assert codec.decode(codec.encode(obj)) == obj


def test_an_embedded_object_in_a_controller_revision_is_json(codec):
    revision = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": "web-5d8f"}, "revision": 2,
                "data": {"spec": {"template": {"metadata": {"labels": {"app": "web"}}}}}}
    assert codec.decode(codec.encode(revision)) == revision


def test_an_access_review_decodes_as_the_json_one():
    """What `kubectl auth can-i` posts, through the generic codec."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "metadata": {}, "spec": {"resourceAttributes": {
                  "namespace": "default", "verb": "create", "resource": "pods"}}}
    decoded = decode_body(kube_protobuf().encode(review))
    assert decoded == review


def test_go_durations_read_and_print_as_go_does():
    for nanos, text in [(0, "0s"), (3600 * 10**9, "1h0m0s"), (1_500_000_000, "1.5s"),
                        (300_000_000, "300ms"), (123_000_000_000, "2m3s"),
                        (-2_000, "-2µs"), (90 * 60 * 10**9 + 10**6, "1h30m0.001s")]:
        assert go_duration(nanos) == text
        assert parse_go_duration(text) == nanos


def test_a_body_without_the_envelope_or_with_broken_bytes_is_a_400_and_a_custom_kind_415(
        codec):
    with pytest.raises(ApiError) as e:
        decode_body(b'{"kind": "Namespace"}')
    assert e.value.code == 400 and "k8s\\x00 envelope" in str(e.value)
    good = codec.encode({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
    with pytest.raises(ApiError) as e:
        decode_body(good[:-3])
    assert e.value.code == 400 and "not valid protobuf" in str(e.value)
    unknown = codec.pool.FindMessageTypeByName("k8s.io.apimachinery.pkg.runtime.Unknown")
    from google.protobuf import message_factory
    custom = message_factory.GetMessageClass(unknown)()
    custom.typeMeta.apiVersion, custom.typeMeta.kind = "inference.networking.x-k8s.io/v1", "X"
    with pytest.raises(ApiError) as e:
        decode_body(MAGIC + custom.SerializeToString())
    assert e.value.code == 415 and e.value.reason == "UnsupportedMediaType"


def test_descriptors_are_found_in_a_binary_among_other_gzip_members():
    import gzip

    from google.protobuf import descriptor_pb2
    wanted = descriptor_pb2.FileDescriptorProto(name="k8s.io/api/demo/v1/generated.proto",
                                                package="k8s.io.api.demo.v1")
    other = descriptor_pb2.FileDescriptorProto(name="google/protobuf/any.proto")

    binary = (b"\x7fELF junk" + gzip.compress(other.SerializeToString(), mtime=0)
              + b"\x1f\x8b\x08\x00" + b"\x00" * 4 + b"not gzip"
              + gzip.compress(wanted.SerializeToString(), mtime=0) + b"tail")
    assert descriptors_in(binary) == [wanted.SerializeToString()]


def test_delete_options_sent_in_a_groups_version_decode_from_meta(codec):
    """client-go registers DeleteOptions in every group version: a typed delete of a
    Deployment sends it as apps/v1, a kind only meta.k8s.io has."""
    options = {"apiVersion": "apps/v1", "kind": "DeleteOptions",
               "propagationPolicy": "Foreground", "gracePeriodSeconds": 0,
               "dryRun": ["All"], "preconditions": {"uid": "5d8f"}}
    assert codec.decode(codec.encode(options)) == options
