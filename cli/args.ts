/**
 * The command line of `cuda-checkpoint`, read into a {@link Command}. Flags and messages are
 * NVIDIA's as of driver 580 (docs/DRIVER.md#messages-and-exit-codes) where it has them, ours in the
 * same style where it has none (several pids, `--all`, `--json`, our subcommands). A message is one
 * line; a {@link UsageError}'s `detail` says more, on a terminal only, so that piped output stays
 * NVIDIA's. Options are read from one table, as `getopt_long` reads them (`--pid 5`, `--pid=5`,
 * `-p 5`, `-p5`, a value that starts with `-`); the checks that need the whole line follow, in
 * NVIDIA's order where it has one (its messages depend on which check fails first).
 *
 * @module
 */

import { formatGpuUuid, MAX_PID, MAX_TIMEOUT_MS, MAX_TIMER_MS, nearest } from "../core/options.ts";
import { parseGpuUuid } from "../core/options.ts";
import { ACTIONS, type Command, NVIDIA_MESSAGES, UsageError } from "./command.ts";
import type { CliOperation, Common, OperationCommand } from "./command.ts";

/** What the parse loop collects: each option's value by its command field, and what else. */
interface Seen {
  operations: string[];
  given: Set<string>;
  pids: number[];
  fields: Record<string, unknown>;
  words: string[];
}

/**
 * An option: its short name (NVIDIA's four have one), the command field it sets, and, where it
 * takes a value, the value's reader (a flag sets `true`, `--no-room-check` `checkRoom: false`).
 */
type Option = { short?: string; field?: string; value?: (text: string, seen: Seen) => unknown };

const FLAGS = ("--get-state --get-restore-tid --toggle --version --all --all-or-nothing --job " +
  "--json --events --leave-running --simulate --verify --allow-ipc-import --tcp-established")
  .split(" ");
const camel = (name: string) => name.replace(/-([a-z])/g, (_, c) => c.toUpperCase());

/** Every option, by long name. */
const OPTIONS: Readonly<Record<string, Option>> = {
  ...Object.fromEntries(FLAGS.map((flag) => [flag, { field: camel(flag.slice(2)) }])),
  "--no-room-check": { field: "checkRoom" },
  "--help": { short: "-h" },
  "--action": { value: readAction },
  "--pid": { short: "-p", value: readPids },
  "--timeout": { short: "-t", field: "timeoutMs", value: parseTimeout },
  "--device-map": { short: "-d", field: "gpuMapping", value: parseDeviceMap },
  "--deadline": {
    field: "deadlineMs",
    value: (v) => count(v, "--deadline", "milliseconds", v, MAX_TIMER_MS),
  },
  "--dir": { field: "dir", value: readDir },
  "--memory-mib": { field: "memoryMiB", value: (v) => count(v, "--memory-mib", "MiB") },
  "--gpu": { field: "gpus", value: (v) => v.split(",").map((n) => count(n, "--gpu", "", v)) },
  "--command": { field: "command", value: (v) => v },
  "--parent": { field: "parent", value: (v) => count(v, "--parent", "pid", v, MAX_PID) },
};
const SHORT: Readonly<Record<string, string>> = Object.fromEntries(
  Object.entries(OPTIONS).flatMap(([long, o]) => o.short ? [[o.short, long]] : []),
);
const OPERATIONS = ["--get-state", "--get-restore-tid", "--toggle"];

/** Our subcommands, each with the options of operations and snapshots it takes. */
const SUBCOMMANDS: Readonly<Record<string, readonly string[]>> = Object.fromEntries(
  Object.entries({
    list: "",
    ps: "",
    spawn: "",
    kill: "--pid",
    reset: "",
    snapshot: "--pid --dir --leave-running --job --timeout --deadline --allow-ipc-import " +
      "--tcp-established",
    "restore-snapshot": "--dir --device-map --deadline --no-room-check",
    inspect: "--dir --verify",
    recover: "--dir --no-room-check",
  }).map(([sub, options]) => [sub, options.split(" ")]),
);
const isSubcommand = (word: string) => Object.hasOwn(SUBCOMMANDS, word);
/** Our options of one value, which may be given once (NVIDIA's: the last one given is the one). */
const SPAWN_OPTIONS = ["--memory-mib", "--gpu", "--command", "--parent"];
const ONCE = ["--dir", "--deadline", ...SPAWN_OPTIONS];
/** The options whose value a subcommand that does not take them leaves unread (refused as such). */
const UNREAD = ["--pid", "--dir", "--timeout", "--deadline", "--device-map"];
const FROM_590 = "--launch-job (-j) is an option of NVIDIA's cuda-checkpoint from driver 590 (it " +
  "starts a program with a job file); this cuda-checkpoint follows driver 580's, which lacks it";

/**
 * Reads the command line. Throws {@link UsageError} for bad input, with NVIDIA's message where it
 * has one. `--help` and `--version` win over what comes after them, as in `getopt` loops.
 */
export function parseCommandLine(args: readonly string[]): Command {
  const { options, words } = scan(args), [word] = words;
  const sub = word !== undefined && isSubcommand(word) ? word : undefined;
  try {
    return parse(options, sub, words);
  } catch (error) {
    if (!(error instanceof UsageError) || sub === undefined || error.tail) throw error;
    const tail = `Run cuda-checkpoint --help for what ${sub} takes.`;
    // No script of NVIDIA's runs our subcommands: a bad option gets our line, not its two.
    const ours = error.message === NVIDIA_MESSAGES.badOption;
    const [message, detail] = ours ? [error.detail!] : [error.message, error.detail];
    throw new UsageError(message, detail, ours ? undefined : error.getopt, tail);
  }
}

/** Whether the command line asks for `--json` as an option (not as another option's value). */
export const wantsJson = (args: readonly string[]): boolean =>
  scan(args).options.some((o) => o.long === "--json");

/** An option as typed (`arg`): its name there, the long option (or options) it names, its value. */
type Typed = { arg: string; name: string; long?: string | string[]; value?: string };
/** A command line's options in order and its words; an option's value is given with it, or next. */
function scan(args: readonly string[]): { options: Typed[]; words: string[] } {
  const options: Typed[] = [], words: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i], isLong = arg.startsWith("--"), eq = isLong ? arg.indexOf("=") : -1;
    if (arg === "--") return { options, words: [...words, ...args.slice(i + 1)] };
    if (!arg.startsWith("-") || arg === "-") {
      words.push(arg);
      continue;
    }
    const name = isLong ? (eq < 0 ? arg : arg.slice(0, eq)) : arg.slice(0, 2);
    const long = isLong ? longName(name) : SHORT[name];
    const inline = isLong ? (eq < 0 ? undefined : arg.slice(eq + 1)) : arg.slice(2) || undefined;
    const takes = typeof long === "string" && OPTIONS[long].value;
    options.push({ arg, name, long, value: inline ?? (takes ? args[++i] : undefined) });
  }
  return { options, words };
}

/** NVIDIA's long options, which an abbreviation names first (`--d` is `--device-map`). */
const NVIDIA_LONG =
  "--get-state --get-restore-tid --toggle --action --pid --timeout --device-map --help";

/**
 * A long option by its name or, as `getopt_long` takes it, by the start of one name only (of
 * NVIDIA's, else of all); the names it could be where it starts several, `undefined` where none.
 */
function longName(name: string): string | string[] | undefined {
  if (Object.hasOwn(OPTIONS, name)) return name;
  const of = (names: string[]) => names.filter((n) => n.startsWith(name));
  const theirs = of(NVIDIA_LONG.split(" ")), all = of(Object.keys(OPTIONS));
  const could = theirs.length > 0 ? theirs : all;
  return could.length === 1 ? could[0] : could.length > 1 ? could : undefined;
}

/** Reads the options as {@link scan} found them (and its words), then {@link finish}. */
function parse(options: Typed[], sub: string | undefined, words: string[]): Command {
  const seen: Seen = { operations: [], given: new Set(), pids: [], fields: {}, words };
  for (const { arg, name, long, value } of options) {
    const isLong = name.startsWith("--"), short = `-- '${name.slice(1)}'`;
    if (name === "--launch-job" || name === "-j") no(FROM_590);
    if (Array.isArray(long)) {
      const getopt = `option '${name}' is ambiguous; possibilities: '${long.join("' '")}'`;
      throw badOption(`${name} could be ${long.join(" or ")}`, getopt);
    }
    if (long === undefined) {
      const near = isLong ? nearer(name, Object.keys(OPTIONS)) : "";
      const getopt = isLong ? `unrecognized option '${arg}'` : `invalid option ${short}`;
      throw badOption(`unknown option ${JSON.stringify(name)}${near}`, getopt);
    }
    const option = OPTIONS[long];
    if (option.value && value === undefined) {
      const getopt = isLong
        ? `option '${name}' requires an argument`
        : `option requires an argument ${short}`;
      throw badOption(`${long} needs a value`, getopt);
    }
    if (!option.value && value !== undefined) {
      const getopt = isLong ? `option '${name}' doesn't allow an argument` : undefined;
      throw badOption(`${long} takes no value, got ${arg}`, getopt);
    }
    if (long === "--help") return { kind: "help" };
    if (long === "--version") return { kind: "version" };
    if (ONCE.includes(long) && seen.given.has(long)) no(`${long} is given twice`, "give it once");
    seen.given.add(long);
    if (OPERATIONS.includes(long) && !seen.operations.includes(long)) seen.operations.push(long);
    // Its value unread (UNREAD): `snapshot --device-map X` is refused as such, not as a map.
    if (sub && UNREAD.includes(long) && !SUBCOMMANDS[sub].includes(long)) continue;
    const read = option.value ? option.value(value!, seen) : long !== "--no-room-check";
    if (option.field) seen.fields[option.field] = read;
  }
  return finish(seen);
}

function readAction(value: string, seen: Seen): void {
  const got = `--action takes ${ACTIONS.join(", ")}; got ${JSON.stringify(value)}`;
  if (!(ACTIONS as readonly string[]).includes(value)) no(NVIDIA_MESSAGES.badAction, got);
  // As getopt leaves it to NVIDIA's loop: the last --action is the one.
  seen.operations = seen.operations.filter((o) => !o.startsWith("--action "));
  seen.operations.push(`--action ${value}`);
}

function readPids(value: string, seen: Seen): void {
  for (const pid of parsePids(value)) {
    if (seen.pids.includes(pid)) no(`pid ${pid} is given twice`, "give each process once");
    seen.pids.push(pid);
  }
}

function readDir(value: string): string {
  if (value !== "" && !value.includes("\0")) return value;
  throw new UsageError("--dir must name a directory", `got ${JSON.stringify(value)}`);
}

/** `--pid`'s value: pids (0 too) a C `int` holds, as NVIDIA's utility reads them. */
function parsePids(text: string): number[] {
  return text.split(",").map((part) => {
    const digits = /^[0-9]+$/.test(part);
    if (digits && Number(part) <= MAX_PID) return Number(part);
    const got = digits ? `${part}, more than the largest pid, ${MAX_PID}` : JSON.stringify(part);
    throw new UsageError(NVIDIA_MESSAGES.badPid, `got ${got}`);
  });
}

/** `--timeout`'s value: ms from 0 (wait forever) to 2^32-1. */
function parseTimeout(text: string): number {
  const ms = /^[0-9]+$/.test(text) ? Number(text) : NaN;
  if (ms <= MAX_TIMEOUT_MS) return ms;
  const whole = "a whole number of milliseconds from 0 (wait as long as it takes)";
  const got = `got ${JSON.stringify(text)}; the lock timeout is ${whole} to ${MAX_TIMEOUT_MS}`;
  throw new UsageError(NVIDIA_MESSAGES.badTimeout, got);
}

/** `--device-map`'s value: `old=new,...`, GPU UUIDs, each old GPU once, as a `gpuMapping`. */
function parseDeviceMap(text: string): Record<string, string> {
  const mapping: Record<string, string> = {};
  for (const pair of text.split(",")) {
    const parts = pair.split("=");
    const takes = "--device-map takes GPU-<uuid>=GPU-<uuid>,... naming every GPU";
    const not = `${JSON.stringify(pair)} is not old=new; ${takes}`;
    if (parts.length !== 2) no(NVIDIA_MESSAGES.badDeviceMap, not);
    const [old, onto] = parts.map((uuid) => {
      try {
        return formatGpuUuid(parseGpuUuid(uuid, "the GPU"));
      } catch (error) {
        throw new UsageError(NVIDIA_MESSAGES.badDeviceMap, (error as Error).message);
      }
    });
    if (old in mapping) no(NVIDIA_MESSAGES.badDeviceMap, `${parts[0]} is mapped twice`);
    mapping[old] = onto;
  }
  return mapping;
}

/** A whole number of `unit` up to `max` (no unit: a GPU index, of the list `whole`). */
function count(text: string, name: string, unit: string, whole = text, max = 2 ** 53 - 1): number {
  const min = unit === "pid" ? 1 : 0; // no process has pid 0
  if (/^[0-9]+$/.test(text) && Number(text) >= min && Number(text) <= max) return Number(text);
  const upTo = max < 2 ** 53 - 1 ? ` from ${min} to ${max}` : "";
  const what = unit === "pid"
    ? `the pid of a simulated process${upTo}`
    : unit
    ? `a whole number of ${unit}${upTo}`
    : "a GPU index or a comma list of them (0,1)";
  throw new UsageError(`${name} must be ${what}`, `got ${JSON.stringify(whole)}`);
}

/** ` (did you mean X?)`, X the nearest of `among` to `word`; or nothing. */
function nearer(word: string, among: string[]): string {
  const near = nearest(word, among);
  return near && near !== word ? ` (did you mean ${near}?)` : "";
}

function no(message: string, detail?: string): never {
  throw new UsageError(message, detail);
}

/** NVIDIA's message for an option it does not know, or an argument no option takes. */
const badOption = (detail: string, getopt?: string): UsageError =>
  new UsageError(NVIDIA_MESSAGES.badOption, detail, getopt);

/** Refuses the first operation, else the first option typed, that `sub` does not take. */
function refuseStray(sub: string, seen: Seen): void {
  // Every command takes these (spawn's options were refused before, but with spawn).
  const free = ["--json", "--events", "--simulate", ...SPAWN_OPTIONS];
  const typed = [...seen.given].filter((o) => !free.includes(o)); // in typed order
  const stray = [...seen.operations, ...typed].find((o) => !SUBCOMMANDS[sub].includes(o));
  if (stray === "--device-map" && (sub === "snapshot" || sub === "inspect")) {
    no(`${sub} takes no --device-map: the GPUs to restore onto are given to restore-snapshot`);
  }
  if (stray) throw new UsageError(`${sub} takes no ${stray}`);
}

function given(seen: Seen, names: string): Record<string, unknown> {
  const present = names.split(" ").filter((n) => n in seen.fields);
  return Object.fromEntries(present.map((n) => [n, seen.fields[n]]));
}

/** The checks that need the whole command line, in NVIDIA's order where it has them. */
function finish(seen: Seen): Command {
  const has = (option: string) => seen.given.has(option);
  const first = (of: string[]) => [...seen.given].find((o) => of.includes(o)); // typed first
  const common = { json: has("--json"), events: has("--events"), simulate: has("--simulate") };
  const [sub, ...rest] = seen.words;
  if (sub !== undefined && !isSubcommand(sub)) {
    // After an operation of NVIDIA's, a stray word gets its line; alone, a mistyped subcommand.
    if (seen.operations.length > 0) throw badOption(`unexpected argument ${JSON.stringify(sub)}`);
    const near = nearer(sub, [...Object.keys(SUBCOMMANDS), ...Object.keys(OPTIONS)]);
    const tail = "Run cuda-checkpoint --help for its operations, subcommands and options.";
    const unknown = `unknown subcommand ${JSON.stringify(sub)}${near}`;
    throw new UsageError(unknown, undefined, undefined, tail);
  }
  const spawnOnly = first(SPAWN_OPTIONS);
  if (spawnOnly && sub !== "spawn") no(`${spawnOnly} is only valid with --simulate spawn`);
  if (["snapshot", "restore-snapshot", "inspect", "recover"].includes(sub)) {
    return snapshotCommand(sub, rest, seen, common);
  }
  if (has("--verify")) throw new UsageError("--verify is only valid with inspect");
  const snapshotOnly = first(["--dir", "--leave-running", "--deadline", "--tcp-established"]);
  if (snapshotOnly) {
    const subs = Object.keys(SUBCOMMANDS).filter((sub) => SUBCOMMANDS[sub].includes(snapshotOnly));
    no(`${snapshotOnly} is only valid with ${subs.join(", ").replace(/, (?!.*, )/, " and ")}`);
  }
  if (sub === undefined) return operationCommand(seen, common, has);
  const only = `${sub} is only valid with --simulate`;
  const state = "spawn, kill and reset work on the simulated machine of the state file";
  if (sub !== "list" && sub !== "ps" && !common.simulate) no(only, state);
  const extra = sub === "kill" ? rest.slice(1) : rest;
  const takes = `${sub} takes ${sub === "kill" ? "one pid" : "no argument"}`;
  if (extra.length > 0) no(`unexpected argument ${JSON.stringify(extra[0])}: ${takes}`);
  refuseStray(sub, seen);
  if (sub === "list" || sub === "ps") return { kind: "list", ...common };
  if (sub === "reset") return { kind: "reset", ...common };
  if (sub === "spawn") {
    return { kind: sub, ...common, ...given(seen, "memoryMiB gpus command parent") };
  }
  const pids = rest.length > 0 ? parsePids(rest[0]) : seen.pids;
  const got = `got ${pids.length === 0 ? "none" : pids.join(",")}`;
  if (pids.length !== 1) no("--simulate kill takes the pid of one simulated process", got);
  return { kind: "kill", ...common, pid: pids[0] };
}

/** An operation of NVIDIA's: the checks in its order, then ours. */
function operationCommand(seen: Seen, common: Common, has: (option: string) => boolean): Command {
  if (seen.operations.length === 0) throw new UsageError(NVIDIA_MESSAGES.noOperation);
  const got = `got ${seen.operations.join(" and ")}; one operation at a time`;
  if (seen.operations.length > 1) throw new UsageError(NVIDIA_MESSAGES.tooManyOperations, got);
  const operation = seen.operations[0].replace(/^--(action )?/, "") as CliOperation;
  const all = has("--all");
  if (all && has("--pid")) throw new UsageError("--all and --pid cannot be used together");
  if (!all && !has("--pid")) throw new UsageError(NVIDIA_MESSAGES.missingPid);
  if (has("--timeout") && operation !== "lock") no(NVIDIA_MESSAGES.timeoutNotLock);
  const resuming = operation === "restore" || operation === "toggle";
  const remap = "--device-map goes with --action restore and --toggle";
  if (has("--device-map") && !resuming) no(NVIDIA_MESSAGES.remapNotRestore, remap);
  const restoring = "--action restore, --toggle, restore-snapshot and recover";
  if (has("--no-room-check") && !resuming) no(`--no-room-check is only valid with ${restoring}`);
  const ipc = "--allow-ipc-import is only valid with --action checkpoint, --toggle and snapshot";
  if (has("--allow-ipc-import") && operation !== "checkpoint" && operation !== "toggle") no(ipc);
  const groupOnly = ["--all-or-nothing", "--job"].find(has);
  const steps = "is only valid for --action and --toggle operations";
  if (groupOnly && operation.startsWith("get-")) no(`${groupOnly} ${steps}`);
  return {
    kind: "operation",
    operation,
    targets: all ? "all" : seen.pids,
    allOrNothing: has("--all-or-nothing") || has("--job"), // a job is all or nothing
    job: has("--job"),
    ...given(seen, "timeoutMs gpuMapping checkRoom allowIpcImport"),
    ...common,
  } as OperationCommand;
}

/** `snapshot`, `restore-snapshot`, `inspect` and `recover`: what each takes, and nothing else. */
function snapshotCommand(sub: string, rest: string[], seen: Seen, common: Common): Command {
  const has = (option: string) => seen.given.has(option);
  refuseStray(sub, seen);
  // The directory, as `--dir DIR` or as the one positional argument (`inspect DIR`), once.
  const named = seen.fields.dir as string | undefined;
  if (rest.length > 1 || (rest.length === 1 && named !== undefined && named !== rest[0])) {
    const dirs = [named, ...rest].filter((d) => d !== undefined).map((d) => JSON.stringify(d));
    no(`${sub} takes one directory, as DIR or --dir DIR; got ${dirs.join(" and ")}`);
  }
  const dir = rest.length === 1 ? readDir(rest[0]) : named;
  if (dir === undefined) no(`${sub} needs the snapshot's directory, as DIR or --dir DIR`);
  if (sub === "inspect") return { kind: "inspect", dir, verify: has("--verify"), ...common };
  if (sub === "recover") return { kind: "recover", dir, ...given(seen, "checkRoom"), ...common };
  if (sub === "restore-snapshot") {
    return { kind: sub, dir, ...given(seen, "gpuMapping deadlineMs checkRoom"), ...common };
  }
  if (seen.pids.length === 0) no("snapshot needs --pid PID[,PID...], the roots of its trees");
  if (seen.pids.includes(0)) no("snapshot --pid 0: no process has pid 0; give the roots' pids");
  return {
    kind: "snapshot",
    roots: seen.pids,
    dir,
    leaveRunning: has("--leave-running"),
    job: has("--job"),
    ...("timeoutMs" in seen.fields && { lockTimeoutMs: seen.fields.timeoutMs as number }),
    ...given(seen, "deadlineMs allowIpcImport tcpEstablished"),
    ...common,
  };
}
