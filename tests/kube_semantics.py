"""What the API server and a NetworkPolicy-enforcing CNI do with the objects the platform renders, written from the
Kubernetes documentation and source, for tests that have no cluster: label selectors, NetworkPolicy evaluation,
LimitRange defaulting and pod resource validation, the DefaultStorageClass admission plugin, taint tolerations.

No maintained Python library does this offline: network-config-analyzer (PyPI, IBM) evaluates NetworkPolicies but
pins PyYAML 6.0.2 and networkx 3.2.1, below the versions this project pins. ``tests/unit/test_kube_semantics.py``
checks each function here on the Kubernetes documentation's own examples.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

# ---------------------------------------------------------------- label selectors (metav1.LabelSelector)


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector matches ``labels``: every matchLabels pair and every matchExpressions requirement
    (In, NotIn, Exists, DoesNotExist; NotIn also matches an absent key); an empty selector matches everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req["key"], req["operator"], req.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown selector operator {op!r}")
    return True


# ---------------------------------------------------------------- NetworkPolicy (networking.k8s.io/v1)


@dataclass(frozen=True)
class Pod:
    """A pod as NetworkPolicies see it: its namespace (and that namespace's labels), its labels, its IP and the
    named container ports it declares."""

    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    ip: str | None = None
    named_ports: Mapping[str, int] = field(default_factory=dict)

    def ns_labels(self) -> Mapping[str, str]:
        """The namespace's labels, with the ``kubernetes.io/metadata.name`` label the API server always sets."""
        return {**self.namespace_labels, "kubernetes.io/metadata.name": self.namespace}


def policy_types(policy: Mapping[str, Any]) -> list[str]:
    """``spec.policyTypes``, or its default: Ingress, plus Egress when the policy has egress rules."""
    spec = policy["spec"]
    if spec.get("policyTypes"):
        return list(spec["policyTypes"])
    return ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def applies_to(policy: Mapping[str, Any], pod: Pod, direction: str) -> bool:
    """Whether ``policy`` isolates ``pod`` in ``direction`` (it is in the pod's namespace and selects it)."""
    meta = policy["metadata"]
    return (
        meta.get("namespace", "default") == pod.namespace
        and selects(policy["spec"].get("podSelector"), pod.labels)
        and direction in policy_types(policy)
    )


def peer_matches(peer: Mapping[str, Any], policy_namespace: str, other: Pod) -> bool:
    """Whether a NetworkPolicyPeer matches the pod at the other end: podSelector alone means pods of the policy's
    namespace; namespaceSelector alone, every pod of the matching namespaces; both, the matching pods of the
    matching namespaces; ipBlock, the pod's IP inside the CIDR and outside every ``except``."""
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        if other.ip is None:
            return False
        ip = ipaddress.ip_address(other.ip)
        inside = ip in ipaddress.ip_network(block["cidr"])
        return inside and not any(ip in ipaddress.ip_network(e) for e in block.get("except") or [])
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.ns_labels()):
            return False
    elif other.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], other.labels)


def port_matches(ports: Sequence[Mapping[str, Any]] | None, target: Pod, port: int, protocol: str) -> bool:
    """Whether a rule's ``ports`` admit ``port``/``protocol`` on ``target``: none listed admits all; an entry
    without a port admits every port of its protocol (TCP by default); ``endPort`` makes a range; a named port is
    the target's container port of that name."""
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        number = target.named_ports.get(p["port"]) if isinstance(p["port"], str) else p["port"]
        if number is None:
            continue
        if number == port or (p.get("endPort") is not None and number <= port <= p["endPort"]):
            return True
    return False


def _direction_allows(
    policies: Sequence[Mapping[str, Any]], pod: Pod, other: Pod, target: Pod, port: int, protocol: str, way: str
) -> bool:
    rules_key, peers_key = ("ingress", "from") if way == "Ingress" else ("egress", "to")
    isolating = [p for p in policies if applies_to(p, pod, way)]
    if not isolating:
        return True  # a pod no policy selects (for this direction) is not isolated
    for policy in isolating:
        ns = policy["metadata"].get("namespace", "default")
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            if peers and not any(peer_matches(peer, ns, other) for peer in peers):
                continue
            if port_matches(rule.get("ports"), target, port, protocol):
                return True
    return False


def allowed(policies: Sequence[Mapping[str, Any]], source: Pod, target: Pod, port: int, protocol: str = "TCP") -> bool:
    """Whether ``source`` may open a connection to ``target``'s ``port``: the source's egress and the target's
    ingress must both allow it; policies are additive (any one rule of any selecting policy suffices)."""
    ingress = _direction_allows(policies, target, source, target, port, protocol, "Ingress")
    egress = _direction_allows(policies, source, target, target, port, protocol, "Egress")
    return ingress and egress


# ---------------------------------------------------------------- quantities, LimitRange, pod validation

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "m": Fraction(1, 1000),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def quantity(value: str) -> Fraction:
    """A resource.Quantity's exact value (``500m`` is 1/2, ``8Gi`` is 8 * 2**30)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?", str(value))
    if not match:
        raise ValueError(f"not a quantity: {value!r}")
    return Fraction(match.group(1)) * _SUFFIX[match.group(2) or ""]


def default_limit_range_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A Container LimitRange item as the API server stores it (SetDefaults_LimitRangeItem): a missing default
    limit is the max; a missing default request is the default limit, else the min."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in item.items()}
    if out["type"] != "Container":
        return out
    default = out.setdefault("default", {})
    request = out.setdefault("defaultRequest", {})
    for key, value in (out.get("max") or {}).items():
        default.setdefault(key, value)
    for key, value in default.items():
        request.setdefault(key, value)
    for key, value in (out.get("min") or {}).items():
        request.setdefault(key, value)
    return out


def default_container(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container after API defaulting (SetDefaults_Pod): a resource with a limit and no request requests its
    limit."""
    resources = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    for key, value in limits.items():
        requests.setdefault(key, value)
    return {**container, "resources": {"limits": limits, "requests": requests}}


def limit_ranger(limit_range_spec: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any]:
    """The LimitRanger admission plugin's defaulting of one container (mergeContainerResources): every default
    limit the container lacks, then every default request it lacks, from the namespace's Container items."""
    limits_default: dict[str, str] = {}
    requests_default: dict[str, str] = {}
    for item in limit_range_spec.get("limits") or []:
        stored = default_limit_range_item(item)
        if stored["type"] == "Container":
            requests_default.update(stored["defaultRequest"])
            limits_default.update(stored["default"])
    resources = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    for key, value in limits_default.items():
        limits.setdefault(key, value)
    for key, value in requests_default.items():
        requests.setdefault(key, value)
    return {**container, "resources": {"limits": limits, "requests": requests}}


def resource_errors(container: Mapping[str, Any]) -> list[str]:
    """Pod validation of a container's resources (ValidateResourceRequirements): a request above its limit."""
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    return [
        f"{container['name']}.resources.requests[{key}]: Invalid value: {requests[key]!r}: must be less than or "
        f"equal to {key} limit of {limit}"
        for key, limit in limits.items()
        if key in requests and quantity(requests[key]) > quantity(limit)
    ]


def admit_container(limit_range_spec: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """A container as created in a namespace with the LimitRange: defaulted, LimitRanger-defaulted, validated."""
    final = limit_ranger(limit_range_spec, default_container(container))
    return final, resource_errors(final)


# ---------------------------------------------------------------- DefaultStorageClass admission


def default_storage_class(claim: Mapping[str, Any], default_class: str | None) -> dict[str, Any]:
    """The DefaultStorageClass admission plugin: a claim whose ``storageClassName`` is absent (nil) gets the
    cluster's default class, if one is marked; an empty string is an explicit "no class" and stays."""
    spec = dict(claim["spec"])
    if spec.get("storageClassName") is None and default_class is not None:
        spec["storageClassName"] = default_class
    return {**claim, "spec": spec}


# ---------------------------------------------------------------- taints and tolerations


def tolerates(tolerations: Sequence[Mapping[str, Any]] | None, taint: Mapping[str, str]) -> bool:
    """Whether a pod with ``tolerations`` may be scheduled onto (and stay on) a node with ``taint`` (key, value,
    effect), as the scheduler's TaintToleration plugin decides (``Toleration.ToleratesTaint``): a toleration
    matches when its effect is empty or the taint's, its key is the taint's (an empty key with ``Exists`` matches
    every key), and its operator is ``Exists``, or ``Equal`` (the default) with the taint's value."""
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False
