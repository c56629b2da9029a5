# micropython-mqtt from PyPI (mqtt_async.py, an asyncio fork of mqtt_as).
# QoS 1 publish(sync=True) waits for the PUBACK. Needs shim/cpy_fix.py on the
# unix port (no network.WLAN, no machine.unique_id).
ASYNC = True
PIPELINED = False
M = None


def load():
    global M
    import mqtt_async as M


class Client:
    def __init__(self, host, port, cid, opts):
        cfg = M.MQTTConfig()
        cfg.server = host
        cfg.port = port
        cfg.client_id = cid
        self.c = M.MQTTClient(cfg)

    async def connect(self):
        await self.c.connect()

    def topic(self, b):
        return b

    def prepare(self, t0, t1, p):
        pass

    async def pub0(self, t, p):
        await self.c.publish(t, p, False, 0)

    async def pub1(self, t, p):
        await self.c.publish(t, p, False, 1)

    async def drain0(self):
        pass

    async def drain1(self):
        pass

    async def sync(self):
        await self.c.publish(b"bench/sync", b"", False, 1)

    async def close(self):
        await self.c.disconnect()
