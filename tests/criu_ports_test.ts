// Ports a restore needs, held on this host (os/criu_ports.ts; files.img read by os/criu_images.ts).
// A connection a listener accepted and closed holds the listener's port in TIME_WAIT for 60 s
// (NCCL's ranks close their first ones as they start), and criu could not restore a listener
// without SO_REUSEADDR within that minute ("Can't bind inet socket ... Address already in use":
// tests/gpu/reports/nccl-job-h200x2-session7.txt). Before criu runs, the restore reads what the
// tree's TCP sockets bind from its files.img (written here as criu writes it), asks the kernel
// whether each can be bound, and where not ends the TIME_WAITs (root), waits out what else no
// process holds (a FIN_WAIT2 whose process closed it), or refuses a port a socket holds now. criu
// is the stand-in of tests/fixtures/fake_criu.sh; the sockets holding the ports are real ones of
// this host: listening, in TIME_WAIT, or in FIN_WAIT2.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import process from "node:process";
import { openCriuEngine } from "../os/criu.ts";
import { boundPorts } from "../os/criu_images.ts";
import { portHolders } from "../os/criu_ports.ts";
import { EngineError, type RestoreRequest } from "../core/engine.ts";
import {
  bytes,
  criuImage,
  fakeCriu,
  inScratch,
  num,
  tcpTable,
  varint,
} from "./support/fake_criu.ts";
import { loud } from "./fixtures/fake.ts";

const LOCALHOST = 0x0100007f; // 127.0.0.1 as the kernel's word, as /proc/net/tcp prints it

/** An inet socket's `file_entry` (type 4), its `inet_sk_entry` in field 4; src_addr packed or not. */
function inetSk(
  o: {
    proto: number;
    port: number;
    dst?: number;
    addr: number[];
    packed?: boolean;
    v6only?: boolean;
  },
) {
  const addr = o.packed ? bytes(11, o.addr.flatMap(varint)) : o.addr.flatMap((w) => num(11, w));
  const sk = [
    ...num(1, 7), // id
    ...num(2, 4242), // ino
    ...num(3, 2), // AF_INET
    ...num(4, 1), // SOCK_STREAM
    ...num(5, o.proto),
    ...num(6, o.dst ? 1 : 10), // ESTABLISHED, LISTEN
    ...num(7, o.port),
    ...num(8, o.dst ?? 0),
    ...num(9, 2), // flags
    ...num(10, 128), // backlog
    ...addr,
    ...bytes(13, num(1, 0)), // fown
    ...bytes(14, [...num(1, 16384), ...num(2, 131072), ...num(7, 1)]), // opts: reuseaddr
    ...(o.v6only ? num(15, 1) : []),
  ];
  return [...num(1, 4), ...num(2, 7), ...bytes(4, sk)];
}

/** A files.img of `entries`. */
const filesImg = (entries: number[][]): Uint8Array => criuImage(0x56303138, entries);

/** A listening socket of this host on a port of its choosing; it ends each connection first. */
async function listening(first = true): Promise<{ port: number; close(): Promise<void> }> {
  const server = net.createServer((s) => first ? s.end() : s.resume());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  return { port, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** Waits till this host shows `port` in TIME_WAIT. */
async function timeWaitOn(port: number): Promise<number> {
  for (let i = 0; i < 100; i++) {
    if (portHolders(tcpTable(), [port]).some((h) => h.state === "TIME_WAIT")) return port;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`port ${port} never showed in TIME_WAIT`);
}

/**
 * A port this host holds in TIME_WAIT from a connection whose client closed first: the client's
 * own port, which no SO_REUSEADDR allows binding again (as NCCL's listeners' ports).
 */
async function clientTimeWait(): Promise<number> {
  const server = await listening(false);
  const client = net.connect(server.port, "127.0.0.1");
  await new Promise((resolve) => client.once("connect", resolve));
  const port = client.localPort!;
  client.end();
  client.resume();
  await new Promise((resolve) => client.once("close", resolve));
  await server.close();
  return await timeWaitOn(port);
}

/** How long an orphan in FIN_WAIT2 holds its port here (net.ipv4.tcp_fin_timeout; 60 s by default). */
const FIN_S = Number(readFileSync("/proc/sys/net/ipv4/tcp_fin_timeout", "utf8"));

/** Whether this process may end others' sockets (CAP_NET_ADMIN, bit 12 of its effective set). */
const NET_ADMIN =
  (BigInt(`0x${/CapEff:\s*([0-9a-f]+)/.exec(readFileSync("/proc/self/status", "utf8"))![1]}`) >>
      12n & 1n) === 1n;

/**
 * A port this host holds in FIN_WAIT2 for {@link FIN_S}: a client's, which its process closed while
 * the listener's end stays open (no process holds it, and it is no TIME_WAIT, which the restore
 * ends). It is in FIN_WAIT1 first, for as long as the listener takes to answer its FIN.
 */
async function finWait2(): Promise<{ port: number; close(): Promise<void> }> {
  const accepted: net.Socket[] = [];
  const server = net.createServer({ allowHalfOpen: true }, (s) => accepted.push(s.resume()));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
  await new Promise((resolve) => client.once("connect", resolve));
  const port = client.localPort!;
  client.end();
  client.destroy();
  const there = () =>
    portHolders(tcpTable(), [port]).some((h) => h.state === "FIN_WAIT2" && h.leftMs! > 1000);
  for (let i = 0; i < 100 && !there(); i++) await new Promise((resolve) => setTimeout(resolve, 20));
  if (!there()) throw new Error(`port ${port} never showed in FIN_WAIT2`);
  const close = async () => {
    accepted.forEach((s) => s.destroy());
    await new Promise((resolve) => server.close(resolve));
  };
  return { port, close };
}

/** A port in TIME_WAIT from a connection a listener accepted and closed first (its SO_REUSEADDR). */
async function listenerTimeWait(): Promise<number> {
  const server = await listening();
  const client = net.connect(server.port, "127.0.0.1");
  client.resume();
  await new Promise((resolve) => client.once("close", resolve));
  await server.close();
  return await timeWaitOn(server.port);
}

/**
 * A stand-in criu, and images whose files.img has `listeners` listening sockets on `port` at
 * 127.0.0.1 (more than one: SO_REUSEPORT's, as each NCCL rank's RAS listener on 28028).
 */
function setUp(dir: string, port: number, listeners = 1, others: number[] = []) {
  const record = join(dir, "record");
  const sk = (port: number) => inetSk({ proto: 6, port, addr: [LOCALHOST] });
  writeFileSync(
    join(dir, "files.img"),
    filesImg([...Array(listeners).fill(sk(port)), ...others.map(sk)]),
  );
  const vars = { FAKE_CRIU_RECORD: record, FAKE_CRIU_ROOT: "4242" };
  const engine = openCriuEngine({ criuPath: fakeCriu(dir, vars) });
  const ran = () => existsSync(record) && readFileSync(record, "utf8").includes("arg restore");
  // As a restore asks the engine: whether the tree can come back here, then to restore it.
  const back = (r: RestoreRequest) => engine.ready!(r).then(() => engine.restore(r));
  /** Refused before criu ran, for the sockets open on `port`, named as `holders`. */
  const refusedFor = async (holders: string) => {
    const err = await back({ root: 4242, imagesDir: dir }).catch((e) => e);
    assert.ok(err instanceof EngineError, String(err));
    const said = `sockets open on this host hold ports the tree of 4242 binds: ${port} ` +
      `(${holders}): end what holds them, or restore where they are free`;
    assert.equal(err.message, said);
    assert.ok(!ran(), "criu did not run");
  };
  return { back, ran, refusedFor, images: dir };
}

describe("ports a restore needs", () => {
  test("files.img: what its TCP sockets bind that are no connection, src_addr packed or not", () => {
    const img = filesImg([
      inetSk({ proto: 6, port: 29502, addr: [0, 0, 0, 0], packed: true }), // listening on ::
      inetSk({ proto: 6, port: 56311, addr: [0x020200c0] }), // listening on 192.0.2.2
      inetSk({ proto: 6, port: 29503, addr: [0, 0, 0, 1 << 24], v6only: true }), // ::1, v6 only
      inetSk({ proto: 6, port: 56311, dst: 60166, addr: [0x020200c0] }), // a connection
      inetSk({ proto: 17, port: 5353, addr: [0] }), // UDP
      [...num(1, 1), ...num(2, 9), ...bytes(3, num(1, 9))], // a regular file
    ]);
    assert.deepEqual(boundPorts(img), [
      { port: 29502, addr: [0, 0, 0, 0] },
      { port: 56311, addr: [0x020200c0] },
      { port: 29503, addr: [0, 0, 0, 1 << 24], v6only: true },
    ]);
    assert.throws(() => boundPorts(img.subarray(0, img.length - 3)), /cut short/);
    assert.throws(() => boundPorts(new Uint8Array(16)), /does not start with criu's files magic/);
  });

  test("this host's sockets on a port (/proc/net/tcp): open ones, and those no process holds with the time they may hold it yet", async () => {
    const table = [
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
      "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4154 1",
      "   1: 0100007F:1F90 0100007F:D43C 01 00000000:00000000 02:000AFC2B 00000000     0        0 4160 1",
      "   2: 0100007F:1F90 0100007F:D43D 06 00000000:00000000 03:00001612 00000000     0        0 0 3",
      "   3: 0100007F:1F90 0100007F:D43E 05 00000000:00000000 03:00000BB8 00000000     0        0 0 3",
      "   4: 0100007F:1F90 0100007F:D43F 09 00000000:00000000 01:00000014 00000000     0        0 0 3",
      "   5: 0100007F:1F91 0100007F:D440 01 00000000:00000000 00:00000000 00000000     0        0 4170 1",
    ].join("\n");
    const ends = (peer: string) => ["0100007F:1F90", `0100007F:${peer}`] as const;
    assert.deepEqual(portHolders(table, [8080]), [
      { port: 8080, state: "LISTEN", ends: ["0100007F:1F90", "00000000:0000"] },
      { port: 8080, state: "ESTABLISHED", ends: ends("D43C") },
      { port: 8080, state: "TIME_WAIT", ends: ends("D43D"), leftMs: 56_500 },
      { port: 8080, state: "FIN_WAIT2", ends: ends("D43E"), leftMs: 30_000 }, // an orphan, on the time-wait timer
      { port: 8080, state: "LAST_ACK", ends: ends("D43F"), leftMs: 1000 }, // an orphan: looked at again
    ]);
    const server = await listening();
    try {
      const [held, ...more] = portHolders(tcpTable(), [server.port]);
      assert.deepEqual(more, [], "one socket holds it");
      assert.equal(held.state, "LISTEN");
      assert.equal(parseInt(held.ends[0].split(":")[1], 16), server.port);
    } finally {
      await server.close();
    }
    const port = await clientTimeWait();
    const [held, ...more] = portHolders(tcpTable(), [port]);
    assert.deepEqual(more, [], "one socket holds it");
    assert.equal(held.state, "TIME_WAIT");
    assert.ok(held.leftMs! > 40_000 && held.leftMs! <= 60_000, `at most 60 s: ${held.leftMs}`);
  });

  test("a port nobody holds: criu runs at once", () =>
    inScratch(async (s) => {
      const free = await listening();
      await free.close();
      const { back, ran, images } = setUp(s.dir, free.port);
      await back({ root: 4242, imagesDir: images, onWait: () => assert.fail("a wait") });
      assert.ok(ran(), "criu ran");
    }));

  test("two listeners of the tree on one port (SO_REUSEPORT): criu runs at once, as it binds both", () =>
    inScratch(async (s) => {
      const free = await listening();
      await free.close();
      const { back, ran, images } = setUp(s.dir, free.port, 2);
      const onWait = (_ms: number, why: string) => assert.fail(`a wait: ${why}`);
      await back({ root: 4242, imagesDir: images, timeoutMs: 5000, onWait });
      assert.ok(ran(), "criu ran");
    }));

  test("a port a listener with SO_REUSEPORT holds (as NCCL's RAS on 28028): criu runs, as it binds with SO_REUSEPORT too", () =>
    inScratch(async (s) => {
      const server = net.createServer();
      const options = { host: "127.0.0.1", port: 0, reusePort: true };
      await new Promise<void>((resolve) => server.listen(options, resolve));
      try {
        const port = (server.address() as net.AddressInfo).port;
        const { back, ran, images } = setUp(s.dir, port);
        await back({ root: 4242, imagesDir: images, timeoutMs: 5000 });
        assert.ok(ran(), "criu ran");
      } finally {
        await new Promise((resolve) => server.close(resolve));
      }
    }));

  test("a port a listening socket holds now: refused before criu runs, naming the port and its holder", () =>
    inScratch(async (s) => {
      const server = await listening();
      try {
        const { back, ran, refusedFor, images } = setUp(s.dir, server.port);
        await refusedFor("LISTEN");
        // A tree with a network namespace of its own binds nothing of this host's.
        writeFileSync(join(s.dir, "netns-9.img"), "");
        await back({ root: 4242, imagesDir: images });
        assert.ok(ran(), "criu ran");
      } finally {
        await server.close();
      }
    }));

  test("a port a listener on ::1 holds (an IPv6 address, four words): refused as an IPv4 one is", {
    skip:
      !readFileSync("/proc/net/if_inet6", "utf8").includes("00000000000000000000000000000001") &&
      loud("this host has no ::1"),
  }, () =>
    inScratch(async (s) => {
      const server = net.createServer();
      await new Promise<void>((resolve) => server.listen({ port: 0, host: "::1" }, resolve));
      const port = (server.address() as net.AddressInfo).port;
      try {
        const { refusedFor } = setUp(s.dir, port);
        // ::1 as the kernel's four 32-bit words, v6 only, as criu writes a listener on it.
        const sk = inetSk({ proto: 6, port, addr: [0, 0, 0, 1 << 24], v6only: true });
        writeFileSync(join(s.dir, "files.img"), filesImg([sk]));
        await refusedFor("LISTEN");
      } finally {
        await new Promise((resolve) => server.close(resolve));
      }
    }));

  test("a port a listener and the connections it accepted hold: each state named once, with its count", () =>
    inScratch(async (s) => {
      const server = await listening(false);
      const clients = [0, 1].map(() => net.connect(server.port, "127.0.0.1"));
      try {
        await Promise.all(clients.map((c) => new Promise((resolve) => c.once("connect", resolve))));
        await setUp(s.dir, server.port).refusedFor("LISTEN, ESTABLISHED x2");
      } finally {
        clients.forEach((c) => c.destroy());
        await server.close();
      }
    }));

  test(
    "a port in FIN_WAIT2 longer than the restore has left: at once, an error that says for how long",
    {
      skip: FIN_S < 10 && loud(`tcp_fin_timeout is ${FIN_S} s here, not beyond a restore of 5 s`),
    },
    () =>
      inScratch(async (s) => {
        const held = await finWait2();
        try {
          const { back, ran, images } = setUp(s.dir, held.port);
          const t0 = performance.now();
          const err = await back({ root: 4242, imagesDir: images, timeoutMs: 5000 })
            .catch((e) => e);
          assert.ok(err instanceof EngineError, String(err));
          const said =
            /binds port [0-9]+, which this host holds in FIN_WAIT2 for ([0-9]+) s more, beyond the [0-5] s the restore had left: give it a longer timeout, or restore again in [0-9]+ s/;
          assert.match(err.message, said);
          const more = Number(said.exec(err.message)![1]);
          assert.ok(more > FIN_S - 20 && more <= FIN_S, `the rest of ${FIN_S} s: ${more}`);
          assert.ok(performance.now() - t0 < 4000, "it did not wait");
          assert.ok(!ran(), "criu did not run");
        } finally {
          await held.close();
        }
      }),
  );

  test(
    "a port in FIN_WAIT2 that ends 1 s before the restore's time is up: refused, as the kernel's timers may end it 2 s late",
    {
      skip: FIN_S < 10 && loud(`tcp_fin_timeout is ${FIN_S} s here, too short to wait for`),
    },
    () =>
      inScratch(async (s) => {
        const held = await finWait2();
        try {
          const { back, ran, images } = setUp(s.dir, held.port);
          const left = portHolders(tcpTable(), [held.port])[0].leftMs!;
          const abort = new AbortController();
          const err = await back({
            root: 4242,
            imagesDir: images,
            timeoutMs: left + 1000,
            signal: abort.signal,
            onWait: () => abort.abort(), // a wait would be the wrong answer: ended at once
          }).catch((e) => e);
          assert.ok(err instanceof EngineError, String(err));
          assert.match(
            err.message,
            /binds port [0-9]+, which this host holds in FIN_WAIT2 for [0-9]+ s more, beyond the [0-9]+ s the restore had left/,
          );
          assert.ok(!ran(), "criu did not run");
        } finally {
          await held.close();
        }
      }),
  );

  test("a TIME_WAIT left by a listener with SO_REUSEADDR (as Node's, Deno's and Bun's): criu runs at once, as the kernel lets it bind", () =>
    inScratch(async (s) => {
      const { back, ran, images } = setUp(s.dir, await listenerTimeWait());
      await back({ root: 4242, imagesDir: images, onWait: () => assert.fail("a wait") });
      assert.ok(ran(), "criu ran");
    }));

  test(
    "a port in TIME_WAIT (as NCCL's ranks leave on their listeners'): ended, told as a wait of 0 ms, and criu runs at once",
    {
      skip: !NET_ADMIN && loud("needs CAP_NET_ADMIN (SOCK_DESTROY)"),
    },
    () =>
      inScratch(async (s) => {
        const port = await clientTimeWait();
        const { back, ran, images } = setUp(s.dir, port);
        const told: [number, string][] = [];
        // Waited out, the minute would go beyond these 5 s: refused at once.
        const onWait = (ms: number, why: string) => void told.push([ms, why]);
        await back({ root: 4242, imagesDir: images, timeoutMs: 5000, onWait });
        const said = `port ${port} held in TIME_WAIT on this host: ended rather than waited for`;
        assert.deepEqual(told, [[0, said]]);
        assert.ok(ran(), "criu ran");
        assert.deepEqual(portHolders(tcpTable(), [port]), [], "no TIME_WAIT left on it");
      }),
  );

  test("a TIME_WAIT the restore may not end (no CAP_NET_ADMIN): waited for, as before", {
    skip: (process.getuid?.() !== 0 || !existsSync("/usr/bin/setpriv")) &&
      loud("needs root and setpriv, to run a restore without CAP_NET_ADMIN"),
  }, () =>
    inScratch(async (s) => {
      const port = await clientTimeWait();
      const { images } = setUp(s.dir, port);
      // The check in a child of this runtime that lacks the capability, stopped at its first wait.
      const child = join(s.dir, "child.ts"),
        ports = new URL("../os/criu_ports.ts", import.meta.url);
      writeFileSync(
        child,
        `import { portsFree } from ${JSON.stringify(ports.href)};
const abort = new AbortController(), told = [];
const onWait = (ms, why) => { told.push([ms, why]); abort.abort(); };
const request = { root: 4242, imagesDir: ${JSON.stringify(images)}, signal: abort.signal, onWait };
const error = await portsFree(request).then(() => "", (e) => e.message);
console.log(JSON.stringify({ told, error }));`,
      );
      const runtime = "Deno" in globalThis ? [process.execPath, "run", "-A"] : [process.execPath];
      const drop = ["--bounding-set=-net_admin", "--inh-caps=-net_admin", "--"];
      const out = execFileSync("/usr/bin/setpriv", [...drop, ...runtime, child], {
        encoding: "utf8",
      });
      const { told, error } = JSON.parse(out) as { told: [number, string][]; error: string };
      assert.equal(told.length, 1, out);
      assert.ok(
        told[0][0] > 40_000 && told[0][0] <= 61_000,
        `the rest of the minute: ${told[0][0]}`,
      );
      assert.equal(told[0][1], `port ${port} held in TIME_WAIT on this host`);
      assert.match(error, /was stopped while it waited for port [0-9]+ held in TIME_WAIT/);
      assert.equal(portHolders(tcpTable(), [port])[0]?.state, "TIME_WAIT", "still there");
    }));

  test("a port in FIN_WAIT2 within the time left: the wait is told, and stopped by an abort, saying why", () =>
    inScratch(async (s) => {
      const held = await finWait2(), port = held.port;
      const { back, ran, images } = setUp(s.dir, port);
      const abort = new AbortController();
      const told: [number, string][] = [];
      const err = await back({
        root: 4242,
        imagesDir: images,
        signal: abort.signal,
        onWait: (ms, why) => {
          told.push([ms, why]);
          setTimeout(() => abort.abort(), 100);
        },
      }).catch((e) => e);
      await held.close();
      assert.equal(told.length, 1);
      const rest = told[0][0];
      assert.ok(
        rest > (FIN_S - 20) * 1000 && rest <= FIN_S * 1000 + 1000,
        `the rest of it: ${rest}`,
      );
      assert.equal(told[0][1], `port ${port} held in FIN_WAIT2 on this host`);
      assert.ok(err instanceof EngineError, String(err));
      const stopped = `the restore of the tree of 4242 was stopped while it waited for port ` +
        `${port} held in FIN_WAIT2 on this host`;
      assert.equal(err.message, stopped);
      assert.ok(!ran(), "criu did not run");
    }));

  test("two ports in FIN_WAIT2: the wait names both, as ports", () =>
    inScratch(async (s) => {
      const held = [await finWait2(), await finWait2()];
      const { back, images } = setUp(s.dir, held[0].port, 1, [held[1].port]);
      const abort = new AbortController();
      const told: string[] = [];
      const onWait = (_ms: number, why: string) => void (told.push(why), abort.abort());
      const err = await back({ root: 4242, imagesDir: images, signal: abort.signal, onWait })
        .catch((e) => e);
      await Promise.all(held.map((h) => h.close()));
      const ports = `ports ${held[0].port}, ${held[1].port}`;
      assert.deepEqual(told, [`${ports} held in FIN_WAIT2 on this host`]);
      assert.match(String(err), new RegExp(`waited for ${ports} held in FIN_WAIT2`));
    }));
});
