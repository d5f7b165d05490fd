//! `slow`: activities that wait on the WASI monotonic clock before they answer, succeed,
//! fail or trap. The wait is `subscribe-duration` + `block`, which wasmtime serves as an
//! asynchronous host wait: no CPU is used, and the attempt can be interrupted meanwhile.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/slow",
    generate_all,
});

use exports::weir_examples::slow::sleeper::Guest;
use wasi::clocks::monotonic_clock;

struct Slow;

fn wait(millis: u64) {
    monotonic_clock::subscribe_duration(millis.saturating_mul(1_000_000)).block();
}

impl Guest for Slow {
    fn sleep(millis: u64) -> Result<u64, String> {
        wait(millis);
        Ok(millis)
    }

    fn fail(millis: u64) -> Result<u64, String> {
        wait(millis);
        Err(format!("failed on purpose after {millis} ms"))
    }

    fn crash(millis: u64) -> Result<u64, String> {
        wait(millis);
        panic!("crashed on purpose after {millis} ms");
    }
}

export!(Slow);
