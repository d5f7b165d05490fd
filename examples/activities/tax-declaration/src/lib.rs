//! `tax-declaration`: declares the external activity `weir-examples:tax/rates` so that the
//! registry can type-check calls to it and convert their values. Weir never runs it: the
//! route is `external` and served by a Kafka client outside Weir (tests/java/TaxService.java).
//! Should it ever be invoked, it answers `err` rather than pretend to know a rate.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/tax-declaration",
    generate_all,
});

use exports::weir_examples::tax::rates::{Guest, TaxQuote};

struct Declaration;

impl Guest for Declaration {
    fn quote(region: String, _amount_cents: u64) -> Result<TaxQuote, String> {
        Err(format!(
            "tax.quote({region}) is served outside Weir (external route); this declaration-only \
             component must not be executed"
        ))
    }
}

export!(Declaration);
