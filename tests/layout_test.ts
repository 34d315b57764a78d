// core/ is the runtime-free heart of the package: it names no FFI, no simulator and no runtime.
// The native driver, the Linux host, criu and the simulator are wired in from the entry points
// (mod.ts, snapshot.ts, mock/mod.ts) through core/defaults.ts. This test reads every module of
// core/ and fails on an import that leaves it: a relative path out of core/ (to ffi/ or mock/), a
// runtime's module (node:, npm:, jsr:), or Deno's and Bun's globals. Documentation examples may
// import the package by its published names (`@ckpt/cuda/mock`), as a user would.

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

describe("core/ stays runtime-free", () => {
  const files = readdirSync(CORE).filter((f) => f.endsWith(".ts"));

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
          assert.ok(spec.startsWith("./") && !spec.includes(".."), `${where}: only core/ itself`);
        }
      }
      const code = text.split("\n").filter((l) => !/^\s*(\*|\/\/)/.test(l)).join("\n");
      assert.doesNotMatch(code, /\b(Deno|Bun)\.[a-zA-Z]/, `core/${file} uses a runtime's global`);
    });
  }
});
