// Every stop reaches criu (issue 22, item 5): the request's deadline (`timeoutMs`) and abort signal
// bound the criu run. A criu that overstays is ended (SIGTERM, then SIGKILL after a grace), its
// child processes are killed and waited for, a dump's processes are sent SIGCONT (criu may have
// left them stopped), and the error says what it left. With criu stand-ins that hang (no real criu
// needed): on the code before, each of these runs waited for the stand-in's `sleep` to end. Every
// test has a timeout and leaves no process behind. Runs under `deno test -A` and `bun test`.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import process from "node:process";
import { setTimeout as delay } from "node:timers/promises";
import { openCriuEngine } from "../os/criu.ts";
import { runBounded } from "../os/bounded_run.ts";
import { EngineError } from "../core/engine.ts";
import {
  ended,
  endedWithin,
  fakeCriu,
  inScratch,
  scratch,
  settlesWithin,
  stateOf,
} from "./support/fake_criu.ts";
import { criuLeftoversRemovedAfter, WORK_BASE, WORK_MINE } from "./support/temp_dirs.ts";

criuLeftoversRemovedAfter();

/**
 * A criu that answers `--version` and `check`, and otherwise hangs: its child `sleep` writes its
 * pid to `pids` (for a restore, a process it "made"); with `stubborn`, it ignores SIGTERM.
 */
function hangingCriu(dir: string, pids: string, stubborn = false): string {
  const body = `case $1 in
  --version) echo "Version: 4.1.1"; exit 0 ;;
  check) echo "Looks good."; exit 0 ;;
esac
${stubborn ? "trap '' TERM\n" : ""}sleep 300 &
echo $! >> '${pids}'
wait
`;
  return fakeCriu(dir, {}, { body, name: stubborn ? "criu-stubborn" : "criu" });
}

/** The pids the stand-in wrote. */
function pidsIn(file: string): number[] {
  try {
    return readFileSync(file, "utf8").trim().split("\n").filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** A process to stand for the dumped tree, and its end. */
function aTree() {
  const child = spawn("sleep", ["300"], { stdio: "ignore" });
  const exited = new Promise((r) => child.once("exit", r));
  return {
    pid: child.pid!,
    async end() {
      child.kill("SIGKILL");
      assert.ok(await settlesWithin(exited, 5000), "the stand-in tree ended");
    },
  };
}

/** A hanging criu (`hangingCriu`) in `s`, the engine that runs it, and the file of its pids. */
function hangingEngine(s: { dir: string }, stubborn = false) {
  const pids = join(s.dir, "pids");
  return { pids, engine: openCriuEngine({ criuPath: hangingCriu(s.dir, pids, stubborn) }) };
}

/**
 * A dump's stage: a scratch directory with a hanging criu's engine (`hangingEngine`), a process
 * standing for the tree (`aTree`) and its images folder (mode 0700); `body` runs on it, and the
 * tree is ended and the directory removed after, however it ends.
 */
async function withTreeToDump(
  stubborn: boolean,
  body: (
    t: ReturnType<typeof hangingEngine> & { tree: ReturnType<typeof aTree>; images: string },
  ) => Promise<void>,
): Promise<void> {
  const s = scratch();
  const tree = aTree();
  try {
    const images = join(s.dir, `tree-${tree.pid}`);
    mkdirSync(images, { mode: 0o700 });
    await body({ ...hangingEngine(s, stubborn), tree, images });
  } finally {
    await tree.end();
    s.done();
  }
}

/** Waits (a second at most) until `pid` is stopped (state T), or, with `stopped` false, is not. */
async function untilStopped(pid: number, stopped: boolean): Promise<void> {
  for (let i = 0; i < 100 && (stateOf(pid) === "T") !== stopped; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The rejection of `run`, and how long it took in ms. */
async function timedRejection(run: Promise<unknown>): Promise<{ err: unknown; ms: number }> {
  const t0 = Date.now();
  const err = await run.then(() => undefined, (e) => e);
  return { err, ms: Date.now() - t0 };
}

describe("a criu that overstays is ended, and what it left is said", () => {
  test("a dump past its deadline: SIGTERM, its child killed, the tree sent SIGCONT", {
    timeout: 30_000,
  }, () =>
    withTreeToDump(false, async ({ tree, pids, engine, images }) => {
      // As criu may leave it: stopped.
      process.kill(tree.pid, "SIGSTOP");
      await untilStopped(tree.pid, true);
      assert.equal(stateOf(tree.pid), "T", "the tree is stopped before the dump");
      const { err, ms } = await timedRejection(
        engine.dump({ root: tree.pid, imagesDir: images, timeoutMs: 300 }),
      );
      assert.ok(err instanceof EngineError, String(err));
      assert.ok(ms < 300 + 5000, `ended within the bound: ${ms} ms`);
      const left = pidsIn(pids);
      assert.equal(left.length, 1, "criu's child was seen");
      assert.match(
        err.message,
        new RegExp(
          `^criu dump of the tree of ${tree.pid} was ended after \\d+ ms \\(its deadline of ` +
            `300 ms passed\\): criu ended on SIGTERM; its child processes \\(${left[0]}\\) were ` +
            `killed; the tree's processes \\(${tree.pid}\\) were sent SIGCONT, in case criu had ` +
            `left them stopped \\(log: .*/dump-${tree.pid}\\.log\\)$`,
        ),
      );
      rmSync(err.log!, { force: true }); // the failed dump's log, kept
      assert.deepEqual(await endedWithin(left, 2000), [], "no child of criu is left");
      assert.notEqual(stateOf(tree.pid), "T", "the tree runs again");
    }));

  test("an aborted dump of a criu that ignores SIGTERM: SIGKILL after the grace", {
    timeout: 30_000,
  }, () =>
    withTreeToDump(true, async ({ tree, pids, engine, images }) => {
      const stop = new AbortController();
      setTimeout(() => stop.abort(), 200);
      const { err, ms } = await timedRejection(
        engine.dump({ root: tree.pid, imagesDir: images, signal: stop.signal }),
      );
      assert.ok(err instanceof EngineError, String(err));
      assert.ok(ms >= 2000 && ms < 200 + 2000 + 5000, `SIGKILL after the 2 s grace: ${ms} ms`);
      assert.match(
        (err as Error).message,
        /was ended after \d+ ms \(it was aborted\): criu outlived SIGTERM and was killed with SIGKILL 2000 ms later; its child processes \(\d+\) were killed/,
      );
      assert.deepEqual(await endedWithin(pidsIn(pids), 2000), [], "no child of criu is left");
    }));

  test("a restore past its deadline: the processes it had made are killed", {
    timeout: 30_000,
  }, () =>
    inScratch(async (s) => {
      const { pids, engine } = hangingEngine(s);
      const { err, ms } = await timedRejection(
        engine.restore({ root: 4242, imagesDir: s.dir, timeoutMs: 300 }),
      );
      assert.ok(err instanceof EngineError, String(err));
      assert.ok(ms < 300 + 5000, `ended within the bound: ${ms} ms`);
      const made = pidsIn(pids);
      assert.match(
        err.message,
        new RegExp(
          `^criu restore of the tree of 4242 was ended after \\d+ ms \\(its deadline of 300 ms ` +
            `passed\\): criu ended on SIGTERM; the processes it had made \\(${made[0]}\\) were ` +
            `killed \\(log: .*/restore-4242\\.log\\)$`,
        ),
      );
      assert.deepEqual(await endedWithin(made, 2000), [], "nothing it made is left");
      // Its log is kept beside the work directories, for the error to name; the test's own.
      rmSync((err as EngineError).log!, { force: true });
    }));

  test(
    "a signal aborted before the run starts no criu",
    { timeout: 10_000 },
    () =>
      inScratch(async (s) => {
        const { pids, engine } = hangingEngine(s);
        const images = join(s.dir, "tree-7");
        mkdirSync(images, { mode: 0o700 });
        const signal = AbortSignal.abort();
        // Nor makes a work directory, which nothing would remove (criu is found first).
        const [base, mine] = [WORK_BASE, WORK_MINE];
        const ours = () =>
          (existsSync(base) ? readdirSync(base) : []).filter((n) => n.startsWith(mine)).sort();
        const had = ours();
        await assert.rejects(
          engine.dump({ root: 7, imagesDir: images, signal }),
          /the dump of the tree of 7 was stopped before criu ran/,
        );
        await assert.rejects(
          engine.restore({ root: 7, imagesDir: images, signal }),
          /the restore of the tree of 7 was stopped before criu ran/,
        );
        assert.deepEqual(pidsIn(pids), [], "criu never ran");
        assert.deepEqual(ours(), had, "no work directory made");
      }),
  );

  test("what it starts while it is being ended is ended with it (its process group)", {
    timeout: 30_000,
  }, () =>
    inScratch(async (s) => {
      // A run that forks a child every 2 ms: those forked after the ending read /proc were left
      // running before (1-3 of them, each run).
      const pids = join(s.dir, "forked");
      const forks =
        `trap 'exit 0' TERM; while :; do sleep 300 & echo $! >> ${pids}; sleep 0.002; done`;
      const result = await runBounded("/bin/bash", ["-c", forks], { PATH: "/usr/bin:/bin" }, {
        timeoutMs: 300,
      });
      assert.equal(result.ended?.why, "deadline");
      const forked = pidsIn(pids);
      assert.ok(forked.length > 10, `it forked ${forked.length}`);
      for (let i = 0; i < 50 && forked.some((p) => !ended(p)); i++) await delay(100);
      const left = forked.filter((p) => !ended(p));
      for (const p of left) process.kill(p, "SIGKILL");
      assert.deepEqual(left, [], "none left running");
    }));

  test("a dump that ends by itself is not touched by its deadline afterwards", {
    timeout: 10_000,
  }, () =>
    inScratch(async (s) => {
      const engine = openCriuEngine({ criuPath: fakeCriu(s.dir, { FAKE_CRIU_EXIT: "1" }) });
      const err = await engine.dump({ root: 7, imagesDir: s.dir, timeoutMs: 60_000 })
        .catch((e) => e);
      assert.match(err.message, /criu dump of the tree of 7 failed \(exit 1\)/);
    }));

  test("a run that exits while it is being ended is not signalled: its pid may be another's", {
    timeout: 10_000,
  }, async () => {
    // The deadline passes at once; while the processes it worked on are read (a second here),
    // the program exits by itself and is reaped: its pid is free, and no signal may go to it.
    const sent: unknown[][] = [];
    const kill = process.kill;
    process.kill = ((...args: Parameters<typeof process.kill>) => {
      sent.push(args);
      return kill.apply(process, args);
    }) as typeof process.kill;
    try {
      const result = await runBounded("sleep", ["0.2"], { PATH: "/usr/bin:/bin" }, {
        timeoutMs: 10,
        worksOn: () => new Promise((r) => setTimeout(() => r([]), 1000)),
      });
      assert.equal(result.ended?.why, "deadline");
      assert.equal(result.ended?.killed, false);
      assert.deepEqual(sent, [], "no signal sent after the program was reaped");
    } finally {
      process.kill = kill;
    }
  });
});

describe("criu does not outlive this program", () => {
  test(
    "exiting (a second Ctrl-C's exit) ends the criu under way and its child, and the tree goes on (issue 29, item 13g)",
    {
      timeout: 30_000,
    },
    () =>
      withTreeToDump(false, async ({ tree, images }) => {
        const dir = dirname(images);
        const pids = join(dir, "criu-pids");
        const body = `case $1 in --version) echo "Version: 4.1.1"; exit 0 ;; check) exit 0 ;; esac
echo $$ >> '${pids}'
sleep 300 &
echo $! >> '${pids}'
wait
`;
        const criu = fakeCriu(dir, {}, { body, name: "criu-waits" });
        process.kill(tree.pid, "SIGSTOP"); // as criu may leave it
        await untilStopped(tree.pid, true);
        const program = join(import.meta.dirname!, "fixtures", "criu_exit.ts");
        const args = [program, criu, images, String(tree.pid), pids];
        const run = spawnSync(
          process.execPath,
          "Deno" in globalThis ? ["run", "-A", ...args] : args,
          {
            encoding: "utf8",
            timeout: 20_000,
          },
        );
        assert.equal(run.status, 130, `${run.stdout}${run.stderr}`);
        const [criuPid, child] = pidsIn(pids);
        const left = await endedWithin([criuPid, child], 3000);
        for (const p of left) process.kill(p, "SIGKILL"); // the test leaves nothing behind
        assert.deepEqual(left, [], "criu and its child ended with the program");
        await untilStopped(tree.pid, false);
        assert.notEqual(stateOf(tree.pid), "T", "the tree was sent SIGCONT");
      }),
  );
});

describe("a bounded run's session", () => {
  test(
    "criu runs in a session of its own: a terminal's Ctrl-C or hangup reaches this program, not it",
    {
      timeout: 20_000,
    },
    async () => {
      const sessionOf = (stat: string) =>
        Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[3]);
      const result = await runBounded("/bin/sh", ["-c", "cat /proc/self/stat"], {
        PATH: "/usr/bin:/bin",
      });
      assert.equal(result.code, 0, result.stderr);
      const mine = sessionOf(readFileSync("/proc/self/stat", "utf8"));
      const its = sessionOf(result.stdout);
      assert.ok(Number.isInteger(its) && its > 0, `its session: ${result.stdout}`);
      assert.notEqual(its, mine, "not this program's session");
    },
  );
});

describe("what a bounded run gives back", () => {
  const PATH = { PATH: "/usr/bin:/bin" };

  test("the end of a long output: its last 64 KiB, as an error's last lines are criu's", async () => {
    const out = "head -c 70000 /dev/zero | tr '\\0' a; echo END";
    const result = await runBounded("/bin/sh", ["-c", out], PATH);
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout.length, 64 * 1024);
    assert.ok(
      result.stdout.endsWith("aaaEND\n"),
      `ends ${JSON.stringify(result.stdout.slice(-8))}`,
    );
  });

  test("a program a signal ended (not the bound): exit code 128, and no ending of the run's", async () => {
    const result = await runBounded("/bin/sh", ["-c", "kill -KILL $$"], PATH);
    assert.deepEqual(result, { code: 128, stdout: "", stderr: "" });
  });

  test("a signal aborted before the run: nothing starts, and the run is said ended", () =>
    inScratch(async (s) => {
      const ran = join(s.dir, "ran");
      const result = await runBounded("/bin/sh", ["-c", `echo yes > '${ran}'`], PATH, {
        signal: AbortSignal.abort(),
      });
      assert.equal(result.code, 128);
      assert.equal(result.ended?.why, "aborted");
      assert.ok(!existsSync(ran), "the program never ran");
    }));

  test("a child that keeps the output open does not hold the run once the program exits", {
    timeout: 20_000,
  }, () =>
    inScratch(async (s) => {
      const pidFile = join(s.dir, "pid");
      const run = runBounded(
        "/bin/sh",
        ["-c", `sleep 300 & echo $! > '${pidFile}'; echo ok`],
        PATH,
      );
      try {
        assert.ok(await settlesWithin(run, 10_000), "the run settles while its child lives");
        const result = await run;
        assert.deepEqual([result.code, result.stdout], [0, "ok\n"]);
      } finally {
        for (const p of pidsIn(pidFile)) if (!ended(p)) process.kill(p, "SIGKILL");
      }
    }));
});

describe("a run that cannot be ended", () => {
  test("a signal refused (EPERM) rejects the run, saying so, rather than leave it pending", {
    timeout: 20_000,
  }, async () => {
    const kill = process.kill;
    let child: number | undefined;
    process.kill = ((pid: number, signal?: string | number) => {
      if (signal === "SIGTERM") {
        child = pid;
        throw Object.assign(new Error(`kill EPERM ${pid}`), { code: "EPERM" });
      }
      return kill.call(process, pid, signal);
    }) as typeof process.kill;
    try {
      const run = runBounded("sleep", ["1"], { PATH: "/usr/bin:/bin" }, { timeoutMs: 10 });
      assert.ok(await settlesWithin(run.catch(() => {}), 10_000), "the run settles");
      await assert.rejects(run, /kill EPERM/);
    } finally {
      process.kill = kill;
      if (child !== undefined && !ended(child)) kill.call(process, child, "SIGKILL");
    }
  });
});

describe("wake", () => {
  test("the criu engine's wake lets a stopped process go on; one gone is no error", {
    timeout: 20_000,
  }, async () => {
    const sleeper = spawn("sleep", ["10"], { stdio: "ignore" });
    const exit = new Promise((r) => sleeper.once("exit", r));
    try {
      const pid = sleeper.pid!;
      process.kill(pid, "SIGSTOP");
      await untilStopped(pid, true);
      assert.equal(stateOf(pid), "T", "stopped first (a check of this test)");
      const done = spawn("true");
      await new Promise((r) => done.once("exit", r));
      await openCriuEngine({ criuPath: "/nonexistent/criu" }).wake!([pid, done.pid!]);
      await untilStopped(pid, false);
      assert.notEqual(stateOf(pid), "T", "it goes on");
    } finally {
      sleeper.kill("SIGKILL");
      await exit;
    }
  });
});
