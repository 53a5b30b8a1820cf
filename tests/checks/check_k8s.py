#!/usr/bin/python3
"""Check the Kubernetes manifests in deploy/k8s/ (issue 21) without a cluster.

Usage: check_k8s.py [--dir DIR] [--mcp-bin PATH] [--runtime-bin PATH]

Every *.yaml / *.yml file under DIR (default deploy/k8s) is read as YAML documents, and:

1. Schemas. A built-in kind is validated against the Kubernetes API's OpenAPI definitions
   (k8s-schemas/kubernetes-definitions.json: release 1.36, trimmed to the kinds allowed here);
   an agent-sandbox kind against its CRD's openAPIV3Schema (k8s-schemas/agent-sandbox-crds.json),
   its metadata against ObjectMeta and a SandboxTemplate's pod spec against PodSpec as well.
   Objects are closed the way the API server's strict field validation (kubectl
   --validate=strict) closes them: a field a schema does not list is an error, unless the
   schema preserves unknown fields. Int-or-string and quantity fields take an integer or a
   string, as the API server does. A kind or apiVersion not in the data is an error.
2. Project rules, on every pod (a Deployment's template, a SandboxTemplate's podTemplate):
   non-root (runAsNonRoot, a non-zero runAsUser), seccomp RuntimeDefault or Localhost, no host
   namespaces or hostPath, no service account token; every container with privileged unset or
   false, allowPrivilegeEscalation false, a read-only root file system, capabilities drop ALL and
   add none, readiness and liveness probes, cpu and memory requests and limits, and an image
   pinned by a tag other than latest (or a digest). Secrets only from Secret objects: a
   variable whose name looks secret takes its value from a secretKeyRef, --token never appears
   in args, every --tls-* path lies under a read-only mount of a secret volume, and no Secret
   object carries data (the operator creates them). Workspace pods name a RuntimeClass that the
   manifests define. References hold: a warm pool's template, a claim's warm pool, a Service's
   and a Deployment's selectors, the RuntimeClass.
3. Flags. With --mcp-bin / --runtime-bin, the --flags a container passes to codespace-mcp or
   codespace-runtime must be ones its --help lists. This part is skipped (and said so) for a
   binary whose --help does not know the remote runner yet (no "tcp://" or "--listen").

Input: repository files (trusted, read as data). Exit status 0 when every rule holds, 1 with one
line per problem otherwise, 2 on a usage or load error.
"""

import argparse
import copy
import json
import os
import re
import subprocess
import sys

try:
    import jsonschema
    import yaml
except ImportError as e:
    print(f"check_k8s: {e.name} is missing (apt-get install python3-jsonschema python3-yaml)",
          file=sys.stderr)
    sys.exit(2)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCHEMAS = os.path.join(HERE, "k8s-schemas")
DEFAULT_DIR = os.path.join(REPO, "deploy", "k8s")

INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
QUANTITY = {"anyOf": [{"type": "number"}, {"type": "string"}]}
QUANTITY_DEF = "io.k8s.apimachinery.pkg.api.resource.Quantity"
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|PIN\b|SHA256|CREDENTIAL", re.I)
SERVERS = ("codespace-mcp", "codespace-runtime")


def close(node, crd):
    """Copy a schema with every object that lists properties closed (additionalProperties
    false), except where a CRD schema preserves unknown fields; int-or-string made a union."""
    if isinstance(node, list):
        return [close(v, crd) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: close(v, crd) for k, v in node.items()}
    if out.get("format") == "int-or-string":
        return dict(INT_OR_STRING)
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def load_schemas():
    with open(os.path.join(SCHEMAS, "kubernetes-definitions.json"), encoding="utf-8") as f:
        k8s = json.load(f)
    with open(os.path.join(SCHEMAS, "agent-sandbox-crds.json"), encoding="utf-8") as f:
        crds = json.load(f)
    defs = {name: close(d, False) for name, d in k8s["definitions"].items()}
    defs[QUANTITY_DEF] = dict(QUANTITY)
    builtin = {}
    for name, d in k8s["definitions"].items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            api = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            if name in k8s["roots"]:
                builtin[(api, gvk["kind"])] = name
    custom = {}
    for kind, c in crds["crds"].items():
        custom[(f"{c['group']}/{c['version']}", kind)] = close(c["openAPIV3Schema"], True)
    return defs, builtin, custom


class Validator:
    def __init__(self):
        self.defs, self.builtin, self.custom = load_schemas()
        self.cache = {}

    def for_def(self, name):
        if name not in self.cache:
            schema = {"$ref": f"#/definitions/{name}", "definitions": self.defs}
            self.cache[name] = jsonschema.Draft4Validator(schema)
        return self.cache[name]

    def for_crd(self, key):
        if key not in self.cache:
            self.cache[key] = jsonschema.Draft4Validator(self.custom[key])
        return self.cache[key]

    @staticmethod
    def errors(validator, doc, prefix=""):
        out = []
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            path = prefix + "".join(f"/{p}" for p in e.absolute_path)
            # anyOf / oneOf failures say little on their own; name the best branch's reason.
            msg = e.message
            if e.context:
                best = jsonschema.exceptions.best_match(e.context)
                msg = f"{msg} ({best.message})"
            out.append(f"{path or '/'}: {msg}")
        return out

    def validate(self, doc):
        """-> (known kind?, [problems])"""
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key in self.builtin:
            return True, self.errors(self.for_def(self.builtin[key]), doc)
        if key in self.custom:
            problems = self.errors(self.for_crd(key), doc)
            problems += self.errors(
                self.for_def("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                doc.get("metadata") or {}, "/metadata")
            if key[1] == "SandboxTemplate":
                pod = ((doc.get("spec") or {}).get("podTemplate") or {}).get("spec")
                if isinstance(pod, dict):
                    problems += self.errors(self.for_def("io.k8s.api.core.v1.PodSpec"), pod,
                                            "/spec/podTemplate/spec")
            return True, problems
        return False, [f"apiVersion {key[0]!r} kind {key[1]!r} is not a kind these manifests "
                       "may use (k8s-schemas/ has no schema for it)"]


def load_docs(directory):
    """-> [(file, index, doc)]; raises ValueError on an unreadable or unparsable file."""
    out = []
    names = sorted(n for n in os.listdir(directory) if n.endswith((".yaml", ".yml")))
    if not names:
        raise ValueError(f"{directory}: no *.yaml files")
    for name in names:
        path = os.path.join(directory, name)
        with open(path, encoding="utf-8") as f:
            try:
                docs = list(yaml.safe_load_all(f))
            except yaml.YAMLError as e:
                raise ValueError(f"{name}: not valid YAML: {e}") from None
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            out.append((name, i, doc))
    return out


def pods_of(doc):
    """The pod specs an object carries, with their labels: [(path, spec, labels)]."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Deployment":
        t = spec.get("template") or {}
        return [("/spec/template/spec", t.get("spec") or {},
                 (t.get("metadata") or {}).get("labels") or {})]
    if kind == "SandboxTemplate":
        t = spec.get("podTemplate") or {}
        return [("/spec/podTemplate/spec", t.get("spec") or {},
                 (t.get("metadata") or {}).get("labels") or {})]
    return []


def image_pinned(image):
    if not isinstance(image, str) or not image:
        return False
    if re.search(r"@sha256:[0-9a-f]{64}$", image):
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rsplit(":", 1)[1] not in ("", "latest")


def check_pod(where, pod, bad, runtime_classes, workspace):
    sc = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key) is True:
            bad(f"{where}: {key} shares a host namespace")
    if pod.get("automountServiceAccountToken") is not False:
        bad(f"{where}: automountServiceAccountToken must be false (no API token in the pod)")
    volumes = {v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, dict)}
    for name, v in volumes.items():
        if "hostPath" in v:
            bad(f"{where}: volume {name}: hostPath mounts a node directory")
    if workspace:
        rc = pod.get("runtimeClassName")
        if not rc:
            bad(f"{where}: runtimeClassName is not set: workspace pods need an isolating "
                "RuntimeClass (gVisor or Kata)")
        elif rc not in runtime_classes:
            bad(f"{where}: runtimeClassName {rc!r} is not a RuntimeClass in these manifests")
    pod_seccomp = (sc.get("seccompProfile") or {}).get("type")

    containers = [("containers", c) for c in pod.get("containers") or []]
    containers += [("initContainers", c) for c in pod.get("initContainers") or []]
    if not pod.get("containers"):
        bad(f"{where}: no containers")
    for group, c in containers:
        if not isinstance(c, dict):
            continue
        cw = f"{where}/{group}/{c.get('name')}"
        csc = c.get("securityContext") or {}
        uid = csc.get("runAsUser", sc.get("runAsUser"))
        non_root = csc.get("runAsNonRoot", sc.get("runAsNonRoot"))
        if non_root is not True:
            bad(f"{cw}: runAsNonRoot must be true (pod or container securityContext)")
        if uid is None or uid == 0:
            bad(f"{cw}: runAsUser must be a non-zero uid, got {uid!r} (runs as root)")
        if csc.get("runAsGroup", sc.get("runAsGroup")) == 0:
            bad(f"{cw}: runAsGroup 0 is the root group")
        if csc.get("privileged") not in (None, False):
            bad(f"{cw}: privileged must not be true")
        if csc.get("allowPrivilegeEscalation") is not False:
            bad(f"{cw}: allowPrivilegeEscalation must be false")
        if csc.get("readOnlyRootFilesystem") is not True:
            bad(f"{cw}: readOnlyRootFilesystem must be true")
        caps = csc.get("capabilities") or {}
        if "ALL" not in [str(x).upper() for x in caps.get("drop") or []]:
            bad(f"{cw}: capabilities.drop must contain ALL")
        if caps.get("add"):
            bad(f"{cw}: capabilities.add {caps['add']!r}: no capability may be added")
        seccomp = (csc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad(f"{cw}: seccompProfile.type must be RuntimeDefault or Localhost, got {seccomp!r}")
        if not image_pinned(c.get("image")):
            bad(f"{cw}: image {c.get('image')!r} must be pinned by a tag (not latest) or digest")
        if group == "containers":
            for probe in ("readinessProbe", "livenessProbe"):
                if not isinstance(c.get(probe), dict) or not c[probe]:
                    bad(f"{cw}: no {probe}")
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(part) or {}):
                    bad(f"{cw}: resources.{part}.{r} is not set")

        for env in c.get("env") or []:
            if not isinstance(env, dict):
                continue
            name = str(env.get("name", ""))
            if SECRET_NAME.search(name) and "secretKeyRef" not in (env.get("valueFrom") or {}):
                bad(f"{cw}: env {name}: a secret must come from a Secret (valueFrom.secretKeyRef)")
        for ef in c.get("envFrom") or []:
            if isinstance(ef, dict) and "configMapRef" in ef:
                bad(f"{cw}: envFrom configMapRef: variables come one by one, secrets from Secrets")

        args = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        mounts = [m for m in c.get("volumeMounts") or [] if isinstance(m, dict)]
        for i, a in enumerate(args):
            flag, _, inline = a.partition("=")
            if flag == "--token":
                bad(f"{cw}: --token in args: the HTTP token comes from a Secret through "
                    "CODESPACE_HTTP_TOKEN")
            if flag in ("--tls-cert", "--tls-key", "--tls-ca"):
                path = inline or (args[i + 1] if i + 1 < len(args) else "")
                m = [m for m in mounts if path.startswith(str(m.get("mountPath", "")).rstrip("/")
                                                          + "/")]
                vol = volumes.get(m[-1].get("name")) if m else None
                if not m or not vol or "secret" not in vol:
                    bad(f"{cw}: {flag} {path!r} is not under a mounted secret volume")
                elif m[-1].get("readOnly") is not True:
                    bad(f"{cw}: {flag} {path!r}: the secret volume must be mounted readOnly")
        for m in mounts:
            vol = volumes.get(m.get("name"))
            if vol and "secret" in vol and m.get("readOnly") is not True:
                bad(f"{cw}: secret volume {m.get('name')} must be mounted readOnly")


def server_flags(binary):
    """-> (program name, set of --flags its --help prints, knows the remote runner?)"""
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30, env={})
    text = r.stdout + r.stderr
    flags = set(re.findall(r"--[A-Za-z0-9][A-Za-z0-9_-]*", text))
    remote = "--listen" in flags or "tcp://" in text
    return os.path.basename(binary), flags, remote


def check_flags(docs, helps, bad, notes):
    for prog, (flags, remote) in helps.items():
        if not remote:
            notes.append(f"{prog} --help does not know the remote runner yet: its flags in the "
                         "manifests are not checked")
    for name, i, doc in docs:
        for path, pod, _ in pods_of(doc):
            for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
                if not isinstance(c, dict):
                    continue
                argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
                if not argv:
                    continue
                prog = os.path.basename(argv[0])
                if prog not in helps or not helps[prog][1]:
                    continue
                for a in argv[1:]:
                    m = re.match(r"^(--[A-Za-z0-9][A-Za-z0-9_-]*)", a)
                    if m and m.group(1) not in helps[prog][0]:
                        bad(f"{name}: {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
                            f"{path}/containers/{c.get('name')}: {prog} has no flag {m.group(1)}")


def check(directory, binaries=()):
    problems, notes = [], []
    try:
        docs = load_docs(directory)
    except (OSError, ValueError) as e:
        return [str(e)], notes
    v = Validator()
    by_kind = {}
    for name, i, doc in docs:
        label = f"{name}#{i}"
        if not isinstance(doc, dict):
            problems.append(f"{label}: not a mapping")
            continue
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        label = f"{name}: {doc.get('kind')}/{meta.get('name')}"
        if not meta.get("name"):
            problems.append(f"{label}: metadata.name is not set")
        known, errs = v.validate(doc)
        problems += [f"{label}: {e}" for e in errs]
        if known:
            by_kind.setdefault(doc.get("kind"), {})[meta.get("name")] = doc

    runtime_classes = set(by_kind.get("RuntimeClass", {}))
    for name, i, doc in docs:
        if not isinstance(doc, dict):
            continue
        meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        label = f"{name}: {doc.get('kind')}/{meta.get('name')}"

        def bad(msg, label=label):
            problems.append(f"{label}: {msg}")

        kind, spec = doc.get("kind"), doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
        for path, pod, labels in pods_of(doc):
            if isinstance(pod, dict):
                check_pod(path, pod, bad, runtime_classes, kind == "SandboxTemplate")
        if kind == "Secret" and (doc.get("data") or doc.get("stringData")):
            bad("a Secret with data: secrets are created by the operator "
                "(deploy/k8s/README.md), never stored in the repository")
        if kind == "Deployment":
            sel = ((spec.get("selector") or {}).get("matchLabels")) or {}
            labels = (((spec.get("template") or {}).get("metadata") or {}).get("labels")) or {}
            if not sel or any(labels.get(k) != val for k, val in sel.items()):
                bad("spec.selector.matchLabels does not match the pod template's labels")
        if kind == "Service":
            sel = spec.get("selector") or {}
            if not any(all((((d.get("spec") or {}).get("template") or {}).get("metadata") or {})
                           .get("labels", {}).get(k) == val for k, val in sel.items())
                       for d in by_kind.get("Deployment", {}).values()) or not sel:
                bad(f"spec.selector {sel!r} matches no Deployment's pods")
        if kind == "SandboxWarmPool":
            ref = (spec.get("sandboxTemplateRef") or {}).get("name")
            if ref not in by_kind.get("SandboxTemplate", {}):
                bad(f"sandboxTemplateRef {ref!r} names no SandboxTemplate in these manifests")
        if kind == "SandboxClaim":
            ref = (spec.get("warmPoolRef") or {}).get("name")
            if ref not in by_kind.get("SandboxWarmPool", {}):
                bad(f"warmPoolRef {ref!r} names no SandboxWarmPool in these manifests")

    helps = {}
    for b in binaries:
        prog, flags, remote = server_flags(b)
        helps[prog] = (flags, remote)
    if helps:
        check_flags(docs, {p: (f, r) for p, (f, r) in helps.items()}, problems.append, notes)
    return problems, notes


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=DEFAULT_DIR)
    ap.add_argument("--mcp-bin")
    ap.add_argument("--runtime-bin")
    args = ap.parse_args(argv)
    bins = [b for b in (args.mcp_bin, args.runtime_bin) if b]
    problems, notes = check(args.dir, bins)
    for n in notes:
        print(f"check_k8s: note: {n}")
    for p in problems:
        print(f"check_k8s: {p}")
    if problems:
        return 1
    print(f"check_k8s: {args.dir}: ok (Kubernetes 1.36 and agent-sandbox v1beta1 schemas, "
          "non-root, no privilege, seccomp, probes, resources, pinned images, secrets from "
          "Secrets, references)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
