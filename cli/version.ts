/**
 * The package's version, for `cuda-checkpoint --version`. A test checks it against `deno.json`, the
 * one place it is set; importing `deno.json` itself would load and parse the whole file at start-up.
 *
 * @module
 */

/** The version of `@ckpt/cuda` this command line belongs to. */
export const VERSION = "0.1.0";
