/*
 * The baselines of bench/many.ts: suspend (lock + checkpoint) and then resume (restore + unlock)
 * of several processes, straight through libcuda from C, either all at once (one pthread per
 * process) or one after another.
 *
 *   many [--lib PATH] [--mode threads|serial] [--trials N] [--timeout-ms MS] PID...
 *
 * Each trial prints one JSON line: the wall time of the suspend of all of them and of the resume
 * of all of them (CLOCK_MONOTONIC, cuInit made before the first), and each process's step times:
 *   {"trial":0,"mode":"threads","ok":true,"suspendMs":2361.2,"resumeMs":1170.4,"totalMs":3531.6,
 *    "processes":[{"pid":1,"lockMs":0.3,"checkpointMs":2300.1,"restoreMs":1100.2,"unlockMs":1.6,
 *    "code":0,"failed":""},...]}
 * --trials 0 (the default): one trial per line read on stdin, the line naming the mode
 * ("threads" or "serial"), until "exit" or end of input. The first line printed is
 *   {"ready":true,"processes":4,"driverVersion":13000,"cuInitMs":9.8}
 * A failed call is reported in its process's entry ("failed": the step, "code"), the trial's "ok"
 * is false, and the program exits 1 after the line. Library trouble: exit 3; bad arguments: 2.
 * Build: cc -O2 -pthread -o many bench/many.c -ldl
 */
#include <pthread.h>

#include "ckpt_dl.h"

#define MAX_PROCS 256

typedef struct {
  int pid;
  int resume; /* 0: lock + checkpoint; 1: restore + unlock */
  unsigned timeout_ms;
  double ms[4]; /* lock, checkpoint, restore, unlock */
  CUresult code;
  const char *failed;
} Job;

static void *run_job(void *p) {
  Job *j = p;
  double t0 = now_ms(), t1, t2;
  if (!j->resume) {
    LockArgs args;
    memset(&args, 0, sizeof args);
    args.timeoutMs = j->timeout_ms;
    j->code = lock_(j->pid, &args);
    t1 = now_ms();
    j->ms[0] = t1 - t0;
    if (j->code) { j->failed = "lock"; return NULL; }
    j->code = checkpoint_(j->pid, NULL);
    t2 = now_ms();
    j->ms[1] = t2 - t1;
    if (j->code) j->failed = "checkpoint";
  } else {
    j->code = restore_(j->pid, NULL);
    t1 = now_ms();
    j->ms[2] = t1 - t0;
    if (j->code) { j->failed = "restore"; return NULL; }
    j->code = unlock_(j->pid, NULL);
    t2 = now_ms();
    j->ms[3] = t2 - t1;
    if (j->code) j->failed = "unlock";
  }
  return NULL;
}

/* One phase over every job: all at once on threads, or one after another on this thread. */
static double phase(Job *jobs, int n, int threads, int resume) {
  pthread_t th[MAX_PROCS];
  for (int i = 0; i < n; i++) jobs[i].resume = resume;
  double t = now_ms();
  if (threads) {
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  } else {
    for (int i = 0; i < n; i++) {
      run_job(&jobs[i]);
      if (*jobs[i].failed) break; /* as a script going one by one would stop */
    }
  }
  return now_ms() - t;
}

static int trial(int t, const char *mode, const int *pids, int n, unsigned timeout_ms) {
  Job jobs[MAX_PROCS];
  memset(jobs, 0, sizeof jobs);
  for (int i = 0; i < n; i++) {
    jobs[i].pid = pids[i];
    jobs[i].timeout_ms = timeout_ms;
    jobs[i].failed = "";
  }
  int threads = strcmp(mode, "threads") == 0;
  double suspend = phase(jobs, n, threads, 0);
  int ok = 1;
  for (int i = 0; i < n; i++) ok = ok && !*jobs[i].failed;
  double resume = 0;
  if (ok) {
    resume = phase(jobs, n, threads, 1);
    for (int i = 0; i < n; i++) ok = ok && !*jobs[i].failed;
  }
  printf("{\"trial\":%d,\"mode\":\"%s\",\"ok\":%s,\"suspendMs\":%.3f,\"resumeMs\":%.3f,"
         "\"totalMs\":%.3f,\"processes\":[",
         t, threads ? "threads" : "serial", ok ? "true" : "false", suspend, resume, suspend + resume);
  for (int i = 0; i < n; i++) {
    Job *j = &jobs[i];
    printf("%s{\"pid\":%d,\"lockMs\":%.3f,\"checkpointMs\":%.3f,\"restoreMs\":%.3f,\"unlockMs\":%.3f,"
           "\"code\":%d,\"name\":\"%s\",\"failed\":\"%s\"}",
           i ? "," : "", j->pid, j->ms[0], j->ms[1], j->ms[2], j->ms[3], j->code,
           j->code ? error_name(j->code) : "", j->failed);
  }
  printf("]}\n");
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *lib = NULL, *mode = "threads";
  int trials = 0;
  unsigned timeout_ms = 10000; /* @ckpt/cuda's default lock timeout */
  int a = 1;
  for (; a < argc && strncmp(argv[a], "--", 2) == 0; a++) {
    if (strcmp(argv[a], "--lib") == 0 && a + 1 < argc) lib = argv[++a];
    else if (strcmp(argv[a], "--mode") == 0 && a + 1 < argc) mode = argv[++a];
    else if (strcmp(argv[a], "--trials") == 0 && a + 1 < argc) trials = atoi(argv[++a]);
    else if (strcmp(argv[a], "--timeout-ms") == 0 && a + 1 < argc) timeout_ms = (unsigned)atoi(argv[++a]);
    else break;
  }
  int n = argc - a;
  int pids[MAX_PROCS];
  int bad = n < 1 || n > MAX_PROCS || trials < 0 ||
            (strcmp(mode, "threads") != 0 && strcmp(mode, "serial") != 0);
  for (int i = 0; !bad && i < n; i++) bad = (pids[i] = atoi(argv[a + i])) <= 0;
  if (bad) {
    fprintf(stderr, "usage: many [--lib PATH] [--mode threads|serial] [--trials N] [--timeout-ms MS] PID...\n"
                    "  (--trials 0, the default: one trial per stdin line naming the mode)\n");
    return 2;
  }
  int version;
  double init_ms;
  load_libcuda(lib, &version, &init_ms);
  printf("{\"ready\":true,\"processes\":%d,\"driverVersion\":%d,\"cuInitMs\":%.3f}\n", n, version, init_ms);
  if (trials > 0) {
    for (int t = 0; t < trials; t++)
      if (trial(t, mode, pids, n, timeout_ms)) return 1;
    return 0;
  }
  char line[256];
  for (int t = 0; read_command(line, sizeof line) && strcmp(line, "exit") != 0; t++) {
    if (strcmp(line, "threads") != 0 && strcmp(line, "serial") != 0) {
      printf("{\"error\":\"unknown mode\",\"line\":\"%.64s\"}\n", line);
      return 2;
    }
    if (trial(t, line, pids, n, timeout_ms)) return 1;
  }
  return 0;
}
