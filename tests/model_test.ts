// Model-based tests: random sequences of operations (one at a time, several at once on one
// process or many, groups with and without all-or-nothing), injected faults, exits, the failed
// state and a full GPU, on 2 to 4 random processes, an importer of the first one's GPU memory
// (CUDA IPC) and one without CUDA, checked step by step
// against the reference model of tests/support/model.ts (written from docs/DRIVER.md,
// not from the simulator's tables). fast-check shrinks a failing sequence to a short one.
//
// The seed and the number of runs are fixed, so CI is repeatable; fast-check's error gives the
// seed and the path of a failure. To explore further, or to replay one:
//   CKPT_MODEL_SEED=123 CKPT_MODEL_RUNS=5000 deno test -A tests/model_test.ts
// Runs unchanged under `deno test -A` and `bun test`.
import { test } from "node:test";
import process from "node:process";
import fc from "fast-check";

import { property } from "./support/model.ts";

const SEED = Number(process.env.CKPT_MODEL_SEED || 20261121);
const RUNS = Number(process.env.CKPT_MODEL_RUNS || 150);

test(`random operations, faults and groups agree with the reference model (${RUNS} runs, seed ${SEED})`, async () => {
  await fc.assert(property(), { numRuns: RUNS, seed: SEED });
});
