// The structure figures issue 29 sets goals for, read from the source (nothing is run):
// product lines (core, api, os, ffi, mock, cli and the entry files), files over 500 lines,
// functions over 80 lines, how deep core's imports go (a module stands one floor above everything
// it imports), and how many of core's modules cli/ imports.
//
//   deno run -A bench/structure.ts
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join, normalize, relative } from "node:path";

const root = fileURLToPath(new URL("..", import.meta.url));
const FOLDERS = ["core", "api", "os", "ffi", "mock", "cli"];
const ENTRIES = ["mod.ts", "driver.ts", "snapshot.ts", "types.ts"];

/** The TypeScript files under a folder, its subfolders included. */
function tsFiles(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? tsFiles(`${dir}/${e.name}`)
      : e.name.endsWith(".ts")
      ? [`${dir}/${e.name}`]
      : []
  );
}

const files = [...FOLDERS.flatMap(tsFiles), ...ENTRIES];
const text = new Map(files.map((f) => [f, readFileSync(join(root, f), "utf8")]));
const lines = (f: string) => text.get(f)!.split("\n").length - 1;

/** The relative imports of a file, as paths from the root. */
function importsOf(f: string): string[] {
  const out: string[] = [];
  for (const line of text.get(f)!.split("\n")) {
    if (/^\s*(\*|\/\/)/.test(line)) continue;
    for (const m of line.matchAll(/(?:\bfrom|\bimport\s*\(|^\s*import)\s*"(\.[^"]+)"/g)) {
      out.push(normalize(join(dirname(f), m[1])));
    }
  }
  return out;
}

/** Functions (and methods) longer than `max` lines: a header line, then braces matched. */
function longFunctions(f: string, max: number): string[] {
  const src = text.get(f)!.split("\n");
  const header =
    /^\s*(export\s+)?(async\s+)?(function\*?\s+(\w+)|(?:(?:static|private|public|protected|readonly|get|set|async|#)\s*)*(#?\w+)\s*(<[^>]*>)?\()/;
  const found: string[] = [];
  for (let i = 0; i < src.length; i++) {
    const m = header.exec(src[i]);
    if (!m || /^\s*(if|for|while|switch|catch|return|await|throw|new)\b/.test(src[i])) continue;
    const name = m[4] ?? m[6];
    // Find the body's opening brace (the signature may span lines), then its end.
    let depth = 0, opened = false, end = -1;
    for (let j = i; j < src.length && end < 0; j++) {
      const code = src[j].replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`(?:[^`\\]|\\.)*`/g, "")
        .replace(/\/\/.*$/, "");
      if (!opened && /;\s*$/.test(code) && !code.includes("{")) break; // a declaration only
      for (const ch of code) {
        if (ch === "{") {
          depth++;
          opened = true;
        } else if (ch === "}") {
          depth--;
          if (opened && depth === 0) {
            end = j;
            break;
          }
        }
      }
    }
    if (end > 0 && end - i + 1 > max) found.push(`${f}:${i + 1} ${name} (${end - i + 1} lines)`);
  }
  return found;
}

/** Each core module's floor: 1 for one importing nothing of core, else one above its highest. */
function coreFloors(): Map<string, number> {
  const core = files.filter((f) => f.startsWith("core/"));
  const floors = new Map<string, number>();
  const floorOf = (f: string, seen: Set<string>): number => {
    if (floors.has(f)) return floors.get(f)!;
    if (seen.has(f)) return 0;
    seen.add(f);
    const below = importsOf(f).filter((g) => g.startsWith("core/") && text.has(g));
    const floor = 1 + Math.max(0, ...below.map((g) => floorOf(g, seen)));
    floors.set(f, floor);
    return floor;
  };
  for (const f of core) floorOf(f, new Set());
  return floors;
}

const total = files.reduce((n, f) => n + lines(f), 0);
const big = files.filter((f) => lines(f) > 500).map((f) => `${f} (${lines(f)})`);
const long = files.flatMap((f) => longFunctions(f, 80));
const floors = coreFloors();
const cliCore = new Set(
  files.filter((f) => f.startsWith("cli/")).flatMap(importsOf).filter((g) => g.startsWith("core/")),
);
console.log(`product lines: ${total} in ${files.length} files`);
for (const d of FOLDERS) {
  const n = files.filter((f) => f.startsWith(`${d}/`)).reduce((s, f) => s + lines(f), 0);
  console.log(`  ${d}/: ${n}`);
}
console.log(`files over 500 lines: ${big.length}${big.length ? `: ${big.join(", ")}` : ""}`);
console.log(`functions over 80 lines: ${long.length}`);
for (const l of long) console.log(`  ${l}`);
console.log(`core's floors: ${Math.max(...floors.values())} (${floors.size} modules)`);
for (const [f, n] of [...floors].sort((a, b) => b[1] - a[1])) console.log(`  ${n} ${f}`);
console.log(`core modules cli/ imports: ${cliCore.size}: ${[...cliCore].sort().join(", ")}`);
console.log(`(from ${relative(Deno.cwd(), root) || "."})`);
