"""A team's workspace on a cluster where the ai-storage-platform stack is already up.

Reads this project's config (see Pulumi.dev.yaml and docs/components/team.md), creates the team's namespace,
Volcano Queue, cold-tier dataset claim, checkpoint claim and TrainJob, and exports their names.
"""

import pulumi
from ai_storage_platform.settings import stack_config
from ai_storage_platform.team import TeamWorkspace, TeamWorkspaceArgs, load_team_settings

settings = load_team_settings(stack_config())
workspace = TeamWorkspace("vision", TeamWorkspaceArgs(settings))

pulumi.export("namespace", workspace.namespace)
pulumi.export("queue", workspace.queue)
pulumi.export("datasetClaim", workspace.dataset_claim)
pulumi.export("checkpointClaim", workspace.checkpoint_claim)
pulumi.export("trainJob", workspace.train_job)
