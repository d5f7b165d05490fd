"""`clock-random` in Python: what a Python workflow reads from its runtime -- time.time_ns(),
time.monotonic_ns(), random, os.urandom(), print() -- which CPython takes from WASI. The host
gives workflows a deterministic WASI (docs/design/deterministic-wasi.md): a run, a rebuild and
a replay read the same values."""

import os
import random
import time

from wit_world import exports
from wit_world.exports.clock_random import Reading
from wit_world.imports.host import sleep
from wit_world.imports.types import Duration_Milliseconds, ScheduleAt_In


def read() -> Reading:
    return Reading(
        wall_nanos=time.time_ns(),
        monotonic_nanos=time.monotonic_ns(),
        random=random.getrandbits(64),
        bytes=os.urandom(8).hex(),
        seed=random.getrandbits(64),
    )


class ClockRandom(exports.ClockRandom):
    def run(self, rounds: int, millis: int) -> list[Reading]:
        readings = []
        for round_ in range(rounds):
            first, second = read(), read()
            print(f"round {round_}: wall {first.wall_nanos} ns")
            readings += [first, second]
            sleep(ScheduleAt_In(Duration_Milliseconds(millis)))
        return readings
