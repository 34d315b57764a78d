// A dumped tree's TCP connections end silently (os/mute.ts), as criu ends those it dumps: a
// snapshot ends its processes after a dump that left them running, and a connection ended normally
// tells its peer and leaves its port in TIME_WAIT for 60 s; where that port is a listener's, criu
// cannot restore the listener there meanwhile (tests/gpu/reports/mute-criu-local.txt). The
// connections are real ones of this host, in a child process of this runtime: a listener and a
// client connected to it, both ends in the child, as in a job's tree. Needs root (TCP_REPAIR).

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { createInterface } from "node:readline";
import net from "node:net";
import { openCriuEngine } from "../os/criu.ts";
import { portHolders } from "../os/criu_ports.ts";
import { muteConnections } from "../os/mute.ts";
import { ended, fakeCriu, inScratch, pstree, tcpTable } from "./support/fake_criu.ts";
import { loud } from "./fixtures/fake.ts";

const root = process.getuid?.() === 0;
const CHILD = `import net from "node:net";
const server = net.createServer((s) => s.on("data", (d) => s.write(d)));
server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  const client = net.connect(port, "127.0.0.1", () => client.write("x"));
  client.once("data", () => console.log(port + " " + client.localPort));
});`;

/** A child whose one socket is a connection to the listener on the port it is given. */
const CLIENT = `import net from "node:net";
import process from "node:process";
const client = net.connect(Number(process.argv.at(-1)), "127.0.0.1", () => client.write("x"));
client.once("data", () => console.log(client.localPort));`;

/** A child holding a connection to its own listener: its pid and both ports, once connected. */
async function connected(dir: string): Promise<{ pid: number; ports: number[] }> {
  const file = join(dir, "child.mjs");
  writeFileSync(file, CHILD);
  const args = "Deno" in globalThis ? ["run", "-A", file] : [file];
  const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"] });
  const [line] = await createInterface({ input: child.stdout! })[Symbol.asyncIterator]().next()
    .then((r) => [r.value as string]);
  return { pid: child.pid!, ports: line.trim().split(" ").map(Number) };
}

/** Stops `pid`, mutes it or not, kills it, and says what this host then holds on `ports`. */
async function endedHolding(pid: number, ports: number[], end: () => Promise<void>) {
  process.kill(pid, "SIGSTOP");
  await end();
  for (let i = 0; i < 100 && !ended(pid); i++) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 100)); // the kernel's closes of its sockets
  return portHolders(tcpTable(), ports).map((h) => h.state);
}

describe("a dumped tree's connections end silently", { skip: !root && loud("needs root") }, () => {
  test("muted before the kill, a connection leaves no TIME_WAIT; killed as it is, it does", () =>
    inScratch(async (s) => {
      const plain = await connected(s.dir);
      const kill = (pid: number) => () => Promise.resolve(void process.kill(pid, "SIGKILL"));
      const left = await endedHolding(plain.pid, plain.ports, kill(plain.pid));
      assert.ok(left.includes("TIME_WAIT"), `the control: killed as it is, it leaves ${left}`);
      const muted = await connected(s.dir);
      const end = () => muteConnections([muted.pid]).then(kill(muted.pid));
      assert.deepEqual(await endedHolding(muted.pid, muted.ports, end), [], "nothing on its ports");
    }));

  test("a connection that is the process's first socket (a client, its listener elsewhere) is muted too", () =>
    inScratch(async (s) => {
      const peers = new Set<net.Socket>();
      const server = net.createServer((c) => {
        peers.add(c);
        c.on("data", (d) => c.write(d));
      });
      await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening));
      try {
        const file = join(s.dir, "client.mjs");
        writeFileSync(file, CLIENT);
        const port = String((server.address() as net.AddressInfo).port);
        const args = "Deno" in globalThis ? ["run", "-A", file, port] : [file, port];
        const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"] });
        const [line] = await createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
          .next().then((r) => [r.value as string]);
        const end = () =>
          muteConnections([child.pid!]).then(() => void process.kill(child.pid!, "SIGKILL"));
        assert.deepEqual(await endedHolding(child.pid!, [Number(line)], end), [], "nothing left");
      } finally {
        for (const c of peers) c.destroy();
        await new Promise((closed) => server.close(closed));
      }
    }));

  test("criu's engine mutes what a dump with tcpEstablished (or criu's --tcp-established) took, when it kills it, and only that", () =>
    inScratch(async (s) => {
      const { pid, ports } = await connected(s.dir);
      const tree = join(s.dir, "pstree.img"), images = join(s.dir, "tree");
      writeFileSync(tree, pstree([{ pid, ppid: 0, threads: [pid] }]));
      mkdirSync(images, { mode: 0o700 });
      const criuPath = fakeCriu(s.dir, { FAKE_CRIU_PSTREE: tree });
      const engine = openCriuEngine({ criuPath });
      await engine.dump({ root: pid, imagesDir: images, tcpEstablished: true });
      assert.deepEqual(await endedHolding(pid, ports, () => engine.kill([pid])), []);
      // criu's own option, given as one of its arguments, the same.
      const other = await connected(s.dir), extraArgs = ["--tcp-established"];
      writeFileSync(tree, pstree([{ pid: other.pid, ppid: 0, threads: [other.pid] }]));
      const given = openCriuEngine({ criuPath, extraArgs });
      await given.dump({ root: other.pid, imagesDir: images });
      assert.deepEqual(
        await endedHolding(other.pid, other.ports, () => given.kill([other.pid])),
        [],
      );
      // A dump without connections: its processes are killed as they are.
      const plain = await connected(s.dir);
      writeFileSync(tree, pstree([{ pid: plain.pid, ppid: 0, threads: [plain.pid] }]));
      await engine.dump({ root: plain.pid, imagesDir: images });
      const left = await endedHolding(plain.pid, plain.ports, () => engine.kill([plain.pid]));
      assert.ok(left.includes("TIME_WAIT"), `not muted: ${left}`);
    }));
});
