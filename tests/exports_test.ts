// Each public name lives in one place. This test reads every entry point that deno.json publishes,
// lists the names each exports (values and types), and fails on a name exported from two entries,
// on a root module of more than 25 names, and on more than 130 names in all. The lists are read
// from the source, so types count too; every value found is then checked against what importing
// the entry really gives, so that the reading cannot drift from the modules.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { exportedNames } from "./support/exports.ts";

const ROOT = new URL("../", import.meta.url);

/** The entry points deno.json publishes: subpath to file. */
function entries(): Map<string, string> {
  const deno = JSON.parse(readFileSync(new URL("deno.json", ROOT), "utf8"));
  return new Map(Object.entries(deno.exports as Record<string, string>));
}

describe("each public name in one place", () => {
  const published = entries();
  const byEntry = new Map(
    [...published].map(([sub, file]) => [
      sub,
      exportedNames(readFileSync(new URL(file, ROOT), "utf8")),
    ]),
  );

  test("the reader sees every kind of export (a check of this test itself)", () => {
    const sample =
      'export { a, type B, c as d } from "./x.ts";\nexport type { E } from "./y.ts";\n' +
      "export class F {}\nexport async function g() {}\nexport const h = 1;\n" +
      "export interface I {}\nexport type J = 1;\n// export { k }\n/** export { l } */";
    assert.deepEqual(exportedNames(sample), [
      { name: "a", type: false },
      { name: "B", type: true },
      { name: "d", type: false },
      { name: "E", type: true },
      { name: "F", type: false },
      { name: "g", type: false },
      { name: "h", type: false },
      { name: "I", type: true },
      { name: "J", type: true },
    ]);
    assert.throws(() => exportedNames('export * from "./x.ts";'), /no export \*/);
  });

  test("no name is exported from two entry points", () => {
    const where = new Map<string, string[]>();
    for (const [sub, names] of byEntry) {
      for (const { name } of names) where.set(name, [...where.get(name) ?? [], sub]);
    }
    const twice = [...where].filter(([, subs]) => subs.length > 1);
    assert.deepEqual(twice.map(([n, subs]) => `${n}: ${subs.join(", ")}`), []);
  });

  test("the root module holds at most 25 names, and all entries at most 130", () => {
    const counts = Object.fromEntries([...byEntry].map(([sub, names]) => [sub, names.length]));
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    assert.ok(counts["."] <= 25, `the root module exports ${counts["."]} names`);
    assert.ok(total <= 130, `the entry points export ${total} names: ${JSON.stringify(counts)}`);
    assert.ok(counts["."] >= 10 && total >= 60, "the reader found the exports");
    // docs/API.md gives the same counts ("`@ckpt/cuda/driver` 31, ...; 126 in all").
    const api = readFileSync(new URL("docs/API.md", ROOT), "utf8").replace(/\s+/g, " ");
    const said = Object.fromEntries(
      [...api.matchAll(/`@ckpt\/cuda(\/[a-z]+)?` ([0-9]+)[,;]/g)].map((
        m,
      ) => [`.${m[1] ?? ""}`, +m[2]]),
    );
    assert.deepEqual(said, counts, "docs/API.md's counts of each entry point's names");
    assert.match(api, new RegExp(`; ${total} in all, values and types`), "docs/API.md's total");
  });

  for (const [sub, file] of published) {
    test(`${sub}: every value read from ${file} is what importing it gives`, async () => {
      const module = await import(new URL(file, ROOT).href);
      const values = byEntry.get(sub)!.filter((n) => !n.type).map((n) => n.name).sort();
      assert.deepEqual(Object.keys(module).sort(), values);
    });
  }
});
