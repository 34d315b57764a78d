// A listener without SO_REUSEADDR (as NCCL's bootstrap listeners) with a connection it accepted,
// dumped by the real criu (--tcp-established as one of criu's arguments, as the GPU scripts give
// it) and ended by criu's engine as a snapshot ends it; then asked and restored. With `--control`
// it is killed as it was before the engine ended connections silently: the listener's port stays
// in TIME_WAIT and the restore waits for it. Needs root, python3 and criu; no GPU. Run it under a
// subreaper where pid 1 reaps no orphan (tests/gpu/README.md):
//
//   CRIU=/opt/criu/usr/sbin/criu CRIU_LIBS=/opt/criu/usr/lib/x86_64-linux-gnu \
//     deno run -A tests/gpu/exp/mute_criu.ts [--control]      (or: bun tests/gpu/exp/mute_criu.ts)
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { openCriuEngine } from "../../../os/criu.ts";
import { portHolders } from "../../../os/criu_ports.ts";
import { tcpTable } from "../../support/fake_criu.ts";

const env = process.env, control = process.argv.includes("--control");
const engine = openCriuEngine({
  criuPath: env.CRIU ?? "/usr/sbin/criu",
  ...(env.CRIU_LIBS ? { libraryDir: env.CRIU_LIBS } : {}),
  extraArgs: ["--network-lock=skip", "--tcp-established"],
});
const dir = mkdtempSync(join(tmpdir(), "mute-criu-")),
  out = join(dir, "out"),
  images = join(dir, "i");
writeFileSync(
  join(dir, "l.py"),
  `import socket, time, os
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
print(os.getpid(), s.getsockname()[1], flush=True)
while True: time.sleep(1)
`,
);
// Its output to a file: a runtime's pipes can be sockets, which criu would refuse as external.
const sh = `exec python3 ${dir}/l.py > ${out} 2>&1 < /dev/null`;
spawn("sh", ["-c", sh], { stdio: "ignore", detached: true }).unref();
let line = "";
while (!line.includes(" ")) {
  await new Promise((r) => setTimeout(r, 50));
  line = (() => {
    try {
      return readFileSync(out, "utf8");
    } catch {
      return "";
    }
  })();
}
const [pid, port] = line.trim().split(" ").map(Number);
try {
  mkdirSync(images, { mode: 0o700 });
  await engine.dump({ root: pid, imagesDir: images });
  await engine.stop([pid]);
  if (control) process.kill(pid, "SIGKILL");
  else await engine.kill([pid]);
  await new Promise((r) => setTimeout(r, 300));
  const held = portHolders(tcpTable(), [port]).map((h) => h.state);
  const t0 = performance.now(), waits: number[] = [];
  const request = { root: pid, imagesDir: images, onWait: (ms: number) => waits.push(ms) };
  await engine.ready!(request);
  await engine.restore({ ...request, tcpEstablished: true });
  const ms = Math.round(performance.now() - t0);
  console.log(
    `${control ? "killed as it was" : "ended by the engine"}: port ${port} then held ` +
      `${JSON.stringify(held)}; restored in ${ms} ms, waits ${JSON.stringify(waits)}`,
  );
} finally {
  try {
    process.kill(pid, "SIGKILL");
  } catch { /* gone */ }
  rmSync(dir, { recursive: true, force: true });
}
