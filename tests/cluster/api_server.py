"""A real Kubernetes v1.33 API server for tests: ``../shared/tools/kubernetes/kube-up`` (kube-apiserver with RBAC,
Pod Security admission, CRD structural schemas and CEL, ValidatingAdmissionPolicies; etcd from Debian) where the
machine provides kube-apiserver (``KUBE_UP_BIN`` or PATH; none is shipped), and a small REST client that applies
objects by server-side apply, dry run or for real, and returns what the server said.

Each object is one request (``PATCH`` with ``application/apply-patch+yaml``), so a refusal and every ``Warning``
header belong to the object that caused them. The resource path of a kind comes from the server's discovery.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conformance.upstream import SHARED

TOOLS = SHARED / "tools" / "kubernetes"
FIELD_MANAGER = "ai-storage-platform-tests"


class NoControlPlaneError(Exception):
    """kube-up could not start one here (exit 3: no kube-apiserver provided; 2: a tool it needs is missing)."""


@dataclass
class Outcome:
    """What the server said to one object."""

    label: str
    status: int
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300


def label(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


class ApiServer:
    """A running kube-up control plane (``start``/``stop``) and a client for it."""

    def __init__(self, directory: Path, *flags: str, controllers: bool = False):
        self.directory, self.flags, self.controllers = directory, flags, controllers
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    def start(self) -> ApiServer:
        """Start kube-up; NoControlPlaneError with kube-up's own line when this machine provides no control plane."""
        env = {**os.environ, "KUBE_UP_CONTROLLERS": "1" if self.controllers else "0"}
        if not (TOOLS / "kube-up").exists():
            raise NoControlPlaneError(f"kube-up not found in {TOOLS}")
        done = subprocess.run(
            [str(TOOLS / "kube-up"), str(self.directory), *self.flags],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode in (2, 3):
            raise NoControlPlaneError(
                done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
            )
        done.check_returncode()
        config = yaml.safe_load((self.directory / "kubeconfig").read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self.server, self.token = cluster["server"], user["token"]
        self._ssl = ssl.create_default_context(cafile=cluster["certificate-authority"])
        return self

    def stop(self) -> None:
        subprocess.run([str(TOOLS / "kube-down"), str(self.directory)], check=False, capture_output=True, timeout=60)

    # ------------------------------------------------------------ REST

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"
    ) -> Outcome:
        req = urllib.request.Request(self.server + path, data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=60) as response:
                status, headers, text = response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            status, headers, text = error.code, error.headers, error.read()
        payload = json.loads(text) if text else {}
        # RFC 7234 warn-value: 299 - "text", the text's quotes escaped
        warnings = [w.split(" ", 2)[-1].strip('"').replace('\\"', '"') for w in headers.get_all("Warning") or []]
        message = payload.get("message", "") if status >= 300 else ""
        return Outcome(path, status, message, warnings, payload)

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from the server's discovery (cached; refreshed once on a miss)."""
        key = (api_version, kind)
        if key not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for _ in range(50):  # a CRD just created takes a moment to be served
                found = self.request("GET", base)
                for r in found.body.get("resources", []) if found.accepted else []:
                    if "/" not in r["name"]:
                        self._resources[(api_version, r["kind"])] = (r["name"], r["namespaced"])
                if key in self._resources:
                    break
                time.sleep(0.2)
            else:
                raise LookupError(f"the API server serves no {kind} in {api_version}")
        return self._resources[key]

    def path(self, obj: Mapping[str, Any]) -> str:
        plural, namespaced = self.resource(obj["apiVersion"], obj["kind"])
        api = obj["apiVersion"]
        base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
        meta = obj["metadata"]
        where = f"/namespaces/{meta.get('namespace') or 'default'}" if namespaced else ""
        return f"{base}{where}/{plural}/{urllib.parse.quote(meta['name'])}"

    def apply(self, obj: Mapping[str, Any], dry_run: bool = True) -> Outcome:
        """Server-side apply of one object (``dry_run``: admitted and validated, not stored)."""
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        path = f"{self.path(obj)}?{urllib.parse.urlencode(query)}"
        outcome = self.request("PATCH", path, json.dumps(obj).encode(), "application/apply-patch+yaml")
        outcome.label = label(obj)
        return outcome

    def apply_all(self, objects: Iterable[Mapping[str, Any]], dry_run: bool = True) -> list[Outcome]:
        return [self.apply(obj, dry_run) for obj in objects]

    def create(self, obj: Mapping[str, Any], dry_run: bool = True) -> Outcome:
        """A POST, as a controller creates an object (pods: Pod Security admission judges this)."""
        path = self.path(obj).rsplit("/", 1)[0] + ("?dryRun=All" if dry_run else "")
        outcome = self.request("POST", path, json.dumps(obj).encode())
        outcome.label = label(obj)
        return outcome
