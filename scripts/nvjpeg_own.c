/* An nvJPEG batch decoder given allocators of its own (an experiment for
 * scripts/gpu_decode_waits.py --decoder own; GPU only).
 *
 * torchvision's decoder creates nvJPEG with the default allocators (cudaMalloc / cudaFree,
 * cudaHostAlloc / cudaFreeHost), and every JPEG decoder measured here waits for all of its
 * process's GPU work (docs/benchmarks/LOG.md, twenty-ninth session); a free waits for the whole
 * device. This one uses nvjpegCreateExV2 with stream-ordered allocators: device memory from
 * cudaMallocAsync / cudaFreeAsync on the decode's stream, pinned host memory from a pool that
 * is never given back (a block freed by nvJPEG is reused once an event recorded on the freeing
 * stream has passed), and NVJPEG_FLAGS_ENABLE_MEMORY_POOLS. The decode is queued on the
 * caller's stream and not waited for. If its decode no longer waits behind another stream's
 * work, the wait was nvJPEG's frees.
 *
 *     nvcc -shared -O2 -Xcompiler -fPIC -cudart shared -o /tmp/nvjpeg_own.so \
 *         scripts/nvjpeg_own.c -lnvjpeg
 *
 * nj_create(hardware) -> handle or NULL; nj_error() the last failure's text;
 * nj_size(h, data, length, &width, &height); nj_decode(h, n, data, lengths, planes, stream):
 * planes holds 3 device pointers an image (R, G, B planes, each width bytes a row).
 */
#include <cuda_runtime_api.h>
#include <nvjpeg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char last_error[256];

const char *nj_error(void) { return last_error; }

#define FAIL(...) do { snprintf(last_error, sizeof last_error, __VA_ARGS__); return 0; } while (0)

/* ---- allocators ------------------------------------------------------------------------- */
static int dev_malloc(void *ctx, void **ptr, size_t size, cudaStream_t stream) {
    (void)ctx;
    return cudaMallocAsync(ptr, size, stream) == cudaSuccess ? 0 : 1;
}

static int dev_free(void *ctx, void *ptr, size_t size, cudaStream_t stream) {
    (void)ctx;
    (void)size;
    return cudaFreeAsync(ptr, stream) == cudaSuccess ? 0 : 1;
}

typedef struct {
    void *ptr;
    size_t size;
    cudaEvent_t freed;  /* recorded on the freeing stream; NULL while the block is in use */
    int in_use;
} block_t;

#define MAX_BLOCKS 256
static block_t blocks[MAX_BLOCKS];
static int n_blocks;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static int pinned_malloc(void *ctx, void **ptr, size_t size, cudaStream_t stream) {
    (void)ctx;
    (void)stream;
    pthread_mutex_lock(&pool_lock);
    int best = -1;
    for (int i = 0; i < n_blocks; i++) {
        block_t *b = &blocks[i];
        if (b->in_use || b->size < size)
            continue;
        if (b->freed && cudaEventQuery(b->freed) != cudaSuccess)
            continue;  /* the freeing stream's work may still read or write it */
        if (best < 0 || b->size < blocks[best].size)
            best = i;
    }
    int status = 0;
    if (best >= 0) {
        blocks[best].in_use = 1;
        *ptr = blocks[best].ptr;
    } else if (n_blocks < MAX_BLOCKS
               && cudaHostAlloc(ptr, size, cudaHostAllocDefault) == cudaSuccess) {
        blocks[n_blocks++] = (block_t){*ptr, size, NULL, 1};
    } else {
        status = 1;
    }
    pthread_mutex_unlock(&pool_lock);
    return status;
}

static int pinned_free(void *ctx, void *ptr, size_t size, cudaStream_t stream) {
    (void)ctx;
    (void)size;
    pthread_mutex_lock(&pool_lock);
    int status = 1;
    for (int i = 0; i < n_blocks; i++) {
        block_t *b = &blocks[i];
        if (b->ptr != ptr)
            continue;
        if (!b->freed && cudaEventCreateWithFlags(&b->freed, cudaEventDisableTiming) != cudaSuccess)
            break;
        if (cudaEventRecord(b->freed, stream) != cudaSuccess)
            break;
        b->in_use = 0;
        status = 0;
        break;
    }
    pthread_mutex_unlock(&pool_lock);
    return status;
}

/* ---- the decoder ------------------------------------------------------------------------ */
typedef struct {
    nvjpegHandle_t handle;
    nvjpegJpegState_t state;
    int batch;  /* the batch size nvjpegDecodeBatchedInitialize last saw */
} decoder_t;

static nvjpegDevAllocatorV2_t DEV = {dev_malloc, dev_free, NULL};
static nvjpegPinnedAllocatorV2_t PINNED = {pinned_malloc, pinned_free, NULL};

void *nj_create(int hardware) {
    decoder_t *d = calloc(1, sizeof *d);
    if (!d)
        FAIL("out of memory");
    nvjpegBackend_t backend = hardware ? NVJPEG_BACKEND_HARDWARE : NVJPEG_BACKEND_DEFAULT;
    nvjpegStatus_t s = nvjpegCreateExV2(backend, &DEV, &PINNED, NVJPEG_FLAGS_ENABLE_MEMORY_POOLS,
                                        &d->handle);
    if (s != NVJPEG_STATUS_SUCCESS) {
        free(d);
        FAIL("nvjpegCreateExV2 (%s backend): status %d", hardware ? "hardware" : "default", s);
    }
    s = nvjpegJpegStateCreate(d->handle, &d->state);
    if (s != NVJPEG_STATUS_SUCCESS) {
        nvjpegDestroy(d->handle);
        free(d);
        FAIL("nvjpegJpegStateCreate: status %d", s);
    }
    return d;
}

int nj_size(void *h, const unsigned char *data, size_t length, int *width, int *height) {
    decoder_t *d = h;
    int channels, widths[NVJPEG_MAX_COMPONENT], heights[NVJPEG_MAX_COMPONENT];
    nvjpegChromaSubsampling_t subsampling;
    nvjpegStatus_t s = nvjpegGetImageInfo(d->handle, data, length, &channels, &subsampling,
                                          widths, heights);
    if (s != NVJPEG_STATUS_SUCCESS)
        FAIL("nvjpegGetImageInfo: status %d", s);
    *width = widths[0];
    *height = heights[0];
    return 1;
}

int nj_decode(void *h, int n, const unsigned char *const *data, const size_t *lengths,
              unsigned char *const *planes, const int *widths, void *stream) {
    decoder_t *d = h;
    nvjpegImage_t *out = calloc((size_t)n, sizeof *out);
    if (!out)
        FAIL("out of memory");
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) {
            out[i].channel[c] = planes[3 * i + c];
            out[i].pitch[c] = (size_t)widths[i];
        }
    nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
    if (d->batch != n) {
        s = nvjpegDecodeBatchedInitialize(d->handle, d->state, n, 1, NVJPEG_OUTPUT_RGB);
        if (s == NVJPEG_STATUS_SUCCESS)
            d->batch = n;
    }
    if (s == NVJPEG_STATUS_SUCCESS)
        s = nvjpegDecodeBatched(d->handle, d->state, data, lengths, out, (cudaStream_t)stream);
    free(out);
    if (s != NVJPEG_STATUS_SUCCESS)
        FAIL("nvjpegDecodeBatched of %d: status %d", n, s);
    return 1;
}
