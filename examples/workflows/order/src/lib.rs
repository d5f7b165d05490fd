//! `order`: the order saga. Price the order, reserve stock, charge the customer, ship.
//! A failed charge releases the reservation; a failed shipment refunds the payment and
//! releases the reservation (compensation), then the workflow returns `err`.
//!
//! Built twice: `order`, and `order-swapped` (feature `swapped`: the same saga with the
//! `price` and `reserve` calls swapped), which replaying an `order` history must report as
//! nondeterministic.

wit_bindgen::generate!({
    path: "../../wit",
    world: "weir-examples:components/order",
    generate_all,
});

use exports::weir_examples::workflows::order::{Confirmation, Guest, Order, OrderError};
use weir::workflow::host::log;
use weir::workflow::types::LogLevel;
use weir_examples::compute::math::price;
use weir_examples::shop::inventory::{release, reserve, Reservation};
use weir_examples::shop::payment::{charge, refund, PaymentError};
use weir_examples::shop::shipping::ship;

struct Saga;

fn price_of(order: &Order) -> Result<u64, OrderError> {
    price(&order.sku, order.quantity).map_err(OrderError::InvalidOrder)
}

fn reserve_for(order: &Order) -> Result<Reservation, OrderError> {
    reserve(&order.id, &order.sku, order.quantity).map_err(OrderError::OutOfStock)
}

fn compensate_release(reservation: &Reservation, after: &str) -> Result<(), OrderError> {
    log(LogLevel::Warn, &format!("releasing {} after {after}", reservation.id));
    release(&reservation.id).map_err(|e| {
        OrderError::CompensationFailed(format!("release of {} after {after}: {e}", reservation.id))
    })
}

impl Guest for Saga {
    fn checkout(order: Order) -> Result<Confirmation, OrderError> {
        log(LogLevel::Info, &format!("checkout of order {}", order.id));

        #[cfg(not(feature = "swapped"))]
        let (amount, reservation) = {
            let amount = price_of(&order)?;
            let reservation = reserve_for(&order)?;
            (amount, reservation)
        };
        #[cfg(feature = "swapped")]
        let (amount, reservation) = {
            let reservation = reserve_for(&order)?;
            let amount = match price_of(&order) {
                Ok(amount) => amount,
                Err(e) => {
                    compensate_release(&reservation, "a pricing failure")?;
                    return Err(e);
                }
            };
            (amount, reservation)
        };

        let payment_id = match charge(&order.id, &order.customer, amount) {
            Ok(id) => id,
            Err(e) => {
                let why = match e {
                    PaymentError::Declined(reason) => format!("payment declined: {reason}"),
                    PaymentError::ExecutionFailed(reason) => format!("charge failed: {reason}"),
                };
                compensate_release(&reservation, &why)?;
                return Err(OrderError::PaymentFailed(why));
            }
        };

        let tracking_number = match ship(&order.id, &order.address, &order.sku, order.quantity) {
            Ok(tracking) => tracking,
            Err(e) => {
                let why = format!("shipping failed: {e}");
                log(LogLevel::Warn, &format!("refunding {payment_id} after {why}"));
                refund(&payment_id).map_err(|r| {
                    OrderError::CompensationFailed(format!("refund of {payment_id} after {why}: {r}"))
                })?;
                compensate_release(&reservation, &why)?;
                return Err(OrderError::ShippingFailed(e));
            }
        };

        log(LogLevel::Info, &format!("order {} shipped as {tracking_number}", order.id));
        Ok(Confirmation {
            order_id: order.id,
            amount_cents: amount,
            reservation_id: reservation.id,
            payment_id,
            tracking_number,
        })
    }
}

export!(Saga);
