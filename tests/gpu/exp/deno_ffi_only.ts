// A program on Deno granted what libcuda and the host need short of /proc (--allow-ffi,
// --allow-env, --allow-sys; Deno 2.9 grants /proc to nothing less than --allow-all): a suspend of a
// CUDA process is refused (IPC: whether it imported another's GPU memory cannot be told, the
// refusal saying why); with allowIpcImport it suspends and resumes.
//   deno run --no-prompt --allow-ffi --allow-env --allow-sys tests/gpu/exp/deno_ffi_only.ts PID
import { CudaProcess, RefusedError } from "../../../mod.ts";

const pid = Number(Deno.args[0]);
const proc = new CudaProcess(pid);
const refused = await proc.suspend().catch((e) => e);
console.log(`suspend: ${refused instanceof RefusedError ? `refused ${refused.code}` : refused}`);
console.log(`  ${refused?.message}`);
console.log(`state: ${await proc.state().catch((e) => `(${e})`)}`);
console.log(`suspend, allowIpcImport: ${(await proc.suspend({ allowIpcImport: true })).state}`);
console.log(`resume: ${(await proc.resume()).state}`);
await proc.close();
