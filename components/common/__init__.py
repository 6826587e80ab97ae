"""What components and backends share below them: Kubernetes building blocks (``kube``) and every pinned chart
version and container image (``versions``)."""
