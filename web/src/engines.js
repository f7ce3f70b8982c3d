// The two ways the page gets ball rows for its frames, behind one interface:
//   engine.push(frame) → Promise<rows>   rows finished so far (frame order, with twins)
//   engine.finish()    → Promise<rows>   the rest
//   engine.close?()                      (ServerEngine) drop a session an error or a stop left open
//   engine.label                         what runs, for the status line
// BrowserEngine runs the exported ONNX model with onnxruntime-web (in a Web Worker) and the
// ported pre- and post-processing; ServerEngine sends each frame to `ttball serve`'s session API.

import { modelConfig } from './onnxmeta.js';
import { normalizeWindow } from './resize.js';
import { sigmoid } from './postprocess.js';
import { FrameStream } from './stream.js';

/** One loaded model in one Web Worker; reused across runs. */
export class Network {
  static async load(bytes, ep) {
    const config = modelConfig(bytes);
    const worker = new Worker(new URL('./infer-worker.js', import.meta.url), { type: 'module' });
    const net = new Network(worker, config);
    const ready = await net.call({ type: 'load', model: bytes, ep, inputName: config.inputName }, [bytes]);
    net.ep = ready.ep;
    net.threads = ready.threads;
    net.note = ready.note;
    return net;
  }

  constructor(worker, config) {
    this.worker = worker;
    this.config = config;
    this.nextId = 0;
    this.waiting = new Map();
    worker.onmessage = (e) => this.answer(e.data);
    worker.onerror = (e) => this.failAll(new Error(e.message || 'inference worker failed'));
  }

  call(msg, transfer = []) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ ...msg, id }, transfer);
    });
  }

  answer(msg) {
    const id = msg.id ?? [...this.waiting.keys()][0];
    const w = this.waiting.get(id);
    if (!w) return;
    this.waiting.delete(id);
    if (msg.type === 'error') w.reject(new Error(msg.message));
    else w.resolve(msg);
  }

  failAll(err) {
    for (const w of this.waiting.values()) w.reject(err);
    this.waiting.clear();
  }

  /** Logits (3·h·w float32) of one normalised window (9·h·w float32). */
  async run(input) {
    const { inputHeight: h, inputWidth: w } = this.config;
    const reply = await this.call({ type: 'run', input: input.buffer, dims: [1, 9, h, w] }, [input.buffer]);
    const dims = reply.dims || [];
    if (dims.length !== 4 || dims[0] !== 1 || dims[1] !== 3 || dims[2] !== h || dims[3] !== w) {
      throw new Error(`model output has shape [${dims.join(', ')}]; expected [1, 3, ${h}, ${w}]: `
        + 'not a ttball export (ttball export onnx)?');
    }
    return { logits: new Float32Array(reply.logits), ms: reply.ms };
  }

  close() {
    this.worker.terminate();
  }
}

export class BrowserEngine {
  constructor(network, options) {
    this.network = network;
    this.stream = new FrameStream(network.config, options);
    const cfg = network.config;
    const ep = network.ep === 'webgpu' ? 'WebGPU' : `WASM, ${network.threads} thread${network.threads === 1 ? '' : 's'}`;
    this.label = `in the browser · onnxruntime-web ${ep} · ${cfg.name} ${cfg.inputWidth}×${cfg.inputHeight}`;
    this.networkMs = [];
  }

  async push(frame) {
    const rows = await this.runAll(this.stream.push(frame));
    return rows.concat(this.stream.drain()); // a duplicate of a frame whose row has left
  }

  async finish() {
    const rows = await this.runAll(this.stream.finish());
    return rows.concat(this.stream.drain());
  }

  async runAll(windows) {
    const rows = [];
    for (const window of windows) rows.push(...(await this.run(window)));
    return rows;
  }

  async run(window) {
    const cfg = this.network.config;
    const plane = cfg.inputWidth * cfg.inputHeight;
    const input = normalizeWindow(window.pixels, cfg.mean, cfg.std, plane);
    const debug = globalThis.ttballDebug;
    const inputCopy = debug ? input.slice() : null;
    const { logits, ms } = await this.network.run(input);
    this.networkMs.push(ms);
    if (debug) debug.windows.push({ frames: window.frames, input: inputCopy, logits });
    return this.stream.complete(window, sigmoid(logits));
  }
}

// Each worker request gets this long before the page gives up on it; a run may set another
// (ServerEngine.open's `timeoutMs`; the page's `window.ttballTimeouts`, for tests).
export const REQUEST_TIMEOUT_MS = 30000;
// A 429 (queue full) or 503 (not ready) is retried this many times, after its Retry-After
// (seconds; at most MAX_RETRY_WAIT_S).
const RETRIES = 3;
const MAX_RETRY_WAIT_S = 10;

function stoppedError() {
  const err = new Error('stopped');
  err.name = 'AbortError';
  return err;
}

async function asJson(response, what, root) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status line says enough
  }
  if (!response.ok) {
    const detail = body && body.error ? `${body.error.code}: ${body.error.message}` : response.statusText;
    throw new Error(`${what}: HTTP ${response.status} ${detail}`);
  }
  if (!body || typeof body !== 'object' || Array.isArray(body)) {
    const type = response.headers.get('Content-Type') || 'no type';
    throw new Error(`${what}: the answer is not a JSON object (${type}): is ${root} a ttball worker (ttball serve)?`);
  }
  return body;
}

export class ServerEngine {
  /** Open a session on the worker at `base` (e.g. http://127.0.0.1:8000); `signal` (the run's)
   *  aborts every request, and each gives up after `timeoutMs`. */
  static async open(base, { token, step, threshold, fps, signal, timeoutMs = REQUEST_TIMEOUT_MS }) {
    const root = base.replace(/\/+$/, '');
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    const engine = new ServerEngine(root, headers, signal, timeoutMs);
    const info = await engine.request('/v1', {}, 'worker info (GET /v1)');
    const options = { step };
    if (threshold) options.threshold = threshold;
    if (fps) options.fps = fps;
    const session = await engine.request('/v1/sessions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(options),
    }, 'opening a session (POST /v1/sessions)');
    if (typeof session.id !== 'string' && typeof session.id !== 'number') {
      throw new Error(`opening a session (POST /v1/sessions): no session id in the answer: is ${root} a ttball worker (ttball serve)?`);
    }
    engine.opened(session.id, info);
    return engine;
  }

  constructor(root, headers, signal, timeoutMs = REQUEST_TIMEOUT_MS) {
    this.root = root;
    this.headers = headers;
    this.signal = signal || new AbortController().signal;
    this.timeoutMs = timeoutMs;
    this.id = null;
    this.open = false; // a session on the worker that this page must finish or delete
    this.label = `through the worker · ${root}`;
    this.networkMs = [];
  }

  opened(id, info) {
    this.id = id;
    this.open = true;
    const parts = [`through the worker · ${this.root}`];
    if (info && info.backend) parts.push(`${info.backend} on ${info.device}`);
    if (info && info.weights) {
      const size = Array.isArray(info.input_size) ? ` ${info.input_size[1]}×${info.input_size[0]}` : '';
      parts.push(`${info.weights}${size}`);
    }
    parts.push(`session ${id}`);
    this.label = parts.join(' · ');
  }

  /** fetch `path` under the worker's root, as JSON; times out, stops with the run, and retries
   *  a 429/503 after its Retry-After. */
  async request(path, init, what) {
    for (let attempt = 0; ; attempt++) {
      if (this.signal.aborted) throw stoppedError();
      let response;
      try {
        response = await fetch(`${this.root}${path}`, {
          ...init, headers: { ...this.headers, ...(init.headers || {}) },
          signal: AbortSignal.any([this.signal, AbortSignal.timeout(this.timeoutMs)]),
        });
      } catch (err) {
        if (this.signal.aborted) throw stoppedError();
        if (err.name === 'TimeoutError') {
          throw new Error(`${what}: the worker at ${this.root} did not answer within ${this.timeoutMs / 1000} s`);
        }
        throw new Error(`${what}: cannot reach the worker at ${this.root} (${err.message}): `
          + "is `ttball serve` running there, and does it allow this page's origin?");
      }
      if ((response.status === 429 || response.status === 503) && attempt < RETRIES) {
        const after = Number(response.headers.get('Retry-After'));
        const waitS = Math.min(Number.isFinite(after) && after > 0 ? after : 1, MAX_RETRY_WAIT_S);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, waitS * 1000);
          this.signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
        });
        continue;
      }
      return asJson(response, what, this.root);
    }
  }

  async push(frame) {
    const { blob, type } = await frame.encode();
    const start = performance.now();
    const body = await this.request(`/v1/sessions/${this.id}/frames?frame=${frame.index}`, {
      method: 'POST', headers: { 'Content-Type': type }, body: blob,
    }, `frame ${frame.index} (POST /v1/sessions/${this.id}/frames)`);
    this.networkMs.push(performance.now() - start);
    return body.results || [];
  }

  async finish() {
    if (this.signal.aborted) return []; // stopped: close() drops the session
    const body = await this.request(`/v1/sessions/${this.id}/finish`, { method: 'POST' },
      `finishing the session (POST /v1/sessions/${this.id}/finish)`);
    this.open = false; // finish closes it
    return body.results || [];
  }

  /** Drop the session if it is still open (after an error or a stop); best effort. */
  close() {
    if (!this.open) return;
    this.open = false;
    fetch(`${this.root}/v1/sessions/${this.id}`, {
      method: 'DELETE', headers: this.headers, keepalive: true, signal: AbortSignal.timeout(this.timeoutMs),
    }).catch(() => {});
  }
}
