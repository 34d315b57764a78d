/**
 * The package's version, for `cuda-checkpoint --version` and snapshot manifests. A test checks it against `deno.json`, the
 * one place it is set; importing `deno.json` itself would load and parse the whole file at start-up.
 *
 * @module
 */

/** The version of `@ckpt/cuda`. */
export const VERSION = "0.1.0";
