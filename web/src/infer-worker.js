// The network, off the page's main thread: onnxruntime-web in a dedicated Web Worker.
// Messages in:  {type: 'load', model: ArrayBuffer, ep: 'auto'|'webgpu'|'wasm', inputName}
//               {type: 'run', id, input: ArrayBuffer (float32, 1·9·h·w), dims}
// Messages out: {type: 'ready', ep, threads, note} | {type: 'result', id, logits, ms}
//               | {type: 'error', id?, message}

import * as ort from 'onnxruntime-web';

let session = null;
let inputName = 'frames';

// The .wasm file lies beside this script (web/build.mjs copies it there). Only its URL is given:
// a path prefix would make onnxruntime fetch its JS glue too, which this bundle already holds.
ort.env.wasm.wasmPaths = { wasm: new URL('./ort-wasm-simd-threaded.jsep.wasm', self.location.href).href };
// Threads need a cross-origin-isolated page (COOP/COEP headers); otherwise one thread.
ort.env.wasm.numThreads = self.crossOriginIsolated ? Math.min(navigator.hardwareConcurrency || 1, 8) : 1;

async function hasWebGPU() {
  if (!('gpu' in navigator) || !navigator.gpu) return false;
  try {
    return !!(await navigator.gpu.requestAdapter());
  } catch {
    return false;
  }
}

async function create(model, ep) {
  return ort.InferenceSession.create(new Uint8Array(model), {
    executionProviders: [ep],
    graphOptimizationLevel: 'all',
  });
}

async function load(msg) {
  inputName = msg.inputName || 'frames';
  let note = '';
  const wantGpu = msg.ep === 'webgpu' || (msg.ep === 'auto' && (await hasWebGPU()));
  if (msg.ep === 'webgpu' && !(await hasWebGPU())) note = 'WebGPU asked for, but no adapter: ';
  let ep = wantGpu ? 'webgpu' : 'wasm';
  try {
    session = await create(msg.model, ep);
  } catch (err) {
    if (ep !== 'webgpu') throw err;
    note += `WebGPU failed (${err.message || err}); `;
    ep = 'wasm';
    session = await create(msg.model, ep);
  }
  if (note) note += 'running on WASM';
  return { type: 'ready', ep, threads: ep === 'wasm' ? ort.env.wasm.numThreads : null, note };
}

async function run(msg) {
  const start = performance.now();
  const input = new ort.Tensor('float32', new Float32Array(msg.input), msg.dims);
  const outputs = await session.run({ [inputName]: input });
  const out = outputs[session.outputNames[0]];
  const logits = out.data instanceof Float32Array ? out.data : Float32Array.from(out.data);
  const copy = logits.slice(); // detach from ORT's buffer before transferring
  input.dispose?.();
  out.dispose?.();
  return { type: 'result', id: msg.id, logits: copy.buffer, dims: out.dims, ms: performance.now() - start };
}

// With threads, onnxruntime's pthread workers load this same script (named 'em-pthread'):
// leave them to onnxruntime.
const isPthread = self.name === 'em-pthread';

const onMessage = async (event) => {
  const msg = event.data;
  try {
    if (msg.type === 'load') self.postMessage({ ...(await load(msg)), id: msg.id });
    else if (msg.type === 'run') {
      const reply = await run(msg);
      self.postMessage(reply, [reply.logits]);
    }
  } catch (err) {
    self.postMessage({ type: 'error', id: msg.id, message: String(err && err.message ? err.message : err) });
  }
};

if (!isPthread) self.onmessage = onMessage;
