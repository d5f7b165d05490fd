// Restate peer of Weir's benchmark workflows (tests/benches/peers/restate.sh starts it).
//
//   steps.fib(n)          iterative fibonacci of n (Weir's `compute/math.fibonacci` activity)
//   steps.chain(payload)  `count` sequential durable calls to steps.fib(n), summed
//                         (Weir's `steps.fibonacci-chain(30, 20)`); payload is a number (count,
//                         n = 30) or {n, count}
//   steps.fanout(payload) one concurrent durable call to steps.fib per number, all awaited, summed
//                         (Weir's `fanout.fibonacci-sum`); payload is a width (numbers i % 30 for
//                         i < width, as tests/benches/stack.rs builds them) or {ns: [...]}
//
// Every call to fib goes through the Restate server (ctx.serviceClient), journalled like a
// Weir activity call, never a local function call.
//
// Usage: node service.mjs PORT   (listens on 127.0.0.1:PORT, HTTP/2 cleartext)

// The SDK calls Promise.withResolvers (Node >= 22); Node 20 lacks it.
if (typeof Promise.withResolvers !== "function") {
  Object.defineProperty(Promise, "withResolvers", {
    configurable: true,
    writable: true,
    value: function withResolvers() {
      let resolve;
      let reject;
      const promise = new this((res, rej) => {
        resolve = res;
        reject = rej;
      });
      return { promise, resolve, reject };
    },
  });
}

// Static imports are evaluated before this module's body, so the SDK is imported after the
// polyfill, dynamically.
const http2 = await import("node:http2");
const restate = await import("@restatedev/restate-sdk");

function fibonacci(n) {
  let a = 0;
  let b = 1;
  for (let i = 0; i < n; i++) {
    const next = a + b;
    a = b;
    b = next;
  }
  return a;
}

function positiveInt(value, what) {
  if (!Number.isInteger(value) || value < 0) {
    throw new restate.TerminalError(`${what} must be a non-negative integer, got ${JSON.stringify(value)}`);
  }
  return value;
}

const Steps = { name: "steps" };

const steps = restate.service({
  name: "steps",
  handlers: {
    fib: async (_ctx, n) => fibonacci(positiveInt(n, "n")),

    chain: async (ctx, payload) => {
      const p = typeof payload === "number" ? { count: payload } : (payload ?? {});
      const n = positiveInt(p.n ?? 30, "n");
      const count = positiveInt(p.count ?? 20, "count");
      const fib = ctx.serviceClient(Steps);
      let sum = 0;
      for (let i = 0; i < count; i++) {
        sum += await fib.fib(n);
      }
      return sum;
    },

    fanout: async (ctx, payload) => {
      let ns;
      if (typeof payload === "number") {
        ns = Array.from({ length: positiveInt(payload, "width") }, (_, i) => i % 30);
      } else if (payload && Array.isArray(payload.ns)) {
        ns = payload.ns.map((n) => positiveInt(n, "ns[]"));
      } else {
        ns = Array.from({ length: positiveInt(payload?.width ?? 100, "width") }, (_, i) => i % 30);
      }
      const fib = ctx.serviceClient(Steps);
      const values = await restate.RestatePromise.all(ns.map((n) => fib.fib(n)));
      return values.reduce((a, b) => a + b, 0);
    },
  },
});

const port = Number(process.argv[2] ?? process.env.PORT);
if (!Number.isInteger(port) || port <= 0 || port >= 65536) {
  console.error("usage: node service.mjs PORT");
  process.exit(2);
}

const endpoint = restate.endpoint().bind(steps);
const server = http2.createServer(endpoint.http2Handler());
server.on("error", (err) => {
  console.error(`service: ${err.message}`);
  process.exit(1);
});
server.listen(port, "127.0.0.1", () => {
  console.error(`service: steps listening on 127.0.0.1:${port}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
