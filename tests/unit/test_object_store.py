"""ObjectStore: MinIO owned in-cluster for dev, AWS S3 with the guards a production bucket needs."""

from tests.conftest import by_name


def inputs_of(monitor, type_):
    return [r.inputs for r in monitor.registrations if r.type == type_]


def test_minio_statefulset_is_pinned_and_credentials_come_from_random(render_stack):
    result, monitor = render_stack("dev")
    sts = by_name(result, "StatefulSet", "minio")
    image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "quay.io/minio/minio:RELEASE.2025-09-07T16-13-09Z"
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert by_name(result, "Secret", "minio-root")["stringData"] == {
        "MINIO_ROOT_PASSWORD": "[secret]",
        "MINIO_ROOT_USER": "[secret]",
    }
    types = {r.type for r in monitor.registrations}
    assert {"random:index/randomPassword:RandomPassword", "random:index/randomString:RandomString"} <= types


def test_minio_bucket_job_creates_the_bucket_idempotently(render_stack):
    result, _ = render_stack("dev")
    job = by_name(result, "Job", "minio-bucket-ai-datasets-dev")
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "mc mb --ignore-existing" in script


def test_distributed_minio_lists_every_server(render_stack):
    result, _ = render_stack("dev", objectStore={"minio": {"replicas": 4}})
    args = by_name(result, "StatefulSet", "minio")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "http://minio-{0...3}.minio-hl.object-store.svc.cluster.local/data" in args


def test_s3_bucket_has_versioning_encryption_public_block_and_lifecycle(render_stack):
    result, monitor = render_stack("dev", objectStore={"backend": "s3", "s3": {"transitionDays": 14}})
    types = [r.type for r in monitor.registrations]
    for t in (
        "aws:s3/bucket:Bucket",
        "aws:s3/bucketVersioning:BucketVersioning",
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    ):
        assert t in types, t
    assert not any(
        o.get("kind") == "StatefulSet" and o["metadata"]["name"] == "minio"
        for objs in result.manifests.values()
        for o in objs
    )
    versioning = inputs_of(monitor, "aws:s3/bucketVersioning:BucketVersioning")[0]
    assert versioning["versioningConfiguration"]["status"] == "Enabled"
    block = inputs_of(monitor, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")[0]
    assert all(block[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"))
    rule = inputs_of(monitor, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")[0]["rules"][0]
    assert rule["transitions"] == [{"days": 14, "storageClass": "STANDARD_IA"}]
    assert "aws:iam/accessKey:AccessKey" in types
    assert result.outputs["objectStoreEndpoint"] == "https://s3.us-east-1.amazonaws.com"


def test_s3_with_oidc_uses_a_role_for_service_accounts_not_keys(render_stack):
    arn = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
    _, monitor = render_stack("dev", objectStore={"backend": "s3", "s3": {"oidcProviderArn": arn}})
    types = [r.type for r in monitor.registrations]
    assert "aws:iam/role:Role" in types and "aws:iam/accessKey:AccessKey" not in types
    trust = inputs_of(monitor, "aws:iam/role:Role")[0]["assumeRolePolicy"]
    assert "system:serviceaccount:juicefs-csi:juicefs-csi-node-sa" in trust


def test_protect_flag_guards_bucket_and_data_volumes(render_stack):
    _, monitor = render_stack(
        "dev",
        cluster={"protectStatefulResources": True},
        objectStore={"backend": "s3"},
        metadata={"acceptNodeLossRisk": True},
    )
    guarded = {r.name for r in monitor.registrations if r.protect and r.retain_on_delete}
    assert {"ai-storage-object-store-bucket", "ai-storage-metadata-redis"} <= guarded
    _, monitor = render_stack("dev")
    assert not any(r.protect for r in monitor.registrations)


def test_ceph_rgw_user_takes_keys_from_a_secret_the_platform_owns(render_stack):
    result, monitor = render_stack("dev", objectStore={"backend": "ceph-rgw"})
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
    assert regs["ai-storage-rook-ceph-object-store"].urn in regs["ai-storage-object-store-rgw-user"].dependencies


def test_ceph_rgw_endpoint_is_the_gateway_service(render_stack):
    result, _ = render_stack("dev", objectStore={"backend": "ceph-rgw"})
    assert result.outputs["objectStoreEndpoint"] == "http://rook-ceph-rgw-ai-objects.rook-ceph.svc:80"
    assert result.outputs["objectStoreBucket"] == "ai-datasets-dev"
    assert "minio" not in {c["chart"] for c in result.charts}
    assert [o for o in result.manifests.get("object-store", []) if o["kind"] == "StatefulSet"] == []
