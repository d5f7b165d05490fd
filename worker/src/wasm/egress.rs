//! Egress of activities: the hosts an activity's component may reach over `wasi:http`, from
//! its `allowed_hosts` in `components.toml`; every other request fails inside the guest with
//! `HTTP-request-denied` and is counted. Deny by default: a component that declares nothing
//! reaches nothing. (Workflows have no network at all: their linker has no `wasi:http`.)
//!
//! A rule is `scheme://host[:port]`: the scheme `http` or `https`; the host a name or an IP
//! address, or `*.` and a domain for its subdomains; the port a number, `*` for any, or
//! absent for the scheme's own (80, 443). Names are compared case-insensitively, as DNS does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

#[derive(Debug, thiserror::Error)]
#[error("allowed_hosts entry `{rule}` of component `{component}`: {reason}")]
pub struct EgressRuleError {
    pub component: String,
    pub rule: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    Exact(String),
    /// `*.example.com`: any name ending in this suffix, `.example.com`.
    SubdomainsOf(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    https: bool,
    host: Host,
    /// `None`: any port.
    port: Option<u16>,
}

/// Requests denied in this process, all components (`weir_egress_denied_total`): a counter
/// of the process like the allocator's, kept here so that every host counts into it.
static DENIED_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Requests denied in this process so far, all components.
pub fn denied_total() -> u64 {
    DENIED_TOTAL.load(Ordering::Relaxed)
}

/// One component's allow-list and its count of denied requests.
#[derive(Debug, Default)]
pub struct Egress {
    rules: Vec<Rule>,
    denied: AtomicU64,
}

impl Egress {
    /// Parses `allowed` (see the module docs) of `component`.
    pub fn parse(component: &str, allowed: &[String]) -> Result<Self, EgressRuleError> {
        let rules = allowed
            .iter()
            .map(|rule| {
                parse_rule(rule).map_err(|reason| EgressRuleError {
                    component: component.to_owned(),
                    rule: rule.clone(),
                    reason,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Egress {
            rules,
            denied: AtomicU64::new(0),
        })
    }

    /// Whether a request to `uri` may go out.
    pub fn permits(&self, uri: &http::Uri) -> bool {
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return false,
        };
        let Some(host) = uri.host() else {
            return false;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(default_port(https));
        self.rules.iter().any(|rule| {
            rule.https == https
                && rule.port.is_none_or(|p| p == port)
                && match &rule.host {
                    Host::Exact(name) => name.eq_ignore_ascii_case(host),
                    Host::SubdomainsOf(suffix) => {
                        host.len() > suffix.len()
                            && host.as_bytes()[host.len() - suffix.len()..]
                                .eq_ignore_ascii_case(suffix.as_bytes())
                    }
                }
        })
    }

    /// Requests refused so far.
    pub fn denied(&self) -> u64 {
        self.denied.load(Ordering::Relaxed)
    }
}

/// The port a URI or rule without one means.
fn default_port(https: bool) -> u16 {
    if https { 443 } else { 80 }
}

fn parse_rule(rule: &str) -> Result<Rule, &'static str> {
    let (scheme, rest) = rule
        .split_once("://")
        .ok_or("expected scheme://host[:port]")?;
    let https = match scheme {
        "https" => true,
        "http" => false,
        _ => return Err("the scheme must be http or https"),
    };
    if rest.contains('/') || rest.contains('@') || rest.contains('?') {
        return Err("only scheme, host and port: no path, user or query");
    }
    // `[v6]:port`, `[v6]`, `host:port`, `host`.
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or("unclosed `[` of an IPv6 address")?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("expected `:port` after `]`")?),
        };
        (addr, port)
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return Err("empty host");
    }
    let port = match port {
        None => Some(default_port(https)),
        Some("*") => None,
        Some(p) => Some(
            p.parse::<u16>()
                .map_err(|_| "the port must be 0-65535 or *")?,
        ),
    };
    let host = match host.strip_prefix("*.") {
        Some(domain) if !domain.is_empty() && !domain.contains('*') => {
            Host::SubdomainsOf(format!(".{domain}"))
        }
        _ if host.contains('*') => return Err("`*` only as a whole first label (`*.domain`)"),
        _ => Host::Exact(host.to_owned()),
    };
    Ok(Rule { https, host, port })
}

/// The `wasi:http` hooks of an activity instance: its component's [`Egress`], and its secrets,
/// redacted from the URI of a denied request before it is logged.
pub struct EgressHooks(pub Arc<Egress>, pub Arc<super::secrets::ComponentSecrets>);

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<WasiBody>,
                        Box<dyn Future<Output = Result<(), Error>> + Send>,
                    ),
                    Error,
                >,
            > + Send,
    > {
        if !self.0.permits(request.uri()) {
            self.0.denied.fetch_add(1, Ordering::Relaxed);
            DENIED_TOTAL.fetch_add(1, Ordering::Relaxed);
            let uri = request.uri().to_string();
            tracing::warn!(uri = %self.1.redact_uri(&uri), "an activity's HTTP request to a host its component does not allow was denied");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        drop(fut);
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), Error>> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn egress(rules: &[&str]) -> Egress {
        Egress::parse(
            "c",
            &rules.iter().map(|r| (*r).to_owned()).collect::<Vec<_>>(),
        )
        .expect("valid rules")
    }

    #[test]
    fn requests_are_allowed_only_by_a_matching_rule() {
        let e = egress(&[
            "http://127.0.0.1:8080",
            "https://api.example.com",
            "https://*.svc.local:*",
            "http://[::1]:9000",
        ]);
        for (uri, allowed) in [
            ("http://127.0.0.1:8080/x", true),
            ("http://127.0.0.1:8081/x", false),
            ("https://127.0.0.1:8080/x", false),
            ("https://api.example.com/v1", true),
            ("https://API.Example.com/v1", true),
            ("https://api.example.com:8443/v1", false),
            ("http://api.example.com/v1", false),
            ("https://evil-api.example.com/", false),
            ("https://a.svc.local:1234/", true),
            ("https://a.b.svc.local/", true),
            ("https://svc.local/", false),
            ("https://xsvc.local/", false),
            ("http://[::1]:9000/", true),
            ("http://[::1]:9001/", false),
        ] {
            let uri: http::Uri = uri.parse().expect("uri");
            assert_eq!(e.permits(&uri), allowed, "{uri}");
        }
        assert!(!Egress::default().permits(&"http://127.0.0.1/".parse().unwrap()));
    }

    #[test]
    fn bad_rules_are_refused_with_the_reason() {
        for (rule, needle) in [
            ("127.0.0.1:80", "scheme://"),
            ("ftp://x", "http or https"),
            ("http://x/path", "no path"),
            ("http://x:99999", "port"),
            ("http://a*.b", "`*` only"),
            ("http://", "empty host"),
        ] {
            let e = Egress::parse("c", &[rule.to_owned()]).expect_err(rule);
            assert!(e.to_string().contains(needle), "{rule}: {e}");
            assert!(e.to_string().contains("component `c`"), "{e}");
        }
    }
}
