//! What a web page the operator visits could make the API do (issue 33 F8), refused before any
//! handler runs, with tokens or without:
//!
//! - **Cross-site writes.** A page on another origin may send a `POST` without asking first
//!   (a "simple" request) only with a `text/plain`, form or multipart body, or none. So a
//!   `POST` or `PUT` must say `Content-Type: application/json` (`415 unsupported_media_type`
//!   otherwise): a page that sets it must ask the browser first (a CORS preflight), which this
//!   API never grants. A write that carries an `Origin` must come from the API's own origin
//!   (`403 forbidden_origin`).
//! - **DNS rebinding.** A page can point a name it controls at `127.0.0.1` and then read the
//!   API as its own origin; the request then names that host. So the `Host` of every request
//!   must be an IP address, `localhost`, or a name the operator allowed
//!   (`--api-allowed-host NAME`, repeatable; `*` allows any), `403 forbidden_host` otherwise.
//!
//! The web UI is served by the same server, so its requests pass all three checks.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// The host names, besides IP addresses and `localhost`, that requests may name.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts {
    names: Vec<String>,
    any: bool,
}

impl AllowedHosts {
    /// From `--api-allowed-host` values: names (case-insensitive, without a port), or `*`.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut allowed = AllowedHosts::default();
        for name in names {
            let name = name.trim().to_ascii_lowercase();
            if name == "*" {
                allowed.any = true;
            } else if !name.is_empty() {
                allowed.names.push(name);
            }
        }
        allowed
    }

    /// Whether a request may name `host` (a `Host` header's value: a name or an address, and
    /// perhaps a port).
    pub fn allows(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let name = host_name(host).to_ascii_lowercase();
        name.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || self.names.contains(&name)
    }
}

/// The name or address of a `Host` value without its port (`[::1]:80` → `::1`).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Whether a `Content-Type` value is JSON (`application/json`, parameters allowed).
fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// What is wrong with a request, if anything (see the module docs).
fn refusal(allowed: &AllowedHosts, method: &Method, headers: &HeaderMap) -> Option<ApiError> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match host {
        Some(host) if allowed.allows(host) => {}
        _ => {
            let named = host.unwrap_or("(none)");
            return Some(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!(
                    "requests naming host `{named}` are refused (it could be a DNS rebinding): \
                     start `weir serve` with --api-allowed-host {} to serve it",
                    host.map_or("NAME", host_name)
                ),
            ));
        }
    }
    if *method == Method::POST || *method == Method::PUT {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        if !content_type.is_some_and(is_json) {
            return Some(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "a {method} must be sent with `Content-Type: application/json` (it has {})",
                    content_type.map_or("none".to_owned(), |c| format!("`{c}`"))
                ),
            ));
        }
    }
    if *method != Method::GET && *method != Method::HEAD {
        let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
        if let (Some(origin), Some(host)) = (origin, host) {
            let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
            if !authority.eq_ignore_ascii_case(host) {
                return Some(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden_origin",
                    format!(
                        "a write from a page of `{origin}` is refused: only the API's own origin may write"
                    ),
                ));
            }
        }
    }
    None
}

/// The middleware of the API's router.
pub async fn check(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    match refusal(&allowed, request.method(), request.headers()) {
        Some(error) => {
            tracing::warn!(method = %request.method(), uri = %request.uri(), code = error.code, "API request refused: {}", error.message);
            error.into_response()
        }
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn code(
        allowed: &AllowedHosts,
        method: Method,
        pairs: &[(header::HeaderName, &str)],
    ) -> Option<&'static str> {
        refusal(allowed, &method, &headers(pairs)).map(|e| e.code)
    }

    #[test]
    fn hosts_are_addresses_localhost_or_allowed_names() {
        let none = AllowedHosts::new([]);
        for host in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "localhost:8080",
            "LOCALHOST",
            "10.1.2.3",
        ] {
            assert!(none.allows(host), "{host}");
        }
        for host in [
            "evil.example:8080",
            "localhost.evil.example",
            "weir.internal",
        ] {
            assert!(!none.allows(host), "{host}");
        }
        let named = AllowedHosts::new(["Weir.Internal"]);
        assert!(named.allows("weir.internal:8080"));
        assert!(!named.allows("evil.example"));
        assert!(AllowedHosts::new(["*"]).allows("anything.example:1"));
    }

    #[test]
    fn a_rebound_host_is_refused_even_for_reads() {
        let allowed = AllowedHosts::default();
        assert_eq!(
            code(
                &allowed,
                Method::GET,
                &[(header::HOST, "evil.example:8080")]
            ),
            Some("forbidden_host")
        );
        assert_eq!(code(&allowed, Method::GET, &[]), Some("forbidden_host"));
        assert_eq!(
            code(&allowed, Method::GET, &[(header::HOST, "127.0.0.1:8080")]),
            None
        );
    }

    #[test]
    fn a_write_must_be_json_and_from_the_apis_own_origin() {
        let allowed = AllowedHosts::default();
        let host = (header::HOST, "127.0.0.1:8080");
        let json = (header::CONTENT_TYPE, "application/json; charset=utf-8");
        // The simple requests a page on another origin may send without a preflight.
        for content_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            let pairs = [host.clone(), (header::CONTENT_TYPE, content_type)];
            assert_eq!(
                code(&allowed, Method::POST, &pairs),
                Some("unsupported_media_type"),
                "{content_type}"
            );
        }
        assert_eq!(
            code(&allowed, Method::POST, std::slice::from_ref(&host)),
            Some("unsupported_media_type")
        );
        assert_eq!(
            code(&allowed, Method::POST, &[host.clone(), json.clone()]),
            None
        );
        assert_eq!(
            code(
                &allowed,
                Method::PUT,
                &[host.clone(), (header::CONTENT_TYPE, "text/plain")]
            ),
            Some("unsupported_media_type")
        );
        assert_eq!(
            code(&allowed, Method::DELETE, std::slice::from_ref(&host)),
            None
        );
        let from = |origin| [host.clone(), json.clone(), (header::ORIGIN, origin)];
        assert_eq!(
            code(&allowed, Method::POST, &from("http://127.0.0.1:8080")),
            None
        );
        assert_eq!(
            code(&allowed, Method::POST, &from("http://127.0.0.1:9999")),
            Some("forbidden_origin")
        );
        assert_eq!(
            code(
                &allowed,
                Method::DELETE,
                &[host.clone(), (header::ORIGIN, "http://evil.example")]
            ),
            Some("forbidden_origin")
        );
        // Reads carry no Origin check (a page can embed, not read, another origin's answer).
        assert_eq!(
            code(
                &allowed,
                Method::GET,
                &[host, (header::ORIGIN, "http://evil.example")]
            ),
            None
        );
    }
}
