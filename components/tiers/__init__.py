"""The storage tiers and what serves them. Read ``storage_tiers`` first: the tiers (hot, warm, cold, checkpoint,
block) and their StorageClasses; then ``backend`` (what a tier backend is and the ``Registration`` each makes) and
``registry`` (the list of them, the one place a backend is added). One module per backend: ``rook_ceph`` (CephFS
and RBD, with ``ceph``, its settings, and ``ceph_toolbox``), ``local_nvme`` (TopoLVM), ``juicefs_volume`` (JuiceFS:
``juicefs`` with ``node_cache``, on ``object_store`` with ``metadata_engine``), ``efs`` and ``fsx_lustre`` (Amazon
EFS and FSx for Lustre through the EKS add-ons). What checks them: ``acceptance`` (a Job per tier), ``capacity``
(promised against held), ``decision_records`` (what each tier was sized for). ``node_storage`` holds what every
node-level piece shares (tolerations, node selectors)."""
