// One assertion the tests share: a promise rejects with a CudaError of a given code (the driver
// answered it), or a RefusedError of a given string code (refused before the driver was asked),
// whose message matches every pattern given.
import assert from "node:assert/strict";
import { CudaError, RefusedError } from "../../core/errors.ts";

/**
 * Asserts that `p` rejects with a {@link CudaError} of `code` (a number: the driver's answer) or a
 * {@link RefusedError} of `code` (a string: no driver call), whose message matches `patterns`.
 */
export async function rejectsWith(
  p: Promise<unknown>,
  code: number | string,
  ...patterns: RegExp[]
): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    if (typeof code === "number") {
      assert.ok(err instanceof CudaError, `a CudaError, got ${err}`);
    } else {
      assert.ok(err instanceof RefusedError, `a RefusedError, got ${err}`);
    }
    assert.equal(err.code, code, err.message);
    for (const re of patterns) assert.match(err.message, re);
    return true;
  });
}
