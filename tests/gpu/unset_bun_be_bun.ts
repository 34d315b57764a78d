/**
 * A Bun `--preload` for running TypeScript with the Bun inside our compiled `cuda-checkpoint`
 * (`BUN_BE_BUN=1 cuda-checkpoint --preload ./tests/gpu/unset_bun_be_bun.ts SCRIPT.ts ...`): it
 * removes BUN_BE_BUN from the environment before SCRIPT runs, so that the programs SCRIPT starts
 * do not inherit it. Without this, a benchmark that starts our binary as a command line (such as
 * bench/cli_startup.ts) would start Bun instead: with BUN_BE_BUN set, the binary is Bun.
 *
 * Not a test, and imported by nothing: its one effect, on loading, is the point of it.
 */
import process from "node:process";

delete process.env.BUN_BE_BUN;
