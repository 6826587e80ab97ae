"""A team's fair share of the cold tier: its own slice of the node cache volume and a bandwidth limit to the object
store, on every JuiceFS claim the platform vends to it (``tenants``: its datasets and its space).

Without them one team's dataset evicts every other team's cached blocks (one cache, least recently used first) and
one job's reads can take the nodes' whole link to the object store. A JuiceFS mount pod runs per PersistentVolume
and keeps its own count of its cache directory, so each vended claim caches in a directory of its own,
``<juicefs.cache.cacheDir>/teams/<team>/<claim>``, with the team's share split evenly between its claims; the
limits (JuiceFS ``download-limit``, ``upload-limit``, Mbit/s) hold per mount, on each node. The shares of every
team, beside the cold tier's shared cache and Fluid's levels, must fit the node cache volume (``node_cache``).
"""

from __future__ import annotations

from pydantic import Field

from ..common.sections import Section


class TeamIoSettings(Section):
    """A team's share of the nodes' JuiceFS cache and its bandwidth limits to the object store."""

    cache_size_mib: int | None = Field(None, ge=1024, le=100_000_000)
    """The team's share of the node cache volume on each node, MiB: its vended JuiceFS claims cache under
    `<juicefs.cache.cacheDir>/teams/<team>/<claim>`, the share split evenly between them; unset: they share the
    cold tier's cache with everyone."""
    download_limit_mbps: int | None = Field(None, ge=1, le=1_000_000)
    """Most each of the team's mounts reads from the object store, Mbit/s (JuiceFS `download-limit`, per node);
    unset: no limit."""
    upload_limit_mbps: int | None = Field(None, ge=1, le=1_000_000)
    """Most each of the team's mounts writes to the object store, Mbit/s (JuiceFS `upload-limit`, per node);
    unset: no limit."""

    def mount_options(self, cache_dir: str, team: str, claim: str, claims: int) -> list[str]:
        """The JuiceFS mount options of the team's vended ``claim`` (one of its ``claims``), over the cold tier's."""
        options = []
        if self.cache_size_mib is not None:
            dirs = ":".join(f"{d.rstrip('/')}/teams/{team}/{claim}" for d in cache_dir.split(":"))
            options += [f"cache-dir={dirs}", f"cache-size={self.cache_size_mib // claims}"]
        if self.download_limit_mbps is not None:
            options.append(f"download-limit={self.download_limit_mbps}")
        if self.upload_limit_mbps is not None:
            options.append(f"upload-limit={self.upload_limit_mbps}")
        return options
