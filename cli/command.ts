/**
 * What the command line of `cuda-checkpoint` asks for (a {@link Command}, as `args.ts` reads it),
 * NVIDIA's messages for bad input, word for word, and {@link UsageError}, bad input's error.
 *
 * @module
 */

/** The steps `--action` takes. */
export const ACTIONS = ["lock", "checkpoint", "restore", "unlock"] as const;

/** An operation of NVIDIA's utility. */
export type CliOperation = "get-state" | "get-restore-tid" | "toggle" | typeof ACTIONS[number];

/** What every command but help and version has: `--json`, `--simulate` (the state file's machine). */
export type Common = Readonly<{ json: boolean; events: boolean; simulate: boolean }>;
type GpuMap = Readonly<Record<string, string>>;

/** An operation on processes: its pids in the order given, or every CUDA process (`--all`). */
export type OperationCommand = Common & {
  readonly kind: "operation";
  readonly operation: CliOperation;
  readonly targets: readonly number[] | "all";
  readonly timeoutMs?: number;
  readonly gpuMapping?: GpuMap;
  readonly allOrNothing: boolean;
  readonly job: boolean;
  readonly checkRoom?: false;
  readonly allowIpcImport?: true;
};

/** `snapshot`: process trees (`--pid`: their roots) to a directory; `--timeout`: the locks'. */
export type SnapshotCommand = Common & {
  readonly kind: "snapshot";
  readonly roots: readonly number[];
  readonly dir: string;
  readonly leaveRunning: boolean;
  readonly job: boolean;
  readonly lockTimeoutMs?: number;
  readonly deadlineMs?: number;
  readonly allowIpcImport?: true;
  readonly tcpEstablished?: true;
};

/** `inspect`: a snapshot's manifest, checked against its files (`verify`: their digests too). */
export type InspectCommand = Common & { readonly kind: "inspect"; dir: string; verify: boolean };

/** `recover`: the processes a snapshot killed outright left suspended, resumed. */
export type RecoverCommand = Common & { readonly kind: "recover"; dir: string; checkRoom?: false };

/** `restore-snapshot`: a snapshot's processes back (`gpuMapping`: its GPUs onto this machine's). */
export type RestoreSnapshotCommand = Common & {
  readonly kind: "restore-snapshot";
  readonly dir: string;
  readonly gpuMapping?: GpuMap;
  readonly deadlineMs?: number;
  readonly checkRoom?: false;
};

/** What the command line asks for. */
export type Command =
  | { readonly kind: "help" }
  | { readonly kind: "version" }
  | OperationCommand
  | SnapshotCommand
  | RestoreSnapshotCommand
  | InspectCommand
  | RecoverCommand
  | (Common & { readonly kind: "list" } | Common & { readonly kind: "reset" })
  | (Common & { readonly kind: "kill"; readonly pid: number })
  | (Common & { readonly kind: "spawn"; memoryMiB?: number; gpus?: number[]; command?: string })
    & { parent?: number };

/** NVIDIA's messages (driver 580), word for word. */
export const NVIDIA_MESSAGES = {
  noOperation: "No operation selected",
  missingPid: "Missing pid to perform operation on",
  badPid: "pid must be a non-negative integer",
  badTimeout: "timeout must be a non-negative integer",
  timeoutNotLock: "Timeout is only valid for --action lock operation",
  badDeviceMap: "Invalid device remap",
  badAction: "Invalid process state",
  badOption: "Invalid option(s) or option(s) not supported by this CUDA Driver",
  tooManyOperations: "Too many operations selected",
  remapNotRestore: "Device remap only allowed for restore action",
} as const;

/**
 * Bad input on the command line: `message` is the line to print (NVIDIA's where it has one);
 * `detail` says more (the bad value), for a terminal; `getopt` is the line `getopt_long` prints
 * first (without the program's name); `tail` the line that follows instead of NVIDIA's help, for a
 * command line of ours.
 */
export class UsageError extends Error {
  readonly detail?: string;
  readonly getopt?: string;
  readonly tail?: string;

  constructor(message: string, detail?: string, getopt?: string, tail?: string) {
    super(message);
    this.name = "UsageError";
    [this.detail, this.getopt, this.tail] = [detail, getopt, tail];
  }
}
