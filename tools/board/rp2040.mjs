// The emulated Raspberry Pi Pico: MicroPython's own rp2 firmware on rp2040js
// (npm, installed by `make setup` into build/rp2040js), with what that
// emulator lacks for a MicroPython board made up here:
//
//   node tools/board/rp2040.mjs --firmware FW.uf2|FW.bin --bootrom B1.bin --flash FILE [--port N]
//
// - the REPL (USB CDC) on a loopback TCP port, for mpremote connect socket://127.0.0.1:N
//   (one client at a time; the port is printed once it listens);
// - the 2 MB flash kept in FILE: every erase and program the firmware does
//   is written through to it at once, so a SIGKILL is a power cut and the
//   next start powers the same flash on (the firmware is laid over it at each start);
// - UART0 carries the frames of the socket stand-in frozen with the firmware
//   (tools/board/uartsocket/socket.py), each TCP connection it asks for made
//   here, to wherever it dials (the broker).
//
// Emulated time never runs ahead of the wall clock: while the core sleeps
// (WFI/WFE) it waits for the real time to catch up, so a board's timeouts
// are as long as on a board, never shorter (busy, the emulator is slower
// than 125 MHz and the board's clock falls behind, as on a slow board).
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const PKG = path.join(ROOT, 'build', 'rp2040js');

const FLASH_BYTES = 2 * 1024 * 1024; // the Pico's W25Q16
const UF2_MAGIC = [0x0a324655, 0x9e5d5157, 0x0ab16f30];
const FLASH_BASE = 0x10000000;

function usage(why) {
  process.stderr.write(`rp2040: ${why}\nusage: node tools/board/rp2040.mjs --firmware FW.uf2|FW.bin ` +
    '--bootrom BOOTROM.bin --flash FILE [--port N]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const a = { port: 0 };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i].replace(/^--/, '');
    if (!['firmware', 'bootrom', 'flash', 'port'].includes(k) || argv[i + 1] === undefined) {
      usage(`unknown or incomplete option ${argv[i]}`);
    }
    a[k] = k === 'port' ? Number(argv[i + 1]) : argv[i + 1];
  }
  for (const k of ['firmware', 'bootrom', 'flash']) {
    if (!a[k]) usage(`--${k} is missing`);
  }
  return a;
}

async function loadEmulator() {
  const entry = path.join(PKG, 'node_modules', 'rp2040js', 'dist', 'esm', 'index.js');
  if (!fs.existsSync(entry)) {
    process.stderr.write(`rp2040: rp2040js is not installed (${entry}): run make setup\n`);
    process.exit(2);
  }
  return import(pathToFileURL(entry).href);
}

// A UF2 file's blocks, or a raw image from the start of flash.
function firmwareBlocks(file) {
  const data = fs.readFileSync(file);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  if (data.length >= 512 && view.getUint32(0, true) === UF2_MAGIC[0] &&
      view.getUint32(4, true) === UF2_MAGIC[1]) {
    const blocks = [];
    for (let at = 0; at + 512 <= data.length; at += 512) {
      if (view.getUint32(at, true) !== UF2_MAGIC[0] || view.getUint32(at + 508, true) !== UF2_MAGIC[2]) {
        throw new Error(`${file}: a damaged UF2 block at byte ${at}`);
      }
      const address = view.getUint32(at + 12, true);
      const size = view.getUint32(at + 16, true);
      if (address < FLASH_BASE || address + size > FLASH_BASE + FLASH_BYTES) continue; // not for flash
      blocks.push([address - FLASH_BASE, data.subarray(at + 32, at + 32 + size)]);
    }
    return blocks;
  }
  if (data.length > FLASH_BYTES) throw new Error(`${file}: larger than the Pico's 2 MB flash`);
  return [[0, data]];
}

// The bootrom's public functions by their two-letter code (its table at 0x14).
function romFunctions(rom) {
  const u16 = (a) => rom[a] | (rom[a + 1] << 8);
  const out = {};
  for (let at = u16(0x14); u16(at) !== 0; at += 4) {
    const code = u16(at);
    out[String.fromCharCode(code & 0xff, code >> 8)] = u16(at + 2) & ~1;
  }
  return out;
}

const BKPT_ERASE = 0xe0;
const BKPT_PROGRAM = 0xe1;

class Board {
  constructor(lib, opts) {
    const rom = fs.readFileSync(opts.bootrom);
    if (rom.length !== 16384 || rom.readUInt32LE(0x10) !== 0x0201754d) { // 'Mu' and version 1, 2
      throw new Error(`${opts.bootrom}: not an RP2040 bootrom (16 KB, "Mu" at 0x10)`);
    }
    const fns = romFunctions(rom);
    if (!fns.RE || !fns.RP) throw new Error(`${opts.bootrom}: no flash_range_erase/program in its table`);
    // rp2040js does not emulate flash writes (its issue #157): the two ROM
    // entries become breakpoints, done here as NOR flash does them.
    const patched = Buffer.from(rom);
    patched.writeUInt16LE(0xbe00 | BKPT_ERASE, fns.RE);
    patched.writeUInt16LE(0xbe00 | BKPT_PROGRAM, fns.RP);

    this.sim = new lib.Simulator();
    this.mcu = this.sim.rp2040;
    this.mcu.loadBootrom(new Uint32Array(patched.buffer, patched.byteOffset, 4096));
    this.mcu.logger = new lib.ConsoleLogger(lib.LogLevel.Error);
    this.flashFile = opts.flash;
    this.loadFlash(opts.firmware);
    this.mcu.onBreak = (code) => this.onBreak(code);
    this.fixUart(this.mcu.uart[0]);
    this.cdc = new lib.USBCDC(this.mcu.usbCtrl);
    this.holdUsbOut();
  }

  loadFlash(firmware) {
    const { flash } = this.mcu;
    if (fs.existsSync(this.flashFile)) {
      const kept = fs.readFileSync(this.flashFile);
      flash.set(kept.subarray(0, FLASH_BYTES));
    }
    for (const [offset, bytes] of firmwareBlocks(firmware)) flash.set(bytes, offset);
    this.fd = fs.openSync(this.flashFile, fs.existsSync(this.flashFile) ? 'r+' : 'w+');
    fs.writeSync(this.fd, flash, 0, FLASH_BYTES, 0);
  }

  persist(offset, count) {
    fs.writeSync(this.fd, this.mcu.flash, offset, count, offset);
  }

  onBreak(code) {
    const { core, flash } = this.mcu;
    const r = core.registers;
    if (code === BKPT_ERASE) { // flash_range_erase(offset, count, block_size, block_cmd)
      const [offset, count] = [r[0], r[1]];
      this.checkRange(offset, count, 'erase');
      flash.fill(0xff, offset, offset + count);
      this.persist(offset, count);
    } else if (code === BKPT_PROGRAM) { // flash_range_program(offset, data, count)
      const [offset, data, count] = [r[0], r[1], r[2]];
      this.checkRange(offset, count, 'program');
      for (let i = 0; i < count; i++) flash[offset + i] &= this.mcu.readUint8(data + i);
      this.persist(offset, count);
    } else {
      throw new Error(`breakpoint ${code} at 0x${(core.PC - 2).toString(16)}`);
    }
    core.PC = core.LR & ~1; // return from the ROM function
  }

  checkRange(offset, count, what) {
    if (offset + count > FLASH_BYTES) {
      throw new Error(`flash ${what} past the end of the 2 MB flash: 0x${offset.toString(16)}+${count}`);
    }
  }

  // rp2040js raises the TX interrupt on every check, so once MicroPython
  // enables it (machine.UART) the handler runs forever. The PL011 raises it
  // as the TX FIFO drains to its level, which here (bytes leave at once)
  // is after each write; the handler's clear then holds until the next.
  fixUart(uart) {
    const TXINTR = 1 << 5;
    uart.checkInterrupts = function () {
      this.rp2040.setInterrupt(this.irq, !!(this.interruptStatus & this.interruptMask));
    };
    const write = uart.writeUint32.bind(uart);
    uart.writeUint32 = (offset, value) => {
      write(offset, value);
      if (offset === 0) { // UARTDR
        uart.interruptStatus |= TXINTR;
        uart.checkInterrupts();
      }
    };
  }

  // rp2040js answers the device's every USB OUT transfer at once, with 0
  // bytes when the host has none: the board then spends most of its time in
  // USB interrupts. A real host holds the transfer until it has bytes.
  holdUsbOut() {
    const { cdc } = this;
    const usb = this.mcu.usbCtrl;
    this.usbIn = []; // Buffers from the REPL client, not yet on the USB
    this.usbPending = 0; // the size of the OUT transfer the device is waiting on
    usb.onEndpointRead = (endpoint, size) => {
      if (endpoint !== cdc.outEndpoint) return;
      this.usbPending = size;
      this.feedUsb();
    };
  }

  feedUsb() {
    if (!this.usbPending || !this.usbIn.length) return;
    const out = [];
    let n = 0;
    while (this.usbIn.length && n < this.usbPending) {
      const head = this.usbIn[0];
      const take = Math.min(head.length, this.usbPending - n);
      out.push(head.subarray(0, take));
      n += take;
      if (take === head.length) this.usbIn.shift();
      else this.usbIn[0] = head.subarray(take);
    }
    this.usbPending = 0;
    this.mcu.usbCtrl.endpointReadDone(this.cdc.outEndpoint, new Uint8Array(Buffer.concat(out)));
  }

  // The loop: instructions in slices, the event loop (sockets) between them.
  run() {
    const { mcu, sim } = this;
    const { clock } = sim;
    const { core } = mcu;
    const start = process.hrtime.bigint();
    const cycleNanos = 1e9 / 125e6;
    const slice = () => {
      const wall = Number(process.hrtime.bigint() - start);
      const until = Date.now() + 20;
      let wait = 0;
      while (Date.now() < until) {
        this.feedUart();
        for (let i = 0; i < 20000; i++) {
          if (core.waiting) {
            const ahead = clock.nanos - wall;
            if (ahead >= 0) {
              wait = Math.max(1, Math.min(10, ahead / 1e6));
              break;
            }
            clock.tick(Math.min(clock.nanosToNextAlarm || 1e6, -ahead));
          } else {
            clock.tick(core.executeInstruction() * cycleNanos);
          }
        }
        if (wait) break;
      }
      setTimeout(slice, wait);
    };
    slice();
  }
}

// -- the REPL on TCP --------------------------------------------------------------

function serveRepl(board, port) {
  let client = null;
  board.cdc.onSerialData = (bytes) => {
    if (client) client.write(Buffer.from(bytes));
  };
  board.cdc.onDeviceConnected = () => {
    console.log('rp2040: USB CDC up');
  };
  const server = net.createServer((sock) => {
    if (client) client.destroy(); // the newest connection wins, as a reopened serial port
    client = sock;
    sock.setNoDelay(true);
    sock.on('data', (data) => {
      board.usbIn.push(data);
      board.feedUsb();
    });
    sock.on('close', () => {
      if (client === sock) client = null;
    });
    sock.on('error', () => {});
  });
  server.listen(port, '127.0.0.1', () => {
    console.log(`rp2040: REPL on socket://127.0.0.1:${server.address().port}`);
  });
}

// -- UART0: the socket stand-in's frames ------------------------------------------
// A frame is kind (1 byte), channel (1), length (2, big-endian), data.
// From the board: C connect (data "host:port"), D data, X close, R a new
// interpreter (every channel closed). To it: c connected, e failed (data: the
// errno, decimal), d data, x closed by the peer, r the answer to R (data SYNC).
const SYNC = Buffer.from('HFSYNC');

const ERRNO = { ECONNREFUSED: 111, ETIMEDOUT: 110, EHOSTUNREACH: 113, ENETUNREACH: 101,
  ECONNRESET: 104, ENOTFOUND: 2, EAI_AGAIN: 2 };

function bridgeUart(board) {
  const uart = board.mcu.uart[0];
  const channels = new Map();
  const toBoard = []; // bytes for the board's RX FIFO, fed as it has room
  let queued = 0;
  board.feedUart = () => {
    while (queued && !uart.rxFIFO.full) {
      const head = toBoard[0];
      uart.feedByte(head[head.at++]);
      queued--;
      if (head.at === head.length) toBoard.shift();
    }
  };
  const send = (kind, ch, data = Buffer.alloc(0)) => {
    for (let at = 0; at < data.length || at === 0; at += 0xffff) {
      const part = data.subarray(at, at + 0xffff);
      const frame = Buffer.alloc(4 + part.length);
      frame[0] = kind.charCodeAt(0);
      frame[1] = ch;
      frame.writeUInt16BE(part.length, 2);
      part.copy(frame, 4);
      frame.at = 0;
      toBoard.push(frame);
      queued += frame.length;
      if (!data.length) break;
    }
  };
  const close = (ch) => {
    const s = channels.get(ch);
    if (s) {
      channels.delete(ch);
      s.destroy();
    }
  };
  const onFrame = (kind, ch, data) => {
    if (kind === 'R') {
      // What was on its way to the earlier interpreter is stale; the board
      // reads up to the mark and starts its frames after it.
      for (const c of [...channels.keys()]) close(c);
      toBoard.length = 0;
      queued = 0;
      uart.rxFIFO.reset();
      send('r', 0, SYNC);
    } else if (kind === 'C') {
      close(ch);
      const text = data.toString();
      const colon = text.lastIndexOf(':');
      const sock = net.connect({ host: text.slice(0, colon), port: Number(text.slice(colon + 1)) });
      channels.set(ch, sock);
      sock.setNoDelay(true);
      let up = false;
      sock.on('connect', () => {
        up = true;
        if (channels.get(ch) === sock) send('c', ch);
      });
      sock.on('data', (d) => {
        if (channels.get(ch) === sock) send('d', ch, d);
      });
      sock.on('error', (e) => {
        if (channels.get(ch) !== sock) return;
        channels.delete(ch);
        if (up) send('x', ch);
        else send('e', ch, Buffer.from(String(ERRNO[e.code] || 111)));
      });
      sock.on('close', () => {
        if (channels.get(ch) !== sock) return;
        channels.delete(ch);
        send(up ? 'x' : 'e', ch, up ? undefined : Buffer.from('111'));
      });
    } else if (kind === 'D') {
      const s = channels.get(ch);
      if (s) s.write(data);
    } else if (kind === 'X') {
      close(ch);
    }
  };
  // The frame being read: its 4-byte head, then its data.
  const head = Buffer.alloc(4);
  let got = 0;
  let data = null;
  uart.onByte = (value) => {
    if (got < 4) {
      head[got++] = value;
      if (got < 4) return;
      data = Buffer.alloc(head.readUInt16BE(2));
    } else {
      data[got++ - 4] = value;
    }
    if (got === 4 + data.length) {
      got = 0;
      onFrame(String.fromCharCode(head[0]), head[1], data);
    }
  };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const lib = await loadEmulator();
  let board;
  try {
    board = new Board(lib, opts);
  } catch (e) {
    process.stderr.write(`rp2040: ${e.message}\n`);
    process.exit(2);
  }
  bridgeUart(board);
  serveRepl(board, opts.port);
  board.mcu.core.PC = 0x10000000;
  board.run();
}

main();
