"""Record classes shared by the schema golden tests.

``define(module)`` declares them with any module shaped like ``pulsar.schema`` (this project's
``broker_core.schema``, or the official client's when the golden files were computed once in a
scratch environment), so both sides describe exactly the same classes.
"""

from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Any


class Color(enum.Enum):
    red = 1
    green = 2
    blue = 3


def define(m: Any) -> SimpleNamespace:
    class Point(m.Record):
        x = m.Double(required=True)
        y = m.Double(required=True)

    class Primitives(m.Record):
        flag = m.Boolean()
        small = m.Integer()
        big = m.Long()
        ratio = m.Float()
        precise = m.Double()
        blob = m.Bytes()
        text = m.String()

    class Required(m.Record):
        id = m.Long(required=True)
        name = m.String(required=True)
        active = m.Boolean(required=True)

    class Defaults(m.Record):
        count = m.Integer(default=5, required_default=True)
        label = m.String(default="none", required_default=True)
        strict = m.Long(default=9, required=True, required_default=True)
        shade = m.CustomEnum(Color, default=Color.green, required=True, required_default=True)

    class Nested(m.Record):
        _avro_namespace = "com.example"
        origin = Point(required=True)
        maybe = Point()
        color = Color
        tags = m.Array(m.String())
        points = m.Array(Point())
        scores = m.Map(m.Double())
        places = m.Map(Point())

    class Sorted(m.Record):
        _sorted_fields = True
        zeta = m.Integer()
        alpha = m.String()
        mid = m.Boolean()

    class Order(m.Record):
        order_id = m.Long(required=True)
        customer = m.String(required=True)
        amount = m.Double(required=True)
        quantity = m.Integer(required=True)
        paid = m.Boolean(required=True)

    return SimpleNamespace(Point=Point, Primitives=Primitives, Required=Required, Defaults=Defaults,
                           Nested=Nested, Sorted=Sorted, Order=Order)


def samples(ns: SimpleNamespace) -> dict[str, Any]:
    """One instance per class (values chosen to exercise every field type)."""
    p = ns.Point
    return {
        "Point": p(x=1.5, y=-2.0),
        "Primitives": ns.Primitives(flag=True, small=-7, big=2**40, ratio=0.5, precise=3.25, blob=b"ab\x01",
                                    text="héllo"),
        "Required": ns.Required(id=42, name="n", active=False),
        "Defaults": ns.Defaults(count=1, label="x", strict=2, shade=Color.blue),
        "Nested": ns.Nested(origin=p(x=0.0, y=0.0), maybe=p(x=1.0, y=2.0), color=Color.red, tags=["a", "b"],
                            points=[p(x=3.0, y=4.0)], scores={"k": 1.0}, places={"home": p(x=5.0, y=6.0)}),
        "Sorted": ns.Sorted(zeta=1, alpha="a", mid=True),
        "Order": ns.Order(order_id=7, customer="c", amount=9.5, quantity=3, paid=True),
    }
