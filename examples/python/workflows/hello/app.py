"""`hello` in Python: the trivial workflow (examples/workflows/hello in Rust)."""

from componentize_py_types import Err
from wit_world import exports


class Hello(exports.Hello):
    def greet(self, name: str) -> str:
        if not name:
            # The exported function's `err`: raise Err with exactly the WIT error value.
            raise Err("a name is required")
        return f"hello, {name}"
