/**
 * Which runtime this is, and its FFI adapter (Deno's or Bun's), loaded only when asked: the one
 * thing every user of the native libraries (libcuda, NVML, libc) needs, in a module of its own so
 * that loading it loads nothing else.
 *
 * @module
 */

import { DriverLoadError } from "../core/errors.ts";
import type { FfiAdapter } from "./adapter.ts";

/** The JavaScript runtime, as far as the native driver cares. */
export type NativeRuntime = "deno" | "bun" | "other";

/** Which runtime this is: Deno and Bun each have a native binding; anything else has none. */
export function detectRuntime(): NativeRuntime {
  if ("Deno" in globalThis) return "deno";
  if ("Bun" in globalThis) return "bun";
  return "other";
}

/**
 * The adapter of this runtime's FFI (Deno's or Bun's); a `DriverLoadError` on any other runtime.
 * `callingThread` is the native driver's option of that name (no worker threads on Bun).
 */
export async function runtimeAdapter(
  options: { callingThread?: boolean } = {},
): Promise<FfiAdapter> {
  const runtime = detectRuntime();
  if (runtime === "deno") return (await import("./deno.ts")).denoAdapter();
  if (runtime === "bun") {
    return await (await import("./bun.ts")).bunAdapter({ callingThread: options.callingThread });
  }
  throw new DriverLoadError(
    "The native CUDA checkpoint driver needs Deno (Deno.dlopen) or Bun (bun:ffi); this runtime " +
      "has neither FFI. On Node.js, use the simulated driver from @ckpt/cuda/mock, or run under " +
      "Deno or Bun.",
  );
}
