//! A minimal blocking HTTP GET over `wasi:http/outgoing-handler@0.2.12`, shared by the
//! `http-get` and `flaky` activities (included with `#[path]`; each crate generates the
//! `wasi` bindings in its own world, under `crate::wasi`).

use crate::wasi::http::outgoing_handler;
use crate::wasi::http::types::{Fields, IncomingBody, Method, OutgoingRequest, Scheme};
use crate::wasi::io::streams::StreamError;

pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

struct Url {
    scheme: Scheme,
    authority: String,
    path_with_query: String,
}

fn parse_url(url: &str) -> Result<Url, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("invalid URL {url:?}: no scheme"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(format!("invalid URL {url:?}: unsupported scheme {other:?}")),
    };
    // The fragment is never sent.
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, path_with_query) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.is_empty() || authority.contains('@') || authority.contains(char::is_whitespace) {
        return Err(format!("invalid URL {url:?}: bad host"));
    }
    Ok(Url {
        scheme,
        authority: authority.to_string(),
        path_with_query,
    })
}

/// GETs `url`; fails when the body exceeds `max_body` bytes.
#[allow(dead_code)] // not every including crate calls both
pub fn get(url: &str, max_body: usize) -> Result<Response, String> {
    get_with_headers(url, &[], max_body)
}

/// [`get`] with request headers.
pub fn get_with_headers(
    url: &str,
    headers: &[(&str, &str)],
    max_body: usize,
) -> Result<Response, String> {
    let url = parse_url(url)?;
    let fields: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    let fields = Fields::from_list(&fields).map_err(|e| format!("invalid header: {e:?}"))?;
    let request = OutgoingRequest::new(fields);
    request
        .set_method(&Method::Get)
        .map_err(|()| "invalid method".to_string())?;
    request
        .set_scheme(Some(&url.scheme))
        .map_err(|()| "invalid scheme".to_string())?;
    request
        .set_authority(Some(&url.authority))
        .map_err(|()| format!("invalid authority {:?}", url.authority))?;
    request
        .set_path_with_query(Some(&url.path_with_query))
        .map_err(|()| format!("invalid path {:?}", url.path_with_query))?;

    let pending = outgoing_handler::handle(request, None)
        .map_err(|e| format!("request failed: {e:?}"))?;
    let response = loop {
        match pending.get() {
            Some(response) => break response,
            None => pending.subscribe().block(),
        }
    };
    let response = response
        .map_err(|()| "response already taken".to_string())?
        .map_err(|e| format!("request failed: {e:?}"))?;
    let status = response.status();

    let body = response
        .consume()
        .map_err(|()| "body already consumed".to_string())?;
    let stream = body
        .stream()
        .map_err(|()| "body stream already taken".to_string())?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => {
                bytes.extend_from_slice(&chunk);
                if bytes.len() > max_body {
                    return Err(format!("response body over {max_body} bytes"));
                }
            }
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(format!("reading the body failed: {}", e.to_debug_string()))
            }
        }
    }
    drop(stream);
    drop(IncomingBody::finish(body));
    Ok(Response {
        status,
        body: bytes,
    })
}
