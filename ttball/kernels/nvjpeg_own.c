/* The nvjpeg-own JPEG decoder (ttball.kernels.nvjpeg_own; CUDA only).
 *
 * nvJPEG created with allocators of its own (nvjpegCreateExV2), on the GPU's JPEG engines
 * where it has them: device memory from cudaMallocAsync / cudaFreeAsync on the decode's
 * stream, pinned host memory from a pool never given back (a block nvJPEG frees is reused once
 * an event recorded on the freeing stream has passed) and NVJPEG_FLAGS_ENABLE_MEMORY_POOLS. The
 * batch is queued on the caller's stream and not waited for. torchvision's decoder creates
 * nvJPEG with the default allocators (cudaMalloc / cudaFree, cudaHostAlloc / cudaFreeHost): a
 * free waits for the whole device, one explanation of why every decoder measured waited for
 * its process's other GPU work (docs/benchmarks/LOG.md, twenty-ninth and forty-ninth
 * sessions); this one should not.
 *
 * The engines take only what nvjpegDecodeBatchedSupported allows (not progressive JPEGs): each
 * frame's header is parsed and asked, the frames they take are decoded as one batch, each
 * other one alone by a default-backend handle made at the first such frame (as torchvision's
 * decode_jpegs_cuda splits a batch). Without engines (nvjpegCreateExV2 refuses the hardware
 * backend) the default backend decodes every batch.
 *
 *   nj_create(hardware) -> handle or NULL      nj_engines(h) -> 1 when the engines decode
 *   nj_size(h, data, length, &width, &height)  nj_destroy(h)
 *   nj_decode(h, n, data, lengths, planes, widths, stream, &bad): planes holds 3 device
 *     pointers an image (R, G, B planes, each `width` bytes a row); bad is the frame that
 *     failed, or -1 when the whole batch did
 *   nj_error() -> this thread's last failure
 * Functions return 1 on success, 0 on failure.
 */
#include <cuda_runtime_api.h>
#include <nvjpeg.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __thread char last_error[256];  /* per thread: a replica's lanes share the library */

const char *nj_error(void) { return last_error; }

static int fail(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    return 0;
}

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
    cudaEvent_t freed; /* recorded on the freeing stream; reused once it has passed */
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
            continue; /* the freeing stream's work may still read or write it */
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

static nvjpegDevAllocatorV2_t DEV = {dev_malloc, dev_free, NULL};
static nvjpegPinnedAllocatorV2_t PINNED = {pinned_malloc, pinned_free, NULL};

/* ---- the decoder ------------------------------------------------------------------------ */
typedef struct {
    nvjpegHandle_t handle;      /* on the engines when `engines`, else the default backend */
    nvjpegJpegState_t state;
    nvjpegJpegStream_t parsed;  /* a frame's header, for nvjpegDecodeBatchedSupported */
    int engines;
    int batch;                  /* the batch size last set up (0: set up again) */
    nvjpegHandle_t soft;        /* the default backend, for frames the engines refuse */
    nvjpegJpegState_t soft_state;
} decoder_t;

static nvjpegStatus_t create(nvjpegBackend_t backend, nvjpegHandle_t *handle,
                             nvjpegJpegState_t *state) {
    nvjpegStatus_t s = nvjpegCreateExV2(backend, &DEV, &PINNED, NVJPEG_FLAGS_ENABLE_MEMORY_POOLS,
                                        handle);
    if (s != NVJPEG_STATUS_SUCCESS)
        return s;
    s = nvjpegJpegStateCreate(*handle, state);
    if (s != NVJPEG_STATUS_SUCCESS) {
        nvjpegDestroy(*handle);
        *handle = NULL;
    }
    return s;
}

void nj_destroy(void *h) {
    decoder_t *d = h;
    if (!d)
        return;
    if (d->parsed)
        nvjpegJpegStreamDestroy(d->parsed);
    if (d->state)
        nvjpegJpegStateDestroy(d->state);
    if (d->handle)
        nvjpegDestroy(d->handle);
    if (d->soft_state)
        nvjpegJpegStateDestroy(d->soft_state);
    if (d->soft)
        nvjpegDestroy(d->soft);
    free(d);
}

void *nj_create(int hardware) {
    decoder_t *d = calloc(1, sizeof *d);
    if (!d) {
        fail("out of memory");
        return NULL;
    }
    nvjpegStatus_t s = NVJPEG_STATUS_NOT_INITIALIZED;
    if (hardware) {
        s = create(NVJPEG_BACKEND_HARDWARE, &d->handle, &d->state);
        d->engines = s == NVJPEG_STATUS_SUCCESS;
    }
    if (!d->engines) /* no engines on this GPU (NVJPEG_STATUS_ARCH_MISMATCH), or not asked */
        s = create(NVJPEG_BACKEND_DEFAULT, &d->handle, &d->state);
    if (s == NVJPEG_STATUS_SUCCESS && d->engines)
        s = nvjpegJpegStreamCreate(d->handle, &d->parsed);
    if (s != NVJPEG_STATUS_SUCCESS) {
        fail("nvjpegCreateExV2 (%s backend): status %d", d->engines ? "hardware" : "default", s);
        nj_destroy(d);
        return NULL;
    }
    return d;
}

int nj_engines(void *h) { return ((decoder_t *)h)->engines; }

int nj_size(void *h, const unsigned char *data, size_t length, int *width, int *height) {
    decoder_t *d = h;
    int channels, widths[NVJPEG_MAX_COMPONENT], heights[NVJPEG_MAX_COMPONENT];
    nvjpegChromaSubsampling_t subsampling;
    nvjpegStatus_t s = nvjpegGetImageInfo(d->handle, data, length, &channels, &subsampling,
                                          widths, heights);
    if (s != NVJPEG_STATUS_SUCCESS)
        return fail("nvjpegGetImageInfo: status %d (not a JPEG nvJPEG can read)", s);
    *width = widths[0];
    *height = heights[0];
    return 1;
}

/* `n` frames as one batch on d's handle (the size set up only when it changes) */
static int decode_batch(decoder_t *d, int n, const unsigned char *const *data,
                        const size_t *lengths, nvjpegImage_t *out, cudaStream_t stream) {
    nvjpegStatus_t s = NVJPEG_STATUS_SUCCESS;
    if (d->batch != n) {
        s = nvjpegDecodeBatchedInitialize(d->handle, d->state, n, 1, NVJPEG_OUTPUT_RGB);
        if (s != NVJPEG_STATUS_SUCCESS)
            return fail("nvjpegDecodeBatchedInitialize of %d: status %d", n, s);
        d->batch = n;
    }
    s = nvjpegDecodeBatched(d->handle, d->state, data, lengths, out, stream);
    if (s != NVJPEG_STATUS_SUCCESS) {
        d->batch = 0; /* a failed batch is reset by the next Initialize (nvjpeg.h) */
        return fail("nvjpegDecodeBatched of %d: status %d", n, s);
    }
    return 1;
}

/* one frame the engines refuse, by the default backend (its handle made the first time) */
static int decode_alone(decoder_t *d, const unsigned char *data, size_t length,
                        nvjpegImage_t *out, cudaStream_t stream) {
    nvjpegStatus_t s;
    if (!d->soft && (s = create(NVJPEG_BACKEND_DEFAULT, &d->soft, &d->soft_state))
                        != NVJPEG_STATUS_SUCCESS)
        return fail("nvjpegCreateExV2 (default backend, for a frame the engines refuse): "
                    "status %d", s);
    s = nvjpegDecode(d->soft, d->soft_state, data, length, NVJPEG_OUTPUT_RGB, out, stream);
    if (s != NVJPEG_STATUS_SUCCESS)
        return fail("nvjpegDecode (default backend): status %d", s);
    return 1;
}

int nj_decode(void *h, int n, const unsigned char *const *data, const size_t *lengths,
              unsigned char *const *planes, const int *widths, void *stream, int *bad) {
    decoder_t *d = h;
    cudaStream_t on = (cudaStream_t)stream;
    *bad = -1;
    if (n <= 0)
        return 1;
    /* one allocation: the images, then the engines' batch (data, lengths, images), then the
       indices of the frames they refuse */
    size_t bytes = (size_t)n * (2 * sizeof(nvjpegImage_t) + sizeof(unsigned char *)
                                + sizeof(size_t) + sizeof(int));
    char *scratch = calloc(1, bytes);
    if (!scratch)
        return fail("out of memory");
    nvjpegImage_t *out = (nvjpegImage_t *)scratch;
    nvjpegImage_t *batch_out = out + n;
    const unsigned char **batch_data = (const unsigned char **)(batch_out + n);
    size_t *batch_lengths = (size_t *)(batch_data + n);
    int *alone = (int *)(batch_lengths + n);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) {
            out[i].channel[c] = planes[3 * i + c];
            out[i].pitch[c] = (size_t)widths[i];
        }
    int ok = 1, in_batch = 0, n_alone = 0;
    if (!d->engines) {
        ok = decode_batch(d, n, data, lengths, out, on);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        nvjpegStatus_t s = nvjpegJpegStreamParseHeader(d->handle, data[i], lengths[i], d->parsed);
        int refused = -1; /* 0: the engines take it */
        if (s == NVJPEG_STATUS_SUCCESS)
            s = nvjpegDecodeBatchedSupported(d->handle, d->parsed, &refused);
        if (s != NVJPEG_STATUS_SUCCESS) {
            *bad = i;
            ok = fail("frame %d: its JPEG header could not be parsed (status %d)", i, s);
            goto done;
        }
        if (refused == 0) {
            batch_data[in_batch] = data[i];
            batch_lengths[in_batch] = lengths[i];
            batch_out[in_batch++] = out[i];
        } else {
            alone[n_alone++] = i;
        }
    }
    if (in_batch)
        ok = decode_batch(d, in_batch, batch_data, batch_lengths, batch_out, on);
    for (int k = 0; ok && k < n_alone; k++) {
        ok = decode_alone(d, data[alone[k]], lengths[alone[k]], &out[alone[k]], on);
        if (!ok)
            *bad = alone[k];
    }
done:
    free(scratch);
    return ok;
}
