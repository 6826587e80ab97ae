"""ObjectStore: MinIO owned in-cluster for dev, AWS S3 with the guards a production bucket needs, Ceph RGW."""

import pulumi

from components import versions
from components.ceph import RookCephSettings
from components.minio import MinioSettings
from components.object_store import ObjectStore, ObjectStoreArgs, ObjectStoreSettings
from components.rook_ceph import RgwGateway, RookCeph, RookCephArgs
from components.s3 import S3Settings
from tests.conftest import by_name, objects

MINIO = ObjectStoreSettings()
RGW = ObjectStoreSettings(backend="ceph-rgw", bucket="ai-datasets-test")


def store(settings: ObjectStoreSettings = MINIO, protect: bool = False, rgw: RgwGateway | None = None) -> ObjectStore:
    built = ObjectStore("store", ObjectStoreArgs(settings, protect, rgw=rgw))
    pulumi.export("endpoint", built.endpoint)
    pulumi.export("bucket", built.bucket)
    return built


def store_on_ceph(settings: ObjectStoreSettings = RGW) -> ObjectStore:
    """The ceph-rgw backend on the gateway a real RookCeph hands over."""
    ceph = RookCeph("ceph", RookCephArgs(RookCephSettings(), rgw=True))
    return store(settings, rgw=ceph.rgw)


def inputs_of(monitor, type_):
    return [r.inputs for r in monitor.registrations if r.type == type_]


def test_minio_statefulset_is_pinned_and_credentials_come_from_random(build):
    result, monitor = build(lambda: store(ObjectStoreSettings(minio=MinioSettings(storage_size="20Gi"))))
    sts = by_name(result, "StatefulSet", "minio")
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == versions.MINIO_IMAGE
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert by_name(result, "Secret", "minio-root")["stringData"] == {
        "MINIO_ROOT_PASSWORD": "[secret]",
        "MINIO_ROOT_USER": "[secret]",
    }
    types = {r.type for r in monitor.registrations}
    assert {"random:index/randomPassword:RandomPassword", "random:index/randomString:RandomString"} <= types


def test_minio_bucket_job_creates_the_bucket_idempotently(build):
    result, _ = build(lambda: store(ObjectStoreSettings(bucket="ai-datasets-test")))
    job = by_name(result, "Job", "minio-bucket-ai-datasets-test")
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "mc mb --ignore-existing" in script


def test_distributed_minio_lists_every_server(build):
    result, _ = build(lambda: store(ObjectStoreSettings(minio=MinioSettings(replicas=4))))
    args = by_name(result, "StatefulSet", "minio")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "http://minio-{0...3}.minio-hl.object-store.svc.cluster.local/data" in args


def test_s3_bucket_has_versioning_encryption_public_block_and_lifecycle(build):
    s3 = S3Settings(region="eu-west-1", transition_days=14)
    result, monitor = build(lambda: store(ObjectStoreSettings(backend="s3", s3=s3)))
    types = [r.type for r in monitor.registrations]
    for t in (
        "aws:s3/bucket:Bucket",
        "aws:s3/bucketVersioning:BucketVersioning",
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    ):
        assert t in types, t
    assert objects(result, "StatefulSet") == []  # no MinIO
    versioning = inputs_of(monitor, "aws:s3/bucketVersioning:BucketVersioning")[0]
    assert versioning["versioningConfiguration"]["status"] == "Enabled"
    block = inputs_of(monitor, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")[0]
    assert all(block[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"))
    rule = inputs_of(monitor, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")[0]["rules"][0]
    assert rule["transitions"] == [{"days": 14, "storageClass": "STANDARD_IA"}]
    assert "aws:iam/accessKey:AccessKey" in types
    assert result.outputs["endpoint"] == "https://s3.eu-west-1.amazonaws.com"


def test_s3_with_oidc_uses_a_role_for_service_accounts_not_keys(build):
    arn = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
    _, monitor = build(lambda: store(ObjectStoreSettings(backend="s3", s3=S3Settings(oidc_provider_arn=arn))))
    types = [r.type for r in monitor.registrations]
    assert "aws:iam/role:Role" in types and "aws:iam/accessKey:AccessKey" not in types
    trust = inputs_of(monitor, "aws:iam/role:Role")[0]["assumeRolePolicy"]
    assert "system:serviceaccount:juicefs-csi:juicefs-csi-node-sa" in trust


def test_protect_flag_guards_bucket_and_data_volumes(build):
    # That the stack's cluster.protectStatefulResources reaches every stateful resource (the metadata engine's
    # too) is the security gate's whole-stack test; here the component honours the flag it is given.
    _, monitor = build(lambda: store(ObjectStoreSettings(backend="s3"), protect=True))
    assert {r.name for r in monitor.registrations if r.protect and r.retain_on_delete} == {"store-bucket"}
    _, monitor = build(lambda: store(protect=True))
    assert {r.name for r in monitor.registrations if r.protect and r.retain_on_delete} == {"store-minio"}
    for settings in (MINIO, ObjectStoreSettings(backend="s3")):
        _, monitor = build(lambda settings=settings: store(settings))
        assert not any(r.protect for r in monitor.registrations)


def test_ceph_rgw_user_takes_keys_from_a_secret_the_platform_owns(build):
    result, monitor = build(store_on_ceph)
    user = by_name(result, "CephObjectStoreUser", "juicefs")
    assert user["metadata"]["namespace"] == "rook-ceph"
    assert user["spec"]["store"] == "ai-objects"
    ref = user["spec"]["keys"][0]
    assert ref["accessKeyRef"] == {"name": "rgw-juicefs-keys", "key": "access-key"}
    assert ref["secretKeyRef"] == {"name": "rgw-juicefs-keys", "key": "secret-key"}
    assert by_name(result, "Secret", "rgw-juicefs-keys")["stringData"] == {
        "access-key": "[secret]",
        "secret-key": "[secret]",
    }
    regs = {r.name: r for r in monitor.registrations}
    assert regs["ceph-object-store"].urn in regs["store-rgw-user"].dependencies


def test_ceph_rgw_endpoint_is_the_gateway_service(build):
    result, _ = build(store_on_ceph)
    assert result.outputs == {"endpoint": "http://rook-ceph-rgw-ai-objects.rook-ceph.svc:80", "bucket": RGW.bucket}
    assert "minio" not in {c["chart"] for c in result.charts}
    assert [o for o in result.manifests["store"] if o["kind"] == "StatefulSet"] == []
