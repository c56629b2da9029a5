"""The footprint bench's own logic (tools/bench/footprint.py and its probe
mp/footprint.py): the object walk under MicroPython, the targets table, and
the optional 32-bit unix column (measured when `make firmware32` has built
its port; the test that runs it says so when it skips)."""

import json
import os
import shutil
import subprocess
import types

import pytest

from bench import footprint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tools", "bench", "mp")

_SAMPLE = """\
class Oops(Exception):
    pass


class Thing:
    X = 1

    def a(self):
        pass

    @property
    def b(self):
        return 1

    @staticmethod
    def c():
        pass


def f(x=1):
    return x


def g():
    yield 1


ALIAS = f
"""


def test_object_walk_under_micropython(tmp_path):
    (tmp_path / "fp_sample.py").write_text(_SAMPLE)
    script = ("import sys, footprint\nfootprint.COUNT[0] = True\nb = set(sys.modules)\n"
              "footprint.names()\nimport fp_sample\n"
              "print('RESULT {\"code\": 0, \"total\": 0, \"mpy\": 0}')\n"
              "footprint.count_objects(b)\n")
    exe = os.path.join(ROOT, ".venv", "bin", "micropython")
    out = subprocess.run([exe, "-c", script], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, MICROPYPATH="%s:%s:.frozen" % (PROBE, tmp_path)))
    line = [x for x in out.stdout.splitlines() if x.startswith("COUNTS ")]
    assert line, out.stdout + out.stderr
    c = json.loads(line[0][7:])
    # f and g (ALIAS is f again: one object), a/b/c in Thing, Thing, Oops;
    # the names: __name__, __file__, Oops, Thing, f, g, ALIAS.
    assert c == {"modules": 1, "functions": 2, "methods": 3, "classes": 1, "exceptions": 1,
                 "names": 7}, c
    # The interned names: qstr_info() before the import and after the walk,
    # read by the bench. Importing fp_sample interns at least its module's
    # name, its file's and three names no runtime has (Oops, Thing, ALIAS).
    n = footprint.parse(out.stdout)["counts"]
    assert n["interned"] >= 5 and n["qstrs"] >= n["interned"] and n["pools"] >= 1, n


def _row(total, **kw):
    return {"mpy": dict({"code": total // 2, "total": total}, **kw)}


def test_targets_say_by_how_much_each_is_missed():
    kb = 1024
    rows = {"pub": {"mpy": {"code": 40 * kb, "total": 50 * kb, "minheap": 70},
                    "rom": {"code": 20 * kb, "total": 16 * kb},
                    "wasm": {"na": "no"}},
            "mqtt_async": _row(25 * kb),
            "tls": _row(56 * kb), "umqtt_simple": _row(6 * kb),
            "umqtt_simple_tls": _row(10 * kb)}
    t = {x["name"].split(":")[0]: x for x in footprint.targets_of(rows, None)}
    mpy = t["publish-only, .mpy copied"]
    assert (mpy["passed"], mpy["ratio"], mpy["missed"]) == (False, "2.00", "25.0 KB"), mpy
    rom = t["publish-only, ROMFS in place"]
    assert (rom["passed"], rom["ratio"], rom["missed"]) == (True, "1.00", "-"), rom
    frozen = t["publish-only, frozen"]
    assert frozen["passed"] is None and "make firmware" in frozen["value"], frozen
    heap = t["publish-only, smallest heap (.mpy, unix)"]
    assert (heap["value"], heap["missed"]) == ("70k", "26k"), heap
    assert t["32-bit .mpy publish-only"]["passed"] is None
    tls = t["TLS over plain, GC heap (.mpy)"]
    assert (tls["value"], tls["missed"]) == ("6.0 KB", "1.0 KB"), tls
    assert "umqtt.simple this run: 4.0 KB" in tls["goal"], tls


def test_32bit_target_compares_with_mqtt_async_on_the_same_port():
    kb = 1024
    rows = {"pub": {"mpy": {"code": 40 * kb, "total": 50 * kb},
                    "wasm": {"code": 28 * kb, "total": 33 * kb}},
            "mqtt_async": {"mpy": {"code": 23 * kb, "total": 29 * kb},
                           "wasm": {"code": 16 * kb, "total": 22 * kb}}}
    t = {x["name"].split(":")[0]: x for x in footprint.targets_of(rows, None)}
    w = t["32-bit .mpy publish-only"]
    assert (w["passed"], w["ratio"], w["missed"]) == (False, "1.50", "11.0 KB"), w
    assert "22.0 KB (mqtt_async, this run, same port" in w["goal"], w
    assert "18.5 KB recorded" in w["goal"], w
    # mqtt_async failed on the port: nothing to compare with, whatever was recorded.
    rows["mqtt_async"]["wasm"] = {"error": "boom"}
    w = {x["name"].split(":")[0]: x for x in footprint.targets_of(rows, None)}[
        "32-bit .mpy publish-only"]
    assert w["passed"] is None and w["value"] == "not measured", w


# What mpwasm.mjs does for a main() that is a generator: each bare yield
# gets the heap in use after a real collection (on this port gc.collect()
# runs only once control is back in JavaScript), a yielded awaitable is
# awaited on the event loop, even one that cancels through wait_for().
_STEPS = """\
import gc


def main(a):
    return run()


async def talk():
    import asyncio
    import astream
    r, w = await astream.open_connection("broker", 1883)
    w.write(b"\\x10\\x0c\\x00\\x04MQTT\\x04\\x02\\x00\\x3c\\x00\\x00")
    await w.drain()
    got = await asyncio.wait_for(r.read(4), 1)
    try:
        await asyncio.wait_for(r.read(4), 0.05)  # nothing comes: cancelled
        late = "read"
    except asyncio.TimeoutError:
        late = "timeout"
    w.close()
    return got, late, await r.read(4)


def run():
    a = yield
    b = yield
    x = bytearray(6000)
    c = yield
    x = None
    for _ in range(50):
        bytearray(100)  # garbage, to be collected before the next reading
    d = yield
    gc.collect()  # only a request here: this reading still counts the garbage
    e = gc.mem_alloc()
    for _ in range(50):
        bytearray(100)
    f = gc.mem_alloc()
    print("STEPS", b - a, c - b, d - b, f - e)
    print("TALK", (yield talk()))
    return 3
"""


def test_mpwasm_reads_the_heap_after_a_real_collection(tmp_path):
    from runtimes import mpyc
    d = tmp_path / "steps"
    d.mkdir()
    (d / "fp_steps.py").write_text(_STEPS)
    rel = os.path.relpath(str(d), ROOT)
    shim = os.path.join("tools", "runtimes", "wasm")
    cmd = mpyc.wasm_command(["--copy", shim, "--path", shim, "--copy", rel, "--path", rel,
                             "-m", "fp_steps"])
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    steps = [x for x in p.stdout.splitlines() if x.startswith("STEPS ")]
    assert p.returncode == 3 and steps, (p.returncode, p.stdout, p.stderr)
    same, live, dropped, in_call = (int(x) for x in steps[0].split()[1:])
    # Nothing changed between two readings; a live 6000-byte buffer counts
    # (within its header and rounding to 16-byte blocks); dropped objects
    # and garbage do not.
    assert same == 0 and 6000 <= live <= 6100 and dropped == 0, steps
    # Inside one call gc.collect() frees nothing: the reason for the steps.
    assert in_call >= 50 * 100, steps
    talk = [x for x in p.stdout.splitlines() if x.startswith("TALK ")]
    assert talk == ["TALK (b' \\x02\\x00\\x00', 'timeout', b'')"], p.stdout + p.stderr


def test_optional_builds_absent_leave_their_columns_out_with_a_line_each():
    modes, left = footprint.modes_of(None, None)
    assert [m for m, _ in modes] == ["mpy", "rom", "wasm"], modes
    assert len(left) == 2, left
    assert "the frozen column is left out" in left[0], left
    assert "build/firmware/unix32/micropython is absent" in left[1], left
    assert "make firmware32 MPY_DIR=" in left[1] and "32-bit unix column is left out" in left[1]
    modes, left = footprint.modes_of(None, {"exe": "x", "micropython": "v1"})
    assert [m for m, _ in modes] == ["mpy", "rom", "m32", "wasm"] and len(left) == 1, (modes, left)


def test_m32_build_is_found_only_with_its_executable(tmp_path, monkeypatch):
    monkeypatch.setattr(footprint, "M32", str(tmp_path))
    assert footprint.m32_build() is None  # an empty directory: a build that failed or never ran
    (tmp_path / "micropython.version").write_text("v1.29.0-preview-731-g1c3c201149\n")
    exe = tmp_path / "micropython"
    exe.write_text("#!/bin/sh\n")
    assert footprint.m32_build() is None  # not executable
    exe.chmod(0o755)
    assert footprint.m32_build() == {"exe": str(exe),
                                     "micropython": "v1.29.0-preview-731-g1c3c201149"}


_CONFIGS = [(c[0], c[1], True, True) for c in footprint.CONFIGS
            if c[0] in ("pub", "tls", "umqtt_simple", "mqtt_async")]


def _report(rows, m32):
    ok = {"code": 1024, "total": 2048}
    for r in rows.values():
        r.setdefault("mpy", dict(ok))
        r.setdefault("wasm", dict(ok))
    return footprint.report(rows, _CONFIGS, {"error": "not run"}, 20, {}, None, True, m32)[
        "markdown"]


def test_report_renders_the_32bit_unix_column_with_its_smallest_heap():
    kb = 1024
    rows = {"pub": {"m32": {"code": 29 * kb, "total": 34 * kb, "minheap": 47}},
            "tls": {"m32": {"na": "built without ssl (MICROPY_PY_SSL=0)"}},
            "umqtt_simple": {"m32": {"code": 4 * kb, "total": 5 * kb, "minheap": 14}},
            "mqtt_async": {"m32": {"code": 16 * kb, "total": 19 * kb, "minheap": 30}}}
    md = _report(rows, {"exe": "x", "micropython": "v1.29"}).splitlines()
    head = [x for x in md if x.startswith("| configuration | .mpy")][0].split(" | ")
    i = head.index("32-bit unix (.mpy): code")
    assert head[i + 1:i + 4] == ["after connect", "smallest heap",
                                 "32-bit WebAssembly (.mpy): code"], head
    cells = {}
    for x in md:  # the first table's rows (the one without a pool step has the same labels)
        if x.startswith("| "):
            cells.setdefault(x.split(" | ")[0][2:], x.split(" | "))
    pub = cells[_CONFIGS[0][1]]
    assert pub[i:i + 3] == ["29.0 KB", "34.0 KB", "47k"], pub
    assert cells[_CONFIGS[1][1]][i:i + 3] == ["n/a", "n/a", "-"], cells
    note = [x for x in md if x.startswith("- 32-bit unix:")]
    assert note and "MicroPython v1.29 built with gcc -m32" in note[0], md
    assert "holdfast publish-only 47k, umqtt.simple 14k, mqtt_async 30k" in note[0], note
    target = [x for x in md if x.startswith("| 32-bit .mpy publish-only")][0]
    assert "19.0 KB on the 32-bit unix port, this run" in target, target


def test_report_without_the_32bit_unix_build_says_so():
    md = _report({"pub": {}, "tls": {},
                  "umqtt_simple": {}, "mqtt_async": {}}, None)
    assert "32-bit unix (.mpy)" not in md
    assert "- 32-bit unix: not measured in this run (`make firmware32 MPY_DIR=" in md, md


def test_32bit_unix_port_holds_less_than_the_64bit_one(tmp_path, mosquitto):
    """The bench's own runs (Runner.unix and Runner.smallest) of the
    publish-only client on both unix ports, against mosquitto."""
    if footprint.m32_build() is None:
        pytest.skip("the 32-bit unix build is absent (%s/micropython: make firmware32 "
                    "MPY_DIR=<MicroPython source> builds it)" % os.path.relpath(footprint.M32,
                                                                                ROOT))
    ctx = types.SimpleNamespace(build=str(tmp_path), root=ROOT, log=lambda *a: None)
    r = footprint.Runner(ctx, 5, peers=())
    ports = (mosquitto.port, 0)
    got = {}
    try:
        for mode in ("mpy", "m32"):
            res, ok, last, took = r.unix("pub", ports, mode)
            assert ok and res, (mode, last)
            got[mode] = res["total"], r.smallest("pub", ports, took, mode)
    finally:
        shutil.rmtree(r.tmp, ignore_errors=True)
    (held64, heap64), (held32, heap32) = got["mpy"], got["m32"]
    # Pointers and GC blocks half the size (bytecode is the same): the 32-bit
    # port holds about three quarters of what the 64-bit one does (34 against
    # 45 KB at 5a5d07c), and needs a smaller heap.
    assert held32 < 0.85 * held64, got
    assert heap64 is not None and heap32 is not None and heap32 < heap64, got


class _Log:
    def __init__(self, build):
        self.build = build
        self.lines = []

    def log(self, line):
        self.lines.append(line)


def test_mallocstat_counts_what_a_process_holds_through_malloc(tmp_path):
    # The counter the TLS note reads mbedtls's heap with: a child holding
    # 8 MB through malloc reads at least that, live and peak, when signalled.
    import signal
    import sys
    os.makedirs(str(tmp_path / "footprint"))
    ctx = _Log(str(tmp_path))
    shim = footprint.mallocstat(ctx)
    if shim is None:
        pytest.skip("no C compiler here to build tools/bench/mallocstat.c: %s" % ctx.lines)
    child = ("import sys\nb = bytearray(8 << 20)\nprint('MARK', flush=True)\nsys.stdin.readline()\n"
             "del b\nprint('DONE', flush=True)\nsys.stdin.readline()\n")
    p = subprocess.Popen([sys.executable, "-c", child], env=dict(os.environ, LD_PRELOAD=shim),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        readings = []
        for mark in ("MARK", "DONE"):
            assert p.stdout.readline().strip() == mark
            p.send_signal(signal.SIGUSR1)
            got = p.stderr.readline().split()
            assert got[0] == "MALLOC", got
            readings.append({k: int(v) for k, v in (x.split("=") for x in got[1:])})
            p.stdin.write("\n")
            p.stdin.flush()
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
    held, freed = readings
    assert held["live"] >= 8 << 20 and held["peak"] >= held["live"], held
    assert held["live"] - freed["live"] >= 8 << 20 and freed["peak"] >= held["live"], readings


def test_the_tls_note_gives_the_c_library_heap_or_says_why_not():
    line = footprint._libc_line({"tls": {"live": 24371, "peak": 30515},
                                 "umqtt_simple_tls": {"live": 24371, "peak": 30412}})
    assert "holdfast 23.8 KB after connect, 29.8 KB at the peak" in line, line
    assert "umqtt.simple 23.8 KB after connect, 29.7 KB at the peak" in line, line
    assert "mallocstat.c" in line
    assert footprint._libc_line({}).startswith("not measured in this run")


def test_every_library_is_compiled_with_its_module_names(tmp_path):
    # holdfast and the peers alike, as make deploy compiles for a board: the
    # .mpy's source name is the module's name, which importing interns anyway.
    from bench import mpy
    from test_deploy import mpy_source_name
    peer = tmp_path / "peer"
    (peer / "umqtt").mkdir(parents=True)
    (peer / "umqtt" / "simple.py").write_text("x = 1\n")
    (peer / "mqtt_async.py").write_text("x = 1\n")
    out = {}
    for src, files in ((os.path.join(ROOT, "firmware"), footprint._library(ROOT)),
                       (str(peer), ["umqtt/simple.py", "mqtt_async.py"])):
        d = mpy.compile_tree(src, str(tmp_path / "mpy" / os.path.basename(src)), files)
        for f in files:
            with open(os.path.join(d, f[:-3] + ".mpy"), "rb") as fh:
                out[f] = mpy_source_name(fh.read())
    assert out["holdfast/codec.py"] == "holdfast.codec"
    assert out["holdfast/__init__.py"] == "holdfast"
    assert out["umqtt/simple.py"] == "umqtt.simple"
    assert out["mqtt_async.py"] == "mqtt_async"
