"""The settings machinery: the base of every settings section, the field types, the problems a bad value
raises, the one way a settings tree is checked, and the configuration reference generated from the models.
Component modules define their own sections on top of it; it imports none of them."""

from .base import ControllerSettings, Resources, Section
from .fields import Cron, DnsLabel, KmsKeyArn, PinnedImage, Quantity, Regex, ResourceRef, Window
from .layers import merge
from .problems import Problem, SettingsError
from .reference import every_key, leaf_keys, reference
from .validation import CONFIG_DOCS, rule_problems, validate

__all__ = [
    "CONFIG_DOCS",
    "ControllerSettings",
    "Cron",
    "DnsLabel",
    "KmsKeyArn",
    "PinnedImage",
    "Problem",
    "Quantity",
    "Regex",
    "ResourceRef",
    "Resources",
    "Section",
    "SettingsError",
    "Window",
    "every_key",
    "leaf_keys",
    "merge",
    "reference",
    "rule_problems",
    "validate",
]
