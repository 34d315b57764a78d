// The compiled `cuda-checkpoint` (dist/cuda-checkpoint, built by `bash cli/build.sh`, which
// .ci/check runs first): the same key lines as the in-process tests, on the simulated machine of a
// temporary state file (--simulate, CKPT_SIM_STATE) and, where a C compiler is, on the fake libcuda,
// where several pids make the native driver start its worker threads inside the binary. Skips,
// loudly, when the binary has not been built. Runs under `deno test -A` and `bun test`.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { execFile } from "node:child_process";
import process from "node:process";
import { join } from "node:path";

import { VERSION } from "../core/version.ts";
import {
  assertPrinted,
  BINARY,
  binaryBuilt,
  type Exited,
  HELP_FIRST_LINE,
  runProgram,
} from "./cli_support.ts";
import { FakeDir, loud, noCompiler } from "./fixtures/fake.ts";
import { processDir } from "./support/temp_dirs.ts";

const skip = binaryBuilt
  ? false
  : loud(`${BINARY} is not built: run \`bash cli/build.sh\` (.ci/check does, before the tests)`);
// Made only where the tests run: Deno runs no after() hook of a file whose tests all skip.
const dir = skip ? "" : processDir("ckpt-cli-binary-");
const state = join(dir, "machine.json");
const fakes = skip || noCompiler ? undefined : new FakeDir();
const fake = fakes?.build("libcuda_binary") ?? "";
after(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  fakes?.remove();
});

/** Runs the binary with CKPT_SIM_STATE set to this file's state file (and more environment). */
function binary(args: (string | number)[], env: Record<string, string> = {}): Promise<Exited> {
  return runProgram(BINARY, args, { CKPT_SIM_STATE: state, ...env });
}

describe("the compiled cuda-checkpoint", { skip }, () => {
  test("-h names --action and exits 0; --version is deno.json's", async () => {
    const help = await binary(["-h"]);
    assert.equal(help.code, 0);
    assert.ok(help.out.startsWith(HELP_FIRST_LINE));
    assert.ok(help.out.includes("--action"));
    assertPrinted(await binary(["--version"]), `cuda-checkpoint (@ckpt/cuda) ${VERSION}\n`);
  });

  test("bad input: NVIDIA's line, then the help on stderr; exit 1", async () => {
    const r = await binary(["--get-state", "--pid", "abc"]);
    assert.equal(r.code, 1);
    assert.equal(r.out, "");
    assert.ok(r.err.startsWith(`pid must be a non-negative integer\n\n${HELP_FIRST_LINE}\n`));
  });

  test("an unknown option: getopt's line, named as the program was run, as NVIDIA's", async () => {
    const r = await binary(["--get-state", "--pid", 5, "--bogus"]);
    assert.equal(r.code, 1);
    assert.ok(
      r.err.startsWith(
        `${BINARY}: unrecognized option '--bogus'\n` +
          `Invalid option(s) or option(s) not supported by this CUDA Driver\n\n${HELP_FIRST_LINE}\n`,
      ),
      r.err,
    );
  });

  test("--simulate: spawn, state, restore thread, toggle, list, kill, across runs", async () => {
    const spawned = await binary([
      "--simulate",
      "spawn",
      "--memory-mib",
      256,
      "--command",
      "train",
    ]);
    assert.equal(spawned.code, 0, spawned.err);
    assert.match(spawned.out, /^[0-9]+\n$/);
    const pid = Number.parseInt(spawned.out);
    assertPrinted(await binary(["--simulate", "--get-state", "--pid", pid]), "running\n");
    const tid = await binary(["--simulate", "--get-restore-tid", "--pid", pid]);
    assert.match(tid.out, /^[0-9]+\n$/);
    assertPrinted(await binary(["--simulate", "--toggle", "--pid", pid]), "");
    assert.equal((await binary(["--simulate", "--get-state", "-p", pid])).out, "checkpointed\n");
    const list = await binary(["--simulate", "list"]);
    assert.match(list.out, new RegExp(`^${pid} +checkpointed +[0-9]+ +0 MiB +train$`, "m"));
    assert.equal((await binary(["--simulate", "kill", pid])).code, 0);
    const gone = await binary(["--simulate", "--get-state", "--pid", pid]);
    assert.equal(gone.code, 1);
    assert.equal(
      gone.err,
      `Error getting process state for process ID ${pid}: "OS call failed or operation not supported on this OS"\n`,
    );
    assert.equal((await binary(["--simulate", "reset"])).code, 0);
  });

  test("it reads no .env or bunfig.toml from the working directory (it runs as root)", {
    skip: noCompiler,
  }, async () => {
    // Bun's compiled programs read both by default: a .env could name the libcuda loaded, and a
    // bunfig.toml a script run before ours. Here each would load or run a planted file.
    const here = join(dir, "planted-cwd");
    mkdirSync(here);
    const library = fakes!.build("planted", ["-DPLANTED"], join(here, "planted.so"));
    writeFileSync(join(here, ".env"), `CKPT_LIBCUDA_PATH=${library}\n`);
    writeFileSync(join(here, "first.js"), `require("fs").writeFileSync("preload-ran", "");\n`);
    writeFileSync(join(here, "bunfig.toml"), `preload = ["./first.js"]\n`);
    const env: Record<string, string | undefined> = { ...process.env, CKPT_SIM_STATE: state };
    delete env.CKPT_LIBCUDA_PATH;
    const err = await new Promise<string>((resolve) =>
      execFile(
        BINARY,
        ["--get-state", "--pid", "4242"],
        { cwd: here, env },
        (...r) => resolve(String(r[2])),
      )
    );
    assert.equal(existsSync(join(here, "planted-library-ran")), false, `.env was read: ${err}`);
    assert.equal(existsSync(join(here, "preload-ran")), false, "bunfig.toml's preload ran");
  });

  test("on the fake libcuda: one pid, and several at once on the driver's worker threads", {
    skip: noCompiler,
  }, async () => {
    const env = { CKPT_LIBCUDA_PATH: fake };
    assertPrinted(await binary(["--get-state", "--pid", 4242], env), "running\n");
    assertPrinted(
      await binary(["--toggle", "--pid", "4242,4252,4262"], env),
      "4242 done checkpointed\n4252 done checkpointed\n4262 done checkpointed\n",
    );
  });
});
