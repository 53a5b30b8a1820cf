#!/usr/bin/python3
"""Check deploy/compose.yml, the container fixture, against its rules (issue #9).

Usage: check_compose.py [COMPOSE_FILE] [--token-var NAME]

The fixture is a non-root sleeper with only the selected workspace at /workspace. Every service
must: run as uid 10001 (never root); mount exactly one volume, a bind of a host path taken from a
variable onto /workspace; have a read-only root file system; drop ALL capabilities and add none;
not be privileged; set no-new-privileges; have no network by default (network_mode none, or a
variable whose default is none) and publish no ports; share no host namespace; have no devices;
not run CodeSpace. The raw text must not mention the Docker socket, an SSH agent, $HOME or ~,
.ssh, .env, the HTTP token variable or a database file.

Input: a file in the repository (trusted, but read as data). Exit status 0 when every rule holds,
1 with one line per broken rule otherwise, 2 on a usage or parse error.
"""

import argparse
import os
import re
import sys

try:
    import yaml
except ImportError:
    print("check_compose: python3-yaml is missing (apt-get install python3-yaml)", file=sys.stderr)
    sys.exit(2)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_FILE = os.path.join(REPO, "deploy", "compose.yml")
FIXTURE_UID = 10001

# (regex over the raw text, what it stands for). Checked on the whole text, comments included:
# the file must not even mention them.
FORBIDDEN = [
    (r"docker\.sock|/var/run/docker|DOCKER_HOST", "the Docker socket"),
    (r"SSH_AUTH_SOCK|ssh-agent|ssh_agent", "an SSH agent"),
    (r"\$\{?HOME\b", "$HOME"),
    (r"~", "~ (a home directory)"),
    (r"\.ssh\b", ".ssh"),
    (r"\.env\b|\benv_file\b", ".env / env_file"),
    (r"\.(db|sqlite3?)\b|operations[._-]?db|OPERATIONS_DB", "a database file"),
]

HOST_NAMESPACES = ("pid", "ipc", "uts", "userns_mode", "cgroup")


def interpolation_default(value):
    """For "${VAR:-default}" / "${VAR-default}" return (VAR, default); for "${VAR}" or "$VAR"
    (VAR, None); for anything that is not a single variable reference, None."""
    m = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-(.*))?\}", value)
    if m:
        return m.group(1), m.group(2)
    m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", value)
    if m:
        return m.group(1), None
    return None


def parse_volume(vol):
    """A volume in short ("src:dst[:mode]") or long syntax -> (type, source, target)."""
    if isinstance(vol, str):
        # The source may itself contain ":-" inside ${...}; split outside braces only.
        parts, depth, cur = [], 0, ""
        for ch in vol:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == ":" and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        if len(parts) == 1:
            return "volume", None, parts[0]
        src = parts[0]
        kind = "bind" if src.startswith(("/", ".", "$")) else "volume"
        return kind, src, parts[1]
    if isinstance(vol, dict):
        return vol.get("type", "volume"), vol.get("source"), vol.get("target")
    return None, None, None


def check_service(name, svc, problems):
    def bad(msg):
        problems.append(f"service {name}: {msg}")

    if not isinstance(svc, dict):
        bad("is not a mapping")
        return

    user = svc.get("user")
    if user is None:
        bad(f"no user: must run as uid {FIXTURE_UID}, not the image's default (root)")
    else:
        uid, _, gid = str(user).partition(":")
        if uid != str(FIXTURE_UID):
            bad(f"user {user!r}: must run as uid {FIXTURE_UID} (non-root)")
        if gid in ("0", "root"):
            bad(f"user {user!r}: group must not be root")

    vols = svc.get("volumes") or []
    if len(vols) != 1:
        bad(f"{len(vols)} volumes: exactly one (the workspace at /workspace) is allowed")
    for vol in vols:
        kind, src, dst = parse_volume(vol)
        if dst != "/workspace":
            bad(f"volume {vol!r}: target must be /workspace")
        if kind != "bind" or not isinstance(src, str) or interpolation_default(src) is None:
            bad(f"volume {vol!r}: the host side must be a bind of a variable such as "
                "${CODESPACE_FIXTURE_WORKSPACE:-...}")
    for key in ("tmpfs", "volumes_from", "devices", "device_cgroup_rules", "configs", "secrets",
                "env_file", "ports", "expose", "networks", "links", "external_links",
                "extra_hosts", "cap_add", "sysctls"):
        if key in svc and svc[key] not in (None, [], {}):
            what = {"ports": "ports are published", "expose": "ports are exposed",
                    "cap_add": "capabilities are added"}.get(key, f"{key} is set")
            bad(f"{key}: {what}; the fixture must have none")

    if svc.get("read_only") is not True:
        bad("read_only must be true (read-only root file system)")

    drops = svc.get("cap_drop") or []
    if "ALL" not in [str(c).upper() for c in drops]:
        bad(f"cap_drop {drops!r}: must contain ALL")

    if svc.get("privileged") not in (None, False):
        bad("privileged must not be set")

    opts = [str(o).replace("=", ":").replace(" ", "") for o in (svc.get("security_opt") or [])]
    if not any(o in ("no-new-privileges", "no-new-privileges:true") for o in opts):
        bad("security_opt must contain no-new-privileges:true")
    for o in opts:
        if o.endswith(":unconfined"):
            bad(f"security_opt {o!r}: confinement must not be turned off")

    net = svc.get("network_mode")
    if net is None:
        bad("network_mode is not set: the default would be a bridge network; must be none")
    else:
        ref = interpolation_default(str(net))
        default = ref[1] if ref else str(net)
        if default != "none":
            bad(f"network_mode {net!r}: must be none unless a variable asks otherwise")

    for key in HOST_NAMESPACES:
        if str(svc.get(key, "")).lower() == "host":
            bad(f"{key}: host shares a host namespace")

    for key in ("command", "entrypoint"):
        val = svc.get(key)
        text = " ".join(val) if isinstance(val, list) else str(val or "")
        if "codespace" in text.lower():
            bad(f"{key} {val!r}: the fixture must not install or start CodeSpace")
    if "build" in svc:
        bad("build: the fixture uses a stock image and builds nothing")


def check(path, token_var):
    problems = []
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        return [f"cannot read {path}: {e.strerror}"]

    for rx, what in FORBIDDEN + [(re.escape(token_var) + r"|(?i:token)",
                                  f"the HTTP token variable ({token_var})")]:
        for lineno, line in enumerate(text.splitlines(), 1):
            m = re.search(rx, line)
            if m:
                problems.append(f"line {lineno}: mentions {what}: {m.group(0)!r}")

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return problems + [f"not valid YAML: {e}"]
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict) \
            or not doc["services"]:
        return problems + ["no services"]
    for key in ("volumes", "secrets", "configs"):
        if doc.get(key):
            problems.append(f"top-level {key}: the fixture defines none")
    for name, svc in doc["services"].items():
        check_service(name, svc, problems)
    return problems


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=DEFAULT_FILE)
    ap.add_argument("--token-var", default="CODESPACE_HTTP_TOKEN",
                    help="the HTTP token variable the file must not mention")
    args = ap.parse_args(argv)
    problems = check(args.file, args.token_var)
    for p in problems:
        print(f"check_compose: {args.file}: {p}")
    if problems:
        return 1
    print(f"check_compose: {args.file}: ok (uid {FIXTURE_UID}, one /workspace bind, read-only "
          "root, cap_drop ALL, no-new-privileges, network none, no forbidden mentions)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
