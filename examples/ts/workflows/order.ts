// `order` in TypeScript: the order saga of examples/workflows/order (Rust), call for call,
// so that a history recorded by either build replays on the other. Price the order, reserve
// stock, charge the customer, ship; a failed charge releases the reservation, a failed
// shipment refunds the payment and releases the reservation, then the workflow returns `err`.
//
// How WIT maps (jco): an imported `result<T, E>` returns `T` and throws `E` wrapped in a
// ComponentError (`payload`); the exported function returns `T` and throws `E` itself.
import { log } from "weir:workflow/host@0.1.0";
import { price } from "weir-examples:compute/math";
import { reserve, release, type Reservation } from "weir-examples:shop/inventory";
import { charge, refund, type PaymentError } from "weir-examples:shop/payment";
import { ship } from "weir-examples:shop/shipping";
import type * as Order from "weir-examples:workflows/order";

/** The `err` value of a failed call of an imported function. */
function errOf<E>(thrown: unknown): E {
  return (thrown as { payload: E }).payload;
}

/** Calls `f`; its `err` becomes the workflow's `err` made by `wrap`. */
function orFail<T>(f: () => T, wrap: (e: string) => Order.OrderError): T {
  try {
    return f();
  } catch (thrown) {
    throw wrap(errOf<string>(thrown));
  }
}

function compensateRelease(reservation: Reservation, after: string): void {
  log("warn", `releasing ${reservation.id} after ${after}`);
  orFail(
    () => release(reservation.id),
    (e) => ({
      tag: "compensation-failed",
      val: `release of ${reservation.id} after ${after}: ${e}`,
    }),
  );
}

export const order: typeof Order = {
  checkout(o) {
    log("info", `checkout of order ${o.id}`);
    const amount = orFail(
      () => price(o.sku, o.quantity),
      (e) => ({ tag: "invalid-order", val: e }),
    );
    const reservation = orFail(
      () => reserve(o.id, o.sku, o.quantity),
      (e) => ({ tag: "out-of-stock", val: e }),
    );

    let paymentId: string;
    try {
      paymentId = charge(o.id, o.customer, amount);
    } catch (thrown) {
      const e = errOf<PaymentError>(thrown);
      const why =
        e.tag === "declined" ? `payment declined: ${e.val}` : `charge failed: ${e.val}`;
      compensateRelease(reservation, why);
      throw { tag: "payment-failed", val: why } satisfies Order.OrderError;
    }

    let trackingNumber: string;
    try {
      trackingNumber = ship(o.id, o.address, o.sku, o.quantity);
    } catch (thrown) {
      const e = errOf<string>(thrown);
      const why = `shipping failed: ${e}`;
      log("warn", `refunding ${paymentId} after ${why}`);
      orFail(
        () => refund(paymentId),
        (r) => ({
          tag: "compensation-failed",
          val: `refund of ${paymentId} after ${why}: ${r}`,
        }),
      );
      compensateRelease(reservation, why);
      throw { tag: "shipping-failed", val: e } satisfies Order.OrderError;
    }

    log("info", `order ${o.id} shipped as ${trackingNumber}`);
    return {
      orderId: o.id,
      amountCents: amount,
      reservationId: reservation.id,
      paymentId,
      trackingNumber,
    };
  },
};
