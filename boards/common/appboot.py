# What the app (app.py) runs once per boot: the config, the watchdog, the
# outbox and the sequence state, the client. app.main loads it and unloads it
# once it has run, so its code does not stay on the heap. What it needs of
# app (the Seq class, unload, the command callback) comes as arguments: it
# imports nothing from app. It prints its lines as appconfig does, with
# app.log's prefix.
import gc
import json
import sys

STATE = "hfstate.json"  # boot counter and sequence bookkeeping
# The config keys app.main's loop and board.network() (wifi.up) read: the
# rest is dropped after the boot.
LOOP_KEYS = ("qos", "expiry_s", "interval_ms", "command_min_ms", "clean_session", "wifi", "ntp")


def seq(Seq, store, qos, path=STATE):
    """This boot's Seq (app.Seq), from the state file the last boot left (see Seq)."""
    st = {}
    for p in (path, path + ".tmp"):  # .tmp: a rename the power cut stopped
        try:
            with open(p) as f:
                st = json.load(f)
            break
        except (OSError, ValueError):
            pass
    last = store.tail - 1
    hi = st.get("hi", 0)
    nxt = last + 1 + st.get("base", 0)
    if not (st.get("keyed") and last >= st.get("k", -1) and last >= 0) and hi > nxt:
        nxt = hi  # the last boot counted in RAM, or the outbox was wiped or empty
    q = Seq()
    q.store = store
    q.path = path
    q.keyed = qos > 0
    q.boot = st.get("b", 0) + 1
    q.base = nxt - store.tail
    q.next = nxt
    q.hi = nxt  # so take(), which consumes nothing, writes the state now with the next block
    q.take()
    return q


def open_outbox(cfg):
    try:
        from holdfast.durable import FileStore
    except ImportError as e:  # the library without the flash outbox: RAM only
        from holdfast.memstore import MemoryStore
        print("holdfast: no flash outbox (%s): outbox in RAM, readings do not survive a reboot" % e)
        return MemoryStore(4096, 32)
    return FileStore(cfg["outbox_dir"], 4096, cfg["outbox_slots"], group=cfg["outbox_group"])


def sensor(board, cfg):
    """A function returning the temperature (float), or raising."""
    i = cfg["i2c"]
    if i.get("driver"):
        drv = __import__(i["driver"])
        bus = board.i2c(i)
        return lambda: drv.read(bus)
    return board.temperature


def start(board, Seq, unload, on_cmd, size):
    """(config (the keys the loop reads), watchdog, client, seq, sensor
    function, device, telemetry topic, command topic or None), with app's Seq, unload, on_cmd (the
    client's callback) and size (its buffers). Until there is a valid config
    it waits (appconfig.wait)."""
    import appconfig  # checked, then dropped: its code is not needed any more

    cfg = appconfig.wait(board)
    unload(appconfig)
    del appconfig
    m = sys.modules.get("appcmd")  # loaded by appconfig for the interval rule
    if m:
        unload(m)
    gc.collect()
    board.init(cfg)  # may clamp wdt_ms to what the hardware allows
    wdt = board.watchdog(cfg["wdt_ms"])
    dev = cfg["device"] or board.NAME + "-" + board.unique_id()
    topic = "%s/%s/telemetry" % (cfg["prefix"], dev)
    # The client's code before the state: made after all the code, the
    # buffers find room among the holes that loading code leaves, and the
    # outbox's recovery code, dropped once it has opened, leaves more (with
    # the outbox opened first the app needed a 4 KB larger heap).
    from holdfast import MQTTClient

    gc.collect()
    store = open_outbox(cfg)
    q = seq(Seq, store, cfg["qos"])
    gc.collect()
    ssl_params = None
    if cfg["tls"] and cfg["ca"]:
        with open(cfg["ca"], "rb") as f:
            ca = f.read()
        ssl_params = {"cadata": ca}
    client = MQTTClient(dev, cfg["broker"], cfg["port"], cfg["user"] or None,
                        cfg["password"] or None, cfg["keepalive"], cfg["tls"], ssl_params,
                        size=size, outbox=store, timeout_ms=min(5000, cfg["wdt_ms"] // 3),
                        when_full=cfg["when_full"])
    cmd = None  # the command topic, until subscribed
    if cfg["commands"]:
        cmd = "%s/%s/cmd" % (cfg["prefix"], dev)
        client.set_callback(on_cmd)
    print("holdfast: device %s boot %d next s=%d qos %d, %d pending in the outbox" % (
        dev, q.boot, q.next, cfg["qos"], len(store)))
    board.network(cfg)
    read = sensor(board, cfg)
    # What the loop reads (and board.network(), every turn): the rest of the
    # config, its strings and its larger table, leaves the heap with the boot.
    cfg = {k: cfg[k] for k in LOOP_KEYS}
    return cfg, wdt, client, q, read, dev, topic, cmd
