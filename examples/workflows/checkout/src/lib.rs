//! `checkout`: prices a basket with the WASM `compute` activity, then asks the external `tax`
//! service (a Kafka client outside Weir, see `tax.wit`) for the tax, and returns the invoice.
//! For the workflow both are ordinary blocking calls; only the route tells them apart.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/checkout",
    generate_all,
});

use exports::weir_examples::workflows::checkout::{Guest, Invoice};
use weir_examples::compute::math::price;
use weir_examples::tax::rates::quote;

struct Checkout;

impl Guest for Checkout {
    fn issue_invoice(sku: String, quantity: u32, region: String) -> Result<Invoice, String> {
        let net_cents = price(&sku, quantity).map_err(|e| format!("pricing failed: {e}"))?;
        let quote = quote(&region, net_cents).map_err(|e| format!("tax quote failed: {e}"))?;
        let total_cents = net_cents
            .checked_add(quote.tax_cents)
            .ok_or_else(|| "the total does not fit a u64".to_string())?;
        Ok(Invoice {
            net_cents,
            tax_region: quote.region,
            rate_basis_points: quote.rate_basis_points,
            tax_cents: quote.tax_cents,
            total_cents,
        })
    }
}

export!(Checkout);
