# `make firmware`: the unix port with holdfast frozen in (firmware/manifest.py),
# and with it the footprint probe and the peers it compares holdfast with
# (fetched by the recipe into build/peers/), so the bench's "frozen" column
# measures every client the same way. Paths are relative to this file.
include("../../../firmware/manifest.py")

module("footprint.py")
module("lib_umqtt_simple.py")
module("lib_mqtt_async.py")
module("cpy_fix.py", base_path="shim")
package("umqtt", base_path="../../../build/peers/lib/umqtt_simple")
module("mqtt_async.py", base_path="../../../build/peers/lib/mqtt_async")
