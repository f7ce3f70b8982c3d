// Online frames → windows → ball rows: a port of ttball/stream.py (FrameStream) and
// ttball/tracker.py (OnlineTracker), so the page gives the rows `ttball track` gives.
//
// `push(frame)` resizes a decoded frame and hands out the windows it completes; someone runs them
// and gives each window's probabilities back, in window order, to `complete(window, probs)`,
// which returns the rows finished so far, in frame order. Step 3: non-overlapping windows;
// step 1: sliding windows, each frame gathering the candidates of up to three windows. A trailing
// partial window (step 3), or a stream shorter than three kept frames, is padded with the nearest
// kept frames. Exact duplicate frames are not windowed; they get their twin's row. (The Python
// stream's optional SSIM near-duplicate filter is not ported: the page only drops exact repeats.)

import { detect, FrameGeometry } from './postprocess.js';
import { resizeRGBA } from './resize.js';

export const DEFAULT_MAX_JUMP_PX = 300;

/** Keep candidates within `maxJumpPx` of the last ball (if there was one); best score wins. */
export class OnlineTracker {
  constructor(maxJumpPx = DEFAULT_MAX_JUMP_PX) {
    this.maxJumpPx = maxJumpPx;
    this.previous = null;
  }

  update(candidates) {
    const prev = this.previous;
    let best = null;
    for (const c of candidates) {
      if (prev && Math.hypot(c.x - prev.x, c.y - prev.y) > this.maxJumpPx) continue;
      if (best === null || c.score > best.score) best = c;
    }
    this.previous = best;
    return best;
  }
}

/** One row per frame, with the keys of ttball.results.FrameResult (and of the worker's rows). */
export function makeRow(index, timeS, ball) {
  if (!ball) {
    return { frame: index, time_s: timeS, visible: false, x: 0, y: 0, blur_angle_deg: 0, blur_length_px: 0, score: 0 };
  }
  return {
    frame: index, time_s: timeS, visible: true, x: ball.x, y: ball.y,
    blur_angle_deg: ball.angle, blur_length_px: ball.length, score: ball.score,
  };
}

function sameRGB(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i += 4) {
    if (a[i] !== b[i] || a[i + 1] !== b[i + 1] || a[i + 2] !== b[i + 2]) return false;
  }
  return true;
}

export class FrameStream {
  /**
   * @param {{inputWidth:number, inputHeight:number, scoreThreshold:number}} config
   * @param {{step?:number, threshold?:number|null, maxJumpPx?:number}} options
   */
  constructor(config, options = {}) {
    this.config = config;
    this.step = options.step ?? 3;
    if (this.step !== 1 && this.step !== 3) throw new Error(`step must be 1 or 3, got ${this.step}`);
    this.threshold = options.threshold || config.scoreThreshold;
    this.tracker = new OnlineTracker(options.maxJumpPx ?? DEFAULT_MAX_JUMP_PX);
    this.geometry = null;
    this.kept = [];
    this.last = null; // RGBA bytes of the last kept frame (the duplicate filter)
    this.nextEmit = 0;
    this.late = []; // rows of duplicates whose twin's row had left: out with the next emit
    this.lastBall = null;
    this.finished = false;
    this.framesIn = 0;
    this.duplicates = 0;
    this.windowsOut = 0;
  }

  /** Add a decoded frame {index, time, width, height, data (RGBA)}; returns 0 or 1 windows. */
  push(frame) {
    if (this.finished) throw new Error('stream already finished');
    const { width, height } = frame;
    const cfg = this.config;
    if (this.geometry === null) {
      this.geometry = new FrameGeometry(width, height, cfg.inputWidth, cfg.inputHeight);
    } else if (width !== this.geometry.sourceWidth || height !== this.geometry.sourceHeight) {
      throw new Error(`frame ${frame.index} is ${width}x${height}, the stream's frames are `
        + `${this.geometry.sourceWidth}x${this.geometry.sourceHeight}`);
    }
    this.framesIn += 1;
    if (this.kept.length && sameRGB(this.last, frame.data)) {
      this.duplicates += 1;
      if (this.nextEmit === this.kept.length) {  // its twin's row has left: it leaves alone
        this.late.push(makeRow(frame.index, frame.time, this.lastBall));
      } else {
        this.kept[this.kept.length - 1].twins.push([frame.index, frame.time]);
      }
      return [];
    }
    this.last = frame.data;
    this.kept.push({
      index: frame.index, time: frame.time,
      pixels: resizeRGBA(frame.data, width, height, cfg.inputWidth, cfg.inputHeight),
      twins: [], candidates: [], openWindows: 0, covered: false,
    });
    const n = this.kept.length;
    if (n >= 3 && (this.step === 1 || n % 3 === 0)) return [this.window([n - 3, n - 2, n - 1])];
    return [];
  }

  /** No more frames: the windows that cover the frames no full window reached. */
  finish() {
    this.finished = true;
    const n = this.kept.length;
    if (n === 0) return [];
    if (n < 3) {
      const slots = [...Array(3 - n).fill(0), ...Array.from({ length: n }, (_, i) => i)];
      return [this.window(slots)];
    }
    if (this.step === 3 && n % 3) return [this.window([n - 3, n - 2, n - 1])];
    return [];
  }

  window(slots) {
    const plane = this.config.inputWidth * this.config.inputHeight;
    const pixels = new Uint8Array(9 * plane);
    slots.forEach((s, i) => pixels.set(this.kept[s].pixels, i * 3 * plane));
    for (const s of new Set(slots)) this.kept[s].openWindows += 1;
    this.windowsOut += 1;
    return { slots, pixels, frames: slots.map((s) => this.kept[s].index) };
  }

  /** A window's probabilities (3·h·w float32, frame by frame) back; returns finished rows. */
  complete(window, probs) {
    const { inputWidth: w, inputHeight: h } = this.config;
    const plane = w * h;
    const seen = new Set();
    window.slots.forEach((slot, position) => {
      if (seen.has(slot)) return;
      seen.add(slot);
      const kept = this.kept[slot];
      kept.openWindows -= 1;
      if (this.step === 1 || !kept.covered) {
        const prob = probs.subarray(position * plane, (position + 1) * plane);
        kept.candidates.push(...detect(prob, w, h, this.geometry, this.threshold));
      }
      kept.covered = true;
    });
    return this.emit();
  }

  /** After `finish()` and every window completed: whatever is left, in order. */
  drain() {
    return this.emit();
  }

  // Step 3: a row leaves when its window has run, without waiting for the next frame (a later
  // duplicate then gets the same ball on its own); step 1: when no later window can hold it.
  isFinal(slot) {
    const kept = this.kept[slot];
    if (kept.openWindows > 0 || !kept.covered) return false;
    if (this.finished || this.step === 3) return true;
    return slot < this.kept.length - 2;
  }

  emit() {
    const out = this.late;  // (frame order: a late twin precedes any later frame)
    this.late = [];
    while (this.nextEmit < this.kept.length && this.isFinal(this.nextEmit)) {
      const kept = this.kept[this.nextEmit];
      const ball = this.tracker.update(kept.candidates);
      out.push(makeRow(kept.index, kept.time, ball));
      for (const [i, t] of kept.twins) out.push(makeRow(i, t, ball));
      kept.candidates = [];
      this.lastBall = ball;
      this.nextEmit += 1;
    }
    // A trailing window may still need the last three kept frames' pixels.
    const stop = Math.min(this.nextEmit, this.kept.length - 3);
    for (let s = Math.max(0, this.nextEmit - 6); s < stop; s++) this.kept[s].pixels = null;
    return out;
  }

  get pendingFrames() {
    return this.kept.length - this.nextEmit + this.late.length;
  }
}
