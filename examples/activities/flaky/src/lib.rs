//! `flaky`: fails its first `failures` attempts. The attempt number comes from an HTTP
//! counter (see the `weir-examples:flaky/flaky` WIT): retries repeat the same parameters,
//! so the count has to live outside the component.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/flaky",
    generate_all,
});

#[path = "../../../common/http_client.rs"]
mod http_client;

use exports::weir_examples::flaky::flaky::Guest;

struct Flaky;

fn attempt(counter_url: &str) -> Result<u32, String> {
    let response = http_client::get(counter_url, 64)?;
    if response.status != 200 {
        return Err(format!("counter {counter_url} answered status {}", response.status));
    }
    let text = String::from_utf8_lossy(&response.body);
    text.trim()
        .parse::<u32>()
        .map_err(|_| format!("counter {counter_url} answered {text:?}, not a number"))
}

impl Guest for Flaky {
    fn fail_first(counter_url: String, failures: u32) -> Result<u32, String> {
        let n = attempt(&counter_url)?;
        if n <= failures {
            Err(format!("attempt {n} of {failures} fails on purpose"))
        } else {
            Ok(n)
        }
    }

    fn trap_first(counter_url: String, failures: u32) -> Result<u32, String> {
        let n = attempt(&counter_url)?;
        if n <= failures {
            panic!("attempt {n} of {failures} traps on purpose");
        }
        Ok(n)
    }
}

export!(Flaky);
