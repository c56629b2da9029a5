# The FROZEN_MANIFEST of the unix port the bench's "frozen" column measures
# (make bench FROZEN_UNIX=path; docs/footprint.md says how to build it):
# holdfast (firmware/manifest.py), and with it the footprint probe and the
# peers it compares holdfast with (fetched into build/peers/ first by
# `PYTHONPATH=tools .venv/bin/python -m bench.peers umqtt_simple mqtt_async`),
# so the column measures every client the same way. Paths are relative to
# this file.
include("../../../firmware/manifest.py")

module("footprint.py")
module("lib_umqtt_simple.py")
module("lib_mqtt_async.py")
module("cpy_fix.py", base_path="shim")
package("umqtt", base_path="../../../build/peers/lib/umqtt_simple")
module("mqtt_async.py", base_path="../../../build/peers/lib/mqtt_async")
