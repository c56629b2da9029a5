"""The footprint bench's own logic (tools/bench/footprint.py and its probe
mp/footprint.py): the object walk under MicroPython, and the targets table."""

import json
import os
import subprocess

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
              "import fp_sample\nfootprint.count_objects(b)\n")
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
