"""A stand-in Kubernetes API server for namespaced custom resources, strict where the snapshot job's safety
depends on it (no real kube-apiserver is installable here):

* authentication: a bearer token names a ServiceAccount, an unknown token gets 401;
* RBAC: every request is authorized against the Roles bound to that ServiceAccount by RoleBindings in the
  request's namespace (apiGroups, resources, verbs, resourceNames, ``*``), as the RBAC authorizer does: 403
  with a ``Status`` otherwise;
* list requests honour ``labelSelector`` with the Kubernetes selector syntax (equality- and set-based:
  ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``); a malformed one gets 400;
* create refuses an existing name (409), delete a missing one (404).
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY = rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}"
_VALUE = rf"({_NAME})?"
_REQUIREMENT = re.compile(
    rf"^(?:!\s*(?P<absent>{_KEY})"
    rf"|(?P<key>{_KEY})\s*(?:(?P<op>==|=|!=)\s*(?P<value>{_VALUE})"
    rf"|\s+(?P<setop>in|notin)\s*\((?P<values>[^()]*)\))?)$"
)


class SelectorError(ValueError):
    """A label selector the API server would refuse."""


def _requirements(selector: str) -> Iterator[str]:
    """The comma-separated requirements of a selector (commas inside ``( )`` belong to a set)."""
    depth, start = 0, 0
    for i, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            yield selector[start:i].strip()
            start = i + 1
    yield selector[start:].strip()


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Whether ``labels`` satisfy every requirement of ``selector`` (empty: everything matches).
    ``!=`` and ``notin`` match objects without the key, as in Kubernetes."""
    if not selector.strip():
        return True
    for text in _requirements(selector):
        m = _REQUIREMENT.match(text)
        if not m:
            raise SelectorError(f"unable to parse requirement: {text!r}")
        if m["absent"]:
            ok = m["absent"] not in labels
        elif m["op"]:
            equal = labels.get(m["key"]) == m["value"]
            ok = not equal if m["op"] == "!=" else equal
        elif m["setop"]:
            values = {v.strip() for v in m["values"].split(",")}
            if not all(re.fullmatch(_VALUE, v) for v in values):
                raise SelectorError(f"invalid value in {text!r}")
            inside = m["key"] in labels and labels[m["key"]] in values
            ok = not inside if m["setop"] == "notin" else inside
        else:
            ok = m["key"] in labels
        if not ok:
            return False
    return True


def allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str, name: str | None) -> bool:
    """Whether one of a Role's ``rules`` grants ``verb`` on ``resource`` (object ``name``) of API ``group``."""

    def has(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    for rule in rules:
        names = rule.get("resourceNames") or []
        if (
            has(rule.get("apiGroups", []), group)
            and has(rule.get("resources", []), resource)
            and has(rule.get("verbs", []), verb)
            and (not names or name in names)
        ):
            return True
    return False


@dataclass
class Cluster:
    """What the stand-in knows: RBAC objects, tokens, and the stored objects by (namespace, resource, name)."""

    roles: list[dict[str, Any]]
    bindings: list[dict[str, Any]]
    tokens: dict[str, tuple[str, str]]
    """bearer token -> (namespace, name) of its ServiceAccount."""
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    """(verb, path, status) of every request, in order."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def authorized(self, account: tuple[str, str], namespace: str, group: str, resource: str, verb: str, name) -> bool:
        for binding in self.bindings:
            meta = binding["metadata"]
            subjects = binding.get("subjects") or []
            if meta["namespace"] != namespace or binding["roleRef"]["kind"] != "Role":
                continue
            if not any(s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == account for s in subjects):
                continue
            for role in self.roles:
                named = role["metadata"]
                bound = (named["namespace"], named["name"]) == (namespace, binding["roleRef"]["name"])
                if bound and allowed(role.get("rules") or [], group, resource, verb, name):
                    return True
        return False

    def stored(self, namespace: str, resource: str) -> list[dict[str, Any]]:
        return [o for (ns, res, _), o in sorted(self.objects.items()) if (ns, res) == (namespace, resource)]


_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?$"
)


class _Handler(BaseHTTPRequestHandler):
    cluster: Cluster

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                           "message": message, "code": code})  # fmt: skip

    def _serve(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        m = _PATH.match(url.path)
        name = m["name"] if m else None
        verb = {
            "GET": "get" if name else "watch" if query.get("watch") == ["true"] else "list",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection",
        }[method]
        code = self._handle(method, verb, m, name, query)
        self.cluster.requests.append((verb, self.path, code))

    def _handle(self, method: str, verb: str, m: re.Match[str] | None, name: str | None, query) -> int:
        c = self.cluster
        auth = self.headers.get("Authorization", "")
        account = c.tokens.get(auth.removeprefix("Bearer ")) if auth.startswith("Bearer ") else None
        if account is None:
            self._status(401, "Unauthorized", "Unauthorized")
            return 401
        if m is None:
            self._status(404, "NotFound", f"the server could not find the requested resource {self.path}")
            return 404
        ns, resource, group = m["ns"], m["resource"], m["group"] or ""
        if not c.authorized(account, ns, group, resource, verb, name):
            user = f"system:serviceaccount:{account[0]}:{account[1]}"
            message = (
                f'{resource}.{group} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
                f'in API group "{group}" in the namespace "{ns}"'
            )
            self._status(403, "Forbidden", message)
            return 403
        with c.lock:
            if verb == "create":
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = (ns, resource, body["metadata"]["name"])
                if key in c.objects:
                    self._status(409, "AlreadyExists", f'{resource} "{key[2]}" already exists')
                    return 409
                body["metadata"]["namespace"] = ns
                c.objects[key] = body
                self._reply(201, body)
                return 201
            if verb == "list":
                selector = (query.get("labelSelector") or [""])[0]
                try:
                    items = [
                        o
                        for o in c.stored(ns, resource)
                        if selector_matches(selector, o["metadata"].get("labels") or {})
                    ]
                except SelectorError as e:
                    self._status(400, "BadRequest", str(e))
                    return 400
                self._reply(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items})
                return 200
            key = (ns, resource, name or "")
            if key not in c.objects or verb not in ("get", "delete"):
                self._status(404, "NotFound", f'{resource} "{name}" not found')
                return 404
            self._reply(200, c.objects.pop(key) if verb == "delete" else c.objects[key])
            return 200

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve(cluster: Cluster) -> Iterator[str]:
    """Serve ``cluster`` on a free loopback port; yields its base URL."""
    handler = type("Handler", (_Handler,), {"cluster": cluster})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
