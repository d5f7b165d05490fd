//! `api-call`: one direct call of the `leaky` activity (an API client whose token is a secret
//! the operator gives the worker); the security tests run it end to end.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/api-call",
    generate_all,
});

use exports::weir_examples::workflows::api_call::Guest;
use weir_examples::secrets::leaky::call_with_token;

struct ApiCall;

impl Guest for ApiCall {
    fn call(url: String) -> Result<String, String> {
        call_with_token(&url)
    }
}

export!(ApiCall);
