"""moto S3 servers that damage or refuse some requests, for tests of failures. Each is the same
in-process store as any other moto server of this process: only its answers differ."""

from __future__ import annotations

import urllib.parse

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server


class _WrappedMotoServer(ThreadedMotoServer):
    def wrap(self, app):
        """The WSGI application served instead of moto's ``app``."""
        raise NotImplementedError

    def _server_entry(self):
        app = self.wrap(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


class DamagingMotoServer(_WrappedMotoServer):
    """Objects whose key holds "damaged" come back with one bit flipped: what a store that
    damaged an object at rest returns. Only object bodies (GET without a query; not their tags)
    are damaged, and uploads pass unchanged, so a backup completes and only its read-back
    differs."""

    def wrap(self, app):
        def damaging(environ, start_response):
            if (
                environ["REQUEST_METHOD"] != "GET"
                or "damaged" not in environ["PATH_INFO"]
                or environ.get("QUERY_STRING")
            ):
                return app(environ, start_response)
            answer = {}

            def keep(status, headers, *_):
                answer.update(status=status, headers=headers)

            body = bytearray(b"".join(app(environ, keep)))
            if answer["status"].startswith("200") and body:
                body[len(body) // 2] ^= 0x01
            start_response(answer["status"], answer["headers"])
            return [bytes(body)]

        return damaging


class RefusingMotoServer(_WrappedMotoServer):
    """Requests that ``refuse(method, path, query)`` picks get an S3 error ``(status, code)``
    instead of moto's answer: what a store without a feature, or credentials allowed less,
    answer. ``query`` is parsed (``parse_qs``, blanks kept)."""

    @staticmethod
    def refuse(method, path, query):
        return None

    def wrap(self, app):
        def refusing(environ, start_response):
            query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
            answer = self.refuse(environ["REQUEST_METHOD"], environ["PATH_INFO"], query)
            if answer is None:
                return app(environ, start_response)
            status, code = answer
            length = int(environ.get("CONTENT_LENGTH") or 0)
            if length:  # read, so that the connection stays usable for the next request
                environ["wsgi.input"].read(length)
            body = (
                '<?xml version="1.0" encoding="UTF-8"?><Error><Code>'
                f"{code}</Code><Message>refused by the test server</Message></Error>"
            ).encode()
            start_response(
                status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
            )
            return [body]

        return refusing


class NoTaggingMotoServer(RefusingMotoServer):
    """A store that does not implement object tagging, as some S3-compatible stores do not."""

    @staticmethod
    def refuse(method, path, query):
        return ("501 Not Implemented", "NotImplemented") if "tagging" in query else None


class NothingRecordedMotoServer(RefusingMotoServer):
    """No object tagging, and credentials that may not write ``*.sha256`` objects: an upload's
    SHA-256 cannot be recorded anywhere."""

    @staticmethod
    def refuse(method, path, query):
        if "tagging" in query:
            return "501 Not Implemented", "NotImplemented"
        if method == "PUT" and path.endswith(".sha256"):
            return "403 Forbidden", "AccessDenied"
        return None


class PartRefusingMotoServer(RefusingMotoServer):
    """Refuses the upload of part 3 of any multipart upload (AccessDenied: not retried)."""

    @staticmethod
    def refuse(method, path, query):
        if method == "PUT" and query.get("partNumber") == ["3"]:
            return "403 Forbidden", "AccessDenied"
        return None
