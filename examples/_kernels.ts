/**
 * The examples' GPU kernels, as PTX text that the driver compiles when the module is loaded
 * (`cuModuleLoadDataEx`): no CUDA compiler is needed to run them. And the same computation on the
 * host, so that a program can check what a kernel wrote, and the simulator can be given the same
 * bytes a GPU would hold.
 *
 * @module
 */

import type { CudaContext, CudaKernel, DeviceBuffer } from "./cuda.ts";
import type { SimulatedProcess } from "../mock/mod.ts";
import { ChunkedSha256 } from "./_chunked_sha256.ts";

/** PTX that sets `out` to mix(`x`) (lowbias32), through the scratch register `%t`. */
function mix(out: string, x: string): string {
  return `  // ${out} = mix(${x})
  shr.u32 %t, ${x}, 16;
  xor.b32 ${out}, ${x}, %t;
  mul.lo.u32 ${out}, ${out}, 0x7feb352d;
  shr.u32 %t, ${out}, 15;
  xor.b32 ${out}, ${out}, %t;
  mul.lo.u32 ${out}, ${out}, 0x846ca68b;
  shr.u32 %t, ${out}, 16;
  xor.b32 ${out}, ${out}, %t;`;
}

/**
 * Two kernels, written by hand in PTX (NVIDIA's virtual instruction set; see the PTX ISA manual):
 *
 * - `fill(u64 *p, u64 n, u64 seed)` writes `n` 64-bit words at `p`. Viewed as 32-bit words (little
 *   endian), word `j` (0 <= j < 2n) becomes `mix(j + seed)`, where `mix` is the "lowbias32"
 *   integer hash (x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16) and
 *   the arithmetic wraps at 2^32; only the low 32 bits of `seed` count. Each thread writes the
 *   64-bit words `i`, `i + stride`, ... (a grid-stride loop, so any grid fills any size), both
 *   halves with one `st.global.v2.u32`.
 * - `increment(u32 *p)` adds 1 to the 32-bit word at `p` (one thread: the counter of NVIDIA's
 *   cuda-checkpoint README).
 *
 * `.version 6.0` / `.target sm_52`: an old PTX version and the oldest target these instructions
 * need nothing beyond, so that any GPU a driver with the checkpoint API (570 and later) supports
 * can run it; the driver compiles it for the GPU it is loaded on (`sm_90` on an H100 or H200).
 * CUDA 13.0's `ptxas -arch=sm_90` (and sm_75, sm_80) accepts it.
 * Registers: `%p` pointer, `%n` count, `%i` word index, `%k` the 32-bit index fed to `mix`.
 */
export const KERNELS_PTX: string = `
.version 6.0
.target sm_52
.address_size 64

.visible .entry fill(.param .u64 fill_p, .param .u64 fill_n, .param .u64 fill_seed)
{
  .reg .pred %past;
  .reg .b32 %seed, %k, %lo, %hi, %t, %a, %b, %c;
  .reg .b64 %p, %n, %i, %stride, %addr, %w;

  ld.param.u64 %p, [fill_p];
  ld.param.u64 %n, [fill_n];
  ld.param.u64 %w, [fill_seed];
  cvt.u32.u64 %seed, %w;
  cvta.to.global.u64 %p, %p;
  // i = blockIdx.x * blockDim.x + threadIdx.x; stride = gridDim.x * blockDim.x
  mov.u32 %a, %ctaid.x;
  mov.u32 %b, %ntid.x;
  mov.u32 %c, %tid.x;
  cvt.u64.u32 %w, %c;
  mad.wide.u32 %i, %a, %b, %w;
  mov.u32 %a, %nctaid.x;
  mul.wide.u32 %stride, %a, %b;
LOOP:
  setp.ge.u64 %past, %i, %n;
  @%past bra DONE;
  // k = 2i + seed: the low half's 32-bit index; the high half's is k + 1
  cvt.u32.u64 %k, %i;
  shl.b32 %k, %k, 1;
  add.u32 %k, %k, %seed;
${mix("%lo", "%k")}
  add.u32 %k, %k, 1;
${mix("%hi", "%k")}
  // p[i] = { lo, hi }
  shl.b64 %addr, %i, 3;
  add.u64 %addr, %p, %addr;
  st.global.v2.u32 [%addr], {%lo, %hi};
  add.u64 %i, %i, %stride;
  bra LOOP;
DONE:
  ret;
}

.visible .entry increment(.param .u64 increment_p)
{
  .reg .b32 %v;
  .reg .b64 %p;

  ld.param.u64 %p, [increment_p];
  cvta.to.global.u64 %p, %p;
  ld.global.u32 %v, [%p];
  add.u32 %v, %v, 1;
  st.global.u32 [%p], %v;
  ret;
}
`;

/** The kernels' names in {@link KERNELS_PTX}. */
export const KERNEL_NAMES = ["fill", "increment"] as const;

/** The seed the examples fill their buffers with, unless told otherwise. */
export const DEFAULT_SEED = 0x5eed;

/** The launch shape of `fill`: enough blocks to keep a large GPU busy; the loop covers the rest. */
export const FILL_GRID = 1024;
/** Threads per block of `fill`. */
export const FILL_BLOCK = 256;

/** Whether this host stores a 32-bit word's low byte first, as the GPU does. */
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** lowbias32: the integer hash `fill` uses, on the host. */
export function mix32(x: number): number {
  x = (x ^ (x >>> 16)) >>> 0;
  x = Math.imul(x, 0x7feb352d) >>> 0;
  x = (x ^ (x >>> 15)) >>> 0;
  x = Math.imul(x, 0x846ca68b) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}

/**
 * The bytes `fill` writes, from byte `offset` (a multiple of 4) for `length` bytes (a multiple of
 * 4): 32-bit word `j` of the buffer is `mix32(j + seed)`, little endian; written into `out` where
 * given (of `length` bytes), else into a new array.
 */
export function fillPattern(
  seed: number,
  offset: number,
  length: number,
  out: Uint8Array = new Uint8Array(length),
): Uint8Array {
  if (offset % 4 !== 0 || length % 4 !== 0 || out.length !== length) {
    throw new RangeError(
      `fillPattern: offset and length must be multiples of 4 (and out ${length} bytes long)`,
    );
  }
  const first = offset / 4;
  if (LITTLE_ENDIAN && out.byteOffset % 4 === 0) {
    // Twice as fast as a DataView (1 GiB in 0.4 s), as the simulator makes every byte of it.
    const words = new Uint32Array(out.buffer, out.byteOffset, length / 4);
    for (let j = 0; j < words.length; j++) words[j] = mix32(first + j + seed);
    return out;
  }
  const view = new DataView(out.buffer, out.byteOffset, length);
  for (let j = 0; j < length / 4; j++) view.setUint32(4 * j, mix32(first + j + seed), true);
  return out;
}

/** The kernels of {@link KERNELS_PTX}, loaded into a context. */
export type Kernels = Record<(typeof KERNEL_NAMES)[number], CudaKernel>;

/** Loads {@link KERNELS_PTX} into a context (the driver compiles it for the context's GPU). */
export function loadKernels(ctx: CudaContext): Kernels {
  return ctx.loadModule(KERNELS_PTX, KERNEL_NAMES) as Kernels;
}

/** Runs `fill` over a whole buffer and waits for it. */
export function fillOnGpu(
  ctx: CudaContext,
  kernels: Kernels,
  buffer: DeviceBuffer,
  seed: number,
): void {
  ctx.launch(kernels.fill, FILL_GRID, FILL_BLOCK, [
    { u64: buffer },
    { u64: BigInt(Math.floor(buffer.bytes / 8)) },
    { u64: BigInt(seed) },
  ]);
  ctx.synchronize();
}

/** Pieces a buffer is copied back in, so that no host copy of the whole is needed. */
const PIECE_BYTES = 64 << 20;

/**
 * The chunked SHA-256 (hex) of a GPU buffer, copied back piece by piece: the SHA-256 of the
 * SHA-256s of its 1 MiB chunks (`ChunkedSha256` of _chunked_sha256.ts), the value the simulator's
 * `memoryChunkedSha256()` gives for a process whose memory holds the same bytes.
 */
export function hashOnGpu(ctx: CudaContext, buffer: DeviceBuffer): string {
  const hasher = new ChunkedSha256();
  for (let at = 0; at < buffer.bytes; at += PIECE_BYTES) {
    hasher.update(ctx.download(buffer, at, Math.min(PIECE_BYTES, buffer.bytes - at)));
  }
  return hasher.digest();
}

/**
 * Runs `fill` over `bytes` bytes at `at` of a simulated process's memory: the simulator runs no
 * PTX, so the kernel takes a GPU's time for them (at 2 TB/s) and its output is `fillPattern`'s, the
 * same bytes as on a GPU (so the same chunked SHA-256), made by the simulator when first needed.
 */
export function fillSimulated(
  target: SimulatedProcess,
  seed: number,
  bytes: number,
  at = 0,
): Promise<void> {
  return target.launch(Math.max(0.01, bytes / 2e9), {
    at,
    length: bytes,
    make: (from, out) => void fillPattern(seed, from, out.length, out),
  });
}
