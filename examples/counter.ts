/**
 * The counter of NVIDIA's cuda-checkpoint README, in TypeScript: an integer that lives in GPU
 * memory, starting at 100; every request received makes a kernel add 1 to it, and the new value
 * is sent back. A program to checkpoint from outside (examples/counter_criu.ts does, with CRIU).
 *
 *   npx deno run -A examples/counter.ts              UDP on 127.0.0.1:10000, as NVIDIA's counter
 *   npx deno run -A examples/counter.ts --unix /tmp/counter.sock
 *   npx deno run -A examples/counter.ts --ask        a client: prints the answer (101, 102, ...)
 *   echo hello | nc -u -W 1 127.0.0.1 10000          or NVIDIA's client; --unix: nc -U PATH
 *   npx bun examples/counter.ts ...                  the same on Bun
 *
 * `--unix PATH` serves a unix-domain socket instead of UDP: criu 4.1 cannot dump a process that
 * holds an inet socket on some kernels (6.18), while it dumps a listening unix socket. It is a
 * *stream* socket, one connection per request (send a line, read the answer, close), because
 * datagrams over unix sockets work on neither runtime's portable API: `node:dgram` knows only
 * `udp4`/`udp6`, Deno has `Deno.listenDatagram({ transport: "unixpacket" })` only behind
 * `--unstable-net`, and Bun has none. `node:net` serves unix stream sockets on both.
 *
 * On a machine with an NVIDIA driver the counter is a CUDA program: a 4-byte GPU buffer and the
 * `increment` kernel (PTX, compiled by the driver). Elsewhere it says so and keeps the integer
 * in the memory of a process of the simulated driver, inside this program.
 */

import { createSocket } from "node:dgram";
import { lstatSync, unlinkSync } from "node:fs";
import { connect, createServer } from "node:net";
import process from "node:process";
import { openCudaContext } from "./cuda.ts";
import { KERNEL_NAMES, KERNELS_PTX } from "./_kernels.ts";
import {
  chooseMachine,
  type ExampleMachine,
  type ExampleSpec,
  intOption,
  messageOf,
  parseExampleArgs,
  usageError,
} from "./_support.ts";

const SPEC: ExampleSpec = {
  file: "counter.ts",
  about: `
NVIDIA's counter: an integer in GPU memory, starting at 100, that a kernel increments for every
request; the new value is the answer. UDP on 127.0.0.1:PORT, or a unix stream socket (--unix).
With --ask, a client instead: sends one request and prints the answer.`,
  options: {
    port: { type: "string", value: "N", default: "10000", help: "UDP port on 127.0.0.1" },
    unix: { type: "string", value: "PATH", help: "serve a unix stream socket at PATH instead" },
    device: { type: "string", value: "N", default: "0", help: "the GPU to use (its ordinal)" },
    ask: { type: "boolean", help: "be a client: send one request, print the answer" },
  },
};

/** The value the counter starts at, as in NVIDIA's counter.cu. */
export const COUNTER_START = 100;

/** Where a counter listens: a UDP port on 127.0.0.1, or a unix stream socket. */
export type CounterAddress = { readonly port: number } | { readonly unix: string };

/** The counter's integer in GPU memory, and how to increment it. */
export interface CounterGpu {
  /** The pid of the process whose GPU memory holds the integer (a simulated one on the simulator). */
  readonly pid: number;
  /** Where it is, for the ready line: `NVIDIA H200 (GPU 0)`. */
  readonly where: string;
  /** Runs the kernel, copies the integer back, and resolves to it. */
  increment(): Promise<number>;
  close(): void;
}

/** A counter that is serving. */
export interface RunningCounter {
  /** What it listens on, as text: `udp 127.0.0.1:10000` or `unix /tmp/counter.sock`. */
  readonly address: string;
  /** The UDP port it got (with port 0, the one the system chose); undefined for unix. */
  readonly port?: number;
  /** Stops serving (the GPU side is the caller's). */
  close(): Promise<void>;
}

/**
 * The integer in GPU memory: on a GPU, in this process (a CUDA context, 4 bytes, the `increment`
 * kernel; every call on this thread); on the simulator, in a simulated process.
 */
export async function counterGpu(here: ExampleMachine, device = 0): Promise<CounterGpu> {
  if (here.kind === "simulated") {
    const sim = here.machine;
    if (!sim.gpus[device]) {
      throw new Error(`--device ${device}: the simulated machine has no GPU ${device}`);
    }
    const target = sim.spawn({ memoryMiB: 2, gpu: device, command: "counter.ts (simulated)" });
    const start = new Uint8Array(4);
    new DataView(start.buffer).setUint32(0, COUNTER_START, true);
    await target.write(0, start);
    return {
      pid: target.pid,
      where: `${sim.gpus[device].name} (GPU ${device}) of a simulated machine inside this program`,
      async increment() {
        await target.launch(0.01); // the kernel; blocks while the process is locked or checkpointed
        const bytes = await target.read(0, 4);
        const view = new DataView(bytes.buffer, bytes.byteOffset);
        view.setUint32(0, view.getUint32(0, true) + 1, true);
        await target.write(0, bytes);
        return view.getUint32(0, true);
      },
      close: () => target.exit(),
    };
  }
  const ctx = await openCudaContext({ driver: here.machine.driver, device });
  const cell = ctx.alloc(4);
  const start = new Uint8Array(4);
  new DataView(start.buffer).setUint32(0, COUNTER_START, true);
  ctx.upload(cell, start);
  const { increment } = ctx.loadModule(KERNELS_PTX, KERNEL_NAMES);
  return {
    pid: process.pid,
    where: `${ctx.device.name} (GPU ${ctx.device.ordinal})`,
    increment() {
      // Like NVIDIA's counter: launch, then copy back (the copy waits for the kernel). While this
      // process is locked or checkpointed by another program, these calls block until it resumes.
      ctx.launch(increment, 1, 1, [{ u64: cell }]);
      const bytes = ctx.download(cell, 0, 4);
      return Promise.resolve(new DataView(bytes.buffer).getUint32(0, true));
    },
    close() {
      ctx.free(cell);
      ctx.close();
    },
  };
}

/**
 * Serves the counter at `address`: each request (a UDP datagram, or a connection's first data on
 * the unix socket) increments it, and the new value goes back as `<value>\n`. Requests are
 * answered one at a time, in order. A stale socket file at the unix path is replaced; any other
 * file there is an error.
 */
export async function serveCounter(
  gpu: CounterGpu,
  address: CounterAddress,
  onRequest: (value: number) => void = () => {},
): Promise<RunningCounter> {
  let queue: Promise<unknown> = Promise.resolve();
  const next = () => {
    const value = queue.then(() => gpu.increment());
    queue = value.catch(() => {});
    return value.then((v) => {
      onRequest(v);
      return v;
    });
  };
  if ("unix" in address) {
    removeStaleSocket(address.unix);
    const server = createServer((conn) => {
      conn.once("data", () => {
        next().then((v) => conn.end(`${v}\n`), (e) => conn.destroy(e));
      });
      conn.on("error", () => {});
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(address.unix, () => resolve());
    });
    return {
      address: `unix ${address.unix}`,
      close: () => new Promise((resolve) => server.close(() => resolve())),
    };
  }
  const socket = createSocket("udp4");
  socket.on("message", (_msg, peer) => {
    next().then((v) => socket.send(`${v}\n`, peer.port, peer.address), () => {});
  });
  await new Promise<void>((resolve, reject) => {
    socket.once("error", reject);
    socket.bind(address.port, "127.0.0.1", () => resolve());
  });
  const port = socket.address().port;
  return {
    address: `udp 127.0.0.1:${port}`,
    port,
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}

/** Sends one request to a counter and resolves to its answer (the new value), within `timeoutMs`. */
export function askCounter(address: CounterAddress, timeoutMs = 30_000): Promise<number> {
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (error: Error | undefined, text?: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      close();
      const value = Number(text?.trim());
      if (error) reject(error);
      else if (!Number.isInteger(value)) {
        reject(new Error(`the counter answered ${JSON.stringify(text)}`));
      } else resolve(value);
    };
    const timer = setTimeout(
      () => finish(new Error(`the counter did not answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
    let close = () => {}; // set once there is something to close (a bad address throws first)
    try {
      if ("unix" in address) {
        let text = "";
        const conn = connect(address.unix, () => conn.write("hello\n"));
        close = () => conn.destroy();
        conn.setEncoding("utf8");
        conn.on("data", (chunk) => text += chunk);
        conn.on("end", () => finish(undefined, text));
        conn.on("error", (e) => finish(e));
      } else {
        const socket = createSocket("udp4");
        close = () => socket.close();
        socket.on("message", (msg) => finish(undefined, msg.toString()));
        socket.on("error", (e) => finish(e));
        socket.send("hello\n", address.port, "127.0.0.1");
      }
    } catch (error) {
      finish(error instanceof Error ? error : new Error(String(error)));
    }
  });
}

/** How long `--ask` waits: long enough for a resume of a few GiB, short enough to say why. */
const ASK_TIMEOUT_MS = 5_000;

function removeStaleSocket(path: string): void {
  let stat;
  try {
    stat = lstatSync(path);
  } catch {
    return; // nothing there
  }
  if (!stat.isSocket()) throw new Error(`${path} exists and is not a socket; not replacing it`);
  unlinkSync(path);
}

async function main(): Promise<void> {
  const args = parseExampleArgs(SPEC);
  const device = intOption(SPEC, args, "device", 0, 1023);
  const unix = args.values.unix as string | undefined;
  if (unix === "") usageError(SPEC, `--unix must be a socket's path, got ""`);
  // 0 serves on a port the system picks; a request goes to a port of its own.
  const lowest = args.values.ask ? 1 : 0;
  const address: CounterAddress = unix !== undefined
    ? { unix }
    : { port: intOption(SPEC, args, "port", lowest, 65535) };
  if (args.values.ask) {
    try {
      console.log(await askCounter(address, ASK_TIMEOUT_MS));
    } catch (error) {
      const where = "unix" in address ? `--unix ${address.unix}` : `--port ${address.port}`;
      // Over UDP a missing counter and a suspended one look the same: no answer.
      console.error(
        `counter.ts --ask: ${messageOf(error)}. Is a counter running (npx deno run -A ` +
          `examples/counter.ts ${where}) and not suspended? A suspended one answers once resumed.`,
      );
      process.exitCode = 1;
    }
    return;
  }
  let here: ExampleMachine;
  let gpu: CounterGpu;
  let server: RunningCounter;
  try {
    here = await chooseMachine(args, {
      what: "the counter lives in the memory of a simulated process, inside this program",
    });
    for (const note of here.notes) console.log(note);
    gpu = await counterGpu(here, device);
    server = await serveCounter(gpu, address, (v) => console.log(`request: counter is now ${v}`));
  } catch (error) {
    console.error(`counter.ts: ${messageOf(error)}`);
    process.exit(1);
  }
  console.log(
    `counter ready: pid ${process.pid}, ${server.address}, value ${COUNTER_START} in GPU memory ` +
      `on ${gpu.where}`,
  );
  if (here.kind === "simulated") {
    // Its simulated machine is this program's own: no other program can reach it, and a pid
    // that `cuda-checkpoint --simulate` knows is a process of the state file's machine instead.
    console.log(
      "No other program can checkpoint this counter: its simulated machine lives inside this " +
        "program, and cuda-checkpoint --simulate works on a machine of its own (its state file), " +
        "whose processes are others, whatever their pids. Checkpointing the counter from outside " +
        "needs a GPU; examples/snapshot.ts runs the whole cycle on the simulator.",
    );
  }
  const stop = async () => {
    await server.close();
    gpu.close();
    await here.close();
    process.exit(0);
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

if (import.meta.main) await main();
