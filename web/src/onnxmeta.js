// What the page needs to know about an exported model, read from the ONNX file itself: the input's
// shape (its height and width decide the resize) and `metadata_props` (written by
// ttball/export/onnx.py: mean, std, score threshold, weights name). A minimal protobuf reader
// walks ModelProto → graph (7) → input (11) / output (12) → type (2) → tensor_type (1) →
// elem_type (1), shape (2) → dim (1), and metadata_props (14); the weights are skipped over.

const DEFAULTS = {
  inputHeight: 288,
  inputWidth: 512,
  mean: [0.485, 0.456, 0.406],
  std: [0.229, 0.224, 0.225],
  scoreThreshold: 0.5,
};

class Reader {
  constructor(bytes, start = 0, end = bytes.length) {
    this.b = bytes;
    this.pos = start;
    this.end = end;
  }

  varint() {
    let value = 0;
    let mul = 1;
    for (;;) {
      if (this.pos >= this.end) throw new Error('truncated protobuf varint');
      const byte = this.b[this.pos++];
      value += (byte & 0x7f) * mul;
      if (byte < 0x80) return value;
      mul *= 128;
    }
  }

  /** Fields of this message: [fieldNumber, wireType, value], where a length-delimited value is
   *  a {start, end} view and a varint is a number. */
  *fields() {
    while (this.pos < this.end) {
      const key = this.varint();
      const field = Math.floor(key / 8);
      const wire = key & 7;
      if (wire === 0) yield [field, wire, this.varint()];
      else if (wire === 2) {
        const len = this.varint();
        const start = this.pos;
        this.pos += len;
        if (this.pos > this.end) throw new Error('truncated protobuf field');
        yield [field, wire, { start, end: this.pos }];
      } else if (wire === 1) this.pos += 8;
      else if (wire === 5) this.pos += 4;
      else throw new Error(`unsupported protobuf wire type ${wire}`);
    }
  }

  sub(view) {
    return new Reader(this.b, view.start, view.end);
  }

  text(view) {
    return new TextDecoder().decode(this.b.subarray(view.start, view.end));
  }
}

function readEntry(r, view) {
  const e = r.sub(view);
  let key = '', value = '';
  for (const [f, w, v] of e.fields()) {
    if (f === 1 && w === 2) key = e.text(v);
    if (f === 2 && w === 2) value = e.text(v);
  }
  return [key, value];
}

// TensorProto.DataType values the page names in its messages.
const ELEM_TYPES = { 1: 'float32', 3: 'int8', 2: 'uint8', 10: 'float16', 11: 'float64', 16: 'bfloat16' };

/** ValueInfoProto → {name, elemType (0: unknown), dims: (number|string)[]} */
function readValueInfo(r, view) {
  const vi = r.sub(view);
  let name = '';
  let elemType = 0;
  const dims = [];
  for (const [f, w, v] of vi.fields()) {
    if (f === 1 && w === 2) name = vi.text(v);
    if (f !== 2 || w !== 2) continue;
    const type = vi.sub(v);
    for (const [tf, tw, tv] of type.fields()) {
      if (tf !== 1 || tw !== 2) continue; // tensor_type
      const tensor = type.sub(tv);
      for (const [sf, sw, sv] of tensor.fields()) {
        if (sf === 1 && sw === 0) elemType = sv;
        if (sf !== 2 || sw !== 2) continue; // shape
        const shape = tensor.sub(sv);
        for (const [df, dw, dv] of shape.fields()) {
          if (df !== 1 || dw !== 2) continue; // dim
          const dim = shape.sub(dv);
          let d = '?';
          for (const [xf, xw, xv] of dim.fields()) {
            if (xf === 1 && xw === 0) d = xv;
            if (xf === 2 && xw === 2) d = dim.text(xv);
          }
          dims.push(d);
        }
      }
    }
  }
  return { name, elemType, dims };
}

/** {metadata: {key: value}, inputs, outputs: [{name, elemType, dims}]} of an ONNX file's bytes. */
export function readOnnx(bytes) {
  const r = new Reader(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes));
  const metadata = {};
  const inputs = [];
  const outputs = [];
  for (const [f, w, v] of r.fields()) {
    if (f === 14 && w === 2) {
      const [key, value] = readEntry(r, v);
      metadata[key] = value;
    } else if (f === 7 && w === 2) {
      const g = r.sub(v);
      for (const [gf, gw, gv] of g.fields()) {
        if (gf === 11 && gw === 2) inputs.push(readValueInfo(g, gv));
        if (gf === 12 && gw === 2) outputs.push(readValueInfo(g, gv));
      }
    }
  }
  return { metadata, inputs, outputs };
}

function numbers(text) {
  return text.split(',').map(Number);
}

/**
 * The page's configuration from a model: input size from the input's static shape (else the
 * metadata, else 288×512), normalisation and threshold from the metadata (else the spec's).
 * `notes` says what was assumed.
 */
export function modelConfig(bytes) {
  const { metadata, inputs, outputs } = readOnnx(bytes);
  const notes = [];
  const cfg = { ...DEFAULTS, name: metadata.weights_name || 'unnamed weights', metadata };
  let stored = {};
  try {
    stored = metadata['ttball.config'] ? JSON.parse(metadata['ttball.config']) : {};
  } catch {
    notes.push('ttball.config metadata is not JSON; ignored');
  }
  if (stored.input_height) cfg.inputHeight = stored.input_height;
  else if (metadata.input_height) cfg.inputHeight = Number(metadata.input_height);
  if (stored.input_width) cfg.inputWidth = stored.input_width;
  else if (metadata.input_width) cfg.inputWidth = Number(metadata.input_width);
  if (stored.mean) cfg.mean = stored.mean;
  else if (metadata.mean) cfg.mean = numbers(metadata.mean);
  if (stored.std) cfg.std = stored.std;
  else if (metadata.std) cfg.std = numbers(metadata.std);
  if (stored.score_threshold) cfg.scoreThreshold = stored.score_threshold;
  else if (metadata.score_threshold) cfg.scoreThreshold = Number(metadata.score_threshold);
  if (stored.name) cfg.name = stored.name;

  const input = inputs.find((i) => i.name === (metadata.input_name || 'frames')) || inputs[0];
  if (!input) throw new Error('the model has no graph input');
  cfg.inputName = input.name;
  const [, channels, h, w] = input.dims;
  if (input.dims.length !== 4 || (typeof channels === 'number' && channels !== 9)) {
    throw new Error(`model input ${input.name} has shape [${input.dims}]; expected [1, 9, H, W]`);
  }
  if (input.elemType && input.elemType !== 1) {
    const type = ELEM_TYPES[input.elemType] || `ONNX type ${input.elemType}`;
    const hint = input.elemType === 10 ? 'an FP16 export (--fp16)' : 'not an FP32 input';
    throw new Error(`model input ${input.name} is ${type}, ${hint}: the page runs FP32 or INT8 exports `
      + '(ttball export onnx, without --fp16; --int8 is fine)');
  }
  if (typeof h === 'number' && typeof w === 'number') {
    if (h !== cfg.inputHeight || w !== cfg.inputWidth) {
      notes.push(`input shape ${h}x${w} differs from the metadata's ${cfg.inputHeight}x${cfg.inputWidth}; using the shape`);
    }
    cfg.inputHeight = h;
    cfg.inputWidth = w;
  } else if (!metadata.input_height && !stored.input_height) {
    notes.push(`input size is dynamic and not in the metadata; assuming ${cfg.inputHeight}x${cfg.inputWidth}`);
  }
  const output = outputs[0];
  if (output && output.dims.length) {
    const [, oc, oh, ow] = output.dims;
    const fixed = (d, want) => typeof d !== 'number' || d === want;
    if (output.dims.length !== 4 || !fixed(oc, 3) || !fixed(oh, cfg.inputHeight) || !fixed(ow, cfg.inputWidth)) {
      throw new Error(`model output ${output.name} has shape [${output.dims.join(', ')}]; expected [1, 3, ${cfg.inputHeight}, `
        + `${cfg.inputWidth}] (three heatmaps at the input's size): not a ttball export?`);
    }
  }
  cfg.notes = notes;
  return cfg;
}
