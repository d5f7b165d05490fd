// `hello` in TypeScript: the trivial workflow (examples/workflows/hello in Rust).
import type * as Hello from "weir-examples:workflows/hello";

export const hello: typeof Hello = {
  greet(name) {
    if (name.length === 0) {
      // The exported function's `err`: throw exactly the WIT error value.
      throw "a name is required";
    }
    return `hello, ${name}`;
  },
};
