// What the package may do on a machine where it runs as root (checkpointing needs root, or
// CAP_SYS_PTRACE over the target): nothing in the published files builds a shell command or
// starts a shell, and a caller without the privilege gets an error that says what is needed. The
// other guards are proven where they are built (tests/ffi_process_test.ts: no libcuda from the
// current directory; tests/sim_state_test.ts: a private state file). docs/RELIABILITY.md,
// "Security", says all this for users. Runs under `deno test -A` and `bun test`.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

import { CudaError, CudaProcess } from "../mod.ts";
import { CUDA_ERROR_OPERATING_SYSTEM } from "../core/driver.ts";
import { SimulatedMachine } from "../mock/mod.ts";
import { forward } from "./support/forward.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** The files `deno publish` ships: deno.json's publish.include, less publish.exclude. */
function publishedFiles(): string[] {
  const config = JSON.parse(readFileSync(join(ROOT, "deno.json"), "utf8"));
  const { include, exclude } = config.publish as { include: string[]; exclude: string[] };
  const excluded = (path: string) =>
    exclude.some((e) =>
      path === e.replace(/\/$/, "") || path.startsWith(e.endsWith("/") ? e : `${e}/`)
    );
  const files: string[] = [];
  const walk = (path: string) => {
    if (excluded(path)) return;
    const full = join(ROOT, path);
    if (statSync(full).isDirectory()) {
      for (const name of readdirSync(full)) walk(join(path, name));
    } else {
      files.push(path);
    }
  };
  for (const entry of include) walk(entry.replace(/\/$/, ""));
  return files;
}

describe("no shell", () => {
  const code = publishedFiles().filter((f) => /\.(ts|js|mjs|cjs)$/.test(f));

  test("the published files are found (the check below looks at something)", () => {
    for (const f of ["mod.ts", "core/process.ts", "cli/main.ts", "os/criu.ts", "mock/mod.ts"]) {
      assert.ok(code.includes(f), `${f} is published: ${code.join(", ")}`);
    }
    assert.ok(!code.some((f) => f.startsWith("tests/")), "tests are not published");
  });

  test("nothing published starts a shell or builds a command line from a string", () => {
    const forbidden: [RegExp, string][] = [
      [/\bshell\s*:(?!\s*false\b)/, "a shell option (shell: true, or any value but false)"],
      [/\bexecSync\s*\(|\bexec\s*\(\s*[`'"]/, "child_process exec with a command string"],
      [/\bDeno\.run\s*\(/, "Deno.run"],
      [
        /["'`]\/bin\/(ba|z|da)?sh["'`]|["'`](ba|z|da)?sh["'`]\s*,\s*\[?\s*["'`]-[a-z]*c[a-z]*["'`]/,
        "a shell -c",
      ],
      [/\bBun\.\$|\$`/, "Bun's shell"],
    ];
    const found: string[] = [];
    for (const f of code) {
      const text = readFileSync(join(ROOT, f), "utf8");
      for (const [pattern, what] of forbidden) {
        if (pattern.test(text)) found.push(`${f}: ${what}`);
      }
      // A program started at all goes through argument arrays (execFile or spawn): say which.
      if (/node:child_process|Deno\.Command|Bun\.spawn/.test(text)) {
        assert.ok(
          !/\bexec\s*\(/.test(text),
          `${f} starts programs: with execFile or spawn and an argument array only`,
        );
      }
    }
    assert.deepEqual(found, [], "a shell in the published files");
  });
});

describe("privilege", () => {
  test("without root or CAP_SYS_PTRACE over the target, the error says what is needed", async () => {
    // The driver answers CUDA_ERROR_OPERATING_SYSTEM for a process this one may not act on, as for
    // one that does not exist (docs/DRIVER.md#symbols-and-versions); the GPU run records the real
    // message.
    const sim = new SimulatedMachine();
    const p = sim.spawn();
    const denied = forward(sim, { getState: () => Promise.resolve({ code: 304, value: 0 }) });
    await assert.rejects(new CudaProcess(p.pid, { machine: denied }).state(), (err: unknown) => {
      assert.ok(err instanceof CudaError && err.code === CUDA_ERROR_OPERATING_SYSTEM);
      assert.match(
        err.message,
        /this program may not act on it \(that needs root or CAP_SYS_PTRACE\)/,
      );
      return true;
    });
  });
});
