// core/ is the runtime-free heart of the package: it names no FFI, no simulator and no runtime.
// What a call runs on is a Machine passed in (this machine's from os/, the simulator's from mock/);
// api/ gives the public functions this machine as their default. This test reads every module of
// core/ and fails on an import that leaves it: a relative path out of core/ (to ffi/ or mock/), a
// runtime's module (node:, npm:, jsr:), or Deno's and Bun's globals, and on module state (a
// top-level `let`, Map or Set). Documentation examples may import the package by its published names
// (`@ckpt/cuda/mock`), as a user would. It also holds the rule that one place orders a job.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";

const CORE = new URL("../core/", import.meta.url);

/** Each import specifier of `text`, static or dynamic, and whether it is in a comment line. */
function imports(text: string): { spec: string; inComment: boolean; line: number }[] {
  const found: { spec: string; inComment: boolean; line: number }[] = [];
  text.split("\n").forEach((line, i) => {
    const inComment = /^\s*(\*|\/\/)/.test(line);
    for (const m of line.matchAll(/(?:\bfrom|\bimport\s*\(|^\s*import)\s*"([^"]+)"/g)) {
      found.push({ spec: m[1], inComment, line: i + 1 });
    }
  });
  return found;
}

/** A comment line: `// ...`, ` * ...` (doc examples too) or `/* ... ` with no code after its end. */
const COMMENT_LINE = /^\s*(\*|\/\/|\/\*(?!.*\*\/\s*\S))/;

/** A runtime's global named in any form: `Deno.pid`, `g.Deno?.pid`, `{ Bun?: ... }`, `"Deno"`. */
const RUNTIME_GLOBAL = /\b(Deno|Bun)\b/;

/** The numbers of the code lines (not comment lines) of `text` that name a runtime's global. */
function runtimeGlobals(text: string): number[] {
  return text.split("\n").flatMap((line, i) =>
    !COMMENT_LINE.test(line) && RUNTIME_GLOBAL.test(line) ? [i + 1] : []
  );
}

/** The TypeScript files under a folder of the package, its subfolders included, by path. */
function tsFiles(dir: string): string[] {
  return readdirSync(new URL(`../${dir}/`, import.meta.url), { withFileTypes: true }).flatMap(
    (e) =>
      e.isDirectory()
        ? tsFiles(`${dir}/${e.name}`)
        : e.name.endsWith(".ts")
        ? [`${dir}/${e.name}`]
        : [],
  );
}

describe("core/ stays runtime-free", () => {
  const files = tsFiles("core").map((f) => f.slice("core/".length));

  test("it has modules to check, and the scan sees their imports", () => {
    assert.ok(files.length >= 10, `core/ has ${files.length} modules`);
    const all = files.flatMap((f) => imports(readFileSync(new URL(f, CORE), "utf8")));
    assert.ok(all.filter((i) => !i.inComment).length > 50, "core's modules import each other");
    // The scanner itself: each kind of import it must see.
    const sample = 'import { a } from "./a.ts";\nexport { b } from "../ffi/b.ts";\n' +
      'const c = await import("node:fs");\n * import { d } from "@ckpt/cuda/mock";';
    assert.deepEqual(
      imports(sample).map((i) => [i.spec, i.inComment]),
      [["./a.ts", false], ["../ffi/b.ts", false], ["node:fs", false], ["@ckpt/cuda/mock", true]],
    );
  });

  test("the scan sees a runtime's global in any form of code, and not in comments", () => {
    const sample = [
      "const pid = globalThis.Deno?.pid;",
      "const g = globalThis as { process?: { pid?: number }; Deno?: { pid?: number } };",
      "const pid = g.Deno?.pid ?? g.process?.pid;",
      'const ffi = (globalThis as any)["Bun"];',
      'if (typeof Bun !== "undefined") Bun.gc(true);',
      '/** What this driver is: "native (Deno)", "native (Bun)". */',
      "/* Deno and Bun alike */",
      " * const pid = Deno.pid; // a doc example",
      "// Bun.spawn would do",
      "const deno = denoLike, bunny = 1; // names that merely contain them",
    ].join("\n");
    assert.deepEqual(runtimeGlobals(sample), [1, 2, 3, 4, 5]);
  });

  for (const file of files) {
    test(`core/${file}: imports only core/ (examples: the package by name)`, () => {
      const text = readFileSync(new URL(file, CORE), "utf8");
      for (const { spec, inComment, line } of imports(text)) {
        const where = `core/${file}:${line} imports ${spec}`;
        if (inComment) {
          assert.ok(
            spec.startsWith("./") || spec.startsWith("@ckpt/cuda"),
            `${where}: an example imports from core/ or the package's published names`,
          );
        } else {
          const to = new URL(spec, new URL(file, CORE)).pathname;
          assert.ok(
            spec.startsWith(".") && to.startsWith(CORE.pathname),
            `${where}: only core/ itself`,
          );
        }
      }
      assert.deepEqual(
        runtimeGlobals(text).map((line) => `core/${file}:${line}`),
        [],
        `core/${file} names a runtime's global`,
      );
      const code = text.split("\n").filter((l) => !COMMENT_LINE.test(l)).join("\n");
      assert.doesNotMatch(code, /^(export\s+)?(let|var)\s/m, `core/${file} keeps module state`);
      // Nor a collection at the top (a WeakMap keyed by machine keeps its state beside the machine).
      const collection = /^(export\s+)?const\s+\w+(:[^=]+)?\s*=\s*new\s+(Map|Set)\b/m;
      assert.doesNotMatch(code, collection, `core/${file} keeps module state in a collection`);
    });
  }
});

/** Every product module's text (TypeScript outside tests, benches and examples), by path. */
function productModules(): Map<string, string> {
  const out = new Map<string, string>();
  for (const dir of ["core", "api", "os", "ffi", "mock", "cli"]) {
    for (const f of tsFiles(dir)) {
      out.set(f, readFileSync(new URL(`../${f}`, import.meta.url), "utf8"));
    }
  }
  return out;
}

/** The text without comment lines. */
function codeOf(text: string): string {
  return text.split("\n").filter((l) => !/^\s*(\*|\/\/|\/\*)/.test(l)).join("\n");
}

/**
 * The first call in `text`'s code that runs a group of one driver step (lock, checkpoint, restore
 * or unlock), in the internal form `runGroup(machine, "lock", ...)`, the public one
 * `runGroup("lock", ...)`, or under a name `runGroup` is imported as; `undefined` where none.
 */
function stepGroup(text: string): string | undefined {
  const code = codeOf(text);
  const names = ["runGroup", ...[...code.matchAll(/\brunGroup\s+as\s+(\w+)/g)].map((m) => m[1])];
  const call = new RegExp(
    `\\b(?:${names.join("|")})\\(\\s*(?:[^,()]*,\\s*)?"(lock|checkpoint|restore|unlock)"`,
  );
  return call.exec(code)?.[0];
}

describe("one place orders a job, and snapshots go through the group operations", () => {
  const modules = productModules();

  test("the scan reads the product's modules", () => {
    assert.ok(
      modules.has("core/job.ts") && modules.has("core/snapshot/take.ts"),
      [...modules.keys()].join(),
    );
    assert.ok(modules.size >= 50, `${modules.size} modules`);
  });

  test("only core/job.ts splits steps into a job's phases (jobPhase)", () => {
    const users = [...modules].filter(([path, text]) =>
      path !== "core/job.ts" && path !== "core/states.ts" && /\bjobPhase\b/.test(codeOf(text))
    ).map(([path]) => path);
    assert.deepEqual(users, []);
    assert.match(codeOf(modules.get("core/job.ts")!), /\bjobPhase\(/);
  });

  test("no module runs a group of one step of its own choosing (lock all, then checkpoint all)", () => {
    const found = [...modules].filter(([, text]) => stepGroup(text)).map(([p]) => p);
    assert.deepEqual(found, []);
    // The check itself: it sees such a call in the internal form, the public one and under an
    // imported alias, and not a group of a whole operation or of a step passed in.
    const seen = (code: string) => stepGroup(code) !== undefined;
    assert.ok(seen('await runGroup(machine, "lock", pids, settings);'));
    assert.ok(seen('await runGroup(\n    machine,\n    "checkpoint",\n    pids,\n  );'));
    assert.ok(seen('await runGroup("lock", pids, { machine });'));
    assert.ok(seen('const r = runGroup( "unlock", [pid]);'));
    assert.ok(
      seen('import { runGroup as runOn } from "./g.ts";\nrunOn(source, "restore", pids, s);'),
    );
    assert.ok(!seen('await runGroup("suspend", pids, { machine });'));
    assert.ok(!seen('await runGroup(machine, "resume", pids, settings);'));
    assert.ok(!seen("return runOn(source, action, given, settings);"));
    assert.ok(!seen('await runGroup(machine, action, pids, { step: "lock" });'));
  });

  for (const file of ["core/snapshot/take.ts", "core/snapshot/restore.ts"]) {
    test(`${file} reaches the driver's steps only through the group operations`, () => {
      const code = codeOf(modules.get(file)!);
      assert.match(code, /\brunGroup\(/);
      for (const m of code.matchAll(/\brunGroup\(\s*(?:[^,()]*,\s*)?("[a-z]+")/g)) {
        assert.ok(['"suspend"', '"resume"'].includes(m[1]), `${file} runs a group of ${m[1]}`);
      }
      assert.doesNotMatch(code, /\.(lock|checkpoint|restore|unlock)\(\s*[a-zA-Z.]*pid/);
      assert.doesNotMatch(code, /from "\.\.\/(action|job)\.ts"/);
      assert.doesNotMatch(code, /\b(Turn|Handle)\b/, `${file} works on no process directly`);
    });
  }
});

describe("the product's modules import one another without a circle", () => {
  const modules = productModules();
  for (const root of ["mod.ts", "driver.ts", "snapshot.ts", "types.ts"]) {
    modules.set(root, readFileSync(new URL(`../${root}`, import.meta.url), "utf8"));
  }

  /** The product modules `path` imports (types included: a circle of types is a tangle too). */
  function edges(path: string, text: string): string[] {
    const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/") + 1) : "";
    return imports(text).filter((i) => !i.inComment && i.spec.startsWith("."))
      .map((i) => new URL(i.spec, `file:///${dir}`).pathname.slice(1))
      .filter((target) => modules.has(target));
  }

  /** A circle of imports among `graph`'s modules, as a path that starts and ends at one module. */
  function circle(graph: Map<string, string[]>): string[] | undefined {
    const state = new Map<string, "open" | "done">();
    const stack: string[] = [];
    const visit = (m: string): string[] | undefined => {
      if (state.get(m) === "done") return undefined;
      if (state.get(m) === "open") return [...stack.slice(stack.indexOf(m)), m];
      state.set(m, "open");
      stack.push(m);
      for (const next of graph.get(m) ?? []) {
        const found = visit(next);
        if (found) return found;
      }
      stack.pop();
      state.set(m, "done");
      return undefined;
    };
    for (const m of graph.keys()) {
      const found = visit(m);
      if (found) return found;
    }
    return undefined;
  }

  test("none, and the check finds one where there is one", () => {
    const graph = new Map([...modules].map(([path, text]) => [path, edges(path, text)]));
    assert.ok([...graph.values()].flat().length > 100, "the scan sees the imports");
    assert.deepEqual(circle(graph), undefined);
    // The check itself: a circle of two modules, through a type import.
    const tangled = new Map(graph);
    tangled.set("core/states.ts", [...graph.get("core/states.ts")!, "core/errors.ts"]);
    assert.ok(circle(tangled), "a made-up circle through core/states.ts is seen");
  });
});
