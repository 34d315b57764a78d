// Byte layouts of the checkpoint API's argument structs (cuda.h 13.0), in `Uint8Array`s that every
// runtime's FFI passes as pointers, each with an `ArrayBuffer` of its own whose address does not
// move (`nativeBuffer`): an address written into a struct (`gpuPairs`) must stay valid.

import type { GpuPair, LockArgs } from "../core/driver.ts";
import { nativeBuffer } from "./adapter.ts";
import { checkTimeoutMs } from "../core/options.ts";

/** Size in bytes of every checkpoint args struct (lock, checkpoint, restore, unlock). */
export const ARGS_STRUCT_SIZE = 64;
/** Size in bytes of one `CUcheckpointGpuPair`: two 16-byte `CUuuid`s. */
export const GPU_PAIR_SIZE = 32;
/** Size in bytes of a `CUuuid`. */
export const CUUUID_SIZE = 16;
/** Offset of the `gpuPairs` pointer in `CUcheckpointRestoreArgs`. */
export const RESTORE_ARGS_PAIRS_OFFSET = 0;

/** Encodes `CUcheckpointLockArgs`: `u32 timeoutMs` at 0, then 60 reserved bytes (zero unless given). */
export function encodeLockArgs(args: LockArgs): Uint8Array {
  const buf = nativeBuffer(ARGS_STRUCT_SIZE);
  // A value the C unsigned int cannot hold is refused, not wrapped (-5 would wait 49 days).
  new DataView(buf.buffer).setUint32(0, checkTimeoutMs(args.timeoutMs, "LockArgs.timeoutMs"), true);
  const reserved = args.reserved ?? nativeBuffer(0);
  const room = `LockArgs.reserved holds bytes 4 to 63 (60 bytes), got ${reserved.length}`;
  if (reserved.length > ARGS_STRUCT_SIZE - 4) throw new RangeError(room);
  buf.set(reserved, 4);
  return buf;
}

/** Encodes an array of `CUcheckpointGpuPair`: `oldUuid` at 0 and `newUuid` at 16 of each 32 bytes. */
export function encodeGpuPairs(pairs: readonly GpuPair[]): Uint8Array {
  // At least one pair's room, so that an empty list still has a valid pointer (count 0).
  const buf = nativeBuffer(Math.max(1, pairs.length) * GPU_PAIR_SIZE);
  pairs.forEach((pair, i) => {
    const sized = pair.oldUuid.length === CUUUID_SIZE && pair.newUuid.length === CUUUID_SIZE;
    if (!sized) throw new RangeError(`GPU pair ${i}: each CUuuid must have 16 bytes`);
    buf.set(pair.oldUuid, i * GPU_PAIR_SIZE);
    buf.set(pair.newUuid, i * GPU_PAIR_SIZE + CUUUID_SIZE);
  });
  return buf;
}

/**
 * Encodes `CUcheckpointRestoreArgs`: the pairs pointer at 0 (u64), `u32 gpuPairsCount` at 8,
 * the rest reserved and zero. `pairsPointer` is the address of {@link encodeGpuPairs}' buffer; the
 * native driver passes 0 and lets the thread that makes the call fill in the address.
 */
export function encodeRestoreArgs(pairsPointer: bigint, count: number): Uint8Array {
  const buf = nativeBuffer(ARGS_STRUCT_SIZE), view = new DataView(buf.buffer);
  view.setBigUint64(RESTORE_ARGS_PAIRS_OFFSET, pairsPointer, true);
  view.setUint32(8, count, true);
  return buf;
}
