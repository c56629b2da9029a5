// An MQTT broker over WebSockets for the tests and the bench: aedes with
// aedes-server-factory (ws: true; https for wss), on a loopback port.
// Installed by `make wsbrokers` into build/wsbrokers (part of make setup);
// started by tools/fleet/wsbroker.py:
//   node wsbroker.mjs PORT [--tls KEY CERT] [--log] [--tcp TCP_PORT]
// Prints "READY" once listening; with --log, one JSON line per PUBLISH that
// arrives from a client ({"t": topic, "p": payload, "q": qos}), the
// broker's own record of what arrived. --tcp: the same broker on plain MQTT
// too (the bench compares the two transports on one broker).
import { createRequire } from 'node:module'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'

const require = createRequire(path.join(process.env.WSBROKER_MODULES, 'x.js'))
const { Aedes } = await import(require.resolve('aedes'))
const { createServer } = require('aedes-server-factory')

const args = process.argv.slice(2)
const port = Number(args[0])
const opts = { ws: true }
const t = args.indexOf('--tls')
if (t >= 0) {
  opts.https = { key: fs.readFileSync(args[t + 1]), cert: fs.readFileSync(args[t + 2]) }
}
// The log line is written as a PUBLISH arrives, before it is acknowledged
// (authorizePublish runs first), so a broker killed at any moment has
// logged every message a client may have counted as delivered: aedes keeps
// its sessions in memory, and a QoS 2 message whose PUBREC went out is the
// broker's to keep (the client then sends only PUBREL).
const log = args.includes('--log')
const broker = await Aedes.createBroker({
  authorizePublish: (client, packet, cb) => {
    if (log) {
      process.stdout.write(JSON.stringify({ t: packet.topic, p: packet.payload.toString('latin1'), q: packet.qos }) + '\n')
    }
    cb(null)
  }
})
const server = createServer(broker, opts)
const tcp = args.indexOf('--tcp')
if (tcp >= 0) {
  await new Promise((resolve) => net.createServer(broker.handle).listen(Number(args[tcp + 1]), '127.0.0.1', resolve))
}
server.listen(port, '127.0.0.1', () => process.stdout.write('READY\n'))
process.on('SIGTERM', () => { server.close(); broker.close(() => process.exit(0)) })
