//! `misbehave`: workflows the host must stop, each with a clear execution error, while it
//! keeps serving other executions.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/misbehave",
    generate_all,
});

use exports::weir_examples::workflows::misbehave::Guest;
use weir::workflow::host::log;
use weir::workflow::types::LogLevel;

struct Misbehave;

impl Guest for Misbehave {
    fn spin() -> Result<u64, String> {
        log(LogLevel::Info, "spinning forever");
        let mut i: u64 = 0;
        loop {
            i = core::hint::black_box(i.wrapping_add(1));
        }
    }

    fn hog_memory(chunk_kib: u32) -> Result<u64, String> {
        log(LogLevel::Info, &format!("allocating {chunk_kib} KiB chunks forever"));
        let chunk = (chunk_kib.max(1) as usize) * 1024;
        let mut kept: Vec<Vec<u8>> = Vec::new();
        let mut total: u64 = 0;
        loop {
            let mut block = vec![0u8; chunk];
            for i in (0..chunk).step_by(4096) {
                block[i] = 1;
            }
            total += chunk as u64;
            kept.push(core::hint::black_box(block));
            if total == u64::MAX {
                // Unreachable in practice; keeps `kept` and `total` observable.
                return Ok(kept.len() as u64);
            }
        }
    }
}

export!(Misbehave);
