// Drawing: the frame, the ball with its blur streak and a fading trail, and the height chart.
// Rows carry ttball.results.FrameResult's keys: x, y in source pixels (y down), blur_angle_deg in
// (−90, 90] (positive = clockwise on screen), blur_length_px = half the streak's extent.

const TRAIL_FRAMES = 45;
const CHART_FRAMES = 300;

export class Overlay {
  constructor(frameCanvas, overlayCanvas) {
    this.frame = frameCanvas.getContext('2d');
    this.overlay = overlayCanvas.getContext('2d');
    this.trail = [];
  }

  reset() {
    this.trail = [];
    for (const ctx of [this.frame, this.overlay]) ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
  }

  /** Show one frame (ImageData) with its row. */
  show(image, row) {
    for (const ctx of [this.frame, this.overlay]) {
      if (ctx.canvas.width !== image.width || ctx.canvas.height !== image.height) {
        ctx.canvas.width = image.width;
        ctx.canvas.height = image.height;
      }
    }
    this.frame.putImageData(image, 0, 0);
    this.trail.push(row);
    while (this.trail.length && this.trail[0].frame <= row.frame - TRAIL_FRAMES) this.trail.shift();
    this.drawOverlay(row, image.width);
  }

  drawOverlay(row, width) {
    const ctx = this.overlay;
    ctx.clearRect(0, 0, ctx.canvas.width, ctx.canvas.height);
    const unit = Math.max(1.5, width / 400);
    let prev = null;
    for (const r of this.trail) {
      if (!r.visible) {
        prev = null;
        continue;
      }
      const fade = 1 - (row.frame - r.frame) / TRAIL_FRAMES;
      if (prev) {
        ctx.strokeStyle = `rgba(255, 196, 0, ${0.85 * fade})`;
        ctx.lineWidth = unit * (0.5 + 1.5 * fade);
        ctx.beginPath();
        ctx.moveTo(prev.x, prev.y);
        ctx.lineTo(r.x, r.y);
        ctx.stroke();
      }
      ctx.fillStyle = `rgba(255, 196, 0, ${0.9 * fade})`;
      ctx.beginPath();
      ctx.arc(r.x, r.y, unit * (0.8 + 1.2 * fade), 0, 2 * Math.PI);
      ctx.fill();
      prev = r;
    }
    if (!row.visible) return;
    const a = (row.blur_angle_deg * Math.PI) / 180;
    const len = Math.max(row.blur_length_px, 0);
    const dx = Math.cos(a) * len, dy = Math.sin(a) * len;
    ctx.lineCap = 'round';
    ctx.strokeStyle = 'rgba(255, 40, 90, 0.9)';
    ctx.lineWidth = unit * 2;
    ctx.beginPath();
    ctx.moveTo(row.x - dx, row.y - dy);
    ctx.lineTo(row.x + dx, row.y + dy);
    ctx.stroke();
    ctx.strokeStyle = 'rgba(0, 255, 120, 0.95)';
    ctx.lineWidth = unit;
    ctx.beginPath();
    ctx.arc(row.x, row.y, Math.max(len, 4 * unit) + 3 * unit, 0, 2 * Math.PI);
    ctx.stroke();
  }
}

/** The ball's height (y, source pixels; up = higher) over the last frames. */
export class HeightChart {
  constructor(canvas) {
    this.ctx = canvas.getContext('2d');
    this.rows = [];
    this.frameHeight = 0;
  }

  reset(frameHeight = 0) {
    this.rows = [];
    this.frameHeight = frameHeight;
    this.draw();
  }

  add(row, frameHeight) {
    this.frameHeight = frameHeight;
    this.rows.push(row);
    if (this.rows.length > CHART_FRAMES) this.rows.shift();
    this.draw();
  }

  draw() {
    const ctx = this.ctx;
    const { width: w, height: h } = ctx.canvas;
    const pad = { l: 44, r: 8, t: 8, b: 18 };
    ctx.clearRect(0, 0, w, h);
    ctx.fillStyle = '#111a';
    ctx.fillRect(0, 0, w, h);
    ctx.font = '11px system-ui, sans-serif';
    ctx.fillStyle = '#aaa';
    ctx.strokeStyle = '#444';
    ctx.lineWidth = 1;
    const fh = this.frameHeight || 1;
    const plotH = h - pad.t - pad.b, plotW = w - pad.l - pad.r;
    const yPix = (y) => pad.t + (y / fh) * plotH; // y down in the frame = down in the chart
    for (const f of [0, 0.5, 1]) {
      const yy = pad.t + f * plotH;
      ctx.beginPath();
      ctx.moveTo(pad.l, yy);
      ctx.lineTo(w - pad.r, yy);
      ctx.stroke();
      ctx.fillText(`y ${Math.round(f * fh)}`, 4, yy + 4);
    }
    if (!this.rows.length) {
      ctx.fillText('ball height (y) over frames', pad.l + 6, pad.t + 14);
      return;
    }
    const first = this.rows[0].frame;
    const last = Math.max(this.rows[this.rows.length - 1].frame, first + 1);
    const span = Math.max(last - first, CHART_FRAMES / 4);
    const xPix = (f) => pad.l + ((f - first) / span) * plotW;
    ctx.fillText(`frame ${first}`, pad.l, h - 4);
    ctx.fillText(`${first + span}`, w - pad.r - 30, h - 4);
    ctx.strokeStyle = '#ffc400';
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let pen = false;
    for (const r of this.rows) {
      if (!r.visible) {
        pen = false;
        continue;
      }
      if (pen) ctx.lineTo(xPix(r.frame), yPix(r.y));
      else ctx.moveTo(xPix(r.frame), yPix(r.y));
      pen = true;
    }
    ctx.stroke();
    ctx.fillStyle = '#ffc400';
    for (const r of this.rows) if (r.visible) ctx.fillRect(xPix(r.frame) - 1.5, yPix(r.y) - 1.5, 3, 3);
  }
}
