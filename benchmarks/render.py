"""Render speed: wall time of rendering each stack against importing the libraries alone, in one run.

Prints, per stack: median seconds for a bare import of the libraries the program uses, median seconds for
a full offline render (same interpreter start-up in both), their ratio, the plan's dependency depth, and
whether pulumi_aws was imported (a stack without AWS resources must not pay for it). Writes
benchmarks/results/render.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The libraries alone: every module the program's resources come from, loaded for real (pulumi_kubernetes
# loads its modules lazily, on first use of a class).
IMPORTS = (
    "import pulumi, pulumi.runtime.mocks, pulumi_random, pydantic, yaml, pulumi_kubernetes as k\n"
    "k.Provider, k.core.v1.Namespace, k.apps.v1.StatefulSet, k.batch.v1.Job, k.storage.v1.StorageClass\n"
    "k.helm.v3.Release, k.apiextensions.CustomResource, pulumi_random.RandomPassword\n"
)
RENDER = """
import json, sys
from pathlib import Path
from components.toolchain import render
result = render.rendering({stack!r}, render.run({stack!r}))
render.write(result, Path({out!r}))
print(json.dumps({{"aws": "pulumi_aws" in sys.modules}}))
"""


def timed(code: str) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, proc.stdout


def depth(plan: dict) -> int:
    """Longest chain of parent/dependsOn edges in the plan."""
    edges = {r["name"]: [d for d in [r["parent"], *r["dependsOn"]] if d] for r in plan["resources"]}
    memo: dict[str, int] = {}

    def longest(name: str) -> int:
        if name not in memo:
            memo[name] = 1 + max((longest(d) for d in edges.get(name, [])), default=0)
        return memo[name]

    return max(longest(n) for n in edges)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement (median is reported)")
    args = parser.parse_args()
    stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
    results = {}
    print(f"{'stack':<10} {'import s':>9} {'render s':>9} {'ratio':>6} {'depth':>6} {'resources':>9}  pulumi_aws")
    for stack in stacks:
        with tempfile.TemporaryDirectory() as out:
            base = statistics.median(timed(IMPORTS)[0] for _ in range(args.runs))
            runs = [timed(RENDER.format(stack=stack, out=out)) for _ in range(args.runs)]
            seconds = statistics.median(r[0] for r in runs)
            aws = json.loads(runs[-1][1].splitlines()[-1])["aws"]
            plan = json.loads((Path(out) / "plan.json").read_text())
        row = {
            "import_seconds": round(base, 3),
            "render_seconds": round(seconds, 3),
            "ratio": round(seconds / base, 2),
            "dependency_depth": depth(plan),
            "resources": len(plan["resources"]),
            "imports_pulumi_aws": aws,
        }
        results[stack] = row
        print(
            f"{stack:<10} {base:>9.2f} {seconds:>9.2f} {row['ratio']:>6.2f} {row['dependency_depth']:>6} "
            f"{row['resources']:>9}  {aws}"
        )
    out_file = ROOT / "benchmarks" / "results" / "render.json"
    out_file.parent.mkdir(exist_ok=True)
    out_file.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
