"""The footprint bench's own logic (tools/bench/footprint.py and its probe
mp/footprint.py): the object walk under MicroPython, the targets table, and
the optional frozen and 32-bit unix columns, which measure unix ports the
user built from MicroPython's source and gives by path (FROZEN_UNIX=,
UNIX32=, as make bench and make test take them; the tests that run them
skip, saying so, without one)."""

import json
import os
import shutil
import subprocess
import types

import pytest

from bench import footprint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(ROOT, "tools", "bench", "mp")
MICROPYTHON = os.path.join(ROOT, ".venv", "bin", "micropython")
FROZEN_UNIX = os.environ.get("FROZEN_UNIX") or None
UNIX32 = os.environ.get("UNIX32") or None
NO_FROZEN = ("no frozen unix port given (FROZEN_UNIX=path: MicroPython's unix port built with "
             "tools/bench/mp/manifest.py frozen in, docs/footprint.md)")
NO_UNIX32 = ("no 32-bit unix port given (UNIX32=path: MicroPython's unix port built with "
             "gcc -m32, docs/footprint.md)")

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


# Recorded from the probe (publish-only, .mpy copied, unix port): run by
# fp_pad with 640 names interned first, the pool count is the same before
# the import and after connect; with 100, the fifth pool comes inside.
_PADDED = """\
qstr pool: n_pool=6, n_qstr=733, n_str_data_bytes=5249, n_total_bytes=19489
RESULT {"code": 25472, "total": 30496, "mpy": 16804}
COUNTS {"classes": 6, "exceptions": 1, "names": 83, "methods": 73, "modules": 7, "functions": 32}
qstr pool: n_pool=6, n_qstr=944, n_str_data_bytes=7426, n_total_bytes=21666
FOOTPRINT OK
"""
_STEPPED = """\
qstr pool: n_pool=4, n_qstr=193, n_str_data_bytes=1469, n_total_bytes=5021
RESULT {"code": 29056, "total": 33888, "mpy": 16804}
COUNTS {"classes": 6, "exceptions": 1, "names": 83, "methods": 73, "modules": 7, "functions": 32}
qstr pool: n_pool=5, n_qstr=404, n_str_data_bytes=3646, n_total_bytes=10782
FOOTPRINT OK
"""


def test_parse_tells_a_window_without_a_pool_step_from_one_with():
    r = footprint.parse(_PADDED)
    assert r["total"] == 30496 and r["counts"]["interned"] == 211, r
    assert r["counts"]["step"] is False and r["counts"]["pools"] == 6, r
    r = footprint.parse(_STEPPED)
    assert r["total"] == 33888 and r["counts"]["step"] is True, r


def _probe(*outs):
    """A run_ for Runner.no_pool_step that answers with the recorded outputs
    in turn, and the names padded it was asked for."""
    asked = []

    def run_(pad):
        asked.append(pad)
        out = outs[len(asked) - 1]
        return footprint.parse(out), "FOOTPRINT OK" in out, out.strip().splitlines()[-1], 0.1
    return run_, asked


def test_no_pool_step_pads_past_the_boundary_or_gives_no_figure():
    run_, asked = _probe(_STEPPED, _PADDED)
    got = footprint.Runner.no_pool_step(None, run_)
    # The step seen: once more with the 211 names the window interned on top.
    assert asked == [footprint.PAD, footprint.PAD + 211], asked
    assert got == {"code": 25472, "total": 30496, "pad": footprint.PAD + 211}, got
    run_, asked = _probe(_STEPPED, _STEPPED)
    got = footprint.Runner.no_pool_step(None, run_)
    assert got == {"step": footprint.PAD + 422} and len(asked) == 2, got
    assert "not pool-free" in footprint._nopool_cell({"total": 1, "nopool": got})
    assert footprint._nopool({"total": 1, "nopool": got}) is None
    # Without the qstr_info() lines there is nothing to check the window by.
    run_, _ = _probe("RESULT {\"code\": 1, \"total\": 2, \"mpy\": 3}\nFOOTPRINT OK\n")
    assert "qstr_info" in footprint.Runner.no_pool_step(None, run_)["error"]


def test_report_gives_both_readings_and_judges_the_measured_one():
    kb = 1024
    rows = {"pub": {"mpy": {"code": 27 * kb, "total": 31 * kb, "nopool": {"total": 29 * kb}},
                    "rom": {"code": 12 * kb, "total": 17 * kb, "nopool": {"total": 15 * kb}},
                    "wasm": {"code": 21 * kb, "total": 25 * kb, "nopool": {"step": 851}}},
            "tls": {"mpy": {"code": 27 * kb, "total": 39 * kb, "nopool": {"total": 33 * kb}}},
            "umqtt_simple": {"mpy": {"code": 6 * kb, "total": 7 * kb, "nopool": {"total": 7 * kb}}},
            "mqtt_async": {"mpy": {"code": 23 * kb, "total": 28 * kb, "nopool": {"total": 26 * kb}},
                           "wasm": {"code": 16 * kb, "total": 18 * kb,
                                    "nopool": {"total": 18 * kb}}}}
    out = footprint.report(rows, _CONFIGS, {"error": "not run"}, 20, {}, None, True, None)
    md = out["markdown"].splitlines()
    head = [x for x in md if "no pool step |" in x][0].split(" | ")
    assert head[1:3] == [".mpy copied: after connect, no pool step",
                         "ROMFS in place: after connect, no pool step"], head
    pub = [x for x in md if x.startswith("| %s | " % _CONFIGS[0][1]) and "not pool-free" in x]
    assert pub and pub[0].split(" | ")[1:3] == ["29.0 KB", "15.0 KB"], pub
    line = [x for x in md if x.startswith("Without a pool step")][0]
    assert ("publish-only .mpy 31.0 KB (1.11), no pool step 29.0 KB (1.12 to <= 26.0 KB"
            in line), line
    assert "ROMFS 17.0 KB (1.06), no pool step 15.0 KB (0.94)" in line, line
    assert "32-bit 25.0 KB (1.39), no pool step not measured (-" in line, line
    assert "TLS over plain 8.0 KB (1.60), no pool step 4.0 KB (0.80)" in line, line
    # PASS/MISS stays the measured figures': TLS over plain misses at 8 KB.
    tls = [t for t in out["targets"] if t["name"].startswith("TLS over plain")][0]
    assert tls["pass"] is False and tls["value"] == "8.0 KB", tls


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
    assert frozen["passed"] is None and "no FROZEN_UNIX=path given" in frozen["value"], frozen
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
    assert "no frozen unix port given (make bench FROZEN_UNIX=path" in left[0], left
    assert "the frozen column is left out" in left[0], left
    assert "no 32-bit unix port given (make bench UNIX32=path" in left[1], left
    assert "32-bit unix column is left out" in left[1], left
    modes, left = footprint.modes_of(None, {"exe": "x", "micropython": "v1"})
    assert [m for m, _ in modes] == ["mpy", "rom", "m32", "wasm"] and len(left) == 1, (modes, left)


def test_the_bench_takes_the_binaries_by_path_from_its_options_or_the_environment(monkeypatch):
    import bench.__main__ as bm
    seen = {}

    def run(ctx):
        seen["frozen"] = footprint.given(ctx, "frozen_unix")
        seen["m32"] = footprint.given(ctx, "unix32")
        return {"markdown": ""}
    monkeypatch.setattr(footprint, "run", run)
    monkeypatch.setenv("FROZEN_UNIX", "/from/env/frozen")
    monkeypatch.delenv("UNIX32", raising=False)
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), "hf-bench-args")
    assert bm.main(["--only", "footprint", "--out", out]) == 0
    assert seen == {"frozen": "/from/env/frozen", "m32": None}, seen
    assert bm.main(["--only", "footprint", "--out", out, "--frozen-unix", "/a", "--unix32", "/b"]) == 0
    assert seen == {"frozen": "/a", "m32": "/b"}, seen
    shutil.rmtree(out, ignore_errors=True)


def test_a_binary_that_is_not_the_one_asked_for_is_refused_in_words(tmp_path):
    assert footprint.m32_build(None) is None and footprint.frozen_build(None, ROOT) is None
    e = pytest.raises(ValueError, footprint.m32_build, str(tmp_path / "none")).value
    assert "UNIX32=%s: no executable file there" % (tmp_path / "none") in str(e)
    sh = tmp_path / "sh"
    sh.write_text("#!/bin/sh\necho hello\n")
    sh.chmod(0o755)
    e = pytest.raises(ValueError, footprint.m32_build, str(sh)).value
    assert "not a MicroPython unix port (it answered 'hello')" in str(e), e
    # The 64-bit unix port of make setup: neither 32-bit nor with the probe frozen in.
    e = pytest.raises(ValueError, footprint.m32_build, MICROPYTHON).value
    assert "a 64-bit MicroPython, not one built with gcc -m32" in str(e), e
    e = pytest.raises(ValueError, footprint.frozen_build, MICROPYTHON, ROOT).value
    assert "no footprint probe frozen in it" in str(e) and "tools/bench/mp/manifest.py" in str(e), e


def test_a_frozen_build_of_another_tree_is_flagged_stale(tmp_path):
    if FROZEN_UNIX is None:
        pytest.skip(NO_FROZEN)
    info = footprint.frozen_build(FROZEN_UNIX, ROOT)
    assert info["bits"] == 64 and "MicroPython" not in info["micropython"], info
    # A tree with one module more and one less than the binary froze.
    lib = tmp_path / "firmware" / "holdfast"
    shutil.copytree(os.path.join(ROOT, "firmware", "holdfast"), str(lib))
    (lib / "codec.py").unlink()
    (lib / "extra.py").write_text("")
    stale = footprint.frozen_build(FROZEN_UNIX, str(tmp_path))["stale"]
    assert "only frozen: holdfast/codec; not frozen: holdfast/extra" in stale, stale
    if info["stale"]:
        pytest.fail("FROZEN_UNIX=%s was not built from this tree: %s" % (FROZEN_UNIX, info["stale"]))


def test_the_objects_a_frozen_build_makes_are_compared_with_the_mpy_ones():
    counts = {"modules": 9, "functions": 40, "methods": 90, "classes": 8, "exceptions": 6,
              "names": 300}
    rows = {"pub": {"mpy": {"counts": dict(counts)}, "frozen": {"counts": dict(counts)}},
            "mqtt_async": {"mpy": {"counts": dict(counts)}, "frozen": {"counts": {}}}}
    configs = [(c, "", True, True) for c in ("pub", "mqtt_async")]
    assert footprint.stale_objects(rows, configs) == ""
    rows["pub"]["frozen"]["counts"]["functions"] = 41
    assert footprint.stale_objects(rows, configs) == (
        "pub creates other objects frozen than from firmware/holdfast (functions 41 against 40)")


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
    md = _report(rows, {"exe": "x", "micropython": "v1.29", "ssl": False}).splitlines()
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
    assert "- 32-bit unix: not measured in this run (no UNIX32=path" in md, md
    assert "- frozen: not measured in this run (no FROZEN_UNIX=path" in md, md


def _bench_runs(tmp_path, mosquitto, modes, one, **given):
    """{mode: one(runner, ports, mode)}: the bench's own Runner, with the
    binaries given (frozen=, m32=), against mosquitto."""
    ctx = types.SimpleNamespace(build=str(tmp_path), root=ROOT, log=lambda *a: None)
    r = footprint.Runner(ctx, 5, peers=(), **given)
    try:
        return {mode: one(r, (mosquitto.port, 0), mode) for mode in modes}
    finally:
        shutil.rmtree(r.tmp, ignore_errors=True)


def test_32bit_unix_port_holds_less_than_the_64bit_one(tmp_path, mosquitto):
    """The bench's own runs (Runner.unix and Runner.smallest) of the
    publish-only client on both unix ports, against mosquitto."""
    if UNIX32 is None:
        pytest.skip(NO_UNIX32)

    def one(r, ports, mode):
        res, ok, last, took = r.unix("pub", ports, mode)
        assert ok and res, (mode, last)
        # Held without a pool step: where a pool boundary falls differs
        # between the ports (the probe's names and the client's are the
        # same, the pools' start is not), and one step is 1.7-3.5 KB.
        free = r.no_pool_step(lambda pad: r.unix("pub", ports, mode, pad=pad))
        assert "total" in free, (mode, free)
        return free["total"], r.smallest("pub", ports, took, mode)
    got = _bench_runs(tmp_path, mosquitto, ("mpy", "m32"), one, m32=UNIX32)
    (held64, heap64), (held32, heap32) = got["mpy"], got["m32"]
    # Pointers and GC blocks half the size (bytecode is the same): the 32-bit
    # port holds about three quarters of what the 64-bit one does (34 against
    # 45 KB at 5a5d07c), and needs a smaller heap.
    assert held32 < 0.85 * held64, got
    assert heap64 is not None and heap32 is not None and heap32 < heap64, got


def test_frozen_unix_port_holds_less_than_the_mpy_one(tmp_path, mosquitto):
    """The bench's own runs (Runner.unix) of the publish-only client frozen
    in the binary given and from .mpy, against mosquitto, and the object
    counts of both: the same library makes the same objects."""
    if FROZEN_UNIX is None:
        pytest.skip(NO_FROZEN)

    def one(r, ports, mode):
        res, ok, last, _ = r.unix("pub", ports, mode)
        assert ok and res and "counts" in res, (mode, last)
        return res
    got = _bench_runs(tmp_path, mosquitto, ("mpy", "frozen"), one, frozen=FROZEN_UNIX)
    # Frozen, the bytecode, constants and names stay in the binary: well under
    # half of what the .mpy copied holds (13.8 against 32.8 KB at 4285950).
    assert got["frozen"]["total"] < 0.6 * got["mpy"]["total"], got
    assert got["frozen"]["code"] < 0.5 * got["mpy"]["code"], got
    rows = {"pub": {m: got[m] for m in got}}
    assert footprint.stale_objects(rows, [("pub", "", True, True)]) == "", got


def test_padded_runs_intern_the_names_first_and_see_no_pool_step(tmp_path, mosquitto):
    """The bench's own padded runs (fp_pad) of the publish-only client, .mpy
    copied and ROMFS in place, against mosquitto."""
    ctx = types.SimpleNamespace(build=str(tmp_path), root=ROOT, log=lambda *a: None)
    r = footprint.Runner(ctx, 2, peers=())
    ports = (mosquitto.port, 0)
    try:
        res, ok, last, _ = r.unix("pub", ports, "mpy", pad=footprint.PAD)
        assert ok and res, last
        c = res["counts"]
        # The names padded are in before the first qstr_info() line.
        assert c["qstrs"] - c["interned"] >= footprint.PAD and c["step"] is False, c
        got = r.no_pool_step(lambda pad: r.unix("pub", ports, "rom", pad=pad))
        plain, ok, last, _ = r.unix("pub", ports, "rom")
        assert ok, last
    finally:
        shutil.rmtree(r.tmp, ignore_errors=True)
    # Without a pool step the same client holds what it held measured, less
    # the pools allocated in that window (at most the fourth and fifth, 5.3 KB,
    # and the chunks that hold their names' strings).
    assert "total" in got and plain["total"] - 6000 <= got["total"] <= plain["total"] + 256, (
        got, plain)


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
    # The 8 MB freed, less what the interpreter allocated between the two
    # readings (the line read from stdin, the print: a few KB, seen 4 KB).
    assert held["live"] - freed["live"] >= (8 << 20) - (64 << 10) and freed["peak"] >= held["live"], readings


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
