//! The workflow: greets through the activity, waits a durable second, answers. Everything it
//! does outside its own memory goes through the activity or the Weir host, and is recorded.

wit_bindgen::generate!({
    path: "../../wit",
    world: "{{name}}:app/{{name}}-workflow",
    generate_all,
});

use exports::{{name_snake}}::app::workflows::Guest;
use weir::workflow::host::sleep;
use weir::workflow::types::{Duration, ScheduleAt};
use {{name_snake}}::app::activities::greet;

struct Workflow;

impl Guest for Workflow {
    fn run(name: String) -> Result<String, String> {
        // A direct call of the activity: one child execution, its answer recorded.
        let greeting = greet(&name)?;
        sleep(ScheduleAt::In(Duration::Seconds(1)));
        Ok(format!("{greeting}, a durable second later"))
    }
}

export!(Workflow);
