// Loaded by `bun test` before every test file (bunfig.toml, [test] preload): Bun's own default of
// 5 s a test is too short for the tests that run real programs on a busy two-core machine, so the
// project's configuration sets 60 s, as every test that can take long also says for itself. Bun
// (1.4.5) reads no `timeout` from bunfig.toml, and `setDefaultTimeout` holds only for the file it
// runs in (from here, the first test file), so a plugin puts that call at the head of every test
// file as Bun loads it, on its first line: the file's lines keep their numbers
// (tests/bun_timeout_test.ts). `bun:test` is named through a variable so that Deno's type check
// does not try to resolve it.
import { readFileSync } from "node:fs";

const runner = "bun:test";
const { setDefaultTimeout } = await import(runner);
setDefaultTimeout(60_000);
const head =
  `import { setDefaultTimeout as projectTimeout } from "${runner}"; projectTimeout(60_000); `;
type Loaded = { contents: string; loader: "ts" };
type Build = { onLoad(o: { filter: RegExp }, f: (a: { path: string }) => Loaded): void };
const bun = (globalThis as unknown as { Bun: { plugin(p: object): void } }).Bun;
bun.plugin({
  name: "the project's test timeout in every test file",
  setup(build: Build) {
    build.onLoad({ filter: /_test\.ts$/ }, ({ path }) => ({
      contents: head + readFileSync(path, "utf8"),
      loader: "ts",
    }));
  },
});
