"""A stand-in worker that answers every frame at once (no decode, no network): how many frames
per second one `ttball loadtest` process can send and receive.

    python scripts/loadtest_sink.py 8798 &
    ttball loadtest http://127.0.0.1:8798 --clips real_rally_a.mp4 --sessions 96 --fps 60 \
        --duration 6 --max-frames 120 --deadline-ms 50 --drain-timeout 3

It speaks just enough of the worker's protocol: ``/readyz``, ``POST /v1/sessions`` and the
session WebSocket (one ``result`` per binary frame, ``end`` after ``finish``). Numbers measured
with it: docs/serve.md ("Load test").
"""

from __future__ import annotations

import json
import sys
import uuid

import uvicorn
from fastapi import FastAPI, WebSocket

app = FastAPI()


@app.get("/readyz")
def ready() -> dict[str, bool]:
    return {"ready": True}


@app.post("/v1/sessions", status_code=201)
def create() -> dict[str, str]:
    return {"id": uuid.uuid4().hex}


@app.websocket("/v1/sessions/{sid}/stream")
async def stream(ws: WebSocket, sid: str) -> None:
    await ws.accept()
    frame = 0
    while True:
        message = await ws.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes") is not None:
            await ws.send_text(json.dumps({"type": "result", "frame": frame, "visible": False}))
            frame += 1
        else:  # {"type": "finish"}
            await ws.send_text(json.dumps({"type": "end"}))
            await ws.close()
            return


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8798
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_per_message_deflate=False)
