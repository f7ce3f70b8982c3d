// Frame → network input, bit for bit as ttball/frames.py does it with OpenCV.
//
// `resizeRGBA` ports cv::resize(..., INTER_LINEAR) for 8-bit images: 11-bit fixed-point
// coefficients, a horizontal pass into int sums, a vertical pass with OpenCV's rounding
// ((b0·(S0>>4))>>16 + (b1·(S1>>4))>>16 + 2) >> 2. Columns outside the image are clamped with their
// weight moved to the edge pixel; rows are clamped but keep their weights (OpenCV does both).
// An exact 2× downscale is INTER_AREA in OpenCV; with these coefficients it gives the same bytes.
// Checked equal to cv2.resize on random and smooth images, up- and downscaling
// (tests/browser/test_web.py::test_js_resize_matches_opencv).

const COEF_SCALE = 2048; // INTER_RESIZE_COEF_SCALE = 1 << 11
const f32 = Math.fround;

/** Round half to even, as cvRound (lrint) does. */
function roundHalfEven(x) {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** Source indices and fixed-point weights of each destination column (or row). */
export function taps(dst, src, clampWeights) {
  const scale = 1 / (dst / src); // OpenCV: scale_x = 1 / inv_scale_x
  const i0 = new Int32Array(dst);
  const i1 = new Int32Array(dst);
  const w0 = new Int32Array(dst);
  const w1 = new Int32Array(dst);
  for (let d = 0; d < dst; d++) {
    let f = f32((d + 0.5) * scale - 0.5);
    let s = Math.floor(f);
    f = f32(f - s);
    if (clampWeights && s < 0) { f = 0; s = 0; }
    if (clampWeights && s >= src - 1) { f = 0; s = src - 1; }
    w0[d] = roundHalfEven(f32(1 - f) * COEF_SCALE);
    w1[d] = roundHalfEven(f * COEF_SCALE);
    i0[d] = Math.min(Math.max(s, 0), src - 1);
    i1[d] = Math.min(Math.max(s + 1, 0), src - 1);
  }
  return { i0, i1, w0, w1 };
}

function horizontalRow(data, rowStart, cols, width, out) {
  for (let d = 0; d < width; d++) {
    const a = rowStart + cols.i0[d] * 4;
    const b = rowStart + cols.i1[d] * 4;
    const w0 = cols.w0[d];
    const w1 = cols.w1[d];
    const o = d * 3;
    out[o] = data[a] * w0 + data[b] * w1;
    out[o + 1] = data[a + 1] * w0 + data[b + 1] * w1;
    out[o + 2] = data[a + 2] * w0 + data[b + 2] * w1;
  }
}

/**
 * RGBA bytes (H, W, 4) → planar RGB `Uint8Array(3·h·w)` (C, h, w) at the network's size.
 * @param {Uint8ClampedArray|Uint8Array} data  ImageData.data of the source frame
 */
export function resizeRGBA(data, srcW, srcH, dstW, dstH) {
  const cols = taps(dstW, srcW, true);
  const rows = taps(dstH, srcH, false);
  const cache = new Map();
  const hrow = (r) => {
    let row = cache.get(r);
    if (!row) {
      row = new Int32Array(dstW * 3);
      horizontalRow(data, r * srcW * 4, cols, dstW, row);
      cache.set(r, row);
    }
    return row;
  };
  const plane = dstW * dstH;
  const out = new Uint8Array(3 * plane);
  for (let y = 0; y < dstH; y++) {
    const s0 = hrow(rows.i0[y]);
    const s1 = hrow(rows.i1[y]);
    const b0 = rows.w0[y];
    const b1 = rows.w1[y];
    for (let x = 0; x < dstW; x++) {
      for (let c = 0; c < 3; c++) {
        const k = x * 3 + c;
        out[c * plane + y * dstW + x] = (((b0 * (s0[k] >> 4)) >> 16) + ((b1 * (s1[k] >> 4)) >> 16) + 2) >> 2;
      }
    }
    if (cache.size > 4) cache.delete(cache.keys().next().value); // rows are visited in order
  }
  return out;
}

/**
 * Three resized frames (9, h, w) uint8 → the network input, float32, as ttball.frames.normalize:
 * ((v / 255) − mean[c]) / std[c], each step rounded to float32.
 */
export function normalizeWindow(pixels, mean, std, plane) {
  const out = new Float32Array(pixels.length);
  const m = mean.map(f32);
  const s = std.map(f32);
  for (let ch = 0; ch < pixels.length / plane; ch++) {
    const mc = m[ch % 3];
    const sc = s[ch % 3];
    const base = ch * plane;
    for (let i = 0; i < plane; i++) {
      out[base + i] = f32(f32(f32(pixels[base + i] / 255) - mc) / sc);
    }
  }
  return out;
}
