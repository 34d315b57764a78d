// A large manifest-like document for the parser's linearity (tests/json_linear_test.ts) and its
// benchmark (bench/manifest_parse.ts): many trees, each of a few processes and many image files,
// valid for core/snapshot/manifest.ts's parseManifest. A file entry comes from `fileEntry` alone, so that a
// change of the format's file entry is one function to adapt.

/** A GPU UUID of the document's one GPU. */
export const BIG_GPU = "GPU-00000000-1111-2222-3333-444444444444";

/** One file entry of a manifest: its path, size and digest (as the format writes it). */
export function fileEntry(tree: number, index: number): Record<string, unknown> {
  const hex = ((tree * 7919 + index) % 2 ** 32).toString(16).padStart(8, "0");
  return {
    path: `tree-${tree}/pages-${index}.img`,
    bytes: 4096 * (index + 1),
    chunkedSha256: hex.repeat(8),
  };
}

/** The shape of a generated manifest: how many trees, processes per tree and files per tree. */
export interface BigManifestShape {
  /** How many trees (pids from 1000 on, each tree's after the one before). */
  readonly trees: number;
  /** Processes per tree, each with a few threads and a CUDA side. */
  readonly processesPerTree: number;
  /** Image files per tree. */
  readonly filesPerTree: number;
}

/** A manifest's text (as `serializeManifest` writes it) of about the shape asked for. */
export function bigManifest(shape: BigManifestShape, format = "ckpt-cuda-snapshot/2"): string {
  const trees = [];
  const files = [];
  const stride = 4 * shape.processesPerTree + 4;
  for (let t = 0; t < shape.trees; t++) {
    const root = 1000 + t * stride;
    const processes = [];
    for (let p = 0; p < shape.processesPerTree; p++) {
      const pid = root + p * 4;
      processes.push({
        pid,
        parent: p === 0 ? 1 : root,
        threads: [pid, pid + 1, pid + 2],
        command: `/usr/bin/python3 train.py --rank ${t} --worker ${p} --data /srv/data/shard-${t}`,
        cuda: {
          state: "running",
          restoreThreadId: pid,
          gpuMemoryMiB: { [BIG_GPU]: 1024 + p },
        },
      });
    }
    trees.push({ root, images: `tree-${root}`, processes });
    for (let f = 0; f < shape.filesPerTree; f++) files.push(fileEntry(root, f));
  }
  return JSON.stringify(
    {
      format,
      createdAt: "2026-11-25T12:00:00.000Z",
      tool: { name: "@ckpt/cuda", version: "0.1.0" },
      host: { hostname: "bench", kernel: "6.18.0" },
      driver: { cudaVersion: 13000, release: "580.159.04" },
      engine: { kind: "criu", version: "4.1.1" },
      gpus: [{ index: 0, uuid: BIG_GPU, name: "NVIDIA H100 80GB HBM3", totalMiB: 81559 }],
      trees,
      options: { leaveRunning: false, job: false },
      timings: { suspendMs: 1, dumpMs: 2, totalMs: 3 },
      files,
    },
    null,
    2,
  ) + "\n";
}
