"""`order` in Python: the order saga of examples/workflows/order (Rust), call for call, so
that a history recorded by either build replays on the other. Price the order, reserve stock,
charge the customer, ship; a failed charge releases the reservation, a failed shipment refunds
the payment and releases the reservation, then the workflow returns `err`.

How WIT maps (componentize-py): an imported `result<T, E>` returns `T` and raises
`Err(E)`; the exported function returns `T` and raises `Err(E)` itself.
"""

from typing import Callable, TypeVar

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.order import (
    Confirmation,
    Order as OrderRequest,
    OrderError,
    OrderError_CompensationFailed,
    OrderError_InvalidOrder,
    OrderError_OutOfStock,
    OrderError_PaymentFailed,
    OrderError_ShippingFailed,
)
from wit_world.imports.host import log
from wit_world.imports.inventory import Reservation, release, reserve
from wit_world.imports.math import price
from wit_world.imports.payment import PaymentError_Declined, charge, refund
from wit_world.imports.shipping import ship
from wit_world.imports.types import LogLevel

T = TypeVar("T")


def or_fail(call: Callable[[], T], wrap: Callable[[str], OrderError]) -> T:
    """Calls `call`; its `err` becomes the workflow's `err` made by `wrap`."""
    try:
        return call()
    except Err as e:
        raise Err(wrap(e.value))


def compensate_release(reservation: Reservation, after: str) -> None:
    log(LogLevel.WARN, f"releasing {reservation.id} after {after}")
    or_fail(
        lambda: release(reservation.id),
        lambda e: OrderError_CompensationFailed(
            f"release of {reservation.id} after {after}: {e}"
        ),
    )


class Order(exports.Order):
    def checkout(self, order: OrderRequest) -> Confirmation:
        log(LogLevel.INFO, f"checkout of order {order.id}")
        amount = or_fail(lambda: price(order.sku, order.quantity), OrderError_InvalidOrder)
        reservation = or_fail(
            lambda: reserve(order.id, order.sku, order.quantity), OrderError_OutOfStock
        )

        try:
            payment_id = charge(order.id, order.customer, amount)
        except Err as e:
            if isinstance(e.value, PaymentError_Declined):
                why = f"payment declined: {e.value.value}"
            else:
                why = f"charge failed: {e.value.value}"
            compensate_release(reservation, why)
            raise Err(OrderError_PaymentFailed(why))

        try:
            tracking_number = ship(order.id, order.address, order.sku, order.quantity)
        except Err as e:
            why = f"shipping failed: {e.value}"
            log(LogLevel.WARN, f"refunding {payment_id} after {why}")
            or_fail(
                lambda: refund(payment_id),
                lambda r: OrderError_CompensationFailed(
                    f"refund of {payment_id} after {why}: {r}"
                ),
            )
            compensate_release(reservation, why)
            raise Err(OrderError_ShippingFailed(e.value))

        log(LogLevel.INFO, f"order {order.id} shipped as {tracking_number}")
        return Confirmation(order.id, amount, reservation.id, payment_id, tracking_number)
