// The workflow: greets through the activity, waits a durable second, answers. Everything it
// does outside its own memory goes through the activity or the Weir host, and is recorded.
import { sleep } from "weir:workflow/host@0.1.0";
import { greet } from "{{name}}:app/activities";
import type * as Workflows from "{{name}}:app/workflows";

export const workflows: typeof Workflows = {
  run(name) {
    let greeting: string;
    try {
      // A direct call of the activity: one child execution, its answer recorded.
      greeting = greet(name);
    } catch (thrown) {
      // An imported function's `err` comes as the `payload` of what it throws; the
      // workflow's own `err` is thrown as the WIT value itself.
      throw (thrown as { payload: string }).payload;
    }
    sleep({ tag: "in", val: { tag: "seconds", val: 1n } });
    return `${greeting}, a durable second later`;
  },
};
