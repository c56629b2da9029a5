"""Fetch the peer MQTT libraries the bench compares holdfast with (CPython).

    PYTHONPATH=tools .venv/bin/python -m bench.peers [NAME ...]     (default: all)

Each peer is downloaded from PyPI with pip at bench time into build/peers/
(never committed) and its MicroPython modules are copied to
build/peers/lib/NAME/, ready for MICROPYPATH and mpy-cross. Several of these
sdists have neither setup.py nor pyproject.toml, so `pip download` fails
after fetching them: pip runs with --no-clean and its own TMPDIR, and the
modules are taken from the archive or from pip's unpacked copy.

fetch(name) returns a Peer with .lib (directory) and .version, or raises
PeerError with the reason (shown in the peer's table cells).
"""

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, "build", "peers")

# name -> label, pip requirements, files to take (paths inside the
# distribution, matched on their tail; "pkg/" takes a whole package).
PEERS = {
    "umqtt_simple": {
        "label": "umqtt.simple",
        "pip": ["micropython-umqtt.simple==1.3.4"],
        "files": ["umqtt/simple.py"],
    },
    "umqtt_robust": {
        "label": "umqtt.robust",
        "pip": ["micropython-umqtt.robust==1.0", "micropython-umqtt.simple==1.3.4"],
        "files": ["umqtt/robust.py", "umqtt/simple.py"],
    },
    "umqtt_simple2": {
        "label": "umqtt.simple2",
        "pip": ["micropython-umqtt.simple2==2.2.0"],
        "files": ["umqtt/__init__.py", "umqtt/simple2.py"],
    },
    "mqtt_async": {
        "label": "mqtt_async (micropython-mqtt)",
        "pip": ["micropython-mqtt==0.7b4"],
        "files": ["mqtt_async.py"],
    },
    "chumicro": {
        "label": "chumicro-mqtt",
        "pip": ["chumicro-mqtt==0.30.3", "chumicro-sockets==0.21.3", "chumicro-timing==0.8.4"],
        "files": ["chumicro_mqtt/", "chumicro_sockets/", "chumicro_timing/"],
        # test helpers and other runtimes' adapters are not loaded on MicroPython
        "skip": ["*/testing.py", "*/_adapters/cp.py", "*/_adapters/cpython.py"],
    },
}


class PeerError(Exception):
    pass


class Peer:
    def __init__(self, name, lib, versions):
        self.name = name
        self.label = PEERS[name]["label"]
        self.lib = lib
        self.versions = versions

    @property
    def version(self):
        return ", ".join(self.versions)

    def modules(self):
        """Repo-relative .py files of the peer (relative to self.lib)."""
        out = []
        for d, _, files in os.walk(self.lib):
            for f in files:
                if f.endswith(".py"):
                    out.append(os.path.relpath(os.path.join(d, f), self.lib))
        return sorted(out)


def _run_pip(args, tmp):
    env = dict(os.environ)
    env["TMPDIR"] = tmp
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run([sys.executable, "-m", "pip"] + args, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", timeout=300)


def _dist_key(req):
    name = req.split("==")[0]
    return name.lower().replace("-", "_").replace(".", "_")


def _unpack(path, dest):
    if path.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(path) as t:
            members = [m for m in t.getmembers()
                       if m.isfile() and not os.path.isabs(m.name) and ".." not in m.name.split("/")]
            t.extractall(dest, members=members)
    elif path.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as z:
            for n in z.namelist():
                if not os.path.isabs(n) and ".." not in n.split("/"):
                    z.extract(n, dest)
    else:
        raise PeerError("unknown archive type: %s" % os.path.basename(path))


def _fetch_one(req, work):
    """Download one requirement; returns (source tree, version)."""
    key = _dist_key(req)
    dl = os.path.join(work, "dl")
    tmp = os.path.join(work, "tmp")
    os.makedirs(dl, exist_ok=True)
    os.makedirs(tmp, exist_ok=True)
    logs = []
    for extra in ([], ["--no-binary", ":all:"]):
        proc = _run_pip(["download", "--no-deps", "--no-clean", "-d", dl] + extra + [req], tmp)
        logs.append(proc.stdout)
        for f in sorted(os.listdir(dl)):
            if _dist_key(f).startswith(key + "_"):
                src = os.path.join(work, "src", f)
                if not os.path.isdir(src):
                    _unpack(os.path.join(dl, f), src)
                return src, f
        # pip fetched it, then failed to build its metadata: its unpacked copy
        # stays in TMPDIR thanks to --no-clean.
        for d, dirs, _ in os.walk(tmp):
            for sub in dirs:
                if _dist_key(sub).startswith(key + "_"):
                    return os.path.join(d, sub), req
    errs = [l[6:].strip() for l in "\n".join(logs).splitlines() if l.startswith("ERROR:")]
    raise PeerError("pip download %s: %s" % (req, errs[-1] if errs else "no archive, no output"))


def _collect(tree, pattern, skip, dest):
    """Copy the file (or package, for "pkg/") matching pattern from tree."""
    found = []
    want = pattern.rstrip("/")
    for d, dirs, files in os.walk(tree):
        dirs.sort()
        rel = os.path.relpath(d, tree).replace(os.sep, "/")
        if pattern.endswith("/"):
            if rel == want or rel.endswith("/" + want):
                base = d
                for dd, _, ff in os.walk(base):
                    for f in ff:
                        if not f.endswith(".py"):
                            continue
                        r = want + "/" + os.path.relpath(os.path.join(dd, f), base).replace(os.sep, "/")
                        if any(fnmatch.fnmatch(r, s) for s in skip):
                            continue
                        found.append((os.path.join(dd, f), r))
                break
        else:
            for f in files:
                r = (rel + "/" + f) if rel != "." else f
                if r == want or r.endswith("/" + want):
                    p = os.path.join(d, f)
                    if os.path.islink(p) and not os.path.exists(p):
                        continue  # umqtt.robust's sdist has a dangling simple.py link
                    found.append((p, want))
            if found:
                break
    for src, r in found:
        out = os.path.join(dest, r)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(src, out)
    return len(found)


def fetch(name, cache=CACHE, log=print):
    """Fetch (or reuse from the cache) one peer; returns a Peer."""
    spec = PEERS[name]
    lib = os.path.join(cache, "lib", name)
    stamp = os.path.join(lib, ".peer.json")
    want = {"pip": spec["pip"], "files": spec["files"], "skip": spec.get("skip", [])}
    try:
        with open(stamp) as f:
            have = json.load(f)
        if have.get("spec") == want:
            return Peer(name, lib, have["versions"])
    except (OSError, ValueError):
        pass
    log("  fetching %s from PyPI: %s" % (spec["label"], " ".join(spec["pip"])))
    work = os.path.join(cache, "work", name)
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(lib, ignore_errors=True)
    os.makedirs(lib)
    versions = []
    trees = []
    for req in spec["pip"]:
        tree, got = _fetch_one(req, work)
        trees.append(tree)
        versions.append(req)
    for pattern in spec["files"]:
        n = 0
        for tree in trees:
            n = _collect(tree, pattern, spec.get("skip", []), lib)
            if n:
                break
        if not n:
            raise PeerError("%s not found in %s" % (pattern, " ".join(spec["pip"])))
    with open(stamp, "w") as f:
        json.dump({"spec": want, "versions": versions}, f)
    shutil.rmtree(work, ignore_errors=True)
    return Peer(name, lib, versions)


def main(argv):
    names = argv or list(PEERS)
    rc = 0
    for n in names:
        try:
            p = fetch(n)
            print("%-14s %s: %s" % (n, p.version, ", ".join(p.modules())))
        except PeerError as e:
            print("%-14s failed: %s" % (n, e))
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
