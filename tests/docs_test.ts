// The project carries its own facts: every place that sends a reader to docs/ (an error message, a
// comment, the README, another page) names a page that exists, and a section of it that exists.
// Error messages point users at docs/ERRORS.md#out-of-memory; a renamed heading would leave them
// at the top of a page, so a broken reference fails here.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { exportedNames } from "./support/exports.ts";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const SKIP = new Set(["node_modules", "dist", ".carry", ".git", "out", "reports"]);
const READ = /\.(ts|md|sh|c|h|py)$/;

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    if (SKIP.has(name)) return [];
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return files(path);
    return READ.test(name) ? [path] : [];
  });
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, "").replace(/ /g, "-");
}

/** The anchors of a markdown file's headings (outside code blocks). */
function anchors(markdown: string): Set<string> {
  const out = new Set<string>();
  let fenced = false;
  for (const line of markdown.split("\n")) {
    if (line.startsWith("```")) fenced = !fenced;
    const m = !fenced && /^#{1,6} (.+)$/.exec(line);
    if (m) out.add(slug(m[1]));
  }
  return out;
}

interface Reference {
  from: string;
  line: number;
  page: string;
  anchor?: string;
}

/** Every reference to a page of docs/ (with its section), and every relative link in markdown. */
function references(): Reference[] {
  const out: Reference[] = [];
  for (const path of files(ROOT)) {
    const text = readFileSync(path, "utf8");
    const from = relative(ROOT, path);
    text.split("\n").forEach((line, i) => {
      for (const m of line.matchAll(/\bdocs\/([A-Z][A-Z_]*\.md)(#[a-z0-9-]+)?/g)) {
        out.push({ from, line: i + 1, page: join("docs", m[1]), anchor: m[2]?.slice(1) });
      }
      if (!path.endsWith(".md")) return;
      for (const m of line.matchAll(/\]\((?!https?:|\/|#)([^)#\s]+\.md)(#[^)\s]+)?\)/g)) {
        const page = relative(ROOT, resolve(dirname(path), m[1]));
        out.push({ from, line: i + 1, page, anchor: m[2]?.slice(1) });
      }
      for (const m of line.matchAll(/\]\(#([^)\s]+)\)/g)) {
        out.push({ from, line: i + 1, page: from, anchor: m[1] });
      }
    });
  }
  return out;
}

describe("references to the project's documents", () => {
  const refs = references();

  test("there are references to check, in code and in the documents", () => {
    assert.ok(refs.some((r) => r.from.startsWith("core/")), "core/ points at docs/");
    assert.ok(refs.some((r) => r.from === "README.md"), "the README links its pages");
    assert.ok(refs.some((r) => r.anchor === "out-of-memory"), "an error message's anchor");
  });

  test("every page named exists, and every section named is a heading of it", () => {
    const broken: string[] = [];
    const cache = new Map<string, Set<string> | undefined>();
    for (const r of refs) {
      if (!cache.has(r.page)) {
        let text: string | undefined;
        try {
          text = readFileSync(join(ROOT, r.page), "utf8");
        } catch {
          text = undefined;
        }
        cache.set(r.page, text === undefined ? undefined : anchors(text));
      }
      const found = cache.get(r.page);
      if (!found) broken.push(`${r.from}:${r.line}: ${r.page} does not exist`);
      else if (r.anchor && !found.has(r.anchor)) {
        broken.push(`${r.from}:${r.line}: ${r.page} has no section #${r.anchor}`);
      }
    }
    assert.deepEqual(broken, []);
  });

  test("the anchor rule is GitHub's: these headings give these anchors", () => {
    assert.equal(
      slug("An out-of-memory restore loses the process"),
      "an-out-of-memory-restore-loses-the-process",
    );
    assert.equal(
      slug("`NO_ROOM`: not enough free GPU memory"),
      "no_room-not-enough-free-gpu-memory",
    );
    assert.equal(slug("The cuda-checkpoint utility"), "the-cuda-checkpoint-utility");
  });
});

describe("imports shown in the documents", () => {
  // The package's entry points, by the name a user imports: deno.json's exports.
  const exports = JSON.parse(readFileSync(join(ROOT, "deno.json"), "utf8")).exports;
  const ENTRY: Record<string, string> = Object.fromEntries(
    Object.entries(exports as Record<string, string>).map(([sub, file]) => [
      `@ckpt/cuda${sub.slice(1)}`,
      file.replace(/^\.\//, ""),
    ]),
  );
  const shown: { from: string; name: string; entry: string }[] = [];
  for (const path of files(ROOT).filter((p) => p.endsWith(".md"))) {
    const text = readFileSync(path, "utf8");
    const imports = /import (?:type )?\{([^}]*)\} from "(?:jsr:)?(@ckpt\/cuda[^"]*)"/g;
    for (const m of text.matchAll(imports)) {
      for (const part of m[1].split(",")) {
        const name = part.trim().replace(/^type\s+/, "");
        if (name) shown.push({ from: relative(ROOT, path), name, entry: m[2] });
      }
    }
  }

  test("there are imports to check, from every entry point that users import from", () => {
    assert.ok(shown.length > 10, `${shown.length} names imported in the documents`);
    assert.deepEqual(Object.keys(ENTRY).sort().slice(0, 2), ["@ckpt/cuda", "@ckpt/cuda/cli"]);
    for (const entry of ["@ckpt/cuda", "@ckpt/cuda/driver", "@ckpt/cuda/mock"]) {
      assert.ok(shown.some((s) => s.entry === entry), `a document imports from ${entry}`);
    }
  });

  test("every name a document imports is exported by that entry point", () => {
    const missing: string[] = [];
    for (const { from, name, entry } of shown) {
      const file = ENTRY[entry];
      if (!file) {
        missing.push(`${from}: ${entry} is not an entry point of deno.json`);
        continue;
      }
      const names = exportedNames(readFileSync(join(ROOT, file), "utf8")).map((n) => n.name);
      if (!names.includes(name)) missing.push(`${from}: ${name} from ${entry}`);
    }
    assert.deepEqual(missing, []);
  });
});
