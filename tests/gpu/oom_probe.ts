/**
 * What the real driver does after a restore that ran out of GPU memory (the soak's `oom` step
 * found that the retry fails with 304 once the GPU is free again). One run, raw driver calls, every
 * answer printed; needs two GPUs of the same chip:
 *
 *   deno run -A tests/gpu/oom_probe.ts <target binary>
 *
 * A. GPU 0 filled, restore in place: OOM; then getState, the restore thread id, the target's GPU
 *    memory; the filler exits; restore in place again, after 0 s and 5 s; restore onto GPU 1 with
 *    a device map; what NVIDIA's utility says (if /tmp/ckpt/nvidia/cuda-checkpoint is there).
 * B. GPU 1 filled, restore onto it with a device map: OOM; then restore in place on GPU 0 (free).
 * Then whether each target still answers, and whether SIGKILL ends it.
 */

import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import process from "node:process";
import { openMachine } from "../../driver.ts";
import type { RestoreArgs } from "../../core/driver.ts";
import { parseGpuUuid } from "../../core/options.ts";
import { startTarget, type TargetProcess } from "./native_env.ts";

const targetPath = process.argv[2];
if (!targetPath) {
  console.error("usage: oom_probe.ts <target binary>");
  process.exit(2);
}
const { driver } = await openMachine();
const started: TargetProcess[] = [];
const gpus = smi("index,uuid,memory.free").map((l) => l.split(", "));
console.log("GPUs:", JSON.stringify(gpus));
if (gpus.length < 2) {
  console.log("SKIP: needs two GPUs");
  process.exit(0);
}
const uuid = (i: number) => parseGpuUuid(gpus[i][1]);
const map = (from: number, to: number): RestoreArgs => ({
  gpuPairs: gpus.map((_, i) => ({
    oldUuid: uuid(i),
    newUuid: uuid(i === from ? to : i === to ? from : i),
  })),
});

function smi(query: string): string[] {
  return execFileSync("nvidia-smi", [`--query-gpu=${query}`, "--format=csv,noheader,nounits"], {
    encoding: "utf8",
  }).trim().split("\n");
}
function apps(): string {
  return execFileSync("nvidia-smi", [
    "--query-compute-apps=pid,gpu_uuid,used_memory",
    "--format=csv,noheader,nounits",
  ], { encoding: "utf8", timeout: 15_000 }).trim().replace(/\n/g, " | ");
}
function name(code: number): string {
  return `${code} ${driver.errorName(code) ?? "?"}`;
}
function alive(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(" ")[2];
  } catch {
    return "gone";
  }
}
async function state(pid: number): Promise<string> {
  const s = await driver.getState(pid);
  const t = await driver.getRestoreThreadId(pid);
  return `getState ${name(s.code)} value ${s.value}; restoreTid ${
    name(t.code)
  } value ${t.value}; /proc state ${alive(pid)}`;
}
async function timed(what: string, run: () => Promise<number>): Promise<number> {
  const t0 = performance.now();
  const code = await run();
  console.log(`${what}: ${name(code)} in ${Math.round(performance.now() - t0)} ms`);
  return code;
}
function nvidiaUtility(args: string[]): void {
  const bin = "/tmp/ckpt/nvidia/cuda-checkpoint";
  if (!existsSync(bin)) return;
  const r = spawnSync(bin, args, { encoding: "utf8", timeout: 30_000 });
  console.log(
    `NVIDIA's ${args.join(" ")}: exit ${r.status} out ${JSON.stringify(r.stdout)} err ${
      JSON.stringify(r.stderr)
    }`,
  );
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function scenario(
  label: string,
  fillGpu: number,
  args: RestoreArgs | null,
  retries: [string, RestoreArgs | null][],
) {
  console.log(`\n== ${label}`);
  const t = await startTarget(targetPath, "cuda", 1024);
  started.push(t);
  console.log(`target ${t.pid}, ready hash ${t.readyHash}; ${apps()}`);
  await timed("lock", () => driver.lock(t.pid, null));
  await timed("checkpoint", () => driver.checkpoint(t.pid));
  const free = Number(smi("memory.free")[fillGpu]);
  const filler = await startTarget(targetPath, "fill", Math.max(0, free - 1200), fillGpu);
  console.log(
    `filler ${filler.pid} on GPU ${fillGpu}; free now ${smi("memory.free").join(", ")} MiB`,
  );
  await timed(
    `restore ${args ? "with a device map" : "in place"} onto the full GPU`,
    () => driver.restore(t.pid, args),
  );
  console.log(`after: ${await state(t.pid)}; apps: ${apps()}`);
  await filler.exit();
  await sleep(500);
  console.log(`filler gone; free ${smi("memory.free").join(", ")} MiB; ${await state(t.pid)}`);
  for (const [what, a] of retries) {
    if (what === "wait") {
      await sleep(5000);
      continue;
    }
    if (what === "nvidia") {
      nvidiaUtility(["--action", "restore", "--pid", String(t.pid)]);
      nvidiaUtility(["--get-state", "--pid", String(t.pid)]);
      continue;
    }
    const code = await timed(what, () => driver.restore(t.pid, a));
    console.log(`  then: ${await state(t.pid)}`);
    if (code === 0) {
      await timed("unlock", () => driver.unlock(t.pid));
      const hash = await t.memoryHash().catch((e) => `no answer: ${e}`);
      console.log(
        `  memory hash ${hash} (ready ${t.readyHash}) ${
          hash === t.readyHash ? "INTACT" : "DIFFERENT"
        }`,
      );
      break;
    }
  }
  const answer = await t.ask("hash", 5000).catch((e) => `no answer: ${e.message}`);
  console.log(`the target answers "hash" with: ${answer}`);
}

try {
  await scenario("A: GPU 0 full, restore in place", 0, null, [
    ["restore in place, GPU 0 free again", null],
    ["wait", null],
    ["restore in place after 5 s", null],
    ["nvidia", null],
    ["restore onto GPU 1 with a device map", map(0, 1)],
    ["restore in place, third try", null],
  ]);
  await scenario("B: GPU 1 full, restore onto it with a device map", 1, map(0, 1), [
    ["restore in place on GPU 0 (free)", null],
    ["restore onto GPU 1 again, now free", map(0, 1)],
  ]);
} catch (err) {
  console.log(`probe stopped: ${err instanceof Error ? err.stack : err}`);
} finally {
  for (const t of started) {
    const t0 = performance.now();
    const killed = await Promise.race([
      t.exit().then(() => "ended"),
      sleep(10_000).then(() => "still there after 10 s"),
    ]);
    console.log(`SIGKILL target ${t.pid}: ${killed} (${Math.round(performance.now() - t0)} ms)`);
  }
  try {
    console.log(execFileSync("sh", ["-c", "dmesg | tail -8"], { encoding: "utf8" }));
  } catch { /* no dmesg */ }
  process.exit(0);
}
