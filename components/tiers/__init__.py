"""The storage tiers and what serves them. Read ``storage_tiers`` first: the tiers (hot, warm, cold, checkpoint,
block), their StorageClasses and the backends that may serve each. Then one module per system: ``rook_ceph`` with
``ceph`` (its settings: pools, CephFS, RGW) and ``ceph_toolbox``, ``local_nvme`` (TopoLVM), ``juicefs`` with
``node_cache``, ``object_store`` and ``metadata_engine`` (the durable copy and JuiceFS's metadata), and what checks
them: ``acceptance`` (a Job per tier), ``capacity`` (promised against held), ``decision_records`` (what each tier
was sized for). ``node_storage`` holds what every node-level piece shares (tolerations, node selectors)."""
