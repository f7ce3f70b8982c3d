// Frame sources: async generators of decoded frames
//   {index, time, width, height, data (RGBA bytes), image (ImageData), encode() → {blob, type}}
// - imageFrames: a chosen image sequence, decoded losslessly in file-name order (as
//   ttball.frames.FrameSource reads a folder), so the page sees exactly the pixels Python sees;
// - videoFrames: a <video> playing a file or a camera stream. A file is paused while the
//   pipeline is behind, so few frames are skipped; a camera never waits: frames that arrive while
//   the pipeline is busy are dropped (only the newest is kept).

const JPEG_QUALITY = 0.9;
// Past Chromium's canvas limits (side 32767, area 16384²) drawImage/getImageData give zeros, not
// an error: refuse such frames rather than track an all-black one.
const MAX_CANVAS_SIDE = 32767;
const MAX_CANVAS_AREA = 16384 * 16384;
// A playing file video with no new frame for this long has stalled (a decoder that gave up
// without an `error` event, a source that stopped delivering). A run may set another
// (videoFrames' `stallMs`; the page's `window.ttballTimeouts`, for tests).
export const STALL_MS = 10000;

/** Throws, naming `what`, when a width×height frame is past what a canvas can hold. */
export function checkCanvasSize(width, height, what) {
  if (width > MAX_CANVAS_SIDE || height > MAX_CANVAS_SIDE || width * height > MAX_CANVAS_AREA) {
    throw new Error(`${what} is ${width}×${height}: too large for the browser's canvas `
      + `(at most ${MAX_CANVAS_SIDE} a side and 16384×16384 pixels); scale it down first`);
  }
}

export function canvas2d(width, height) {
  const canvas = new OffscreenCanvas(width, height);
  return canvas.getContext('2d', { willReadFrequently: true, colorSpace: 'srgb' });
}

export function jpegEncoder(image) {
  return async () => {
    const ctx = canvas2d(image.width, image.height);
    ctx.putImageData(image, 0, 0);
    return { blob: await ctx.canvas.convertToBlob({ type: 'image/jpeg', quality: JPEG_QUALITY }), type: 'image/jpeg' };
  };
}

/**
 * A JPEG's bytes without its EXIF segments (APP1 "Exif"), the rest as they are; other bytes
 * unchanged. The browser turns a JPEG by its EXIF orientation whatever createImageBitmap's
 * imageOrientation says (Chromium 156: 'none' too), while the server and `ttball track` use a
 * frame as stored, and the worker gets the file itself: without the segment both see one frame.
 */
export function withoutExif(bytes) {
  if (bytes.length < 4 || bytes[0] !== 0xff || bytes[1] !== 0xd8) return bytes;
  const spans = [];
  let i = 2;
  while (i + 4 <= bytes.length && bytes[i] === 0xff) {
    const marker = bytes[i + 1];
    if (marker === 0xda || marker === 0xd9) break; // the scan: the segments are over
    if (marker === 0xff || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += marker === 0xff ? 1 : 2;
      continue;
    }
    const end = i + 2 + ((bytes[i + 2] << 8) | bytes[i + 3]);
    if (marker === 0xe1 && end <= bytes.length && text(bytes, i + 4, 6) === 'Exif\0\0') {
      spans.push([i, end]);
    }
    i = end;
  }
  return without(bytes, spans);
}

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/**
 * A PNG's bytes without its eXIf chunks (the same orientation tag, which Chromium applies to
 * a PNG too), the other chunks as they are (each carries its own CRC); other bytes unchanged.
 */
export function withoutPngExif(bytes) {
  if (bytes.length < 8 || PNG_SIGNATURE.some((b, k) => bytes[k] !== b)) return bytes;
  const spans = [];
  let i = 8;
  while (i + 12 <= bytes.length) {
    const length = ((bytes[i] << 24) | (bytes[i + 1] << 16) | (bytes[i + 2] << 8) | bytes[i + 3]) >>> 0;
    const end = i + 12 + length;
    if (end > bytes.length) break;
    if (text(bytes, i + 4, 4) === 'eXIf') spans.push([i, end]);
    i = end;
  }
  return without(bytes, spans);
}

function text(bytes, at, length) {
  return String.fromCharCode(...bytes.subarray(at, at + length));
}

/** ``bytes`` less the ``[start, end)`` spans (in order, apart); ``bytes`` itself if none. */
function without(bytes, spans) {
  if (!spans.length) return bytes;
  const out = new Uint8Array(bytes.length - spans.reduce((n, [a, b]) => n + b - a, 0));
  let from = 0;
  let at = 0;
  for (const [a, b] of [...spans, [bytes.length, bytes.length]]) {
    out.set(bytes.subarray(from, a), at);
    at += a - from;
    from = b;
  }
  return out;
}

/**
 * What createImageBitmap decodes of an image file: a JPEG or PNG without its EXIF
 * (withoutExif, withoutPngExif, each found by its signature), so its pixels are as stored.
 */
async function storedPixels(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  const stripped = withoutPngExif(withoutExif(bytes));
  return stripped === bytes ? file : new Blob([stripped], { type: file.type });
}

export function imageFiles(files) {
  return [...files]
    .filter((f) => f.type.startsWith('image/') || /\.(png|jpe?g|bmp|webp)$/i.test(f.name))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Frames of image files, in name order; `skipped` collects `{index, name, why}` of each
 *  unreadable or odd-sized one (as ttball.frames.FrameSource skips them). */
export async function* imageFrames(files, fps, skipped = []) {
  let size = null;
  for (const [index, file] of files.entries()) {
    let bitmap;
    try {
      bitmap = await createImageBitmap(await storedPixels(file), {
        colorSpaceConversion: 'none', premultiplyAlpha: 'none',
      });
    } catch {
      skipped.push({ index, name: file.name, why: file.size ? 'cannot be decoded' : 'empty file' });
      continue;
    }
    const { width, height } = bitmap;
    size = size || [width, height];
    if (width !== size[0] || height !== size[1]) {
      bitmap.close();
      skipped.push({ index, name: file.name, why: `${width}×${height}, not ${size[0]}×${size[1]} as the first` });
      continue;
    }
    try {
      checkCanvasSize(width, height, `image ${index} (${file.name})`);
    } catch (err) {
      bitmap.close();
      throw err;
    }
    const ctx = canvas2d(width, height);
    ctx.drawImage(bitmap, 0, 0);
    bitmap.close();
    const image = ctx.getImageData(0, 0, width, height);
    const type = /png$/i.test(file.type || file.name) ? 'image/png' : 'image/jpeg';
    // The worker gets the file itself (no re-encoding) when it can read it, else a JPEG.
    const original = type === 'image/png' || /jpe?g$/i.test(file.type || file.name);
    yield {
      index, time: index / fps, width, height, data: image.data, image,
      encode: original ? async () => ({ blob: file, type }) : jpegEncoder(image),
    };
  }
}

/** Frames of a playing <video> (file or camera). `stop.stopped = true` ends the generator;
 *  `name` (the file's) is for messages. A media error, or no new frame for `stallMs` while
 *  playing, ends it with an error. */
export async function* videoFrames(video, { live, stop, name = 'the video', stallMs = STALL_MS }) {
  const queue = [];
  let wake = null;
  let ended = false;
  let failure = null;
  let ctx = null;
  let lastFrame = performance.now();
  const notify = () => {
    if (wake) {
      wake();
      wake = null;
    }
  };
  const onFrame = (_now, meta) => {
    if (ended || failure || stop.stopped) return;
    lastFrame = performance.now();
    const w = video.videoWidth, h = video.videoHeight;
    try {
      checkCanvasSize(w, h, name);
    } catch (err) {
      failure = err;
      notify();
      return;
    }
    if (!ctx || ctx.canvas.width !== w || ctx.canvas.height !== h) ctx = canvas2d(w, h);
    ctx.drawImage(video, 0, 0, w, h);
    const image = ctx.getImageData(0, 0, w, h);
    if (live) queue.length = 0;
    queue.push({ time: meta.mediaTime, image });
    if (!live && queue.length >= 2) video.pause();
    notify();
    video.requestVideoFrameCallback(onFrame);
  };
  const onEnded = () => {
    ended = true;
    notify();
  };
  const onError = () => {
    const at = Number.isFinite(video.currentTime) ? ` past ${video.currentTime.toFixed(2)} s` : '';
    failure = new Error(`${name}: the browser cannot decode this video${at}`
      + ` (${video.error ? video.error.message || `media error ${video.error.code}` : 'media error'});`
      + ' it may be truncated or corrupt');
    notify();
  };
  video.addEventListener('ended', onEnded);
  video.addEventListener('error', onError);
  video.requestVideoFrameCallback(onFrame);
  let index = 0;
  try {
    try {
      await video.play();
    } catch (err) {
      if (failure) throw failure;
      throw new Error(`${name}: this browser cannot play it (${err.message || err})`);
    }
    for (;;) {
      if (stop.stopped) return;
      if (queue.length) {
        const { time, image } = queue.shift();
        if (!live && video.paused && !video.ended && queue.length < 2) video.play();
        lastFrame = performance.now();
        yield {
          index: index++, time, width: image.width, height: image.height, data: image.data, image,
          encode: jpegEncoder(image),
        };
        lastFrame = performance.now(); // time spent downstream is not the video's
        continue;
      }
      if (failure) throw failure;
      if (ended) return;
      if (!live && video.paused && !video.ended) video.play().catch(() => {}); // paused while behind
      if (document.hidden) lastFrame = performance.now(); // a background tab gets no frames
      if (performance.now() - lastFrame > stallMs) {
        throw new Error(`${name}: no new frame for ${stallMs / 1000} s at ${video.currentTime.toFixed(2)} s`
          + ' of the video: playback stalled (the file may be truncated or corrupt)');
      }
      await new Promise((resolve) => {
        wake = resolve;
        setTimeout(resolve, 250); // look at `stop` now and then, even with no frames coming
      });
    }
  } finally {
    video.removeEventListener('ended', onEnded);
    video.removeEventListener('error', onError);
    video.pause();
  }
}
