"""A team's workspace on a cluster where the ai-storage-platform stack is already up.

Reads this project's config (see Pulumi.dev.yaml and docs/components/team.md), creates the team's namespace,
Volcano Queue, cold-tier dataset claim, checkpoint claim and TrainJob, and exports their names.
"""

import pulumi
from ai_storage_platform.settings import stack_config
from ai_storage_platform.team import TeamWorkspace, TeamWorkspaceArgs, load_team_settings, platform_offsite

settings = load_team_settings(stack_config())
platform = settings.workspace.platform_stack
offsite = platform_offsite(platform) if platform else None
workspace = TeamWorkspace(settings.workspace.namespace, TeamWorkspaceArgs(settings, offsite=offsite))

pulumi.export("namespace", workspace.namespace)
pulumi.export("queue", workspace.queue)
pulumi.export("datasetClaim", workspace.dataset_claim)
pulumi.export("checkpointClaim", workspace.checkpoint_claim)
pulumi.export("trainJob", workspace.train_job)
