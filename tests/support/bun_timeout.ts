// Loaded by `bun test` before every test file (bunfig.toml, [test] preload): Bun's own default of
// 5 s a test is too short for the tests that run real programs on a busy two-core machine, so the
// project's configuration sets 60 s, as every test that can take long also says for itself.
// `bun:test` is named through a variable so that Deno's type check does not try to resolve it.
const runner = "bun:test";
const { setDefaultTimeout } = await import(runner);
setDefaultTimeout(60_000);
