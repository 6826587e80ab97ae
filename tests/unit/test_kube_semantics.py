"""The offline Kubernetes semantics the isolation tests rely on, checked on the Kubernetes documentation's own
examples (concepts/services-networking/network-policies, concepts/policy/limit-range)."""

from __future__ import annotations

import pytest

from tests.kube_semantics import Pod, admit_container, allowed, default_storage_class, quantity, selects, tolerates


def policy(namespace: str, spec: dict) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": spec,
    }


# The docs' "test-network-policy" example.
DOCS_EXAMPLE = policy(
    "default",
    {
        "podSelector": {"matchLabels": {"role": "db"}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {
                "from": [
                    {"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}},
                    {"namespaceSelector": {"matchLabels": {"project": "myproject"}}},
                    {"podSelector": {"matchLabels": {"role": "frontend"}}},
                ],
                "ports": [{"protocol": "TCP", "port": 6379}],
            }
        ],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 5978}]}],
    },
)
DB = Pod("default", {"role": "db"}, ip="10.0.0.9")


@pytest.mark.parametrize(
    ("source", "port", "expected"),
    [
        (Pod("default", {"role": "frontend"}), 6379, True),
        (Pod("default", {"role": "frontend"}), 6380, False),  # only the listed port
        (Pod("default", {"role": "backend"}), 6379, False),  # podSelector alone: only matching pods
        (Pod("other", {"role": "frontend"}), 6379, False),  # ... of the policy's own namespace
        (Pod("other", {}, {"project": "myproject"}), 6379, True),  # namespaceSelector alone: every pod there
        (Pod("outside", ip="172.17.2.5"), 6379, True),  # ipBlock
        (Pod("outside", ip="172.17.1.5"), 6379, False),  # ... minus its except
    ],
)
def test_the_docs_example_policy_admits_exactly_what_the_docs_say(source, port, expected):
    assert allowed([DOCS_EXAMPLE], source, DB, port) is expected


def test_the_docs_example_limits_the_db_pods_egress():
    assert allowed([DOCS_EXAMPLE], DB, Pod("outside", ip="10.0.0.7"), 5978)
    assert not allowed([DOCS_EXAMPLE], DB, Pod("outside", ip="10.0.1.7"), 5978)
    assert not allowed([DOCS_EXAMPLE], DB, Pod("outside", ip="10.0.0.7"), 80)


def test_a_pod_no_policy_selects_accepts_everything():
    web = Pod("default", {"role": "web"})
    assert allowed([DOCS_EXAMPLE], Pod("anywhere"), web, 80)
    assert allowed([], Pod("anywhere"), web, 80)


def test_default_deny_and_allow_all_from_the_docs():
    deny = policy("default", {"podSelector": {}, "policyTypes": ["Ingress"]})
    allow = policy("default", {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]})
    pod = Pod("default", {"app": "x"})
    assert not allowed([deny], Pod("other"), pod, 80)
    assert not allowed([deny], Pod("default"), pod, 80)  # even from its own namespace
    assert allowed([deny, allow], Pod("other"), pod, 80)  # policies add up
    assert allowed([deny], Pod("other"), Pod("elsewhere"), 80)  # policies bind only their namespace


def test_namespace_and_pod_selector_in_one_peer_is_and_in_two_peers_is_or():
    both = {"namespaceSelector": {"matchLabels": {"user": "alice"}}, "podSelector": {"matchLabels": {"role": "client"}}}
    one = policy("default", {"podSelector": {}, "ingress": [{"from": [both]}]})
    two = policy(
        "default",
        {
            "podSelector": {},
            "ingress": [
                {"from": [{"namespaceSelector": both["namespaceSelector"]}, {"podSelector": both["podSelector"]}]}
            ],
        },
    )
    target = Pod("default")
    alice_client = Pod("a", {"role": "client"}, {"user": "alice"})
    alice_other = Pod("a", {"role": "db"}, {"user": "alice"})
    local_client = Pod("default", {"role": "client"})
    assert [allowed([one], p, target, 1) for p in (alice_client, alice_other, local_client)] == [True, False, False]
    assert [allowed([two], p, target, 1) for p in (alice_client, alice_other, local_client)] == [True, True, True]


def test_port_ranges_protocols_and_named_ports():
    ranged = policy(
        "default",
        {
            "podSelector": {},
            "ingress": [{"ports": [{"protocol": "TCP", "port": 32000, "endPort": 32768}, {"port": "metrics"}]}],
        },
    )
    target = Pod("default", named_ports={"metrics": 9121})
    assert allowed([ranged], Pod("x"), target, 32500)
    assert not allowed([ranged], Pod("x"), target, 32769)
    assert not allowed([ranged], Pod("x"), target, 32500, "UDP")
    assert allowed([ranged], Pod("x"), target, 9121)
    assert not allowed([ranged], Pod("x"), Pod("default"), 9121)  # the name resolves on the target only


def test_namespaces_always_carry_their_name_label():
    by_name = {
        "namespaceSelector": {
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a"]}]
        }
    }
    p = policy("default", {"podSelector": {}, "ingress": [{"from": [by_name]}]})
    assert allowed([p], Pod("a"), Pod("default"), 1)
    assert not allowed([p], Pod("b"), Pod("default"), 1)


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
    ],
)
def test_label_selectors(selector, labels, expected):
    assert selects(selector, labels) is expected


# LimitRange: the docs' "default limits and requests" walk-through (concepts/policy/limit-range).
DOCS_LIMIT_RANGE = {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "500m"}}]}


def test_a_container_with_a_limit_and_no_request_requests_its_limit():
    container, errors = admit_container(DOCS_LIMIT_RANGE, {"name": "c", "resources": {"limits": {"cpu": "700m"}}})
    assert container["resources"] == {"limits": {"cpu": "700m"}, "requests": {"cpu": "700m"}} and errors == []


def test_a_request_above_the_default_limit_is_invalid_as_the_docs_warn():
    container, errors = admit_container(DOCS_LIMIT_RANGE, {"name": "c", "resources": {"requests": {"cpu": "700m"}}})
    assert container["resources"]["limits"] == {"cpu": "500m"}
    assert errors and "must be less than or equal to cpu limit" in errors[0]


def test_a_default_limit_without_a_default_request_becomes_the_request():
    only_limit = {"limits": [{"type": "Container", "default": {"memory": "1Gi"}}]}
    container, _ = admit_container(only_limit, {"name": "c"})
    assert container["resources"] == {"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi"}}


def test_quantities():
    assert quantity("500m") * 2 == 1 and quantity("8Gi") == 8 * 2**30 and quantity("1G") == 10**9


def test_only_an_absent_class_gets_the_default_class():
    claim = {"spec": {"resources": {"requests": {"storage": "1Gi"}}}}
    assert default_storage_class(claim, "gp3")["spec"]["storageClassName"] == "gp3"
    assert "storageClassName" not in default_storage_class(claim, None)["spec"]
    empty = {"spec": {"storageClassName": ""}}
    assert default_storage_class(empty, "gp3")["spec"]["storageClassName"] == ""


# The documentation's example (concepts/scheduling-eviction/taint-and-toleration): `kubectl taint nodes node1
# key1=value1:NoSchedule` and the two tolerations that tolerate it; an empty key with Exists matches every taint,
# an empty effect every effect of the key.
TAINT = {"key": "key1", "value": "value1", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"}, True),
        ({"key": "key1", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "key1", "operator": "Exists"}, True),
        ({"key": "key1", "value": "value1"}, True),  # operator defaults to Equal
        ({"key": "key1", "operator": "Equal", "value": "other", "effect": "NoSchedule"}, False),
        ({"key": "key1", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "key2", "operator": "Exists"}, False),
    ],
)
def test_tolerations_match_taints_as_the_scheduler_does(toleration, expected):
    assert tolerates([toleration], TAINT) is expected
    assert tolerates([{"key": "unrelated", "operator": "Exists"}, toleration], TAINT) is expected
    assert not tolerates([], TAINT)
