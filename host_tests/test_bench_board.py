# The bench's board section: the app's smallest heap per way of loading the
# code and per port, bisected; the target is the 64-bit .mpy figure. The
# emulated runs are replaced by thresholds here (make bench runs them).
import bench.board as bb


class Ctx:
    quick = True
    args = None  # no UNIX32 given: m32_build is faked below

    def log(self, *a):
        pass


def _fake(monkeypatch, need, m32):
    def runs_in(kb, broker, n, romfs=False, exe=None, tag="", timeout=90):
        return kb >= need[(romfs, exe is not None)]
    monkeypatch.setattr(bb, "_runs_in", runs_in)
    monkeypatch.setattr(bb, "m32_build", lambda exe: m32)


def test_each_way_of_loading_is_bisected_and_the_target_is_the_mpy_one(monkeypatch):
    _fake(monkeypatch, {(False, False): 85, (True, False): 50, (False, True): 61, (True, True): 29},
          {"exe": "/x/unix32/micropython", "micropython": "v9"})
    res = bb.run(Ctx())
    assert res["data"]["app_heaps"] == {".mpy files, 64-bit": 88, "ROMFS image, 64-bit": 52,
                                        ".mpy files, 32-bit": 64, "ROMFS image, 32-bit": 32}
    md = res["markdown"]
    assert "| .mpy files (`make deploy`) | 88 KB | 64 KB |" in md, md
    assert "| ROMFS image (`make deploy ROMFS=1`) | 52 KB | 32 KB |" in md, md
    (t,) = res["targets"]
    assert t["value"] == "88 KB" and t["goal"] == "<= 56 KB" and not t["pass"]


def test_without_the_32bit_build_its_column_says_how_to_build_it(monkeypatch):
    _fake(monkeypatch, {(False, False): 40, (True, False): 200}, None)
    res = bb.run(Ctx())
    md = res["markdown"]
    assert "| ROMFS image (`make deploy ROMFS=1`) | not in 160 KB | - |" in md, md
    assert "given by path (`make bench UNIX32=path`; docs/footprint.md)" in md
    assert res["targets"][0]["value"] == "40 KB" and res["targets"][0]["pass"]
