// What bounds a restore with digests from a warm page cache: the host's memory, measured with the
// two kinds of reader a restore runs at once. A "criu" thread reads its file from the page cache
// into fresh anonymous memory (faulted and zeroed as it goes, as criu's restore fills a process);
// a "digest" thread reads its share of the same files 256 KiB at a time into one buffer and sums it
// (a hash's read, without its arithmetic): digest thread j reads part j / criu of file j % criu, so
// that every byte is read once by each kind. Files membw-N.bin of GIB GiB in DIR, cached first.
// Runs: the criu threads alone, the digest threads alone, then both at once; GB/s of file bytes.
//   cc -O2 -pthread -o membw membw.c && ./membw DIR [criu threads] [digest threads] [GiB]
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static size_t bytes;
static char dir[4096];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int open_file(int i) {
  char name[4200];
  snprintf(name, sizeof name, "%s/membw-%d.bin", dir, i);
  return open(name, O_RDONLY);
}

static void *criu_like(void *arg) {
  int fd = open_file((int)(intptr_t)arg);
  char *to = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (size_t at = 0; at < bytes;) {
    ssize_t n = pread(fd, to + at, bytes - at < (4 << 20) ? bytes - at : (4 << 20), at);
    if (n <= 0) break;
    at += n;
  }
  munmap(to, bytes);
  close(fd);
  return NULL;
}

static volatile uint64_t sink;

static int criu_threads, digest_threads;

static void *digest_like(void *arg) {
  int j = (int)(intptr_t)arg, fd = open_file(j % criu_threads);
  int parts = (digest_threads + criu_threads - 1) / criu_threads;
  size_t from = bytes / parts * (j / criu_threads), end = from + bytes / parts;
  static __thread uint64_t buf[32768];
  uint64_t sum = 0;
  for (size_t at = from; at < end;) {
    ssize_t n = pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    for (size_t k = 0; k < (size_t)n / 8; k++) sum += buf[k];
    at += n;
  }
  sink += sum;
  close(fd);
  return NULL;
}

static void run(const char *what, int criu, int digest) {
  pthread_t t[256];
  double t0 = now();
  for (int i = 0; i < criu; i++) pthread_create(&t[i], NULL, criu_like, (void *)(intptr_t)i);
  for (int i = 0; i < digest; i++)
    pthread_create(&t[criu + i], NULL, digest_like, (void *)(intptr_t)i);
  for (int i = 0; i < criu + digest; i++) pthread_join(t[i], NULL);
  double s = now() - t0;
  double moved = ((criu > 0) + (digest > 0)) * (double)criu_threads * bytes;
  printf("%-20s criu %2d digest %2d: %6.2f s, %6.2f GB/s\n", what, criu, digest, s, moved / s / 1e9);
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  snprintf(dir, sizeof dir, "%s", argv[1]);
  int criu = criu_threads = argc > 2 ? atoi(argv[2]) : 8;
  int digest = digest_threads = argc > 3 ? atoi(argv[3]) : 16;
  bytes = (size_t)((argc > 4 ? atof(argv[4]) : 1) * (1 << 30));
  for (int r = 0; r < 2; r++) {
    run("criu-like alone", criu, 0);
    if (digest == 0) continue;
    run("digest-like alone", 0, digest);
    run("both at once", criu, digest);
  }
  return 0;
}
