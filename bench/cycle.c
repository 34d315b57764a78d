/*
 * The baseline of bench/overhead.ts: full checkpoint cycles (lock, checkpoint, restore, unlock)
 * of one process, made straight through libcuda from C.
 *
 *   cycle [--lib PATH] [--timeout-ms MS] PID COUNT
 *
 * Runs COUNT cycles of PID and prints one JSON line per cycle with each step's time and the
 * whole cycle's, in ms (CLOCK_MONOTONIC, cuInit made before the first):
 *   {"cycle":0,"pid":123,"lockMs":0.21,"checkpointMs":702.1,"restoreMs":340.2,"unlockMs":1.5,"totalMs":1044.0}
 * COUNT 0: one cycle per line read on stdin, until "exit" or end of input (so that another program
 * can alternate its own cycles with these on the same process). The first line printed is
 *   {"ready":true,"pid":123,"driverVersion":13000,"cuInitMs":9.8}
 * A failed call prints {"cycle":N,"error":"lock","code":401,"name":"CUDA_ERROR_ILLEGAL_STATE"} and
 * exits 1; a library that does not load or lacks a symbol, exit 3; bad arguments, exit 2.
 * Build: cc -O2 -pthread -o cycle bench/cycle.c -ldl
 */
#include "ckpt_dl.h"

static int fail(int cycle, const char *step, CUresult rc) {
  printf("{\"cycle\":%d,\"error\":\"%s\",\"code\":%d,\"name\":\"%s\"}\n", cycle, step, rc,
         error_name(rc));
  return 1;
}

/* One cycle; prints its line. Returns 0, or 1 after a failed call. */
static int cycle(int i, int pid, unsigned timeout_ms) {
  LockArgs args;
  memset(&args, 0, sizeof args);
  args.timeoutMs = timeout_ms;
  double t0 = now_ms();
  CUresult rc = lock_(pid, &args);
  double t1 = now_ms();
  if (rc) return fail(i, "lock", rc);
  rc = checkpoint_(pid, NULL);
  double t2 = now_ms();
  if (rc) return fail(i, "checkpoint", rc);
  rc = restore_(pid, NULL);
  double t3 = now_ms();
  if (rc) return fail(i, "restore", rc);
  rc = unlock_(pid, NULL);
  double t4 = now_ms();
  if (rc) return fail(i, "unlock", rc);
  printf("{\"cycle\":%d,\"pid\":%d,\"lockMs\":%.3f,\"checkpointMs\":%.3f,\"restoreMs\":%.3f,"
         "\"unlockMs\":%.3f,\"totalMs\":%.3f}\n",
         i, pid, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *lib = NULL;
  unsigned timeout_ms = 10000; /* @ckpt/cuda's default lock timeout */
  int a = 1;
  for (; a < argc && strncmp(argv[a], "--", 2) == 0; a++) {
    if (strcmp(argv[a], "--lib") == 0 && a + 1 < argc) lib = argv[++a];
    else if (strcmp(argv[a], "--timeout-ms") == 0 && a + 1 < argc) timeout_ms = (unsigned)atoi(argv[++a]);
    else break;
  }
  if (argc - a != 2 || atoi(argv[a]) <= 0 || atoi(argv[a + 1]) < 0) {
    fprintf(stderr, "usage: cycle [--lib PATH] [--timeout-ms MS] PID COUNT   (COUNT 0: a cycle per stdin line)\n");
    return 2;
  }
  int pid = atoi(argv[a]), count = atoi(argv[a + 1]);
  int version;
  double init_ms;
  load_libcuda(lib, &version, &init_ms);
  printf("{\"ready\":true,\"pid\":%d,\"driverVersion\":%d,\"cuInitMs\":%.3f}\n", pid, version, init_ms);
  if (count > 0) {
    for (int i = 0; i < count; i++)
      if (cycle(i, pid, timeout_ms)) return 1;
    return 0;
  }
  char line[256];
  for (int i = 0; read_command(line, sizeof line) && strcmp(line, "exit") != 0; i++)
    if (cycle(i, pid, timeout_ms)) return 1;
  return 0;
}
