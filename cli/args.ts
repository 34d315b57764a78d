/**
 * The command line of `cuda-checkpoint`, read into a {@link Command}. The flags, and the messages
 * for bad input, are NVIDIA's as of driver 580 (docs/DRIVER.md#messages-and-exit-codes) where it
 * has them; what it lacks (several pids, `--all`, `--json`, `list`, `--simulate`) has messages of
 * our own in the same style. A message is one line; where ours can say more (the bad value), the
 * error's `detail` says it, and the command line shows it on a terminal only, so that piped output
 * stays NVIDIA's, line for line.
 *
 * A small hand parser rather than `node:util`'s `parseArgs`: NVIDIA's messages depend on which
 * check fails first, and its option names take values the way `getopt_long` does (`--pid 5`,
 * `--pid=5`, `-p 5`, `-p5`, and a value may start with `-`).
 *
 * @module
 */

import { MAX_PID, MAX_TIMEOUT_MS } from "../core/options.ts";
import { parseGpuUuid } from "../core/uuid.ts";

/** An operation of NVIDIA's utility. */
export type CliOperation =
  | "get-state"
  | "get-restore-tid"
  | "lock"
  | "checkpoint"
  | "restore"
  | "unlock"
  | "toggle";

/** The steps `--action` takes. */
export const ACTIONS: readonly CliOperation[] = ["lock", "checkpoint", "restore", "unlock"];

/** What every command but help and version has. */
interface Common {
  /** One JSON object per line instead of text. */
  readonly json: boolean;
  /** Work on the simulated machine of the state file instead of the real driver. */
  readonly simulate: boolean;
}

/** An operation on processes. */
export interface OperationCommand extends Common {
  /** Always `"operation"`. */
  readonly kind: "operation";
  /** The operation. */
  readonly operation: CliOperation;
  /** The pids, in the order given, or every CUDA process of the machine. */
  readonly targets: readonly number[] | "all";
  /** `--timeout`, in ms (lock only). */
  readonly timeoutMs?: number;
  /** `--device-map`: old GPU UUID to new (restore and toggle only). */
  readonly gpuMapping?: Readonly<Record<string, string>>;
  /** `--all-or-nothing`: a failure rolls the other processes back. */
  readonly allOrNothing: boolean;
  /** `--job`: the processes share GPU state: all locked before any checkpoint, and so on. */
  readonly job: boolean;
}

/** `snapshot`: process trees to a directory. */
export interface SnapshotCommand extends Common {
  /** Always `"snapshot"`. */
  readonly kind: "snapshot";
  /** The roots of the trees (`--pid`). */
  readonly roots: readonly number[];
  /** `--dir`. */
  readonly dir: string;
  /** `--leave-running`. */
  readonly leaveRunning: boolean;
  /** `--job`. */
  readonly job: boolean;
  /** `--timeout`: each CUDA process's lock timeout in ms (10 000 when left out). */
  readonly lockTimeoutMs?: number;
  /** `--deadline`: ms for the whole snapshot. */
  readonly deadlineMs?: number;
}

/** `inspect`: a snapshot's manifest, checked against its files. */
export interface InspectCommand extends Common {
  /** Always `"inspect"`. */
  readonly kind: "inspect";
  /** The snapshot's directory. */
  readonly dir: string;
}

/** `restore-snapshot`: a snapshot's processes back. */
export interface RestoreSnapshotCommand extends Common {
  /** Always `"restore-snapshot"`. */
  readonly kind: "restore-snapshot";
  /** `--dir`. */
  readonly dir: string;
  /** `--device-map`: the snapshot's GPUs onto this machine's. */
  readonly gpuMapping?: Readonly<Record<string, string>>;
  /** `--deadline`: ms for the whole restore. */
  readonly deadlineMs?: number;
}

/** What the command line asks for. */
export type Command =
  | { readonly kind: "help" }
  | { readonly kind: "version" }
  | OperationCommand
  | SnapshotCommand
  | RestoreSnapshotCommand
  | InspectCommand
  | (Common & { readonly kind: "list" })
  | (Common & {
    readonly kind: "spawn";
    readonly memoryMiB?: number;
    readonly gpus?: readonly number[];
    readonly command?: string;
  })
  | (Common & { readonly kind: "kill"; readonly pid: number })
  | (Common & { readonly kind: "reset" });

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
 * Bad input on the command line: `message` is the one line to print (NVIDIA's where it has one),
 * `detail` what more there is to say (the bad value), for a terminal.
 */
export class UsageError extends Error {
  /** More about what was wrong, where there is more to say. */
  readonly detail: string | undefined;
  /**
   * The line `getopt_long` prints before NVIDIA's message, without the program name that starts
   * it (`unrecognized option '--bogus'`), where NVIDIA's utility prints one.
   */
  readonly getopt: string | undefined;

  /** Makes the error. */
  constructor(message: string, detail?: string, getopt?: string) {
    super(message);
    this.name = "UsageError";
    this.detail = detail;
    this.getopt = getopt;
  }
}

/** What each option is: a flag, or one that takes a value; by its long name. */
const OPTIONS: Readonly<Record<string, "flag" | "value">> = {
  "--get-state": "flag",
  "--get-restore-tid": "flag",
  "--toggle": "flag",
  "--action": "value",
  "--pid": "value",
  "--timeout": "value",
  "--device-map": "value",
  "--help": "flag",
  "--version": "flag",
  "--all": "flag",
  "--all-or-nothing": "flag",
  "--job": "flag",
  "--dir": "value",
  "--leave-running": "flag",
  "--deadline": "value",
  "--json": "flag",
  "--simulate": "flag",
  "--memory-mib": "value",
  "--gpu": "value",
  "--command": "value",
};

/** The short names NVIDIA's utility has. */
const SHORT: Readonly<Record<string, string>> = {
  "-p": "--pid",
  "-t": "--timeout",
  "-d": "--device-map",
  "-h": "--help",
};

/** Options of later drivers' utility, and the driver that brought each. */
const NEWER: Readonly<Record<string, { name: string; driver: number; what: string }>> = {
  "--launch-job": {
    name: "--launch-job (-j)",
    driver: 590,
    what: "starts a program with a job file",
  },
  "-j": { name: "--launch-job (-j)", driver: 590, what: "starts a program with a job file" },
};

const SUBCOMMANDS = [
  "list",
  "ps",
  "spawn",
  "kill",
  "reset",
  "snapshot",
  "restore-snapshot",
  "inspect",
];
const SNAPSHOT_COMMANDS = ["snapshot", "restore-snapshot", "inspect"];
const SIMULATOR_ONLY = ["spawn", "kill", "reset"];

/** What the parse loop collects before the checks that need all of it. */
interface Seen {
  operations: string[];
  operation?: CliOperation;
  pids: number[];
  timeout?: number;
  deadline?: number;
  dir?: string;
  gpuMapping?: Record<string, string>;
  flags: Set<string>;
  positionals: string[];
  spawn: { memoryMiB?: number; gpus?: number[]; command?: string };
}

/**
 * Reads the command line. Throws {@link UsageError} for bad input, with NVIDIA's message where it
 * has one. `--help` and `--version` win over what comes after them, as in `getopt` loops.
 */
export function parseCommandLine(args: readonly string[]): Command {
  const seen: Seen = { operations: [], pids: [], flags: new Set(), positionals: [], spawn: {} };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--") {
      seen.positionals.push(...args.slice(i + 1));
      break;
    }
    if (!arg.startsWith("-") || arg === "-") {
      seen.positionals.push(arg);
      continue;
    }
    let name: string;
    let inline: string | undefined;
    if (arg.startsWith("--")) {
      const eq = arg.indexOf("=");
      name = eq < 0 ? arg : arg.slice(0, eq);
      inline = eq < 0 ? undefined : arg.slice(eq + 1);
    } else {
      name = arg.slice(0, 2);
      inline = arg.length > 2 ? arg.slice(2) : undefined;
    }
    const newer = NEWER[name];
    if (newer) {
      throw new UsageError(
        `${newer.name} is an option of NVIDIA's cuda-checkpoint from driver ${newer.driver} (it ` +
          `${newer.what}); this cuda-checkpoint follows driver 580's, which lacks it`,
      );
    }
    const long = SHORT[name] ?? name;
    const kind = OPTIONS[long];
    const isLong = name.startsWith("--");
    if (kind === undefined) {
      throw new UsageError(
        NVIDIA_MESSAGES.badOption,
        `unknown option ${JSON.stringify(name)}`,
        isLong ? `unrecognized option '${arg}'` : `invalid option -- '${name.slice(1)}'`,
      );
    }
    let value: string | undefined;
    if (kind === "value") {
      value = inline ?? args[++i];
      if (value === undefined) {
        throw new UsageError(
          NVIDIA_MESSAGES.badOption,
          `${long} needs a value`,
          isLong
            ? `option '${name}' requires an argument`
            : `option requires an argument -- '${name.slice(1)}'`,
        );
      }
    } else if (inline !== undefined) {
      throw new UsageError(
        NVIDIA_MESSAGES.badOption,
        `${long} takes no value, got ${arg}`,
        isLong ? `option '${name}' doesn't allow an argument` : undefined,
      );
    }
    if (long === "--help") return { kind: "help" };
    if (long === "--version") return { kind: "version" };
    take(seen, long, value);
  }
  return finish(seen);
}

/** Records one option. */
function take(seen: Seen, long: string, value: string | undefined): void {
  switch (long) {
    case "--get-state":
    case "--get-restore-tid":
    case "--toggle":
      seen.operations.push(long);
      seen.operation = long.slice(2) as CliOperation;
      return;
    case "--action":
      if (!ACTIONS.includes(value as CliOperation)) {
        throw new UsageError(
          NVIDIA_MESSAGES.badAction,
          `--action takes ${ACTIONS.join(", ")}; got ${JSON.stringify(value)}`,
        );
      }
      seen.operations.push(`--action ${value}`);
      seen.operation = value as CliOperation;
      return;
    case "--pid":
      for (const pid of parsePids(value!)) {
        if (seen.pids.includes(pid)) {
          throw new UsageError(`pid ${pid} is given twice`, "give each process once");
        }
        seen.pids.push(pid);
      }
      return;
    case "--timeout":
      seen.timeout = parseTimeout(value!);
      return;
    case "--device-map":
      seen.gpuMapping = parseDeviceMap(value!);
      return;
    case "--deadline":
      seen.deadline = parseCount(value!, "--deadline", "a whole number of milliseconds");
      return;
    case "--dir":
      if (value === "" || value!.includes("\0")) {
        throw new UsageError("--dir must name a directory", `got ${JSON.stringify(value)}`);
      }
      seen.dir = value!;
      return;
    case "--memory-mib":
      seen.spawn.memoryMiB = parseCount(value!, "--memory-mib", "a whole number of MiB");
      return;
    case "--gpu":
      seen.spawn.gpus = value!.split(",").map((part) =>
        parseCount(part, "--gpu", "a GPU index or a comma list of them (0,1)", value)
      );
      return;
    case "--command":
      seen.spawn.command = value!;
      return;
    default:
      seen.flags.add(long);
  }
}

/**
 * `--pid`'s value: one pid or a comma list. As NVIDIA's utility: a number that a C `int` holds
 * (0 included: the driver then says that no process has it), else "pid must be a non-negative
 * integer".
 */
export function parsePids(text: string): number[] {
  return text.split(",").map((part) => {
    const pid = /^[0-9]+$/.test(part) ? Number(part) : NaN;
    if (!(pid <= MAX_PID)) {
      throw new UsageError(
        NVIDIA_MESSAGES.badPid,
        /^[0-9]+$/.test(part)
          ? `got ${part}, more than the largest pid, ${MAX_PID}`
          : `got ${JSON.stringify(part)}`,
      );
    }
    return pid;
  });
}

/** `--timeout`'s value: ms from 0 (wait forever) to 2^32-1. */
function parseTimeout(text: string): number {
  const ms = /^[0-9]+$/.test(text) ? Number(text) : NaN;
  if (!(ms <= MAX_TIMEOUT_MS)) {
    throw new UsageError(
      NVIDIA_MESSAGES.badTimeout,
      `got ${JSON.stringify(text)}; the lock timeout is a whole number of milliseconds from 0 ` +
        `(wait as long as it takes) to ${MAX_TIMEOUT_MS}`,
    );
  }
  return ms;
}

/** `--device-map`'s value: `old=new,old=new`, GPU UUIDs, each old GPU once. */
export function parseDeviceMap(text: string): Record<string, string> {
  const mapping: Record<string, string> = {};
  const olds = new Set<string>();
  for (const pair of text.split(",")) {
    const parts = pair.split("=");
    if (parts.length !== 2) {
      throw new UsageError(
        NVIDIA_MESSAGES.badDeviceMap,
        `${JSON.stringify(pair)} is not old=new; --device-map takes ` +
          `GPU-<uuid>=GPU-<uuid>,... naming every GPU`,
      );
    }
    const [from, to] = parts;
    let key: string;
    try {
      key = Array.from(parseGpuUuid(from, "the GPU")).join(",");
      parseGpuUuid(to, "the GPU");
    } catch (error) {
      throw new UsageError(NVIDIA_MESSAGES.badDeviceMap, (error as Error).message);
    }
    if (olds.has(key)) {
      throw new UsageError(NVIDIA_MESSAGES.badDeviceMap, `${from} is mapped twice`);
    }
    olds.add(key);
    mapping[from] = to;
  }
  return mapping;
}

/** A whole number for the simulator's options. */
function parseCount(text: string, option: string, what: string, whole = text): number {
  if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(`${option} must be ${what}`, `got ${JSON.stringify(whole)}`);
  }
  return Number(text);
}

/** The checks that need the whole command line, in NVIDIA's order where it has them. */
function finish(seen: Seen): Command {
  const json = seen.flags.has("--json");
  const simulate = seen.flags.has("--simulate");
  const [sub, ...rest] = seen.positionals;
  if (sub !== undefined && !SUBCOMMANDS.includes(sub)) {
    throw new UsageError(NVIDIA_MESSAGES.badOption, `unexpected argument ${JSON.stringify(sub)}`);
  }
  const spawnOptions = Object.keys(seen.spawn).length > 0;
  if (spawnOptions && sub !== "spawn") {
    throw new UsageError("--memory-mib, --gpu and --command are only valid with --simulate spawn");
  }
  const snapshotOnly = ["--dir", "--leave-running", "--deadline"].filter((f) =>
    f === "--dir"
      ? seen.dir !== undefined
      : f === "--deadline"
      ? seen.deadline !== undefined
      : seen.flags.has(f)
  );
  if (sub !== undefined && SNAPSHOT_COMMANDS.includes(sub)) return snapshotCommand(sub, rest, seen);
  if (snapshotOnly.length > 0) {
    throw new UsageError(
      `${snapshotOnly[0]} is only valid with snapshot, restore-snapshot and inspect`,
    );
  }
  if (sub !== undefined) {
    if (SIMULATOR_ONLY.includes(sub) && !simulate) {
      throw new UsageError(
        `${sub} is only valid with --simulate`,
        "spawn, kill and reset work on the simulated machine of the state file",
      );
    }
    const extra = sub === "kill" ? rest.slice(1) : rest;
    if (extra.length > 0) {
      throw new UsageError(
        NVIDIA_MESSAGES.badOption,
        `unexpected argument ${JSON.stringify(extra[0])}`,
      );
    }
    const others = [
      ...seen.operations,
      ...(seen.pids.length > 0 && sub !== "kill" ? ["--pid"] : []),
      ...["--all", "--all-or-nothing", "--job"].filter((f) => seen.flags.has(f)),
      ...(seen.timeout !== undefined ? ["--timeout"] : []),
      ...(seen.gpuMapping ? ["--device-map"] : []),
    ];
    if (others.length > 0) {
      throw new UsageError(`${sub} takes no ${others[0]}`);
    }
    if (sub === "list" || sub === "ps") return { kind: "list", json, simulate };
    if (sub === "reset") return { kind: "reset", json, simulate };
    if (sub === "spawn") return { kind: "spawn", json, simulate, ...seen.spawn };
    const pids = rest.length > 0 ? parsePids(rest[0]) : seen.pids;
    if (pids.length !== 1) {
      throw new UsageError(
        "--simulate kill takes the pid of one simulated process",
        `got ${pids.length === 0 ? "none" : pids.join(",")}`,
      );
    }
    return { kind: "kill", json, simulate, pid: pids[0] };
  }
  if (seen.operations.length === 0) throw new UsageError(NVIDIA_MESSAGES.noOperation);
  if (seen.operations.length > 1) {
    throw new UsageError(
      NVIDIA_MESSAGES.tooManyOperations,
      `got ${seen.operations.join(" and ")}; one operation at a time`,
    );
  }
  const operation = seen.operation!;
  const all = seen.flags.has("--all");
  if (all && seen.pids.length > 0) {
    throw new UsageError("--all and --pid cannot be used together");
  }
  if (!all && seen.pids.length === 0) throw new UsageError(NVIDIA_MESSAGES.missingPid);
  if (seen.timeout !== undefined && operation !== "lock") {
    throw new UsageError(NVIDIA_MESSAGES.timeoutNotLock);
  }
  if (seen.gpuMapping !== undefined && operation !== "restore" && operation !== "toggle") {
    throw new UsageError(
      NVIDIA_MESSAGES.remapNotRestore,
      "--device-map goes with --action restore and --toggle",
    );
  }
  const allOrNothing = seen.flags.has("--all-or-nothing");
  if (allOrNothing && (operation === "get-state" || operation === "get-restore-tid")) {
    throw new UsageError("--all-or-nothing is only valid for --action and --toggle operations");
  }
  const job = seen.flags.has("--job");
  if (job && (operation === "get-state" || operation === "get-restore-tid")) {
    throw new UsageError("--job is only valid for --action and --toggle operations");
  }
  return {
    kind: "operation",
    operation,
    targets: all ? "all" : seen.pids,
    ...(seen.timeout !== undefined ? { timeoutMs: seen.timeout } : {}),
    ...(seen.gpuMapping !== undefined ? { gpuMapping: seen.gpuMapping } : {}),
    allOrNothing,
    job,
    json,
    simulate,
  };
}

/** `snapshot`, `restore-snapshot` and `inspect`: what each takes, and nothing else. */
function snapshotCommand(sub: string, rest: readonly string[], seen: Seen): Command {
  const json = seen.flags.has("--json");
  const simulate = seen.flags.has("--simulate");
  const allowed: Record<string, readonly string[]> = {
    "snapshot": ["--pid", "--dir", "--leave-running", "--job", "--timeout", "--deadline"],
    "restore-snapshot": ["--dir", "--device-map", "--deadline"],
    "inspect": ["--dir"],
  };
  const given = [
    ...seen.operations,
    ...(seen.pids.length > 0 ? ["--pid"] : []),
    ...(seen.dir !== undefined ? ["--dir"] : []),
    ...(seen.timeout !== undefined ? ["--timeout"] : []),
    ...(seen.deadline !== undefined ? ["--deadline"] : []),
    ...(seen.gpuMapping ? ["--device-map"] : []),
    ...["--all", "--all-or-nothing", "--job", "--leave-running"].filter((f) => seen.flags.has(f)),
  ];
  const stray = given.find((g) => !allowed[sub].includes(g));
  if (stray) throw new UsageError(`${sub} takes no ${stray}`);
  let dir = seen.dir;
  if (sub === "inspect" && rest.length === 1 && dir === undefined) dir = rest[0];
  else if (rest.length > 0) {
    throw new UsageError(
      NVIDIA_MESSAGES.badOption,
      `unexpected argument ${JSON.stringify(rest[0])}`,
    );
  }
  if (dir === undefined) {
    throw new UsageError(`${sub} needs --dir DIR`, "the snapshot's directory");
  }
  const deadline = seen.deadline !== undefined ? { deadlineMs: seen.deadline } : {};
  if (sub === "inspect") return { kind: "inspect", dir, json, simulate };
  if (sub === "restore-snapshot") {
    return {
      kind: "restore-snapshot",
      dir,
      ...(seen.gpuMapping ? { gpuMapping: seen.gpuMapping } : {}),
      ...deadline,
      json,
      simulate,
    };
  }
  if (seen.pids.length === 0) {
    throw new UsageError("snapshot needs --pid PID[,PID...]", "the roots of the process trees");
  }
  if (seen.pids.includes(0)) {
    throw new UsageError(NVIDIA_MESSAGES.badPid, "got 0: no process has it");
  }
  return {
    kind: "snapshot",
    roots: seen.pids,
    dir,
    leaveRunning: seen.flags.has("--leave-running"),
    job: seen.flags.has("--job"),
    ...(seen.timeout !== undefined ? { lockTimeoutMs: seen.timeout } : {}),
    ...deadline,
    json,
    simulate,
  };
}
