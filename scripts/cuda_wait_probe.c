/* Which CUDA driver calls a library makes, and how long each took: an LD_PRELOAD probe for
 * the wait inside the JPEG decoders (every decoder in a process waits for all of that process's
 * GPU work: docs/benchmarks/LOG.md, twenty-ninth session; which call waits was never seen, as
 * there is no nsys on the GPU machine). scripts/gpu_decode_waits.py builds and reads it.
 *
 * The CUDA runtime (linked into libnvjpeg and into PyTorch) finds the driver's functions with
 * cuGetProcAddress, which it looks up with dlsym on libcuda's handle, so LD_PRELOAD alone never
 * sees them. This library replaces dlsym: asked for cuGetProcAddress(_v2) it returns its own,
 * which hands out a counting wrapper for each driver function in NAMES (the real one is kept).
 * Calls made by name through the dynamic linker are caught too (the same names exported).
 *
 * Every wrapped function takes at most six integer or pointer arguments, so one generic
 * wrapper forwards them all in registers (x86-64 System V). probe_reset() zeroes the counts;
 * probe_read(calls, seconds) copies them out, in the order of probe_name(0 .. probe_count()-1).
 * A diagnostic only: a dlsym(RTLD_NEXT, ...) made by another library resolves from this one.
 *
 *     cc -shared -fPIC -O2 -o /tmp/cuda_wait_probe.so scripts/cuda_wait_probe.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long word;
typedef CUresult (*fn6)(word, word, word, word, word, word);

#define N 16
static const char *NAMES[N] = {
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent",
    "cuMemAlloc", "cuMemFree", "cuMemAllocHost", "cuMemHostAlloc", "cuMemFreeHost",
    "cuMemHostRegister", "cuMemHostUnregister", "cuMemAllocAsync", "cuMemFreeAsync",
    "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpy"};

#define VARIANTS 2  /* pointers a function may come as: legacy and per-thread default stream */
static fn6 real_fn[N * VARIANTS];  /* slot i * VARIANTS + v: NAMES[i]'s v-th pointer seen */
static long calls[N];
static double seconds[N];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static CUresult counted(int slot, word a, word b, word c, word d, word e, word f) {
    int i = slot / VARIANTS;
    double t0 = now();
    CUresult r = real_fn[slot](a, b, c, d, e, f);
    double t = now() - t0;
    pthread_mutex_lock(&lock);
    calls[i] += 1;
    seconds[i] += t;
    pthread_mutex_unlock(&lock);
    return r;
}

#define WRAP(i) \
    static CUresult wrap_##i(word a, word b, word c, word d, word e, word f) { \
        return counted(i, a, b, c, d, e, f); }
WRAP(0) WRAP(1) WRAP(2) WRAP(3) WRAP(4) WRAP(5) WRAP(6) WRAP(7)
WRAP(8) WRAP(9) WRAP(10) WRAP(11) WRAP(12) WRAP(13) WRAP(14) WRAP(15)
WRAP(16) WRAP(17) WRAP(18) WRAP(19) WRAP(20) WRAP(21) WRAP(22) WRAP(23)
WRAP(24) WRAP(25) WRAP(26) WRAP(27) WRAP(28) WRAP(29) WRAP(30) WRAP(31)
static fn6 WRAPPERS[N * VARIANTS] = {
    wrap_0, wrap_1, wrap_2, wrap_3, wrap_4, wrap_5, wrap_6, wrap_7,
    wrap_8, wrap_9, wrap_10, wrap_11, wrap_12, wrap_13, wrap_14, wrap_15,
    wrap_16, wrap_17, wrap_18, wrap_19, wrap_20, wrap_21, wrap_22, wrap_23,
    wrap_24, wrap_25, wrap_26, wrap_27, wrap_28, wrap_29, wrap_30, wrap_31};

/* NAMES' index of a driver symbol: the base name, or one with a version suffix (_v2, _v3) */
static int index_of(const char *symbol) {
    for (int i = 0; i < N; i++) {
        size_t n = strlen(NAMES[i]);
        if (strncmp(symbol, NAMES[i], n) == 0
                && (symbol[n] == '\0' || (symbol[n] == '_' && symbol[n + 1] == 'v')))
            return i;
    }
    return -1;
}

static void *(*real_dlsym)(void *, const char *);
static CUresult (*real_get_proc)(const char *, void **, int, unsigned long long);
static CUresult (*real_get_proc_v2)(const char *, void **, int, unsigned long long, void *);

static void *find(void *handle, const char *symbol) {
    if (!real_dlsym) {
        real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!real_dlsym)
            real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    return real_dlsym(handle, symbol);
}

static void *wrapped(const char *symbol, void *pfn) {
    int i = index_of(symbol);
    if (i < 0 || pfn == NULL)
        return pfn;
    for (int v = 0; v < VARIANTS; v++) {
        int slot = i * VARIANTS + v;
        if (real_fn[slot] == NULL)
            real_fn[slot] = (fn6)pfn;
        if (real_fn[slot] == (fn6)pfn)
            return (void *)WRAPPERS[slot];
    }
    return pfn;  /* a third pointer for the same name: left unwrapped, not miscounted */
}

static CUresult probe_get_proc(const char *, void **, int, unsigned long long);
static CUresult probe_get_proc_v2(const char *, void **, int, unsigned long long, void *);

/* what cuGetProcAddress handed out for symbol: a wrapper where NAMES has it, and this file's
 * own cuGetProcAddress where the runtime asks the driver for that (its 5-argument form from
 * CUDA 12 on), so the lookups it then makes still come here */
static void *handed_out(const char *symbol, void *pfn, int version) {
    if (pfn != NULL && strcmp(symbol, "cuGetProcAddress") == 0) {
        if (version >= 12000) {
            real_get_proc_v2 = pfn;
            return (void *)probe_get_proc_v2;
        }
        real_get_proc = pfn;
        return (void *)probe_get_proc;
    }
    return wrapped(symbol, pfn);
}

static CUresult probe_get_proc(const char *symbol, void **pfn, int version,
                               unsigned long long flags) {
    CUresult r = real_get_proc(symbol, pfn, version, flags);
    if (r == 0 && pfn)
        *pfn = handed_out(symbol, *pfn, version);
    return r;
}

static CUresult probe_get_proc_v2(const char *symbol, void **pfn, int version,
                                  unsigned long long flags, void *status) {
    CUresult r = real_get_proc_v2(symbol, pfn, version, flags, status);
    if (r == 0 && pfn)
        *pfn = handed_out(symbol, *pfn, version);
    return r;
}

void *dlsym(void *handle, const char *symbol) {
    void *p = find(handle, symbol);
    if (p == NULL)
        return p;
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        real_get_proc = p;
        return (void *)probe_get_proc;
    }
    if (strcmp(symbol, "cuGetProcAddress_v2") == 0) {
        real_get_proc_v2 = p;
        return (void *)probe_get_proc_v2;
    }
    return wrapped(symbol, p);
}

int probe_count(void) { return N; }

const char *probe_name(int i) { return i >= 0 && i < N ? NAMES[i] : ""; }

void probe_reset(void) {
    pthread_mutex_lock(&lock);
    memset(calls, 0, sizeof calls);
    memset(seconds, 0, sizeof seconds);
    pthread_mutex_unlock(&lock);
}

void probe_read(long *calls_out, double *seconds_out) {
    pthread_mutex_lock(&lock);
    memcpy(calls_out, calls, sizeof calls);
    memcpy(seconds_out, seconds, sizeof seconds);
    pthread_mutex_unlock(&lock);
}
