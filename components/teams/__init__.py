"""Many teams on one platform. Read ``tenants`` first: the platform stack's teams (namespaces, quotas, keys of
their own). Then ``quotas``, ``namespace_rules`` (what a team namespace may hold), ``network_policies``,
``team_spaces`` (JuiceFS directory quotas), ``artifacts`` (published models) and ``team_io`` (what a team stack
reads from the platform's outputs). ``team`` is the team stack's component (``TeamWorkspace``) and ``workspace``
what it builds."""
