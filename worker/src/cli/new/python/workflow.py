"""The workflow: greets through the activity, waits a durable second, answers. Everything it
does outside its own memory goes through the activity or the Weir host, and is recorded."""

from wit_world import exports
from wit_world.imports.activities import greet
from wit_world.imports.host import sleep
from wit_world.imports.types import Duration_Seconds, ScheduleAt_In


class Workflows(exports.Workflows):
    def run(self, name: str) -> str:
        # A direct call of the activity: one child execution, its answer recorded. Its `err`
        # raises Err, which is this workflow's `err` as well.
        greeting = greet(name)
        sleep(ScheduleAt_In(Duration_Seconds(1)))
        return f"{greeting}, a durable second later"
