// Runs a program and sends it SIGINT when the caller says: for tests/interrupt_test.ts (our command
// line on a simulated machine) and tests/gpu/soak.ts (on real targets). Not a test file.
import { spawn } from "node:child_process";

/** How a program ended, and what it wrote. */
export interface Interrupted {
  /** Its exit code; null when a signal ended it. */
  readonly code: number | null;
  /** The signal that ended it, if one did. */
  readonly signal: string | null;
  /** Its stdout. */
  readonly out: string;
  /** Its stderr. */
  readonly err: string;
}

/**
 * Runs `file` with `args` (and `env`, the whole environment) and calls `interrupt` once it has
 * started, with a function that sends it one SIGINT and one that says whether it still runs.
 * On Deno through `Deno.Command`: Deno's `node:child_process` reports a child it has sent a
 * signal to as killed by that signal, even when the child handled it and exited with a code.
 * A program still running after `limitMs` is killed.
 */
export async function runInterrupted(
  file: string,
  args: readonly string[],
  env: Record<string, string>,
  interrupt: (send: () => void, running: () => boolean) => Promise<void>,
  limitMs = 30_000,
): Promise<Interrupted> {
  const deno = (globalThis as { Deno?: typeof Deno }).Deno;
  if (deno) {
    const child = new deno.Command(file, {
      args: [...args],
      env,
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    let done = false;
    const killer = setTimeout(() => child.kill("SIGKILL"), limitMs);
    const sending = interrupt(() => done || child.kill("SIGINT"), () => !done);
    const output = await child.output();
    done = true;
    clearTimeout(killer);
    await sending;
    const text = new TextDecoder();
    return {
      code: output.signal ? null : output.code,
      signal: output.signal,
      out: text.decode(output.stdout),
      err: text.decode(output.stderr),
    };
  }
  const child = spawn(file, [...args], { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "", err = "";
  child.stdout.on("data", (d) => out += d);
  child.stderr.on("data", (d) => err += d);
  const killer = setTimeout(() => child.kill("SIGKILL"), limitMs);
  const running = () => child.exitCode === null && child.signalCode === null;
  const sending = interrupt(() => running() && child.kill("SIGINT"), running);
  const [code, signal] = await new Promise<[number | null, string | null]>((resolve) =>
    child.on("close", (code, signal) => resolve([code, signal]))
  );
  clearTimeout(killer);
  await sending;
  return { code, signal, out, err };
}
