"""Object store backends of the ObjectStore component: in-cluster MinIO (``minio``), AWS S3 (``s3``) and Ceph
RGW (``ceph_rgw``), with what they share (``bucket``: the bucket, scoped access and prefix policies)."""
