"""What the components run on: the object stores (``object_stores``: MinIO, AWS S3, Ceph RGW, and the bucket
and scoped-access model they share) and the JuiceFS metadata engines (``metadata_engines``: Redis, Redis with
Sentinel, ElastiCache). The ObjectStore and MetadataEngine components choose among them; a backend imports no
component."""
