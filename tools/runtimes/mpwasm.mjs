// Run MicroPython's 32-bit WebAssembly port (npm, pinned in package.json) in
// Node, the way the unix port runs a script:
//
//   node tools/runtimes/mpwasm.mjs [-X heapsize=256k] [--copy DIR]... [--path DIR]...
//        (-m MODULE | SCRIPT.py) [ARG...]
//
// --copy DIR: copy the host directory DIR (relative to the current one) into
// the port's in-memory file system at the same relative path, since the port
// sees no host files. --path DIR: put DIR first on sys.path (as MICROPYPATH
// does). -m MODULE imports MODULE and calls MODULE.main(ARGS) if it has one.
// The exit status is the script's: SystemExit's code, 1 for an uncaught
// exception (its traceback printed), else 0.
//
// Heap readings: this port's gc.collect() only asks for a collection, which
// runs when control is back in JavaScript with no Python frame active
// (MICROPY_GC_SPLIT_HEAP_AUTO in its pyscript variant), so gc.mem_alloc()
// read in the same call counts every object freed since. A main() that
// returns a generator is driven from here, one call per step: a bare
// `yield` asks for the heap in use after a full collection (the generator
// gets gc.mem_alloc() back, read at the start of the next call); a yielded
// awaitable is awaited on the JavaScript event loop, where the port's
// asyncio runs, and its result sent back.
//
// What this port is not: it has no socket, select or ssl module and no board
// peripherals, and its heap grows on demand (-X heapsize is where it starts,
// not a limit), so smallest-heap figures cannot be taken on it.
import fs from "fs";
import path from "path";
import { fileURLToPath, pathToFileURL } from "url";

// `make setup` installs the port into build/wasm (see the Makefile's WASM_PKG).
function portDir() {
  if (process.env.MPWASM_DIR) return process.env.MPWASM_DIR;
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!fs.existsSync(path.join(dir, "Makefile"))) {
    const up = path.dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return path.join(dir, "build", "wasm", "node_modules", "@micropython",
    "micropython-webassembly-pyscript");
}
const entry = path.join(portDir(), "micropython.mjs");
if (!fs.existsSync(entry)) {
  process.stderr.write(`mpwasm: ${entry} not found: run \`make setup\`\n`);
  process.exit(2);
}
const { loadMicroPython } = await import(pathToFileURL(entry).href);

function usage(msg) {
  process.stderr.write(`mpwasm: ${msg}\nusage: node tools/runtimes/mpwasm.mjs [-X heapsize=N] ` +
    "[--copy DIR]... [--path DIR]... (-m MODULE | SCRIPT.py) [ARG...]\n");
  process.exit(2);
}

let heap = 256 * 1024;
const copies = [], paths = [];
let module = null, script = null, args = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === "-X") {
    const m = /^heapsize=(\d+)([kKmM]?)$/.exec(argv[++i] || "");
    if (!m) usage("-X takes heapsize=N[k|m]");
    heap = parseInt(m[1]) * ({ k: 1024, m: 1048576 }[m[2].toLowerCase()] || 1);
  } else if (a === "--copy") copies.push(argv[++i]);
  else if (a === "--path") paths.push(argv[++i]);
  else if (a === "-m") { module = argv[++i]; args = argv.slice(i + 1); break; }
  else { script = a; args = argv.slice(i + 1); break; }
}
if (!module && !script) usage("nothing to run");

// An error on the port's JavaScript side (not in the Python code) is told in
// one line: Node's own report prints the port's whole minified source.
function fatal(e) {
  process.stderr.write(`mpwasm: ${e && e.name ? e.name + ": " + e.message : e}\n`);
  process.exit(2);
}
process.on("unhandledRejection", fatal);
process.on("uncaughtException", fatal);

const mp = await loadMicroPython({
  heapsize: heap, linebuffer: false,
  stdout: (d) => process.stdout.write(d),
  stderr: (d) => process.stderr.write(d),
});

function copyTree(rel) {
  if (!rel || !fs.existsSync(rel)) usage(`${rel}: no such file or directory`);
  const dst = "/" + path.normalize(rel).replace(/^(\.\.\/)+/, "");
  if (fs.statSync(rel).isDirectory()) {
    mp.FS.mkdirTree(dst);
    for (const name of fs.readdirSync(rel)) {
      if (name !== "__pycache__") copyTree(path.join(rel, name));
    }
  } else {
    mp.FS.mkdirTree(path.dirname(dst));
    mp.FS.writeFile(dst, fs.readFileSync(rel));
  }
}
copies.forEach(copyTree);
if (script) copyTree(script);
mp.FS.chdir("/");

// The script runs inside a function so that SystemExit or any other
// exception becomes the exit status. (This port has no sys.argv: -m hands the
// arguments to main().)
const q = (s) => JSON.stringify(s);
try {
  mp.runPython(`
import sys
sys.path[:0] = ${q(paths.map((p) => "/" + path.normalize(p)))}
import gc
def _mpwasm_exit(e):
    if isinstance(e, SystemExit):
        return e.args[0] if e.args else 0
    sys.print_exception(e)
    return 1
def _mpwasm(mod, script, args):
    try:
        if mod:
            m = __import__(mod)
            f = getattr(m, "main", None)
            return f(args) if f else 0
        exec(open(script).read(), {"__name__": "__main__"})
        return 0
    except BaseException as e:
        return _mpwasm_exit(e)
_mpwasm_rc = _mpwasm(${q(module || "")}, ${q(script || "")}, ${q(args)})
_mpwasm_gen = _mpwasm_rc if type(_mpwasm_rc).__name__ == "generator" else None
_mpwasm_in = _mpwasm_err = _mpwasm_aw = None
def _mpwasm_step():
    # One step of a generator main(): 0 when it asks for a reading, 1 when
    # it yields an awaitable (_mpwasm_aw), 2 when it is done (_mpwasm_rc).
    global _mpwasm_in, _mpwasm_err, _mpwasm_aw, _mpwasm_rc
    v, e = _mpwasm_in, _mpwasm_err
    _mpwasm_in = _mpwasm_err = _mpwasm_aw = None
    if v is _mpwasm_step:  # the collection asked for has run since the last step
        v = gc.mem_alloc()
    try:
        x = _mpwasm_gen.throw(e) if e else _mpwasm_gen.send(v)
    except StopIteration as s:
        _mpwasm_rc = s.args[0] if s.args else 0
        return 2
    except BaseException as s:
        _mpwasm_rc = _mpwasm_exit(s)
        return 2
    if x is None:
        _mpwasm_in = _mpwasm_step
        gc.collect()
        return 0
    _mpwasm_aw = x
    return 1
async def _mpwasm_await():
    global _mpwasm_in, _mpwasm_err
    try:
        _mpwasm_in = await _mpwasm_aw
    except BaseException as e:
        _mpwasm_err = e
def _mpwasm_task():
    # A task of its own: the port's asyncio cannot cancel the top-level
    # await (which wait_for() does to the task that waits).
    import asyncio
    return asyncio.create_task(_mpwasm_await())
`);
  if (mp.globals.get("_mpwasm_gen") !== null) {
    const step = mp.globals.get("_mpwasm_step");
    for (let k; (k = step()) !== 2; ) {
      if (k === 1) await mp.runPythonAsync("await _mpwasm_task()");
    }
  }
} catch (e) {
  fatal(e);
}
const rc = mp.globals.get("_mpwasm_rc");
process.exitCode = typeof rc === "number" ? rc : rc === null ? 0 : 1;
