// Heatmap → ball candidates; a port of ttball/postprocess.py (shared/spec/blurball.md,
// "Post-processing"). Per heatmap: sigmoid; nothing if no value is above the threshold; else a
// binary mask, 8-connected components, and per component: score (sum of probabilities), the
// probability-weighted centroid, the blur angle ½·atan2(2·μ11, μ20 − μ02) of the pixels' central
// moments and the blur length (half the extent along the principal axis), mapped back to the
// source frame. Components are ordered as cv2.connectedComponentsWithStats labels them (by the
// first 2×2 block they touch, in raster order), then stably by score, so ties break the same way.

const f32 = Math.fround;

/** How a heatmap maps onto the source frame (ttball.postprocess.FrameGeometry). */
export class FrameGeometry {
  constructor(sourceWidth, sourceHeight, heatmapWidth, heatmapHeight) {
    this.sourceWidth = sourceWidth;
    this.sourceHeight = sourceHeight;
    this.heatmapWidth = heatmapWidth;
    this.heatmapHeight = heatmapHeight;
    this.sx = sourceWidth / heatmapWidth;
    this.sy = sourceHeight / heatmapHeight;
  }

  /** Heatmap pixel centre (u, v) → source pixel coordinates (half-pixel-centre resize). */
  toSource(u, v) {
    return [(u + 0.5) * this.sx - 0.5, (v + 0.5) * this.sy - 0.5];
  }
}

/** Logits → probabilities, in float32 steps like 1 / (1 + exp(−x)) on float32 arrays. */
export function sigmoid(logits, offset = 0, length = logits.length - offset) {
  const out = new Float32Array(length);
  for (let i = 0; i < length; i++) {
    out[i] = f32(1 / f32(1 + f32(Math.exp(-logits[offset + i]))));
  }
  return out;
}

function foldAngle(deg) {
  let d = deg % 180; // fmod: the sign of the dividend
  if (d <= -90) d += 180;
  else if (d > 90) d -= 180;
  return d;
}

function mean(values) {
  let s = 0;
  for (const v of values) s += v;
  return s / values.length;
}

/** Blur angle (degrees, source frame) and length (source px) of one component's pixels. */
function blobGeometry(us, vs, geom) {
  const n = us.length;
  if (n < 2) return [0, 0];
  const mu = mean(us);
  const mv = mean(vs);
  let s20 = 0, s02 = 0, s11 = 0;
  for (let i = 0; i < n; i++) {
    const du = us[i] - mu, dv = vs[i] - mv;
    s20 += du * du; s02 += dv * dv; s11 += du * dv;
  }
  const theta = 0.5 * Math.atan2(2 * (s11 / n), s20 / n - s02 / n);
  const c = Math.cos(theta), s = Math.sin(theta);
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < n; i++) {
    const p = (us[i] - mu) * c + (vs[i] - mv) * s;
    if (p < lo) lo = p;
    if (p > hi) hi = p;
  }
  const halfExtent = 0.5 * (hi - lo);
  const ax = c * geom.sx, ay = s * geom.sy;
  return [foldAngle((Math.atan2(ay, ax) * 180) / Math.PI), halfExtent * Math.hypot(ax, ay)];
}

/**
 * 8-connected components of `prob > threshold`: arrays of pixel indices, each in raster order,
 * the components in OpenCV's label order.
 */
export function components(prob, width, height, threshold) {
  const labels = new Int32Array(width * height).fill(-1);
  const found = [];
  const stack = [];
  for (let start = 0; start < prob.length; start++) {
    if (labels[start] !== -1 || !(prob[start] > threshold)) continue;
    const id = found.length;
    const pixels = [];
    labels[start] = id;
    stack.push(start);
    while (stack.length) {
      const p = stack.pop();
      pixels.push(p);
      const y = (p / width) | 0, x = p - y * width;
      for (let dy = -1; dy <= 1; dy++) {
        const yy = y + dy;
        if (yy < 0 || yy >= height) continue;
        for (let dx = -1; dx <= 1; dx++) {
          const xx = x + dx;
          if (xx < 0 || xx >= width) continue;
          const q = yy * width + xx;
          if (labels[q] === -1 && prob[q] > threshold) {
            labels[q] = id;
            stack.push(q);
          }
        }
      }
    }
    pixels.sort((a, b) => a - b);
    found.push(pixels);
  }
  const blocksPerRow = (width + 1) >> 1;
  const firstBlock = (pixels) => {
    let k = Infinity;
    for (const p of pixels) {
      const y = (p / width) | 0, x = p - y * width;
      k = Math.min(k, (y >> 1) * blocksPerRow + (x >> 1));
    }
    return k;
  };
  const keyed = found.map((pixels) => [firstBlock(pixels), pixels]);
  keyed.sort((a, b) => a[0] - b[0]);
  return keyed.map((k) => k[1]);
}

/**
 * Candidates in one probability map `prob (h·w)` float32, best score first:
 * [{x, y, score, angle, length}] in source pixels and degrees (y down, angle in (−90, 90]).
 */
export function detect(prob, width, height, geom, threshold) {
  let max = -Infinity;
  for (let i = 0; i < prob.length; i++) if (prob[i] > max) max = prob[i];
  if (prob.length === 0 || max <= threshold) return [];
  const out = [];
  for (const pixels of components(prob, width, height, threshold)) {
    const us = new Float64Array(pixels.length);
    const vs = new Float64Array(pixels.length);
    let total = 0, su = 0, sv = 0;
    pixels.forEach((p, i) => {
      const v = (p / width) | 0, u = p - v * width, w = prob[p];
      us[i] = u; vs[i] = v;
      total += w; su += u * w; sv += v * w;
    });
    const [x, y] = geom.toSource(su / total, sv / total);
    const [angle, length] = blobGeometry(us, vs, geom);
    out.push({ x, y, score: total, angle, length });
  }
  out.sort((a, b) => b.score - a.score); // stable, as Python's sort
  return out;
}
