// A CUDA target process for the GPU tests: it owns GPU memory filled with a known pattern, and
// answers commands on stdin so that a test can make it busy, check its memory, or end it.
//
//   target cuda <MiB>     a CUDA process with <MiB> of GPU memory
//   target nocuda         a live process that never initialises CUDA
//   target fill <MiB>     a CUDA process that only holds <MiB> (to leave a GPU without room)
//   target fifo <MiB> <path>
//                         as cuda, but it reads its commands from the named fifo <path> instead of
//                         stdin, one command per opening of the fifo (it opens the fifo, reads one
//                         line, closes it), so that it holds no descriptor of it between commands.
//                         For CRIU (tests/gpu/criu_cli.sh): started with stdin from /dev/null and
//                         stdout to a file, it has nothing CRIU cannot dump and restore, and after
//                         a restore it still answers: `echo hash > <path>` appends "hash <hex>" to
//                         that file. It ends on "exit", or when the fifo cannot be opened.
//
// It prints "ready <pid> <tid> <hash>" (tid: a thread of its own that is not the main one), then
// answers "kernel <ms>" with "launched" (a kernel that spins for <ms>, launched asynchronously),
// "hash" with "hash <hex>" (a position-weighted sum of its memory, computed on the GPU), and
// ends on "exit" or end of input.
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "target: %s failed: %s\n", #call, cudaGetErrorString(e_));      \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

__device__ unsigned long long mix(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__global__ void fill(unsigned long long *p, size_t n, unsigned long long seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = mix(seed + i);
}

__global__ void weighted_sum(const unsigned long long *p, size_t n, unsigned long long *out) {
  unsigned long long acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    acc += p[i] * (2 * i + 1);
  atomicAdd(out, acc);
}

__global__ void spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

static volatile pid_t helper_tid = 0;
static void *idle(void *) {
  helper_tid = (pid_t)syscall(SYS_gettid);
  for (;;) pause();
  return NULL;
}

static unsigned long long *mem = NULL, *sum = NULL;
static size_t words = 0;

static unsigned long long hash_memory(void) {
  unsigned long long h = 0;
  if (!words) return 0;
  CHECK(cudaMemset(sum, 0, sizeof *sum));
  weighted_sum<<<1024, 256>>>(mem, words, sum);
  CHECK(cudaMemcpy(&h, sum, sizeof h, cudaMemcpyDeviceToHost));
  return h;
}

// The next command line: from stdin, or in fifo mode from one opening of the fifo. 0 at the end.
static int next_command(const char *fifo, char *line, int size) {
  if (!fifo) return fgets(line, size, stdin) != NULL;
  for (;;) {
    FILE *f = fopen(fifo, "r");  // blocks until a writer opens the fifo
    if (!f) {
      if (errno == EINTR) continue;
      fprintf(stderr, "target: cannot open %s: %s\n", fifo, strerror(errno));
      return 0;
    }
    char *got = fgets(line, size, f);
    fclose(f);
    if (got) return 1;  // else a writer that wrote nothing: wait for the next
  }
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *mode = argc > 1 ? argv[1] : "cuda";
  size_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 16;
  pthread_t th;
  pthread_create(&th, NULL, idle, NULL);
  while (!helper_tid) usleep(100);
  int cuda = strcmp(mode, "nocuda") != 0;
  const char *fifo = NULL;
  if (strcmp(mode, "fifo") == 0) {
    if (argc < 4) {
      fprintf(stderr, "target: fifo mode needs <MiB> <fifo path>\n");
      return 2;
    }
    fifo = argv[3];
  }
  unsigned long long h = 0;
  if (cuda) {
    CHECK(cudaFree(0));
    words = mib * 1024 * 1024 / sizeof(unsigned long long);
    CHECK(cudaMalloc(&sum, sizeof *sum));
    if (words) CHECK(cudaMalloc(&mem, words * sizeof *mem));
    if (strcmp(mode, "fill") == 0) {
      words = 0;  // hold the memory, touch nothing
    } else if (words) {
      fill<<<1024, 256>>>(mem, words, (unsigned long long)getpid() * 7919ULL);
      CHECK(cudaDeviceSynchronize());
    }
    h = hash_memory();
  }
  printf("ready %d %d %llx\n", (int)getpid(), (int)helper_tid, h);
  char line[128];
  while (next_command(fifo, line, sizeof line)) {
    unsigned long long ms;
    if (sscanf(line, "kernel %llu", &ms) == 1 && cuda) {
      spin<<<1, 1>>>(ms * 1000000ULL);
      CHECK(cudaGetLastError());
      printf("launched\n");
    } else if (strncmp(line, "hash", 4) == 0 && cuda) {
      printf("hash %llx\n", hash_memory());
    } else if (strncmp(line, "exit", 4) == 0) {
      break;
    } else {
      printf("error unknown command: %s", line);
    }
  }
  return 0;
}
