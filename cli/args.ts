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

import { formatGpuUuid, MAX_PID, MAX_TIMEOUT_MS, parseGpuUuid } from "../core/options.ts";

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

/** What every command but help and version has: `--json`, `--simulate` (the state file's machine). */
interface Common {
  readonly json: boolean;
  readonly simulate: boolean;
}

/** An operation on processes. */
export interface OperationCommand extends Common {
  readonly kind: "operation";
  readonly operation: CliOperation;
  /** The pids, in the order given, or every CUDA process of the machine. */
  readonly targets: readonly number[] | "all";
  /** `--timeout`, in ms (lock only). */
  readonly timeoutMs?: number;
  /** `--device-map`: each old GPU onto its new one (restore and toggle only). */
  readonly gpuMapping?: Readonly<Record<string, string>>;
  /** `--all-or-nothing`: a failure rolls the other processes back. */
  readonly allOrNothing: boolean;
  /** `--job`: the processes share GPU state: all locked before any checkpoint, and so on. */
  readonly job: boolean;
  /** `--no-room-check`: `false`, a restore is not checked for GPU room first (restore, toggle). */
  readonly checkRoom?: false;
  /** `--allow-ipc-import`: a process that imported GPU memory is checkpointed anyway. */
  readonly allowIpcImport?: true;
}

/** `snapshot`: process trees (`--pid`: their roots) to a directory. */
export interface SnapshotCommand extends Common {
  readonly kind: "snapshot";
  readonly roots: readonly number[];
  readonly dir: string;
  readonly leaveRunning: boolean;
  readonly job: boolean;
  /** `--timeout`: each CUDA process's lock timeout in ms (10 000 when left out). */
  readonly lockTimeoutMs?: number;
  /** `--deadline`: ms for the whole snapshot. */
  readonly deadlineMs?: number;
  /** `--allow-ipc-import`: a process that imported GPU memory is suspended anyway. */
  readonly allowIpcImport?: true;
  /** `--tcp-established`: established TCP connections are taken too. */
  readonly tcpEstablished?: true;
}

/** `inspect`: a snapshot's manifest, checked against its files. */
export interface InspectCommand extends Common {
  readonly kind: "inspect";
  readonly dir: string;
  /** `--verify`: every file's digest checked too, as a restore checks it. */
  readonly verify: boolean;
}

/** `recover`: the processes a snapshot killed outright left suspended, resumed. */
export interface RecoverCommand extends Common {
  readonly kind: "recover";
  readonly dir: string;
  /** `--no-room-check`: `false`, the resumes' room is not checked first. */
  readonly checkRoom?: false;
}

/** `restore-snapshot`: a snapshot's processes back. */
export interface RestoreSnapshotCommand extends Common {
  readonly kind: "restore-snapshot";
  readonly dir: string;
  /** `--device-map`: the snapshot's GPUs onto this machine's. */
  readonly gpuMapping?: Readonly<Record<string, string>>;
  /** `--deadline`: ms for the whole restore. */
  readonly deadlineMs?: number;
  /** `--no-room-check`: `false`, the GPUs' room is not checked first. */
  readonly checkRoom?: false;
}

/** What the command line asks for. */
export type Command =
  | { readonly kind: "help" }
  | { readonly kind: "version" }
  | OperationCommand
  | SnapshotCommand
  | RestoreSnapshotCommand
  | InspectCommand
  | RecoverCommand
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
  /**
   * The subcommand of ours the command line names (`snapshot`, `list`, ...), if any: then the
   * message is followed by a line pointing at `--help`, not by the whole help as NVIDIA's is.
   */
  readonly subcommand: string | undefined;

  constructor(message: string, detail?: string, getopt?: string, subcommand?: string) {
    super(message);
    this.name = "UsageError";
    this.detail = detail;
    this.getopt = getopt;
    this.subcommand = subcommand;
  }
}

/** The options, by long name: those that take no value, and those that take one. */
const FLAGS = new Set(
  ("--get-state --get-restore-tid --toggle --help --version --all --all-or-nothing --job " +
    "--leave-running --json --simulate --verify --no-room-check --allow-ipc-import " +
    "--tcp-established").split(" "),
);
const VALUED = new Set(
  "--action --pid --timeout --device-map --dir --deadline --memory-mib --gpu --command".split(" "),
);
/** The short names NVIDIA's utility has. */
const SHORT: Readonly<Record<string, string>> = {
  "-p": "--pid",
  "-t": "--timeout",
  "-d": "--device-map",
  "-h": "--help",
};
const SUBCOMMANDS = "list ps spawn kill reset snapshot restore-snapshot inspect recover".split(
  " ",
);
const SNAPSHOT_COMMANDS = ["snapshot", "restore-snapshot", "inspect", "recover"];
/** The options of operations and snapshots that each subcommand takes: the others are refused. */
const TAKES: Readonly<Record<string, readonly string[]>> = {
  kill: ["--pid"],
  snapshot: [
    "--pid",
    "--dir",
    "--leave-running",
    "--job",
    "--timeout",
    "--deadline",
    "--allow-ipc-import",
    "--tcp-established",
  ],
  "restore-snapshot": ["--dir", "--device-map", "--deadline", "--no-room-check"],
  inspect: ["--dir", "--verify"],
  recover: ["--dir", "--no-room-check"],
};
const SIMULATOR_ONLY = ["spawn", "kill", "reset"];
/** The options of operations and snapshots that a subcommand may not take (see `TAKES`). */
const STRAY = ["--pid", "--dir", "--timeout", "--deadline", "--device-map"];

/** What the parse loop collects before the checks that need all of it. */
interface Seen {
  /** The subcommand the command line names (its first positional), if one of ours. */
  sub?: string;
  /** `--toggle`, `--action lock`, ... */
  operations: string[];
  /** Every option given, by long name. */
  given: Set<string>;
  pids: number[];
  timeout?: number;
  deadline?: number;
  dir?: string;
  gpuMapping?: Record<string, string>;
  positionals: string[];
  spawn: { memoryMiB?: number; gpus?: number[]; command?: string };
}

/**
 * Reads the command line. Throws {@link UsageError} for bad input, with NVIDIA's message where it
 * has one. `--help` and `--version` win over what comes after them, as in `getopt` loops.
 */
export function parseCommandLine(args: readonly string[]): Command {
  const sub = subcommandOf(args);
  try {
    return parse(args, sub);
  } catch (error) {
    if (!(error instanceof UsageError) || sub === undefined) throw error;
    throw new UsageError(error.message, error.detail, error.getopt, sub);
  }
}

/** The subcommand of ours that is the command line's first positional argument, if any. */
function subcommandOf(args: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    const word = arg === "--" ? args[i + 1] : !arg.startsWith("-") || arg === "-" ? arg : null;
    if (word !== null) return SUBCOMMANDS.includes(word) ? word : undefined;
    const long = arg.startsWith("--") ? arg.split("=")[0] : SHORT[arg.slice(0, 2)];
    if (VALUED.has(long) && (arg.startsWith("--") ? !arg.includes("=") : arg.length === 2)) i++;
  }
  return undefined;
}

function parse(args: readonly string[], sub: string | undefined): Command {
  const seen: Seen = {
    sub,
    operations: [],
    given: new Set(),
    pids: [],
    positionals: [],
    spawn: {},
  };
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
    const isLong = arg.startsWith("--");
    const eq = isLong ? arg.indexOf("=") : -1;
    const name = isLong ? (eq < 0 ? arg : arg.slice(0, eq)) : arg.slice(0, 2);
    let inline = isLong ? (eq < 0 ? undefined : arg.slice(eq + 1)) : arg.slice(2) || undefined;
    if (name === "--launch-job" || name === "-j") {
      throw new UsageError(
        "--launch-job (-j) is an option of NVIDIA's cuda-checkpoint from driver 590 (it starts a " +
          "program with a job file); this cuda-checkpoint follows driver 580's, which lacks it",
      );
    }
    const long = SHORT[name] ?? name;
    const valued = VALUED.has(long);
    if (!valued && !FLAGS.has(long)) {
      throw badOption(
        `unknown option ${JSON.stringify(name)}`,
        isLong ? `unrecognized option '${arg}'` : `invalid option -- '${name.slice(1)}'`,
      );
    }
    if (valued && (inline ??= args[++i]) === undefined) {
      throw badOption(
        `${long} needs a value`,
        isLong
          ? `option '${name}' requires an argument`
          : `option requires an argument -- '${name.slice(1)}'`,
      );
    }
    if (!valued && inline !== undefined) {
      throw badOption(
        `${long} takes no value, got ${arg}`,
        isLong ? `option '${name}' doesn't allow an argument` : undefined,
      );
    }
    if (long === "--help") return { kind: "help" };
    if (long === "--version") return { kind: "version" };
    seen.given.add(long);
    if (valued) take(seen, long, inline!);
    else if (long === "--get-state" || long === "--get-restore-tid" || long === "--toggle") {
      seen.operations.push(long);
    }
  }
  return finish(seen);
}

/** Records the value of an option that takes one. */
function take(seen: Seen, long: string, value: string): void {
  // An option the named subcommand does not take is refused as such (refuseStray), its value
  // unread: `snapshot --device-map X` is not about the map.
  if (seen.sub && STRAY.includes(long) && !TAKES[seen.sub]?.includes(long)) return;
  switch (long) {
    case "--action":
      if (!ACTIONS.includes(value as CliOperation)) {
        throw new UsageError(
          NVIDIA_MESSAGES.badAction,
          `--action takes ${ACTIONS.join(", ")}; got ${JSON.stringify(value)}`,
        );
      }
      seen.operations.push(`--action ${value}`);
      return;
    case "--pid":
      for (const pid of parsePids(value)) {
        if (seen.pids.includes(pid)) {
          throw new UsageError(`pid ${pid} is given twice`, "give each process once");
        }
        seen.pids.push(pid);
      }
      return;
    case "--timeout":
      seen.timeout = parseTimeout(value);
      return;
    case "--device-map":
      seen.gpuMapping = parseDeviceMap(value);
      return;
    case "--deadline":
      seen.deadline = parseCount(value, "--deadline", "a whole number of milliseconds");
      return;
    case "--dir":
      if (value === "" || value.includes("\0")) {
        throw new UsageError("--dir must name a directory", `got ${JSON.stringify(value)}`);
      }
      seen.dir = value;
      return;
    case "--memory-mib":
      seen.spawn.memoryMiB = parseCount(value, "--memory-mib", "a whole number of MiB");
      return;
    case "--gpu":
      seen.spawn.gpus = value.split(",").map((part) =>
        parseCount(part, "--gpu", "a GPU index or a comma list of them (0,1)", value)
      );
      return;
    default: // --command
      seen.spawn.command = value;
  }
}

/**
 * `--pid`'s value: one pid or a comma list. As NVIDIA's utility: a number that a C `int` holds
 * (0 included: the driver then says that no process has it), else "pid must be a non-negative
 * integer".
 */
function parsePids(text: string): number[] {
  return text.split(",").map((part) => {
    const digits = /^[0-9]+$/.test(part);
    if (digits && Number(part) <= MAX_PID) return Number(part);
    throw new UsageError(
      NVIDIA_MESSAGES.badPid,
      digits ? `got ${part}, more than the largest pid, ${MAX_PID}` : `got ${JSON.stringify(part)}`,
    );
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

/** `--device-map`'s value: `old=new,old=new`, GPU UUIDs, each old GPU once, as a `gpuMapping`. */
function parseDeviceMap(text: string): Record<string, string> {
  const mapping: Record<string, string> = {};
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
    let old: string, onto: string;
    try {
      old = formatGpuUuid(parseGpuUuid(from, "the GPU"));
      onto = formatGpuUuid(parseGpuUuid(to, "the GPU"));
    } catch (error) {
      throw new UsageError(NVIDIA_MESSAGES.badDeviceMap, (error as Error).message);
    }
    if (old in mapping) {
      throw new UsageError(NVIDIA_MESSAGES.badDeviceMap, `${from} is mapped twice`);
    }
    mapping[old] = onto;
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

/** NVIDIA's message for an option it does not know, or an argument no option takes. */
function badOption(detail: string, getopt?: string): UsageError {
  return new UsageError(NVIDIA_MESSAGES.badOption, detail, getopt);
}

function unexpected(arg: string): UsageError {
  return badOption(`unexpected argument ${JSON.stringify(arg)}`);
}

/** Refuses the first operation, else the first of `options`, given that `sub` does not take. */
function refuseStray(sub: string, seen: Seen, options: string): void {
  const stray = [...seen.operations, ...options.split(" ").filter((o) => seen.given.has(o))]
    .find((o) => !TAKES[sub]?.includes(o));
  if (stray === "--device-map" && (sub === "snapshot" || sub === "inspect")) {
    throw new UsageError(
      `${sub} takes no --device-map: the GPUs to restore onto are given to restore-snapshot`,
    );
  }
  if (stray) throw new UsageError(`${sub} takes no ${stray}`);
}

/** The checks that need the whole command line, in NVIDIA's order where it has them. */
function finish(seen: Seen): Command {
  const has = (option: string) => seen.given.has(option);
  const common = { json: has("--json"), simulate: has("--simulate") };
  const [sub, ...rest] = seen.positionals;
  if (sub !== undefined && !SUBCOMMANDS.includes(sub)) throw unexpected(sub);
  if (Object.keys(seen.spawn).length > 0 && sub !== "spawn") {
    throw new UsageError("--memory-mib, --gpu and --command are only valid with --simulate spawn");
  }
  if (sub !== undefined && SNAPSHOT_COMMANDS.includes(sub)) {
    return snapshotCommand(sub, rest, seen, common);
  }
  if (has("--verify")) throw new UsageError("--verify is only valid with inspect");
  const noRoom = has("--no-room-check") ? { checkRoom: false as const } : {};
  const snapshotOnly = ["--dir", "--leave-running", "--deadline"].find(has);
  if (snapshotOnly) {
    throw new UsageError(
      `${snapshotOnly} is only valid with snapshot, restore-snapshot, inspect and recover`,
    );
  }
  if (sub !== undefined) {
    if (SIMULATOR_ONLY.includes(sub) && !common.simulate) {
      throw new UsageError(
        `${sub} is only valid with --simulate`,
        "spawn, kill and reset work on the simulated machine of the state file",
      );
    }
    const extra = sub === "kill" ? rest.slice(1) : rest;
    if (extra.length > 0) throw unexpected(extra[0]);
    refuseStray(
      sub,
      seen,
      "--pid --all --all-or-nothing --job --timeout --device-map --no-room-check " +
        "--allow-ipc-import",
    );
    if (sub === "list" || sub === "ps") return { kind: "list", ...common };
    if (sub === "reset") return { kind: "reset", ...common };
    if (sub === "spawn") return { kind: "spawn", ...common, ...seen.spawn };
    const pids = rest.length > 0 ? parsePids(rest[0]) : seen.pids;
    if (pids.length !== 1) {
      throw new UsageError(
        "--simulate kill takes the pid of one simulated process",
        `got ${pids.length === 0 ? "none" : pids.join(",")}`,
      );
    }
    return { kind: "kill", ...common, pid: pids[0] };
  }
  if (seen.operations.length === 0) throw new UsageError(NVIDIA_MESSAGES.noOperation);
  if (seen.operations.length > 1) {
    throw new UsageError(
      NVIDIA_MESSAGES.tooManyOperations,
      `got ${seen.operations.join(" and ")}; one operation at a time`,
    );
  }
  const operation = seen.operations[0].replace(/^--(action )?/, "") as CliOperation;
  const all = has("--all");
  if (all && has("--pid")) throw new UsageError("--all and --pid cannot be used together");
  if (!all && !has("--pid")) throw new UsageError(NVIDIA_MESSAGES.missingPid);
  if (has("--timeout") && operation !== "lock") {
    throw new UsageError(NVIDIA_MESSAGES.timeoutNotLock);
  }
  if (has("--device-map") && operation !== "restore" && operation !== "toggle") {
    throw new UsageError(
      NVIDIA_MESSAGES.remapNotRestore,
      "--device-map goes with --action restore and --toggle",
    );
  }
  if (has("--no-room-check") && operation !== "restore" && operation !== "toggle") {
    throw new UsageError(
      "--no-room-check is only valid with --action restore, --toggle, restore-snapshot and recover",
    );
  }
  const allowIpc = has("--allow-ipc-import") ? { allowIpcImport: true as const } : {};
  if (allowIpc.allowIpcImport && !["checkpoint", "toggle"].includes(operation)) {
    throw new UsageError(
      "--allow-ipc-import is only valid with --action checkpoint, --toggle and snapshot",
    );
  }
  const groupOnly = ["--all-or-nothing", "--job"].find(has);
  if (groupOnly && (operation === "get-state" || operation === "get-restore-tid")) {
    throw new UsageError(`${groupOnly} is only valid for --action and --toggle operations`);
  }
  return {
    kind: "operation",
    operation,
    targets: all ? "all" : seen.pids,
    ...(seen.timeout !== undefined ? { timeoutMs: seen.timeout } : {}),
    ...(seen.gpuMapping !== undefined ? { gpuMapping: seen.gpuMapping } : {}),
    allOrNothing: has("--all-or-nothing"),
    job: has("--job"),
    ...noRoom,
    ...allowIpc,
    ...common,
  };
}

/** `snapshot`, `restore-snapshot`, `inspect` and `recover`: what each takes, and nothing else. */
function snapshotCommand(sub: string, rest: string[], seen: Seen, common: Common): Command {
  refuseStray(
    sub,
    seen,
    "--pid --dir --timeout --deadline --device-map --all --all-or-nothing --job --leave-running " +
      "--verify --no-room-check --allow-ipc-import --tcp-established",
  );
  // The directory, as `--dir DIR` or as the one positional argument (`inspect DIR`), once.
  if (rest.length > 1 || (rest.length === 1 && seen.dir !== undefined && seen.dir !== rest[0])) {
    throw new UsageError(
      `${sub} takes one directory, as DIR or --dir DIR; got ${
        [...(seen.dir !== undefined ? [seen.dir] : []), ...rest].map((d) => JSON.stringify(d))
          .join(" and ")
      }`,
    );
  }
  if (rest.length === 1) take(seen, "--dir", rest[0]);
  const dir = seen.dir;
  if (dir === undefined) {
    throw new UsageError(`${sub} needs the snapshot's directory, as DIR or --dir DIR`);
  }
  const deadline = seen.deadline !== undefined ? { deadlineMs: seen.deadline } : {};
  if (sub === "inspect") {
    return { kind: "inspect", dir, verify: seen.given.has("--verify"), ...common };
  }
  if (sub === "recover") {
    return {
      kind: "recover",
      dir,
      ...(seen.given.has("--no-room-check") ? { checkRoom: false as const } : {}),
      ...common,
    };
  }
  if (sub === "restore-snapshot") {
    return {
      kind: "restore-snapshot",
      dir,
      ...(seen.gpuMapping ? { gpuMapping: seen.gpuMapping } : {}),
      ...deadline,
      ...(seen.given.has("--no-room-check") ? { checkRoom: false as const } : {}),
      ...common,
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
    leaveRunning: seen.given.has("--leave-running"),
    job: seen.given.has("--job"),
    ...(seen.timeout !== undefined ? { lockTimeoutMs: seen.timeout } : {}),
    ...deadline,
    ...(seen.given.has("--allow-ipc-import") ? { allowIpcImport: true as const } : {}),
    ...(seen.given.has("--tcp-established") ? { tcpEstablished: true as const } : {}),
    ...common,
  };
}
