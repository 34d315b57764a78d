// The room check fails closed (issue 22, item 4), on the simulator with the Linux host's records
// in a directory (os/records.ts): a record that cannot be written is said at the suspend (its
// outcome's roomCheck), and records that cannot be read refuse a checked resume and a checked
// restoreSnapshot (a RefusedError, code PREREQUISITE, naming the path and the fault, and saying
// that `checkRoom: false` skips the check), before the driver is asked; `checkRoom: false` still
// skips it. And claims that are not finite, or more than a GPU could hold, block nobody. On the
// code before, each of these either reached the driver (which ran out of memory and lost the
// process), hung on a FIFO, or refused every restore onto the GPU. Runs under `deno test -A` and
// `bun test`; the cases that change a directory's owner need root and skip, saying so, without it.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chownSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import process from "node:process";

import { CudaProcess, RefusedError, restoreSnapshot, snapshot } from "../mod.ts";
import type { ProcessIdentity } from "../core/host.ts";
import type { Machine } from "../core/machine.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { FileHeldRecords } from "../os/records.ts";
import { machineWith } from "./support/forward.ts";
import { hostWith } from "./support/forward.ts";
import { loud } from "./fixtures/fake.ts";
import { plantTrace } from "./support/trace.ts";
import { processDir } from "./support/temp_dirs.ts";

const notRoot = process.getuid?.() === 0
  ? false
  : loud("not root: owners can be changed by root only");

const base = processDir("ckpt-room-closed-"); // removed at the end even where a filter ran none
after(() => rm(base, { recursive: true, force: true }));
let made = 0;

/** A simulated machine whose host keeps its records in the directory `dir` (made on first use). */
function withRecordsIn(sim: SimulatedMachine, dir: string): Machine {
  const host = sim.host;
  const alive = async (p: ProcessIdentity) => {
    const now = await host.identify!(p.pid);
    return now !== undefined && (p.start === undefined || now.start === p.start);
  };
  return machineWith(sim, {
    host: hostWith(host, { heldRecords: new FileHeldRecords(dir, alive) }),
  });
}

/** A 4 GiB process on GPU 0 of a simulated machine whose records are in a fresh directory. */
function setUp() {
  const sim = new SimulatedMachine();
  const dir = join(base, `held-${made++}`);
  const machine = withRecordsIn(sim, dir);
  const target = sim.spawn({ memoryMiB: 4096 });
  const restores = () => sim.driver.calls.filter((c) => c.op === "restore").length;
  return { sim, dir, machine, target, proc: new CudaProcess(target.pid, { machine }), restores };
}

/** The fail-closed refusal: its class and code, the fault it names, and the way to skip it. */
function closedRefusal(err: unknown, fault: RegExp): boolean {
  assert.ok(err instanceof RefusedError, `a RefusedError, got ${err}`);
  assert.equal(err.code, "PREREQUISITE");
  assert.match(err.message, /cannot be checked/);
  assert.match(err.message, fault);
  assert.match(err.message, /checkRoom: false \(cuda-checkpoint --no-room-check\) skips the check/);
  return true;
}

describe("a record store that cannot be written warns at the suspend; unread, it refuses", () => {
  test("the record directory made by another user first", { skip: notRoot }, async () => {
    const { sim, dir, proc, target, restores } = setUp();
    mkdirSync(dir, { mode: 0o700 });
    chownSync(dir, 65534, 65534);
    const suspended = await proc.suspend();
    assert.equal(suspended.state, "checkpointed");
    const warning = suspended.roomCheck;
    assert.ok(warning !== undefined && typeof warning === "object", "the suspend warns");
    assert.match(warning.unknown, /what it held was not recorded/);
    assert.match(warning.unknown, new RegExp(`${dir} belongs to another user \\(uid 65534`));
    const filler = sim.fillGpu(0, { leaveMiB: 1024 });
    await assert.rejects(
      proc.resume(),
      (err) => closedRefusal(err, new RegExp(`${dir} belongs to another user \\(uid 65534`)),
    );
    assert.equal(restores(), 0, "the driver was not asked");
    assert.equal(target.state, "checkpointed");
    assert.equal(target.restoreRefused, false, "the process can still come back");
    filler.exit();
    // checkRoom: false skips the check, as before.
    assert.equal((await proc.resume({ checkRoom: false })).roomCheck, "skipped");
    assert.equal(target.state, "running");
  });

  test("a record that is a FIFO, too large, or not a record: refused, and nothing hangs", {
    timeout: 20_000,
  }, async () => {
    for (const spoil of ["fifo", "large", "garbage"] as const) {
      const { dir, proc, target, restores } = setUp();
      await proc.suspend();
      const file = join(dir, `${target.pid}-${target.start}.json`);
      rmSync(file);
      if (spoil === "fifo") execFileSync("mkfifo", ["-m", "600", file]);
      else writeFileSync(file, spoil === "large" ? " ".repeat(100_000) : "{", { mode: 0o600 });
      const fault = {
        fifo: /is not a regular file/,
        large: /is 100000 bytes, more than it can be \(65536\)/,
        garbage: /cannot be read: not a record of ckpt-cuda-held\/1: it is not JSON/,
      }[spoil];
      await assert.rejects(proc.resume(), (err) => closedRefusal(err, fault), spoil);
      assert.equal(restores(), 0, `${spoil}: the driver was not asked`);
      assert.equal((await proc.resume({ checkRoom: false })).state, "running", spoil);
    }
  });

  test("a checked restoreSnapshot, with records it cannot read", { skip: notRoot }, async () => {
    const { sim, dir, machine, target } = setUp();
    const snap = join(base, `snap-${made++}`);
    await snapshot([target.pid], snap, { machine });
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chownSync(dir, 65534, 65534);
    await assert.rejects(
      restoreSnapshot(snap, { machine }),
      (err) => closedRefusal(err, new RegExp(`${dir} belongs to another user`)),
    );
    assert.equal(sim.process(target.pid), undefined, "criu made nothing");
    await restoreSnapshot(snap, { machine, checkRoom: false });
    assert.equal(sim.process(target.pid)?.state, "running");
  });
});

describe("claims that are not finite amounts block nobody", () => {
  test("in the records directory: 1e400 (Infinity once parsed) and more than a GPU holds", async () => {
    const { sim, dir, proc, target } = setUp();
    await proc.suspend();
    // A live process's record with a claim by a live program (both simulated processes).
    const other = sim.spawn({ memoryMiB: 16 });
    const gpu = sim.gpus[0].uuid;
    for (const amount of ["1e400", "1e300", "-5"]) {
      writeFileSync(
        join(dir, `${other.pid}-${other.start}.json`),
        `{"format":"ckpt-cuda-held/1","process":{"pid":${other.pid},"start":${other.start}},` +
          `"heldMiB":{},"at":1,"claim":{"needMiB":{"${gpu}":${amount}},` +
          `"by":{"pid":${other.pid},"start":${other.start}},"since":1}}\n`,
        { mode: 0o600 },
      );
      const back = await proc.resume();
      assert.equal(back.roomCheck, "checked", amount);
      assert.equal(target.state, "running");
      await proc.suspend();
    }
  });

  test("in a host's own records (in memory): an Infinity claim is left out", async () => {
    const sim = new SimulatedMachine();
    const target = sim.spawn({ memoryMiB: 4096 });
    const other = sim.spawn({ memoryMiB: 16 });
    const proc = new CudaProcess(target.pid, { machine: sim });
    await proc.suspend();
    const id = { pid: other.pid, start: other.start };
    await sim.heldRecords.put({
      process: id,
      heldMiB: {},
      at: 1,
      claim: { needMiB: { [sim.gpus[0].uuid]: Infinity }, by: id, since: 1 },
    });
    assert.equal((await proc.resume()).roomCheck, "checked");
  });
});

describe("cuda-checkpoint --no-room-check", () => {
  test("a toggle refused for records it cannot read goes ahead with --no-room-check", async () => {
    const { dir, machine, target, restores } = setUp();
    const { cli } = await import("./cli_support.ts");
    assert.equal((await cli(["--toggle", "--pid", target.pid], { machine })).code, 0);
    const file = join(dir, `${target.pid}-${target.start}.json`);
    writeFileSync(file, "{", { mode: 0o600 });
    const refused = await cli(["--toggle", "--pid", target.pid, "--json"], { machine });
    assert.equal(refused.code, 1);
    const error = JSON.parse(refused.out).error;
    assert.equal(error.code, "PREREQUISITE");
    assert.match(error.detail, /cannot be checked.*cuda-checkpoint --no-room-check\) skips/);
    assert.equal(restores(), 0, "the driver was not asked");
    const forced = await cli(["--toggle", "--pid", target.pid, "--no-room-check", "--json"], {
      machine,
    });
    assert.equal(forced.code, 0, forced.err);
    assert.equal(JSON.parse(forced.out).state, "running");
  });

  test("taken by restore and toggle operations and restore-snapshot only", async () => {
    const { parseCommandLine } = await import("../cli/args.ts");
    assert.equal(
      (parseCommandLine(["restore-snapshot", "/s", "--no-room-check"]) as { checkRoom?: boolean })
        .checkRoom,
      false,
    );
    assert.equal(
      (parseCommandLine(["--action", "restore", "--pid", "5", "--no-room-check"]) as {
        checkRoom?: boolean;
      }).checkRoom,
      false,
    );
    assert.throws(
      () => parseCommandLine(["--action", "lock", "--pid", "5", "--no-room-check"]),
      /--no-room-check is only valid with --action restore, --toggle, restore-snapshot and recover/,
    );
    assert.throws(
      () => parseCommandLine(["snapshot", "--pid", "5", "/s", "--no-room-check"]),
      /snapshot takes no --no-room-check/,
    );
  });
});

describe("recover, with records it cannot read", () => {
  test("refused, naming the way round; with checkRoom: false (--no-room-check) it resumes", async () => {
    const { dir, machine, target, restores, proc } = setUp();
    await proc.suspend();
    writeFileSync(join(dir, `${target.pid}-${target.start}.json`), "{", { mode: 0o600 });
    const snap = join(base, `trace-${made++}`);
    plantTrace(snap, [{ pid: target.pid, start: target.start }]);
    const { recoverSnapshot } = await import("../snapshot.ts");
    await assert.rejects(
      recoverSnapshot(snap, { machine }),
      /could be resumed: .*cannot be checked.*--no-room-check\) skips the check; in-progress\.json is kept/,
    );
    assert.equal(restores(), 0, "the driver was not asked");
    const { cli } = await import("./cli_support.ts");
    const r = await cli(["recover", snap, "--no-room-check"], { machine });
    assert.equal(r.code, 0, r.err);
    assert.equal(await proc.state(), "running");
  });
});
