"""A team's workspace in the namespace the ai-storage-platform stack vended to it (`teams.workspaces`).

Reads this project's config (see Pulumi.dev.yaml and docs/components/team.md), creates the team's checkpoint
claim, its snapshots and offsite copies, the dataset claim (unless it mounts a shared dataset) and the
TrainJob, and exports their names. It holds no key of the platform and reads no output of the platform's stack.
"""

import pulumi
from ai_storage_platform import TeamWorkspace, TeamWorkspaceArgs, load_team_settings, stack_config

settings = load_team_settings(stack_config())
workspace = TeamWorkspace(settings.workspace.namespace, TeamWorkspaceArgs(settings))

pulumi.export("namespace", workspace.namespace)
pulumi.export("queue", workspace.queue)
pulumi.export("datasetClaim", workspace.dataset_claim)
pulumi.export("checkpointClaim", workspace.checkpoint_claim)
pulumi.export("trainJob", workspace.train_job)
