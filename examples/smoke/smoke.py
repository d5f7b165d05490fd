#!/usr/bin/env python3
"""Out-of-band smoke test of the example components with wasmtime-py (PyPI `wasmtime`).

A toy, synchronous, in-process stand-in for the Weir host: it links `weir:workflow/*` and
the generated `-ext` / `-stub` interfaces by name exactly as schemas/wit/README.md says,
runs every child inline at submit time (so responses arrive in submission order) and
expires delays at once. No history, no replay, no Kafka: it only checks that the
components instantiate, that the contract's names and types line up, and that the examples
compute what their WIT docs promise. It is NOT the Weir host and CI does not run it.

    python3 -m venv /tmp/wtpy && /tmp/wtpy/bin/pip install wasmtime==50.0.1
    /tmp/wtpy/bin/python examples/smoke/smoke.py [components dir]
"""
import http.server
import sys
import threading
import time

import wasmtime
import wasmtime.component as C

OUT = sys.argv[1] if len(sys.argv) > 1 else "/var/cache/weir/examples"
HOST = "weir:workflow/host@0.1.0"
TYPES = "weir:workflow/types@0.1.0"
JOIN_SET_TYPE = 1  # host resource type id for `join-set`

engine = wasmtime.Engine()
_fuel_config = wasmtime.Config()
_fuel_config.consume_fuel = True
fuel_engine = wasmtime.Engine(_fuel_config)  # for `misbehave`: fuel + a memory limit
COMPONENTS = {}


def component(name, eng):
    if (name, id(eng)) not in COMPONENTS:
        COMPONENTS[(name, id(eng))] = C.Component.from_file(eng, f"{OUT}/{name}.wasm")
    return COMPONENTS[(name, id(eng))]


# interface -> (component, kind, {function: param names})
REGISTRY = {
    "weir-examples:compute/math": ("compute", "activity", ["fibonacci", "price"]),
    "weir-examples:shop/inventory": ("compute", "activity", ["reserve", "release"]),
    "weir-examples:shop/payment": ("compute", "activity", ["charge", "refund"]),
    "weir-examples:shop/shipping": ("compute", "activity", ["ship"]),
    "weir-examples:http/client": ("http-get", "activity", ["get"]),
    "weir-examples:flaky/flaky": ("flaky", "activity", ["fail-first", "trap-first"]),
    "weir-examples:approval/approval": ("stub", "stub", ["request"]),
    "weir-examples:workflows/order": ("order", "workflow", ["checkout"]),
    "weir-examples:workflows/fanout": ("fanout", "workflow", ["fibonacci-sum", "race"]),
    "weir-examples:workflows/sleepy": ("sleepy", "workflow", ["sleep-for"]),
    "weir-examples:workflows/random-schedule": ("random-schedule", "workflow", ["run", "call-sleepy"]),
    "weir-examples:workflows/approval": ("approval", "workflow", ["auto-approve"]),
    "weir-examples:workflows/misbehave": ("misbehave", "workflow", ["spin", "hog-memory"]),
}


def rec(**fields):
    """A component record; keys use '-' like WIT (python attrs allow it via setattr)."""
    r = C.Record()
    for k, v in fields.items():
        setattr(r, k.replace("_", "-"), v)
    return r


def get(obj, field):
    return getattr(obj, field)


STUB_RESULTS = {}  # execution id -> value written by <f>-stub
SCHEDULED = []


def call_export(comp_name, iface, fn, args, kind, limited=False):
    """Runs one execution of `iface.fn` in a fresh store; returns its (python) result."""
    eng = fuel_engine if limited else engine
    store = wasmtime.Store(eng)
    if limited:
        store.set_fuel(200_000_000)
        store.set_limits(memory_size=64 << 20)
    linker = C.Linker(eng)
    if kind == "activity":
        store.set_wasi(wasmtime.WasiConfig())
        store.set_wasi_http()
        linker.add_wasip2()
        linker.add_wasi_http()
    else:
        WorkflowHost(store, linker, f"E_{comp_name}-{fn}")
    inst = linker.instantiate(store, component(comp_name, eng))
    ii = inst.get_export_index(store, iface)
    func = inst.get_func(store, inst.get_export_index(store, fn, ii))
    try:
        return func(store, *args)
    finally:
        try:
            func.post_return(store)
        except Exception:
            pass


class WorkflowHost:
    def __init__(self, store, linker, exec_id):
        self.exec_id = exec_id
        self.store = store
        self.join_sets = {}  # rep -> dict
        self.names = set()
        self.processed = {}  # child id -> (ffqn, value)
        self.next_rep = 1
        self.generated = 0
        self.oneoff = 0
        root = linker.root()
        with root:
            root.add_instance(TYPES)  # types only: an empty instance
            h = root.add_instance(HOST)
            with h:
                h.add_resource("join-set", C.ResourceType.host(JOIN_SET_TYPE), lambda s, rep: None)
                h.add_func("[static]join-set.create", self.create)
                h.add_func("[static]join-set.create-named", self.create_named)
                h.add_func("[method]join-set.id", lambda s, js: self.js(js)["id"])
                h.add_func("[method]join-set.submit-delay", self.submit_delay)
                h.add_func("[method]join-set.join-next", self.join_next)
                h.add_func("[static]join-set.close", lambda s, js: None)
                h.add_func("sleep", self.sleep)
                h.add_func("random-u64", lambda s, lo, hi: (lo + hi) // 2)
                h.add_func("random-string", lambda s, lo, hi: "Ab3" * ((lo + 2) // 3))
                h.add_func("log", lambda s, level, msg: print(f"      [{self.exec_id} {level}] {msg}"))
            for iface, (_, kind, fns) in REGISTRY.items():
                ns_pkg, name = iface.split("/")
                direct = root.add_instance(iface)
                with direct:
                    for fn in fns:
                        direct.add_func(fn, self.direct(iface, fn))
                ext = root.add_instance(f"{ns_pkg}-ext/{name}")
                with ext:
                    for fn in fns:
                        ext.add_func(f"{fn}-submit", self.submit(iface, fn))
                        ext.add_func(f"{fn}-await-next", self.await_next(iface, fn))
                        ext.add_func(f"{fn}-get", self.get(iface, fn))
                        ext.add_func(f"{fn}-schedule", self.schedule(iface, fn))
                if kind == "stub":
                    stub = root.add_instance(f"{ns_pkg}-stub/{name}")
                    with stub:
                        for fn in fns:
                            stub.add_func(f"{fn}-stub", self.stub(iface, fn))

    def js(self, handle):
        return self.join_sets[handle.to_host(self.store).rep]

    def new_js(self, js_id):
        rep = self.next_rep
        self.next_rep += 1
        self.join_sets[rep] = {"id": js_id, "queue": [], "count": 0}
        return rep

    def create(self, store):
        self.generated += 1
        return C.ResourceHost.own(self.new_js(f"g:{self.generated}"), JOIN_SET_TYPE)

    def create_named(self, store, name):
        if name in self.names:
            return None  # err(conflict): wasmtime-py lowers this untagged variant case as None
        self.names.add(name)
        return C.ResourceHost.own(self.new_js(f"n:{name}"), JOIN_SET_TYPE)

    def child(self, js, iface, fn, args):
        js["count"] += 1
        child_id = f"{self.exec_id}.{js['id']}_{js['count']}"
        comp_name, kind, _ = REGISTRY[iface]
        if kind == "stub":
            value = STUB_RESULTS.get(child_id)  # toy: the stub must be written before awaiting
            js["queue"].append(("child", child_id, iface, fn, None))
        else:
            value = call_export(comp_name, iface, fn, args, kind)
            js["queue"].append(("child", child_id, iface, fn, value))
        return child_id

    def take(self, js):
        item = js["queue"].pop(0)
        if item[0] == "child" and item[4] is None and item[1] in STUB_RESULTS:
            item = item[:4] + (STUB_RESULTS[item[1]],)
        if item[0] == "child":
            self.processed[item[1]] = (item[2], item[3], item[4])
        return item

    def direct(self, iface, fn):
        def f(store, *args):
            self.oneoff += 1
            js = self.join_sets[self.new_js(f"o:{self.oneoff}-{fn}")]
            self.child(js, iface, fn, list(args))
            return self.take(js)[4]
        return f

    def submit(self, iface, fn):
        def f(store, handle, *args):
            return rec(id=self.child(self.js(handle), iface, fn, list(args)))
        return f

    def await_next(self, iface, fn):
        def f(store, handle):
            js = self.js(handle)
            if not js["queue"]:
                return None  # err(all-processed)
            item = self.take(js)
            if item[0] != "child" or (item[2], item[3]) != (iface, fn):
                raise RuntimeError("toy host: function-mismatch not implemented")
            return (rec(id=item[1]), item[4])
        return f

    def get(self, iface, fn):
        def f(store, eid):
            found = self.processed.get(eid.id)
            if found is None:
                return None  # err(not-found)
            return found[2]
        return f

    def schedule(self, iface, fn):
        def f(store, at, *args):
            new_id = f"E_scheduled{len(SCHEDULED) + 1}"
            SCHEDULED.append((new_id, iface, fn, at, args))
            return rec(id=new_id)
        return f

    def stub(self, iface, fn):
        def f(store, eid, value):
            old = STUB_RESULTS.get(eid.id, MISSING)
            if old is not MISSING and old != value:
                return C.Variant("conflict")
            STUB_RESULTS[eid.id] = value
            return None
        return f

    def submit_delay(self, store, handle, at):
        js = self.js(handle)
        js["count"] += 1
        delay_id = f"Delay_{self.exec_id}.{js['id']}_{js['count']}"
        js["queue"].append(("delay", delay_id, expiry(at)))
        return rec(id=delay_id)

    def join_next(self, store, handle):
        js = self.js(handle)
        if not js["queue"]:
            return None  # err(all-processed)
        item = self.take(js)
        if item[0] == "child":
            ok = is_ok(item[4])
            return C.Variant("child-finished", rec(id=rec(id=item[1]),
                                                   function=f"{item[2]}.{item[3]}",
                                                   outcome=C.Variant("ok" if ok else "err")))
        return C.Variant("delay-finished", rec(id=rec(id=item[1]), outcome=item[2]))  # expired(datetime), untagged

    def sleep(self, store, at):
        return expiry(at)


MISSING = object()


def is_ok(value):
    return not (isinstance(value, C.Variant) and value.tag == "err")


def expiry(at):
    now = time.time()
    ms = 0
    if isinstance(at, C.Variant) and at.tag == "in":
        at = at.payload
    if isinstance(at, C.Variant):
        ms = {"milliseconds": 1, "seconds": 1000, "minutes": 60_000, "hours": 3_600_000,
              "days": 86_400_000}[at.tag] * at.payload
    t = now + ms / 1000
    return rec(seconds=int(t), nanoseconds=int((t % 1) * 1e9))


# ---------------------------------------------------------------------------------------
COUNTS = {}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/counter/"):
            COUNTS[self.path] = COUNTS.get(self.path, 0) + 1
            body = str(COUNTS[self.path]).encode()
        else:
            body = b"hello from " + self.path.encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    failures = []

    def check(label, got, pred):
        ok = pred(got)
        print(("ok  " if ok else "FAIL"), label, "->", show(got))
        if not ok:
            failures.append(label)

    wf = lambda comp, iface, fn, *args: call_export(comp, f"weir-examples:workflows/{iface}", fn, list(args), "workflow")
    act = lambda comp, iface, fn, *args: call_export(comp, iface, fn, list(args), "activity")

    check("compute fibonacci(10)", act("compute", "weir-examples:compute/math", "fibonacci", 10), lambda v: v == 55)
    check("compute fibonacci(94) is err", act("compute", "weir-examples:compute/math", "fibonacci", 94), lambda v: isinstance(v, str))
    check("compute price(gadget, 3)", act("compute", "weir-examples:compute/math", "price", "gadget", 3), lambda v: v == 5997)
    check("http-get", act("http-get", "weir-examples:http/client", "get", f"{base}/hello?x=1"),
          lambda v: v.status == 200 and v.body == "hello from /hello?x=1")
    check("http-get bad url", act("http-get", "weir-examples:http/client", "get", "ftp://x"), lambda v: isinstance(v, str))
    url = f"{base}/counter/a"
    attempts = [act("flaky", "weir-examples:flaky/flaky", "fail-first", url, 2) for _ in range(3)]
    check("flaky fail-first x3", attempts, lambda v: isinstance(v[0], str) and isinstance(v[1], str) and v[2] == 3)
    try:
        act("flaky", "weir-examples:flaky/flaky", "trap-first", f"{base}/counter/b", 1)
        check("flaky trap-first traps", "no trap", lambda v: False)
    except Exception as e:
        check("flaky trap-first traps", type(e).__name__, lambda v: True)

    order = lambda cust, addr: rec(id="o1", customer=cust, sku="widget", quantity=2, address=addr)
    check("order ok", wf("order", "order", "checkout", order("alice", "1 Main St")),
          lambda v: isinstance(v, C.Record) and v.__dict__["tracking-number"] == "T-o1")
    check("order declined -> compensation", wf("order", "order", "checkout", order("declined-bob", "x")),
          lambda v: isinstance(v, C.Variant) and v.tag == "payment-failed")
    check("order no address -> refund+release", wf("order", "order", "checkout", order("carol", " ")),
          lambda v: isinstance(v, C.Variant) and v.tag == "shipping-failed")
    check("order-swapped ok", wf("order-swapped", "order", "checkout", order("alice", "1 Main St")),
          lambda v: isinstance(v, C.Record))
    check("fanout fibonacci-sum", wf("fanout", "fanout", "fibonacci-sum", b"\x05\x0a\x14"),
          lambda v: v.values == [5, 55, 6765] and v.sum == 6825 and v.__dict__["named-conflict"]
          and v.__dict__["extra-await-all-processed"])
    check("fanout race", wf("fanout", "fanout", "race", 10, 1000), lambda v: True)
    check("sleepy", wf("sleepy", "sleepy", "sleep-for", 5), lambda v: v.seconds > 1_600_000_000)
    check("random-schedule run", wf("random-schedule", "random-schedule", "run", 100, 10, 1),
          lambda v: v.number == 50 and len(v.token) >= 8 and v.__dict__["scheduled-id"].startswith("E_"))
    check("random-schedule call-sleepy", wf("random-schedule", "random-schedule", "call-sleepy", 1),
          lambda v: v.seconds > 0)
    check("approval", wf("approval", "approval", "auto-approve", "o2", 500),
          lambda v: v.decision == "approved by auto-approver" and v.__dict__["same-value-again-ok"]
          and v.__dict__["different-value-conflict"])
    check("stub component returns err", act("stub", "weir-examples:approval/approval", "request", "o3", 1),
          lambda v: isinstance(v, C.Variant) and v.tag == "err")
    for fn, args in (("spin", []), ("hog-memory", [1024])):
        try:
            call_export("misbehave", "weir-examples:workflows/misbehave", fn, args, "workflow", limited=True)
            check(f"misbehave {fn} stopped", "returned", lambda v: False)
        except Exception as e:
            check(f"misbehave {fn} stopped", str(e).splitlines()[0], lambda v: True)
    server.shutdown()
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)


def show(v):
    if isinstance(v, C.Record):
        return "{" + ", ".join(f"{k}: {show(x)}" for k, x in v.__dict__.items()) + "}"
    if isinstance(v, C.Variant):
        return f"{v.tag}({show(v.payload)})" if v.payload is not None else v.tag
    if isinstance(v, list):
        return "[" + ", ".join(show(x) for x in v) + "]"
    return repr(v)


if __name__ == "__main__":
    main()
