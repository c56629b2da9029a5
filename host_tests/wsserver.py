# A scripted MQTT-over-WebSocket server for the hostile cases of
# test_ws.py: what no real broker can be made to do (a bad status, a wrong
# accept key, a text or masked frame, a ping between every byte, a close in
# the middle of a packet...). The request path names the case; the first
# connection of a case misbehaves, every later one is a plain, correct
# broker, so a client's reconnect shows whether what its outbox accepted
# arrives. Its own framing and its own small MQTT side (modelbroker.py's
# codec): it shares no code with the firmware.
import base64
import hashlib
import os
import socket
import struct
import threading

from modelbroker import (CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP, SUBSCRIBE,
                         SUBACK, PINGREQ, PINGRESP, DISCONNECT, _packet, enc_ack, split)

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def frame(op, data, fin=True, rsv=0, mask=False, length_form=None):
    """A server frame; length_form 127 forces the 8-byte length field."""
    b0 = (0x80 if fin else 0) | rsv | op
    n = len(data)
    m = 0x80 if mask else 0
    if length_form == 127 or n > 65535:
        head = bytes([b0, m | 127]) + struct.pack(">Q", n)
    elif n >= 126:
        head = bytes([b0, m | 126]) + struct.pack(">H", n)
    else:
        head = bytes([b0, m | n])
    if mask:
        key = os.urandom(4)
        data = bytes(c ^ key[i % 4] for i, c in enumerate(data))
        head += key
    return head + data


class Conn:
    def __init__(self, server, sock, case, nth):
        self.server = server
        self.sock = sock
        self.case = case
        self.nth = nth  # 1: the first connection of this case
        self.buf = b""  # raw bytes from the client
        self.stream = b""  # unmasked MQTT bytes
        self.pubs = 0  # PUBLISH packets on this connection

    # -- reading the client's frames, checking them as a server must ----------

    def _need(self, n):
        while len(self.buf) < n:
            d = self.sock.recv(65536)
            if not d:
                raise EOFError
            self.buf += d

    def read_frame(self):
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        n = b1 & 0x7F
        i = 2
        if n == 126:
            self._need(4)
            n = struct.unpack(">H", self.buf[2:4])[0]
            i = 4
        elif n == 127:
            self._need(10)
            n = struct.unpack(">Q", self.buf[2:10])[0]
            i = 10
        rec = self.server.record
        if not b1 & 0x80:
            rec["unmasked"] += 1
            self._need(i + n)
            key, data = None, self.buf[i:i + n]
            i += n
        else:
            self._need(i + 4 + n)
            key = self.buf[i:i + 4]
            data = bytes(c ^ key[k % 4] for k, c in enumerate(self.buf[i + 4:i + 4 + n]))
            i += 4 + n
            rec["keys"].append(key)
        self.buf = self.buf[i:]
        op = b0 & 0x0F
        rec["ops"].append(op)
        return op, data

    def packets(self):
        """The next complete MQTT packets from the client, answering its
        control frames (recording pongs and closes)."""
        while True:
            pk, used = split(self.stream)
            if pk:
                self.stream = self.stream[used:]
                return pk
            op, data = self.read_frame()
            if op == 2 or op == 0:
                self.stream += data
            elif op == 10:
                self.server.record["pongs"].append(data)
            elif op == 8:
                self.server.record["closes"].append(data)
                raise EOFError
            else:
                self.server.record["bad_ops"].append(op)

    # -- writing, in the case's framing on a first connection ----------------

    def send(self, data):
        c = self.case if self.nth == 1 else "plain"
        if c == "pingbytes":  # a ping before every byte
            out = b""
            for k, b in enumerate(data):
                out += frame(9, b"p%d" % k) + frame(2, bytes([b]))
            self.sock.sendall(out)
        elif c == "onebyte":  # one message in one-byte fragments
            out = b""
            for k, b in enumerate(data):
                out += frame(2 if k == 0 else 0, bytes([b]), fin=k == len(data) - 1)
            self.sock.sendall(out)
        elif c == "long64":
            self.sock.sendall(frame(2, data, length_form=127))
        elif c in self.server.BAD:
            self.sock.sendall(self.server.BAD[c](data))
        else:
            self.sock.sendall(frame(2, data))

    def run(self):
        rec = self.server.record
        pending = []  # acknowledgements held back to go out together ("multi")
        while True:
            for t, flags, body in self.packets():
                if t == CONNECT:
                    self.send(_packet(CONNACK, 0, b"\x00\x00"))
                elif t == PUBLISH:
                    qos = flags >> 1 & 3
                    n = body[0] << 8 | body[1]
                    topic = body[2:2 + n]
                    pid = body[2 + n] << 8 | body[3 + n] if qos else 0
                    payload = body[2 + n + (2 if qos else 0):]
                    rec["published"].append((self.case, self.nth, topic.decode(), payload.decode(), qos))
                    self.pubs += 1
                    ack = enc_ack(PUBACK if qos == 1 else PUBREC, pid) if qos else b""
                    if self.nth == 1 and self.case == "closemid" and self.pubs == 2:
                        # Half a PUBACK, then a close frame: the link is lost mid-packet.
                        self.sock.sendall(frame(2, ack[:2]) + frame(8, b"\x03\xe9going away"))
                        raise EOFError
                    if self.nth == 1 and self.case == "multi" and ack:
                        pending.append(ack)
                        if len(pending) == 3:  # three acknowledgements in one frame
                            self.send(b"".join(pending))
                            pending = []
                    elif ack:
                        self.send(ack)
                elif t == PUBREL:
                    self.send(enc_ack(PUBCOMP, body[0] << 8 | body[1]))
                elif t == SUBSCRIBE:
                    self.send(_packet(SUBACK, 0, body[:2] + b"\x01"))
                elif t == PINGREQ:
                    self.send(_packet(PINGRESP, 0, b""))
                elif t == DISCONNECT:
                    raise EOFError


class WSServer:
    """Listens on a free loopback port; record: what the clients did."""

    # Cases whose frames break RFC 6455 (each on the CONNACK).
    BAD = {
        "text": lambda d: frame(1, d),
        "masked": lambda d: frame(2, d, mask=True),
        "reserved": lambda d: frame(2, d, rsv=0x40),
        "overlong": lambda d: bytes([0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, len(d)]) + d,
        "fragping": lambda d: frame(9, b"x", fin=False) + frame(2, d),
        "orphan": lambda d: frame(0, d),
        "bigping": lambda d: bytes([0x89, 126, 0, 200]) + b"x" * 200,
    }

    def __init__(self):
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.counts = {}
        self.record = {"published": [], "pongs": [], "closes": [], "keys": [], "ops": [],
                       "unmasked": 0, "bad_ops": [], "requests": []}
        self.lock = threading.Lock()
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.stopped = True
        self.lsock.close()

    def _accept(self):
        while not self.stopped:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _serve(self, s):
        try:
            req = b""
            while b"\r\n\r\n" not in req:
                d = s.recv(4096)
                if not d:
                    return
                req += d
            head, rest = req.split(b"\r\n\r\n", 1)
            lines = head.decode("latin1").split("\r\n")
            path = lines[0].split()[1]
            fields = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                fields[k.strip().lower()] = v.strip()
            case = path.strip("/")
            with self.lock:
                nth = self.counts[case] = self.counts.get(case, 0) + 1
                self.record["requests"].append((case, nth, lines[0], fields))
            accept = base64.b64encode(hashlib.sha1(fields.get("sec-websocket-key", "").encode() + GUID)
                                      .digest()).decode()
            first = nth == 1
            good = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Accept: %s\r\n" % accept)
            if first and case == "status401":
                s.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
                return
            if first and case == "status200":
                s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nhi")
                return
            if first and case == "redirect":
                s.sendall(b"HTTP/1.1 301 Moved Permanently\r\nLocation: ws://elsewhere.example/mqtt\r\n\r\n")
                return
            if first and case == "badaccept":
                good = good.replace(accept, base64.b64encode(b"0" * 20).decode())
            if first and case == "wrongproto":
                good += "Sec-WebSocket-Protocol: mqttv3.1\r\n"
            elif not (first and case == "noproto"):
                good += "Sec-WebSocket-Protocol: mqtt\r\n"
            if first and case == "silent":
                s.recv(1)  # never answers: the client's bound ends it
                return
            s.sendall((good + "\r\n").encode())
            c = Conn(self, s, case, nth)
            c.buf = rest
            c.run()
        except (EOFError, OSError):
            pass
        finally:
            s.close()
