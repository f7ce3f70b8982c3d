#!/usr/bin/env node
// Drive the ttball web page in headless Chromium and dump what it found, for
// tests/browser/test_web.py (which prepares the model, the frames and the server, and compares).
//
//   node scripts/browser_check.js JOB.json
//
// JOB: {chromium, url, frames: [png paths], out, timeoutMs,
//       runs: [{name, mode: 'browser'|'worker', ep?, model?, debug?, screenshot}]}
// OUT: {runs: [{name, error, results, status, debug: {windows: [{frames, input, logits}]}}], logs}
// (input and logits as base64 float32). Uses playwright-core from web/node_modules with the given
// Chromium binary: Playwright never downloads a browser here.

'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { createRequire } = require('node:module');

const webRequire = createRequire(path.join(__dirname, '..', 'web', 'package.json'));
const { chromium } = webRequire('playwright-core');

const FLAGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

function collect() {
  const toB64 = (f) => {
    const u = new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
    let s = '';
    for (let i = 0; i < u.length; i += 0x8000) s += String.fromCharCode.apply(null, u.subarray(i, i + 0x8000));
    return btoa(s);
  };
  const debug = window.ttballDebug
    ? { windows: window.ttballDebug.windows.map((w) => ({ frames: w.frames, input: toB64(w.input), logits: toB64(w.logits) })) }
    : null;
  return {
    error: window.ttballError,
    results: window.ttballResults,
    status: { ...window.ttballStatus, text: document.getElementById('status').innerText },
    modelStatus: document.getElementById('model-status').innerText,
    debug,
  };
}

async function runOne(context, job, run, logs) {
  const page = await context.newPage();
  page.on('console', (m) => logs.push(`[${run.name}] console.${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`[${run.name}] pageerror: ${e.message}`));
  if (run.debug) await page.addInitScript(() => { window.ttballDebug = { windows: [] }; });
  await page.goto(job.url);
  await page.evaluate(() => window.ttballReady);
  await page.check(run.mode === 'worker' ? '#mode-worker' : '#mode-browser');
  if (run.ep) await page.selectOption('#ep', run.ep);
  if (run.model) await page.setInputFiles('#model-file', run.model);
  const started = Date.now();
  await page.setInputFiles('#source', job.frames);
  await page.waitForFunction(() => window.ttballDone === true, null, { timeout: job.timeoutMs, polling: 100 });
  const seconds = (Date.now() - started) / 1000;
  const result = await page.evaluate(collect);
  if (run.screenshot) await page.screenshot({ path: run.screenshot, fullPage: true });
  await page.close();
  return { name: run.name, seconds, ...result };
}

async function main() {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ttball-chromium-'));
  const logs = [];
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: job.chromium,
    headless: true,
    args: FLAGS,
    viewport: { width: 1000, height: 860 },
  });
  const runs = [];
  try {
    for (const run of job.runs) runs.push(await runOne(context, job, run, logs));
  } finally {
    await context.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
    fs.writeFileSync(job.out, JSON.stringify({ runs, logs }));
  }
}

main().catch((err) => {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
});
