"""`sandbox` (Python only): what a workflow's runtime meets when it reaches for the machine.
Files and sockets are refused and the environment is empty (the deterministic WASI of
docs/design/deterministic-wasi.md): a workflow reaches the outside through activities."""

import os
import socket

from wit_world import exports


def attempt(what: str, action) -> str:
    try:
        return f"{what}: allowed: {action()!r}"
    except Exception as e:  # the refusal is what is probed
        return f"{what}: refused: {type(e).__name__}: {e}"


def connect() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.connect(("127.0.0.1", 9))


class Sandbox(exports.Sandbox):
    def probe(self) -> list[str]:
        return [
            attempt("read /etc/hostname", lambda: open("/etc/hostname").read()),
            attempt("write /tmp/weir-probe", lambda: open("/tmp/weir-probe", "w").write("x")),
            attempt("list /", lambda: os.listdir("/")),
            attempt("connect 127.0.0.1:9", connect),
            f"environment: {dict(os.environ)!r}",
        ]
