//! `stub`: the stub activity `weir-examples:approval/approval`. The host never runs it: a
//! submitted `request` waits until a workflow writes its result with `request-stub`. The
//! component exists so that the registry reads its WIT like any other component's; if it
//! were ever invoked it would return `err`.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/stub",
    generate_all,
});

use exports::weir_examples::approval::approval::Guest;

struct Stub;

impl Guest for Stub {
    fn request(order_id: String, _amount_cents: u64) -> Result<String, String> {
        Err(format!(
            "approval.request({order_id}) is a stub activity: its result is written by a \
             workflow with request-stub, it is never executed"
        ))
    }
}

export!(Stub);
