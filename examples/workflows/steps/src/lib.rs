//! `steps`: `count` sequential calls of the `compute` activity's `fibonacci`, one after the
//! other. Each call is a direct (blocking) call: one child request, one response, so an
//! execution has exactly `count` request → response steps. Used by the step-latency
//! benchmark (`tests/benches/stack.rs`).

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/steps",
    generate_all,
});

use exports::weir_examples::workflows::steps::Guest;
use weir_examples::compute::math::fibonacci;

struct Steps;

impl Guest for Steps {
    fn fibonacci_chain(n: u8, count: u32) -> Result<u64, String> {
        let mut sum: u64 = 0;
        for step in 0..count {
            let value =
                fibonacci(n).map_err(|e| format!("step {step}: fibonacci({n}) failed: {e}"))?;
            sum = sum
                .checked_add(value)
                .ok_or_else(|| "the sum does not fit a u64".to_string())?;
        }
        Ok(sum)
    }
}

export!(Steps);
