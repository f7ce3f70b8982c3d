// Runs the page's ported pre- and post-processing under Node on a job from stdin (JSON) and
// writes what it computed to stdout (JSON), so tests/browser/test_web.py can hold it against
// ttball's Python (cv2.resize, normalize, detect, FrameStream). Arrays travel as base64.
//
// job: {resize: [{data, W, H, w, h}], normalize: [{pixels, w, h, mean, std}],
//       sigmoid: [{logits}], detect: [{prob, w, h, sw, sh, threshold}],
//       stream: [{frames: [{data, W, H, index, time}], config, step, maxJumpPx}]}

import { normalizeWindow, resizeRGBA } from '../src/resize.js';
import { detect, FrameGeometry, sigmoid } from '../src/postprocess.js';
import { FrameStream } from '../src/stream.js';

const bytes = (b64) => new Uint8Array(Buffer.from(b64, 'base64'));
const floats = (b64) => {
  const b = Buffer.from(b64, 'base64');
  return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
};
const b64 = (typed) => Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength).toString('base64');

/** The fake network of the stream check: frame k's probability map = its red plane / 255. */
function fakeProbs(window, plane) {
  const probs = new Float32Array(3 * plane);
  for (let k = 0; k < 3; k++) {
    for (let i = 0; i < plane; i++) probs[k * plane + i] = Math.fround(window.pixels[3 * k * plane + i] / 255);
  }
  return probs;
}

function runStream(job) {
  const stream = new FrameStream(job.config, { step: job.step, maxJumpPx: job.maxJumpPx });
  const plane = job.config.inputWidth * job.config.inputHeight;
  const rows = [];
  const complete = (windows) => {
    for (const w of windows) rows.push(...stream.complete(w, fakeProbs(w, plane)));
  };
  for (const f of job.frames) {
    complete(stream.push({ index: f.index, time: f.time, width: f.W, height: f.H, data: bytes(f.data) }));
  }
  complete(stream.finish());
  rows.push(...stream.drain());
  return rows;
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const job = JSON.parse(Buffer.concat(chunks).toString('utf8'));
const out = {
  resize: (job.resize || []).map((j) => b64(resizeRGBA(bytes(j.data), j.W, j.H, j.w, j.h))),
  normalize: (job.normalize || []).map((j) => b64(normalizeWindow(bytes(j.pixels), j.mean, j.std, j.w * j.h))),
  sigmoid: (job.sigmoid || []).map((j) => b64(sigmoid(floats(j.logits)))),
  detect: (job.detect || []).map((j) => detect(floats(j.prob), j.w, j.h, new FrameGeometry(j.sw, j.sh, j.w, j.h), j.threshold)),
  stream: (job.stream || []).map(runStream),
};
process.stdout.write(JSON.stringify(out));
