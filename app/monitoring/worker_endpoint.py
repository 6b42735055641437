"""A `closer worker`'s own GET /metrics, on a port of its own (`--metrics-port`).

A worker in another container or on another machine (docker-compose's `worker` and
`trainer`) has pids of its own, so it cannot count into the web's folder: the web could
neither tell its processes apart from its own nor see that one died mid-fit. It serves its
counts itself instead, one more target Prometheus scrapes; Prometheus adds the targets up
(`sum(closer_fits_running)`), and a worker that dies takes its target down with it, so its
fits stop counting. The queue's depth is the database's, reported by the web alone.

The endpoint takes the same bearer token as the web's (CLOSER_METRICS_TOKEN), answers one
request at a time and gives a silent client a few seconds: scraping is a handful of
requests a minute from one Prometheus, and nothing else should be talking to this port."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import urlsplit

from app.core import metrics

# A client that sends no request within this long is dropped, so it holds up no scrape.
CLIENT_SECONDS = 5.0


class _MetricsServer(HTTPServer):
    def __init__(self, address: tuple[str, int], token: str, client_seconds: float) -> None:
        self.token = token
        self.client_seconds = client_seconds
        super().__init__(address, _ScrapeHandler)


class _ScrapeHandler(BaseHTTPRequestHandler):
    server: _MetricsServer
    server_version = "closer-worker"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.client_seconds)

    def do_GET(self) -> None:
        if urlsplit(self.path).path != "/metrics":
            self._reply(404, b"not found: a worker's port serves GET /metrics alone\n")
        elif not metrics.bearer_matches(self.headers.get("Authorization"), self.server.token):
            self._reply(
                401,
                b"send the metrics token as 'Authorization: Bearer <token>'\n",
                {"WWW-Authenticate": "Bearer"},
            )
        else:
            self._reply(200, metrics.exposition(), content_type=metrics.CONTENT_TYPE)

    def _reply(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "text/plain; charset=utf-8",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        # A scrape every few seconds would fill the worker's log with nothing worth reading.
        pass


class WorkerMetricsEndpoint:
    """Serves this process's counts at http://host:port/metrics from a thread of its own,
    until `close()`. Binding happens in the constructor: a port already taken fails the
    worker's start, not a later scrape."""

    def __init__(
        self, host: str, port: int, token: str, client_seconds: float = CLIENT_SECONDS
    ) -> None:
        self._server = _MetricsServer((host, port), token, client_seconds)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="closer-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
