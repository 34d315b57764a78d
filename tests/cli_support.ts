// Helpers for the command-line tests (tests/cli_*_test.ts): run `main()` in-process and collect
// what it writes, and find the compiled binary. Runs under Deno and Bun alike. Not a test file.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import process from "node:process";

import { type CliIo, main } from "../cli/main.ts";

/** What a command line did. */
export interface Ran {
  /** The exit code. */
  readonly code: number;
  /** Everything written to stdout. */
  readonly out: string;
  /** Everything written to stderr. */
  readonly err: string;
  /** stderr's lines, without the help text that follows a usage error. */
  readonly errLines: string[];
}

/** The first line of the help text, to cut it off stderr. */
export const HELP_FIRST_LINE =
  "Usage: cuda-checkpoint <operation> --pid <pid>[,<pid>...] [options]";

/** Runs `main()` with the arguments on the machine given; collects stdout and stderr. */
export async function cli(
  args: readonly (string | number)[],
  options: Partial<Omit<CliIo, "stdout" | "stderr">> = {},
): Promise<Ran> {
  let out = "", err = "";
  const code = await main(args.map(String), {
    ...options,
    stdout: (text) => out += text,
    stderr: (text) => err += text,
  });
  const help = err.indexOf(HELP_FIRST_LINE);
  const errLines = (help < 0 ? err : err.slice(0, help)).split("\n").filter((l) => l !== "");
  return { code, out, err, errLines };
}

/** The compiled binary that `bash cli/build.sh` makes. */
export const BINARY = new URL("../dist/cuda-checkpoint", import.meta.url).pathname;

/** Whether the binary has been built. */
export const binaryBuilt: boolean = existsSync(BINARY);

/** What a program run did. */
export interface Exited {
  /** Its exit code (-1 when it was killed or did not start). */
  readonly code: number;
  /** Its stdout. */
  readonly out: string;
  /** Its stderr. */
  readonly err: string;
}

/** Runs a program with this process's environment and `env` on top; never rejects. */
export function runProgram(
  file: string,
  args: readonly (string | number)[],
  env: Record<string, string> = {},
): Promise<Exited> {
  return new Promise((resolve) => {
    execFile(
      file,
      args.map(String),
      { env: { ...process.env, ...env }, timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === "number" ? error.code : -1) : 0;
        resolve({ code, out: String(stdout), err: String(stderr) });
      },
    );
  });
}

/** Asserts that a program succeeded, wrote `out` to stdout and nothing to stderr. */
export function assertPrinted(ran: Exited, out: string): void {
  assert.deepEqual(ran, { code: 0, out, err: "" });
}
