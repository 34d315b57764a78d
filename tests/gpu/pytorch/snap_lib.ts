/**
 * `snapshot` and `restoreSnapshot` through the library, with more options for criu than the
 * command line takes: tests/gpu/pytorch.sh runs it for the case that needs criu's
 * `--tcp-established` (an open TCP connection, both ends in the snapshot) with a network lock the
 * machine has (`--network-lock=skip` where it has neither iptables nor nft), which only
 * `openMachine({ criu: { extraArgs } })` can say.
 *
 *   snap_lib.ts snapshot --dir DIR --pid P[,P...] [--job] [--criu-arg=ARG]...
 *   snap_lib.ts restore --dir DIR [--device-map OLD=NEW,...] [--criu-arg=ARG]...
 *
 * Run as root, with this runtime (Deno: `deno run -A`; Bun: `bun`, or our compiled binary with
 * `BUN_BE_BUN=1`), criu found as the library finds it (`CKPT_CRIU_PATH`). Prints one JSON line as
 * `cuda-checkpoint --json` does: `ok`, `ms`, `bytes` (a snapshot's images), `pids` (a restore's),
 * `timings` (suspendMs and dumpMs; checkMs, restoreMs and resumeMs), or `error` {message, code};
 * exits 1 on a failure, 2 on a usage error.
 */
import process from "node:process";
import { parseArgs } from "node:util";
import { restoreSnapshot, snapshot } from "../../../mod.ts";
import type { SnapshotEvent } from "../../../snapshot.ts";
import { openMachine } from "../../../driver.ts";

const usage = "usage: snap_lib.ts snapshot --dir DIR --pid P[,P...] [--job] [--criu-arg=ARG]...\n" +
  "       snap_lib.ts restore --dir DIR [--device-map OLD=NEW,...] [--criu-arg=ARG]...";

let parsed;
try {
  parsed = parseArgs({
    args: process.argv.slice(2),
    allowPositionals: true,
    options: {
      dir: { type: "string" },
      pid: { type: "string", multiple: true },
      job: { type: "boolean" },
      "device-map": { type: "string" },
      "criu-arg": { type: "string", multiple: true },
    },
  });
} catch (error) {
  console.error(`${error instanceof Error ? error.message : error}\n${usage}`);
  process.exit(2);
}
const { values, positionals } = parsed;
const op = positionals[0];
if ((op !== "snapshot" && op !== "restore") || !values.dir || positionals.length !== 1) {
  console.error(usage);
  process.exit(2);
}
const pids = (values.pid ?? []).flatMap((p) => p.split(",")).map(Number);
if (op === "snapshot" && (pids.length === 0 || pids.some((p) => !Number.isSafeInteger(p)))) {
  console.error(`snapshot needs --pid with whole numbers\n${usage}`);
  process.exit(2);
}

const extraArgs = values["criu-arg"] ?? [];
let code = 0;
try {
  await using machine = await openMachine({ criu: { extraArgs } });
  if (op === "snapshot") {
    const made = await snapshot(pids, values.dir, { machine, job: values.job ?? false });
    const m = made.manifest;
    print({
      ok: true,
      operation: "snapshot",
      dir: made.dir,
      ms: Math.round(made.ms),
      bytes: m.files.reduce((sum, f) => sum + f.bytes, 0),
      timings: { suspendMs: Math.round(m.timings.suspendMs), dumpMs: Math.round(m.timings.dumpMs) },
      processes: m.trees.flatMap((t) => t.processes.map((p) => ({ pid: p.pid, cuda: !!p.cuda }))),
      criuArgs: extraArgs,
    });
  } else {
    // GPU UUID pairs, as the command line's --device-map (tests/gpu/nccl_job.sh swaps two GPUs).
    const pairs = (values["device-map"] ?? "").split(",").filter(Boolean).map((p) => p.split("="));
    const gpuMapping = pairs.length > 0 ? Object.fromEntries(pairs) : undefined;
    const waits: string[] = []; // the restore's waits before criu runs (a port in TIME_WAIT)
    const onProgress = (e: SnapshotEvent) =>
      e.type === "wait" && waits.push(`${e.ms} ms: ${e.why}`);
    const back = await restoreSnapshot(values.dir, { machine, gpuMapping, onProgress });
    print({
      ok: true,
      operation: "restore-snapshot",
      dir: back.dir,
      ms: Math.round(back.ms),
      pids: back.pids,
      gpuMapping: back.gpuMapping,
      waits,
      timings: {
        checkMs: Math.round(back.timings.checkMs),
        restoreMs: Math.round(back.timings.restoreMs),
        resumeMs: Math.round(back.timings.resumeMs),
      },
      criuArgs: extraArgs,
    });
  }
} catch (error) {
  const e = error as { message?: string; code?: unknown; detail?: unknown };
  print({
    ok: false,
    operation: op,
    error: { message: e.message ?? String(error), code: e.code ?? null, detail: e.detail ?? null },
    criuArgs: extraArgs,
  });
  code = 1;
}
process.exit(code);

function print(value: unknown): void {
  console.log(JSON.stringify(value));
}
