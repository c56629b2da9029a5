"""Footprint per configuration in every way a board loads code, holdfast and
its peers in the same run (the probe is tools/bench/mp/footprint.py):

- .mpy copied: the unix port (64-bit) importing .mpy files, as `make deploy`
  leaves them on a board's filesystem (bytecode and constants on the heap);
- ROMFS in place: the unix port mounting a ROMFS image (`vfs.VfsRom`, read
  into a bytes object before the reading) and importing from /rom, as
  `make deploy ROMFS=1` does on a board with a ROMFS partition;
- frozen: a unix port with holdfast, the probe and the peers frozen in
  (tools/bench/mp/manifest.py), which the user builds from MicroPython's
  source and passes by path (make bench FROZEN_UNIX=path, --frozen-unix);
- 32-bit unix (.mpy): the unix port built 32-bit (gcc -m32, nothing of
  holdfast frozen), passed the same way (UNIX32=path, --unix32), importing
  the same .mpy files against mosquitto: pointers and GC blocks as on an
  ESP32 or an RP2040, and a heap that does not grow, so it has a smallest
  heap where the WebAssembly port has none;
  each column is left out, with the reason printed, when no binary is given
  (docs/footprint.md says how to build them: the project has no recipe that
  builds MicroPython);
- 32-bit WebAssembly (.mpy): MicroPython's WebAssembly port in Node (32-bit
  pointers and 16-byte GC blocks, as on an ESP32 or an RP2040), against an
  in-memory broker (tools/runtimes/wasm), holdfast and the peers alike. Its
  gc.collect() only asks for a collection, which runs once control is back
  in JavaScript, so the probe reads the heap from there (see
  tools/runtimes/mpwasm.mjs); what its build freezes over the built-in
  modules is loaded before the reading (the probe says which).

Per configuration and mode, each in its own process: heap taken by the import
(code), heap held after import + connect (code + state), and, for copied
.mpy on the unix port (64-bit and 32-bit), the smallest -X heapsize for
connect + N acknowledged publishes. The probe also counts what the library's
modules create (functions, methods, classes, exception classes, module-level
names). Where names are interned into pools on the heap (every mode but
frozen), once more with the pools filled first, so that no pool is allocated
between the readings: the heap after connect without a pool step. Then the
issue's targets, with the ratio and by how much each is missed.
"""

import json
import re
import os
import shutil
import signal
import subprocess
import tempfile
import time

from bench import mpy, peers as bench_peers
from board.deploy import build_romfs
from fleet.mosquitto import Mosquitto, free_port
from runtimes import mpyc

TITLE = ("Footprint per configuration: .mpy copied, ROMFS in place, frozen, "
         "32-bit (unix, WebAssembly)")
HERE = os.path.dirname(os.path.abspath(__file__))
MP_SRC = os.path.join(HERE, "mp")
WASM_SHIM = os.path.join(os.path.dirname(HERE), "runtimes", "wasm")

# (id, label, runs on the WebAssembly port, runs with --quick)
CONFIGS = [
    ("pub", "holdfast publish-only (blocking, QoS 0/1, keepalive, reconnect, RAM outbox)", True, True),
    ("lean", "publish-only, lean settings (size=256, window=4, outbox=MemoryStore(1024, 8))", True, True),
    ("pub5", "holdfast publish-only at MQTT 5 (level=5)", False, True),
    ("sub", "+ subscribe (one filter, a callback)", True, False),
    ("qos2", "+ QoS 2 publishes", True, False),
    ("file", "+ FileStore outbox", True, False),
    ("flash", "+ FlashStore outbox (RAM flash 8 x 512 B, made before the reading)", True, False),
    ("tls", "+ TLS (ssl=True, the CA from a file, mosquitto's TLS listener)", False, True),
    ("async", "holdfast AsyncClient (asyncio)", False, False),
    ("umqtt_simple", "umqtt.simple (peer)", True, True),
    ("umqtt_simple_tls", "umqtt.simple over TLS (peer, ssl_params with the CA)", False, True),
    ("mqtt_async", "mqtt_async (peer, micropython-mqtt)", True, True),
]
MODES = [("mpy", ".mpy copied"), ("rom", "ROMFS in place"), ("frozen", "frozen"),
         ("m32", "32-bit unix (.mpy)"), ("wasm", "32-bit WebAssembly (.mpy)")]
# The modes with a smallest heap (the unix port's -X heapsize), and the
# configurations that get one in a --quick run.
MINHEAP_MODES = ("mpy", "m32")
MINHEAP_QUICK = ("pub", "lean", "umqtt_simple", "mqtt_async")
PEER_LIBS = {"umqtt_simple": "umqtt_simple", "umqtt_simple_tls": "umqtt_simple",
             "mqtt_async": "mqtt_async"}
TLS_CFGS = ("tls", "umqtt_simple_tls")
NOT_ON_WASM = {"pub5": "its in-memory broker speaks MQTT 3.1.1 only",
               "tls": "the port has no ssl module", "umqtt_simple_tls": "the port has no ssl module",
               "async": "AsyncClient waits on its socket through asyncio's I/O queue, which the "
                        "port's asyncio (run by the JavaScript event loop) has not"}
# What one object costs on the heap, frozen, 64-bit unix port (measured for
# issue 18; about half on 32-bit): a function (without defaults), a method, a
# class or exception class, a module-level name, a module.
COST = {"functions": 52, "methods": 54, "classes": 212, "exceptions": 212, "names": 20,
        "modules": 128}
COUNTED = ("modules", "functions", "methods", "classes", "exceptions", "names")
# Issue 18's targets. The 32-bit one compares with mqtt_async on the same
# WebAssembly port in the same run; beside it, mqtt_async on the 32-bit unix
# port of this run, or when that is not built MQTT_ASYNC_32, the issue's
# figure from one.
T_ROM, T_FROZEN, T_MINHEAP, T_TLS = 16 * 1024, 12 * 1024, 44, 5 * 1024
MQTT_ASYNC_32 = int(18.5 * 1024)
HEAP_LO, HEAP_HI = 8, 256
# The modes that intern a library's names into pools on the heap, and the
# names the probe interns before the first reading there (pad=K) for the
# reading without a pool step: from the probe's own about 90 names to past
# the 620 of the first five pools (20, 40, ... 320 entries on these ports),
# which leaves the sixth (640) room for the largest configuration's 250.
POOL_MODES = ("mpy", "rom", "m32", "wasm")
PAD = 640

# Mounts the image (read into bytes before the probe's first reading), puts
# /rom and /rom/lib first on sys.path and runs the probe from the image.
_ROM_BOOT = """\
import vfs,sys
f=open(%r,'rb')
vfs.mount(vfs.VfsRom(f.read()),'/rom')
f.close()
del f
sys.path[:0]=['/rom','/rom/lib']
%s"""
# The probe after K names interned (fp_pad K ARGS...): the reading without a
# pool step. Apart from the probe so that the probe's own names, and so the
# measured figures, stay as they are.
_PAD_MAIN = """\
import sys
def main(a):
    for i in range(int(a[0])):
        hasattr(sys, "pad%d" % i)  # interns the name
    import footprint
    return footprint.main(a[1:])
if __name__ == "__main__":
    main(sys.argv[1:])
"""


class Runner:
    def __init__(self, ctx, n, peers=("umqtt_simple", "mqtt_async"), frozen=None, m32=None):
        self.ctx, self.n = ctx, n
        b = os.path.join(ctx.build, "footprint")
        shutil.rmtree(b, ignore_errors=True)
        self.dirs = {"probe": mpy.compile_tree(
            MP_SRC, os.path.join(b, "probe"),
            ["footprint.py", "lib_umqtt_simple.py", "lib_mqtt_async.py"])}
        self.dirs["shim"] = mpy.compile_tree(os.path.join(MP_SRC, "shim"),
                                             os.path.join(b, "shim"), ["cpy_fix.py"])
        self.dirs["wasm"] = mpy.compile_tree(WASM_SHIM, os.path.join(b, "wasm"))
        self.dirs["pad"] = os.path.join(b, "pad")
        os.makedirs(self.dirs["pad"])
        with open(os.path.join(self.dirs["pad"], "fp_pad.py"), "w") as f:
            f.write(_PAD_MAIN)
        self.dirs["wasm_board"] = mpy.compile_tree(os.path.join(MP_SRC, "wasm"),
                                                   os.path.join(b, "wasm_board"))
        self.dirs["fw"] = mpy.compile_tree(os.path.join(ctx.root, "firmware"),
                                           os.path.join(b, "fw"), _library(ctx.root))
        self.dirs["fw3"] = mpy.compile_tree(os.path.join(ctx.root, "firmware"),
                                            os.path.join(b, "fw3"), _library(ctx.root), opt=3)
        self.peers = {}
        for name in peers:
            try:
                p = bench_peers.fetch(name, log=ctx.log)
                self.peers[name] = (mpy.compile_tree(
                    p.lib, os.path.join(b, "peers", name), p.modules()), p.version)
            except Exception as e:  # the row says why
                self.peers[name] = (None, str(e))
        self.images = {}
        self.imgdir = os.path.join(b, "romfs")
        self.exe = mpy.micropython_exe()
        self.frozen = frozen_build(frozen, ctx.root)
        self.m32 = m32_build(m32)
        self.tmp = tempfile.mkdtemp(prefix="hf-fp-")
        self.ca, self.tls_conf = _pki(self.tmp)

    def libdirs(self, cfg, fw="fw"):
        if cfg in PEER_LIBS:
            d, why = self.peers[PEER_LIBS[cfg]]
            if d is None:
                raise RuntimeError("peer not available: %s" % why)
            return [d, self.dirs["shim"]] if cfg == "mqtt_async" else [d]
        return [self.dirs[fw]]

    def image(self, cfg):
        """The ROMFS image of the probe and cfg's library (one per library)."""
        dirs = self.libdirs(cfg)
        key = "+".join(os.path.basename(d) for d in dirs)
        if key not in self.images:
            files = {}
            for top, prefix in [(self.dirs["probe"], "/")] + [(d, "/lib/") for d in dirs]:
                for root, _, names in os.walk(top):
                    for name in names:
                        path = os.path.join(root, name)
                        with open(path, "rb") as f:
                            files[prefix + os.path.relpath(path, top)] = f.read()
            img = os.path.join(self.imgdir, key + ".romfs")
            os.makedirs(self.imgdir, exist_ok=True)
            with open(img, "wb") as f:
                f.write(build_romfs(files, os.path.join(self.imgdir, key)))
            self.images[key] = img
        return self.images[key]

    def args(self, cfg, ports, d):
        port = ports[1] if cfg in TLS_CFGS else ports[0]
        return [cfg, "127.0.0.1", str(port), str(self.n), "dir=" + d, "ca=" + self.ca]

    def unix(self, cfg, ports, mode="mpy", kb=None, fw="fw", timeout=120, pad=0):
        d = os.path.join(self.tmp, "ob")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        heap = ["-X", "heapsize=%dk" % kb] if kb else []
        args = self.args(cfg, ports, d) + (["split=0"] if kb else ["count=1"])
        main, pre, path = "footprint", [], [".frozen"]
        if pad:
            main, pre, path = "fp_pad", [str(pad)], [self.dirs["pad"], ".frozen"]
        if mode in ("mpy", "m32"):
            env = dict(os.environ, MICROPYPATH=":".join(
                [self.dirs["probe"]] + self.libdirs(cfg, fw) + path))
            exe = self.m32["exe"] if mode == "m32" else self.exe
            cmd = [exe] + heap + ["-m", main] + pre + args
        elif mode == "rom":
            env = dict(os.environ, MICROPYPATH=":".join(path))
            call = "import %s\n%s.main(%r)\n" % (main, main, pre + args)
            cmd = [self.exe] + heap + ["-c", _ROM_BOOT % (self.image(cfg), call)]
        else:  # frozen: the probe, holdfast and the peers are in the executable
            env = dict(os.environ, MICROPYPATH=".frozen")
            cmd = [self.frozen["exe"]] + heap + ["-m", "footprint"] + args
        return _run(cmd, env, None, timeout)

    def malloc(self, cfg, ports, shim, timeout=120):
        """What cfg's process holds through the C library's malloc after
        connect and at its peak so far ({"live", "peak"} in bytes), read by
        mallocstat.so (LD_PRELOAD) while the probe waits at its mark."""
        d = os.path.join(self.tmp, "ob")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        env = dict(os.environ, LD_PRELOAD=shim, MICROPYPATH=":".join(
            [self.dirs["probe"]] + self.libdirs(cfg) + [".frozen"]))
        p = subprocess.Popen([self.exe, "-m", "footprint"] + self.args(cfg, ports, d) + ["mark=1"],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            seen = []
            deadline = time.monotonic() + timeout
            for line in p.stdout:  # the probe's lines, up to its mark
                seen.append(line.strip())
                if line.strip() == "MARK" or time.monotonic() > deadline:
                    break
            if seen[-1:] != ["MARK"]:
                raise RuntimeError("the probe stopped before its mark: %s" % (seen[-1:] or "no output"))
            p.send_signal(signal.SIGUSR1)
            got = p.stderr.readline().split()  # MALLOC live=N peak=M
            p.stdin.write("\n")
            p.stdin.flush()
            out = p.stdout.read()
            if p.wait(timeout) != 0 or "FOOTPRINT OK" not in out:
                raise RuntimeError("the probe failed after its mark: %s" % out.strip()[-200:])
            if not got or got[0] != "MALLOC":
                raise RuntimeError("no reading from mallocstat.so: %r" % got)
            return {k: int(v) for k, v in (x.split("=") for x in got[1:])}
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()

    def wasm(self, cfg, pad=0):
        dirs = [self.dirs["wasm_board"], self.dirs["probe"], self.dirs["wasm"]] + self.libdirs(cfg)
        if pad:
            dirs.append(self.dirs["pad"])
        rel = [os.path.relpath(x, self.ctx.root) for x in dirs]
        args = []
        for r in rel:
            args += ["--copy", r, "--path", r]
        run = ["fp_pad", str(pad)] if pad else ["footprint"]
        cmd = mpyc.wasm_command(args + ["-m"] + run + [cfg, "broker", "1883", str(self.n),
                                                       "dir=/tmp"] + (["count=1"] if pad else []))
        return _run(cmd, None, self.ctx.root, 120)

    def no_pool_step(self, run_):
        """The reading with PAD names interned first (run_(pad) runs the
        probe): {"code", "total", "pad"}; when a pool was still allocated
        between the readings, once more with as many names more as the
        window interned, so that the boundary falls in the padding; if a pool
        step is left even then, {"step": names padded}, never a figure."""
        pad = PAD
        for _ in range(2):
            res, ok, last, _ = run_(pad)
            c = res and res.get("counts")
            if not ok or not c or "step" not in c:
                return {"error": last if not ok else "no qstr_info() lines from the probe"}
            if not c["step"]:
                return {"code": res["code"], "total": res["total"], "pad": pad}
            pad += c["interned"]
        return {"step": pad}

    def smallest(self, cfg, ports, took, mode="mpy"):
        """Smallest heap (KB) in which connect + n publishes completes. A run
        that takes ten times as long as with a large heap (at least 10 s)
        counts as failing: a client that retries after a MemoryError (mqtt_async
        does) would otherwise run until the timeout."""
        cap = max(10.0, 10 * took)
        return mpyc.smallest_kb(lambda kb: self.unix(cfg, ports, mode, kb=kb, timeout=cap)[1],
                                HEAP_LO, HEAP_HI, 1)


def _library(root):
    """firmware/holdfast's modules, without broker.py (the broker's half of the
    codec: host tools and tests only, never deployed)."""
    return [m + ".py" for m in _library_modules(root) if m != "holdfast/broker"]


def given(ctx, name):
    """The path of the optional binary name ("frozen_unix", "unix32") the
    bench was given (--frozen-unix, --unix32; make bench FROZEN_UNIX=,
    UNIX32=), or None."""
    return getattr(getattr(ctx, "args", None), name, None) or None


_ASK = """\
import sys
print(sys.version)
print(sys.maxsize)
try:
    import ssl
    print(1)
except ImportError:
    print(0)
"""


def _micropython(exe, var):
    """{"exe", "micropython" (its version, as it reports it), "bits", "ssl"
    (whether it has the module)} of the MicroPython unix port at exe (given
    as var=); ValueError in words when it is not one."""
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise ValueError("%s=%s: no executable file there" % (var, exe))
    try:
        p = subprocess.run([exe, "-c", _ASK],
                           env=dict(os.environ, MICROPYPATH=".frozen"), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, errors="replace", timeout=30)
        out = p.stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ValueError("%s=%s: it does not run (%s)" % (var, exe, e))
    if p.returncode or len(out) != 3 or "MicroPython" not in out[0]:
        raise ValueError("%s=%s: not a MicroPython unix port (it answered %r)"
                         % (var, exe, (p.stdout + p.stderr).strip()[-200:]))
    return {"exe": os.path.abspath(exe), "micropython": out[0].split("MicroPython", 1)[1].strip(),
            "bits": 32 if int(out[1]) < 2 ** 32 else 64, "ssl": out[2] == "1"}


def m32_build(exe):
    """The 32-bit unix port at exe (UNIX32=): {"exe", "micropython",
    "bits", "ssl"}; None when none is given; ValueError when exe is not a 32-bit
    MicroPython."""
    if not exe:
        return None
    info = _micropython(exe, "UNIX32")
    if info["bits"] != 32:
        raise ValueError("UNIX32=%s: a %d-bit MicroPython, not one built with gcc -m32"
                         % (exe, info["bits"]))
    return info


def _library_modules(root):
    """firmware/holdfast's modules as a frozen build lists them (holdfast/codec,
    holdfast/pkg/__init__), broker.py included: the manifest freezes it."""
    src = os.path.join(root, "firmware")
    out = []
    for d, dirs, fs in os.walk(os.path.join(src, "holdfast")):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        out += [os.path.relpath(os.path.join(d, f), src)[:-3] for f in fs if f.endswith(".py")]
    return sorted(out)


def frozen_build(exe, root):
    """The unix port at exe (FROZEN_UNIX=) with holdfast and the probe frozen
    in: {"exe", "micropython", "bits", "ssl", "stale"}; "stale" says how what it
    froze differs from root's firmware/holdfast ("" when its modules are the
    same; run() compares the objects they make too). None when none is
    given; ValueError when exe is not a MicroPython with the probe frozen."""
    if not exe:
        return None
    info = _micropython(exe, "FROZEN_UNIX")
    p = subprocess.run([exe, "-c", "help('modules')"], env=dict(os.environ, MICROPYPATH=".frozen"),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                       timeout=30)
    mods = set(p.stdout.split())
    if "footprint" not in mods:
        raise ValueError("FROZEN_UNIX=%s: no footprint probe frozen in it: build the unix port with "
                         "FROZEN_MANIFEST=<holdfast>/tools/bench/mp/manifest.py (docs/footprint.md)"
                         % exe)
    have = set(m for m in mods if m.startswith("holdfast/"))
    want = set(_library_modules(root))
    info["stale"] = "" if have == want else (
        "its holdfast modules are not firmware/holdfast's (only frozen: %s; not frozen: %s)" % (
            ", ".join(sorted(have - want)) or "none", ", ".join(sorted(want - have)) or "none"))
    return info


def stale_objects(rows, configs):
    """Where the frozen holdfast makes other objects than firmware/holdfast's
    .mpy in this run (the probe's counts per configuration): a sentence, or
    "" when they agree. Module names alone miss a changed module."""
    for cfg, _, _, _ in configs:
        if cfg in PEER_LIBS:
            continue
        f, m = _ok(rows.get(cfg), "frozen"), _ok(rows.get(cfg), "mpy")
        fc, mc = f and f.get("counts"), m and m.get("counts")
        if fc and mc and any(fc[k] != mc[k] for k in COUNTED):
            return "%s creates other objects frozen than from firmware/holdfast (%s)" % (cfg, ", ".join(
                "%s %d against %d" % (k, fc[k], mc[k]) for k in COUNTED if fc[k] != mc[k]))
    return ""


def _pki(d):
    """A CA file and the mosquitto lines of a TLS listener ({port}) whose
    certificate it signs, for 127.0.0.1 (trustme, made per run)."""
    import trustme
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    paths = {}
    for name, blob in (("ca.pem", ca.cert_pem), ("server.pem", leaf.cert_chain_pems[0]),
                       ("server.key", leaf.private_key_pem)):
        paths[name] = os.path.join(d, name)
        blob.write_to_path(paths[name])
    conf = "\n".join(["listener {port} 127.0.0.1", "cafile " + paths["ca.pem"],
                      "certfile " + paths["server.pem"], "keyfile " + paths["server.key"], ""])
    return paths["ca.pem"], conf


def _run(cmd, env, cwd, timeout):
    """(result dict or None, completed OK, last line of output, seconds)."""
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout)
        out = p.stdout
    except subprocess.TimeoutExpired:
        return None, False, "timed out after %.0f s" % timeout, time.monotonic() - t
    res = parse(out)
    lines = out.strip().splitlines()
    return (res, "FOOTPRINT OK" in out, lines[-1] if lines else "exit %d" % p.returncode,
            time.monotonic() - t)


def parse(out):
    """The probe's RESULT, with its COUNTS and, from the two qstr_info()
    lines around them, the names the library interned ("interned"), the
    interpreter's names after connect ("qstrs"), their pools ("pools") and
    whether a pool was allocated between the two lines ("step")."""
    res = None
    pools = []
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
        elif line.startswith("COUNTS ") and res is not None:
            res["counts"] = json.loads(line[7:])
        elif line.startswith("qstr pool:"):
            pools.append([int(x) for x in re.findall(r"n_(?:pool|qstr)=(\d+)", line)])
    c = res and res.get("counts")
    if c and len(pools) >= 2:
        c["pools"], c["qstrs"] = pools[-1]
        c["interned"] = pools[-1][1] - pools[0][1]
        c["step"] = pools[-1][0] != pools[0][0]
    return res


def kb(v):
    return "%.1f KB" % (v / 1024.0)


def _cell(r, mode, cfg, key="total"):
    x = r.get(mode)
    if x is None:
        return "-"
    if "error" in x:
        return "failed: %s" % x["error"]
    if "na" in x:
        return "n/a"
    return kb(x[key])


LEFT_OUT = {"frozen": "no frozen unix port given (make bench FROZEN_UNIX=path: one built from "
                      "MicroPython's source with tools/bench/mp/manifest.py frozen in, "
                      "docs/footprint.md): the frozen column is left out",
            "m32": "no 32-bit unix port given (make bench UNIX32=path: MicroPython's unix port "
                   "built with gcc -m32, docs/footprint.md): the 32-bit unix column is left out"}


def modes_of(frozen, m32):
    """The MODES measured when the optional builds are as given (None: not
    built), and a line for each column left out."""
    built = {"frozen": frozen, "m32": m32}
    return ([x for x in MODES if built.get(x[0], True) is not None],
            [LEFT_OUT[m] for m, _ in MODES if m in built and built[m] is None])


MALLOC_CFGS = (("pub", "tls"), ("umqtt_simple", "umqtt_simple_tls"))


def mallocstat(ctx):
    """tools/bench/mallocstat.c built into the bench's build directory:
    its path, or None (and a log line) where it cannot be."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.exists("/proc/self/maps"):
        ctx.log("no C compiler (or not Linux): the C library's heap under TLS is not measured")
        return None
    out = os.path.join(ctx.build, "footprint", "mallocstat.so")
    p = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out,
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "mallocstat.c")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        ctx.log("mallocstat.c did not build (the C library's heap under TLS is not measured): "
                + p.stdout.strip()[-300:])
        return None
    return out


def tls_malloc(ctx, r, ports):
    """What TLS adds in the C library's heap, where mbedtls allocates on the
    unix port (as on an ESP32): {client: {"live", "peak"}} in bytes, the TLS
    configuration's minus the plain one's, after connect and at the peak
    (the handshake); {} when it cannot be measured."""
    shim = mallocstat(ctx)
    out = {}
    for plain, tls in MALLOC_CFGS if shim else ():
        try:
            a, b = r.malloc(plain, ports, shim), r.malloc(tls, ports, shim)
        except RuntimeError as e:
            ctx.log("C library heap, %s: %s" % (tls, e))
            continue
        out[tls] = {"live": b["live"] - a["live"], "peak": b["peak"] - a["peak"]}
        ctx.log("C library heap, %s over %s: %s after connect, %s at the peak"
                % (tls, plain, kb(out[tls]["live"]), kb(out[tls]["peak"])))
    return out


def run(ctx):
    quick = ctx.quick
    n = 20 if quick else 200
    ctx.log("compiling the probe, holdfast (-O0 and -O3) and the peers")
    r = Runner(ctx, n, frozen=given(ctx, "frozen_unix"), m32=given(ctx, "unix32"))
    modes, left = modes_of(r.frozen, r.m32)
    for line in left:
        ctx.log(line)
    tls_port = free_port()
    broker = Mosquitto(extra_conf=r.tls_conf.format(port=tls_port))
    broker.start()
    ports = (broker.port, tls_port)
    rows = {}
    configs = [c for c in CONFIGS if c[3] or not quick]
    try:
        for cfg, label, on_wasm, _ in configs:
            row = rows[cfg] = {"label": label}
            for mode, _ in modes:
                if mode == "wasm":
                    if not on_wasm:
                        row[mode] = {"na": NOT_ON_WASM[cfg]}
                        continue
                    run_ = lambda: r.wasm(cfg)
                elif mode in ("frozen", "m32") and cfg in TLS_CFGS and not (
                        r.frozen if mode == "frozen" else r.m32)["ssl"]:
                    row[mode] = {"na": "built without ssl (MICROPY_PY_SSL=0)"}
                    continue
                else:
                    run_ = lambda: r.unix(cfg, ports, mode)
                try:
                    res, ok, last, took = run_()
                    row[mode] = res if ok else {"error": last}
                except RuntimeError as e:
                    row[mode] = {"error": str(e)}
                    continue
                if mode in MINHEAP_MODES and ok and (not quick or cfg in MINHEAP_QUICK):
                    row[mode]["minheap"] = r.smallest(cfg, ports, took, mode)
                if mode in POOL_MODES and ok:
                    row[mode]["nopool"] = r.no_pool_step(
                        (lambda pad: r.wasm(cfg, pad)) if mode == "wasm" else
                        (lambda pad: r.unix(cfg, ports, mode, pad=pad)))
            ctx.log("%s: %s" % (cfg, "; ".join("%s %s" % (m, _brief(row.get(m)))
                                                for m, _ in modes if m in row)))
        if r.frozen is not None and not r.frozen["stale"]:
            r.frozen["stale"] = stale_objects(rows, configs)
        res, ok, last, _ = r.unix("pub", ports, fw="fw3")
        o3 = res if ok else {"error": last}
        libc = tls_malloc(ctx, r, ports)
    finally:
        broker.close()
        shutil.rmtree(r.tmp, ignore_errors=True)
    return report(rows, configs, o3, n, r.peers, r.frozen, quick, r.m32, libc)


def _brief(x):
    if x is None:
        return "-"
    if "error" in x:
        return "error: " + x["error"]
    if "na" in x:
        return "n/a"
    return "code %s, after connect %s%s%s" % (
        kb(x["code"]), kb(x["total"]),
        ", smallest heap %sk" % x["minheap"] if x.get("minheap") else "",
        ", no pool step %s" % _nopool_cell(x) if "nopool" in x else "")


def _m32_heaps(rows):
    """The smallest heaps on the 32-bit unix port, holdfast's publish-only
    beside the peers', as a sentence ("" when none was measured)."""
    got = [(label, _ok(rows.get(cfg), "m32")) for cfg, label in (
        ("pub", "holdfast publish-only"), ("umqtt_simple", "umqtt.simple"),
        ("mqtt_async", "mqtt_async"))]
    got = ["%s %dk" % (label, x["minheap"]) for label, x in got if x and x.get("minheap")]
    return " Smallest heap, 32-bit: %s." % ", ".join(got) if got else ""


def _libc_line(libc):
    """The note on what TLS holds outside the GC heap (tls_malloc's figures)."""
    if not libc:
        return ("not measured in this run (it needs a C compiler for tools/bench/mallocstat.c "
                "and glibc).")
    names = {"tls": "holdfast", "umqtt_simple_tls": "umqtt.simple"}
    return ("on the unix port (as on an ESP32) mbedtls allocates through the C library's malloc, "
            "which gc.mem_alloc() does not see; counted by tools/bench/mallocstat.c (LD_PRELOAD, "
            "the allocator's usable sizes), the TLS configuration minus the plain one, with the "
            "CA and CERT_REQUIRED: %s." % "; ".join(
                "%s %s after connect, %s at the peak (the handshake)" % (
                    names[k], kb(v["live"]), kb(v["peak"])) for k, v in sorted(libc.items())))


def _ok(row, mode):
    x = row.get(mode) if row else None
    return x if x and "error" not in x and "na" not in x else None


def _estimate(counts):
    return sum(counts[k] * COST[k] for k in COUNTED)


def _total(x):
    return x["total"] if x else None


def _nopool(x):
    """A mode's heap after connect without a pool step (None if not measured
    or not pool-free)."""
    n = x.get("nopool") if x else None
    return n.get("total") if n else None


def _nopool_cell(x):
    n = x.get("nopool") if x else None
    if not n:
        return "-"
    if "error" in n:
        return "failed: %s" % n["error"]
    if "step" in n:
        return "not pool-free (a pool allocated with %d names padded)" % n["step"]
    return kb(n["total"])


def targets_of(rows, frozen, fig=_total):
    """The issue's targets: [{"id", "name", "value", "goal", "pass", "ratio",
    "missed"}], heap figures read from each mode's result by fig (the
    measured one; _nopool for the heap-after-connect ones without a pool
    step, their goals from the peers' figures read the same way)."""
    out = []

    def add(id_, name, value, goal, goal_text, note=""):
        t = {"id": id_, "name": name, "goal": goal_text}
        if value is None or goal is None:
            t.update(value=note or "not measured", passed=None, ratio="-", missed="-")
        else:
            t.update(value=(kb(value) if goal > 1000 else "%dk" % value) + note,
                     passed=value <= goal, ratio="%.2f" % (value / goal),
                     missed="-" if value <= goal else
                     (kb(value - goal) if goal > 1000 else "%dk" % (value - goal)))
        out.append(t)

    def over(a, b):
        return None if a is None or b is None else a - b

    pub, ma, us = rows.get("pub"), rows.get("mqtt_async"), rows.get("umqtt_simple")
    p, m = _ok(pub, "mpy"), _ok(ma, "mpy")
    add("mpy", "publish-only, .mpy copied: heap after connect <= mqtt_async's",
        fig(p), fig(m), "<= %s (mqtt_async, this run)" % (kb(fig(m)) if fig(m) else "?"))
    x = _ok(pub, "rom")
    add("rom", "publish-only, ROMFS in place: heap after connect", fig(x), T_ROM, "<= 16 KB")
    x = _ok(pub, "frozen")
    note = "" if frozen is None or not frozen["stale"] else " (frozen build is stale)"
    add("frozen", "publish-only, frozen: heap after connect", fig(x), T_FROZEN, "<= 12 KB",
        note if x else "not measured (no FROZEN_UNIX=path given)")
    add("minheap", "publish-only, smallest heap (.mpy, unix)", p and p.get("minheap"), T_MINHEAP,
        "<= 44k")
    w, mw, m3 = _ok(pub, "wasm"), _ok(ma, "wasm"), _ok(ma, "m32")
    add("m32", "32-bit .mpy publish-only: heap after connect <= mqtt_async's",
        fig(w), fig(mw),
        "<= %s (mqtt_async, this run, same port; %s)" % (
            kb(fig(mw)) if fig(mw) else "?",
            "%s on the 32-bit unix port, this run" % kb(fig(m3)) if fig(m3) else
            "%s recorded on a 32-bit unix port" % kb(MQTT_ASYNC_32)))
    t, u, ut = _ok(rows.get("tls"), "mpy"), _ok(us, "mpy"), _ok(rows.get("umqtt_simple_tls"), "mpy")
    add("tls", "TLS over plain, GC heap (.mpy)", over(fig(t), fig(p)), T_TLS,
        "<= 5 KB (umqtt.simple this run: %s)" % (
            kb(over(fig(ut), fig(u))) if over(fig(ut), fig(u)) is not None else "?"))
    return out


# The targets that are heaps after connect, as targets_of names them.
HEAP_TARGETS = (("mpy", "publish-only .mpy"), ("rom", "ROMFS"), ("m32", "32-bit"),
                ("tls", "TLS over plain"))


def nopool_line(rows, frozen, targets):
    """The sentence under the targets: each heap-after-connect target's
    figure and ratio measured and without a pool step."""
    free = {t["id"]: t for t in targets_of(rows, frozen, _nopool)}
    got = {t["id"]: t for t in targets}
    return ("Without a pool step (the names padded first, the table above; the goals against "
            "the peers' figures read the same way): %s." % "; ".join(
                "%s %s (%s), no pool step %s (%s%s)" % (
                    label, got[k]["value"], got[k]["ratio"], free[k]["value"], free[k]["ratio"],
                    "" if free[k]["goal"] == got[k]["goal"] else " to " + free[k]["goal"])
                for k, label in HEAP_TARGETS))


WIRE_TOPIC = b"sensors/livingroom/temperature"
WIRE_READING = b"21.5"


def wire_bytes():
    """(reading bytes, topic bytes, then bytes per PUBLISH at QoS 0 and 1:
    level 4; level 5 without an alias; level 5 setting an alias; level 5
    by the alias alone), from the engines themselves, past a CONNACK
    (with Topic Alias Maximum 10 for the aliased ones, as mosquitto's)."""
    import sys
    fw = os.path.join(os.path.dirname(os.path.dirname(HERE)), "firmware")
    if fw not in sys.path:
        sys.path.insert(0, fw)
    from holdfast.session import Session
    from holdfast.broker import feed
    from holdfast.v5 import Session5

    def engine(cls, level, connack):
        s = cls(b"wire", True, 0, level, 256, 4)
        s.start(0)
        s.sent(s.tx_end, 0)
        feed(s.rx, connack)
        s.receive(0)
        return s

    def one(s, qos):
        t0 = s.tx_end
        s.publish(WIRE_TOPIC, WIRE_READING, qos, False, 0)
        n = s.tx_end - t0
        s.sent(s.tx_end - s.tx_start, 0)
        return n

    out = [len(WIRE_READING), len(WIRE_TOPIC)]
    s4 = engine(Session, 4, b"\x20\x02\x00\x00")
    out += [one(s4, 0), one(s4, 1)]
    s5 = engine(Session5, 5, b"\x20\x03\x00\x00\x00")
    out += [one(s5, 0), one(s5, 1)]
    a0 = engine(Session5, 5, b"\x20\x06\x00\x00\x03\x22\x00\x0a")
    a1 = engine(Session5, 5, b"\x20\x06\x00\x00\x03\x22\x00\x0a")
    first = [one(a0, 0), one(a1, 1)]
    out += first + [one(a0, 0), one(a1, 1)]
    return tuple(out)


def report(rows, configs, o3, n, peers, frozen, quick, m32=None, libc=None):
    modes = modes_of(frozen, m32)[0]
    head = ["configuration"]
    for m, label in modes:
        head += ["%s: code" % label, "after connect"]
        if m in MINHEAP_MODES:
            head.append("smallest heap")
    md = ["| %s |" % " | ".join(head), "| %s |" % " | ".join(["---"] * len(head))]
    for cfg, label, _, _ in configs:
        row = rows[cfg]
        cells = [label]
        for m, _ in modes:
            cells += [_cell(row, m, cfg, "code"), _cell(row, m, cfg)]
            if m in MINHEAP_MODES:
                x = _ok(row, m)
                cells.append("%dk" % x["minheap"] if x and x.get("minheap") else "-")
        md.append("| %s |" % " | ".join(cells))
    md.append("")
    pub = _ok(rows["pub"], "mpy")
    if pub and "error" not in o3:
        md.append("With `mpy-cross -O3` (`make deploy MPY_OPT=3`: no line numbers in tracebacks) "
                  "the publish-only client holds %s after connect instead of %s (.mpy copied, "
                  "unix port)." % (kb(o3["total"]), kb(pub["total"])))
        md.append("")

    w = wire_bytes()
    md.append("Bytes on the wire per publish of a %d-byte reading to a %d-byte topic, QoS 0 / QoS 1 "
              "(the session's own output, CPython): level 4 %d / %d; level 5 without a topic alias "
              "%d / %d; level 5 with one: %d / %d the first time on a link, %d / %d after "
              "(docs/mqtt5.md)." % w)
    md.append("")
    md.append("What the library's modules create (walked under MicroPython after connect, "
              ".mpy copied; the probe's adapters and asyncio are not counted), and what those "
              "objects take frozen at the measured costs (64-bit: function %d B, method %d, "
              "class %d, module-level name %d, module %d):" % (
                  COST["functions"], COST["methods"], COST["classes"], COST["names"],
                  COST["modules"]))
    md.append("")
    md.append("| configuration | modules | functions | methods | classes | exception classes "
              "| module-level names | objects, frozen (est.) | names interned (all after connect, pools) |")
    md.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for cfg, label, _, _ in configs:
        x = _ok(rows[cfg], "mpy")
        c = x and x.get("counts")
        if c:
            md.append("| %s | %s | %s | %s |" % (
                label, " | ".join(str(c[k]) for k in COUNTED), kb(_estimate(c)),
                "%d (%d, %d)" % (c["interned"], c["qstrs"], c["pools"]) if "interned" in c else "-"))
    md.append("")
    md.append("Names interned: what importing and connecting add to the interpreter's interned "
              "names (micropython.qstr_info()), the probe's own loaded before. Loaded from .mpy "
              "or ROMFS each costs a pool entry (11 B, 64-bit) and its string; a pool that fills "
              "is followed by one twice its size, allocated at once (on this unix port the fifth, "
              "320 entries or 3.5 KB, when the 301st name is interned, the probe's and the "
              "runtime's included; on a board with frozen modules the first pool after them is "
              "twice theirs), so a few names more or less, the application's too, can move a "
              "figure by a whole pool.")
    md.append("")
    pmodes = [(m, label) for m, label in modes if m in POOL_MODES]
    md.append("Heap after connect without a pool step: the same run with %d names interned "
              "before the first reading (more if a pool was still allocated between the "
              "readings), so that no pool is allocated in the window; the probe's qstr_info() "
              "lines show the pool count unchanged, or the cell says it is not pool-free." % PAD)
    md.append("")
    md.append("| configuration | %s |" % " | ".join(
        "%s: after connect, no pool step" % label for _, label in pmodes))
    md.append("| --- | %s |" % " | ".join(["---:"] * len(pmodes)))
    for cfg, label, _, _ in configs:
        md.append("| %s | %s |" % (label, " | ".join(
            _nopool_cell(_ok(rows[cfg], m)) if _ok(rows[cfg], m) else _cell(rows[cfg], m, cfg)
            for m, _ in pmodes)))
    md.append("")

    targets = targets_of(rows, frozen)
    md.append("Targets (issue 18; the peers measured in this run):")
    md.append("")
    md.append("| target | goal | holdfast | ratio to goal | missed by |")
    md.append("| --- | --- | --- | ---: | ---: |")
    for t in targets:
        md.append("| %s | %s | %s | %s | %s |" % (t["name"], t["goal"], t["value"], t["ratio"],
                                                  t["missed"]))
    md.append("")
    md.append(nopool_line(rows, frozen, targets))
    md.append("")
    md.append("The targets are judged on the measured figures, what a board holds with the "
              "names its application interns before and after the client's. Beside them the "
              "figures without a pool step, because whether a pool is allocated inside the "
              "window depends on where the last pool boundary fell, not on the client, and one "
              "pool more or less (3.5 KB at the fifth) can outweigh the code and state compared.")
    md.append("")
    md.append("- code: gc.mem_alloc() after gc.collect(), from before the import to after it; "
              "after connect: also the client's state (buffers, outbox ring, slot tables); "
              "smallest heap: -X heapsize bisected in 1 KB steps (%dk..%dk) for import, connect "
              "and %d acknowledged publishes%s." % (
                  HEAP_LO, HEAP_HI, n, " (--quick: publish-only, lean and the two peers)"
                  if quick else ""))
    md.append("- every library, holdfast and the peers alike, is compiled with its dotted module "
              "name as source file name (`mpy-cross -s holdfast.codec`, `-s umqtt.simple`), as "
              "`make deploy` compiles for a board: importing interns that name anyway, so no "
              "library pays an interned string per module for its file name.")
    md.append("- ROMFS: the image (`mpremote romfs build` of the probe and the library's .mpy) "
              "is read into a bytes object and mounted with `vfs.VfsRom` before the first "
              "reading, so the figures count only what importing from it creates, as on a board "
              "whose ROMFS partition is in flash.")
    if frozen is not None:
        md.append("- frozen: the unix port given (FROZEN_UNIX), MicroPython %s, holdfast, the probe "
                  "and the peers frozen in (tools/bench/mp/manifest.py)%s.%s" % (
                      frozen["micropython"], "" if frozen["ssl"] else "; built without ssl, so no TLS rows",
                      " STALE: %s; build it again from this tree." % frozen["stale"]
                      if frozen["stale"] else ""))
    else:
        md.append("- frozen: not measured in this run (no FROZEN_UNIX=path: a unix port built "
                  "from MicroPython's source with tools/bench/mp/manifest.py frozen in; "
                  "docs/footprint.md says how, and has recorded figures).")
    if m32 is not None:
        md.append("- 32-bit unix: the unix port given (UNIX32), MicroPython %s built with gcc -m32, "
                  "nothing of holdfast frozen%s: the same .mpy files and mosquitto as the 64-bit "
                  "column.%s" % (m32["micropython"], "" if m32["ssl"] else ", without ssl (no TLS rows)",
                                 _m32_heaps(rows)))
    else:
        md.append("- 32-bit unix: not measured in this run (no UNIX32=path: MicroPython's unix "
                  "port built with gcc -m32; docs/footprint.md says how, and has recorded "
                  "figures).")
    md.append("- 32-bit WebAssembly: MicroPython %s's WebAssembly port (pyscript variant) in Node "
              "(tools/runtimes/mpwasm.mjs), 16-byte GC blocks, against an in-memory broker "
              "(tools/runtimes/wasm; asyncio streams over it for mqtt_async). The port's "
              "gc.collect() only asks for a collection, which runs once control is back in "
              "JavaScript: the probe reads the heap from there. The modules its build freezes "
              "over built-in ones (time, binascii, io, os, collections) are loaded before the "
              "reading, and its frozen logging, which a board has not, is hidden. Not run "
              "there: %s." % (mpyc.wasm_version(), "; ".join(
                  "%s (%s)" % (k, v) for k, v in sorted(NOT_ON_WASM.items()))))
    md.append("- TLS in the C library's heap: %s" % _libc_line(libc))
    md.append("- peers: %s." % ", ".join("%s %s" % (k, v[1]) for k, v in sorted(peers.items())))
    bench_targets = [{"name": t["name"], "value": t["value"], "goal": t["goal"],
                      "pass": t["passed"]} for t in targets]
    return {"markdown": "\n".join(md),
            "data": {"rows": rows, "o3": o3, "frozen": frozen, "m32": m32, "targets": targets,
                     "libc": libc},
            "targets": bench_targets}
