// The names an entry point exports, read from its source (values and types alike): for the test
// that each public name lives in one place, and the one that documents import only what exists.
import assert from "node:assert/strict";

/** The names a module's text exports, each with whether it is a type only. */
export function exportedNames(text: string): { name: string; type: boolean }[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
  const names: { name: string; type: boolean }[] = [];
  assert.doesNotMatch(code, /export\s+(type\s+)?\*/, "an entry names what it exports: no export *");
  for (const m of code.matchAll(/export\s+(type\s+)?\{([^}]*)\}/g)) {
    for (const part of m[2].split(",").map((p) => p.trim()).filter(Boolean)) {
      const type = m[1] !== undefined || part.startsWith("type ");
      const bare = part.replace(/^type\s+/, "");
      const name = bare.includes(" as ") ? bare.split(" as ")[1].trim() : bare;
      names.push({ name, type });
    }
  }
  const declared =
    /export\s+(?:declare\s+)?(?:async\s+)?(function|class|const|let|interface|type|enum)\s+([A-Za-z_$][\w$]*)/g;
  for (const m of code.matchAll(declared)) {
    names.push({ name: m[2], type: m[1] === "interface" || m[1] === "type" });
  }
  return names;
}
