"""A moto S3 server that damages what it returns, for tests of reading snapshots back."""

from __future__ import annotations

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server


class DamagingMotoServer(ThreadedMotoServer):
    """moto (the same in-process store as any other moto server of this process), except that
    objects whose key holds "damaged" come back with one bit flipped: what a store that damaged
    an object at rest returns. Uploads pass unchanged, so a backup completes and only its
    read-back differs."""

    def _server_entry(self):
        app = DomainDispatcherApplication(create_backend_app)

        def damaging(environ, start_response):
            if environ["REQUEST_METHOD"] != "GET" or "damaged" not in environ["PATH_INFO"]:
                return app(environ, start_response)
            answer = {}

            def keep(status, headers, *_):
                answer.update(status=status, headers=headers)

            body = bytearray(b"".join(app(environ, keep)))
            if answer["status"].startswith("200") and body:
                body[len(body) // 2] ^= 0x01
            start_response(answer["status"], answer["headers"])
            return [bytes(body)]

        self._server = make_server(
            self._ip_address, self._port, damaging, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()
