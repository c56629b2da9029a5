"""Every example in README.md and docs/*.md runs as written and finishes;
every import and command they (and tools/**/README.md) name exists.

- ```python blocks run, one process each, under CPython and under the
  MicroPython unix port, against the private mosquitto. The examples name
  their broker "broker.local" or "broker.example" on MQTT's port (1883,
  8883 with TLS); those names resolve to the private mosquitto's host and
  port, as a hosts-file entry and a port forward would: holdfast calls
  socket.getaddrinfo on every connect, and the test wraps it (CPython: a
  prelude before the block; MicroPython: a socket.py first on MICROPYPATH,
  over the built-in usocket). Nothing in the block is changed. It must
  exit with status 0 by itself.
- A block that cannot run here (board only, needs a TLS broker...) carries
  the line `<!-- example not run: <why> -->` right above its fence. Its
  import lines are still imported (board modules apart: esp32, machine,
  rp2, network), and it is reported as skipped with the reason; the list
  also goes to the end of the pytest output (conftest.py).
- Imports quoted in the prose (`from x import y`) are imported.
- Command lines (in indented or non-python fenced blocks) are checked
  against what exists: `make` targets in the Makefile, `python -m` modules
  (with the PYTHONPATH the line sets), scripts and test paths in the
  checkout. They are not run: they flash boards, take minutes or are this
  very suite.
"""

import glob
import json
import os
import re
import shlex
import subprocess
import sys
from importlib.util import find_spec

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIRMWARE = os.path.join(ROOT, "firmware")
SEARCH_PATH = [FIRMWARE, os.path.join(ROOT, "tools"), os.path.join(ROOT, "host_tests", "portable")]
DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
TOOL_DOCS = sorted(os.path.relpath(p, ROOT) for p in
                   glob.glob(os.path.join(ROOT, "tools", "**", "README.md"), recursive=True))
BROKER_NAMES = ("broker.local", "broker.example")
BOARD_MODULES = ("esp32", "machine", "rp2", "network")
BOUND = 60  # seconds; only a failing example gets near it

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)\s*$")
NOT_RUN = re.compile(r"^\s*<!-- example not run: (.+?) -->\s*$")
INLINE_IMPORT = re.compile(r"`((?:from [\w.]+ import [\w, ]+)|(?:import [\w.]+))`")
IMPORT_LINE = re.compile(r"^(from\s+([\w.]+)\s+import\s+.+|import\s+([\w.]+)(\s+as\s+\w+)?)\s*(#.*)?$")


class Block:
    def __init__(self, path, line, lang, text, not_run):
        self.path, self.line, self.lang, self.text, self.not_run = path, line, lang, text, not_run

    @property
    def where(self):
        return "%s:%d" % (self.path, self.line)


def blocks(path):
    """The code blocks of a markdown file: fenced (with their language) and
    indented (language "")."""
    with open(os.path.join(ROOT, path)) as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    prev = ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            indent, fence, lang = len(m.group(1)), m.group(2), m.group(3)
            marker = NOT_RUN.match(prev)
            start = i + 1
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != fence:
                body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
                i += 1
            out.append(Block(path, start, lang, "\n".join(body) + "\n",
                             marker.group(1) if marker else None))
        elif lines[i].startswith("    ") and prev.strip() == "":
            start = i + 1
            body = []
            while i < len(lines) and (lines[i].startswith("    ") or lines[i].strip() == ""):
                body.append(lines[i][4:])
                i += 1
            out.append(Block(path, start, "", "\n".join(body).rstrip() + "\n", None))
            prev = ""
            continue
        prev = lines[i] if lines[i].strip() else prev if NOT_RUN.match(prev) else lines[i]
        i += 1
    return out


def python_blocks():
    return [b for p in DOCS for b in blocks(p) if b.lang in ("python", "py")]


MP_SOCKET = """\
# The examples' broker is the test's private mosquitto (test_docs.py).
from usocket import *
import usocket as _socket
def getaddrinfo(host, port, *args):
    if host in %(names)r and port in (1883, 8883):
        host, port = %(host)r, %(port)d
    return _socket.getaddrinfo(host, port, *args)
"""
MICROPYTHON = os.path.join(os.path.dirname(sys.executable), "micropython")

# CPython: the examples' broker names resolve to the private mosquitto
# (test_pyproject.py runs the README's example so too, holdfast installed).
RESOLVE = """\
import socket
_getaddrinfo = socket.getaddrinfo
def _resolve(host, port, *args, **kw):
    # The examples' broker is the test's private mosquitto (test_docs.py).
    if host in %(names)r and port in (1883, 8883):
        host, port = %(host)r, %(port)d
    return _getaddrinfo(host, port, *args, **kw)
socket.getaddrinfo = _resolve
del socket
"""
PRELUDE = """\
import sys
sys.path.insert(0, %(firmware)r)
del sys
""" + RESOLVE


def imports_of(text):
    """The import statements of a block, those of board modules apart."""
    found = []
    for line in text.splitlines():
        m = IMPORT_LINE.match(line.strip())
        if m:
            top = (m.group(2) or m.group(3)).split(".")[0]
            if top not in BOARD_MODULES:
                found.append(m.group(1))
    return found


def failing_imports(statements):
    """Runs each import statement in a fresh CPython; {statement: error}."""
    code = ("import json, sys\nsys.path[:0] = %r\nbad = {}\n"
            "for st in %r:\n"
            "    try:\n        exec(st, {})\n"
            "    except Exception as e:\n        bad[st] = '%%s: %%s' %% (e.__class__.__name__, e)\n"
            "print('RESULT ' + json.dumps(bad))\n") % (SEARCH_PATH, statements)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (p.stdout, p.stderr)
    return json.loads(lines[-1][7:])


@pytest.fixture(scope="module")
def skipped_list(request):
    skipped = []
    yield skipped
    counts = getattr(request.config, "holdfast_counts", None)
    if counts is not None and skipped:
        counts.append("Doc examples not run (%d): %s" % (len(skipped), "; ".join(skipped)))


@pytest.mark.parametrize("runtime", ["cpython", "micropython"])
@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.where)
def test_python_example(block, runtime, mosquitto, tmp_path, skipped_list):
    if block.not_run:
        if runtime == "cpython":
            bad = failing_imports(imports_of(block.text))
            assert not bad, "%s: imports that fail: %s" % (block.where, bad)
            skipped_list.append("%s (%s)" % (block.where, block.not_run))
        pytest.skip("not run: %s (imports checked)" % block.not_run)
    broker = {"firmware": FIRMWARE, "names": BROKER_NAMES,
              "host": mosquitto.host, "port": mosquitto.port}
    script = tmp_path / "example.py"
    env = dict(os.environ)
    if runtime == "cpython":
        script.write_text(PRELUDE % broker + block.text)
        cmd = [sys.executable, str(script)]
    else:
        script.write_text(block.text)
        (tmp_path / "shim").mkdir()
        (tmp_path / "shim" / "socket.py").write_text(MP_SOCKET % broker)
        env["MICROPYPATH"] = "%s:%s:.frozen" % (tmp_path / "shim", FIRMWARE)
        cmd = [MICROPYTHON, str(script)]
    try:
        p = subprocess.run(cmd, cwd=str(tmp_path), env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=BOUND)
    except subprocess.TimeoutExpired as e:
        pytest.fail("%s did not finish within %d s; output:\n%s" % (block.where, BOUND, e.stdout))
    assert p.returncode == 0, "%s exited with %d:\n%s%s" % (block.where, p.returncode,
                                                           p.stdout, p.stderr)
    assert "Traceback" not in p.stdout + p.stderr, "%s:\n%s%s" % (block.where, p.stdout, p.stderr)


def test_every_python_block_is_run_or_says_why():
    # Sanity of the extraction itself: the README's first example is run.
    bs = python_blocks()
    run = [b for b in bs if not b.not_run]
    assert any(b.path == "README.md" and "MQTTClient(" in b.text for b in run), \
        [b.where for b in run]


def test_imports_named_in_the_docs():
    statements = []
    for path in DOCS + TOOL_DOCS:
        with open(os.path.join(ROOT, path)) as f:
            statements += [m.group(1) for m in INLINE_IMPORT.finditer(f.read())]
    assert len(statements) >= 5, statements  # the pattern still finds them
    bad = failing_imports(sorted(set(statements)))
    assert not bad, bad


def make_targets():
    targets = set()
    with open(os.path.join(ROOT, "Makefile")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:(?!=)", line)
            if m and not line.startswith("."):
                targets.update(m.group(1).split())
    return targets


def command_lines(block):
    """Shell command lines of a block (continuations joined)."""
    text = block.text.replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


CHECKOUT_DIRS = ("firmware", "tools", "host_tests", "boards", "docs")
PLACEHOLDER = re.compile(r"NNNN|\.\.\.|^~|/dev/|^build/|^/tmp/|<|\bPORT\b")


def check_command(line, targets):
    """What is wrong with a command line, or None (also for lines that are
    not commands: output, listings)."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    env = {}
    while words and re.match(r"^[A-Z_]+=", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    if not words:
        return None
    cmd, args = words[0], words[1:]
    if cmd == "make":
        missing = [a for a in args if "=" not in a and not a.startswith("-") and a not in targets]
        return "no make target %s" % missing if missing else None
    if cmd not in (".venv/bin/python", "python", ".venv/bin/micropython", "micropython",
                   ".venv/bin/mpremote", "mpremote"):
        return None
    if cmd.endswith("mpremote"):
        return None if os.path.exists(os.path.join(ROOT, ".venv", "bin", "mpremote")) else \
            "no mpremote in .venv/bin"
    if "MICROPYPATH" in env and env["MICROPYPATH"].startswith("build/"):
        return None  # runs what an earlier command builds
    if args[:1] == ["-c"]:
        return None
    if args[:1] == ["-m"] and len(args) > 1:
        mod = args[1]
        path = [os.path.join(ROOT, p) for p in env.get("PYTHONPATH", "").split(":") if p]
        code = "import sys; sys.path[:0] = %r; from importlib.util import find_spec; " \
               "print(find_spec(%r) is not None)" % (path, mod)
        exe = sys.executable
        p = subprocess.run([exe, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
        if p.stdout.strip() != "True":
            return "no module %s (PYTHONPATH=%s): %s" % (mod, env.get("PYTHONPATH", ""), p.stderr[-300:])
        args = args[2:]
    for a in args:
        a = a.strip("[]")  # an optional argument in a usage line
        if a.startswith("-") or "=" in a or PLACEHOLDER.search(a):
            continue
        # Inputs in the checkout; other paths (landing/, out/) are outputs.
        if a.split("/")[0] in CHECKOUT_DIRS or a.endswith(".py"):
            if not os.path.exists(os.path.join(ROOT, a.split("::")[0])):
                return "no %s in the checkout" % a
    return None


def test_commands_in_the_docs_exist():
    targets = make_targets()
    assert {"setup", "test", "deploy", "emulate"} <= targets, targets
    checked = 0
    bad = []
    for path in DOCS + TOOL_DOCS:
        for b in blocks(path):
            if b.lang in ("python", "py"):
                continue
            for line in command_lines(b):
                why = check_command(line, targets)
                if why:
                    bad.append("%s: %s: %s" % (b.where, line, why))
                elif line.split()[0] in ("make", ".venv/bin/python", ".venv/bin/micropython") \
                        or line.startswith("PYTHONPATH="):
                    checked += 1
    assert checked >= 20, checked  # the extraction still finds the commands
    assert not bad, "\n".join(bad)
