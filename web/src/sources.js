// Frame sources: async generators of decoded frames
//   {index, time, width, height, data (RGBA bytes), image (ImageData), encode() → {blob, type}}
// - imageFrames: a chosen image sequence, decoded losslessly in file-name order (as
//   ttball.frames.FrameSource reads a folder), so the page sees exactly the pixels Python sees;
// - videoFrames: a <video> playing a file or a camera stream. A file is paused while the
//   pipeline is behind, so few frames are skipped; a camera never waits: frames that arrive while
//   the pipeline is busy are dropped (only the newest is kept).

const JPEG_QUALITY = 0.9;

function canvas2d(width, height) {
  const canvas = new OffscreenCanvas(width, height);
  return canvas.getContext('2d', { willReadFrequently: true, colorSpace: 'srgb' });
}

function jpegEncoder(image) {
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
  const kept = [bytes.subarray(0, 2)];
  let i = 2;
  let start = 2; // the first byte not yet kept
  while (i + 4 <= bytes.length && bytes[i] === 0xff) {
    const marker = bytes[i + 1];
    if (marker === 0xda || marker === 0xd9) break; // the scan: the segments are over
    if (marker === 0xff || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += marker === 0xff ? 1 : 2;
      continue;
    }
    const end = i + 2 + ((bytes[i + 2] << 8) | bytes[i + 3]);
    const exif = marker === 0xe1 && end <= bytes.length
      && String.fromCharCode(...bytes.subarray(i + 4, i + 10)) === 'Exif\0\0';
    if (exif) {
      kept.push(bytes.subarray(start, i));
      start = end;
    }
    i = end;
  }
  if (start === 2) return bytes;
  kept.push(bytes.subarray(start));
  return concat(kept);
}

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/**
 * A PNG's bytes without its eXIf chunks (the same orientation tag, which Chromium applies to
 * a PNG too), the other chunks as they are (each carries its own CRC); other bytes unchanged.
 */
export function withoutPngExif(bytes) {
  if (bytes.length < 8 || PNG_SIGNATURE.some((b, k) => bytes[k] !== b)) return bytes;
  const kept = [];
  let i = 8;
  let start = 0;
  while (i + 12 <= bytes.length) {
    const length = ((bytes[i] << 24) | (bytes[i + 1] << 16) | (bytes[i + 2] << 8) | bytes[i + 3]) >>> 0;
    const end = i + 12 + length;
    if (end > bytes.length) break;
    if (String.fromCharCode(...bytes.subarray(i + 4, i + 8)) === 'eXIf') {
      kept.push(bytes.subarray(start, i));
      start = end;
    }
    i = end;
  }
  if (start === 0) return bytes;
  kept.push(bytes.subarray(start));
  return concat(kept);
}

function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, part) => n + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/**
 * What createImageBitmap decodes of an image file: a JPEG or PNG without its EXIF
 * (withoutExif, withoutPngExif), so its pixels are as stored.
 */
async function storedPixels(file) {
  const name = file.type || file.name;
  const strip = /jpe?g$/i.test(name) ? withoutExif : /png$/i.test(name) ? withoutPngExif : null;
  if (!strip) return file;
  const bytes = new Uint8Array(await file.arrayBuffer());
  const stripped = strip(bytes);
  const type = file.type || (strip === withoutExif ? 'image/jpeg' : 'image/png');
  return stripped === bytes ? file : new Blob([stripped], { type });
}

export function imageFiles(files) {
  return [...files]
    .filter((f) => f.type.startsWith('image/') || /\.(png|jpe?g|bmp|webp)$/i.test(f.name))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Frames of image files, in name order; `skipped` collects unreadable or odd-sized ones. */
export async function* imageFrames(files, fps, skipped = []) {
  let size = null;
  for (const [index, file] of files.entries()) {
    let bitmap;
    try {
      bitmap = await createImageBitmap(await storedPixels(file), {
        colorSpaceConversion: 'none', premultiplyAlpha: 'none',
      });
    } catch {
      skipped.push(index);
      continue;
    }
    const { width, height } = bitmap;
    size = size || [width, height];
    if (width !== size[0] || height !== size[1]) {
      skipped.push(index);
      continue;
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

/** Frames of a playing <video> (file or camera). `stop.stopped = true` ends the generator. */
export async function* videoFrames(video, { live, stop }) {
  const queue = [];
  let wake = null;
  let ended = false;
  let ctx = null;
  const notify = () => {
    if (wake) {
      wake();
      wake = null;
    }
  };
  const onFrame = (_now, meta) => {
    if (ended || stop.stopped) return;
    const w = video.videoWidth, h = video.videoHeight;
    if (!ctx || ctx.canvas.width !== w || ctx.canvas.height !== h) ctx = canvas2d(w, h);
    ctx.drawImage(video, 0, 0, w, h);
    const image = ctx.getImageData(0, 0, w, h);
    if (live) queue.length = 0;
    queue.push({ time: meta.mediaTime, image });
    if (!live && queue.length >= 2) video.pause();
    notify();
    video.requestVideoFrameCallback(onFrame);
  };
  video.requestVideoFrameCallback(onFrame);
  video.onended = () => {
    ended = true;
    notify();
  };
  await video.play();
  let index = 0;
  try {
    for (;;) {
      if (stop.stopped) return;
      if (queue.length) {
        const { time, image } = queue.shift();
        if (!live && video.paused && !video.ended && queue.length < 2) video.play();
        yield {
          index: index++, time, width: image.width, height: image.height, data: image.data, image,
          encode: jpegEncoder(image),
        };
        continue;
      }
      if (ended) return;
      await new Promise((resolve) => {
        wake = resolve;
        setTimeout(resolve, 250); // look at `stop` now and then, even with no frames coming
      });
    }
  } finally {
    video.pause();
  }
}
