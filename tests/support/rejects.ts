// One assertion the tests share: a promise rejects with a CudaError of a given code, whose
// message matches every pattern given.
import assert from "node:assert/strict";
import { CudaError } from "../../core/errors.ts";

/** Asserts that `p` rejects with a {@link CudaError} of `code` whose message matches `patterns`. */
export async function rejectsWith(
  p: Promise<unknown>,
  code: number,
  ...patterns: RegExp[]
): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof CudaError, `a CudaError, got ${err}`);
    assert.equal(err.code, code, err.message);
    for (const re of patterns) assert.match(err.message, re);
    return true;
  });
}
