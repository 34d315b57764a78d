// This runtime's FFI adapter (Deno's or Bun's), loaded only when asked.

import { DriverLoadError } from "../core/errors.ts";
import type { FfiAdapter } from "./adapter.ts";

/** Which runtime this is: Deno and Bun each have a native binding; anything else has none. */
export function detectRuntime(): "deno" | "bun" | "other" {
  return "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "other";
}

/** The adapter of this runtime's FFI; a `DriverLoadError` on any other runtime. */
export async function runtimeAdapter(o: { callingThread?: boolean } = {}): Promise<FfiAdapter> {
  const runtime = detectRuntime();
  if (runtime === "deno") return (await import("./deno.ts")).denoAdapter();
  if (runtime === "bun") return await (await import("./bun.ts")).bunAdapter(o);
  const neither = "The native CUDA checkpoint driver needs Deno (Deno.dlopen) or Bun (bun:ffi); " +
    "this runtime has neither FFI. On Node.js, use the simulated driver from @ckpt/cuda/mock, or " +
    "run under Deno or Bun.";
  throw new DriverLoadError(neither);
}
