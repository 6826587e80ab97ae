"""The ai-storage-platform policy pack: ``pulumi preview --policy-pack policy``."""

from pulumi_policy import EnforcementLevel, PolicyPack
from rules import POLICIES

PolicyPack(name="ai-storage-platform", policies=POLICIES, enforcement_level=EnforcementLevel.MANDATORY)
