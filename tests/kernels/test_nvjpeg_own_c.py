"""ttball/kernels/nvjpeg_own.c's own logic and its Python wrapper, on the CPU: the C compiled
with the host's C compiler against a fake nvJPEG and CUDA runtime written here, which "decode"
into host memory and log what they were asked. A fake JPEG is ``FF D8``, a kind byte (``B``
baseline; ``P`` progressive, which the engines refuse; ``F``, which fails any batch of more
than one frame), then its width, height and a pixel value."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from ttball.kernels import nvjpeg_own
from ttball.kernels.nvjpeg_own import SOURCE, DecodeFailed, OwnNvjpeg
from ttball.kernels.prepost_image import DecodeError, JpegDecoder

CC = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler (cc, gcc, clang)")

RUNTIME_H = r"""
#include <stddef.h>
typedef int cudaError_t;
#define cudaSuccess 0
#define cudaErrorNotReady 600
#define cudaEventDisableTiming 2
#define cudaHostAllocDefault 0
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream);
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
"""

NVJPEG_H = r"""
#include "cuda_runtime_api.h"
#define NVJPEG_MAX_COMPONENT 4
#define NVJPEG_FLAGS_ENABLE_MEMORY_POOLS 1<<1
typedef enum { NVJPEG_STATUS_SUCCESS = 0, NVJPEG_STATUS_NOT_INITIALIZED = 1,
               NVJPEG_STATUS_BAD_JPEG = 3, NVJPEG_STATUS_ARCH_MISMATCH = 7 } nvjpegStatus_t;
typedef enum { NVJPEG_BACKEND_DEFAULT = 0, NVJPEG_BACKEND_HARDWARE = 3 } nvjpegBackend_t;
typedef enum { NVJPEG_OUTPUT_RGB = 3 } nvjpegOutputFormat_t;
typedef int nvjpegChromaSubsampling_t;
typedef struct { unsigned char *channel[NVJPEG_MAX_COMPONENT];
                 size_t pitch[NVJPEG_MAX_COMPONENT]; } nvjpegImage_t;
typedef int (*tDevMallocV2)(void *ctx, void **ptr, size_t size, cudaStream_t stream);
typedef int (*tDevFreeV2)(void *ctx, void *ptr, size_t size, cudaStream_t stream);
typedef int (*tPinnedMallocV2)(void *ctx, void **ptr, size_t size, cudaStream_t stream);
typedef int (*tPinnedFreeV2)(void *ctx, void *ptr, size_t size, cudaStream_t stream);
typedef struct { tDevMallocV2 dev_malloc; tDevFreeV2 dev_free; void *dev_ctx; }
    nvjpegDevAllocatorV2_t;
typedef struct { tPinnedMallocV2 pinned_malloc; tPinnedFreeV2 pinned_free; void *pinned_ctx; }
    nvjpegPinnedAllocatorV2_t;
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;
nvjpegStatus_t nvjpegCreateExV2(nvjpegBackend_t backend, nvjpegDevAllocatorV2_t *dev,
                                nvjpegPinnedAllocatorV2_t *pinned, unsigned int flags,
                                nvjpegHandle_t *handle);
nvjpegStatus_t nvjpegDestroy(nvjpegHandle_t handle);
nvjpegStatus_t nvjpegJpegStateCreate(nvjpegHandle_t handle, nvjpegJpegState_t *state);
nvjpegStatus_t nvjpegJpegStateDestroy(nvjpegJpegState_t state);
nvjpegStatus_t nvjpegJpegStreamCreate(nvjpegHandle_t handle, nvjpegJpegStream_t *stream);
nvjpegStatus_t nvjpegJpegStreamDestroy(nvjpegJpegStream_t stream);
nvjpegStatus_t nvjpegGetImageInfo(nvjpegHandle_t handle, const unsigned char *data,
                                  size_t length, int *channels,
                                  nvjpegChromaSubsampling_t *subsampling, int *widths,
                                  int *heights);
nvjpegStatus_t nvjpegJpegStreamParseHeader(nvjpegHandle_t handle, const unsigned char *data,
                                           size_t length, nvjpegJpegStream_t stream);
nvjpegStatus_t nvjpegDecodeBatchedSupported(nvjpegHandle_t handle, nvjpegJpegStream_t stream,
                                            int *is_supported);
nvjpegStatus_t nvjpegDecodeBatchedInitialize(nvjpegHandle_t handle, nvjpegJpegState_t state,
                                             int batch_size, int max_cpu_threads,
                                             nvjpegOutputFormat_t format);
nvjpegStatus_t nvjpegDecodeBatched(nvjpegHandle_t handle, nvjpegJpegState_t state,
                                   const unsigned char *const *data, const size_t *lengths,
                                   nvjpegImage_t *destinations, cudaStream_t stream);
nvjpegStatus_t nvjpegDecode(nvjpegHandle_t handle, nvjpegJpegState_t state,
                            const unsigned char *data, size_t length,
                            nvjpegOutputFormat_t format, nvjpegImage_t *destination,
                            cudaStream_t stream);
"""

FAKE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nvjpeg.h"

int fake_engines = 1;     /* whether the hardware backend can be created */
int fake_events_done = 1; /* what cudaEventQuery says */
int fake_host_allocs;     /* cudaHostAlloc calls */
static char log_text[8192];
const char *fake_log(void) { return log_text; }
void fake_clear(void) { log_text[0] = 0; }
static void say(const char *text) {
    strncat(log_text, text, sizeof log_text - strlen(log_text) - 1);
}

struct nvjpegHandle { int backend; nvjpegPinnedAllocatorV2_t pinned; };
struct nvjpegJpegState { int n; };
struct nvjpegJpegStream { int progressive; };
struct CUevent_st { int recorded; };
static nvjpegHandle_t last_handle;

cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t s) {
    (void)s; *ptr = malloc(size); return cudaSuccess; }
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t s) { (void)s; free(ptr); return cudaSuccess; }
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
    (void)flags; fake_host_allocs++; *ptr = malloc(size); return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags; *e = calloc(1, sizeof **e); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    (void)s; e->recorded++; return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t e) {
    (void)e; return fake_events_done ? cudaSuccess : cudaErrorNotReady; }

/* the pinned allocator nvjpeg_own.c gave the last handle: op 0 malloc, 1 free */
int fake_pinned(int op, size_t size, void **ptr) {
    nvjpegPinnedAllocatorV2_t *a = &last_handle->pinned;
    return op == 0 ? a->pinned_malloc(a->pinned_ctx, ptr, size, 0)
                   : a->pinned_free(a->pinned_ctx, *ptr, size, 0);
}

nvjpegStatus_t nvjpegCreateExV2(nvjpegBackend_t backend, nvjpegDevAllocatorV2_t *dev,
                                nvjpegPinnedAllocatorV2_t *pinned, unsigned int flags,
                                nvjpegHandle_t *handle) {
    (void)dev;
    if (!(flags & NVJPEG_FLAGS_ENABLE_MEMORY_POOLS)) return NVJPEG_STATUS_NOT_INITIALIZED;
    if (backend == NVJPEG_BACKEND_HARDWARE && !fake_engines) return NVJPEG_STATUS_ARCH_MISMATCH;
    say(backend == NVJPEG_BACKEND_HARDWARE ? "create hw;" : "create default;");
    *handle = calloc(1, sizeof **handle);
    (*handle)->backend = backend;
    (*handle)->pinned = *pinned;
    last_handle = *handle;
    return NVJPEG_STATUS_SUCCESS;
}
nvjpegStatus_t nvjpegDestroy(nvjpegHandle_t h) { free(h); return NVJPEG_STATUS_SUCCESS; }
nvjpegStatus_t nvjpegJpegStateCreate(nvjpegHandle_t h, nvjpegJpegState_t *s) {
    (void)h; *s = calloc(1, sizeof **s); return NVJPEG_STATUS_SUCCESS; }
nvjpegStatus_t nvjpegJpegStateDestroy(nvjpegJpegState_t s) { free(s); return 0; }
nvjpegStatus_t nvjpegJpegStreamCreate(nvjpegHandle_t h, nvjpegJpegStream_t *s) {
    (void)h; *s = calloc(1, sizeof **s); return NVJPEG_STATUS_SUCCESS; }
nvjpegStatus_t nvjpegJpegStreamDestroy(nvjpegJpegStream_t s) { free(s); return 0; }

static int valid(const unsigned char *d, size_t n) {
    return n >= 6 && d[0] == 0xFF && d[1] == 0xD8 && strchr("BPF", d[2]) && d[2];
}
static const char *name(nvjpegHandle_t h) {
    return h->backend == NVJPEG_BACKEND_HARDWARE ? "hw" : "default";
}
/* the fake pixels: every byte of plane c is value + c */
static void fill(const unsigned char *d, nvjpegImage_t *out) {
    for (int c = 0; c < 3; c++)
        memset(out->channel[c], d[5] + c, (size_t)d[3] * d[4]);
}

nvjpegStatus_t nvjpegGetImageInfo(nvjpegHandle_t h, const unsigned char *d, size_t n,
                                  int *channels, nvjpegChromaSubsampling_t *sub, int *w,
                                  int *hh) {
    (void)h; (void)sub;
    if (!valid(d, n)) return NVJPEG_STATUS_BAD_JPEG;
    *channels = 3; w[0] = d[3]; hh[0] = d[4];
    return NVJPEG_STATUS_SUCCESS;
}
nvjpegStatus_t nvjpegJpegStreamParseHeader(nvjpegHandle_t h, const unsigned char *d, size_t n,
                                           nvjpegJpegStream_t s) {
    (void)h;
    if (!valid(d, n)) return NVJPEG_STATUS_BAD_JPEG;
    s->progressive = d[2] == 'P';
    return NVJPEG_STATUS_SUCCESS;
}
nvjpegStatus_t nvjpegDecodeBatchedSupported(nvjpegHandle_t h, nvjpegJpegStream_t s, int *no) {
    (void)h; *no = s->progressive; return NVJPEG_STATUS_SUCCESS; }
nvjpegStatus_t nvjpegDecodeBatchedInitialize(nvjpegHandle_t h, nvjpegJpegState_t s, int n,
                                             int threads, nvjpegOutputFormat_t f) {
    (void)threads; (void)f;
    s->n = n;
    char text[64]; snprintf(text, sizeof text, "init %s %d;", name(h), n); say(text);
    return NVJPEG_STATUS_SUCCESS;
}
nvjpegStatus_t nvjpegDecodeBatched(nvjpegHandle_t h, nvjpegJpegState_t s,
                                   const unsigned char *const *d, const size_t *n,
                                   nvjpegImage_t *out, cudaStream_t st) {
    (void)st;
    char text[64];
    for (int k = 0; k < s->n; k++) {  /* the batch's size is what Initialize saw */
        if (!valid(d[k], n[k]) || (d[k][2] == 'F' && s->n > 1)) return NVJPEG_STATUS_BAD_JPEG;
        if (h->backend == NVJPEG_BACKEND_HARDWARE && d[k][2] == 'P')
            return NVJPEG_STATUS_BAD_JPEG;  /* the engines can't decode a progressive JPEG */
    }
    for (int k = 0; k < s->n; k++)
        fill(d[k], &out[k]);
    snprintf(text, sizeof text, "batch %s %d;", name(h), s->n); say(text);
    return NVJPEG_STATUS_SUCCESS;
}
nvjpegStatus_t nvjpegDecode(nvjpegHandle_t h, nvjpegJpegState_t s, const unsigned char *d,
                            size_t n, nvjpegOutputFormat_t f, nvjpegImage_t *out,
                            cudaStream_t st) {
    (void)s; (void)f; (void)st;
    if (!valid(d, n)) return NVJPEG_STATUS_BAD_JPEG;
    char text[64]; snprintf(text, sizeof text, "one %s %d;", name(h), d[5]); say(text);
    fill(d, out);
    return NVJPEG_STATUS_SUCCESS;
}
"""


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> ctypes.CDLL:
    """nvjpeg_own.c and the fake, one shared library with the wrapper's signatures."""
    folder = tmp_path_factory.mktemp("nvjpeg_own")
    (folder / "cuda_runtime_api.h").write_text(RUNTIME_H)
    (folder / "nvjpeg.h").write_text(NVJPEG_H)
    (folder / "fake.c").write_text(FAKE_C)
    lib = folder / "fake_nvjpeg_own.so"
    assert CC is not None
    subprocess.run([CC, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
                    f"-I{folder}", "-o", str(lib), str(SOURCE), str(folder / "fake.c"),
                    "-lpthread"], check=True)
    loaded = nvjpeg_own.typed(ctypes.CDLL(str(lib)))
    loaded.fake_log.restype = ctypes.c_char_p
    return loaded


def frame(kind: str, value: int, width: int = 4, height: int = 2) -> bytes:
    return b"\xff\xd8" + kind.encode() + bytes([width, height, value])


def log(fake: ctypes.CDLL) -> list[str]:
    text = fake.fake_log().decode()
    fake.fake_clear()
    return [e for e in text.split(";") if e]


def pixels(image: torch.Tensor) -> list[int]:
    """Each plane's value (one per plane: the fake fills a plane with one byte)."""
    assert all(image[c].unique().numel() == 1 for c in range(3))
    return [int(image[c, 0, 0]) for c in range(3)]


def test_the_engines_decode_what_they_take_and_the_default_backend_the_rest(fake) -> None:
    fake.fake_clear()
    decoder = OwnNvjpeg("cpu", library=fake)
    assert decoder.engines and log(fake) == ["create hw"]
    frames = [frame("B", 10), frame("P", 20, width=6), frame("B", 30)]
    images = decoder(frames)
    # the two baseline frames as one batch of 2; the progressive one alone, by a default
    # handle made for it, into its own place in the list
    assert log(fake) == ["init hw 2", "batch hw 2", "create default", "one default 20"]
    assert [pixels(i) for i in images] == [[10, 11, 12], [20, 21, 22], [30, 31, 32]]
    assert [tuple(i.shape) for i in images] == [(3, 2, 4), (3, 2, 6), (3, 2, 4)]
    decoder([frame("B", 40), frame("B", 50)])  # the same batch size: no Initialize again
    decoder([frame("P", 60)])  # nothing for the engines; the default handle kept
    assert log(fake) == ["batch hw 2", "one default 60"]
    decoder([frame("B", 70)])
    assert log(fake) == ["init hw 1", "batch hw 1"]


def test_a_frame_without_a_header_is_named_and_nothing_decoded(fake) -> None:
    decoder = OwnNvjpeg("cpu", library=fake)
    fake.fake_clear()
    with pytest.raises(DecodeFailed, match="nvjpegGetImageInfo") as error:
        decoder([frame("B", 1), b"not a jpeg at all", frame("B", 2)])
    assert error.value.index == 1 and log(fake) == []
    # a header the size check reads but the engines' parser refuses: named by the C
    bad = ctypes.c_int(-2)
    planes = (ctypes.c_void_p * 3)()
    data = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.c_char_p(b"xx"), ctypes.c_void_p))
    assert not fake.nj_decode(decoder._handle, 1, data, (ctypes.c_size_t * 1)(2), planes,
                              (ctypes.c_int * 1)(4), None, ctypes.byref(bad))
    assert bad.value == 0 and "frame 0" in fake.nj_error().decode() and log(fake) == []


def test_without_engines_the_default_backend_decodes_the_whole_batch(fake) -> None:
    ctypes.c_int.in_dll(fake, "fake_engines").value = 0
    try:
        fake.fake_clear()
        decoder = OwnNvjpeg("cpu", library=fake)
        assert not decoder.engines
        images = decoder([frame("B", 10), frame("P", 20)])
        assert log(fake) == ["create default", "init default 2", "batch default 2"]
        assert [pixels(i)[0] for i in images] == [10, 20]
    finally:
        ctypes.c_int.in_dll(fake, "fake_engines").value = 1


def test_the_pinned_pool_reuses_a_block_only_after_its_freeing_event(fake) -> None:
    OwnNvjpeg("cpu", library=fake)  # the fake's last handle: its allocators are nvjpeg_own.c's
    done = ctypes.c_int.in_dll(fake, "fake_events_done")
    allocs = ctypes.c_int.in_dll(fake, "fake_host_allocs")
    first, second = ctypes.c_void_p(), ctypes.c_void_p()
    before = allocs.value
    assert fake.fake_pinned(0, 1000, ctypes.byref(first)) == 0
    assert fake.fake_pinned(1, 1000, ctypes.byref(first)) == 0
    done.value = 0  # the freeing stream has not reached the event: a new block
    try:
        assert fake.fake_pinned(0, 500, ctypes.byref(second)) == 0
        assert second.value != first.value and allocs.value == before + 2
    finally:
        done.value = 1
    third = ctypes.c_void_p()
    assert fake.fake_pinned(0, 800, ctypes.byref(third)) == 0  # the first block, passed now
    assert third.value == first.value and allocs.value == before + 2
    unknown = ctypes.c_void_p(12345)
    assert fake.fake_pinned(1, 8, ctypes.byref(unknown)) != 0  # not the pool's: refused
    for block in (second, third):
        fake.fake_pinned(1, 0, ctypes.byref(block))


def test_the_decoder_of_the_pipeline_names_a_bad_frame_and_falls_back(fake) -> None:
    """JpegDecoder(library="nvjpeg-own"): on the CPU it falls back to cv2 and says why; its
    nvjpeg-own path (the fake here) names a frame that fails, alone or as a whole batch."""
    decoder = JpegDecoder("cpu", library="nvjpeg-own")
    assert decoder.kind == "cv2" and "not cuda" in (decoder.gpu_reason or "")
    decoder.kind, decoder._own = "nvjpeg-own", OwnNvjpeg("cpu", library=fake)
    assert [pixels(i)[0] for i in decoder([frame("B", 5), frame("P", 6)])] == [5, 6]
    with pytest.raises(DecodeError, match="frame 1 of the batch: nvJPEG: nvjpegGetImageInfo"):
        decoder([frame("B", 5), b"junk"])
    # a batch the engines fail as a whole: decoded one by one to name the frame; here each
    # decodes alone, so all come back
    fake.fake_clear()
    images = decoder([frame("F", 7), frame("F", 8)])
    assert [pixels(i)[0] for i in images] == [7, 8]
    assert log(fake) == ["init hw 2", "init hw 1", "batch hw 1", "batch hw 1"]
    with pytest.raises(DecodeFailed, match="nvjpegDecodeBatched of 2") as failed:
        decoder._own([frame("F", 7), frame("F", 8)])
    assert failed.value.index is None
    decoder._own([frame("B", 9), frame("B", 10)])  # the failed batch's state set up again
    decoder._own([frame("B", 9), frame("B", 10)])
    assert log(fake) == ["init hw 2", "init hw 2", "batch hw 2", "batch hw 2"]
    with pytest.raises(DecodeError, match="frame 1 of the batch: nvJPEG: nvjpegGetImageInfo"):
        decoder([frame("F", 7), frame("F", 8)[:4]])  # cut short: its header is named


def test_nvjpeg_is_looked_for_in_the_toolkit_then_in_a_wheel(tmp_path) -> None:
    toolkit, wheel_root = tmp_path / "cuda", tmp_path / "site"
    assert nvjpeg_own.nvjpeg_location(str(toolkit), [str(wheel_root)]) is None
    wheel = wheel_root / "nvidia" / "cu13"
    (wheel / "include").mkdir(parents=True)
    (wheel / "lib").mkdir()
    (wheel / "include" / "nvjpeg.h").write_text("")
    assert nvjpeg_own.nvjpeg_location(str(toolkit), [str(wheel_root)]) is None  # no library
    (wheel / "lib" / "libnvjpeg.so.13").write_text("")
    assert nvjpeg_own.nvjpeg_location(str(toolkit), [str(wheel_root)]) == (
        wheel / "include", wheel / "lib" / "libnvjpeg.so.13")
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "lib64").mkdir()
    (toolkit / "include" / "nvjpeg.h").write_text("")
    (toolkit / "lib64" / "libnvjpeg.so").write_text("")
    assert nvjpeg_own.nvjpeg_location(str(toolkit), [str(wheel_root)]) == (
        toolkit / "include", toolkit / "lib64" / "libnvjpeg.so")


def test_the_build_links_nvjpeg_by_its_file_name_and_is_kept(tmp_path) -> None:
    """build(): nvcc (a stand-in that logs its arguments) gets nvJPEG's folder and its
    versioned file by name, with an rpath to it; a second build reuses the library."""
    args = tmp_path / "args"
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f'#!/bin/sh\necho "$@" >> {args}\nwhile [ "$1" != "-o" ]; do shift; done\n'
                    'echo built > "$2"\n')
    nvcc.chmod(0o755)
    include, library = tmp_path / "inc", tmp_path / "lib" / "libnvjpeg.so.13"
    built = nvjpeg_own.build(tmp_path / "kernels", str(nvcc), include, library)
    assert built.read_text() == "built\n" and built.name.startswith("ttball_nvjpeg_own_")
    line = args.read_text().split()
    assert f"-I{include}" in line and "-l:libnvjpeg.so.13" in line
    assert f"-L{library.parent}" in line and f"-rpath={library.parent}" in line
    assert line.index(str(SOURCE)) < line.index("-l:libnvjpeg.so.13")  # libraries after it
    assert nvjpeg_own.build(tmp_path / "kernels", str(nvcc), include, library) == built
    assert len(args.read_text().splitlines()) == 1


def test_a_failed_build_is_one_reason_and_not_tried_again(monkeypatch, tmp_path) -> None:
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvjpeg.h: No such file' >&2\nexit 1\n")
    nvcc.chmod(0o755)
    header = tmp_path / "inc"
    header.mkdir()
    monkeypatch.setattr(nvjpeg_own, "_LIBRARY", None)
    monkeypatch.setattr(nvjpeg_own, "_FAILED", None)
    monkeypatch.setattr("ttball.kernels.direct.nvcc_path", lambda: str(nvcc))
    monkeypatch.setattr("ttball.kernels.direct.library_dir", lambda: tmp_path / "kernels")
    monkeypatch.setattr(nvjpeg_own, "nvjpeg_location",
                        lambda: (header, tmp_path / "libnvjpeg.so.13"))
    with pytest.raises(RuntimeError, match="nvcc exited with 1: nvjpeg.h: No such file"):
        nvjpeg_own.load_library()
    nvcc.unlink()  # not run again: the same reason
    with pytest.raises(RuntimeError, match="building nvjpeg-own failed"):
        nvjpeg_own.load_library()
    assert "nvjpeg.h: No such file" in (nvjpeg_own.own_reason(torch.device("cuda")) or "")
    assert nvjpeg_own.own_reason(torch.device("cpu")) == "device is cpu, not cuda"


def test_it_is_a_decoder_the_server_accepts() -> None:
    from ttball.kernels.prepost import DECODERS
    from ttball.serve.settings import JPEG_DECODERS

    assert "nvjpeg-own" in DECODERS and JPEG_DECODERS == DECODERS
    assert Path(SOURCE).is_file()
