// GPU mappings: the one check that one can work here, and why the driver refused one.

import type { CheckpointDriver, GpuInfo, GpuPair } from "./driver.ts";
import { RefusedError } from "./errors.ts";
import { formatGpuUuid, parseGpuUuid } from "./options.ts";

const key = (bytes: Uint8Array) => formatGpuUuid(bytes).toLowerCase();
const describeGpu = (gpu: GpuInfo) => `${gpu.uuid} (GPU ${gpu.index}, ${gpu.name})`;
const ONE_CHIP = "a process is restored only onto GPUs of the chip it was checkpointed on";

/**
 * What is wrong with a mapping onto `gpus`, by the real driver's rules: every GPU seen named, each
 * a GPU, none onto another's. `from`: a snapshot's GPUs, each onto its own chip; left out, a
 * mapping from no GPU here is another machine's, and only where it goes is checked.
 */
export function mappingProblems(
  pairs: readonly GpuPair[],
  gpus: readonly GpuInfo[],
  from?: readonly GpuInfo[],
): string[] {
  if (pairs.length === 0) return [];
  const byKey = new Map(gpus.map((g) => [g.uuid.toLowerCase(), g]));
  const fromKey = new Map((from ?? gpus).map((g) => [g.uuid.toLowerCase(), g]));
  const foreign = !from && pairs.every((p) => !byKey.has(key(p.oldUuid)));
  const seen = from ? "the snapshot" : "this machine";
  const problems: string[] = [], named = new Set<string>(), onto = new Map<string, string[]>();
  for (const pair of pairs) {
    const [oldId, newId] = [formatGpuUuid(pair.oldUuid), formatGpuUuid(pair.newUuid)];
    const source = fromKey.get(oldId.toLowerCase()), target = byKey.get(newId.toLowerCase());
    if (!source && !foreign) problems.push(`${oldId} is not a GPU of ${seen}`);
    const none = `${newId} (the GPU given for ${oldId}) is not a GPU of this machine`;
    if (!target) problems.push(none);
    if (from && source && target && source.name !== target.name) {
      problems.push(`it sends ${describeGpu(source)} onto ${describeGpu(target)}: ${ONE_CHIP}`);
    }
    named.add(oldId.toLowerCase());
    onto.set(newId.toLowerCase(), [...onto.get(newId.toLowerCase()) ?? [], oldId]);
  }
  const left = foreign ? [] : [...fromKey.values()].filter((g) => !named.has(g.uuid.toLowerCase()));
  const leaves = `it leaves out ${left.map(describeGpu).join(" and ")} (a mapping names every GPU)`;
  if (left.length > 0) problems.push(leaves);
  for (const [to, froms] of onto) {
    const gpu = byKey.get(to), same = `it sends ${froms.join(" and ")} onto the same GPU`;
    if (froms.length > 1 && gpu) problems.push(`${same}, ${describeGpu(gpu)}`);
  }
  if (problems.length > 0) {
    if (from) problems.push(`the snapshot's GPUs are ${from.map(describeGpu).join(", ")}`);
    problems.push(`this machine's GPUs are ${gpus.map(describeGpu).join(", ")}`);
  }
  return problems;
}

/**
 * `pairs` with every GPU of `gpus` they leave out added, onto itself where it is free, else onto a
 * GPU left free (of its chip first): the driver wants every GPU it sees named by a mapping from
 * this machine's GPUs, and a snapshot's mapping names only the snapshot's. Another machine's: as is.
 */
export function completed(pairs: readonly GpuPair[], gpus: readonly GpuInfo[]): GpuPair[] {
  const named = new Set(pairs.map((p) => key(p.oldUuid)));
  if (!gpus.some((g) => named.has(g.uuid.toLowerCase()))) return [...pairs];
  const taken = new Set(pairs.map((p) => key(p.newUuid)));
  const free = gpus.filter((g) => !taken.has(g.uuid.toLowerCase()));
  // Where GPUs of the mapping are not here, too few are left: the driver's checks will say.
  const added = gpus.filter((g) => !named.has(g.uuid.toLowerCase())).flatMap((g) => {
    const to = free.find((f) => f === g) ?? free.find((f) => f.name === g.name) ?? free[0];
    if (!to) return [];
    free.splice(free.indexOf(to), 1);
    return [{ oldUuid: parseGpuUuid(g.uuid), newUuid: parseGpuUuid(to.uuid) }];
  });
  return [...pairs, ...added];
}

/** Refuses (`MAPPING`) a mapping that cannot work, where the driver can list all its GPUs. */
export async function checkMapping(
  driver: CheckpointDriver,
  operation: string,
  pid: number,
  pairs: readonly GpuPair[],
): Promise<void> {
  if (pairs.length === 0 || !driver.listGpus || driver.listsEveryGpu !== true) return;
  // A list that cannot be read, or is empty, proves nothing: the driver will say.
  const gpus = await driver.listGpus().catch(() => []);
  if (gpus.length === 0) return;
  const problems = mappingProblems(pairs, gpus);
  if (problems.length === 0) return;
  const reason = `the GPU mapping cannot work: ${problems.join("; ")}`;
  const detail = "the process is unchanged";
  throw new RefusedError({ code: "MAPPING", operation, pid, reason, detail });
}

/** Why the driver may have refused a mapping (`CUDA_ERROR_INVALID_VALUE`): chips that differ. */
export async function explainRejectedMapping(
  driver: CheckpointDriver,
  pairs: readonly GpuPair[],
): Promise<string> {
  const gpus = driver.listGpus ? await driver.listGpus().catch(() => []) : [];
  const byKey = new Map(gpus.map((g) => [g.uuid.toLowerCase(), g]));
  const crossing = pairs.flatMap((p) => {
    const from = byKey.get(key(p.oldUuid)), to = byKey.get(key(p.newUuid));
    return from && to && from.name !== to.name
      ? [`${describeGpu(from)} onto ${describeGpu(to)}`]
      : [];
  });
  return crossing.length > 0
    ? `the driver refused the GPU mapping: it moves ${crossing.join(" and ")}, another chip`
    : "the driver refused the GPU mapping (docs/ERRORS.md#a-refused-gpu-mapping)";
}

/** A snapshot's GPUs onto this machine's by index, each onto its chip, or a refusal saying why. */
export function derivedMapping(
  snapshotGpus: readonly GpuInfo[],
  gpus: readonly GpuInfo[],
  operation: string,
): GpuPair[] {
  const here = new Set(gpus.map((g) => g.uuid.toLowerCase()));
  if (snapshotGpus.every((g) => here.has(g.uuid.toLowerCase()))) return [];
  const taken = `${snapshotGpus.length} GPU${snapshotGpus.length === 1 ? "" : "s"}`;
  const chips = chipsOf(snapshotGpus);
  const fewer = `the snapshot was taken where the driver saw ${taken} (${chips}), and this ` +
    `machine has ${gpus.length} (${chipsOf(gpus) || "none"}): each of the snapshot's GPUs is ` +
    `restored onto one of its own, so restore it on a machine with at least ${taken} of its chip`;
  if (gpus.length < snapshotGpus.length) throw mappingRefused(operation, fewer);
  const pairs = snapshotGpus.map((g) => ({ from: g, to: gpus.find((h) => h.index === g.index) }));
  const crossing = pairs.find(({ from, to }) => to && to.name !== from.name);
  if (crossing || pairs.some(({ to }) => !to)) {
    // Enough GPUs of the snapshot's chips, at other indices: a mapping can say which.
    const count = (list: readonly GpuInfo[], name: string) =>
      list.filter((g) => g.name === name).length;
    const enough = snapshotGpus.every((g) => count(gpus, g.name) >= count(snapshotGpus, g.name));
    const { from, to } = crossing ?? pairs.find(({ to }) => !to)!;
    const ours = `the snapshot's GPU ${from.index} (${from.uuid}) is an ${from.name}`;
    const at = to ? `GPU ${to.index} (${to.uuid}) is an ${to.name}` : `GPUs are ${chipsOf(gpus)}`;
    const so = enough
      ? "give a gpuMapping (--device-map) onto GPUs of that chip"
      : `restore it on a machine with ${taken} of that chip (${chips})`;
    throw mappingRefused(operation, `${ours}, and this machine's ${at}: ${ONE_CHIP}, so ${so}`);
  }
  return pairs.map(({ from, to }) => ({
    oldUuid: parseGpuUuid(from.uuid),
    newUuid: parseGpuUuid(to!.uuid),
  }));
}

/** GPUs by chip, counted: `2 x NVIDIA H200`, `1 x NVIDIA H200 and 1 x NVIDIA H100 80GB HBM3`. */
function chipsOf(gpus: readonly { name: string }[]): string {
  const byChip = Map.groupBy(gpus, (g) => g.name);
  return [...byChip].map(([name, each]) => `${each.length} x ${name}`).join(" and ");
}

/** A refusal of a mapping (`MAPPING`): nothing was changed. */
export const mappingRefused = (operation: string, reason: string): RefusedError =>
  new RefusedError({ code: "MAPPING", operation, reason, detail: "nothing was changed" });
