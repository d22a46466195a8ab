"""A small OpenAI-compatible server over a local generator (the transformers backend by default).

``POST /v1/chat/completions`` and ``/v1/completions``, ``GET /v1/models`` and ``/health``:
enough for ``OpenAIGenerator`` and other OpenAI clients to talk to a model on a machine without
vLLM. Requests are served one model call at a time (the model is not thread-safe).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from refinery.models.generate import Sampling


def make_server(generator, model_name: str, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # quiet; never echo request headers (keys) to logs
            pass

        def _send(self, status: int, payload: dict):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") in ("/health", ""):
                return self._send(200, {"status": "ok"})
            if self.path.rstrip("/") == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": model_name, "object": "model"}]})
            self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            route = self.path.rstrip("/")
            if route not in ("/v1/chat/completions", "/v1/completions"):
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                chat = route.endswith("chat/completions")
                if chat:
                    prompt = "\n".join(m["content"] for m in body["messages"] if m.get("role") == "user")
                else:
                    prompt = body["prompt"]
                sampling = Sampling(temperature=float(body.get("temperature", 0.7)),
                                    top_p=float(body.get("top_p", 0.9)),
                                    max_new_tokens=int(body.get("max_tokens", 48)), n=int(body.get("n", 1)),
                                    seed=int(body.get("seed", 0)))
            except (KeyError, ValueError, TypeError) as e:
                return self._send(400, {"error": {"message": f"bad request: {e}"}})
            with lock:
                generator.chat = chat
                texts = generator.generate([prompt], sampling)[0]
            choices = [({"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                        if chat else {"index": i, "text": t, "finish_reason": "stop"}) for i, t in enumerate(texts)]
            self._send(200, {"id": f"cmpl-{uuid.uuid4().hex}", "object": "chat.completion" if chat else
                             "text_completion", "created": int(time.time()), "model": model_name, "choices": choices})

    return ThreadingHTTPServer((host, port), Handler)
