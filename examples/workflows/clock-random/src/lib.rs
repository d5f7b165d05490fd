//! `clock-random`: reads the WASI clocks and random numbers in a loop and prints to stdout,
//! as the runtime of an interpreted workflow (JavaScript, Python) does. The host gives
//! workflows a deterministic WASI (`docs/design/deterministic-wasi.md`): a run, a rebuild
//! and a replay of its history read the same values, and the reads record nothing.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/clock-random",
    generate_all,
});

use exports::weir_examples::workflows::clock_random::{Guest, Reading};
use wasi::cli::stdout::get_stdout;
use wasi::clocks::{monotonic_clock, wall_clock};
use wasi::random::{insecure_seed, random};
use weir::workflow::host::sleep;
use weir::workflow::types::{Duration, ScheduleAt};

struct ClockRandom;

fn read() -> Reading {
    let wall = wall_clock::now();
    let bytes = random::get_random_bytes(8);
    Reading {
        wall_nanos: wall.seconds * 1_000_000_000 + u64::from(wall.nanoseconds),
        monotonic_nanos: monotonic_clock::now(),
        random: random::get_random_u64(),
        bytes: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        seed: insecure_seed::insecure_seed().0,
    }
}

impl Guest for ClockRandom {
    fn run(rounds: u32, millis: u64) -> Result<Vec<Reading>, String> {
        let stdout = get_stdout();
        let mut readings = Vec::new();
        for round in 0..rounds {
            let first = read();
            let second = read();
            // Time stands still within a step; a pollable of the clock is ready at once.
            monotonic_clock::subscribe_duration(3_600_000_000_000).block();
            let line = format!("round {round}: wall {} ns\n", first.wall_nanos);
            let _ = stdout.blocking_write_and_flush(line.as_bytes());
            readings.push(first);
            readings.push(second);
            sleep(ScheduleAt::In(Duration::Milliseconds(millis)));
        }
        Ok(readings)
    }
}

export!(ClockRandom);
