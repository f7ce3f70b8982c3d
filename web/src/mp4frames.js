// Every frame of an MP4/MOV file's video track, read exactly with WebCodecs:
// - mp4box parses the boxes; only box headers and the `moov` are read to find the sample table
//   (where the moov is, first or last, does not matter), never the whole file;
// - each sample's bytes are read from the File in pieces (PIECE_BYTES) and fed to a VideoDecoder,
//   which is kept at most MAX_DECODE_QUEUE requests and MAX_AHEAD frames ahead of the consumer;
// - each decoded VideoFrame is drawn to a canvas, copied out as ImageData and closed at once.
// Frames come out in presentation order (by timestamp: the order of the samples' composition
// times, whatever order the decoder gives them in), time = the frame's timestamp in seconds less
// the start of the track's edit list, as ffmpeg (OpenCV, PyAV) reads them; index 0, 1, 2, …
// The frame rate is the track's: sample count / the samples' total duration (`stts`).
// Frames are turned as the display matrix says (the track's `tkhd` matrix times the movie's
// `mvhd` one, as ffmpeg composes them) when it turns by 0, 90, 180 or 270° (any uniform scale
// left out): the frames handed out have the displayed size, as OpenCV (CAP_PROP_ORIENTATION_AUTO,
// hence `ttball track`) and a <video> give them. A matrix that flips, skews or turns by another
// angle is not applied (the reader's `note` says so, for the log line).
// Not handled, so read through <video> instead: fragmented MP4 (samples in `moof`s), a track
// with several sample descriptions, a codec this browser's VideoDecoder refuses. Ignored: edits
// after the first media edit.

/*! mp4box.js (npm mp4box), bundled into app.js by this module:
 * Copyright (c) 2012. Telecom ParisTech/TSI/MM/GPAC Cyril Concolato
 * All rights reserved.
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the following conditions are met:
 *     * Redistributions of source code must retain the above copyright
 *       notice, this list of conditions and the following disclaimer.
 *     * Redistributions in binary form must reproduce the above copyright
 *       notice, this list of conditions and the following disclaimer in the
 *       documentation and/or other materials provided with the distribution.
 *     * Neither the name of the copyright holder nor the
 *       names of its contributors may be used to endorse or promote products
 *       derived from this software without specific prior written permission.
 *
 * THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND
 * ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED
 * WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
 * DISCLAIMED. IN NO EVENT SHALL <COPYRIGHT HOLDER> BE LIABLE FOR ANY
 * DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES
 * (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES;
 * LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND
 * ON ANY THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
 * (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS
 * SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
 */
import { createFile } from 'mp4box';
import { STALL_MS, canvas2d, checkCanvasSize, jpegEncoder } from './sources.js';

// Sample data is read from the file this many bytes at a time (one piece in memory).
const PIECE_BYTES = 1 << 20;
// The moov is looked for in reads of this size; mp4box says where the next box starts, so an
// `mdat` before the moov is skipped, not read.
const HEAD_BYTES = 1 << 20;
// Decode requests waiting in the VideoDecoder (its decodeQueueSize) before feeding pauses.
const MAX_DECODE_QUEUE = 4;
// Samples fed whose frame has not come out yet: past this feeding pauses. Above the 16 frames an
// H.264/HEVC decoder may hold back to reorder, so a valid stream always gets out of it. (A
// 1280×720 H.264 clip through a slow worker: at most 8 fed ahead, 4 decoded frames waiting.)
const MAX_AHEAD = 24;
// The box types an ISO BMFF (MP4, MOV, M4V) file may start with.
const FIRST_BOXES = new Set(['ftyp', 'moov', 'mdat', 'free', 'skip', 'wide', 'pnot']);

/** True when `head` (a file's first 8 bytes) starts an ISO BMFF box of a type MP4/MOV files
 *  start with. */
function isIsoBmff(head) {
  if (head.length < 8) return false;
  const size = ((head[0] << 24) | (head[1] << 16) | (head[2] << 8) | head[3]) >>> 0;
  const type = String.fromCharCode(...head.subarray(4, 8));
  return FIRST_BOXES.has(type) && (size === 0 || size === 1 || size >= 8);
}

/** Bytes [start, end) of `file`; a read that fails names the file. */
async function readBytes(file, start, end, name) {
  try {
    return await file.slice(start, end).arrayBuffer();
  } catch (err) {
    throw new Error(`${name}: cannot read the file (${err.message || err})`);
  }
}

/** The parsed boxes of an MP4 up to its moov ({iso, info}: mp4box's ISOFile and getInfo()). */
async function readMovie(file, name) {
  const iso = createFile(false); // mdat data skipped: samples are read from the file later
  let info = null;
  let failure = null;
  iso.onReady = (given) => { info = given; };
  iso.onError = (module, message) => { failure = message || module; };
  let at = 0;
  while (!info && !failure && at < file.size) {
    const buffer = await readBytes(file, at, at + HEAD_BYTES, name);
    buffer.fileStart = at;
    let next;
    try {
      next = iso.appendBuffer(buffer);
    } catch (err) {
      failure = err.message || String(err);
    }
    if (!(next > at)) break; // no box ends further on: nothing more to find
    at = next;
  }
  if (!info) {
    const why = failure ? `: ${failure}` : '';
    throw new Error(`${name}: no movie header ('moov' box) in this MP4/MOV file${why}: `
      + 'it is truncated or corrupt');
  }
  return { iso, info };
}

/** Where the first media edit starts (media timescale) and the empty edits before it
 *  (seconds): a frame's time is (cts - start) / timescale + delay; frames before start are
 *  decoded but not shown. No edit list: start 0, delay 0. */
function firstEdit(trak, movieTimescale) {
  let delay = 0;
  for (const edit of trak.edts?.elst?.entries ?? []) {
    if (edit.media_time === -1) delay += edit.segment_duration / movieTimescale;
    else return { start: edit.media_time, delay };
  }
  return { start: 0, delay };
}

/** The track's sample table as {samples: [{offset, size, key, timestamp}] in decode order
 *  (timestamp: µs, as the decoder gets and gives it back), shown: [{timestamp, time}] in
 *  presentation order, fps}. */
function samplePlan(trak, movieTimescale) {
  const timescale = trak.mdia.mdhd.timescale;
  const { start, delay } = firstEdit(trak, movieTimescale);
  const micros = (cts) => Math.round((cts * 1e6) / timescale);
  const samples = trak.samples.map((s) => ({
    offset: s.offset, size: s.size, key: s.is_sync, timestamp: micros(s.cts),
  }));
  const shown = trak.samples
    .filter((s) => s.cts >= start)
    .sort((a, b) => a.cts - b.cts)
    .map((s) => ({ timestamp: micros(s.cts), time: (s.cts - start) / timescale + delay }));
  const stts = trak.mdia.minf.stbl.stts;
  const ticks = stts.sample_counts.reduce((sum, count, i) => sum + count * stts.sample_deltas[i], 0);
  // No sample durations (a broken stts): the 30 fps a <video> is given.
  return { samples, shown, fps: ticks > 0 ? (samples.length * timescale) / ticks : 30 };
}

/** The 2×2 part (a, b, c, d) of an ISO BMFF matrix [a b u; c d v; x y w] (a, b, c, d in 16.16
 *  fixed point); identity when there is none. A point (x, y) goes to (a x + c y, b x + d y),
 *  as a canvas transform takes its (a, b, c, d). */
function linearPart(matrix) {
  return matrix ? [matrix[0], matrix[1], matrix[3], matrix[4]].map((v) => v / 65536) : [1, 0, 0, 1];
}

/**
 * How the frames are shown, from the track's and the movie's display matrices: {turn, note}.
 * turn: clockwise degrees (0, 90, 180, 270) the frames are turned by, with the matrices' product
 * (track, then movie: ffmpeg's order) a rotation by it at any uniform scale ([0 1; -1 0], a
 * phone's portrait video, is 90: OpenCV's CAP_PROP_ORIENTATION_META, ffmpeg's
 * av_display_rotation_get -90); 0 for any other matrix. note: what the log line says ('' for
 * the identity).
 */
function displayTurn(trackMatrix, movieMatrix) {
  const [ta, tb, tc, td] = linearPart(trackMatrix);
  const [ma, mb, mc, md] = linearPart(movieMatrix);
  const [a, b, c, d] = [ta * ma + tb * mc, ta * mb + tb * md, tc * ma + td * mc, tc * mb + td * md];
  if (a === d && b === -c && (a === 0) !== (b === 0)) {
    const turn = a > 0 ? 0 : b > 0 ? 90 : a < 0 ? 180 : 270;
    return { turn, note: turn ? `turned ${turn}° clockwise by its display matrix` : '' };
  }
  const shown = [a, b, c, d].map((v) => +v.toFixed(4)).join(' ');
  return { turn: 0, note: `display matrix [${shown}] not applied: no turn by a multiple of 90°` };
}

/** The size [width, height] of a width×height frame turned clockwise by `turn` degrees. */
function turnedSize(turn, width, height) {
  return turn % 180 ? [height, width] : [width, height];
}

/** The canvas transform that draws a width×height frame turned clockwise by `turn` degrees
 *  (0, 90, 180, 270) onto a canvas of the turned size: [a, b, c, d, e, f]. */
function turnTransform(turn, width, height) {
  const [a, b, c, d] = { 0: [1, 0, 0, 1], 90: [0, 1, -1, 0], 180: [-1, 0, 0, -1], 270: [0, -1, 1, 0] }[turn];
  // Shifted so that the turned frame's corners land on [0, w] × [0, h].
  const e = Math.max(0, -a * width) + Math.max(0, -c * height);
  const f = Math.max(0, -b * width) + Math.max(0, -d * height);
  return [a, b, c, d, e, f];
}

/** The decoder configuration record of a sample entry: the body of its avcC, hvcC, vpcC or
 *  av1C box, as stored in the file (null when it has none). */
async function description(file, entry, name) {
  const box = entry.avcC || entry.hvcC || entry.vpcC || entry.av1C;
  if (!box) return null;
  return new Uint8Array(await readBytes(file, box.start + box.hdr_size, box.start + box.size, name));
}

/**
 * The WebCodecs reader of `file`'s video track: an Mp4Video, or {fallback: why} when the file is
 * no MP4/MOV or this browser cannot decode it this way (then a <video> may still play it).
 * Throws, naming the file, for an MP4/MOV that cannot be read: no moov (truncated or corrupt),
 * no video track, frames too large for a canvas.
 */
export async function openMp4(file, name = file.name) {
  if (typeof VideoDecoder !== 'function') return { fallback: 'this browser has no WebCodecs VideoDecoder' };
  if (!isIsoBmff(new Uint8Array(await readBytes(file, 0, 8, name)))) return { fallback: 'not an MP4/MOV file' };
  const { iso, info } = await readMovie(file, name);
  if (info.isFragmented) return { fallback: 'a fragmented MP4' };
  const track = info.videoTracks[0];
  if (!track) throw new Error(`${name}: no video track in this MP4/MOV file`);
  const trak = iso.getTrackById(track.id);
  const entries = trak.mdia.minf.stbl.stsd.entries;
  if (entries.length !== 1) return { fallback: `${entries.length} sample descriptions in its video track` };
  if (!trak.samples.length) throw new Error(`${name}: its video track has no frames`);
  const { width, height } = entries[0];
  const display = displayTurn(trak.tkhd.matrix, iso.moov.mvhd.matrix);
  checkCanvasSize(...turnedSize(display.turn, width, height), name);
  const config = { codec: track.codec, codedWidth: width, codedHeight: height };
  const record = await description(file, entries[0], name);
  if (record) config.description = record;
  let support;
  try {
    support = await VideoDecoder.isConfigSupported(config);
  } catch (err) {
    return { fallback: `codec ${track.codec}: ${err.message || err}` };
  }
  if (!support.supported) return { fallback: `this browser's VideoDecoder cannot decode ${track.codec}` };
  return new Mp4Video(file, name, config, samplePlan(trak, iso.moov.mvhd.timescale), display);
}

/** Encoded samples of a file in decode order, read PIECE_BYTES at a time; those up to the first
 *  whose bytes lie past the file's end (`cut` then says so). */
class SampleReader {
  constructor(file, samples, name) {
    this.file = file;
    this.samples = samples;
    this.name = name;
    this.next = 0; // the next sample to hand out
    this.piece = null; // {end (exclusive sample index), offset (in the file), bytes}
    this.end = samples.findIndex((s) => s.offset + s.size > file.size);
    this.cut = null;
    if (this.end < 0) this.end = samples.length;
    else {
      const s = samples[this.end];
      this.cut = new Error(`${name}: frame data past the end of the file (sample ${this.end + 1} of `
        + `${samples.length} ends at byte ${s.offset + s.size}, the file has ${file.size} bytes): `
        + 'the file is truncated');
    }
  }

  get done() {
    return this.next >= this.end;
  }

  /** The next sample as an EncodedVideoChunk. */
  async chunk() {
    if (!this.piece || this.next >= this.piece.end) this.piece = await this.readPiece(this.next);
    const sample = this.samples[this.next++];
    return new EncodedVideoChunk({
      type: sample.key ? 'key' : 'delta', timestamp: sample.timestamp,
      data: new Uint8Array(this.piece.bytes, sample.offset - this.piece.offset, sample.size),
    });
  }

  /** Samples `first`… whose bytes lie within PIECE_BYTES from the first one's start (one at
   *  least), read in one go. */
  async readPiece(first) {
    const offset = this.samples[first].offset;
    let end = first;
    let last = offset;
    for (; end < this.end; end += 1) {
      const s = this.samples[end];
      const stop = s.offset + s.size;
      if (end > first && (s.offset < offset || stop - offset > PIECE_BYTES)) break;
      last = Math.max(last, stop);
    }
    return { end, offset, bytes: await readBytes(this.file, offset, last, this.name) };
  }
}

/** A VideoDecoder whose frames, drawn and copied out as they come, wait by timestamp until
 *  taken; those whose timestamp is not `wanted` (before the edit list's start) are dropped. */
class FrameDecoder {
  constructor(config, wanted, pixels, name, total) {
    this.wanted = wanted;
    this.name = name;
    this.total = total; // samples in the track, for messages
    this.decoded = new Map(); // timestamp → ImageData
    this.failure = null;
    this.fed = 0;
    this.out = 0; // frames the decoder gave back, wanted or not
    this.flushing = false;
    this.flushed = false; // every frame the decoder will give is out
    this.lastProgress = performance.now();
    this.wake = null;
    this.decoder = new VideoDecoder({
      output: (frame) => {
        this.out += 1;
        try {
          if (!this.failure && wanted.has(frame.timestamp)) this.decoded.set(frame.timestamp, pixels(frame));
        } catch (err) {
          this.failure = this.failure || err;
        } finally {
          frame.close();
        }
        this.notify();
      },
      error: (err) => this.fail(err),
    });
    this.decoder.addEventListener('dequeue', () => this.notify());
    this.decoder.configure(config);
  }

  notify() {
    this.lastProgress = performance.now();
    if (this.wake) {
      this.wake();
      this.wake = null;
    }
  }

  fail(err) {
    this.failure = this.failure || new Error(`${this.name}: the browser cannot decode this video `
      + `after ${this.out} of ${this.total} frames (${err.message || err}); it may be corrupt`);
    this.notify();
  }

  /** The frame of `timestamp` (µs) once decoded, else undefined; throws a decoder's failure. */
  take(timestamp) {
    if (this.failure) throw this.failure;
    const image = this.decoded.get(timestamp);
    this.decoded.delete(timestamp);
    return image;
  }

  /** Whether another sample may go in: few requests queued, few frames still inside. */
  get hungry() {
    return this.decoder.decodeQueueSize < MAX_DECODE_QUEUE && this.fed - this.out < MAX_AHEAD;
  }

  decode(chunk) {
    this.fed += 1;
    try {
      this.decoder.decode(chunk);
    } catch (err) {
      this.fail(err);
    }
  }

  /** No more samples: the decoder gives what it holds back (once). */
  flush() {
    if (this.flushing) return;
    this.flushing = true;
    this.decoder.flush().then(() => {
      this.flushed = true;
      this.notify();
    }, (err) => this.fail(err));
  }

  /** Milliseconds since the decoder last gave a frame, took a request or was waited on. */
  get idleMs() {
    return performance.now() - this.lastProgress;
  }

  /** Resolves on the decoder's next output, dequeue or error, or after 250 ms (to look at
   *  `stop` now and then, even with no frames coming). */
  wait() {
    return new Promise((resolve) => {
      this.wake = resolve;
      setTimeout(resolve, 250);
    });
  }

  close() {
    if (this.decoder.state !== 'closed') this.decoder.close();
    this.decoded.clear();
  }
}

/** An MP4's video track: `width`×`height` its frames' displayed size (turned), `codec` the codec
 *  string, `note` what was done with the display matrix (for the log line), `count` frames, `fps`. */
class Mp4Video {
  constructor(file, name, config, plan, display) {
    this.file = file;
    this.name = name;
    this.config = config;
    this.plan = plan;
    this.turn = display.turn;
    this.codec = config.codec;
    this.note = display.note; // what was done with the display matrix ('' for none)
    [this.width, this.height] = turnedSize(this.turn, config.codedWidth, config.codedHeight);
    this.count = plan.shown.length;
    this.fps = plan.fps;
    this.ctx = null;
  }

  /** A VideoFrame's visible pixels, turned by the display matrix, as ImageData (its display
   *  aspect not applied, as OpenCV). */
  pixels(frame) {
    const { width, height } = frame.visibleRect;
    const [w, h] = turnedSize(this.turn, width, height);
    checkCanvasSize(w, h, this.name);
    if (!this.ctx || this.ctx.canvas.width !== w || this.ctx.canvas.height !== h) {
      this.ctx = canvas2d(w, h);
    }
    this.ctx.setTransform(...turnTransform(this.turn, width, height));
    this.ctx.drawImage(frame, 0, 0, width, height);
    return this.ctx.getImageData(0, 0, w, h);
  }

  /**
   * Frames {index, time, width, height, data, image, encode} in presentation order; a sample is
   * fed only while the next frame to hand out is not decoded yet. `stop.stopped = true` ends it;
   * a decoder error, a frame the decoder never gives, or no decoder progress for `stallMs` ends
   * it with an error, and so does a sample past the file's end, once the frames before it are out.
   */
  async* frames({ stop, stallMs = STALL_MS }) {
    const { name } = this;
    const { samples, shown } = this.plan;
    const reader = new SampleReader(this.file, samples, name);
    const wanted = new Set(shown.map((s) => s.timestamp));
    const decoder = new FrameDecoder(this.config, wanted, (f) => this.pixels(f), name, samples.length);
    try {
      let index = 0;
      while (index < shown.length) {
        if (stop.stopped) return;
        const { timestamp, time } = shown[index];
        const image = decoder.take(timestamp);
        if (image) {
          yield {
            index, time, width: image.width, height: image.height, data: image.data, image,
            encode: jpegEncoder(image),
          };
          index += 1;
          decoder.notify(); // time spent downstream is not the decoder's
        } else if (!reader.done && decoder.hungry) {
          const chunk = await reader.chunk();
          if (!stop.stopped) decoder.decode(chunk);
        } else if (decoder.flushed) {
          throw reader.cut || new Error(`${name}: the decoder gave ${index} of ${shown.length} `
            + `frames and then no frame at ${time.toFixed(3)} s; the file may be corrupt`);
        } else if (decoder.idleMs > stallMs) {
          throw new Error(`${name}: no new frame from the decoder for ${stallMs / 1000} s at `
            + `${time.toFixed(2)} s of the video (the file may be corrupt)`);
        } else {
          if (reader.done) decoder.flush();
          await decoder.wait();
        }
      }
    } finally {
      decoder.close();
    }
  }
}
