//! `compute`: pure, deterministic activities: Fibonacci, pricing, and the inventory,
//! payment and shipping steps of the order saga (deterministic rules so tests can pick the
//! outcome through the inputs).

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/compute",
    generate_all,
});

use exports::weir_examples::compute::math;
use exports::weir_examples::shop::inventory::{self, Reservation};
use exports::weir_examples::shop::payment::{self, PaymentError};
use exports::weir_examples::shop::shipping;

struct Compute;

impl math::Guest for Compute {
    fn fibonacci(n: u8) -> Result<u64, String> {
        let (mut a, mut b) = (0u64, 1u64);
        for _ in 0..n {
            let next = a
                .checked_add(b)
                .ok_or_else(|| format!("fibonacci({n}) does not fit a u64"))?;
            a = b;
            b = next;
        }
        Ok(a)
    }

    fn price(sku: String, quantity: u32) -> Result<u64, String> {
        let unit_cents: u64 = match sku.as_str() {
            "widget" => 250,
            "gadget" => 1999,
            "gizmo" => 5000,
            _ => return Err(format!("unknown SKU {sku:?}")),
        };
        if quantity == 0 {
            return Err("quantity must be at least 1".to_string());
        }
        unit_cents
            .checked_mul(u64::from(quantity))
            .ok_or_else(|| "price overflow".to_string())
    }
}

impl inventory::Guest for Compute {
    fn reserve(order_id: String, sku: String, quantity: u32) -> Result<Reservation, String> {
        if sku == "sold-out" || quantity > 100 {
            return Err(format!("out of stock: {quantity} x {sku}"));
        }
        Ok(Reservation {
            id: format!("R-{order_id}-{sku}"),
            sku,
            quantity,
        })
    }

    fn release(reservation_id: String) -> Result<(), String> {
        if reservation_id.starts_with("R-") {
            Ok(())
        } else {
            Err(format!("unknown reservation {reservation_id:?}"))
        }
    }
}

impl payment::Guest for Compute {
    fn charge(order_id: String, customer: String, amount_cents: u64) -> Result<String, PaymentError> {
        if customer.starts_with("declined") {
            return Err(PaymentError::Declined(format!("card of {customer} declined")));
        }
        if amount_cents > 100_000 {
            return Err(PaymentError::Declined(format!(
                "{amount_cents} cents is over the limit of 100000"
            )));
        }
        Ok(format!("P-{order_id}"))
    }

    fn refund(payment_id: String) -> Result<(), String> {
        if payment_id.starts_with("P-") {
            Ok(())
        } else {
            Err(format!("unknown payment {payment_id:?}"))
        }
    }
}

impl shipping::Guest for Compute {
    fn ship(order_id: String, address: String, sku: String, quantity: u32) -> Result<String, String> {
        if address.trim().is_empty() {
            return Err(format!("no address to ship {quantity} x {sku} to"));
        }
        Ok(format!("T-{order_id}"))
    }
}

export!(Compute);
