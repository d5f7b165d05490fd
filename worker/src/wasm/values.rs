//! Conversions between JSON (how params and results travel; `docs/design/json-mapping.md`, "JSON mapping of
//! WIT values") and component-model values ([`Val`]), always driven by the WIT type ([`Type`]) of the function concerned, plus
//! a WIT-syntax printer for types used in error messages and typed values.
//!
//! JSON encoding of WIT values (stable: it is what is stored in histories and sent on topics):
//!
//! | WIT | JSON |
//! | --- | --- |
//! | `bool`, integers, `f32`/`f64` | boolean / number (integers range-checked; NaN and infinities are not representable) |
//! | `char`, `string` | string (a `char` is a one-character string) |
//! | `list<T>`, `tuple<..>` | array |
//! | `record` | object keyed by the WIT field names (kebab-case); a missing `option` field is `none` |
//! | `variant` | `"case"` without payload, `{"case": payload}` with one |
//! | `enum` | `"case"` |
//! | `option<T>` | `null` for `none`, the value for `some`; when `T` is itself an option, `some(x)` is `{"some": x}` |
//! | `result<T, E>` | `{"ok": v}` / `{"err": v}` (`v` is `null` when that side has no type) |
//! | `flags` | array of the names that are set |
//! | `map<K, V>` | array of `[key, value]` pairs |
//!
//! Handles (`own`, `borrow`), `future`, `stream` and `error-context` have no JSON form: a
//! function using them fails to load (see `registry.rs`).
//!
//! An exported function's `result<T, E>` becomes the execution's result: `ok(v)` →
//! [`ExecutionResult::Ok`] with `v` in JSON (`null` without `T`), `err(e)` likewise.

use std::fmt::Write as _;

use serde_json::{Map, Number, Value};
use wasmtime::component::Val;
use wasmtime::component::types::{ComponentFunc, Type};

use crate::model::{ExecutionError, ExecutionResult};

/// A JSON value that does not fit a WIT type; `path` locates the offending part
/// (`.items[2].sku`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at `{path}`: expected {expected}, got {got}")]
pub struct ConversionError {
    pub path: String,
    pub expected: String,
    pub got: String,
}

/// Parameters that do not type-check against a function's WIT signature.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error("params of {function} must be a JSON array, got {got}")]
    NotAnArray { function: String, got: String },
    #[error("{function} takes {expected} parameter(s), got {got}")]
    Arity {
        function: String,
        expected: usize,
        got: usize,
    },
    #[error("{function}: parameter `{name}` (#{position}) expected type {expected}: {source}")]
    Type {
        function: String,
        name: String,
        /// 1-based.
        position: usize,
        expected: String,
        source: ConversionError,
    },
}

/// A value together with its WIT type: how results are presented to callers and tools.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TypedValue {
    /// WIT syntax, e.g. `result<record { id: string }, string>`.
    pub wit_type: String,
    pub value: Value,
}

// ---------------------------------------------------------------- WIT syntax

/// The WIT spelling of a type (structural: type names are not known to wasmtime).
pub fn wit_type(ty: &Type) -> String {
    let mut s = String::new();
    write_type(&mut s, ty);
    s
}

fn write_type(s: &mut String, ty: &Type) {
    match ty {
        Type::Bool => s.push_str("bool"),
        Type::S8 => s.push_str("s8"),
        Type::U8 => s.push_str("u8"),
        Type::S16 => s.push_str("s16"),
        Type::U16 => s.push_str("u16"),
        Type::S32 => s.push_str("s32"),
        Type::U32 => s.push_str("u32"),
        Type::S64 => s.push_str("s64"),
        Type::U64 => s.push_str("u64"),
        Type::Float32 => s.push_str("f32"),
        Type::Float64 => s.push_str("f64"),
        Type::Char => s.push_str("char"),
        Type::String => s.push_str("string"),
        Type::List(l) => {
            s.push_str("list<");
            write_type(s, &l.ty());
            s.push('>');
        }
        Type::FixedLengthList(l) => {
            s.push_str("list<");
            write_type(s, &l.ty());
            let _ = write!(s, ", {}>", l.len());
        }
        Type::Map(m) => {
            s.push_str("map<");
            write_type(s, &m.key());
            s.push_str(", ");
            write_type(s, &m.value());
            s.push('>');
        }
        Type::Record(r) => {
            s.push_str("record { ");
            for (i, f) in r.fields().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                let _ = write!(s, "{}: ", f.name);
                write_type(s, &f.ty);
            }
            s.push_str(" }");
        }
        Type::Tuple(t) => {
            s.push_str("tuple<");
            for (i, t) in t.types().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                write_type(s, &t);
            }
            s.push('>');
        }
        Type::Variant(v) => {
            s.push_str("variant { ");
            for (i, c) in v.cases().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                s.push_str(c.name);
                if let Some(t) = &c.ty {
                    s.push('(');
                    write_type(s, t);
                    s.push(')');
                }
            }
            s.push_str(" }");
        }
        Type::Enum(e) => {
            let _ = write!(s, "enum {{ {} }}", e.names().collect::<Vec<_>>().join(", "));
        }
        Type::Flags(f) => {
            let _ = write!(
                s,
                "flags {{ {} }}",
                f.names().collect::<Vec<_>>().join(", ")
            );
        }
        Type::Option(o) => {
            s.push_str("option<");
            write_type(s, &o.ty());
            s.push('>');
        }
        Type::Result(r) => match (r.ok(), r.err()) {
            (None, None) => s.push_str("result"),
            (Some(ok), None) => {
                s.push_str("result<");
                write_type(s, &ok);
                s.push('>');
            }
            (None, Some(err)) => {
                s.push_str("result<_, ");
                write_type(s, &err);
                s.push('>');
            }
            (Some(ok), Some(err)) => {
                s.push_str("result<");
                write_type(s, &ok);
                s.push_str(", ");
                write_type(s, &err);
                s.push('>');
            }
        },
        Type::Own(_) => s.push_str("own<resource>"),
        Type::Borrow(_) => s.push_str("borrow<resource>"),
        Type::Future(_) => s.push_str("future"),
        Type::Stream(_) => s.push_str("stream"),
        Type::ErrorContext => s.push_str("error-context"),
    }
}

/// The WIT signature of a function, for messages.
pub fn wit_signature(name: &str, func: &ComponentFunc) -> String {
    let params: Vec<String> = func
        .params()
        .map(|(n, t)| format!("{n}: {}", wit_type(&t)))
        .collect();
    let results: Vec<String> = func.results().map(|t| wit_type(&t)).collect();
    if results.is_empty() {
        format!("{name}: func({})", params.join(", "))
    } else {
        format!(
            "{name}: func({}) -> {}",
            params.join(", "),
            results.join(", ")
        )
    }
}

/// Whether every value of `ty` has a JSON form (no handles, futures, streams).
pub fn is_json_convertible(ty: &Type) -> bool {
    match ty {
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            false
        }
        Type::List(l) => is_json_convertible(&l.ty()),
        Type::FixedLengthList(l) => is_json_convertible(&l.ty()),
        Type::Map(m) => is_json_convertible(&m.key()) && is_json_convertible(&m.value()),
        Type::Record(r) => r.fields().all(|f| is_json_convertible(&f.ty)),
        Type::Tuple(t) => t.types().all(|t| is_json_convertible(&t)),
        Type::Variant(v) => v
            .cases()
            .all(|c| c.ty.as_ref().is_none_or(is_json_convertible)),
        Type::Option(o) => is_json_convertible(&o.ty()),
        Type::Result(r) => {
            r.ok().as_ref().is_none_or(is_json_convertible)
                && r.err().as_ref().is_none_or(is_json_convertible)
        }
        _ => true,
    }
}

// ---------------------------------------------------------------- JSON -> Val

fn describe(v: &Value) -> String {
    let text = v.to_string();
    if text.len() > 80 {
        let mut end = 80;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    } else {
        text
    }
}

/// Converts `value` to a [`Val`] of type `ty`.
pub fn json_to_val(value: &Value, ty: &Type) -> Result<Val, ConversionError> {
    to_val(value, ty, &mut String::new())
}

fn mismatch(path: &str, ty: &Type, value: &Value) -> ConversionError {
    ConversionError {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.into()
        },
        expected: wit_type(ty),
        got: describe(value),
    }
}

fn int<T: TryFrom<i128>>(value: &Value, ty: &Type, path: &str) -> Result<T, ConversionError> {
    let n = match value {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    };
    n.and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| mismatch(path, ty, value))
}

fn to_val(value: &Value, ty: &Type, path: &mut String) -> Result<Val, ConversionError> {
    let len = path.len();
    let result = to_val_inner(value, ty, path);
    path.truncate(len);
    result
}

fn to_val_inner(value: &Value, ty: &Type, path: &mut String) -> Result<Val, ConversionError> {
    let err = |path: &String| mismatch(path, ty, value);
    Ok(match ty {
        Type::Bool => Val::Bool(value.as_bool().ok_or_else(|| err(path))?),
        Type::S8 => Val::S8(int(value, ty, path)?),
        Type::U8 => Val::U8(int(value, ty, path)?),
        Type::S16 => Val::S16(int(value, ty, path)?),
        Type::U16 => Val::U16(int(value, ty, path)?),
        Type::S32 => Val::S32(int(value, ty, path)?),
        Type::U32 => Val::U32(int(value, ty, path)?),
        Type::S64 => Val::S64(int(value, ty, path)?),
        Type::U64 => Val::U64(int(value, ty, path)?),
        // JSON numbers are f64; f32 loses precision by design of the type.
        Type::Float32 => Val::Float32(value.as_f64().ok_or_else(|| err(path))? as f32),
        Type::Float64 => Val::Float64(value.as_f64().ok_or_else(|| err(path))?),
        Type::Char => {
            let s = value.as_str().ok_or_else(|| err(path))?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => return Err(err(path)),
            }
        }
        Type::String => Val::String(value.as_str().ok_or_else(|| err(path))?.to_owned()),
        Type::List(l) => {
            let items = value.as_array().ok_or_else(|| err(path))?;
            let elem = l.ty();
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                out.push(to_val(item, &elem, path)?);
                path.truncate(len);
            }
            Val::List(out)
        }
        Type::FixedLengthList(l) => {
            let items = value.as_array().ok_or_else(|| err(path))?;
            if items.len() != l.len() as usize {
                return Err(err(path));
            }
            let elem = l.ty();
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                out.push(to_val(item, &elem, path)?);
                path.truncate(len);
            }
            Val::FixedLengthList(out)
        }
        Type::Map(m) => {
            let items = value.as_array().ok_or_else(|| err(path))?;
            let (kt, vt) = (m.key(), m.value());
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let pair = item
                    .as_array()
                    .filter(|p| p.len() == 2)
                    .ok_or_else(|| err(path))?;
                let len = path.len();
                let _ = write!(path, "[{i}]");
                out.push((to_val(&pair[0], &kt, path)?, to_val(&pair[1], &vt, path)?));
                path.truncate(len);
            }
            Val::Map(out)
        }
        Type::Record(r) => {
            let obj = value.as_object().ok_or_else(|| err(path))?;
            let mut out = Vec::new();
            for field in r.fields() {
                let len = path.len();
                let _ = write!(path, ".{}", field.name);
                let v = match (obj.get(field.name), &field.ty) {
                    (Some(v), ty) => to_val(v, ty, path)?,
                    (None, Type::Option(_)) => Val::Option(None),
                    (None, ty) => {
                        return Err(ConversionError {
                            path: path.clone(),
                            expected: wit_type(ty),
                            got: "nothing (missing field)".into(),
                        });
                    }
                };
                path.truncate(len);
                out.push((field.name.to_owned(), v));
            }
            if let Some(extra) = obj
                .keys()
                .find(|k| !r.fields().any(|f| f.name == k.as_str()))
            {
                return Err(ConversionError {
                    path: format!("{path}.{extra}"),
                    expected: format!("no such field in {}", wit_type(ty)),
                    got: describe(&obj[extra]),
                });
            }
            Val::Record(out)
        }
        Type::Tuple(t) => {
            let items = value.as_array().ok_or_else(|| err(path))?;
            if items.len() != t.types().len() {
                return Err(err(path));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, (item, ty)) in items.iter().zip(t.types()).enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                out.push(to_val(item, &ty, path)?);
                path.truncate(len);
            }
            Val::Tuple(out)
        }
        Type::Variant(v) => {
            let (name, payload) = case_of(value).ok_or_else(|| err(path))?;
            let case = v
                .cases()
                .find(|c| c.name == name)
                .ok_or_else(|| err(path))?;
            let payload = match (&case.ty, payload) {
                (None, None | Some(Value::Null)) => None,
                (Some(ty), Some(p)) => {
                    let len = path.len();
                    let _ = write!(path, ".{name}");
                    let v = to_val(p, ty, path)?;
                    path.truncate(len);
                    Some(Box::new(v))
                }
                _ => return Err(err(path)),
            };
            Val::Variant(name.to_owned(), payload)
        }
        Type::Enum(e) => {
            let name = value.as_str().ok_or_else(|| err(path))?;
            if !e.names().any(|n| n == name) {
                return Err(err(path));
            }
            Val::Enum(name.to_owned())
        }
        Type::Flags(f) => {
            let items = value.as_array().ok_or_else(|| err(path))?;
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let name = item.as_str().ok_or_else(|| err(path))?;
                if !f.names().any(|n| n == name) {
                    return Err(err(path));
                }
                out.push(name.to_owned());
            }
            Val::Flags(out)
        }
        Type::Option(o) => {
            let inner = o.ty();
            match value {
                Value::Null => Val::Option(None),
                v if matches!(inner, Type::Option(_)) => {
                    let some = v
                        .as_object()
                        .filter(|m| m.len() == 1)
                        .and_then(|m| m.get("some"))
                        .ok_or_else(|| err(path))?;
                    Val::Option(Some(Box::new(to_val(some, &inner, path)?)))
                }
                v => Val::Option(Some(Box::new(to_val(v, &inner, path)?))),
            }
        }
        Type::Result(r) => {
            let (name, payload) = case_of(value).ok_or_else(|| err(path))?;
            let side = match name {
                "ok" => r.ok(),
                "err" => r.err(),
                _ => return Err(err(path)),
            };
            let payload = match (side, payload) {
                (None, None | Some(Value::Null)) => None,
                (Some(ty), Some(p)) => {
                    let len = path.len();
                    let _ = write!(path, ".{name}");
                    let v = to_val(p, &ty, path)?;
                    path.truncate(len);
                    Some(Box::new(v))
                }
                _ => return Err(err(path)),
            };
            Val::Result(if name == "ok" {
                Ok(payload)
            } else {
                Err(payload)
            })
        }
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return Err(err(path));
        }
    })
}

/// `"case"` or `{"case": payload}`.
fn case_of(value: &Value) -> Option<(&str, Option<&Value>)> {
    match value {
        Value::String(s) => Some((s, None)),
        Value::Object(m) if m.len() == 1 => m.iter().next().map(|(k, v)| (k.as_str(), Some(v))),
        _ => None,
    }
}

/// Checks and converts a JSON params array against `func`'s parameters.
pub fn params_to_vals(
    function: &str,
    func: &ComponentFunc,
    params: &Value,
) -> Result<Vec<Val>, ParamsError> {
    let items = params.as_array().ok_or_else(|| ParamsError::NotAnArray {
        function: function.to_owned(),
        got: describe(params),
    })?;
    if items.len() != func.params().len() {
        return Err(ParamsError::Arity {
            function: function.to_owned(),
            expected: func.params().len(),
            got: items.len(),
        });
    }
    func.params()
        .zip(items)
        .enumerate()
        .map(|(i, ((name, ty), value))| {
            json_to_val(value, &ty).map_err(|source| ParamsError::Type {
                function: function.to_owned(),
                name: name.to_owned(),
                position: i + 1,
                expected: wit_type(&ty),
                source,
            })
        })
        .collect()
}

// ---------------------------------------------------------------- Val -> JSON

/// Converts a value of type `ty` to JSON.
pub fn val_to_json(val: &Val, ty: &Type) -> Result<Value, ConversionError> {
    let bad = || ConversionError {
        path: ".".into(),
        expected: wit_type(ty),
        got: format!("{val:?}"),
    };
    Ok(match (val, ty) {
        (Val::Bool(b), _) => Value::Bool(*b),
        (Val::S8(n), _) => Value::from(*n),
        (Val::U8(n), _) => Value::from(*n),
        (Val::S16(n), _) => Value::from(*n),
        (Val::U16(n), _) => Value::from(*n),
        (Val::S32(n), _) => Value::from(*n),
        (Val::U32(n), _) => Value::from(*n),
        (Val::S64(n), _) => Value::from(*n),
        (Val::U64(n), _) => Value::from(*n),
        (Val::Float32(f), _) => Value::Number(Number::from_f64(f64::from(*f)).ok_or_else(bad)?),
        (Val::Float64(f), _) => Value::Number(Number::from_f64(*f).ok_or_else(bad)?),
        (Val::Char(c), _) => Value::String(c.to_string()),
        (Val::String(s), _) => Value::String(s.clone()),
        (Val::List(items), Type::List(l)) => {
            let t = l.ty();
            Value::Array(
                items
                    .iter()
                    .map(|v| val_to_json(v, &t))
                    .collect::<Result<_, _>>()?,
            )
        }
        (Val::FixedLengthList(items), Type::FixedLengthList(l)) => {
            let t = l.ty();
            Value::Array(
                items
                    .iter()
                    .map(|v| val_to_json(v, &t))
                    .collect::<Result<_, _>>()?,
            )
        }
        (Val::Map(pairs), Type::Map(m)) => {
            let (kt, vt) = (m.key(), m.value());
            Value::Array(
                pairs
                    .iter()
                    .map(|(k, v)| {
                        Ok(Value::Array(vec![
                            val_to_json(k, &kt)?,
                            val_to_json(v, &vt)?,
                        ]))
                    })
                    .collect::<Result<_, ConversionError>>()?,
            )
        }
        (Val::Record(fields), Type::Record(r)) => {
            let mut obj = Map::new();
            for ((name, v), field) in fields.iter().zip(r.fields()) {
                obj.insert(name.clone(), val_to_json(v, &field.ty)?);
            }
            Value::Object(obj)
        }
        (Val::Tuple(items), Type::Tuple(t)) => Value::Array(
            items
                .iter()
                .zip(t.types())
                .map(|(v, t)| val_to_json(v, &t))
                .collect::<Result<_, _>>()?,
        ),
        (Val::Variant(name, payload), Type::Variant(v)) => {
            let case = v.cases().find(|c| c.name == name).ok_or_else(bad)?;
            match (payload, &case.ty) {
                (Some(p), Some(t)) => {
                    let mut obj = Map::new();
                    obj.insert(name.clone(), val_to_json(p, t)?);
                    Value::Object(obj)
                }
                (None, None) => Value::String(name.clone()),
                _ => return Err(bad()),
            }
        }
        (Val::Enum(name), _) => Value::String(name.clone()),
        (Val::Flags(names), _) => Value::Array(names.iter().cloned().map(Value::String).collect()),
        (Val::Option(None), _) => Value::Null,
        (Val::Option(Some(v)), Type::Option(o)) => {
            let inner = o.ty();
            let json = val_to_json(v, &inner)?;
            if matches!(inner, Type::Option(_)) {
                let mut obj = Map::new();
                obj.insert("some".into(), json);
                Value::Object(obj)
            } else {
                json
            }
        }
        (Val::Result(r), Type::Result(rt)) => {
            let (name, payload, side) = match r {
                Ok(p) => ("ok", p, rt.ok()),
                Err(p) => ("err", p, rt.err()),
            };
            let json = match (payload, side) {
                (Some(p), Some(t)) => val_to_json(p, &t)?,
                (None, None) => Value::Null,
                _ => return Err(bad()),
            };
            let mut obj = Map::new();
            obj.insert(name.into(), json);
            Value::Object(obj)
        }
        _ => return Err(bad()),
    })
}

/// An exported function's return value (a WIT `result`) as the execution's result.
pub fn return_to_result(val: &Val, ty: &Type) -> Result<ExecutionResult, ConversionError> {
    let (Val::Result(r), Type::Result(rt)) = (val, ty) else {
        return Err(ConversionError {
            path: ".".into(),
            expected: "result<..>".into(),
            got: wit_type(ty),
        });
    };
    Ok(match r {
        Ok(p) => ExecutionResult::Ok(side_to_json(p.as_deref(), rt.ok())?),
        Err(p) => ExecutionResult::Err(side_to_json(p.as_deref(), rt.err())?),
    })
}

fn side_to_json(payload: Option<&Val>, ty: Option<Type>) -> Result<Value, ConversionError> {
    match (payload, ty) {
        (Some(p), Some(t)) => val_to_json(p, &t),
        _ => Ok(Value::Null),
    }
}

/// Why a child's result could not be turned into the caller's `R`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProjectionError {
    /// The child's value does not fit the caller's type (the registry changed in between).
    #[error("the child's result does not fit the caller's type: {0}")]
    Conversion(#[from] ConversionError),
    /// Rule 5 of schemas/wit/README.md §4: the caller's error type cannot carry an execution
    /// error.
    #[error(
        "the caller's error type {err_type} cannot represent the child's execution error {error}"
    )]
    Unrepresentable { err_type: String, error: String },
}

/// A child's [`ExecutionResult`] as a value of the caller's `R` (a `result<T, E>`), with the
/// projection of execution errors of schemas/wit/README.md §4.
pub fn result_to_val(result: &ExecutionResult, ty: &Type) -> Result<Val, ProjectionError> {
    let Type::Result(rt) = ty else {
        return Err(ConversionError {
            path: ".".into(),
            expected: "result<..>".into(),
            got: wit_type(ty),
        }
        .into());
    };
    let side = |value: &Value, t: Option<Type>| -> Result<Option<Box<Val>>, ProjectionError> {
        Ok(match t {
            Some(t) => Some(Box::new(json_to_val(value, &t)?)),
            None => None,
        })
    };
    Ok(Val::Result(match result {
        ExecutionResult::Ok(v) => Ok(side(v, rt.ok())?),
        ExecutionResult::Err(v) => Err(side(v, rt.err())?),
        ExecutionResult::ExecutionError(e) => Err(project_error(e, rt.err())?),
    }))
}

fn project_error(
    error: &ExecutionError,
    err_type: Option<Type>,
) -> Result<Option<Box<Val>>, ProjectionError> {
    let text = format!("{}: {}", error.kind, error.reason);
    let unrepresentable = |t: &Type| ProjectionError::Unrepresentable {
        err_type: wit_type(t),
        error: text.clone(),
    };
    Ok(match err_type {
        None => None,
        Some(Type::String) => Some(Box::new(Val::String(text.clone()))),
        Some(Type::Variant(v)) => {
            let case = v.cases().find(|c| c.name == "execution-failed");
            match case.map(|c| c.ty) {
                Some(None) => Some(Box::new(Val::Variant("execution-failed".into(), None))),
                Some(Some(Type::String)) => Some(Box::new(Val::Variant(
                    "execution-failed".into(),
                    Some(Box::new(Val::String(text.clone()))),
                ))),
                _ => return Err(unrepresentable(&Type::Variant(v))),
            }
        }
        Some(Type::Enum(e)) if e.names().any(|n| n == "execution-failed") => {
            Some(Box::new(Val::Enum("execution-failed".into())))
        }
        Some(t) => return Err(unrepresentable(&t)),
    })
}

/// Whether an execution error of a child can be projected into `err_type` (rules 1–4).
pub fn can_project_errors(result_ty: &Type) -> bool {
    let Type::Result(rt) = result_ty else {
        return false;
    };
    match rt.err() {
        None | Some(Type::String) => true,
        Some(Type::Variant(v)) => v
            .cases()
            .any(|c| c.name == "execution-failed" && matches!(c.ty, None | Some(Type::String))),
        Some(Type::Enum(e)) => e.names().any(|n| n == "execution-failed"),
        Some(_) => false,
    }
}
