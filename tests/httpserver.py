"""A real HTTP server on 127.0.0.1 for download tests (http.server in a thread, ephemeral port).

    with FileServer({"data.zip": b"..."}) as srv:
        url = srv.url("data.zip")
        srv.drop_after, srv.drops = 1000, 1     # first answer: close the connection after 1000 body bytes
        srv.fail_status, srv.fails = 500, 2     # first 2 requests: HTTP 500
        srv.stall_s = 1.0                       # ... or go silent that long at that point (read timeout)
        srv.ranges = False                      # ignore Range headers (answer 200 with the whole file)
        srv.drip_s = 0.05                       # send the body a byte at a time, this long apart
        srv.drip_after = 30_000                 # ... after sending this many bytes of each answer at once
        srv.endless = True                      # answer 200 with no Content-Length and a body that never ends
        ...
        srv.log                                 # [(path, Range header or None, status), ...]

Unknown paths answer 404. Settings can change between requests; each request reads them once.
"""
from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional


class FileServer:
    def __init__(self, files: Optional[dict[str, bytes]] = None):
        self.files: dict[str, bytes] = dict(files or {})
        self.ranges = True                     # honour `Range: bytes=N-`
        self.drop_after: Optional[int] = None  # body bytes sent before the connection is cut
        self.drops = 0                         # how many answers are cut that way
        self.stall_s: Optional[float] = None   # instead of closing at once, go silent this long first
        self.drip_s: Optional[float] = None
        self.drip_after = 0
        self.endless = False
        self.fail_status: Optional[int] = None
        self.fails: Optional[int] = None       # first k requests fail (None: all of them)
        self.log: list[tuple[str, Optional[str], int]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def ranges_asked(self) -> list[str]:
        return [r for _, r, _ in self.log if r is not None]

    def __enter__(self) -> "FileServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # ----------------------------------------------------------------- request handling

    def _plan(self, path: str, range_header: Optional[str]) -> tuple[int, dict, bytes, Optional[int]]:
        """(status, headers, body, cut after n bytes or None) for one request; updates counters."""
        with self._lock:
            if self.fail_status is not None and (self.fails is None or self.fails > 0):
                if self.fails is not None:
                    self.fails -= 1
                plan = (self.fail_status, {}, b"server trouble\n", None)
            elif path not in self.files:
                plan = (404, {}, b"not found\n", None)
            else:
                data = self.files[path]
                m = re.fullmatch(r"bytes=(\d+)-", range_header or "")
                if self.ranges and m:
                    start = int(m.group(1))
                    if start >= len(data):
                        plan = (416, {"Content-Range": f"bytes */{len(data)}"}, b"", None)
                    else:
                        plan = (206, {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"},
                                data[start:], None)
                else:
                    plan = (200, {}, data, None)
                if plan[0] in (200, 206) and self.drops > 0 and self.drop_after is not None:
                    self.drops -= 1
                    plan = (*plan[:3], self.drop_after)
            self.log.append((path, range_header, plan[0]))
            return plan

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"      # one request per connection: a cut is a plain EOF

            def do_GET(self):  # noqa: N802 (http.server API)
                status, headers, body, cut = server._plan(self.path.lstrip("/"), self.headers.get("Range"))
                endless, drip_s, fast = server.endless, server.drip_s, server.drip_after
                if status in (200, 206) and (endless or drip_s):
                    self._trickle(status, headers, body, endless, drip_s, fast)
                    return
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                self.wfile.write(body if cut is None else body[:cut])
                self.wfile.flush()
                if cut is not None and server.stall_s:
                    time.sleep(server.stall_s)     # the client's read timeout fires first
                self.close_connection = True

            def _trickle(self, status, headers, body, endless, drip_s, fast=0):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                if not endless:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    if endless:                        # the file, then zeros for ever (until the client hangs up)
                        self.wfile.write(body)
                        while True:
                            self.wfile.write(bytes(1 << 16))
                    self.wfile.write(body[:fast])
                    self.wfile.flush()
                    for i in range(fast, len(body)):
                        self.wfile.write(body[i:i + 1])
                        self.wfile.flush()
                        time.sleep(drip_s)
                except OSError:
                    pass
                self.close_connection = True

            def log_message(self, *args):      # keep test output clean
                pass

        return Handler
