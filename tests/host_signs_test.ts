// What the Linux host reads of a process to tell that it imported another's GPU memory (the maps
// measured on driver 580: docs/DRIVER.md, "Processes that share GPU memory") and that it ran while
// held stopped (its threads' CPU time, and whether each has entered its stop), from a /proc written
// here (no GPU, any machine).
// Runs under `deno test -A` and `bun test`.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { LinuxHost, type ProcReader } from "../os/linux_host.ts";

/** A /proc of files given by path; anything else is gone (ENOENT). */
function proc(files: Record<string, string>): ProcReader {
  const gone = (path: string) => Object.assign(new Error(`ENOENT: ${path}`), { code: "ENOENT" });
  return {
    list: (path) => {
      const names = Object.keys(files).filter((f) => f.startsWith(`${path}/`))
        .map((f) => f.slice(path.length + 1).split("/")[0]);
      return names.length > 0 ? Promise.resolve([...new Set(names)]) : Promise.reject(gone(path));
    },
    read: (path) => path in files ? Promise.resolve(files[path]) : Promise.reject(gone(path)),
  };
}

const NVIDIA = "7f00 rw-s 00000000 00:05 1 /dev/nvidiactl\n";
/** A maps line of a CUDA IPC shared file named after `pid` (in hex). */
const shm = (pid: number) =>
  `7f10 rw-s 00000000 00:1a 42 /dev/shm/cuda.shm.0.${pid.toString(16)}.1\n`;
const status = (pid: number) => `Name:\tpython3\nNSpid:\t${pid}\n`;

function host(files: Record<string, string>): LinuxHost {
  return new LinuxHost({ nvml: false, recordsDir: false, reader: proc(files) });
}

describe("gpuImport: the sign of an importer of CUDA IPC memory", () => {
  test("a process that maps another's cuda.shm file shows it, naming the exporter", async () => {
    await using h = host({
      "/proc/2471/maps": NVIDIA + shm(2347),
      "/proc/2471/status": status(2471),
    });
    assert.deepEqual(await h.gpuImport(2471), {
      exporter: 2347,
      sign: "it maps /dev/shm/cuda.shm.0.92b.1, named after process 2347",
    });
  });

  test("the exporter (its own file), a lone process and one gone show none", async () => {
    await using h = host({
      "/proc/2347/maps": NVIDIA + shm(2347),
      "/proc/2347/status": status(2347),
      "/proc/2151/maps": NVIDIA,
      "/proc/2151/status": status(2151),
    });
    assert.equal(await h.gpuImport(2347), undefined);
    assert.equal(await h.gpuImport(2151), undefined);
    assert.equal(await h.gpuImport(9999), undefined);
    // A kernel without NSpid (before 4.1): its own file is told by its pid alone.
    await using old = host({
      "/proc/2347/maps": NVIDIA + shm(2347),
      "/proc/2347/status": "Name:\tpython3\n",
    });
    assert.equal(await old.gpuImport(2347), undefined);
  });

  test("one whose maps cannot be read is unknown, saying why, not taken as an importer of none", async () => {
    const denied = Object.assign(new Error("EACCES: permission denied, open '/proc/77/maps'"), {
      code: "EACCES",
    });
    const reader = proc({ "/proc/77/status": status(77) });
    await using h = new LinuxHost({
      nvml: false,
      recordsDir: false,
      reader: {
        ...reader,
        read: (p) => p === "/proc/77/maps" ? Promise.reject(denied) : reader.read(p),
      },
    });
    assert.deepEqual(await h.gpuImport(77), {
      sign: "its maps cannot be read (permission denied (EACCES))", // in one wording, Deno's or Bun's
      unknown: true,
    });
    assert.equal(await h.gpuImport(78), undefined, "one gone has nothing to refuse");
  });

  test("in a container, the name's pid is compared with the process's own in its namespace", async () => {
    // The exporter is pid 7 in the container (the name says 7); the importer is 8 there, 4012 here.
    await using h = host({
      "/proc/4012/maps": shm(7),
      "/proc/4012/status": "NSpid:\t4012\t8\n",
      "/proc/4011/maps": shm(7),
      "/proc/4011/status": "NSpid:\t4011\t7\n",
    });
    assert.equal((await h.gpuImport(4012))?.exporter, 7);
    assert.equal(await h.gpuImport(4011), undefined, "the exporter, as its namespace numbers it");
  });
});

describe("gpuImport: an NCCL rank with others on this host, P2P or shared memory on", () => {
  // Measured on two H200s, driver 580 (docs/DRIVER.md, "NCCL jobs on two GPUs"): with NCCL's
  // defaults, its legacy IPC, or P2P off and shared memory on, both ranks were lost; with both
  // off they came back. A rank of a one-rank job maps libnccl and shares nothing.
  const NCCL = "7f20 r-xp 00000000 00:1b 77 /opt/venv/lib/nvidia/nccl/lib/libnccl.so.2\n";
  const rank = (env: string[], maps = NVIDIA + NCCL) =>
    host({
      "/proc/3100/maps": maps,
      "/proc/3100/status": status(3100),
      "/proc/3100/environ": ["PATH=/usr/bin", ...env, ""].join("\0"),
    });
  const sign = (size: string, without: string, where = "") =>
    `it has libnccl.so.2 loaded, ${size} in its environment${where}, without ${without}`;
  const BOTH = "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1";
  const ALL_HERE = " (no count of the ranks on this host: all taken as here)";

  test("NCCL's defaults, or one transport of the two still on: a sign naming the ranks and what is missing", async () => {
    for (
      const [env, size, without, where] of [
        [["WORLD_SIZE=2", "RANK=1"], "WORLD_SIZE=2", BOTH, ALL_HERE],
        [
          ["WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8", "NCCL_CUMEM_ENABLE=0"],
          "LOCAL_WORLD_SIZE=8",
          BOTH,
        ],
        [
          ["OMPI_COMM_WORLD_LOCAL_SIZE=4", "NCCL_P2P_DISABLE=1"],
          "OMPI_COMM_WORLD_LOCAL_SIZE=4",
          "NCCL_SHM_DISABLE=1",
        ],
        [["MPI_LOCALNRANKS=2", "NCCL_SHM_DISABLE=1"], "MPI_LOCALNRANKS=2", "NCCL_P2P_DISABLE=1"],
        // NCCL turns a transport off at exactly 1: 2 leaves both on.
        [
          ["PMIX_LOCAL_SIZE=2", "NCCL_P2P_DISABLE=2", "NCCL_SHM_DISABLE=2"],
          "PMIX_LOCAL_SIZE=2",
          BOTH,
        ],
      ] as const
    ) {
      await using h = rank([...env]);
      const ranks = Number(size.split("=")[1]);
      const expected = { ncclRanks: ranks, sign: sign(size, without, where ?? "") };
      assert.deepEqual(await h.gpuImport(3100), expected, size);
    }
  });

  test("a library replaced on disk meanwhile, and a rank that also maps a peer's cuda.shm file: the rank's sign", async () => {
    await using deleted = rank(["WORLD_SIZE=2"], NVIDIA + NCCL.replace("\n", " (deleted)\n"));
    assert.equal((await deleted.gpuImport(3100))?.ncclRanks, 2);
    // NCCL's own legacy IPC: the refusal to give is the rank's, which holds on every driver.
    await using both = rank(["LOCAL_WORLD_SIZE=2"], NVIDIA + NCCL + shm(3101));
    assert.deepEqual(await both.gpuImport(3100), {
      ncclRanks: 2,
      sign: sign("LOCAL_WORLD_SIZE=2", BOTH),
    });
  });

  test("P2P and shared memory both off, one rank on this host, or no NCCL loaded: none", async () => {
    for (
      const env of [
        ["WORLD_SIZE=2", "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1"],
        ["WORLD_SIZE=1"],
        ["WORLD_SIZE=8", "LOCAL_WORLD_SIZE=1"], // one rank on each of eight hosts
        [], // no launcher's variables at all
      ]
    ) {
      await using h = rank(env);
      assert.equal(await h.gpuImport(3100), undefined, env.join(" "));
    }
    // A name given twice is read as getenv reads it: its first value (here, both off).
    await using twice = rank([
      "WORLD_SIZE=2",
      "NCCL_P2P_DISABLE=1",
      "NCCL_SHM_DISABLE=1",
      "NCCL_P2P_DISABLE=0",
    ]);
    assert.equal(await twice.gpuImport(3100), undefined, "the first of two values");
    await using torchOnly = rank(["WORLD_SIZE=2"], NVIDIA);
    assert.equal(await torchOnly.gpuImport(3100), undefined, "libnccl not loaded");
    const plugin = "7f30 r-xp 00000000 00:1b 78 /opt/aws-ofi-nccl/lib/libnccl-net.so\n";
    await using pluginOnly = rank(["WORLD_SIZE=2"], NVIDIA + plugin);
    assert.equal(await pluginOnly.gpuImport(3100), undefined, "a network plugin is not NCCL");
  });
});

describe("identify: a zombie is no process", () => {
  test("exited and not yet reaped: none; a leader ended before its other threads: the process", async () => {
    const stat = "4200 (python3) S 1 4200 4200 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 5555 0 0";
    await using h = host({
      "/proc/4100/status": "Name:\tpython3\nState:\tZ (zombie)\nTgid:\t4100\nThreads:\t1\n",
      "/proc/4200/status": "Name:\tpython3\nState:\tZ (zombie)\nTgid:\t4200\nThreads:\t3\n",
      "/proc/4100/stat": stat.replaceAll("4200", "4100"),
      "/proc/4200/stat": stat,
    });
    assert.equal(await h.identify(4100), undefined);
    assert.equal((await h.identify(4200))?.pid, 4200);
    // Such a leader's own stat, as the kernel shows it: a zombie, PF_EXITING set. Still the process.
    await using leader = host({
      "/proc/4400/status": "Name:\tpython3\nState:\tZ (zombie)\nTgid:\t4400\nThreads:\t3\n",
      "/proc/4400/stat":
        "4400 (python3) Z 1 4400 4400 0 -1 4194564 0 0 0 0 0 0 0 0 20 0 3 0 5555 0 0",
    });
    assert.deepEqual(await leader.identify(4400), { pid: 4400, start: 5555 });
  });

  test("killed and still exiting (PF_EXITING, not a zombie yet): none, as a CUDA process lets go of its GPU", async () => {
    const stat = (flags: number) =>
      `4300 (python3) D 1 4300 4300 0 -1 ${flags} 0 0 0 0 0 0 0 0 20 0 1 0 5555 0 0`;
    const status = "Name:\tpython3\nState:\tD (disk sleep)\nTgid:\t4300\nThreads:\t5\n";
    await using dying = host({ "/proc/4300/status": status, "/proc/4300/stat": stat(0x400104) });
    assert.equal(await dying.identify(4300), undefined);
    await using running = host({ "/proc/4300/status": status, "/proc/4300/stat": stat(0x400100) });
    assert.deepEqual(await running.identify(4300), { pid: 4300, start: 5555 });
  });
});

describe("identify: a process whose /proc cannot be read is not gone", () => {
  test("a read that fails (EMFILE) rejects; one of no such process is none", async () => {
    const emfile = Object.assign(new Error("EMFILE: too many open files"), { code: "EMFILE" });
    await using h = new LinuxHost({
      nvml: false,
      recordsDir: false,
      reader: { list: () => Promise.resolve([]), read: () => Promise.reject(emfile) },
    });
    await assert.rejects(h.identify(4500), /EMFILE/);
    await using none = host({});
    assert.equal(await none.identify(4600), undefined);
  });
});

describe("cpuTime: what a held process has run", () => {
  test("the ns of every thread's schedstat, summed; none for a process gone", async () => {
    await using h = host({
      "/proc/50/task/50/schedstat": "1000 20 3\n",
      "/proc/50/task/51/schedstat": "234 5 1\n",
    });
    assert.equal(await h.cpuTime(50), 1234);
    assert.equal(await h.cpuTime(60), undefined);
  });

  test("none for a zombie, whose exit grew its time (a held process killed, not reaped)", async () => {
    await using h = host({
      "/proc/50/stat": "50 (python3) Z 1 50 50 0\n",
      "/proc/50/task/50/schedstat": "1000 20 3\n",
    });
    assert.equal(await h.cpuTime(50), undefined);
  });

  test("stopped: every thread in its stop (T, or t traced); one on its way there, or none, is not", async () => {
    const stat = (pid: number, state: string) => `${pid} (python3 x) ${state} 1 ${pid} ${pid} 0\n`;
    await using h = host({
      "/proc/50/stat": stat(50, "T"),
      "/proc/50/task/50/stat": stat(50, "T"),
      "/proc/50/task/51/stat": stat(51, "t"),
      "/proc/70/stat": stat(70, "T"),
      "/proc/70/task/70/stat": stat(70, "T"),
      "/proc/70/task/71/stat": stat(71, "R"),
      "/proc/80/stat": stat(80, "S"), // its leader runs: its threads are not read
      "/proc/80/task/80/stat": stat(80, "T"),
    });
    assert.equal(await h.stopped(50), true);
    assert.equal(await h.stopped(70), false, "a thread still runs");
    assert.equal(await h.stopped(80), false, "its leader runs");
    assert.equal(await h.stopped(60), false, "gone");
    await using ended = host({ "/proc/75/stat": stat(75, "T") }); // its threads gone since
    assert.equal(await ended.stopped(75), false, "no thread left to be stopped");
  });

  test('stopped: "frozen" where its cgroup (v2) is frozen, its threads asleep (docker pause)', async () => {
    const stat = (pid: number) => `${pid} (python3 x) S 1 ${pid} ${pid} 0\n`;
    const events = (frozen: number) => `populated 1\nfrozen ${frozen}\n`;
    await using h = host({
      "/proc/90/stat": stat(90),
      "/proc/90/cgroup": "0::/system.slice/docker-ab12.scope\n",
      "/sys/fs/cgroup/system.slice/docker-ab12.scope/cgroup.events": events(1),
      "/proc/91/stat": stat(91),
      "/proc/91/cgroup": "0::/ckpt-thawed\n",
      "/sys/fs/cgroup/ckpt-thawed/cgroup.events": events(0),
      "/proc/92/stat": stat(92), // cgroup v1 only: no unified line to follow
      "/proc/92/cgroup": "7:freezer:/ckpt-frozen\n",
      "/sys/fs/cgroup/ckpt-frozen/cgroup.events": events(1),
      "/proc/93/stat": stat(93), // being frozen: asked (cgroup.freeze), not yet done (frozen 0)
      "/proc/93/cgroup": "0::/ckpt-freezing\n",
      "/sys/fs/cgroup/ckpt-freezing/cgroup.events": events(0),
      "/sys/fs/cgroup/ckpt-freezing/cgroup.freeze": "1\n",
      "/sys/fs/cgroup/ckpt-thawed/cgroup.freeze": "0\n",
    });
    assert.equal(await h.stopped(90), "frozen");
    assert.equal(await h.stopped(91), false, "thawed");
    assert.equal(await h.stopped(92), false, "no cgroup v2 line");
    assert.equal(await h.stopped(93), "frozen", "being frozen");
  });
});

describe("the process tree and the scan, from a /proc written here", () => {
  const stat = (pid: number, parent: number) => `${pid} (sh) S ${parent} ${pid} ${pid} 0`;

  test("a tree whose root cannot be read (ended meanwhile) is none, though its children can", async () => {
    await using h = host({
      "/proc/10/stat": stat(10, 1), // listed, but its threads can no longer be
      "/proc/11/stat": stat(11, 10),
      "/proc/11/task/11/stat": stat(11, 10),
      "/proc/11/cmdline": "sleep\x0010\x00",
    });
    assert.equal(await h.processTree(10), undefined);
    assert.deepEqual((await h.processTree(11))?.map((p) => p.pid), [11]);
  });

  test("parents read while pids were reused can form a loop: the walk ends, each process once", async () => {
    await using h = host({
      "/proc/20/stat": stat(20, 21),
      "/proc/20/task/20/stat": stat(20, 21),
      "/proc/21/stat": stat(21, 20),
      "/proc/21/task/21/stat": stat(21, 20),
    });
    const tree = await h.processTree(20); // resolves: no walk around the loop for good
    assert.deepEqual(tree?.map((p) => p.pid), [20, 21], "each process once, the root first");
  });

  test("a process that maps a libcuda replaced on disk since (a driver upgrade) is a candidate", async () => {
    const maps = (suffix: string) =>
      `7f00 r-xp 00000000 00:1b 9 /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05${suffix}\n`;
    await using h = host({
      "/proc/30/cmdline": "python3\x00train.py\x00",
      "/proc/30/maps": maps(" (deleted)"),
      "/proc/31/cmdline": "python3\x00",
      "/proc/31/maps": maps(""),
      "/proc/32/cmdline": "bash\x00",
      "/proc/32/maps": "7f00 r-xp 00000000 00:1b 9 /usr/lib/libc.so.6\n",
    });
    const scanned = (await h.scan()).sort((a, b) => a.pid - b.pid);
    assert.deepEqual(scanned.map((p) => [p.pid, p.cudaLibrary]), [[30, true], [31, true], [
      32,
      false,
    ]]);
  });
});
