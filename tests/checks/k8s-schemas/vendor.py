#!/usr/bin/python3
"""Regenerate the vendored schema data that check_k8s.py validates deploy/k8s/ against.

Usage: vendor.py SWAGGER_JSON AGENT_SANDBOX_CRD_DIR SOURCE_NOTE_JSON

SWAGGER_JSON is the Kubernetes API's OpenAPI v2 document (kubernetes-client/python ships it as
kubernetes/swagger.json.unprocessed); AGENT_SANDBOX_CRD_DIR holds kubernetes-sigs/agent-sandbox's
k8s/crds/*.yaml. SOURCE_NOTE_JSON is a small JSON object naming where both came from (repository
and commit); it is stored in each output's "source". Only data is kept: every "description" is
dropped, the Kubernetes definitions are trimmed to the closure of the kinds in ROOTS, and each
CRD to its served storage version's openAPIV3Schema.

Writes kubernetes-definitions.json and agent-sandbox-crds.json beside this file.
"""

import glob
import json
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))

# The built-in kinds deploy/k8s/ may use. Adding one here (and rerunning) is how a new kind
# becomes allowed.
ROOTS = [
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.ServiceAccount",
    "io.k8s.api.core.v1.PodSpec",
    "io.k8s.api.networking.v1.NetworkPolicy",
    "io.k8s.api.node.v1.RuntimeClass",
    "io.k8s.api.policy.v1.PodDisruptionBudget",
]
CRD_KINDS = ("SandboxTemplate", "SandboxClaim", "SandboxWarmPool")


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node, out):
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str) and r.startswith("#/definitions/"):
            out.add(r[len("#/definitions/"):])
        for v in node.values():
            refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        swagger = json.load(f)
    with open(argv[2], encoding="utf-8") as f:
        source = json.load(f)
    defs = swagger["definitions"]
    keep, todo = {}, list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = strip(defs[name])
        found = set()
        refs(keep[name], found)
        todo.extend(sorted(found - keep.keys()))
    out = {"source": source.get("kubernetes"), "roots": ROOTS,
           "definitions": dict(sorted(keep.items()))}
    with open(os.path.join(HERE, "kubernetes-definitions.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=None, separators=(",", ":"), sort_keys=False)
        f.write("\n")

    crds = {}
    for path in sorted(glob.glob(os.path.join(argv[1], "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            crd = yaml.safe_load(f)
        kind = crd["spec"]["names"]["kind"]
        if kind not in CRD_KINDS:
            continue
        for v in crd["spec"]["versions"]:
            if v.get("served") and v.get("storage"):
                crds[kind] = {"group": crd["spec"]["group"], "version": v["name"],
                              "scope": crd["spec"]["scope"],
                              "openAPIV3Schema": strip(v["schema"]["openAPIV3Schema"])}
    missing = set(CRD_KINDS) - crds.keys()
    if missing:
        print(f"vendor.py: no served storage version for {sorted(missing)}", file=sys.stderr)
        return 1
    out = {"source": source.get("agent-sandbox"), "crds": crds}
    with open(os.path.join(HERE, "agent-sandbox-crds.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
