"""The HTTP server the loopback fakes run on.

A client that gives up mid-response (a check's timeout on a loaded machine, a cancelled turn) makes
the handler's write fail; the standard server then prints a traceback to stderr, which a test that
captures the CLI's output would count against the product. A dropped connection is the client's
business, so it is not reported; anything else still is.
"""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer


class LoopbackServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)
