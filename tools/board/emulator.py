"""An emulated board: the MicroPython unix port with its own flash, and its
REPL served on a loopback TCP port and on a pseudo-terminal (its "USB
serial") so the real mpremote can drive it.

    PYTHONPATH=tools python -m board.emulator FLASH_DIR [--port N] [--run] [--heap 256k]
                                              [--uid HEX] [--console FILE] [--port-file FILE]

    mpremote connect /dev/pts/M repl            # the path is printed at start; ctrl-] leaves
    mpremote connect socket://127.0.0.1:N resume exec "import os; print(os.listdir())"
    mpremote connect socket://127.0.0.1:N resume fs cp main.py :main.py

mpremote's `repl` needs the pseudo-terminal: its console waits on the
serial port's file descriptor, which a socket:// connection does not have.

What the board sees:

- its filesystem is FLASH_DIR: the directory is mounted at "/" (a VfsPosix),
  and the current directory is "/", as on a board after boot. "/lib" is on
  sys.path (MICROPYPATH points at FLASH_DIR/lib too, for the moment before
  the mount). Nothing outside FLASH_DIR is reachable through open()/os.*.
- the REPL is `micropython -i` on a pseudo-terminal in raw mode (no newline
  translation, so mpremote's raw REPL and raw-paste mode work byte for
  byte). ctrl-C interrupts running code as on a board (the emulator sends
  the board SIGINT while its code runs, else passes the key on: see
  _Bridge._interrupt). Outside the raw REPL
  the emulator turns the unix port's lone LF into CR LF, as a board's REPL
  writes it, so `mpremote repl` reads as on a board.
- `os.ilistdir` gives each file's size, as a board's filesystem does
  (`mpremote fs ls`).
- ctrl-D soft-resets it as it does a board: the unix port would exit, so the
  emulator starts a new one on the same flash, keeps the REPL socket (and
  the connected mpremote), prints "soft reboot", and, when the reset came
  from the raw REPL (mpremote without `resume`), enters the raw REPL again.
- with --run, /main.py (or main.mpy) is imported at start, as a board does
  at boot; ctrl-C from mpremote interrupts it and leaves the REPL.
- ROMFS: a board with a ROMFS partition mounts it at /rom at boot and puts
  /rom and /rom/lib at the end of sys.path; the emulated board's partition is
  the file romfs.img on its flash (what `make deploy ROMFS=1` writes), read
  into a bytes object first thing at boot and mounted with vfs.VfsRom, so its
  .mpy run in place as on a board. The image then sits on the heap, not in
  flash: the heap is made that much larger, and gc.mem_alloc() counts it.
- a factory "unique id": FLASH_DIR/unique_id is created once with 8 random
  bytes (hex) unless --uid gives one (then HOLDFAST_UID is set instead).

Power cut: SIGKILL this process. The micropython child is tied to it
(PR_SET_PDEATHSIG), so it dies at once too; whatever the board had written
to its files stays, as on flash. Start again on the same FLASH_DIR to
"power on". When the board's program ends by itself (sys.exit, or main
returns without --run's REPL), the emulator exits with its status.

Console output goes to stdout (or --console FILE, appended) and, while an
mpremote is connected, to it as well; what the board says in the raw REPL
(mpremote's protocol) goes to the client only.

Who may talk to it: the REPL runs any code it is given, so the TCP port takes
only mpremote from the user who started the emulator. A connection made by
another uid (Linux: looked up in /proc/net/tcp) is refused at once; one that
does not open as mpremote does (CR and ctrl-C, then ctrl-A for the raw REPL:
an HTTP request from a browser, a line typed with nc) is refused at its first
other byte, before anything reaches the board. A refusal is noted on the
console. A connection that passed replaces the current client (one at a
time). What the board writes to its flash is 0600 (umask 077: config.json
holds its passwords), the flash directory 0700.

The pseudo-terminal is served beside it, as a board's USB serial port is,
mode 0600 (the user's own, as a board's serial port is): while a program has
it open, it gets the board's output and its input goes to the board; while
none has, the output is not kept for it (as on a serial line).

From Python (tests, the fleet tool), `Emulator` runs this as a separate
process:

    with Emulator(flash_dir, run=True) as emu:
        emu.url         # socket://127.0.0.1:PORT
        emu.tty         # /dev/pts/M, for `mpremote connect /dev/pts/M repl`
        emu.wait_console("connected", timeout=10)
        emu.kill()      # power cut
        emu.start()     # power on, same flash and port
"""

import argparse
import ctypes
import errno
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
import tty

HOST = "127.0.0.1"
DEFAULT_HEAP = "256k"
HERE = os.path.dirname(os.path.abspath(__file__))
_PR_SET_PDEATHSIG = 1


def micropython_exe():
    """The unix-port micropython next to this Python, or on PATH."""
    exe = os.path.join(os.path.dirname(sys.executable), "micropython")
    if os.path.isfile(exe) and os.access(exe, os.X_OK):
        return exe
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = os.path.join(d, "micropython")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise SystemExit("emulator: micropython (unix port) not found: run `make setup`")


# Runs in the board before its REPL: flash at "/", the ROMFS image (read
# first, so it lies at the bottom of the heap) at /rom, sys.path as on a
# board, then main if asked. Kept short: it is compiled from source on the board.
# _Flash lists files with their size, as a board's LittleFS or FAT does
# (VfsPosix gives no size, and `mpremote fs ls` showed 0 bytes for each). It
# wraps the VfsPosix rather than subclassing it: MicroPython's import calls
# a VFS type's native import_stat with a subclass instance, and finds
# nothing. The wrapper costs about 0.8 KB of heap (64-bit); its bound
# methods are made once, so a call through it allocates nothing more.
ROMFS_IMAGE = "romfs.img"
_BOOT = """\
import sys,os,vfs
sys.path[:]=['','.frozen','/lib']
try:
 f=open(%r,'rb')
except OSError:
 pass
else:
 vfs.mount(vfs.VfsRom(f.read()),'/rom')
 f.close()
 del f
 sys.path+=['/rom','/rom/lib']
class _Flash:
 def __init__(s,d):
  s.d=d=vfs.VfsPosix(d)
  for n in ('mount','umount','open','chdir','getcwd','mkdir','remove','rename','rmdir','stat','statvfs'):
   setattr(s,n,getattr(d,n))
 def ilistdir(s,p):
  for e in s.d.ilistdir(p):
   yield e+(0 if e[1]==16384 else s.d.stat(p+'/'+e[0] if p else e[0])[6],)
vfs.umount('/')
vfs.mount(_Flash(%r),'/')
os.chdir('/')
del vfs,_Flash
if %r:
 try:
  import main
 except KeyboardInterrupt:
  print('main: interrupted')
"""


def _boot_code(flash, run):
    return _BOOT % (os.path.join(flash, ROMFS_IMAGE), flash, bool(run))


def _heap_with_rom(flash, heap):
    """heap ("256k", "1m", bytes) plus the ROMFS image's size: what the board
    is given is what it would have with the image in flash."""
    try:
        rom = os.path.getsize(os.path.join(flash, ROMFS_IMAGE))
    except OSError:
        return heap
    units = {"k": 1024, "m": 1024 * 1024}
    n = int(heap[:-1]) * units[heap[-1].lower()] if heap[-1].lower() in units else int(heap)
    return "%dk" % ((n + rom + 2047) // 1024)


def ensure_flash(flash, uid=None):
    """Create the flash directory (and its unique_id) if new; the user's
    alone (0700), its config.json (passwords) 0600 however it was written."""
    os.makedirs(os.path.join(flash, "lib"), mode=0o700, exist_ok=True)
    os.chmod(flash, 0o700)
    try:
        os.chmod(os.path.join(flash, "config.json"), 0o600)
    except FileNotFoundError:
        pass
    path = os.path.join(flash, "unique_id")
    if uid is None and not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(os.urandom(8).hex() + "\n")
        os.replace(path + ".tmp", path)


def _open_serial():
    """The board's "USB serial": a pseudo-terminal whose path a program
    (mpremote) opens. Returns (master fd, path of the other end)."""
    master, slave = os.openpty()
    tty.setraw(slave)  # no echo, no newline translation before a program sets its own mode
    path = os.ttyname(slave)
    os.chmod(path, 0o600)  # the user's own, as a board's serial port is (not the tty group's)
    os.close(slave)  # held open, it would keep output nobody reads
    os.set_blocking(master, False)
    return master, path


def _spawn_board(flash, heap, run, uid, exe=None):
    """Fork micropython (exe, by default the one `make setup` installs) on a
    new pty; returns (pid, master_fd)."""
    exe = exe or micropython_exe()
    env = dict(os.environ)
    env["MICROPYPATH"] = os.path.join(flash, "lib") + ":.frozen"
    if uid:
        env["HOLDFAST_UID"] = uid
    argv = [exe, "-X", "heapsize=" + _heap_with_rom(flash, heap), "-i", "-c",
            _boot_code(flash, run)]
    master, slave = os.openpty()
    pid = os.fork()
    if pid == 0:  # child: the board
        try:
            os.setsid()
            os.close(master)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            if slave > 2:
                os.close(slave)
            import fcntl
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            tty.setraw(0)  # no ISIG: ctrl-C is the bridge's to deliver (_Bridge._interrupt)
            try:  # die with the emulator: SIGKILL on it is a power cut
                ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            except (OSError, AttributeError):
                pass
            os.chdir(flash)
            os.umask(0o077)  # what the board writes (config.json: passwords) is the user's alone
            os.execve(exe, argv, env)
        finally:
            os._exit(127)
    os.close(slave)
    return pid, master


def _peer_uid(conn):
    """The uid that made this loopback TCP connection (Linux: the client's
    own socket in /proc/net/tcp); None where the system does not say."""
    host, port = conn.getpeername()
    ours = conn.getsockname()[1]
    local = "%08X:%04X" % (struct.unpack("<I", socket.inet_aton(host))[0], port)
    try:
        with open("/proc/net/tcp") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 7 and parts[1] == local and parts[2].endswith(":%04X" % ours):
                    return int(parts[7])
    except OSError:
        return None
    return -1  # the table exists but has no such socket: not ours to trust


# What mpremote sends first on connecting: ctrl-C (and CRs) to interrupt a
# running program, then ctrl-A for the raw REPL. A browser's request or
# anything else typed at the port starts otherwise and is refused.
_OPENING = b"\r\x03"
_RAW_REPL = 1


class _Bridge:
    """pty <-> one TCP client and the serial pty, console copied to a file or stdout.

    A TCP connection is a candidate until it proves to be mpremote (made by
    this user, opening with _OPENING bytes then ctrl-A); only then does it
    replace the current client and reach the board."""

    def __init__(self, master, listener, console, serial):
        self.master = master
        self.listener = listener
        self.console = console
        self.client = None
        self.candidate = None
        self.opened = 0  # opening bytes the candidate sent so far (bounded)
        self.cr = False  # the last byte sent to the clients was CR (newlines, see _like_a_board)
        self.pid = None  # the board's process (serve)
        self.serial = serial  # master fd of the serial pty
        self._hup = select.poll()  # POLLHUP on it: no program has the other end open
        self._hup.register(serial, select.POLLIN)
        self.serial_open = False
        self.last = 0  # the client's last byte: ctrl-D before an exit is a soft reset
        self.raw = False  # the client put the REPL in raw mode (ctrl-A, left with ctrl-B)
        self.at_prompt = b""  # sent to the board once its REPL prompt is out

    def _from_client(self, data):
        self.last = data[-1]
        a, b = data.rfind(b"\x01"), data.rfind(b"\x02")
        if a != b:
            self.raw = a > b
        self._to_board(data)

    def _to_board(self, data):
        pieces = data.split(b"\x03")
        for i, piece in enumerate(pieces):
            if i and not self._interrupt():
                piece = b"\x03" + piece
            if piece:
                self._write_master(piece)

    def _interrupt(self):
        """ctrl-C as a board takes it: while code runs (MicroPython then
        catches SIGINT) it raises KeyboardInterrupt and the byte is gone;
        at a prompt it is a key like any other. Left to the tty (ISIG), it
        was neither: raw-paste mode runs code with the tty still raw, so
        mpremote could not stop a program, and at a prompt or during boot
        (SIGINT not caught) it killed the board."""
        try:
            with open("/proc/%d/status" % self.pid) as f:
                caught = next(int(line.split()[1], 16) for line in f
                              if line.startswith("SigCgt:"))
        except (OSError, StopIteration, ValueError):
            return False
        if not caught >> (signal.SIGINT - 1) & 1:
            return False
        os.kill(self.pid, signal.SIGINT)
        return True

    def soft_reset_asked(self):
        return self.last == 4 and (self.client is not None or self.serial_open)

    def _serial_check(self):
        """Is a program attached to the serial pty (now)?"""
        self.serial_open = not any(ev & select.POLLHUP for _, ev in self._hup.poll(0))
        return self.serial_open

    def _like_a_board(self, data):
        """A lone LF as CR LF, as a board's REPL writes its output: the unix
        port leaves that to the tty, which is raw here (mpremote's raw REPL
        needs it byte for byte), and `mpremote repl` staircased. The raw
        REPL's own output is left as it is."""
        if self.raw or not data:
            return data
        out = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        if self.cr and data[:1] == b"\n":  # the CR came in the last piece
            out = out[1:]
        self.cr = data[-1:] == b"\r"
        return out

    def _refuse(self, conn, why):
        note = "emulator: refused a connection to the REPL port: %s\r\n" % why
        self.console.write(note.encode())
        self.console.flush()
        try:
            conn.sendall(note.encode())
            conn.setblocking(False)
            while conn.recv(4096):  # unread bytes would make close() a reset, losing the note
                pass
        except OSError:
            pass
        conn.close()

    def _accept(self):
        conn, _ = self.listener.accept()
        uid = _peer_uid(conn)
        if uid is not None and uid != os.getuid():
            return self._refuse(conn, "made by uid %d, the board is uid %d's"
                                % (uid, os.getuid()))
        if self.candidate is not None:
            self._refuse(self.candidate, "another connection came before it was mpremote")
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.candidate, self.opened = conn, 0

    def _from_candidate(self, data):
        if not data:
            self.candidate.close()
            self.candidate = None
            return
        for i, b in enumerate(data):
            if b == _RAW_REPL:
                self._drop_client()
                self.client, self.candidate = self.candidate, None
                self._from_client(data)
                return
            if b not in _OPENING or self.opened + i > 64:
                self._refuse(self.candidate, "it is not mpremote (which opens with "
                                             "ctrl-C, then ctrl-A): %r" % bytes(data[:40]))
                self.candidate = None
                return
        # Only CRs and ctrl-C so far: they go on at once (mpremote waits for
        # the interrupt to take effect before it sends ctrl-A).
        self.opened += len(data)
        self._to_board(data)

    def say(self, data, console=True):
        """To the console (unless told not to) and to the client."""
        if console:
            self.console.write(data)
            self.console.flush()
        data = self._like_a_board(data)
        if self.client is not None:
            try:
                self.client.sendall(data)
            except OSError:
                self._drop_client()
        if self.serial_open:
            self._write_serial(data)

    def _write_serial(self, data):
        # A reader that keeps up gets every byte (mpremote's raw REPL needs
        # them all); one that stops reading for a second loses the rest, as
        # on a serial line, rather than stalling the board.
        while data:
            try:
                data = data[os.write(self.serial, data):]
            except BlockingIOError:
                if not select.select([], [self.serial], [], 1.0)[1]:
                    return
            except OSError:  # EIO: the program closed it
                self._serial_check()
                return

    def _drop_client(self):
        self.raw = False
        if self.client is not None:
            try:
                self.client.close()
            except OSError:
                pass
            self.client = None

    def _write_master(self, data):
        while data:
            try:
                n = os.write(self.master, data)
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    select.select([], [self.master], [], 1.0)
                    continue
                raise
            data = data[n:]

    def serve(self, pid):
        """Until the board process ends; returns its exit status."""
        self.pid = pid
        while True:
            fds = [self.master, self.listener]
            if self.client is not None:
                fds.append(self.client)
            if self.candidate is not None:
                fds.append(self.candidate)
            # A closed serial pty reads as ready (EIO): it is watched only
            # while open, and looked at again every round.
            if self._serial_check():
                fds.append(self.serial)
            try:
                ready, _, _ = select.select(fds, [], [], 0.2)
            except InterruptedError:
                continue
            if self.master in ready:
                try:
                    data = os.read(self.master, 4096)
                except OSError:
                    data = b""
                if not data:  # the board's side of the pty is gone
                    return _reap(pid)
                if self.at_prompt and data.endswith(b">>> "):
                    # Only now: before, the pty was not raw yet and the REPL not reading.
                    self._write_master(self.at_prompt)
                    self.at_prompt = b""
                # The raw REPL is mpremote's wire protocol (control bytes, the
                # tracebacks of its own probing): its business, not the console's.
                self.say(data, console=not self.raw)
            if self.listener in ready:
                self._accept()
            if self.client is not None and self.client in ready:
                try:
                    data = self.client.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self._drop_client()
                else:
                    self._from_client(data)
            # After the client: a candidate that proves itself becomes it, in this round.
            if self.candidate is not None and self.candidate in ready:
                try:
                    data = self.candidate.recv(4096)
                except OSError:
                    data = b""
                self._from_candidate(data)
            if self.serial in ready:
                try:
                    data = os.read(self.serial, 4096)
                except OSError:  # EIO: the program closed it; EAGAIN
                    data = b""
                if data:
                    self._from_client(data)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                # Give the last output a moment, then report.
                try:
                    while select.select([self.master], [], [], 0.1)[0]:
                        data = os.read(self.master, 4096)
                        if not data:
                            break
                        self.console.write(data)
                except OSError:
                    pass
                self.console.flush()
                return os.waitstatus_to_exitcode(status)


def _reap(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def serve(flash, port=0, run=False, heap=DEFAULT_HEAP, uid=None, console=None,
          port_file=None, exe=None):
    """Run one emulated board until its program ends; returns its status."""
    flash = os.path.abspath(flash)
    ensure_flash(flash, uid)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, port))
    listener.listen(1)
    port = listener.getsockname()[1]
    out = open(console, "ab") if console else sys.stdout.buffer
    serial, tty_path = _open_serial()
    board = list(_spawn_board(flash, heap, run, uid, exe))  # [pid, pty master]

    def stop(signum, frame):
        try:
            os.kill(board[0], signal.SIGKILL)
        except ProcessLookupError:
            pass
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if port_file:
        with open(port_file + ".tmp", "w") as f:
            f.write("%d %d %s\n" % (port, board[0], tty_path))
        os.replace(port_file + ".tmp", port_file)
    sys.stderr.write("emulator: board pid %d, flash %s, REPL on socket://%s:%d and %s\n"
                     "  mpremote connect %s repl      (ctrl-] leaves)\n"
                     % (board[0], flash, HOST, port, tty_path, tty_path))
    sys.stderr.flush()
    bridge = _Bridge(board[1], listener, out, serial)
    try:
        while True:
            status = bridge.serve(board[0])
            if not bridge.soft_reset_asked():
                return status
            # ctrl-D: a board reboots its VM and keeps its flash; so do we.
            os.close(board[1])
            bridge.say(b"soft reboot\r\n")
            board[:] = _spawn_board(flash, heap, run and not bridge.raw, uid, exe)
            bridge.master = board[1]
            bridge.last = 0
            if bridge.raw:
                bridge.at_prompt = b"\x01"
    finally:
        try:
            os.kill(board[0], signal.SIGKILL)
        except ProcessLookupError:
            pass
        if console:
            out.close()


class Emulator:
    """An emulated board run as its own process (see the module doc).

    flash: its flash directory. run: start main at power-on. heap: the
    MicroPython heap (e.g. "32k"). port: fixed REPL port, or 0 for a free one
    (chosen at the first start and kept across restarts). console: file the
    board's output is appended to (default: FLASH/../<name>.console.log).
    exe: the unix-port micropython the board runs (default: make setup's).
    """

    def __init__(self, flash, run=False, heap=DEFAULT_HEAP, port=0, uid=None,
                 console=None, exe=None):
        self.flash = os.path.abspath(flash)
        self.run = run
        self.heap = heap
        self.port = port
        self.uid = uid
        self.exe = exe
        self.console = os.path.abspath(console) if console else \
            self.flash.rstrip("/") + ".console.log"
        self.proc = None
        self.board_pid = None
        self.tty = None  # the serial pty's path, once started

    @property
    def url(self):
        return "socket://%s:%d" % (HOST, self.port)

    def start(self, run=None, timeout=20.0):
        """Power on; returns once the REPL port accepts connections."""
        if run is not None:
            self.run = run
        if self.proc is not None and self.proc.poll() is None:
            return self
        port_file = self.flash.rstrip("/") + ".port"
        try:
            os.remove(port_file)
        except OSError:
            pass
        self._console_mark = os.path.getsize(self.console) \
            if os.path.exists(self.console) else 0
        cmd = [sys.executable, os.path.abspath(__file__), self.flash,
               "--port", str(self.port), "--heap", self.heap,
               "--console", self.console, "--port-file", port_file]
        if self.run:
            cmd.append("--run")
        if self.uid:
            cmd += ["--uid", self.uid]
        if self.exe:
            cmd += ["--exe", self.exe]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while not os.path.exists(port_file):
            if self.proc.poll() is not None:
                raise RuntimeError("emulator exited with %s: %s" % (
                    self.proc.returncode, self.proc.stderr.read().decode(errors="replace")))
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("emulator did not start within %.0f s" % timeout)
            time.sleep(0.02)
        with open(port_file) as f:
            port, pid, self.tty = f.read().split()
        self.port = int(port)
        self.board_pid = int(pid)  # the micropython process
        return self

    def kill(self):
        """Power cut: SIGKILL, the board dies with it."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc.stderr.close()
            self.proc = None

    def stop(self, timeout=10.0):
        """Orderly stop (SIGTERM); the board is killed all the same."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            self.kill()

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def console_text(self, since_start=True):
        """The board's console output (since the last start, by default)."""
        try:
            with open(self.console, "rb") as f:
                if since_start:
                    f.seek(getattr(self, "_console_mark", 0))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_console(self, pattern, timeout=10.0):
        """Wait until the console (since the last start) matches the regex
        pattern; returns the match. RuntimeError on timeout or exit."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.console_text())
            if m:
                return m
            if not self.running:
                raise RuntimeError("emulator exited; console:\n" + self.console_text())
            if time.monotonic() > deadline:
                raise RuntimeError("no %r on the console within %.0f s; console:\n%s"
                                   % (pattern, timeout, self.console_text()))
            time.sleep(0.05)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("flash", help="the board's flash directory (created if missing)")
    ap.add_argument("--port", type=int, default=0, help="REPL TCP port (0: a free one)")
    ap.add_argument("--run", action="store_true", help="import main at power-on")
    ap.add_argument("--heap", default=DEFAULT_HEAP,
                    help="MicroPython heap size, e.g. 32k (default %s)" % DEFAULT_HEAP)
    ap.add_argument("--uid", help="the board's unique id (hex); default: FLASH/unique_id")
    ap.add_argument("--console", help="append the board's output here instead of stdout")
    ap.add_argument("--port-file",
                    help="write '<REPL port> <board pid>' here once listening")
    ap.add_argument("--exe", help="the unix-port micropython to run (default: the one make setup "
                                  "installs; the bench gives the 32-bit build)")
    a = ap.parse_args(argv)
    return serve(a.flash, a.port, a.run, a.heap, a.uid, a.console, a.port_file, a.exe)


if __name__ == "__main__":
    sys.exit(main())
