// The two ways the page gets ball rows for its frames, behind one interface:
//   engine.push(frame) → Promise<rows>   rows finished so far (frame order, with twins)
//   engine.finish()    → Promise<rows>   the rest
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

async function asJson(response, what) {
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
  return body;
}

export class ServerEngine {
  /** Open a session on the worker at `base` (e.g. http://127.0.0.1:8000). */
  static async open(base, { token, step, threshold, fps }) {
    const root = base.replace(/\/+$/, '');
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    const info = await asJson(await fetch(`${root}/v1`, { headers }), 'worker info (GET /v1)');
    const options = { step };
    if (threshold) options.threshold = threshold;
    if (fps) options.fps = fps;
    const session = await asJson(await fetch(`${root}/v1/sessions`, {
      method: 'POST', headers: { ...headers, 'Content-Type': 'application/json' }, body: JSON.stringify(options),
    }), 'opening a session (POST /v1/sessions)');
    return new ServerEngine(root, headers, session.id, info);
  }

  constructor(root, headers, id, info) {
    this.root = root;
    this.headers = headers;
    this.id = id;
    const parts = [`through the worker · ${root}`];
    if (info && info.backend) parts.push(`${info.backend} on ${info.device}`);
    if (info && info.weights) {
      const size = Array.isArray(info.input_size) ? ` ${info.input_size[1]}×${info.input_size[0]}` : '';
      parts.push(`${info.weights}${size}`);
    }
    parts.push(`session ${id}`);
    this.label = parts.join(' · ');
    this.networkMs = [];
  }

  async push(frame) {
    const { blob, type } = await frame.encode();
    const start = performance.now();
    const body = await asJson(await fetch(`${this.root}/v1/sessions/${this.id}/frames?frame=${frame.index}`, {
      method: 'POST', headers: { ...this.headers, 'Content-Type': type }, body: blob,
    }), `frame ${frame.index} (POST /v1/sessions/${this.id}/frames)`);
    this.networkMs.push(performance.now() - start);
    return body.results || [];
  }

  async finish() {
    const body = await asJson(await fetch(`${this.root}/v1/sessions/${this.id}/finish`, {
      method: 'POST', headers: this.headers,
    }), `finishing the session (POST /v1/sessions/${this.id}/finish)`);
    return body.results || [];
  }
}
