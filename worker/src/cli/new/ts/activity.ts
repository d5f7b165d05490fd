// The activity: the component that may touch the outside world (fetch() reaches the hosts
// components.toml allows); here it does not.
import type * as Activities from "{{name}}:app/activities";

export const activities: typeof Activities = {
  greet(name) {
    if (name.length === 0) {
      throw "a name is required";
    }
    return `hello, ${name}`;
  },
};
