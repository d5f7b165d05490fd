"""The activity: the component that may touch the outside world (wasi:http reaches the hosts
components.toml allows); here it does not."""

from componentize_py_types import Err
from wit_world import exports


class Activities(exports.Activities):
    def greet(self, name: str) -> str:
        if not name:
            raise Err("a name is required")
        return f"hello, {name}"
