// The page: pick a mode and a source, run frames through an engine, show what comes back.
// For tests and tools the page exposes, per run:
//   window.ttballResults  [{frame, time_s, visible, x, y, angle, length, score}] in frame order
//   window.ttballDone     true once the run has finished (or failed: window.ttballError)
//   window.ttballStatus   {mode, framesPerS, frames, visible}
// and, when a test defines `window.ttballDebug = {windows: []}` before the page loads, each
// in-browser window's frames, network input and logits. A test may shorten the stall and
// request limits with `window.ttballTimeouts = {stallMs, requestMs}`, read as each run starts.

import { BrowserEngine, Network, REQUEST_TIMEOUT_MS, ServerEngine } from './engines.js';
import { HeightChart, Overlay } from './draw.js';
import { openMp4 } from './mp4frames.js';
import { modelConfig } from './onnxmeta.js';
import { STALL_MS, imageFiles, imageFrames, videoFrames } from './sources.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const FPS_WINDOW_MS = 2000;
// Frames are shown at the source's pace, but none longer than this: an image set at 0.001 fps
// (the least a worker session takes) would otherwise hold the run's end for 1000 s a frame.
const MAX_SHOW_MS = 1000;

const state = {
  model: null, // {bytes: ArrayBuffer, name, config}
  network: null, // {key, net}
  run: null, // {stop, abort}
};

const overlay = new Overlay($('frame'), $('overlay'));
const chart = new HeightChart($('chart'));
chart.reset();

function log(text, isError = false) {
  const line = document.createElement('div');
  line.textContent = text;
  if (isError) line.className = 'error';
  $('log').prepend(line);
}

function mode() {
  return document.querySelector('input[name=mode]:checked').value;
}

function showMode() {
  for (const el of document.querySelectorAll('[data-mode]')) el.hidden = el.dataset.mode !== mode();
  if (!state.run) $('mode').textContent = mode() === 'browser' ? 'in the browser (onnxruntime-web)' : 'through the worker';
}

// -- the model (in-browser mode) ----------------------------------------------------------------
function setModel(bytes, name) {
  const config = modelConfig(bytes);
  state.model = { bytes, name, config };
  if (state.network) state.network.net.close();
  state.network = null;
  const notes = config.notes.length ? ` (${config.notes.join('; ')})` : '';
  $('model-status').textContent = `${name}: ${config.name}, input ${config.inputWidth}×${config.inputHeight}, `
    + `threshold ${config.scoreThreshold}, ${(bytes.byteLength / 1e6).toFixed(1)} MB${notes}`;
}

async function loadDefaultModel() {
  const url = params.get('model') || 'model.onnx';
  try {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    setModel(await response.arrayBuffer(), url);
  } catch (err) {
    $('model-status').textContent = `no ${url} beside the page (${err.message}): choose an .onnx file`;
  }
}

async function network() {
  if (!state.model) throw new Error('no model: choose an exported .onnx file (ttball export onnx --out model.onnx)');
  const ep = $('ep').value;
  const key = `${state.model.name}|${ep}`;
  if (!state.network || state.network.key !== key) {
    if (state.network) state.network.net.close();
    state.network = null;
    $('mode').textContent = 'loading the model…';
    const net = await Network.load(state.model.bytes.slice(0), ep);
    if (net.note) log(net.note);
    state.network = { key, net };
  }
  return state.network.net;
}

// -- settings -----------------------------------------------------------------------------------
// The limits of ttball's own checks: `ttball track --threshold` and the stream take (0, 1); a
// worker session's fps is in [MIN_FPS, MAX_FPS) (ttball/serve/sessions.py).
const MIN_FPS = 0.001;
const MAX_FPS = 10000;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/** The number typed in field `id`, or null when it is empty and `optional`; a value that is no
 *  number or outside `allowed(x)` throws, naming the field and `range`. */
function numberField(id, label, range, allowed, optional = false) {
  const text = $(id).value.trim();
  if (!text && optional) return null;
  const value = DECIMAL.test(text) ? Number(text) : NaN;
  if (!Number.isFinite(value) || !allowed(value)) {
    const got = text.length > 24 ? `${text.slice(0, 24)}…` : text;
    throw new Error(`${label} must be a number in ${range}, got ${text ? `"${got}"` : 'nothing'}`);
  }
  return value;
}

/** The threshold field: null (empty) for the model's own, else a number in (0, 1). */
function thresholdField() {
  const range = "(0, 1) (or empty for the model's own)";
  return numberField('threshold', 'threshold', range, (x) => x > 0 && x < 1, true);
}

/** The image-fps field: an image set's frame rate, in [MIN_FPS, MAX_FPS). */
function imageFpsField() {
  return numberField('image-fps', 'image fps', `[${MIN_FPS}, ${MAX_FPS})`, (x) => x >= MIN_FPS && x < MAX_FPS);
}

/** The stall and request limits of a run (ms): the defaults, or `window.ttballTimeouts`. */
function timeouts() {
  const given = window.ttballTimeouts || {};
  const limit = (key, fallback) => {
    const value = given[key] ?? fallback;
    if (Number.isFinite(value) && value > 0) return value;
    throw new Error(`window.ttballTimeouts.${key} must be a positive number of ms, got ${value}`);
  };
  return { stallMs: limit('stallMs', STALL_MS), requestMs: limit('requestMs', REQUEST_TIMEOUT_MS) };
}

// -- one run ------------------------------------------------------------------------------------
async function openEngine(options, fps, signal) {
  const { step, threshold, requestMs } = options;
  if (mode() === 'browser') return new BrowserEngine(await network(), { step, threshold });
  return ServerEngine.open($('worker-url').value, {
    step, threshold, token: $('token').value.trim(), fps, signal, timeoutMs: requestMs,
  });
}

class Meter {
  constructor() {
    this.times = [];
  }

  tick(n) {
    const now = performance.now();
    for (let i = 0; i < n; i++) this.times.push(now);
    while (this.times.length > 2 && now - this.times[0] > FPS_WINDOW_MS) this.times.shift();
  }

  get rate() {
    const t = this.times;
    return t.length > 1 && t[t.length - 1] > t[0] ? ((t.length - 1) * 1000) / (t[t.length - 1] - t[0]) : 0;
  }
}

/** Shows finished frames at the source's pace (MAX_SHOW_MS at most), catching up when it falls
 *  behind. */
class Presenter {
  constructor(fps) {
    this.interval = Math.min(1000 / fps, MAX_SHOW_MS);
    this.queue = [];
    this.last = 0;
    this.idle = null;
    this.tick = this.tick.bind(this);
    requestAnimationFrame(this.tick);
  }

  push(image, row) {
    this.queue.push({ image, row });
  }

  tick(now) {
    if (this.queue.length && (now - this.last >= this.interval || this.queue.length > 6)) {
      const { image, row } = this.queue.shift();
      if (image) {
        overlay.show(image, row);
        chart.add(row, image.height);
      }
      this.last = now;
    }
    if (!this.queue.length && this.idle) this.idle();
    if (!this.stopped) requestAnimationFrame(this.tick);
  }

  drain() {
    return this.queue.length ? new Promise((resolve) => { this.idle = resolve; }) : Promise.resolve();
  }

  stop() {
    this.stopped = true;
  }
}

function median(values) {
  if (!values.length) return 0;
  const s = [...values].sort((a, b) => a - b);
  return s[s.length >> 1];
}

/**
 * One run of `source(options)` → `{frames(stop), fps, close?}` (`options`: the checked settings
 * and limits); a newer run replaces it. A bad setting ends it before the source or the engine
 * opens; every end, error or not, goes through here (window.ttballDone, ttballError, the log).
 */
async function run(source) {
  if (state.run) state.run.abort();
  const controller = new AbortController(); // the run's requests: stop aborts them
  const stop = { stopped: false };
  const current = {
    stop,
    abort() {
      stop.stopped = true;
      controller.abort();
    },
  };
  state.run = current;
  const owner = () => state.run === current; // a newer run takes the page over
  const results = [];
  window.ttballResults = results;
  window.ttballDone = false;
  window.ttballError = null;
  overlay.reset();
  chart.reset();
  $('stop').disabled = false;
  let presenter = null;
  let opened = null;
  const meter = new Meter();
  const held = new Map();
  let visible = 0;
  let engine = null;
  const status = () => {
    const ms = engine ? median(engine.networkMs.slice(-20)) : 0;
    window.ttballStatus = { mode: engine ? engine.label : '', framesPerS: meter.rate, frames: results.length, visible };
    $('fps').textContent = `${meter.rate.toFixed(1)} frames/s`;
    $('frames').textContent = `${results.length} frames, ball in ${visible}`;
    $('latency').textContent = ms ? `${ms.toFixed(0)} ms per ${engine instanceof BrowserEngine ? 'window' : 'request'}` : '';
  };
  const deliver = (rows) => {
    if (!owner()) return;
    for (const row of rows) {
      results.push({
        frame: row.frame, time_s: row.time_s, visible: row.visible, x: row.x, y: row.y,
        angle: row.blur_angle_deg, length: row.blur_length_px, score: row.score,
      });
      if (row.visible) visible += 1;
      presenter.push(held.get(row.frame), row);
      held.delete(row.frame);
    }
    meter.tick(rows.length);
    status();
  };
  try {
    const options = { step: Number($('step').value), threshold: thresholdField(), ...timeouts() };
    opened = await source(options);
    presenter = new Presenter(opened.fps);
    engine = await openEngine(options, opened.fps, controller.signal);
    $('mode').textContent = engine.label;
    for await (const frame of opened.frames(stop)) {
      if (stop.stopped) break;
      held.set(frame.index, frame.image);
      deliver(await engine.push(frame));
    }
    deliver(await engine.finish());
    if (owner()) await presenter.drain();
    log(`${stop.stopped ? 'stopped' : 'done'}: ${results.length} frames, ball in ${visible}, ${engine.label}`);
  } catch (err) {
    if (stop.stopped && err && err.name === 'AbortError') {
      log(`stopped: ${results.length} frames, ball in ${visible}${engine ? `, ${engine.label}` : ''}`);
    } else {
      if (owner()) window.ttballError = String(err && err.message ? err.message : err);
      log(String(err && err.message ? err.message : err), true);
    }
  } finally {
    if (presenter) presenter.stop();
    if (opened && opened.close) opened.close();
    if (engine && engine.close) engine.close(); // a worker session left open by an error or a stop
    if (owner()) {
      state.run = null;
      $('stop').disabled = true;
      status();
      window.ttballDone = true;
    }
  }
}

// -- sources ------------------------------------------------------------------------------------
/** A new <video> in place of the page's one: each run plays its own element, so an older run
 *  winding down (it pauses its video) never touches the newer run's. */
function freshVideo() {
  const old = $('video');
  const video = old.cloneNode(false);
  old.pause();
  if (old.src.startsWith('blob:')) URL.revokeObjectURL(old.src);
  old.replaceWith(video);
  video.muted = true;
  return video;
}

/** "a, b, c" of at most `limit` names, "and N more" past that. */
function someNames(names, limit = 5) {
  const more = names.length > limit ? `, and ${names.length - limit} more` : '';
  return names.slice(0, limit).join(', ') + more;
}

/** Frames of an image set; the skipped images told at the end, and a set with no readable
 *  image an error (as `ttball track FOLDER`: "none of its N images can be read"). */
async function* imageSet(images, fps) {
  const skipped = [];
  let frames = 0;
  for await (const frame of imageFrames(images, fps, skipped)) {
    frames += 1;
    yield frame;
  }
  const told = someNames(skipped.map(({ name, why }) => `${name} (${why})`));
  if (!frames) {
    throw new Error(`no readable image in the set: all ${skipped.length} unreadable: ${told}`);
  }
  if (skipped.length) log(`skipped ${skipped.length} of ${images.length} images: ${told}`);
}

function startFiles(files) {
  const images = imageFiles(files);
  if (images.length) {
    run(() => {
      const fps = imageFpsField();
      return { fps, frames: () => imageSet(images, fps) };
    });
    return;
  }
  const file = files[0];
  run(async ({ stallMs }) => {
    // An MP4/MOV this browser's WebCodecs decode: every frame, at the track's frame rate.
    const mp4 = await openMp4(file);
    if (!mp4.fallback) {
      const codec = mp4.note ? `${mp4.codec}, ${mp4.note}` : mp4.codec;
      log(`${file.name}: every frame read with WebCodecs (${codec}, ${mp4.width}×${mp4.height}, `
        + `${mp4.count} frames, ${mp4.fps.toFixed(3)} fps)`);
      return { fps: mp4.fps, frames: (stop) => mp4.frames({ stop, stallMs }) };
    }
    log(`${file.name}: played in a <video> (${mp4.fallback}): a frame the browser cannot show in time is skipped`);
    const video = freshVideo();
    video.src = URL.createObjectURL(file);
    return { fps: 30, frames: (stop) => videoFrames(video, { live: false, stop, name: file.name, stallMs }) };
  });
}

function startCamera() {
  run(async ({ stallMs }) => {
    // Browsers offer cameras only to secure pages: https://, or http:// on localhost. A phone
    // opening the worker at http://LAN-IP:8000 has no navigator.mediaDevices at all.
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new Error(`camera: this browser offers a camera only to https:// or localhost pages, not ${location.origin}; serve the page over HTTPS (or open a video file)`);
    }
    let media;
    try {
      // A phone's back camera (the one that films a table); a laptop's only camera otherwise.
      media = await navigator.mediaDevices.getUserMedia({
        video: { width: 1280, height: 720, facingMode: { ideal: 'environment' } }, audio: false,
      });
    } catch (err) {
      throw new Error(`camera: ${err.message || err}`);
    }
    const video = freshVideo();
    video.srcObject = media;
    return {
      fps: media.getVideoTracks()[0].getSettings().frameRate || 30,
      frames: (stop) => videoFrames(video, { live: true, stop, name: 'the camera', stallMs }),
      close: () => { for (const track of media.getTracks()) track.stop(); },
    };
  });
}

// -- wiring -------------------------------------------------------------------------------------
for (const radio of document.querySelectorAll('input[name=mode]')) radio.addEventListener('change', showMode);
if (params.get('mode') === 'worker') $('mode-worker').checked = true;
if (params.get('ep')) $('ep').value = params.get('ep');
$('worker-url').value = params.get('worker') || (location.protocol.startsWith('http') ? location.origin : 'http://127.0.0.1:8000');
$('model-file').addEventListener('change', async (e) => {
  const file = e.target.files[0];
  if (file) {
    try {
      setModel(await file.arrayBuffer(), file.name);
    } catch (err) {
      log(`${file.name}: ${err.message}`, true);
    }
  }
});
$('source').addEventListener('change', (e) => {
  if (e.target.files.length) startFiles(e.target.files);
});
$('camera').addEventListener('click', startCamera);
$('stop').addEventListener('click', () => {
  if (state.run) state.run.abort();
});
showMode();
window.ttballReady = loadDefaultModel();
