// Build the page into ../ttball/web: index.html, style.css, app.js and infer-worker.js (ES
// modules, bundled by esbuild), and the onnxruntime-web .wasm the bundle loads, copied beside them.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '..', 'ttball', 'web');
const ortDist = dirname(createRequire(import.meta.url).resolve('onnxruntime-web/ort-wasm-simd-threaded.jsep.wasm'));
// The default onnxruntime-web ESM bundle (WASM + WebGPU through JSEP) loads this one file.
const WASM = ['ort-wasm-simd-threaded.jsep.wasm'];

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, 'src', 'main.js'), join(here, 'src', 'infer-worker.js')],
  entryNames: '[name]',
  outdir: out,
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  sourcemap: false,
  legalComments: 'linked',
  logLevel: 'warning',
});
// main.js → app.js, the name index.html loads.
const { renameSync } = await import('node:fs');
renameSync(join(out, 'main.js'), join(out, 'app.js'));
for (const name of readdirSync(join(here, 'static'))) copyFileSync(join(here, 'static', name), join(out, name));
for (const name of WASM) copyFileSync(join(ortDist, name), join(out, name));
console.log(`built ${out}: ${readdirSync(out).sort().join(', ')}`);
