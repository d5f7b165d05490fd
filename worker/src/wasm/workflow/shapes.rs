//! Structural type patterns for checking a workflow's imports before defining them with
//! `func_new_async`, which wasmtime does not type-check (schemas/wit/README.md §6). Type
//! names and parameter names are not part of the contract; shapes are.

use wasmtime::component::types::{ComponentFunc, Type};

use crate::wasm::values::wit_type;

/// A pattern a [`Type`] must match.
#[derive(Clone, Debug)]
pub(crate) enum Shape {
    /// Equal to this type (compared structurally by wasmtime, across components).
    Exact(Type),
    /// A `borrow<..>` of a resource (the only host resource is `join-set`; wasmtime checks the
    /// resource's identity when it resolves the host instance).
    Borrow,
    /// An `own<..>` of a resource.
    Own,
    Record(Vec<(&'static str, Shape)>),
    Variant(Vec<(&'static str, Option<Shape>)>),
    Enum(Vec<&'static str>),
    Option(Box<Shape>),
    Result(Option<Box<Shape>>, Option<Box<Shape>>),
    Tuple(Vec<Shape>),
}

impl Shape {
    pub fn matches(&self, ty: &Type) -> bool {
        match (self, ty) {
            (Shape::Exact(t), ty) => t == ty,
            (Shape::Borrow, Type::Borrow(_)) => true,
            (Shape::Own, Type::Own(_)) => true,
            (Shape::Record(fields), Type::Record(r)) => {
                r.fields().len() == fields.len()
                    && r.fields()
                        .zip(fields)
                        .all(|(f, (name, s))| f.name == *name && s.matches(&f.ty))
            }
            (Shape::Variant(cases), Type::Variant(v)) => {
                v.cases().len() == cases.len()
                    && v.cases().zip(cases).all(|(c, (name, s))| {
                        c.name == *name
                            && match (s, &c.ty) {
                                (None, None) => true,
                                (Some(s), Some(t)) => s.matches(t),
                                _ => false,
                            }
                    })
            }
            (Shape::Enum(names), Type::Enum(e)) => e.names().eq(names.iter().copied()),
            (Shape::Option(s), Type::Option(o)) => s.matches(&o.ty()),
            (Shape::Result(ok, err), Type::Result(r)) => {
                side_matches(ok.as_deref(), r.ok()) && side_matches(err.as_deref(), r.err())
            }
            (Shape::Tuple(items), Type::Tuple(t)) => {
                t.types().len() == items.len() && t.types().zip(items).all(|(t, s)| s.matches(&t))
            }
            _ => false,
        }
    }

    /// For messages: WIT-like text of the expected shape.
    pub fn describe(&self) -> String {
        match self {
            Shape::Exact(t) => wit_type(t),
            Shape::Borrow => "borrow<join-set>".into(),
            Shape::Own => "own<join-set>".into(),
            Shape::Record(fields) => format!(
                "record {{ {} }}",
                fields
                    .iter()
                    .map(|(n, s)| format!("{n}: {}", s.describe()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Shape::Variant(cases) => format!(
                "variant {{ {} }}",
                cases
                    .iter()
                    .map(|(n, s)| match s {
                        Some(s) => format!("{n}({})", s.describe()),
                        None => (*n).to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Shape::Enum(names) => format!("enum {{ {} }}", names.join(", ")),
            Shape::Option(s) => format!("option<{}>", s.describe()),
            Shape::Result(ok, err) => match (ok, err) {
                (None, None) => "result".into(),
                (Some(o), None) => format!("result<{}>", o.describe()),
                (None, Some(e)) => format!("result<_, {}>", e.describe()),
                (Some(o), Some(e)) => format!("result<{}, {}>", o.describe(), e.describe()),
            },
            Shape::Tuple(items) => format!(
                "tuple<{}>",
                items
                    .iter()
                    .map(Shape::describe)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

fn side_matches(shape: Option<&Shape>, ty: Option<Type>) -> bool {
    match (shape, ty) {
        (None, None) => true,
        (Some(s), Some(t)) => s.matches(&t),
        _ => false,
    }
}

/// Expected signature of an imported function.
pub(crate) struct Signature {
    pub params: Vec<Shape>,
    pub results: Vec<Shape>,
}

impl Signature {
    /// `None` when `func` has this signature, else what differs.
    pub fn mismatch(&self, func: &ComponentFunc) -> Option<String> {
        let params: Vec<Type> = func.params().map(|(_, t)| t).collect();
        let results: Vec<Type> = func.results().collect();
        let ok = params.len() == self.params.len()
            && results.len() == self.results.len()
            && params.iter().zip(&self.params).all(|(t, s)| s.matches(t))
            && results.iter().zip(&self.results).all(|(t, s)| s.matches(t));
        (!ok).then(|| {
            format!(
                "has type func({}) -> ({}), expected func({}) -> ({})",
                params.iter().map(wit_type).collect::<Vec<_>>().join(", "),
                results.iter().map(wit_type).collect::<Vec<_>>().join(", "),
                self.params
                    .iter()
                    .map(Shape::describe)
                    .collect::<Vec<_>>()
                    .join(", "),
                self.results
                    .iter()
                    .map(Shape::describe)
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        })
    }
}

// ---- the types of weir:workflow/types@0.1.0 ----

fn string() -> Shape {
    Shape::Exact(Type::String)
}

pub(crate) fn execution_id() -> Shape {
    Shape::Record(vec![("id", string())])
}

pub(crate) fn delay_id() -> Shape {
    Shape::Record(vec![("id", string())])
}

pub(crate) fn datetime() -> Shape {
    Shape::Record(vec![
        ("seconds", Shape::Exact(Type::U64)),
        ("nanoseconds", Shape::Exact(Type::U32)),
    ])
}

fn duration() -> Shape {
    Shape::Variant(vec![
        ("milliseconds", Some(Shape::Exact(Type::U64))),
        ("seconds", Some(Shape::Exact(Type::U64))),
        ("minutes", Some(Shape::Exact(Type::U32))),
        ("hours", Some(Shape::Exact(Type::U32))),
        ("days", Some(Shape::Exact(Type::U32))),
    ])
}

pub(crate) fn schedule_at() -> Shape {
    Shape::Variant(vec![
        ("now", None),
        ("at", Some(datetime())),
        ("in", Some(duration())),
    ])
}

pub(crate) fn log_level() -> Shape {
    Shape::Enum(vec!["trace", "debug", "info", "warn", "error"])
}

pub(crate) fn event_request_id() -> Shape {
    Shape::Record(vec![("id", string())])
}

pub(crate) fn received_event() -> Shape {
    Shape::Record(vec![("event-id", string()), ("payload", string())])
}

fn response_id() -> Shape {
    Shape::Variant(vec![
        ("execution-id", Some(execution_id())),
        ("delay-id", Some(delay_id())),
        ("event-request-id", Some(event_request_id())),
    ])
}

pub(crate) fn response() -> Shape {
    let child_finished = Shape::Record(vec![
        ("id", execution_id()),
        ("function", string()),
        ("outcome", Shape::Result(None, None)),
    ]);
    let delay_outcome = Shape::Variant(vec![("expired", Some(datetime())), ("cancelled", None)]);
    let delay_finished = Shape::Record(vec![("id", delay_id()), ("outcome", delay_outcome)]);
    let event_outcome = Shape::Variant(vec![
        ("received", Some(received_event())),
        ("cancelled", None),
    ]);
    let event_finished = Shape::Record(vec![
        ("id", event_request_id()),
        ("name", string()),
        ("outcome", event_outcome),
    ]);
    Shape::Variant(vec![
        ("child-finished", Some(child_finished)),
        ("delay-finished", Some(delay_finished)),
        ("event-finished", Some(event_finished)),
    ])
}

pub(crate) fn join_next_error() -> Shape {
    Shape::Variant(vec![("all-processed", None)])
}

fn function_mismatch() -> Shape {
    Shape::Record(vec![
        ("specified-function", string()),
        ("actual-function", Shape::Option(Box::new(string()))),
        ("actual-id", response_id()),
    ])
}

pub(crate) fn await_next_error() -> Shape {
    Shape::Variant(vec![
        ("all-processed", None),
        ("function-mismatch", Some(function_mismatch())),
    ])
}

pub(crate) fn get_error() -> Shape {
    Shape::Variant(vec![
        ("not-found", None),
        ("function-mismatch", Some(function_mismatch())),
    ])
}

pub(crate) fn stub_error() -> Shape {
    Shape::Variant(vec![("conflict", None), ("not-found", None)])
}

pub(crate) fn join_set_create_error() -> Shape {
    Shape::Variant(vec![("conflict", None), ("invalid-name", Some(string()))])
}

pub(crate) fn result(ok: Option<Shape>, err: Option<Shape>) -> Shape {
    Shape::Result(ok.map(Box::new), err.map(Box::new))
}
