//! `http-get`: GETs a URL through outgoing `wasi:http` and returns status and body.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/http-get",
    generate_all,
});

#[path = "../../../common/http_client.rs"]
mod http_client;

use exports::weir_examples::http::client::{Guest, HttpResponse};

const MAX_BODY: usize = 1 << 20;

struct HttpGet;

impl Guest for HttpGet {
    fn get(url: String) -> Result<HttpResponse, String> {
        let response = http_client::get(&url, MAX_BODY)?;
        Ok(HttpResponse {
            status: response.status,
            body: String::from_utf8_lossy(&response.body).into_owned(),
        })
    }
}

export!(HttpGet);
