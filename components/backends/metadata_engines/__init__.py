"""Metadata engine backends of the MetadataEngine component: standalone Redis (``redis``), Redis with Sentinel
(``redis_sentinel``, with its start script ``redis-start.sh``) and AWS ElastiCache (``elasticache``)."""
