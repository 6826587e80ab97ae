"""What keeps data when something breaks. Read ``checkpoints`` first: the checkpoint tier's protection (retention,
``checkpoint_snapshots``, the ``checkpoint_offsite`` copy), then ``checkpoint_restore`` (the Job that proves a
checkpoint restores) and ``metadata_backup`` (JuiceFS metadata dumps to the object store)."""
