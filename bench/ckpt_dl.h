/*
 * The baseline's view of libcuda, shared by bench/cycle.c and bench/many.c: dlopen the library
 * (no link against CUDA, no nvcc) and dlsym cuInit, cuDriverGetVersion, cuGetErrorName and the six
 * cuCheckpointProcess* functions, as a plain C program that calls the driver directly would.
 *
 * The library: --lib PATH, else $CKPT_LIBCUDA_PATH, else "libcuda.so.1" through the system loader.
 * The calls are made as @ckpt/cuda makes them: lock with a 64-byte args struct (timeoutMs), and
 * checkpoint, restore and unlock with NULL args.
 */
#ifndef CKPT_DL_H
#define CKPT_DL_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;

/* CUcheckpointLockArgs (cuda.h 13.0): timeoutMs @0, reserved to 64 bytes, all zero. */
typedef struct {
  uint32_t timeoutMs;
  uint32_t reserved0;
  uint64_t reserved1[7];
} LockArgs;

static CUresult (*cuInit_)(unsigned);
static CUresult (*cuDriverGetVersion_)(int *);
static CUresult (*cuGetErrorName_)(CUresult, const char **);
static CUresult (*getState_)(int, int *);
static CUresult (*getRestoreThreadId_)(int, int *);
static CUresult (*lock_)(int, LockArgs *);
static CUresult (*checkpoint_)(int, void *);
static CUresult (*restore_)(int, void *);
static CUresult (*unlock_)(int, void *);

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static const char *error_name(CUresult code) {
  const char *name = NULL;
  if (cuGetErrorName_ && cuGetErrorName_(code, &name) == 0 && name) return name;
  return "unknown";
}

static void *symbol(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    printf("{\"error\":\"dlsym\",\"symbol\":\"%s\"}\n", name);
    exit(3);
  }
  return p;
}

/* Loads the library and calls cuInit(0); prints one JSON line on failure and exits 3. */
static void load_libcuda(const char *path, int *version, double *init_ms) {
  if (!path || !*path) path = getenv("CKPT_LIBCUDA_PATH");
  if (!path || !*path) path = "libcuda.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    printf("{\"error\":\"dlopen\",\"lib\":\"%s\",\"detail\":\"", path);
    for (const char *c = why ? why : ""; *c; c++) putchar(*c == '"' || *c == '\\' ? '\'' : *c);
    printf("\"}\n");
    exit(3);
  }
  *(void **)&cuInit_ = symbol(lib, "cuInit");
  *(void **)&cuDriverGetVersion_ = symbol(lib, "cuDriverGetVersion");
  *(void **)&cuGetErrorName_ = symbol(lib, "cuGetErrorName");
  *(void **)&getState_ = symbol(lib, "cuCheckpointProcessGetState");
  *(void **)&getRestoreThreadId_ = symbol(lib, "cuCheckpointProcessGetRestoreThreadId");
  *(void **)&lock_ = symbol(lib, "cuCheckpointProcessLock");
  *(void **)&checkpoint_ = symbol(lib, "cuCheckpointProcessCheckpoint");
  *(void **)&restore_ = symbol(lib, "cuCheckpointProcessRestore");
  *(void **)&unlock_ = symbol(lib, "cuCheckpointProcessUnlock");
  *version = 0;
  cuDriverGetVersion_(version);
  /* NVIDIA's header: restore needs persistence mode or cuInit in the caller. Outside the timing. */
  double t = now_ms();
  CUresult rc = cuInit_(0);
  *init_ms = now_ms() - t;
  if (rc != 0) {
    printf("{\"error\":\"cuInit\",\"code\":%d,\"name\":\"%s\"}\n", rc, error_name(rc));
    exit(3);
  }
}

/* Strips the line end; returns 0 at end of input. */
static int read_command(char *line, size_t size) {
  if (!fgets(line, (int)size, stdin)) return 0;
  line[strcspn(line, "\r\n")] = 0;
  return 1;
}

#endif
