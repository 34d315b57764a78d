// Which of the product's files a `cuda-checkpoint --toggle --pid N` runs code in before it reaches
// libcuda (issue 21's goal: at most 10 before the first call). No GPU is needed: Deno.dlopen is
// replaced by a fake library whose functions answer CUDA_SUCCESS, the command stops at the first
// call of the function named, and V8's coverage (deno run --coverage) says which functions ran.
//
//   deno run -A bench/toggle_path.ts [FUNCTION ...]   # default: cuDriverGetVersion (the first
//                                                     # call) and cuCheckpointProcessGetState
//                                                     # (the toggle's first checkpoint call)
//
// A file counts where a named function or method of it ran (its module's own top level, and
// callbacks without a name that it runs as it loads, do not: importing a module is not calling
// into it). Only the product's files count: cli/, api/, core/, os/, ffi/,
// mock/ and the root entries. At the stop it also says which of them are on the call stack there
// (V8's async stack: the files the call passes through, issue 29's goal: at most 6).
import { join } from "node:path";
import { fileURLToPath as fromFileUrl } from "node:url";

const root = fromFileUrl(new URL("..", import.meta.url));
const PRODUCT = /^(cli|api|core|os|ffi|mock)\/[^/]+\.ts$|^(mod|driver|snapshot|types)\.ts$/;

if (Deno.args[0] === "--child") await child(Deno.args[1]);
else {await parent(
    Deno.args.length > 0 ? Deno.args : ["cuDriverGetVersion", "cuCheckpointProcessGetState"],
  );}

async function parent(stops: string[]): Promise<void> {
  for (const stop of stops) {
    const dir = await Deno.makeTempDir({ prefix: "toggle-path-" });
    try {
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", `--coverage=${dir}`, fromFileUrl(import.meta.url), "--child", stop],
        stderr: "inherit",
      }).output();
      const said = new TextDecoder().decode(out.stdout).trim();
      if (!said.startsWith("stopped at")) {
        throw new Error(`the toggle never called ${stop}: ${said}`);
      }
      const files = await filesRun(dir);
      console.log(`${files.size} files run code before ${stop}:`);
      for (const [file, fns] of [...files].sort()) console.log(`  ${file}: ${fns.join(", ")}`);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
}

/** The product's files with a function that ran, and those functions' names. */
async function filesRun(dir: string): Promise<Map<string, string[]>> {
  const files = new Map<string, string[]>();
  for await (const entry of Deno.readDir(dir)) {
    if (!entry.name.endsWith(".json")) continue;
    const data = JSON.parse(await Deno.readTextFile(join(dir, entry.name)));
    const url: string = data.url;
    if (!url.startsWith("file://")) continue;
    const file = fromFileUrl(url).slice(root.length);
    if (!PRODUCT.test(file)) continue;
    const ran = (data.functions as { functionName: string; ranges: { count: number }[] }[])
      .slice(1) // the module's top level
      .filter((f) => f.ranges[0].count > 0)
      .map((f) => f.functionName || "(anonymous)");
    // A file where only callbacks without a name ran (a table built as its module loads) was
    // imported, not called into.
    if (ran.every((name) => name === "(anonymous)")) continue;
    if (ran.length > 0) files.set(file, [...new Set(ran)]);
  }
  return files;
}

/** Runs the toggle on a fake libcuda and exits at the first call of `stop`. */
async function child(stop: string): Promise<void> {
  const fake = (_path: string, table: Record<string, { nonblocking?: boolean }>) => {
    const symbols: Record<string, unknown> = {};
    for (const [name, def] of Object.entries(table)) {
      symbols[name] = () => {
        if (name === stop) {
          Error.stackTraceLimit = Infinity;
          const stack = new Error().stack!.match(/file:\/\/[^\s)]+?\.ts/g) ?? [];
          const onStack = [...new Set(stack.map((u) => fromFileUrl(u).slice(root.length)))]
            .filter((file) => PRODUCT.test(file));
          if (Deno.env.get("RAW")) console.error(new Error().stack);
          console.error(`${onStack.length} files on the stack at ${name}: ${onStack.join(" ")}`);
          console.log(`stopped at ${name}`);
          Deno.exit(0);
        }
        return def.nonblocking ? Promise.resolve(0) : 0;
      };
    }
    return { symbols, close() {} };
  };
  Object.defineProperty(Deno, "dlopen", { value: fake, configurable: true, writable: true });
  Deno.env.set("CKPT_LIBCUDA_PATH", "/bin/true"); // any file: the fake opens nothing
  const { main } = await import("../cli/main.ts");
  const said: string[] = [];
  const code = await main(["--toggle", "--pid", String(Deno.pid)], {
    stdout: (text) => said.push(text),
    stderr: (text) => said.push(text),
  });
  console.log(`exit ${code} without calling ${stop}: ${said.join("").trim()}`);
}
