"""`http-get` in Python: an activity that GETs a URL over wasi:http (which the host allows
only to the component's `allowed_hosts`) and returns status and body --
examples/activities/http-get (Rust). CPython has no sockets here: `poll_loop`, which
componentize-py generates beside the bindings, drives wasi:http from asyncio."""

import asyncio
from urllib.parse import urlsplit

import poll_loop
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.client import HttpResponse
from wit_world.imports.types import Fields, OutgoingRequest, Scheme_Http, Scheme_Https

MAX_BODY = 1 << 20


async def fetch(url: str) -> HttpResponse:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Err(f"invalid URL {url!r}: an http:// or https:// URL is expected")
    request = OutgoingRequest(Fields.from_list([]))
    request.set_scheme(Scheme_Http() if parts.scheme == "http" else Scheme_Https())
    request.set_authority(parts.netloc)
    request.set_path_with_query(parts.path + (f"?{parts.query}" if parts.query else "") or "/")
    try:
        response = await poll_loop.send(request)
    except Err as e:
        raise Err(f"GET {url} failed: {e.value}")
    status = response.status()
    stream = poll_loop.Stream(response.consume())
    body = bytearray()
    while (chunk := await stream.next()) is not None:
        body += chunk
        if len(body) > MAX_BODY:
            raise Err(f"the body of {url} is over {MAX_BODY} bytes")
    return HttpResponse(status, body.decode("utf-8", errors="replace"))


class Client(exports.Client):
    def get(self, url: str) -> HttpResponse:
        loop = poll_loop.PollLoop()
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(fetch(url))
