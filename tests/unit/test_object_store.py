"""ObjectStore: MinIO owned in-cluster for dev, AWS S3 with the guards a production bucket needs, Ceph RGW."""

import json

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.backends.object_stores.bucket import check_prefix, prefix_policy
from components.backends.object_stores.minio import MinioSettings
from components.backends.object_stores.s3 import S3Settings
from components.common import versions
from components.tiers.ceph import RookCephSettings
from components.tiers.object_store import ObjectStore, ObjectStoreArgs, ObjectStoreSettings
from components.tiers.rook_ceph import RgwGateway, RookCeph, RookCephArgs
from tests.conftest import by_name, objects, scoped_policy

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
    s3 = S3Settings(region="eu-west-1", transition_days=14, archive_prefixes=["artifacts/"])
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
    every, archive = inputs_of(monitor, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")[0]["rules"]
    assert "transitions" not in every and every["filter"] == {"prefix": ""}  # JuiceFS's blocks never move
    assert archive["filter"] == {"prefix": "artifacts/"}
    assert archive["transitions"] == [{"days": 14, "storageClass": "STANDARD_IA"}]
    assert result.outputs["endpoint"] == "https://s3.eu-west-1.amazonaws.com"


def test_s3_has_no_admin_credentials_only_scopes(build):
    arn = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
    for s3 in (S3Settings(), S3Settings(oidc_provider_arn=arn)):
        _, monitor = build(lambda s3=s3: store(ObjectStoreSettings(backend="s3", s3=s3)))
        assert not [r for r in monitor.registrations if r.type.startswith("aws:iam/")]


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


OIDC = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
TEAM = ("vision", "offsite")
"""The (namespace, ServiceAccount) a team's offsite copies run as."""


def two_scopes(built: ObjectStore) -> ObjectStore:
    """A team's checkpoints and the metadata backups, as a platform asks for them."""
    for name, prefix, account in (
        ("vision", "checkpoints/vision/", TEAM),
        ("backup", "meta-backups/", ("juicefs-csi", "metadata-backup")),
    ):
        access = built.scoped_access(name, prefix, account)
        pulumi.export(f"{name}-access-key", access.access_key)
        pulumi.export(f"{name}-role", access.role_arn)
    built.finish()
    return built


def test_prefix_policy_reaches_only_the_prefix_and_lists_only_under_it():
    statements = {s["Sid"]: s for s in json.loads(prefix_policy("b", "checkpoints/vision/"))["Statement"]}
    assert statements["ObjectsUnderPrefix"]["Resource"] == "arn:aws:s3:::b/checkpoints/vision/*"
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"} <= set(statements["ObjectsUnderPrefix"]["Action"])
    listing = statements["ListUnderPrefix"]
    assert listing["Resource"] == "arn:aws:s3:::b"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["checkpoints/vision/*"]}}
    assert statements["BucketLocation"]["Action"] == ["s3:GetBucketLocation"]
    assert all(s["Effect"] == "Allow" and "*" not in s["Action"] for s in statements.values())


def test_a_scope_prefix_must_be_whole_path_segments(build):
    for bad in ("checkpoints/vision", "/checkpoints/", "checkpoints/*", "", "Checkpoints/"):
        with pytest.raises(ValueError, match="trailing '/'"):
            check_prefix(bad)

    def twice() -> None:
        built = store()
        built.scoped_access("vision", "checkpoints/vision/", TEAM)
        built.scoped_access("vision", "checkpoints/other/", TEAM)

    with pytest.raises(Exception, match="scope 'vision' exists already"):
        build(twice)


def test_s3_scope_is_an_iam_user_whose_policy_names_only_its_prefix(build):
    result, monitor = build(lambda: two_scopes(store(ObjectStoreSettings(backend="s3", bucket="ai-data-x"))))
    users = {u["name"]: u for u in inputs_of(monitor, "aws:iam/user:User")}
    assert {"ai-data-x-vision", "ai-data-x-backup"} <= set(users)
    assert users["ai-data-x-vision"]["tags"]["ai-storage-platform/service-account"] == "vision/offsite"
    policies = {p["policy"] for p in inputs_of(monitor, "aws:iam/userPolicy:UserPolicy")}
    assert scoped_policy("ai-data-x", "checkpoints/vision/") in [json.loads(p) for p in policies]
    assert scoped_policy("ai-data-x", "meta-backups/") in [json.loads(p) for p in policies]
    assert result.outputs["vision-access-key"] == "[secret]"
    assert result.outputs["vision-role"] is None


def test_s3_scope_with_oidc_is_a_role_only_its_service_account_assumes(build):
    settings = ObjectStoreSettings(backend="s3", bucket="ai-data-x", s3=S3Settings(oidc_provider_arn=OIDC))
    result, monitor = build(lambda: two_scopes(store(settings)))
    roles = [json.loads(r["assumeRolePolicy"]) for r in inputs_of(monitor, "aws:iam/role:Role")]
    issuer = "oidc.eks.us-east-1.amazonaws.com/id/ABC"
    team = [
        r
        for r in roles
        if r["Statement"][0]["Condition"]["StringEquals"][f"{issuer}:sub"] == ["system:serviceaccount:vision:offsite"]
    ]
    assert len(team) == 1, roles
    statement = team[0]["Statement"][0]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Principal"] == {"Federated": OIDC}
    assert statement["Condition"]["StringEquals"][f"{issuer}:aud"] == "sts.amazonaws.com"
    policies = {p["policy"] for p in inputs_of(monitor, "aws:iam/rolePolicy:RolePolicy")}
    assert scoped_policy("ai-data-x", "checkpoints/vision/") in [json.loads(p) for p in policies]
    assert not [u for u in inputs_of(monitor, "aws:iam/user:User") if u["name"].endswith("-vision")]
    assert result.outputs["vision-role"] is not None


def test_minio_scope_is_a_user_and_policy_made_by_a_job_of_its_own(build):
    result, _ = build(lambda: two_scopes(store(ObjectStoreSettings(bucket="ai-data-x"))))
    jobs = {j["metadata"]["name"]: j for j in objects(result, "Job")}
    assert {"minio-scope-vision", "minio-scope-backup"} <= set(jobs)
    job = jobs["minio-scope-vision"]
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == versions.MINIO_CLIENT_IMAGE
    script = pod["containers"][0]["args"][0]
    for step in ("mc admin user add", "mc admin policy create", "mc admin policy attach"):
        assert step in script
    assert {"name": "POLICY", "value": "scope-vision"} in pod["containers"][0]["env"]
    assert {"name": "scope", "secret": {"secretName": "minio-scope-vision"}} in pod["volumes"]
    keys = by_name(result, "Secret", "minio-scope-vision")
    assert keys["metadata"]["namespace"] == "object-store"
    assert keys["stringData"] == {"access-key": "[secret]", "secret-key": "[secret]"}
    policy = next(e["value"] for e in pod["containers"][0]["env"] if e["name"] == "POLICY_DOCUMENT")
    assert json.loads(policy) == scoped_policy("ai-data-x", "checkpoints/vision/")
    # No key in the pod spec: the Job reads them from the mounted Secret.
    assert "[secret]" not in json.dumps(pod)


def test_minio_scope_keys_reach_their_users_only_once_the_job_has_made_them(build):
    def program():
        built = store()
        access = built.scoped_access("vision", "checkpoints/vision/", TEAM)
        keys = {"access-key": access.access_key, "secret-key": access.secret_key}
        k8s.core.v1.Secret("client", metadata={"name": "client", "namespace": "vision"}, string_data=keys)
        built.finish()

    _, monitor = build(program)
    job = next(r for r in monitor.registrations if r.name == "store-vision-user-job")
    client = next(r for r in monitor.registrations if r.name == "client")
    assert job.urn in client.dependencies, "a client of the keys would not wait for the MinIO user to exist"


def test_ceph_rgw_scope_is_a_user_granted_its_prefix_by_the_bucket_policy(build):
    result, _ = build(lambda: two_scopes(store_on_ceph()))
    user = by_name(result, "CephObjectStoreUser", "scope-vision")
    assert user["spec"]["keys"][0]["accessKeyRef"] == {"name": "rgw-scope-vision-keys", "key": "access-key"}
    claim = by_name(result, "ObjectBucketClaim", RGW.bucket)
    assert claim["metadata"]["namespace"] == "rook-ceph"
    config = claim["spec"]["additionalConfig"]
    assert config["bucketOwner"] == "juicefs"
    grants = {}
    for s in json.loads(config["bucketPolicy"])["Statement"]:
        for principal in s["Principal"]["AWS"]:
            grants.setdefault(principal, set()).add(s.get("Resource"))
    assert grants["arn:aws:iam:::user/scope-vision"] == {
        f"arn:aws:s3:::{RGW.bucket}/checkpoints/vision/*",
        f"arn:aws:s3:::{RGW.bucket}",
    }
    assert f"arn:aws:s3:::{RGW.bucket}/meta-backups/*" in grants["arn:aws:iam:::user/scope-backup"]
    storage_class = by_name(result, "StorageClass", claim["spec"]["storageClassName"])
    assert storage_class["provisioner"] == "rook-ceph.ceph.rook.io/bucket"
    operator = next(c for c in result.charts if c["chart"] == "rook-ceph")
    assert "bucketPolicy" in operator["values"]["obcAllowAdditionalConfigFields"].split(",")


def test_ceph_rgw_refuses_a_scope_after_the_bucket_policy_is_written(build):
    def late() -> None:
        built = two_scopes(store_on_ceph())
        built.scoped_access("late", "checkpoints/late/", ("late", "offsite"))

    with pytest.raises(Exception, match="after the ceph-rgw bucket policy was written"):
        build(late)


@pytest.mark.parametrize("backend", ["minio", "s3", "ceph-rgw"])
def test_a_read_only_scope_may_list_and_read_its_prefix_and_nothing_more(build, backend):
    def program():
        s3 = ObjectStoreSettings(backend="s3", bucket="ai-data-x")
        built = store_on_ceph() if backend == "ceph-rgw" else store(s3 if backend == "s3" else MINIO)
        built.scoped_access("serving", "artifacts/vision/", ("serving", "reader"), read_only=True)
        built.scoped_access("vision", "artifacts/vision/", ("vision", "artifacts"))
        built.finish()

    result, monitor = build(program)
    if backend == "ceph-rgw":
        claim = by_name(result, "ObjectBucketClaim", RGW.bucket)
        statements = json.loads(claim["spec"]["additionalConfig"]["bucketPolicy"])["Statement"]
        actions = {}
        for s in statements:
            for principal in s["Principal"]["AWS"]:
                actions.setdefault(principal.rsplit("/", 1)[1], set()).update(s["Action"])
        reader, writer = actions["scope-serving"], actions["scope-vision"]
        marks = by_name(result, "CephObjectStoreUser", "scope-serving")["metadata"]["annotations"]
    else:
        documents = {}  # scope name -> (policy document, annotations or tags)
        by_name_ = {r.name: r for r in monitor.registrations}
        for scope in ("serving", "vision"):
            if backend == "s3":
                user = by_name_[f"store-{scope}-user"]
                documents[scope] = (by_name_[f"store-{scope}-user-policy"].inputs["policy"], user.inputs["tags"])
            else:
                job = by_name_[f"store-{scope}-user-job"].inputs
                env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
                documents[scope] = (env["POLICY_DOCUMENT"], job["metadata"]["annotations"])

        def acts(scope: str) -> set[str]:
            return {a for statement in json.loads(documents[scope][0])["Statement"] for a in statement["Action"]}

        reader, writer = acts("serving"), acts("vision")
        marks = documents["serving"][1]
    assert reader == {"s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"}
    assert {"s3:PutObject", "s3:DeleteObject"} <= writer
    assert marks["ai-storage-platform/access"] == "read-only"


def test_the_s3_region_follows_the_providers_aws_region_unless_the_stack_sets_it():
    from components.backends.object_stores.s3 import with_provider_region
    from components.common.sections import SettingsError

    assert with_provider_region({}, "eu-central-1")["objectStore"]["s3"]["region"] == "eu-central-1"
    given = {"objectStore": {"backend": "s3", "s3": {"region": "eu-central-1", "transitionDays": 9}}}
    assert with_provider_region(given, "eu-central-1") == given
    assert with_provider_region(given, None) == given  # no aws:region: the key's own value (or its default)
    with pytest.raises(SettingsError, match=r"objectStore\.s3\.region: expected aws:region's 'us-west-2'"):
        with_provider_region(given, "us-west-2")


def test_a_rendered_s3_stack_names_the_endpoint_of_aws_region(tmp_path):
    import yaml

    from components.toolchain import render
    from tests.conftest import stack_file

    path = stack_file(tmp_path, "prod", {})
    data = yaml.safe_load(path.read_text())
    data["config"]["aws:region"] = "eu-west-3"  # the provider's region; the stack leaves objectStore.s3.region
    path.write_text(yaml.safe_dump(data))
    result = render.rendering("prod", render.run("prod", path))
    assert result.outputs["objectStoreEndpoint"] == "https://s3.eu-west-3.amazonaws.com"


KMS_KEY = "arn:aws:kms:eu-west-3:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def test_s3_with_a_customer_key_encrypts_with_it_and_each_scope_may_use_only_it(build):
    settings = ObjectStoreSettings(backend="s3", bucket="ai-data-x", s3=S3Settings(kms_key_arn=KMS_KEY))

    def program() -> None:
        built = two_scopes(store(settings))
        built.scoped_access("reader", "datasets/", ("vision", "reader"), read_only=True)

    _, monitor = build(program)
    (encryption,) = inputs_of(
        monitor, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    default = encryption["rules"][0]["applyServerSideEncryptionByDefault"]
    assert default == {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": KMS_KEY}
    keys = {}
    for policy in inputs_of(monitor, "aws:iam/userPolicy:UserPolicy"):
        statements = json.loads(policy["policy"])["Statement"]
        keys[statements[0]["Resource"].split("/", 1)[1]] = [s for s in statements if s["Resource"] == KMS_KEY]
    assert [s["Action"] for s in keys["checkpoints/vision/*"]] == [["kms:Decrypt", "kms:GenerateDataKey"]]
    assert [s["Action"] for s in keys["datasets/*"]] == [["kms:Decrypt"]]  # a reader makes no data keys
    _, plain = build(lambda: two_scopes(store(ObjectStoreSettings(backend="s3", bucket="ai-data-x"))))
    (encryption,) = inputs_of(
        plain, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    assert encryption["rules"][0]["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms"}
    assert all("kms:" not in p["policy"] for p in inputs_of(plain, "aws:iam/userPolicy:UserPolicy"))
