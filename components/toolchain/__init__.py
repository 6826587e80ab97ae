"""The offline toolchain: the renderer (``render``) that runs the Pulumi program under Pulumi's mock engine
(``mock_engine``), the storage-aware diff of two renders (``plan_diff``) and the command line (``cli``,
``python -m components``). It imports the components; no component imports it."""
