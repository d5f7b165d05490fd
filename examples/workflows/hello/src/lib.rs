//! `hello`: the trivial workflow. No host call, no child: instantiating and running it measures
//! the host's fixed cost per execution (the WASM host benchmark).

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/hello",
    generate_all,
});

use exports::weir_examples::workflows::hello::Guest;

struct Hello;

impl Guest for Hello {
    fn greet(name: String) -> Result<String, String> {
        if name.is_empty() {
            return Err("a name is required".to_string());
        }
        Ok(format!("hello, {name}"))
    }
}

export!(Hello);
