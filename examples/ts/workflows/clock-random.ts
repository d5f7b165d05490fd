// `clock-random` in TypeScript: what a JavaScript workflow reads from its runtime — Date.now(),
// performance.now(), Math.random(), crypto.getRandomValues(), console.log — which
// StarlingMonkey takes from WASI. The host gives workflows a deterministic WASI
// (docs/design/deterministic-wasi.md): a run, a rebuild and a replay read the same values.
import { sleep } from "weir:workflow/host@0.1.0";
import type * as ClockRandom from "weir-examples:workflows/clock-random";

function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function read(): ClockRandom.Reading {
  return {
    wallNanos: BigInt(Date.now()) * 1_000_000n,
    monotonicNanos: BigInt(Math.round(performance.now() * 1e6)),
    random: BigInt(Math.floor(Math.random() * 2 ** 53)),
    bytes: hex(crypto.getRandomValues(new Uint8Array(8))),
    seed: BigInt(Math.floor(Math.random() * 2 ** 53)),
  };
}

export const clockRandom: typeof ClockRandom = {
  run(rounds, millis) {
    const readings: ClockRandom.Reading[] = [];
    for (let round = 0; round < rounds; round++) {
      const first = read();
      const second = read();
      console.log(`round ${round}: wall ${first.wallNanos} ns`);
      readings.push(first, second);
      sleep({ tag: "in", val: { tag: "milliseconds", val: millis } });
    }
    return readings;
  },
};
