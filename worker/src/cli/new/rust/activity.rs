//! The activity: the component that may touch the outside world (here it does not).

wit_bindgen::generate!({
    path: "../../wit",
    world: "{{name}}:app/{{name}}-activity",
    generate_all,
});

use exports::{{name_snake}}::app::activities::Guest;

struct Activity;

impl Guest for Activity {
    fn greet(name: String) -> Result<String, String> {
        if name.is_empty() {
            return Err("a name is required".into());
        }
        Ok(format!("hello, {name}"))
    }
}

export!(Activity);
